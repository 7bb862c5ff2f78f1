//! The virtual clock.
//!
//! Guest time is a pure function of the guest's exits: the clock advances only
//! when the vCPU exits to the VMM, by a fixed cost per exit kind, and jumps
//! straight to the next timer deadline when the guest halts. Host time never
//! leaks in: work the guest does between exits takes zero virtual time, and an
//! idle guest costs no wall time at all (time compression).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::entropy::Stream;

/// Nanoseconds of virtual time since the machine was created.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Vtime(pub u64);

impl Vtime {
    pub const ZERO: Vtime = Vtime(0);
    pub const MAX: Vtime = Vtime(u64::MAX);

    pub const fn from_secs(s: u64) -> Vtime {
        Vtime(s * 1_000_000_000)
    }
    pub const fn nanos(self) -> u64 {
        self.0
    }
    pub fn saturating_add(self, ns: u64) -> Vtime {
        Vtime(self.0.saturating_add(ns))
    }
}

impl fmt::Display for Vtime {
    /// Seconds with nanosecond precision, e.g. `3600.000001000s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

/// The kinds of VM exit, each with its fixed virtual-time cost.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitKind {
    PioIn,
    PioOut,
    MmioRead,
    MmioWrite,
    MsrRead,
    MsrWrite,
    /// HLT: free in itself; the halt logic then jumps to the next deadline.
    Halt,
    /// The guest became ready for an interrupt the VMM was holding.
    IrqWindow,
    /// The wall-clock watchdog forced the guest out (see `watchdog`).
    WatchdogKick,
    /// Triple fault.
    Shutdown,
    /// Not an exit: the VMM re-keyed every entropy stream (data: the seed).
    Reseed,
    /// Not an exit: the run's inputs reached the booted machine (data: the
    /// SHA-256 of the work and of the fault plan).
    RunStart,
    /// Not an exit: the explorer chose the value of the SDK draw the guest
    /// announced (data: the value; see `Hypercall::choose_draw`).
    Choose,
}

impl ExitKind {
    /// Virtual nanoseconds charged for one exit of this kind.
    ///
    /// The values are round numbers in the range of a device access on real
    /// hardware. They only have to be fixed (so that time is a function of the
    /// exit sequence) and positive for every kind a guest can loop on (so that a
    /// guest polling a clock or a device always sees time move).
    pub const fn cost_ns(self) -> u64 {
        match self {
            ExitKind::PioIn | ExitKind::PioOut => 1_000,
            ExitKind::MmioRead | ExitKind::MmioWrite => 1_000,
            ExitKind::MsrRead | ExitKind::MsrWrite => 500,
            ExitKind::Halt | ExitKind::IrqWindow | ExitKind::Shutdown => 0,
            ExitKind::Reseed | ExitKind::RunStart | ExitKind::Choose => 0,
            // A forced exit stands for a quantum of guest computation that no
            // exit measured; one 100 Hz tick lets a spinning guest's timer fire.
            ExitKind::WatchdogKick => 10_000_000,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            ExitKind::PioIn => "pio-in",
            ExitKind::PioOut => "pio-out",
            ExitKind::MmioRead => "mmio-read",
            ExitKind::MmioWrite => "mmio-write",
            ExitKind::MsrRead => "msr-read",
            ExitKind::MsrWrite => "msr-write",
            ExitKind::Halt => "hlt",
            ExitKind::IrqWindow => "irq-window",
            ExitKind::WatchdogKick => "watchdog-kick",
            ExitKind::Shutdown => "shutdown",
            ExitKind::Reseed => "reseed",
            ExitKind::RunStart => "run-start",
            ExitKind::Choose => "choose",
        }
    }

    pub fn from_name(name: &str) -> Option<ExitKind> {
        ALL_EXIT_KINDS.iter().copied().find(|k| k.name() == name)
    }
}

pub const ALL_EXIT_KINDS: [ExitKind; 13] = [
    ExitKind::PioIn,
    ExitKind::PioOut,
    ExitKind::MmioRead,
    ExitKind::MmioWrite,
    ExitKind::MsrRead,
    ExitKind::MsrWrite,
    ExitKind::Halt,
    ExitKind::IrqWindow,
    ExitKind::WatchdogKick,
    ExitKind::Shutdown,
    ExitKind::Reseed,
    ExitKind::RunStart,
    ExitKind::Choose,
];

