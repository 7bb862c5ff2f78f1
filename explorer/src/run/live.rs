//! The branches running now, as a progress display shows them while they
//! run: which branch, how far into its timeline, and the last line its
//! console wrote (a service's output, or init's word on the Test Composer
//! command it runs). Workers write it at least every [`LIVE_EVERY`] of wall
//! time, pausing their machine to do so (`Machine::run_until_or_wall`,
//! invisible to the guest); a display reads it whenever it redraws. What
//! is here is never read back by the exploration.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hvsim_vmm::Vtime;

/// How often a running branch says where it is, at least.
pub const LIVE_EVERY: Duration = Duration::from_secs(1);

/// A branch as it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveBranch {
    pub branch: u64,
    /// Virtual time since the root.
    pub vtime: Vtime,
    /// The last complete line of the console.
    pub last_line: Option<String>,
}

/// The branches running now, by branch number.
#[derive(Debug, Default)]
pub struct Live {
    running: Mutex<BTreeMap<u64, LiveBranch>>,
}

impl Live {
    fn running(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, LiveBranch>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Branch `b.branch` is where `b` says.
    pub fn update(&self, mut b: LiveBranch) {
        b.last_line = b.last_line.map(crate::record::services::truncate);
        self.running().insert(b.branch, b);
    }

    /// Branch `branch` ended.
    pub fn ended(&self, branch: u64) {
        self.running().remove(&branch);
    }

    /// The branches running now, the lowest first.
    pub fn now(&self) -> Vec<LiveBranch> {
        self.running().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branches_show_while_they_run_and_long_lines_are_cut() {
        let live = Live::default();
        let at = |branch, line: &str| LiveBranch { branch, vtime: Vtime(branch), last_line: Some(line.into()) };
        live.update(at(7, "client | adding 3"));
        live.update(at(3, &"é".repeat(1000)));
        let now = live.now();
        assert_eq!(now.iter().map(|b| b.branch).collect::<Vec<_>>(), [3, 7]);
        assert!(now[0].last_line.as_deref().unwrap().ends_with('…'), "cut as services cut a line");
        live.update(at(7, "client | adding 4"));
        assert_eq!(live.now()[1].last_line.as_deref(), Some("client | adding 4"));
        live.ended(3);
        live.ended(7);
        assert!(live.now().is_empty());
    }
}
