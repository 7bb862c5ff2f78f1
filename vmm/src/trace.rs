//! The determinism log: every exit the machine takes, folded into a running
//! hash and optionally written out in full.
//!
//! Each event records what the guest did (exit kind, port/address/MSR, the
//! bytes moved), the virtual time after the VMM handled it, and the interrupt
//! vector injected before the guest resumed. Two runs are the same run exactly
//! when their event sequences are equal, which the chained SHA-256 makes cheap
//! to compare (`trace_hash`) and `hvsim diff-log` makes easy to debug.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::{ExitKind, Vtime};
use crate::error::{Error, Result};

/// One exit, as it enters the log.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub kind: ExitKind,
    /// Port, MMIO address or MSR index (0 where the kind has none).
    pub addr: u64,
    /// Bytes moved by the exit: written by the guest, or returned to it.
    pub data: &'a [u8],
    /// Virtual time once the VMM finished handling the exit.
    pub vtime: Vtime,
    /// Vector injected before re-entering the guest.
    pub inject: Option<u8>,
}

/// Data longer than this is logged as its length and hash, not in full.
const LOG_DATA_INLINE: usize = 64;

/// The running hash and event count: the part of the trace that snapshots carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceState {
    /// Number of events so far.
    pub events: u64,
    /// `H(n) = SHA-256(H(n-1) || encode(event n))`, `H(0)` = all zeroes.
    pub hash: [u8; 32],
}

impl TraceState {
    pub fn hash_hex(&self) -> String {
        hex::encode(self.hash)
    }
}

pub struct Trace {
    state: TraceState,
    log: Option<LogWriter>,
}

impl Trace {
    pub fn new() -> Trace {
        Trace { state: TraceState::default(), log: None }
    }

    pub fn state(&self) -> &TraceState {
        &self.state
    }

    /// Replaces the running state (restoring a snapshot).
    pub fn set_state(&mut self, state: TraceState) {
        self.state = state;
    }

    /// Writes every subsequent event to `path`, after a `# `-prefixed header.
    pub fn log_to(&mut self, path: &Path, header: &str) -> Result<()> {
        let file = File::create(path).map_err(Error::Log)?;
        let mut w = BufWriter::new(file);
        for line in header.lines() {
            writeln!(w, "# {line}").map_err(Error::Log)?;
        }
        self.log = Some(LogWriter { w, line: String::with_capacity(256) });
        Ok(())
    }

    pub fn record(&mut self, ev: &Event<'_>) -> Result<()> {
        let seq = self.state.events;
        let mut h = Sha256::new();
        h.update(self.state.hash);
        h.update(seq.to_le_bytes());
        h.update(ev.vtime.0.to_le_bytes());
        h.update([ev.kind as u8]);
        h.update(ev.addr.to_le_bytes());
        h.update((ev.data.len() as u64).to_le_bytes());
        h.update(ev.data);
        h.update(ev.inject.map_or(0xFFFFu16, u16::from).to_le_bytes());
        self.state.hash = h.finalize().into();
        self.state.events += 1;
        if let Some(log) = &mut self.log {
            log.write(seq, ev).map_err(Error::Log)?;
        }
        Ok(())
    }

