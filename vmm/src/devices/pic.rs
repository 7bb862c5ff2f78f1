//! The 8259A programmable interrupt controller pair (master at 0x20, slave at
//! 0xA0 cascaded on master IRQ 2), emulated in userspace.
//!
//! Covers what PC guests use: the ICW1-4 initialisation sequence, masking,
//! specific and non-specific EOI, rotation, auto-EOI, special fully nested
//! mode, polling, IRR/ISR reads and the ELCR edge/level registers. Interrupts
//! reach the vCPU only through [`PicPair::acknowledge`], which the run loop
//! calls at an exit when the guest can take one.

use serde::{Deserialize, Serialize};

/// One 8259A.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pic {
    /// Interrupt request register.
    irr: u8,
    /// In-service register.
    isr: u8,
    /// Interrupt mask register.
    imr: u8,
    /// Input line levels, for edge detection.
    lines: u8,
    /// Edge/level control (1 = level triggered).
    elcr: u8,
    /// Bits of ELCR the guest may set.
    elcr_mask: u8,
    vector_base: u8,
    /// Lowest-priority rotation: IRQ `priority_add` has the highest priority.
    priority_add: u8,
    /// 0 = operational, 1..=3 = waiting for ICW2..ICW4.
    init_state: u8,
    icw4_needed: bool,
    single_mode: bool,
    auto_eoi: bool,
    rotate_on_auto_eoi: bool,
    special_fully_nested: bool,
    special_mask: bool,
    poll: bool,
    read_isr: bool,
}

impl Pic {
    fn new(elcr_mask: u8) -> Pic {
        Pic { elcr_mask, ..Pic::default() }
    }

    /// Priority (0 = highest) of the highest-priority bit in `mask`, 8 if none.
    fn priority(&self, mask: u8) -> u8 {
        if mask == 0 {
            return 8;
        }
        (0..8).find(|p| mask & (1 << ((p + self.priority_add) & 7)) != 0).expect("mask != 0")
    }

    /// The IRQ this chip would deliver now, if any.
    fn pending(&self, is_master: bool) -> Option<u8> {
        let p = self.priority(self.irr & !self.imr);
        if p == 8 {
            return None;
        }
        let mut in_service = self.isr;
        if self.special_mask {
            in_service &= !self.imr;
        }
        // In special fully nested mode the slave's line can interrupt its own
        // service routine, so the cascade input does not block.
        if is_master && self.special_fully_nested {
            in_service &= !(1 << 2);
        }
        (p < self.priority(in_service)).then_some((p + self.priority_add) & 7)
    }

    fn set_line(&mut self, irq: u8, level: bool) {
        let bit = 1 << irq;
        if self.elcr & bit != 0 {
            if level {
                self.irr |= bit;
                self.lines |= bit;
            } else {
                self.irr &= !bit;
                self.lines &= !bit;
            }
        } else if level {
            if self.lines & bit == 0 {
                self.irr |= bit;
            }
            self.lines |= bit;
        } else {
            self.lines &= !bit;
        }
    }

    /// The INTA cycle for `irq`.
    fn intack(&mut self, irq: u8) {
        let bit = 1 << irq;
        if self.auto_eoi {
            if self.rotate_on_auto_eoi {
                self.priority_add = (irq + 1) & 7;
            }
        } else {
            self.isr |= bit;
        }
        if self.elcr & bit == 0 {
            self.irr &= !bit;
        }
    }

    fn write(&mut self, offset: u16, val: u8) {
        if offset == 0 {
            if val & 0x10 != 0 {
                // ICW1: restart initialisation; ELCR survives.
                *self = Pic { elcr: self.elcr, elcr_mask: self.elcr_mask, ..Pic::default() };
                self.init_state = 1;
                self.single_mode = val & 0x02 != 0;
                self.icw4_needed = val & 0x01 != 0;
            } else if val & 0x08 != 0 {
                // OCW3
                if val & 0x04 != 0 {
                    self.poll = true;
                }
                if val & 0x02 != 0 {
                    self.read_isr = val & 0x01 != 0;
                }
                if val & 0x40 != 0 {
                    self.special_mask = val & 0x20 != 0;
                }
            } else {
                // OCW2
                match val >> 5 {
                    0 | 4 => self.rotate_on_auto_eoi = val >> 7 != 0,
                    cmd @ (1 | 5) => {
                        let p = self.priority(self.isr);
                        if p != 8 {
                            let irq = (p + self.priority_add) & 7;
                            self.isr &= !(1 << irq);
                            if cmd == 5 {
                                self.priority_add = (irq + 1) & 7;
                            }
                        }
                    }
                    3 => self.isr &= !(1 << (val & 7)),
                    6 => self.priority_add = ((val & 7) + 1) & 7,
                    7 => {
                        let irq = val & 7;
                        self.isr &= !(1 << irq);
                        self.priority_add = (irq + 1) & 7;
                    }
                    _ => {} // 2: no operation
                }
            }
        } else {
            match self.init_state {
                0 => self.imr = val,
                1 => {
                    self.vector_base = val & 0xF8;
                    self.init_state = match (self.single_mode, self.icw4_needed) {
                        (false, _) => 2,
                        (true, true) => 3,
                        (true, false) => 0,
                    };
                }
                2 => self.init_state = if self.icw4_needed { 3 } else { 0 },
                _ => {
                    self.special_fully_nested = val & 0x10 != 0;
                    self.auto_eoi = val & 0x02 != 0;
                    self.init_state = 0;
                }
            }
        }
    }

