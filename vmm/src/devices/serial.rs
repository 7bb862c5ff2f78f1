//! A 16550A UART at COM1, transmit side captured into the run's console.
//!
//! Transmission completes instantly (the transmitter is always empty), so the
//! only interrupt the guest sees is "transmitter holding register empty"
//! (IRQ 4), which Linux's interrupt-driven tty output relies on. There is no
//! input: a run never depends on a host terminal. Enough of the modem
//! registers and loopback mode is modelled for Linux's probe to find a 16550A.
//!
//! Each console line is stamped with the virtual time of its first byte, so
//! a bug record can put the guest's output on one line with its SDK messages
//! and faults (`explorer/src/record/story.rs`).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::append_log::AppendLog;

/// Console bytes kept per run; beyond this they are counted, not stored.
pub const CONSOLE_LIMIT: usize = 16 << 20;

const IER_RDI: u8 = 0x01;
const IER_THRI: u8 = 0x02;
const IIR_NO_INT: u8 = 0x01;
const IIR_THRI: u8 = 0x02;
const IIR_RDI: u8 = 0x04;
const IIR_FIFO: u8 = 0xC0;
const LSR_DR: u8 = 0x01;
const LSR_THRE: u8 = 0x20;
const LSR_TEMT: u8 = 0x40;
const MCR_LOOP: u8 = 0x10;
const LCR_DLAB: u8 = 0x80;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Serial {
    ier: u8,
    lcr: u8,
    mcr: u8,
    scr: u8,
    dll: u8,
    dlm: u8,
    fifo: bool,
    thr_pending: bool,
    /// A byte looped back in loopback mode, waiting to be read.
    rbr: Option<u8>,
    /// Shared along a line of snapshots, as is its index (`append_log.rs`).
    console: AppendLog<u8>,
    /// Where each line of `console` starts, and the virtual time (ns) of
    /// its first byte: ascending in both. (Empty in snapshots from before
    /// lines were stamped: their lines are then not told.)
    #[serde(default)]
    line_starts: AppendLog<(u64, u64)>,
    dropped: u64,
}

impl Serial {
    pub fn claims(port: u16) -> bool {
        (hvsim_abi::port::COM1..hvsim_abi::port::COM1 + 8).contains(&port)
    }

