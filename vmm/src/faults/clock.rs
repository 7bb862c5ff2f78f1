//! Clock faults: a node's realtime clock jumps (`bump`) or alternates
//! between two offsets (`strobe`), and is reset to true time when the
//! fault ends; the machine's clock runs fast or slow (`drift`).
//!
//! Each node lives in its own time namespace, and hvsim's kernel patch 0006
//! gives a time namespace a realtime offset that may change while
//! processes live in it (docs/guest-kernel.md): bumps and strobes are per
//! node. A rate is the kernel clock's frequency, one for the machine: a
//! drift hits every node at once.
//!
//! The machine keeps what the clocks should read: each node's offset from
//! true time (the sum of the bumps and high strobes in force on it) and the
//! machine's rate (the sum of the drifts in force, in parts per million).
//! Each change raises `hc::event::CLOCK` for the node (or
//! [`hvsim_abi::hc::event::CLOCK_MACHINE`] for the rate); the guest's init
//! then asks for the new value (`{"hvsim_clock": {"want": "offset", "node":
//! N}}` or `{"want": "rate"}` on the SDK channel, answered by its next read,
//! like a buggify site) and applies it: the node's namespace offset
//! (`/proc/PID/timens_offsets`), or the frequency (`adjtimex`) with
//! realtime reset to true time. True time is the realtime the machine had
//! before the first drift, carried on by `CLOCK_MONOTONIC_RAW`, which no
//! fault touches. Monotonic clocks never go backwards.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest drift, in parts per million: the kernel's tick length may
/// be set within 10% of nominal (`adjtimex`'s `ADJ_TICK`).
pub const MAX_PPM: i64 = 100_000;

/// What a clock fault does for its duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// The nodes whose realtime it offsets (a drift: every node).
    nodes: Vec<u16>,
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
    /// A fault on `nodes` starts at `now`.
    pub fn start(&mut self, id: u64, nodes: Vec<u16>, change: ClockChange, now: u64) {
        let next_ns = match change {
            ClockChange::Strobe { period_ns, .. } => now.saturating_add(period_ns.max(1)),
            _ => u64::MAX,
        };
        self.active.push(Active { id, nodes, change, landed: 0, high: true, next_ns });
    }

    /// What fault `id` changes: its nodes' offsets, or (`None`) the rate.
    pub fn touches(&self, id: u64) -> Option<Vec<u16>> {
        let a = self.active.iter().find(|a| a.id == id).expect("a clock fault in force");
        (!matches!(a.change, ClockChange::Drift { .. })).then(|| a.nodes.clone())
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

    /// Flips the strobes due at `now`; the nodes whose clock changed.
    pub fn fire(&mut self, now: u64) -> Vec<u16> {
        let mut changed = Vec::new();
        for a in &mut self.active {
            if let ClockChange::Strobe { period_ns, .. } = a.change {
                let mut flips = 0;
                while a.next_ns <= now {
                    a.high = !a.high;
                    a.next_ns = a.next_ns.saturating_add(period_ns.max(1));
                    flips += 1;
                }
                if flips % 2 == 1 {
                    changed.extend(&a.nodes);
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        changed
    }

    /// What node `node`'s realtime should read, less true time.
    pub fn offset_ns(&self, node: u16) -> i64 {
        self.active
            .iter()
            .filter(|a| a.nodes.contains(&node))
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

    /// The guest applied node `node`'s offset (`Some`) or the machine's
    /// rate (`None`): every fault in force there landed once more. Returns
    /// their landing kinds.
    pub fn applied(&mut self, node: Option<u16>) -> Vec<&'static str> {
        self.active
            .iter_mut()
            .filter(|a| match node {
                Some(n) => a.nodes.contains(&n) && !matches!(a.change, ClockChange::Drift { .. }),
                None => matches!(a.change, ClockChange::Drift { .. }),
            })
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
        c.start(1, vec![1], ClockChange::Bump { offset_ns: 5_000 }, 0);
        c.start(2, vec![0, 1], ClockChange::Drift { ppm: 300 }, 0);
        c.start(3, vec![0, 1], ClockChange::Drift { ppm: 200_000 }, 0);
        c.start(4, vec![0, 1], ClockChange::Bump { offset_ns: -7 }, 0);
        assert_eq!((c.offset_ns(0), c.offset_ns(1)), (-7, 4_993), "offsets are per node, and add up");
        assert_eq!(c.ppm(), MAX_PPM, "drifts are clamped to what adjtimex allows");
        assert_eq!((c.touches(1), c.touches(2)), (Some(vec![1]), None));
        assert_eq!(c.applied(Some(1)), ["clock.bump", "clock.bump"]);
        assert_eq!(c.applied(None), ["clock.drift", "clock.drift"]);
        assert_eq!(c.end(3), 1);
        assert_eq!(c.ppm(), 300);
        for id in [1, 2, 4] {
            c.end(id);
        }
        assert_eq!((c.offset_ns(1), c.ppm(), c.deadline()), (0, 0, None), "reset");
    }

    #[test]
    fn a_strobe_flips_every_period() {
        let mut c = ClockFaults::default();
        c.start(7, vec![2], ClockChange::Strobe { offset_ns: -40, period_ns: 10 }, 100);
        assert_eq!((c.offset_ns(2), c.offset_ns(0), c.deadline()), (-40, 0, Some(110)));
        assert!(c.fire(109).is_empty());
        assert_eq!(c.fire(110), [2]);
        assert_eq!((c.offset_ns(2), c.deadline()), (0, Some(120)));
        assert!(c.fire(135).is_empty(), "late: flips twice, back where it was");
        assert_eq!((c.offset_ns(2), c.deadline()), (0, Some(140)));
        assert!(ClockChange::Strobe { offset_ns: -40, period_ns: 10 }.describe().contains("-40ns"));
    }
}