    fn read(&mut self, offset: u16, is_master: bool) -> u8 {
        if self.poll {
            self.poll = false;
            return match self.pending(is_master) {
                Some(irq) => {
                    self.intack(irq);
                    0x80 | irq
                }
                None => 0,
            };
        }
        match (offset, self.read_isr) {
            (0, true) => self.isr,
            (0, false) => self.irr,
            _ => self.imr,
        }
    }
}

/// Master and slave, cascaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PicPair {
    master: Pic,
    slave: Pic,
}

impl Default for PicPair {
    fn default() -> Self {
        // IRQs 0, 1, 2 (master) and 8, 13 (slave) are always edge triggered.
        PicPair { master: Pic::new(0xF8), slave: Pic::new(0xDE) }
    }
}

impl PicPair {
    /// Drives legacy IRQ line `irq` (0..16) to `level`.
    pub fn set_irq(&mut self, irq: u8, level: bool) {
        assert!(irq < 16, "no IRQ line {irq} on a PIC pair");
        if irq < 8 {
            self.master.set_line(irq, level);
        } else {
            self.slave.set_line(irq - 8, level);
        }
        self.update_cascade();
    }

    /// A rising then falling edge: one timer tick.
    pub fn pulse_irq(&mut self, irq: u8) {
        self.set_irq(irq, true);
        self.set_irq(irq, false);
    }

    fn update_cascade(&mut self) {
        let slave_int = self.slave.pending(false).is_some();
        self.master.set_line(2, slave_int);
    }

    /// Whether the master's INT output is asserted.
    pub fn has_interrupt(&self) -> bool {
        self.master.pending(true).is_some()
    }

    /// Runs an INTA cycle and returns the vector to inject. Call only when
    /// [`has_interrupt`](Self::has_interrupt); otherwise the 8259 answers with
    /// its spurious vector (IRQ 7), as real hardware does.
    pub fn acknowledge(&mut self) -> u8 {
        let vector = match self.master.pending(true) {
            Some(2) => {
                self.master.intack(2);
                let irq = match self.slave.pending(false) {
                    Some(irq) => {
                        self.slave.intack(irq);
                        irq
                    }
                    None => 7,
                };
                self.slave.vector_base + irq
            }
            Some(irq) => {
                self.master.intack(irq);
                self.master.vector_base + irq
            }
            None => self.master.vector_base + 7,
        };
        self.update_cascade();
        vector
    }

    /// Port access at `port` (0x20/0x21, 0xA0/0xA1, 0x4D0/0x4D1).
    pub fn pio_write(&mut self, port: u16, val: u8) {
        match port {
            0x20 | 0x21 => self.master.write(port - 0x20, val),
            0xA0 | 0xA1 => self.slave.write(port - 0xA0, val),
            0x4D0 => self.master.elcr = val & self.master.elcr_mask,
            0x4D1 => self.slave.elcr = val & self.slave.elcr_mask,
            _ => unreachable!("port {port:#x} is not a PIC port"),
        }
        self.update_cascade();
    }

    pub fn pio_read(&mut self, port: u16) -> u8 {
        let v = match port {
            0x20 | 0x21 => self.master.read(port - 0x20, true),
            0xA0 | 0xA1 => self.slave.read(port - 0xA0, false),
            0x4D0 => self.master.elcr,
            0x4D1 => self.slave.elcr,
            _ => unreachable!("port {port:#x} is not a PIC port"),
        };
        self.update_cascade();
        v
    }