    /// Appends a `# `-prefixed note (not part of the hash) to the log, if any.
    pub fn note(&mut self, note: &str) -> Result<()> {
        if let Some(log) = &mut self.log {
            writeln!(log.w, "# {note}").map_err(Error::Log)?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<()> {
        if let Some(log) = &mut self.log {
            log.w.flush().map_err(Error::Log)?;
        }
        Ok(())
    }
}

impl Default for Trace {
    fn default() -> Self {
        Trace::new()
    }
}

struct LogWriter {
    w: BufWriter<File>,
    line: String,
}

impl LogWriter {
    fn write(&mut self, seq: u64, ev: &Event<'_>) -> io::Result<()> {
        let l = &mut self.line;
        l.clear();
        // `write!` into a String cannot fail.
        let _ = write!(l, "{seq} {} {}", ev.vtime.0, ev.kind.name());
        match ev.kind {
            ExitKind::PioIn | ExitKind::PioOut => {
                let _ = write!(l, " port={:#x}", ev.addr);
            }
            ExitKind::MmioRead | ExitKind::MmioWrite => {
                let _ = write!(l, " addr={:#x}", ev.addr);
            }
            ExitKind::MsrRead | ExitKind::MsrWrite => {
                let _ = write!(l, " msr={:#x}", ev.addr);
            }
            _ => {}
        }
        if !ev.data.is_empty() {
            if ev.data.len() <= LOG_DATA_INLINE {
                let _ = write!(l, " data={}", hex::encode(ev.data));
            } else {
                let digest = Sha256::digest(ev.data);
                let _ = write!(l, " len={} sha256={}", ev.data.len(), hex::encode(&digest[..8]));
            }
        }
        if let Some(v) = ev.inject {
            let _ = write!(l, " inject={v:#04x}");
        }
        l.push('\n');
        self.w.write_all(l.as_bytes())
    }
}

/// Where two determinism logs first differ.
#[derive(Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the first differing event (0-based).
    pub event: u64,
    /// The events both logs share just before it, oldest first.
    pub common: Vec<String>,
    /// The differing event in each log; `None` where that log ended.
    pub a: Option<String>,
    pub b: Option<String>,
}

/// Compares two logs event by event (header and note lines are skipped) and
/// returns the first divergence with up to `context` shared events before it.
pub fn diff_logs(a: impl BufRead, b: impl BufRead, context: usize) -> io::Result<Option<Divergence>> {
    let mut a = events_of(a);
    let mut b = events_of(b);
    let mut common = VecDeque::with_capacity(context + 1);
    let mut event = 0u64;
    loop {
        let (ea, eb) = (a.next().transpose()?, b.next().transpose()?);
        match (ea, eb) {
            (None, None) => return Ok(None),
            (ea, eb) if ea == eb => {
                if context > 0 {
                    if common.len() == context {
                        common.pop_front();
                    }
                    common.push_back(ea.expect("equal and not both None"));
                }
            }
            (ea, eb) => {
                return Ok(Some(Divergence { event, common: common.into(), a: ea, b: eb }));
            }
        }
        event += 1;
    }
}

fn events_of(r: impl BufRead) -> impl Iterator<Item = io::Result<String>> {
    r.lines().filter(|l| !matches!(l, Ok(s) if s.starts_with('#') || s.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: ExitKind, addr: u64, data: &[u8], t: u64) -> Event<'_> {
        Event { kind, addr, data, vtime: Vtime(t), inject: None }
    }

    #[test]
    fn hash_depends_on_every_field_and_order() {
        let base = [ev(ExitKind::PioOut, 0x3f8, b"A", 1000), ev(ExitKind::PioIn, 0x40, &[1], 2000)];
        let run = |evs: &[Event<'_>]| {
            let mut t = Trace::new();
            for e in evs {
                t.record(e).unwrap();
            }
            t.state().clone()
        };
        let h = run(&base);
        assert_eq!(h, run(&base));
        assert_eq!(h.events, 2);
        let mut variants = vec![];
        let mut v = base;
        v[0].data = b"B";
        variants.push(v);
        let mut v = base;
        v[0].addr = 0x2f8;
        variants.push(v);
        let mut v = base;
        v[1].vtime = Vtime(2001);
        variants.push(v);
        let mut v = base;
        v[1].inject = Some(0x20);
        variants.push(v);
        let mut v = base;
        v[1].kind = ExitKind::PioOut;
        variants.push(v);
        variants.push([base[1], base[0]]);
        for v in variants {
            assert_ne!(run(&v).hash, h.hash, "{v:?}");
        }
    }

    #[test]
    fn diff_finds_first_divergence_with_context() {
        let a = "# header a\n0 1 hlt\n1 2 hlt\n2 3 pio-out port=0x3f8 data=41\n3 4 hlt\n";
        let b = "# header b\n0 1 hlt\n1 2 hlt\n2 3 pio-out port=0x3f8 data=42\n";
        let d = diff_logs(a.as_bytes(), b.as_bytes(), 1).unwrap().unwrap();
        assert_eq!(d.event, 2);
        assert_eq!(d.common, vec!["1 2 hlt"]);
        assert_eq!(d.a.as_deref(), Some("2 3 pio-out port=0x3f8 data=41"));
        assert_eq!(d.b.as_deref(), Some("2 3 pio-out port=0x3f8 data=42"));
    }

    #[test]
    fn diff_reports_a_log_that_ends_early_and_equal_logs() {
        let a = "0 1 hlt\n1 2 hlt\n";
        let d = diff_logs(a.as_bytes(), "0 1 hlt\n".as_bytes(), 3).unwrap().unwrap();
        assert_eq!((d.event, d.b), (1, None));
        assert_eq!(diff_logs(a.as_bytes(), a.as_bytes(), 3).unwrap(), None);
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `diff_log` fuzz target does (byte 0 is the context, then
    /// log A, NUL, log B), over its corpus and regressions.
    #[test]
    fn fuzz_corpus_and_regressions_diff_without_panics() {
        let inputs = fuzz_inputs("diff_log");
        assert!(!inputs.is_empty());
        for (_, data) in inputs {
            let [context, rest @ ..] = &data[..] else { continue };
            let context = usize::from(*context % 16);
            let (a, b) = match rest.iter().position(|&b| b == 0) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => rest.split_at(rest.len() / 2),
            };
            if let Ok(Some(d)) = diff_logs(a, b, context) {
                assert!(d.common.len() <= context);
                assert_ne!(d.a, d.b);
            }
            assert!(matches!(diff_logs(a, a, context), Ok(None) | Err(_)));
        }
    }
}
