//! The 8254 programmable interval timer and port B (0x61), on the virtual clock.
//!
//! Counters are not stepped: each channel remembers when its count was loaded,
//! and every read or deadline is computed from virtual time. Channel 0 drives
//! IRQ 0 in one-shot (modes 0, 1, 4, 5) or periodic (modes 2, 3) fashion;
//! channel 2's gate and output are wired to port B as on a PC (Linux uses them
//! to calibrate). If virtual time jumps over several periods, IRQ 0 fires once:
//! an edge-triggered line cannot carry more.

use serde::{Deserialize, Serialize};

use crate::clock::{convert, Vtime};

/// Input clock of the 8254, in Hz.
pub const PIT_HZ: u64 = 1_193_182;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
enum Access {
    /// Latch command (never a channel's access mode).
    #[default]
    Latch,
    Lsb,
    Msb,
    /// Low byte, then high byte.
    Word,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Channel {
    mode: u8,
    bcd: bool,
    access: Access,
    /// Reload value; 0x10000 stands for a programmed 0.
    count: u32,
    /// When the current count was loaded (or the gate last triggered it).
    load_time: Vtime,
    /// Whether a count has been written since the mode was set.
    armed: bool,
    gate: bool,
    /// Low byte of a `Word` write in progress.
    write_lsb: Option<u8>,
    /// Whether the next `Word` read returns the high byte.
    read_msb: bool,
    latched_count: Option<u16>,
    /// High byte still to be read from a latched count.
    latched_msb: Option<u8>,
    latched_status: Option<u8>,
}

impl Channel {
    fn elapsed_ticks(&self, now: Vtime) -> u64 {
        convert::ticks_in(now.0.saturating_sub(self.load_time.0), PIT_HZ)
    }

    fn counter(&self, now: Vtime) -> u16 {
        if !self.armed {
            return 0;
        }
        let d = self.elapsed_ticks(now);
        let c = u64::from(self.count);
        let v = match self.mode {
            2 => c - d % c,
            3 => c - (2 * d) % c,
            _ => c.wrapping_sub(d) & 0xFFFF,
        };
        v as u16 // a count of 0x10000 reads as 0, as on hardware
    }

    fn output(&self, now: Vtime) -> bool {
        if !self.armed {
            return false;
        }
        let d = self.elapsed_ticks(now);
        let c = u64::from(self.count);
        match self.mode {
            0 => d >= c,
            1 => d < c,
            2 => d % c != c - 1,
            3 => d % c < c.div_ceil(2),
            _ => d != c,
        }
    }

    /// Tick (since load) of the next IRQ edge strictly after `after_ticks`.
    fn next_irq_tick(&self, after_ticks: u64) -> Option<u64> {
        if !self.armed || !self.gate {
            return None;
        }
        let c = u64::from(self.count);
        match self.mode {
            2 | 3 => Some((after_ticks / c + 1) * c),
            _ => (after_ticks < c).then_some(c),
        }
    }

