//! What an exploration hands out as it goes ([`Watch`]): where it stands,
//! each bug's record when found and when confirmed, and the whole
//! exploration now and then, so that nothing found is lost to an
//! interruption.

use std::sync::Arc;
use std::time::Duration;

use hvsim_guest_image::linux::boot_cache::BootKind;
use hvsim_vmm::Vtime;

use crate::record::bug::BugRecord;
use crate::record::discovery::Incidence;
use crate::record::error::Result;
use crate::record::exploration::{Exploration, Phases, TimelineEnds};
use crate::record::services::ServiceView;
use crate::run::live::Live;

/// What an exploration hands out as it goes.
pub trait Watch {
    /// Where it stands, for a progress display.
    fn progress(&mut self, _: Progress) {}
    /// The branches running now, once, before the first round: a display
    /// reads it whenever it redraws.
    fn live(&mut self, _: &Arc<Live>) {}
    /// A bug's record, when the bug is found and again when confirmed.
    fn bug(&mut self, _: &BugRecord) -> Result<()> {
        Ok(())
    }
    /// The whole exploration so far: every [`CHECKPOINT_EVERY`] of wall
    /// time between rounds.
    fn checkpoint(&mut self, _: &Exploration) -> Result<()> {
        Ok(())
    }
}

/// Watching nothing (benchmarks).
impl Watch for () {}

/// How often (wall time) the root's setup reports at least.
pub const SETUP_REPORT_EVERY: Duration = Duration::from_secs(1);

/// The root's setup as it runs.
#[derive(Clone, Debug)]
pub struct SetupProgress {
    pub vtime: Vtime,
    pub limit: Vtime,
    pub elapsed: Duration,
    /// What the guest's programs have sent through the SDK (any at all:
    /// the channel works).
    pub sdk_messages: u64,
    /// The machine's exits so far: its activity, where virtual time
    /// hardly moves.
    pub exits: u64,
    /// The project's services: each one's state and last line.
    pub services: Vec<ServiceView>,
    /// The console's lines since the last report, when the setup was
    /// asked to stream them (`-v`).
    pub lines: Vec<String>,
}

/// How often (wall time) a running exploration is handed out whole.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

/// A view of the exploration so far, for progress displays: each phase
/// says when it starts.
#[derive(Clone, Debug)]
pub enum Progress {
    /// The target is being started: restored from the boot cache, or (the
    /// first time for its machine shape) booted cold.
    Starting,
    /// The target started, as `boot` says.
    Started { boot: BootKind, wall_ms: u64 },
    /// The root runs and has not reported setup complete yet: at each step
    /// of virtual time, and at least every [`SETUP_REPORT_EVERY`] of wall
    /// time however little virtual time moved.
    Setup(SetupProgress),
    /// The root was made by running the target's setup: what that cost
    /// here, the first measure of what the exploration will (`start_ms`
    /// booting or restoring the machine, `setup_ms` the setup, which ran
    /// `setup_vtime` of virtual time); `saved`: the next exploration
    /// restores it instead.
    RootMade { start_ms: f64, setup_ms: f64, setup_vtime: Vtime, saved: bool },
    /// The root was restored from a saved root, which took `made_ms` of
    /// wall time to make.
    RootRestored { made_ms: u64 },
    /// A round of branches `first..=last` (of `of` in all, if the budget
    /// is a number of branches) starts running.
    Round { first: u64, last: u64, of: Option<u64> },
    /// A branch ended.
    Branch(BranchProgress),
    /// The branches are done; `bugs` bugs' re-executions still run.
    Confirming { bugs: usize },
    /// Each of `bugs` bugs' likelihood is being estimated.
    Estimating { bugs: usize },
}

#[derive(Clone, Copy, Debug)]
pub struct BranchProgress {
    pub branches: u64,
    /// How the timelines so far ended.
    pub timelines: TimelineEnds,
    /// Checks no timeline has evaluated yet (`AssertionRecord::is_check`).
    pub unevaluated: usize,
    /// Of those, Test Composer's `finally_` and `eventually_` commands.
    pub unevaluated_composer: usize,
    pub snapshots: usize,
    pub signals: u64,
    pub bugs: usize,
    pub elapsed: Duration,
    pub phases: Phases,
    /// What the discovery estimates go by (`discovery.rs`).
    pub incidence: Incidence,
}