    /// The console so far (borrowed when it is one part of its log).
    pub fn console(&self) -> Cow<'_, [u8]> {
        self.console_from(0)
    }

    /// The console after its first `from` bytes.
    pub fn console_from(&self, from: usize) -> Cow<'_, [u8]> {
        self.console.slice(from..self.console.len())
    }

    pub fn console_len(&self) -> usize {
        self.console.len()
    }

    /// The console from the start of its `n`th line from the end (an
    /// unfinished last line counts), without copying what comes before.
    pub fn last_lines(&self, n: usize) -> Cow<'_, [u8]> {
        let first = self.line_starts.len().saturating_sub(n);
        self.console_from(self.line_starts.get(first).map_or(0, |&(start, _)| start as usize))
    }

    /// The console's logs, for counting what snapshots share.
    pub fn logs(&self) -> (&AppendLog<u8>, &AppendLog<(u64, u64)>) {
        (&self.console, &self.line_starts)
    }

    /// The console's complete lines from line `first` on (an unfinished
    /// last line waits for its end), each with the virtual time (ns) its
    /// first byte was written. Indexed, so that reading what came since the
    /// last call costs only the new lines.
    pub fn lines_from(&self, first: usize) -> impl Iterator<Item = (u64, Cow<'_, [u8]>)> + '_ {
        (first.min(self.complete_lines())..self.complete_lines()).map(|i| {
            let (start, vtime) = *self.line_starts.get(i).expect("a complete line");
            let end = self.line_starts.get(i + 1).map_or(self.console.len(), |&(next, _)| next as usize);
            let end = if end > start as usize && self.console.get(end - 1) == Some(&b'\n') { end - 1 } else { end };
            (vtime, self.console.slice(start as usize..end))
        })
    }

    /// How many lines of the console are complete.
    pub fn complete_lines(&self) -> usize {
        self.line_starts.len() - usize::from(self.console.last().is_some_and(|&b| b != b'\n'))
    }

    /// Bytes written beyond [`CONSOLE_LIMIT`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Level of the IRQ 4 line.
    pub fn irq_level(&self) -> bool {
        self.iir() & IIR_NO_INT == 0
    }

    fn iir(&self) -> u8 {
        let id = if self.ier & IER_RDI != 0 && self.rbr.is_some() {
            IIR_RDI
        } else if self.ier & IER_THRI != 0 && self.thr_pending {
            IIR_THRI
        } else {
            IIR_NO_INT
        };
        id | if self.fifo { IIR_FIFO } else { 0 }
    }

    fn transmit(&mut self, byte: u8, now_ns: u64) {
        if self.mcr & MCR_LOOP != 0 {
            self.rbr = Some(byte);
        } else if self.console.len() < CONSOLE_LIMIT {
            if self.console.last().is_none_or(|&b| b == b'\n') {
                debug_assert!(self.line_starts.last().is_none_or(|&(_, t)| t <= now_ns), "time ran backwards");
                self.line_starts.push((self.console.len() as u64, now_ns));
            }
            self.console.push(byte);
        } else {
            self.dropped += 1;
        }
        self.thr_pending = true;
    }

    /// `now_ns`: the virtual time, which stamps a line's first byte.
    pub fn pio_write(&mut self, port: u16, val: u8, now_ns: u64) {
        let dlab = self.lcr & LCR_DLAB != 0;
        match (port - hvsim_abi::port::COM1, dlab) {
            (0, false) => self.transmit(val, now_ns),
            (0, true) => self.dll = val,
            (1, false) => {
                let enabling_thri = val & IER_THRI != 0 && self.ier & IER_THRI == 0;
                self.ier = val & 0x0F;
                if enabling_thri {
                    self.thr_pending = true;
                }
            }
            (1, true) => self.dlm = val,
            (2, _) => self.fifo = val & 0x01 != 0,
            (3, _) => self.lcr = val,
            (4, _) => self.mcr = val & 0x1F,
            (7, _) => self.scr = val,
            _ => {} // LSR and MSR are read-only
        }
    }

    pub fn pio_read(&mut self, port: u16) -> u8 {
        let dlab = self.lcr & LCR_DLAB != 0;
        match (port - hvsim_abi::port::COM1, dlab) {
            (0, false) => self.rbr.take().unwrap_or(0),
            (0, true) => self.dll,
            (1, false) => self.ier,
            (1, true) => self.dlm,
            (2, _) => {
                let iir = self.iir();
                if iir & 0x0F == IIR_THRI {
                    self.thr_pending = false;
                }
                iir
            }
            (3, _) => self.lcr,
            (4, _) => self.mcr,
            (5, _) => LSR_THRE | LSR_TEMT | if self.rbr.is_some() { LSR_DR } else { 0 },
            (6, _) => {
                if self.mcr & MCR_LOOP != 0 {
                    // CTS=RTS, DSR=DTR, RI=OUT1, DCD=OUT2.
                    let m = self.mcr;
                    ((m & 0x02) << 3) | ((m & 0x01) << 5) | ((m & 0x04) << 4) | ((m & 0x08) << 4)
                } else {
                    0xB0 // DCD, DSR, CTS: a terminal is always there
                }
            }
            _ => self.scr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COM1: u16 = hvsim_abi::port::COM1;

    #[test]
    fn output_is_captured() {
        let mut s = Serial::default();
        for b in b"hi\n" {
            assert_ne!(s.pio_read(COM1 + 5) & LSR_THRE, 0);
            s.pio_write(COM1, *b, 0);
        }
        assert_eq!(&s.console()[..], b"hi\n");
    }

    #[test]
    fn lines_carry_the_time_of_their_first_byte() {
        let mut s = Serial::default();
        for (t, b) in b"ab\ncd\ne".iter().enumerate() {
            s.pio_write(COM1, *b, t as u64 * 10);
        }
        assert_eq!(lines(&s, 0), [(0, b"ab".to_vec()), (30, b"cd".to_vec())], "the unfinished \"e\" waits");
        assert_eq!(lines(&s, 1), [(30, b"cd".to_vec())]);
        s.pio_write(COM1, b'\n', 70);
        assert_eq!(lines(&s, 2), [(60, b"e".to_vec())]);
    }

    fn lines(s: &Serial, first: usize) -> Vec<(u64, Vec<u8>)> {
        s.lines_from(first).map(|(t, l)| (t, l.into_owned())).collect()
    }

    /// Lines read the same whether or not they cross a chunk of the
    /// console's log, and a clone taken on the way shares its chunks.
    #[test]
    fn long_consoles_read_the_same_across_chunks() {
        let mut s = Serial::default();
        let mut written = Vec::new();
        for i in 0..20_000u64 {
            let line = format!("line {i} {}\n", "x".repeat((i % 37) as usize));
            for b in line.bytes() {
                s.pio_write(COM1, b, i);
            }
            written.push((i, line.strip_suffix('\n').unwrap().as_bytes().to_vec()));
        }
        let copy = s.clone();
        assert!(s.logs().0.shared().count() > 5);
        assert!(lines(&s, 0) == written, "every line as written");
        assert!(lines(&s, 12_345) == written[12_345..], "every line from the 12,345th");
        let last: Vec<u8> = written[written.len() - 3..].iter().flat_map(|(_, l)| [&l[..], b"\n"].concat()).collect();
        assert!(s.last_lines(3)[..] == last[..], "the last three lines");
        assert!(s.last_lines(usize::MAX)[..] == s.console()[..]);
        assert_eq!(copy.logs().0.shared().collect::<Vec<_>>(), s.logs().0.shared().collect::<Vec<_>>());
    }

    #[test]
    fn thre_interrupt_raised_and_cleared_by_iir_read() {
        let mut s = Serial::default();
        assert!(!s.irq_level());
        s.pio_write(COM1 + 1, IER_THRI, 0);
        assert!(s.irq_level(), "enabling THRI with an empty transmitter interrupts");
        assert_eq!(s.pio_read(COM1 + 2) & 0x0F, IIR_THRI);
        assert!(!s.irq_level());
        s.pio_write(COM1, b'x', 0);
        assert!(s.irq_level());
    }

    #[test]
    fn loopback_as_linux_probes_it() {
        let mut s = Serial::default();
        s.pio_write(COM1 + 4, MCR_LOOP | 0x0A, 0); // loop, RTS, OUT2
        assert_eq!(s.pio_read(COM1 + 6) & 0xF0, 0x90);
        s.pio_write(COM1, 0x5A, 0);
        assert_eq!(s.pio_read(COM1 + 5) & LSR_DR, LSR_DR);
        assert_eq!(s.pio_read(COM1), 0x5A);
        assert!(s.console().is_empty());
    }

    #[test]
    fn dlab_switches_to_divisor_latch() {
        let mut s = Serial::default();
        s.pio_write(COM1 + 3, LCR_DLAB, 0);
        s.pio_write(COM1, 0x01, 0);
        s.pio_write(COM1 + 1, 0x00, 0);
        s.pio_write(COM1 + 3, 0x03, 0);
        assert!(s.console().is_empty());
        s.pio_write(COM1 + 3, LCR_DLAB, 0);
        assert_eq!(s.pio_read(COM1), 0x01);
    }

    #[test]
    fn fifo_reported_in_iir() {
        let mut s = Serial::default();
        s.pio_write(COM1 + 2, 0x07, 0);
        assert_eq!(s.pio_read(COM1 + 2) & 0xC0, 0xC0);
    }
}