    fn status(&self, now: Vtime) -> u8 {
        let access = match self.access {
            Access::Latch => 0,
            Access::Lsb => 1,
            Access::Msb => 2,
            Access::Word => 3,
        };
        (u8::from(self.output(now)) << 7)
            | (u8::from(!self.armed) << 6)
            | (access << 4)
            | (self.mode << 1)
            | u8::from(self.bcd)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pit {
    channels: [Channel; 3],
    /// Virtual time of channel 0's next IRQ edge, if one is due.
    irq_deadline: Option<Vtime>,
    /// Port B bits the guest controls (bit 0: channel 2 gate, bit 1: speaker).
    port_b: u8,
}

impl Default for Pit {
    fn default() -> Self {
        let mut channels: [Channel; 3] = Default::default();
        // Channels 0 and 1 are gated on permanently on a PC.
        channels[0].gate = true;
        channels[1].gate = true;
        Pit { channels, irq_deadline: None, port_b: 0 }
    }
}

impl Pit {
    /// The next time [`Pit::fire`] has an IRQ 0 edge to deliver.
    pub fn deadline(&self) -> Option<Vtime> {
        self.irq_deadline
    }

    /// Called whenever virtual time has moved: returns whether IRQ 0 fired.
    pub fn fire(&mut self, now: Vtime) -> bool {
        match self.irq_deadline {
            Some(t) if t <= now => {
                let ch = &self.channels[0];
                let d = ch.elapsed_ticks(now);
                self.irq_deadline =
                    ch.next_irq_tick(d).map(|tick| Vtime(ch.load_time.0 + convert::ns_for_ticks(tick, PIT_HZ)));
                true
            }
            _ => false,
        }
    }

    fn rearm_irq(&mut self) {
        let ch = &self.channels[0];
        self.irq_deadline = ch.next_irq_tick(0).map(|tick| Vtime(ch.load_time.0 + convert::ns_for_ticks(tick, PIT_HZ)));
    }

    fn load(&mut self, i: usize, value: u16, now: Vtime) {
        let ch = &mut self.channels[i];
        ch.count = if value == 0 { 0x10000 } else { u32::from(value) };
        ch.load_time = now;
        ch.armed = true;
        if i == 0 {
            self.rearm_irq();
        }
    }

    pub fn claims(port: u16) -> bool {
        matches!(port, 0x40..=0x43 | 0x61)
    }

    pub fn pio_write(&mut self, port: u16, val: u8, now: Vtime) {
        match port {
            0x40..=0x42 => {
                let i = usize::from(port - 0x40);
                let ch = &mut self.channels[i];
                let value = match ch.access {
                    Access::Lsb => Some(u16::from(val)),
                    Access::Msb => Some(u16::from(val) << 8),
                    Access::Word => match ch.write_lsb.take() {
                        None => {
                            ch.write_lsb = Some(val);
                            None
                        }
                        Some(lsb) => Some(u16::from(lsb) | (u16::from(val) << 8)),
                    },
                    // Channel never programmed: writes go nowhere.
                    Access::Latch => None,
                };
                if let Some(v) = value {
                    self.load(i, v, now);
                }
            }
            0x43 => self.command(val, now),
            0x61 => {
                let ch = &mut self.channels[2];
                let gate = val & 1 != 0;
                // A rising gate restarts counting in the gate-triggered modes.
                if gate && !ch.gate && matches!(ch.mode, 1 | 2 | 3 | 5) {
                    ch.load_time = now;
                }
                ch.gate = gate;
                self.port_b = val & 0x03;
            }
            _ => unreachable!("port {port:#x} is not a PIT port"),
        }
    }

    fn command(&mut self, val: u8, now: Vtime) {
        let sel = val >> 6;
        if sel == 3 {
            // Read-back: bit 5 clear latches counts, bit 4 clear latches status.
            for i in 0..3 {
                if val & (2 << i) == 0 {
                    continue;
                }
                let ch = &mut self.channels[i];
                if val & 0x20 == 0 && ch.latched_count.is_none() {
                    ch.latched_count = Some(ch.counter(now));
                }
                if val & 0x10 == 0 && ch.latched_status.is_none() {
                    ch.latched_status = Some(ch.status(now));
                }
            }
            return;
        }
        let ch = &mut self.channels[usize::from(sel)];
        let access = match (val >> 4) & 3 {
            0 => {
                if ch.latched_count.is_none() {
                    ch.latched_count = Some(ch.counter(now));
                }
                return;
            }
            1 => Access::Lsb,
            2 => Access::Msb,
            _ => Access::Word,
        };
        ch.access = access;
        ch.mode = match (val >> 1) & 7 {
            m @ 6..=7 => m - 4,
            m => m,
        };
        ch.bcd = val & 1 != 0;
        ch.armed = false;
        ch.write_lsb = None;
        ch.read_msb = false;
        if sel == 0 {
            self.irq_deadline = None;
        }
    }

    pub fn pio_read(&mut self, port: u16, now: Vtime) -> u8 {
        match port {
            0x40..=0x42 => {
                let ch = &mut self.channels[usize::from(port - 0x40)];
                if let Some(s) = ch.latched_status.take() {
                    return s;
                }
                if let Some(msb) = ch.latched_msb.take() {
                    return msb;
                }
                if let Some(c) = ch.latched_count.take() {
                    return match ch.access {
                        Access::Msb => (c >> 8) as u8,
                        Access::Word => {
                            ch.latched_msb = Some((c >> 8) as u8);
                            c as u8
                        }
                        _ => c as u8,
                    };
                }
                let c = ch.counter(now);
                match ch.access {
                    Access::Msb => (c >> 8) as u8,
                    Access::Word => {
                        ch.read_msb = !ch.read_msb;
                        if ch.read_msb {
                            c as u8
                        } else {
                            (c >> 8) as u8
                        }
                    }
                    _ => c as u8,
                }
            }
            0x43 => 0, // write-only
            0x61 => {
                let out2 = self.channels[2].output(now);
                self.port_b | (u8::from(out2) << 5)
            }
            _ => unreachable!("port {port:#x} is not a PIT port"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn program(pit: &mut Pit, ch: u16, mode: u8, count: u16, now: Vtime) {
        pit.pio_write(0x43, ((ch as u8) << 6) | 0x30 | (mode << 1), now);
        pit.pio_write(0x40 + ch, count as u8, now);
        pit.pio_write(0x40 + ch, (count >> 8) as u8, now);
    }

    #[test]
    fn periodic_mode_fires_every_period() {
        let mut pit = Pit::default();
        program(&mut pit, 0, 2, 11932, Vtime(0)); // ~10 ms
        let d1 = pit.deadline().unwrap();
        assert!((d1.0 as i64 - 10 * MS as i64).abs() < 1000, "{d1}");
        assert!(!pit.fire(Vtime(d1.0 - 1)));
        assert!(pit.fire(d1));
        let d2 = pit.deadline().unwrap();
        assert!(d2 > d1);
        assert_eq!(d2.0, convert::ns_for_ticks(2 * 11932, PIT_HZ));
        // Jumping over many periods fires once and schedules strictly later.
        assert!(pit.fire(Vtime(1_000 * MS)));
        assert!(pit.deadline().unwrap() > Vtime(1_000 * MS));
    }

    #[test]
    fn one_shot_mode_fires_once() {
        let mut pit = Pit::default();
        program(&mut pit, 0, 0, 1193, Vtime(5 * MS)); // ~1 ms after load
        let d = pit.deadline().unwrap();
        assert!(d > Vtime(5 * MS) && d < Vtime(7 * MS));
        assert!(pit.fire(d));
        assert_eq!(pit.deadline(), None);
        assert!(!pit.fire(Vtime(100 * MS)));
    }

    #[test]
    fn counter_reads_follow_virtual_time() {
        let mut pit = Pit::default();
        program(&mut pit, 0, 2, 1000, Vtime(0));
        let at = Vtime(convert::ns_for_ticks(250, PIT_HZ));
        pit.pio_write(0x43, 0x00, at); // latch channel 0
        let lo = pit.pio_read(0x40, Vtime(at.0 + 5 * MS));
        let hi = pit.pio_read(0x40, Vtime(at.0 + 5 * MS));
        assert_eq!(u16::from(lo) | u16::from(hi) << 8, 750, "latched value, not the later one");
    }

    #[test]
    fn channel2_output_on_port_b() {
        let mut pit = Pit::default();
        pit.pio_write(0x61, 0x01, Vtime(0)); // gate on, speaker off
        program(&mut pit, 2, 0, 100, Vtime(0));
        assert_eq!(pit.pio_read(0x61, Vtime(0)) & 0x20, 0);
        let done = Vtime(convert::ns_for_ticks(100, PIT_HZ));
        assert_eq!(pit.pio_read(0x61, done) & 0x20, 0x20);
        assert_eq!(pit.pio_read(0x61, done) & 0x03, 0x01);
    }

    #[test]
    fn read_back_status() {
        let mut pit = Pit::default();
        program(&mut pit, 0, 3, 0, Vtime(0));
        pit.pio_write(0x43, 0xE2, Vtime(0)); // read-back status of channel 0
        assert_eq!(pit.pio_read(0x40, Vtime(0)), 0x36 | 0x80);
    }

    #[test]
    fn reprogramming_disarms_until_count_written() {
        let mut pit = Pit::default();
        program(&mut pit, 0, 2, 100, Vtime(0));
        pit.pio_write(0x43, 0x34, Vtime(0));
        assert_eq!(pit.deadline(), None);
    }
}