    /// Whether `port` belongs to the PIC pair.
    pub fn claims(port: u16) -> bool {
        matches!(port, 0x20 | 0x21 | 0xA0 | 0xA1 | 0x4D0 | 0x4D1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The initialisation Linux and our raw guests perform: vectors 0x20/0x28.
    fn initialised() -> PicPair {
        let mut p = PicPair::default();
        for (port, v) in [
            (0x20, 0x11),
            (0x21, 0x20),
            (0x21, 0x04),
            (0x21, 0x01),
            (0xA0, 0x11),
            (0xA1, 0x28),
            (0xA1, 0x02),
            (0xA1, 0x01),
            (0x21, 0x00),
            (0xA1, 0x00),
        ] {
            p.pio_write(port, v);
        }
        p
    }

    #[test]
    fn edge_irq_delivers_once_and_needs_eoi() {
        let mut p = initialised();
        p.pulse_irq(0);
        assert!(p.has_interrupt());
        assert_eq!(p.acknowledge(), 0x20);
        assert!(!p.has_interrupt());
        // A second tick while IRQ 0 is in service waits for the EOI.
        p.pulse_irq(0);
        assert!(!p.has_interrupt());
        p.pio_write(0x20, 0x20);
        assert!(p.has_interrupt());
        assert_eq!(p.acknowledge(), 0x20);
    }

    #[test]
    fn slave_irq_cascades_through_irq2() {
        let mut p = initialised();
        p.pulse_irq(8);
        assert!(p.has_interrupt());
        assert_eq!(p.acknowledge(), 0x28);
        // EOI to both chips.
        p.pio_write(0xA0, 0x20);
        p.pio_write(0x20, 0x20);
        p.pio_write(0x20, 0x0B); // OCW3: read ISR
        assert_eq!(p.pio_read(0x20), 0);
    }

    #[test]
    fn priority_and_masking() {
        let mut p = initialised();
        p.pio_write(0x21, 0x01); // mask IRQ 0
        p.pulse_irq(0);
        p.pulse_irq(4);
        assert_eq!(p.acknowledge(), 0x24);
        p.pio_write(0x20, 0x20);
        assert!(!p.has_interrupt());
        p.pio_write(0x21, 0x00);
        assert_eq!(p.acknowledge(), 0x20);
    }

    #[test]
    fn higher_priority_nests_lower_waits() {
        let mut p = initialised();
        p.pulse_irq(4);
        assert_eq!(p.acknowledge(), 0x24);
        p.pulse_irq(0);
        assert_eq!(p.acknowledge(), 0x20, "IRQ 0 preempts IRQ 4");
        p.pulse_irq(6);
        assert!(!p.has_interrupt(), "IRQ 6 waits behind IRQ 4 and 0");
    }

    #[test]
    fn level_triggered_line_stays_pending_until_lowered() {
        let mut p = initialised();
        p.pio_write(0x4D1, 0x20); // IRQ 13 is forced edge, IRQ 13 bit masked off
        p.pio_write(0x4D0, 0x20); // IRQ 5 level
        p.set_irq(5, true);
        assert_eq!(p.acknowledge(), 0x25);
        p.pio_write(0x20, 0x20);
        assert!(p.has_interrupt(), "still asserted");
        p.set_irq(5, false);
        assert!(!p.has_interrupt());
    }

    #[test]
    fn auto_eoi_and_poll() {
        let mut p = PicPair::default();
        for (port, v) in [(0x20, 0x13), (0x21, 0x40), (0x21, 0x03), (0x21, 0x00)] {
            p.pio_write(port, v); // single mode, ICW4 with auto-EOI
        }
        p.pulse_irq(3);
        assert_eq!(p.acknowledge(), 0x43);
        p.pulse_irq(3);
        assert_eq!(p.acknowledge(), 0x43, "auto-EOI leaves nothing in service");
        p.pulse_irq(1);
        p.pio_write(0x20, 0x0C); // OCW3 poll
        assert_eq!(p.pio_read(0x20), 0x81);
    }

    proptest! {
        /// Whatever a guest writes, the PIC never panics and every acknowledged
        /// vector lies in one of the two programmed 8-vector blocks.
        #[test]
        fn arbitrary_port_traffic_is_safe(ops in prop::collection::vec((0u8..7, any::<u8>()), 0..200)) {
            let mut p = initialised();
            let ports = [0x20, 0x21, 0xA0, 0xA1, 0x4D0, 0x4D1];
            for (which, val) in ops {
                match which {
                    6 => { p.pulse_irq(val % 16); }
                    i => {
                        let port = ports[i as usize];
                        if val & 1 == 0 { p.pio_write(port, val); } else { p.pio_read(port); }
                    }
                }
                if p.has_interrupt() {
                    let v = p.acknowledge();
                    let ok = [p.master.vector_base, p.slave.vector_base]
                        .iter().any(|b| (*b..=*b + 7).contains(&v));
                    prop_assert!(ok);
                }
            }
        }
    }
}
