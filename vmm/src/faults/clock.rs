//! Clock faults: the guest's realtime clock jumps (`bump`), alternates
//! between two offsets (`strobe`) or runs fast or slow (`drift`), and is
//! reset to true time when the fault ends.
//!
//! Every node shares one guest kernel, hence one realtime clock: a clock
//! fault hits the whole machine, as Antithesis's clock faults hit every
//! unit at once (docs/faults.md#clocks says what per-node clocks need).
//!
//! The machine keeps what the clock should read: an offset from true time
//! (the sum of the bumps and high strobes in force) and a rate (the sum of
//! the drifts in force, in parts per million). Each change raises
//! `hc::event::CLOCK`; the guest's init then asks for both
//! (`{"hvsim_clock": {"want": "offset"}}` on the SDK channel, answered by
//! its next read, like a buggify site) and sets `CLOCK_REALTIME` to true
//! time plus the offset (`clock_settime`) and the kernel clock's frequency
//! to the rate (`adjtimex`). True time is the realtime the machine had
//! before any clock fault, carried on by `CLOCK_MONOTONIC_RAW`, which no
//! fault touches. Monotonic clocks never go backwards.

use serde::{Deserialize, Serialize};

/// The largest drift, in parts per million: the kernel's tick length may
/// be set within 10% of nominal (`adjtimex`'s `ADJ_TICK`).
pub const MAX_PPM: i64 = 100_000;

/// What a clock fault does for its duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockChange {
    /// Realtime jumps by `offset_ns` (forward if positive).
    Bump { offset_ns: i64 },
    /// Realtime alternates between true time and true time plus
    /// `offset_ns`, every `period_ns`, starting with the offset.
    Strobe { offset_ns: i64, period_ns: u64 },
    /// The clock runs `ppm` parts per million fast (slow if negative).
    Drift { ppm: i64 },
}

impl ClockChange {
    pub fn landing(self) -> &'static str {
        match self {
            ClockChange::Bump { .. } => "clock.bump",
            ClockChange::Strobe { .. } => "clock.strobe",
            ClockChange::Drift { .. } => "clock.drift",
        }
    }

    pub fn describe(self) -> String {
        let signed = |ns: i64| {
            let d = std::time::Duration::from_nanos(ns.unsigned_abs());
            format!("{}{d:?}", if ns < 0 { "-" } else { "+" })
        };
        match self {
            ClockChange::Bump { offset_ns } => format!("realtime {}", signed(offset_ns)),
            ClockChange::Strobe { offset_ns, period_ns } => format!(
                "realtime alternating 0 / {} every {:?}",
                signed(offset_ns),
                std::time::Duration::from_nanos(period_ns)
            ),
            ClockChange::Drift { ppm } => format!("clock {ppm:+} ppm"),
        }
    }
}

/// A clock fault in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Active {
    id: u64,
    change: ClockChange,
    /// Times the guest applied the clock while it was in force.
    landed: u64,
    /// A strobe: at the offset now, and when it next flips.
    high: bool,
    next_ns: u64,
}

/// The clock faults in force.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockFaults {
    active: Vec<Active>,
}

impl ClockFaults {
    /// A fault starts at `now`.
    pub fn start(&mut self, id: u64, change: ClockChange, now: u64) {
        let next_ns = match change {
            ClockChange::Strobe { period_ns, .. } => now.saturating_add(period_ns.max(1)),
            _ => u64::MAX,
        };
        self.active.push(Active { id, change, landed: 0, high: true, next_ns });
    }

    /// A fault ends; how many times the guest applied it.
    pub fn end(&mut self, id: u64) -> u64 {
        let i = self.active.iter().position(|a| a.id == id).expect("only a clock fault in force ends");
        self.active.remove(i).landed
    }

    pub fn episode_landed(&self, id: u64) -> u64 {
        self.active.iter().filter(|a| a.id == id).map(|a| a.landed).sum()
    }

    /// When a strobe next flips.
    pub fn deadline(&self) -> Option<u64> {
        self.active.iter().map(|a| a.next_ns).filter(|&t| t != u64::MAX).min()
    }

    /// Flips the strobes due at `now`; whether the clock changed.
    pub fn fire(&mut self, now: u64) -> bool {
        let mut changed = false;
        for a in &mut self.active {
            if let ClockChange::Strobe { period_ns, .. } = a.change {
                while a.next_ns <= now {
                    a.high = !a.high;
                    a.next_ns = a.next_ns.saturating_add(period_ns.max(1));
                    changed = true;
                }
            }
        }
        changed
    }

    /// What realtime should read, less true time.
    pub fn offset_ns(&self) -> i64 {
        self.active
            .iter()
            .map(|a| match a.change {
                ClockChange::Bump { offset_ns } => offset_ns,
                ClockChange::Strobe { offset_ns, .. } if a.high => offset_ns,
                _ => 0,
            })
            .fold(0i64, i64::saturating_add)
    }

    /// How fast the clock runs, in parts per million off true.
    pub fn ppm(&self) -> i64 {
        let ppm =
            self.active.iter().map(|a| if let ClockChange::Drift { ppm } = a.change { ppm } else { 0 }).sum::<i64>();
        ppm.clamp(-MAX_PPM, MAX_PPM)
    }

    /// The guest applied the clock: every fault in force landed once more.
    /// Returns their landing kinds.
    pub fn applied(&mut self) -> Vec<&'static str> {
        self.active
            .iter_mut()
            .map(|a| {
                a.landed += 1;
                a.change.landing()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_rates_add_up_and_end_at_true_time() {
        let mut c = ClockFaults::default();
        c.start(1, ClockChange::Bump { offset_ns: 5_000 }, 0);
        c.start(2, ClockChange::Drift { ppm: 300 }, 0);
        c.start(3, ClockChange::Drift { ppm: 200_000 }, 0);
        assert_eq!((c.offset_ns(), c.ppm()), (5_000, MAX_PPM), "drifts are clamped to what adjtimex allows");
        assert_eq!(c.applied(), ["clock.bump", "clock.drift", "clock.drift"]);
        assert_eq!(c.end(3), 1);
        assert_eq!(c.ppm(), 300);
        c.end(1);
        c.end(2);
        assert_eq!((c.offset_ns(), c.ppm(), c.deadline()), (0, 0, None), "reset");
    }

    #[test]
    fn a_strobe_flips_every_period() {
        let mut c = ClockFaults::default();
        c.start(7, ClockChange::Strobe { offset_ns: -40, period_ns: 10 }, 100);
        assert_eq!((c.offset_ns(), c.deadline()), (-40, Some(110)));
        assert!(!c.fire(109));
        assert!(c.fire(110));
        assert_eq!((c.offset_ns(), c.deadline()), (0, Some(120)));
        assert!(c.fire(135), "late: flips twice");
        assert_eq!((c.offset_ns(), c.deadline()), (0, Some(140)));
        assert!(ClockChange::Strobe { offset_ns: -40, period_ns: 10 }.describe().contains("-40ns"));
    }
}