/// The machine's clock. Monotonic by construction: it only moves forward.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Clock {
    now: Vtime,
    /// Timing perturbation: with it, an exit of a kind that costs `c` costs
    /// `c + U[0, c)`, drawn from this stream (see docs/determinism.md).
    #[serde(default)]
    jitter: Option<Stream>,
}

impl Clock {
    /// A clock at zero; with `seed`, exit costs are perturbed from the
    /// `timing` stream of that seed.
    pub fn new(jitter_seed: Option<u64>) -> Clock {
        Clock { now: Vtime::ZERO, jitter: jitter_seed.map(|seed| Stream::new(seed, "timing")) }
    }

    pub fn now(&self) -> Vtime {
        self.now
    }

    /// Charges one exit of `kind`.
    pub fn charge(&mut self, kind: ExitKind) {
        let cost = kind.cost_ns();
        let extra = match &mut self.jitter {
            Some(stream) if cost > 0 => stream.below(cost),
            _ => 0,
        };
        debug_assert!(extra < cost.max(1), "the perturbation at most doubles a cost");
        self.now = self.now.saturating_add(cost + extra);
    }

    /// Re-keys the perturbation (if any) from `seed`.
    pub fn reseed(&mut self, seed: u64) {
        if let Some(stream) = &mut self.jitter {
            stream.reseed(seed);
        }
    }

    /// Jumps forward to `t` (a timer deadline while the guest is halted).
    pub fn jump_to(&mut self, t: Vtime) {
        assert!(t >= self.now, "virtual time may not run backwards ({t} < {})", self.now);
        self.now = t;
    }
}

/// Converts between a counter running at `hz` and virtual nanoseconds.
pub mod convert {
    const NS_PER_SEC: u128 = 1_000_000_000;

    /// Whole ticks of an `hz` counter elapsed in `ns` nanoseconds.
    pub fn ticks_in(ns: u64, hz: u64) -> u64 {
        (ns as u128 * hz as u128 / NS_PER_SEC) as u64
    }

    /// First nanosecond at which `ticks` ticks of an `hz` counter have elapsed.
    pub fn ns_for_ticks(ticks: u64, hz: u64) -> u64 {
        let ns = (ticks as u128 * NS_PER_SEC).div_ceil(hz as u128);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_round_trip() {
        for k in ALL_EXIT_KINDS {
            assert_eq!(ExitKind::from_name(k.name()), Some(k));
        }
    }

    #[test]
    fn display() {
        assert_eq!(Vtime(3_600_000_001_000).to_string(), "3600.000001000s");
    }

    #[test]
    fn perturbed_costs_stay_within_bounds_and_follow_the_seed() {
        let run = |seed| {
            let mut c = Clock::new(Some(seed));
            let mut times = Vec::new();
            for _ in 0..200 {
                let before = c.now();
                c.charge(ExitKind::PioOut);
                let cost = c.now().nanos() - before.nanos();
                assert!((1_000..2_000).contains(&cost), "{cost}");
                c.charge(ExitKind::Halt);
                times.push(c.now());
            }
            times
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let mut plain = Clock::default();
        plain.charge(ExitKind::PioOut);
        assert_eq!(plain.now(), Vtime(1_000), "no perturbation unless asked");
    }

    #[test]
    #[should_panic(expected = "backwards")]
    fn clock_never_runs_backwards() {
        let mut c = Clock::default();
        c.charge(ExitKind::PioOut);
        c.jump_to(Vtime(1));
    }

    proptest! {
        #[test]
        fn tick_conversion_is_consistent(ticks in 0u64..1u64 << 40, hz in 1u64..10_000_000_000) {
            let ns = convert::ns_for_ticks(ticks, hz);
            // At `ns` the ticks have elapsed, one nanosecond earlier they had not.
            prop_assert!(convert::ticks_in(ns, hz) >= ticks);
            if ns > 0 && ticks > 0 {
                prop_assert!(convert::ticks_in(ns - 1, hz) < ticks);
            }
        }
    }
}
