//! One branch as a worker runs it: reset the machine to the snapshot the
//! branch starts from, re-seed it, run a slice of virtual time, and write
//! down all the explorer needs to merge the branch into the exploration:
//! each stop's messages and fresh coverage, a snapshot (as a delta) where
//! something was new, the machine's fingerprint where something failed.
//!
//! What is new here is judged against the [`Knowledge`] the exploration
//! had when the branch's round began, plus the branch's own findings. The
//! merge judges again, against everything merged before the branch: it can
//! only find less new (knowledge only grows), never more, so every stop the
//! merge finds new has its snapshot.

use std::time::{Duration, Instant};

use hvsim_snapshot::{Cursor, Delta, NodeId, SnapshotTree};
use hvsim_vmm::{End, Machine, Stop, Vtime};

use crate::bug::{self, Fingerprint};
use crate::coverage::FreshBits;
use crate::engine::{is_crash, point, FaultTally, Knowledge};
use crate::error::Result;
use crate::timeline::{Point, Timeline};

/// A branch to run: from which snapshot, with which seed.
#[derive(Clone, Debug)]
pub(crate) struct BranchJob {
    /// The branch's number (1, 2, ...): its place in the merge order.
    pub branch: u64,
    pub seed: u64,
    /// The snapshot it starts from.
    pub tree_id: NodeId,
    /// The node's timeline, which the branch continues.
    pub base: Timeline,
}

/// The machine where something failed: what its bug record keeps.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub at: Point,
    pub fingerprint: Fingerprint,
    pub console_tail: Vec<String>,
}

impl Failure {
    pub fn of(m: &Machine) -> Failure {
        Failure { at: point(m), fingerprint: Fingerprint::of(m), console_tail: bug::console_tail(m.console()) }
    }
}

/// The machine stopped with messages.
pub(crate) struct StopRecord {
    pub at: Point,
    /// Coverage the guest's map showed that was new to the branch.
    pub coverage: FreshBits,
    pub messages: Vec<Vec<u8>>,
    /// Where a message here failed (an always-type assertion, say).
    pub failure: Option<Failure>,
    /// The machine here, if something was new to the branch.
    pub snapshot: Option<Delta>,
}

pub(crate) struct BranchRun {
    pub job: BranchJob,
    pub stops: Vec<StopRecord>,
    /// Coverage new to the branch when it ended.
    pub end_coverage: FreshBits,
    /// How it ended: at its deadline (`None`), or with the guest's end.
    pub end: Option<End>,
    /// Where the guest crashed.
    pub crash: Option<Failure>,
    /// Landing evidence: what each fault kind touched in this branch.
    pub faults: FaultTally,
    pub vtime_ns: u64,
    pub restore: Duration,
    pub snapshot: Duration,
    pub run: Duration,
}

/// How branches are run, the same for every worker.
pub(crate) struct Rules {
    pub slice: Vtime,
    /// Whether to take snapshots where something is new.
    pub snapshots: bool,
}

/// Runs `job` on `machine` (standing at `cursor` in `tree`).
pub(crate) fn run(
    job: BranchJob,
    known: &Knowledge,
    rules: &Rules,
    tree: &SnapshotTree,
    cursor: &mut Cursor,
    machine: &mut Machine,
) -> Result<BranchRun> {
    let started = Instant::now();
    tree.reset(cursor, machine, job.tree_id)?;
    let restore = started.elapsed();
    machine.reseed(job.seed)?;
    let mut known = known.clone();
    let before = FaultTally::landed(machine);
    let from = machine.now();
    let deadline = Vtime(from.nanos().saturating_add(rules.slice.nanos()));
    let mut stops = Vec::new();
    let mut snapshot = Duration::ZERO;
    let (end, end_coverage) = loop {
        match machine.run_until(deadline)? {
            Stop::Message => {
                let at = point(machine);
                let coverage = known.new_coverage(machine);
                let mut new_here = coverage.count();
                let mut failed = false;
                let messages: Vec<Vec<u8>> = machine.take_messages().into_iter().map(|m| m.bytes).collect();
                for msg in &messages {
                    let o = known.process(msg);
                    new_here += o.new_signals;
                    failed |= o.bug.is_some();
                }
                let failure = failed.then(|| Failure::of(machine));
                let delta = if new_here > 0 && rules.snapshots {
                    let taken = Instant::now();
                    let delta = tree.capture(cursor, machine)?;
                    snapshot += taken.elapsed();
                    Some(delta)
                } else {
                    None
                };
                stops.push(StopRecord { at, coverage, messages, failure, snapshot: delta });
            }
            Stop::Deadline => break (None, known.new_coverage(machine)),
            Stop::Ended(end) => break (Some(end), known.new_coverage(machine)),
        }
    };
    let crash = end.as_ref().filter(|e| is_crash(e)).map(|_| Failure::of(machine));
    let mut faults = FaultTally::default();
    faults.add(&before, machine);
    Ok(BranchRun {
        stops,
        end_coverage,
        end,
        crash,
        faults,
        vtime_ns: machine.now().nanos() - from.nanos(),
        restore,
        snapshot,
        run: started.elapsed().saturating_sub(restore + snapshot),
        job,
    })
}
