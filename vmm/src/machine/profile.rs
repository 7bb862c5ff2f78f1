//! Where a run's wall time goes: time inside `KVM_RUN` (guest code, or the
//! host emulating it) against time in the VMM, and the longest stretches the
//! guest ran without an exit. A diagnostic, not part of the run: nothing
//! here reaches the guest, the clock or the trace.

use std::time::{Duration, Instant};

use crate::clock::{ExitKind, Vtime};

/// One stretch of guest execution between two exits.
#[derive(Clone, Debug)]
pub struct Stretch {
    /// Index of the event (log line) that ended it.
    pub event: u64,
    pub vtime: Vtime,
    pub wall: Duration,
    pub ended_by: ExitKind,
}

#[derive(Clone, Debug)]
pub struct WallProfile {
    pub in_guest: Duration,
    pub started: Instant,
    /// The longest stretches, longest first.
    pub longest: Vec<Stretch>,
    keep: usize,
}

impl WallProfile {
    pub fn new(keep: usize) -> WallProfile {
        WallProfile { in_guest: Duration::ZERO, started: Instant::now(), longest: Vec::new(), keep }
    }

    pub(crate) fn record(&mut self, stretch: Stretch) {
        self.in_guest += stretch.wall;
        let shortest = self.longest.last().map_or(Duration::ZERO, |s| s.wall);
        if self.longest.len() < self.keep || stretch.wall > shortest {
            let at = self.longest.partition_point(|s| s.wall >= stretch.wall);
            self.longest.insert(at, stretch);
            self.longest.truncate(self.keep);
        }
    }

    pub fn in_vmm(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.in_guest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_longest_in_order() {
        let mut p = WallProfile::new(2);
        for (i, ms) in [5u64, 1, 9, 3].into_iter().enumerate() {
            p.record(Stretch {
                event: i as u64,
                vtime: Vtime(0),
                wall: Duration::from_millis(ms),
                ended_by: ExitKind::PioIn,
            });
        }
        let events: Vec<u64> = p.longest.iter().map(|s| s.event).collect();
        assert_eq!(events, vec![2, 0]);
        assert_eq!(p.in_guest, Duration::from_millis(18));
    }
}
