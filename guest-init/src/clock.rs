//! Clock faults (`hvsim_vmm::faults::clock`): when hvsim says a clock is to
//! read otherwise (`hc::event::CLOCK`), init asks what it should read and
//! sets it.
//!
//! - A node's realtime offset: every node's processes live in the time
//!   namespace its holder made for its children (`nodes.rs`), which hvsim's
//!   kernel patch 0006 gives a realtime offset that may change while they
//!   live there; init writes it to `/proc/HOLDER/timens_offsets`.
//! - The machine's rate: the kernel clock's frequency, with `adjtimex` (the
//!   tick length in steps of 100 ppm, the rest as NTP's frequency offset),
//!   so realtime and the monotonic clocks run fast or slow together, as on
//!   a machine whose oscillator drifts; realtime is reset to true time at
//!   each change (`clock_settime`), so a drift leaves nothing behind.
//!
//! True time is the realtime the machine had before the first rate change,
//! carried on by `CLOCK_MONOTONIC_RAW`, which neither `clock_settime` nor
//! `adjtimex` touches.

use std::fs::OpenOptions;
use std::io::{self, Write};

use crate::nodes;

/// `adjtimex` modes (linux/timex.h).
const ADJ_FREQUENCY: libc::c_uint = 0x0002;
const ADJ_TICK: libc::c_uint = 0x4000;
/// The nominal tick length: 10,000 us per tick at USER_HZ = 100.
const NOMINAL_TICK: i64 = 10_000;

#[derive(Default)]
pub struct Clock {
    /// Realtime less `CLOCK_MONOTONIC_RAW`, in nanoseconds, before the
    /// first rate change.
    true_base: Option<i128>,
}

fn now(clock: libc::clockid_t) -> io::Result<i128> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

/// Asks hvsim a clock question; it answers with the next read.
fn ask(question: &str) -> io::Result<i64> {
    Ok(i64::from_le_bytes(crate::sdk::ask(&format!("{{\"hvsim_clock\":{question}}}"))?))
}

/// `adjtimex`'s tick length and frequency offset (ppm << 16) for a rate
/// `ppm` parts per million off nominal.
fn tick_and_freq(ppm: i64) -> (i64, i64) {
    let tick = NOMINAL_TICK + ppm / 100;
    let rest = ppm - (tick - NOMINAL_TICK) * 100;
    (tick, rest << 16)
}

/// A `timens_offsets` line: seconds (floored) and nanoseconds in [0, 1e9).
fn offset_line(offset_ns: i64) -> String {
    format!("realtime {} {}\n", offset_ns.div_euclid(1_000_000_000), offset_ns.rem_euclid(1_000_000_000))
}

impl Clock {
    /// Sets node `node`'s realtime offset as hvsim says it should be.
    pub fn apply_node(&mut self, node: u16) {
        let applied = ask(&format!("{{\"want\":\"offset\",\"node\":{node}}}")).and_then(|offset| {
            let holder = std::fs::read_to_string(nodes::pid_file(node))?;
            let path = format!("/proc/{}/timens_offsets", holder.trim());
            OpenOptions::new().write(true).open(&path)?.write_all(offset_line(offset).as_bytes())?;
            Ok(offset)
        });
        match applied {
            Ok(offset) => println!("hvsim-init: node {node} clock: realtime {offset:+} ns off true time"),
            Err(e) => eprintln!("hvsim-init: node {node}: cannot apply a clock fault: {e}"),
        }
    }

    /// Sets the machine's clock rate as hvsim says it should be, and
    /// realtime back to true time.
    pub fn apply_rate(&mut self) {
        match self.try_apply_rate() {
            Ok(ppm) => println!("hvsim-init: clock: running {ppm:+} ppm"),
            Err(e) => eprintln!("hvsim-init: cannot apply a clock rate: {e}"),
        }
    }

    fn try_apply_rate(&mut self) -> io::Result<i64> {
        let ppm = ask(r#"{"want":"rate"}"#)?;
        let raw = now(libc::CLOCK_MONOTONIC_RAW)?;
        let base = match self.true_base {
            Some(b) => b,
            None => *self.true_base.insert(now(libc::CLOCK_REALTIME)? - raw),
        };
        let target = base + raw;
        let ts = libc::timespec {
            tv_sec: (target.div_euclid(1_000_000_000)) as libc::time_t,
            tv_nsec: (target.rem_euclid(1_000_000_000)) as libc::c_long,
        };
        // SAFETY: clock_settime reads one timespec.
        if unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &ts) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (tick, freq) = tick_and_freq(ppm);
        // SAFETY: an all-zero timex is a valid argument; adjtimex reads and
        // writes only it.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        tx.modes = ADJ_TICK | ADJ_FREQUENCY;
        tx.tick = tick as libc::c_long;
        tx.freq = freq as libc::c_long;
        // SAFETY: see above.
        if unsafe { libc::adjtimex(&mut tx) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ppm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_split_into_tick_and_frequency() {
        assert_eq!(tick_and_freq(0), (10_000, 0));
        assert_eq!(tick_and_freq(250), (10_002, 50 << 16));
        assert_eq!(tick_and_freq(-250), (9_998, -50 << 16));
        assert_eq!(tick_and_freq(100_000), (11_000, 0), "10% fast: the longest tick adjtimex allows");
    }

    #[test]
    fn offsets_are_written_as_the_kernel_reads_them() {
        assert_eq!(offset_line(2_500_000_000), "realtime 2 500000000\n");
        assert_eq!(offset_line(-2_500_000_000), "realtime -3 500000000\n");
        assert_eq!(offset_line(0), "realtime 0 0\n");
    }
}
