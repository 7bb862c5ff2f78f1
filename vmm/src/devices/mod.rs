//! The machine's devices and the port bus that routes exits to them.
//!
//! Every device is a plain serializable state machine driven synchronously
//! from the vCPU thread; none has a thread or a host timer. Time enters only
//! as the `now` argument, and interrupts leave only through the PIC.

pub mod hypercall;
pub mod pic;
pub mod pit;
pub mod rtc;
pub mod serial;
pub mod virtio;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::clock::Vtime;
use crate::memory::GuestRam;
use hypercall::{Effect, GuestError, Hypercall};
use pic::PicPair;
use pit::Pit;
use rtc::Rtc;
use serial::Serial;
use virtio::Virtio;

/// What happens on an access to a port or address no device claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum UnclaimedPolicy {
    /// End the run: the guest is a test program that must know its machine.
    Strict,
    /// Reads return all ones, writes are dropped, both are counted: what an
    /// operating system probing for absent legacy hardware expects.
    Lenient,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BusStats {
    pub unclaimed_reads: u64,
    pub unclaimed_writes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Devices {
    pub pic: PicPair,
    pub pit: Pit,
    pub rtc: Rtc,
    pub serial: Serial,
    pub hc: Hypercall,
    pub virtio: Virtio,
    pub policy: UnclaimedPolicy,
    pub stats: BusStats,
}

impl Devices {
    /// The devices of a machine with `ram` bytes of RAM; with `perturb`,
    /// the alarm's timing is perturbed from the seed (see
    /// `Hypercall::with_alarm_jitter`).
    pub fn new(seed: u64, epoch: u64, ram: usize, policy: UnclaimedPolicy, virtio: Virtio, perturb: bool) -> Devices {
        let hc = Hypercall::new(seed, ram);
        Devices {
            pic: PicPair::default(),
            pit: Pit::default(),
            rtc: Rtc::new(epoch),
            serial: Serial::default(),
            hc: if perturb { hc.with_alarm_jitter(seed) } else { hc },
            virtio,
            policy,
            stats: BusStats::default(),
        }
    }

    /// An `OUT` of `size`-byte units (`data.len() / size` of them, more than
    /// one for `rep outs`).
    pub fn pio_write(&mut self, port: u16, size: usize, data: &[u8], now: Vtime) -> Result<Option<Effect>, GuestError> {
        if Hypercall::claims(port) {
            if port == hvsim_abi::hc::DATA {
                return self.hc.pio_write(port, data, now);
            }
            let mut effect = None;
            for unit in data.chunks(size.max(1)) {
                if let Some(e) = self.hc.pio_write(port, unit, now)? {
                    // A later unit of the same `rep outs` cannot undo an
                    // exit or a message; keep the first effect.
                    effect.get_or_insert(e);
                }
            }
            return Ok(effect);
        }
        // Byte-wide devices: a wide access covers consecutive ports; a string
        // access repeats on the same port.
        for unit in data.chunks(size.max(1)) {
            for (i, &byte) in unit.iter().enumerate() {
                self.write_byte(port.wrapping_add(i as u16), byte, now)?;
            }
        }
        Ok(None)
    }

    pub fn pio_read(&mut self, port: u16, size: usize, data: &mut [u8], now: Vtime) -> Result<(), GuestError> {
        if Hypercall::claims(port) {
            if port == hvsim_abi::hc::DATA {
                return self.hc.pio_read(port, data, now);
            }
            for unit in data.chunks_mut(size.max(1)) {
                self.hc.pio_read(port, unit, now)?;
            }
            return Ok(());
        }
        for unit in data.chunks_mut(size.max(1)) {
            for (i, byte) in unit.iter_mut().enumerate() {
                *byte = self.read_byte(port.wrapping_add(i as u16), now)?;
            }
        }
        Ok(())
    }

    fn write_byte(&mut self, port: u16, val: u8, now: Vtime) -> Result<(), GuestError> {
        if PicPair::claims(port) {
            self.pic.pio_write(port, val);
        } else if Pit::claims(port) {
            self.pit.pio_write(port, val, now);
        } else if Rtc::claims(port) {
            self.rtc.pio_write(port, val);
        } else if Serial::claims(port) {
            self.serial.pio_write(port, val, now.nanos());
            self.sync_serial_irq();
        } else {
            self.unclaimed(format_args!("OUT {val:#04x} to unclaimed port {port:#x}"))?;
            self.stats.unclaimed_writes += 1;
        }
        Ok(())
    }

    fn read_byte(&mut self, port: u16, now: Vtime) -> Result<u8, GuestError> {
        Ok(if PicPair::claims(port) {
            self.pic.pio_read(port)
        } else if Pit::claims(port) {
            self.pit.pio_read(port, now)
        } else if Rtc::claims(port) {
            self.rtc.pio_read(port, now)
        } else if Serial::claims(port) {
            let v = self.serial.pio_read(port);
            self.sync_serial_irq();
            v
        } else {
            self.unclaimed(format_args!("IN from unclaimed port {port:#x}"))?;
            self.stats.unclaimed_reads += 1;
            0xFF
        })
    }

    pub fn mmio_read(&mut self, addr: u64, data: &mut [u8]) -> Result<(), GuestError> {
        if self.virtio.claims(addr) {
            self.virtio.mmio_read(addr, data);
            self.sync_virtio_irqs();
            return Ok(());
        }
        self.unclaimed(format_args!("{}-byte read of unclaimed address {addr:#x}", data.len()))?;
        self.stats.unclaimed_reads += 1;
        data.fill(0xFF);
        Ok(())
    }

    pub fn mmio_write(&mut self, addr: u64, data: &[u8], ram: &GuestRam, now: Vtime) -> Result<(), GuestError> {
        if self.virtio.claims(addr) {
            self.virtio.mmio_write(addr, data, ram, now);
            self.sync_virtio_irqs();
            return Ok(());
        }
        self.unclaimed(format_args!("{}-byte write to unclaimed address {addr:#x}", data.len()))?;
        self.stats.unclaimed_writes += 1;
        Ok(())
    }

    fn unclaimed(&self, what: std::fmt::Arguments<'_>) -> Result<(), GuestError> {
        match self.policy {
            UnclaimedPolicy::Strict => Err(GuestError(what.to_string())),
            UnclaimedPolicy::Lenient => Ok(()),
        }
    }

    fn sync_serial_irq(&mut self) {
        let level = self.serial.irq_level();
        self.pic.set_irq(hvsim_abi::irq::COM1, level);
    }

    fn sync_virtio_irqs(&mut self) {
        for (line, level) in self.virtio.irq_levels() {
            self.pic.set_irq(line, level);
        }
    }

    /// Machine events the virtio devices raised (a node's power), to the
    /// guest.
    fn forward_virtio_events(&mut self) {
        let events = self.virtio.take_events();
        for &e in &events {
            self.hc.push_event(e);
        }
        if !events.is_empty() {
            self.pic.pulse_irq(hvsim_abi::irq::EVENT);
        }
    }

    /// Acts on a control message the guest sent at `now` (`control.rs`).
    pub fn control(&mut self, control: &crate::control::Control, now: Vtime) {
        use crate::control::Control;
        match control {
            Control::Draw => return self.hc.announce_draw(),
            Control::Buggify { name, fire } => return self.hc.reach_buggify(name, *fire),
            Control::Clock(want) => return self.hc.answer(self.virtio.clock_answer(*want) as u64),
            Control::ComposerRun(run) => return self.hc.answer(u64::from(self.virtio.schedule.vetoes().starts(*run))),
            Control::ComposerBudget => return self.hc.answer(self.virtio.schedule.composer_budget(now.nanos())),
            Control::ComposerTemplate(among) => return self.hc.answer(self.virtio.schedule.template_among(among)),
            Control::ComposerCommands(among) => return self.hc.answer(self.virtio.schedule.commands_among(among)),
            Control::SetupComplete => self.hc.arm_buggify(),
            Control::PauseFaults(_) | Control::ResumeFaults | Control::CustomDone => {}
        }
        if *control == Control::SetupComplete && self.hc.take_setup_announcement() {
            self.hc.push_event(hvsim_abi::hc::event::word(hvsim_abi::hc::event::SETUP, 0));
            self.pic.pulse_irq(hvsim_abi::irq::EVENT);
        }
        self.virtio.control(control, now);
        self.sync_virtio_irqs();
        self.forward_virtio_events();
    }

    /// The earliest future timer deadline, if any timer is armed (device
    /// completions and frames in flight count as timers).
    pub fn next_deadline(&self) -> Option<Vtime> {
        [self.pit.deadline(), self.hc.deadline(), self.virtio.deadline()].into_iter().flatten().min()
    }

    /// Fires every timer due at `now` into its IRQ line.
    pub fn fire_timers(&mut self, now: Vtime, ram: &GuestRam) {
        if self.pit.fire(now) {
            self.pic.pulse_irq(hvsim_abi::irq::PIT);
        }
        if self.hc.fire(now) {
            self.pic.pulse_irq(hvsim_abi::irq::ALARM);
        }
        if self.virtio.deadline().is_some_and(|t| t <= now) {
            self.virtio.fire(now, ram);
            self.sync_virtio_irqs();
            self.forward_virtio_events();
        }
        // A deadline left in the past would make a halted guest's wait spin
        // in place: a bug in hvsim, better a loud stop than a silent hang.
        assert!(self.next_deadline().is_none_or(|t| t > now), "a timer is still due after firing at {now:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(policy: UnclaimedPolicy) -> Devices {
        let none = Virtio::new(&Default::default(), &Default::default(), 1).unwrap();
        Devices::new(1, rtc::DEFAULT_EPOCH, 1 << 20, policy, none, false)
    }

    #[test]
    fn strict_policy_rejects_unclaimed_ports_lenient_counts_them() {
        let mut d = devices(UnclaimedPolicy::Strict);
        assert!(d.pio_write(0x80, 1, &[0], Vtime(0)).is_err());
        let mut d = devices(UnclaimedPolicy::Lenient);
        let mut b = [0; 2];
        d.pio_read(0x2F8, 2, &mut b, Vtime(0)).unwrap();
        assert_eq!(b, [0xFF, 0xFF]);
        assert_eq!(d.stats.unclaimed_reads, 2);
    }

    #[test]
    fn string_output_repeats_on_one_port() {
        let mut d = devices(UnclaimedPolicy::Strict);
        d.pio_write(hvsim_abi::port::COM1, 1, b"abc", Vtime(0)).unwrap();
        assert_eq!(&d.serial.console()[..], b"abc");
    }

    #[test]
    fn serial_interrupt_reaches_the_pic() {
        let mut d = devices(UnclaimedPolicy::Strict);
        for (p, v) in [(0x20, 0x11), (0x21, 0x20), (0x21, 0x04), (0x21, 0x01), (0x21, 0x00)] {
            d.pio_write(p, 1, &[v], Vtime(0)).unwrap();
        }
        d.pio_write(hvsim_abi::port::COM1 + 1, 1, &[0x02], Vtime(0)).unwrap();
        assert!(d.pic.has_interrupt());
        assert_eq!(d.pic.acknowledge(), 0x24);
    }
}
