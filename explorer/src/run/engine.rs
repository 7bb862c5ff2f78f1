//! The exploration loop.
//!
//! Boot the target with the master seed and run it until it reports setup
//! complete: that is the root snapshot. Then, branch after branch: pick a
//! snapshot (weighted by energy), reset the machine to it, re-seed every
//! stream from (master seed, branch number), and run it to its timeline's
//! end (see `branch.rs`: the guest's end or the timeline's limit; or a
//! slice of virtual time with `--slice`), snapshotting at intervals of virtual
//! time. Each SDK message is checked for something new (an assertion state
//! never seen, a better numeric or boolean watermark, a coverage edge) and
//! for a bug (an always-type assertion failing, an unreachable point
//! reached, the guest crashing; at a timeline's end, a checker finding its
//! recorded history invalid: `checkers.rs`). Where something is new, the machine is
//! snapshotted, and that snapshot gets energy to be branched from. Every
//! decision depends only on the master seed, so an exploration with a
//! branch budget is itself reproducible. A new bug's timeline is executed
//! again from the root (from the root snapshot, or a fresh start for a bug
//! found before it) a few times to confirm it, beside the next rounds where
//! there are several workers, and a bug that does not come back the same
//! every time is reported as flaky.
//!
//! What it finds is handed out as it goes ([`Watch`]): each bug's record
//! when found and when confirmed, and the whole exploration now and then,
//! so that nothing found is lost to an interruption. An interruption
//! (the machines' [`Interrupt`], raised by a signal) or a host-side error
//! in one branch ends the exploration between two exits of a machine; what
//! was merged until then is the result, and [`Ending`] says why it ended.
//!
//! This file is the loop; what it runs lives beside it: what it is asked
//! (`config.rs`), the root (`setup.rs`), a branch's run merged in
//! (`merge_branch.rs`), the tree kept in its budget (`eviction.rs`), the
//! exploration as it stands (`state.rs`) and what it hands out
//! (`watch.rs`).

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hvsim_guest_image::host::Host;
use hvsim_snapshot::{Cursor, SnapshotTree};
use hvsim_vmm::entropy::Stream;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::{Interrupt, Machine, Vtime};

use crate::record::bug::BugRecord;
use crate::record::config::ExploreConfig;
use crate::record::error::Result;
use crate::record::exploration::{Ending, Exploration, Policy};
use crate::record::story;
use crate::record::timeline::{branch_seed, LineChoice, Timeline};
use crate::run::bandit::Bandit;
use crate::run::branch::{BranchJob, Rules};
use crate::run::bugs::BugContext;
use crate::run::eviction::evict;
use crate::run::knowledge::Knowledge;
use crate::run::merge_branch::merge_run;
use crate::run::replay;
use crate::run::schedule::Schedule;
use crate::run::setup;
use crate::run::state::{interrupted, ms_f, State, TIME_UP};
use crate::run::steer::FirstDraw;
use crate::run::watch::{Progress, Watch, CHECKPOINT_EVERY};
use crate::run::workers::{Check, MachineSettings, Pool, Shared};
use crate::StartOptions;

/// Work on the exploration's own machine and snapshot tree after its last
/// round, before it ends: each bug's likelihood estimate
/// (`likelihood::Estimates`) comes in here, so that the loop needs nothing
/// from the triage layer above it (docs/architecture.md).
pub trait AfterRounds {
    fn after_rounds(&mut self, end: LastRound<'_>);
}

/// Nothing after the rounds (the loop's own tests and benchmarks).
impl AfterRounds for () {
    fn after_rounds(&mut self, _: LastRound<'_>) {}
}

/// What [`AfterRounds`] works with.
pub struct LastRound<'a> {
    pub config: &'a ExploreConfig,
    /// The exploration's bugs, in the order found.
    pub bugs: &'a mut [BugRecord],
    /// The virtual time all its branches ran.
    pub vtime_ns: u64,
    pub tree: &'a mut SnapshotTree,
    /// Where `machine` stands in `tree`.
    pub cursor: &'a mut Cursor,
    pub machine: &'a mut Machine,
    /// Raised when the exploration is being ended.
    pub interrupt: &'a Interrupt,
}

/// Explores `config.target`: the root, then rounds of branches until the
/// budget is spent, then `after` on the exploration's own machine and tree.
pub fn run(
    config: &ExploreConfig,
    host: &Host,
    watch: &mut dyn Watch,
    after: &mut dyn AfterRounds,
) -> Result<Exploration> {
    assert!(config.workers >= 1 && config.batch >= 1, "at least one worker and one branch per round");
    let target = &config.target;
    // The explorer raises it too, to end every machine's run on an error.
    let interrupt = config.start.interrupt.clone().unwrap_or_default();
    let start = StartOptions { interrupt: Some(interrupt.clone()), ..config.start.clone() };
    let _timer = config.budget.wall.map(|wall| WallTimer::start(wall, interrupt.clone()));
    let mut state = State::new(config, host)?;
    let world = state.world.clone();
    let cx = BugContext { target, world: &world, seed: config.seed };
    let (mut machine, branchable) = setup::root(config, host, &start, &cx, &mut state, &interrupt, watch)?;
    if !branchable && state.ending == Ending::Running {
        state.ending = Ending::Finished;
    }
    if state.ending != Ending::Running {
        return Ok(state.exploration(config, machine.take_guest_profile()));
    }
    state.known.new_coverage(&machine);
    if config.policy == Policy::Bandit {
        let plan = &machine.state().devices.virtio.schedule;
        state.bandit = Bandit::new(&plan.rules, plan.swarm, config.target.composer());
    }
    let taken = Instant::now();
    let (tree, cursor) = SnapshotTree::new(&mut machine)?;
    state.phases.snapshot_ms += ms_f(taken.elapsed());
    state.tree.bytes = tree.memory_bytes() as u64;
    state.tree.state_bytes = tree.state_bytes() as u64;
    state.tree.root_bytes = state.tree.bytes - state.tree.state_bytes;
    state.tree.peak_bytes = state.tree.bytes;
    let shared = Shared {
        tree: RwLock::new(tree),
        rules: Rules {
            span: config.span,
            every: config.snapshot_every,
            root: Vtime(state.root.point.vtime_ns),
            root_console_lines: machine.console_complete_lines(),
            snapshots: config.branch_from_snapshots,
            draws: config.branch_from_snapshots && config.policy.draws(),
            revisits: config.branch_from_snapshots && config.policy.steers(),
            checkers: config.checkers.clone(),
            claims: config.claims.clone(),
            nodes: story::nodes(target),
        },
        memory_may_differ: replay::memory_may_differ(target, host),
        live: Arc::default(),
    };
    watch.live(&shared.live);
    let settings = MachineSettings {
        hosts: (0..config.workers).map(|w| host.worker_settings(target.is_linux(), config.start.watchdog, w)).collect(),
        profiler: config.start.profiler,
        interrupt: interrupt.clone(),
    };
    state.schedule = Schedule::new(config.policy, Timeline::at(state.root.point), shared.tree().root());
    state.schedule.reached_before_root(&state.root_reached);
    state.schedule.set_up_by(state.set_up_by);
    let guest_profile = std::thread::scope(|scope| -> Result<Option<GuestProfile>> {
        let mut pool = Pool::start(scope, machine, cursor, &shared, &settings)?;
        branch_rounds(&mut pool, &shared, config, &cx, &mut state, &interrupt, watch);
        if state.ending == Ending::Running {
            // The last confirmations.
            let waiting = Instant::now();
            let unconfirmed = state.bugs.records.iter().filter(|b| !b.reproduction.confirmed());
            watch.progress(Progress::Confirming { bugs: unconfirmed.count() });
            let run = pool.run_checks(&shared, &mut |c| state.checked(c, watch, &interrupt));
            if let Err(e) = run {
                state.fail(&interrupt, "re-executions".into(), e);
            }
            state.phases.reexecution_wait_ms += ms_f(waiting.elapsed());
        }
        if state.ending == Ending::Running {
            let estimating = Instant::now();
            if config.likelihood.runs > 0 && !state.bugs.records.is_empty() {
                watch.progress(Progress::Estimating { bugs: state.bugs.records.len() });
            }
            let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
            let (machine, cursor) = pool.main_machine();
            after.after_rounds(LastRound {
                config,
                bugs: &mut state.bugs.records,
                vtime_ns: state.vtime_total,
                tree: &mut tree,
                cursor,
                machine,
                interrupt: &interrupt,
            });
            state.phases.likelihood_ms += ms_f(estimating.elapsed());
        }
        // An interrupt during the last confirmations or the estimates cut
        // them short: the exploration did not finish.
        if let (Ending::Running, Some(reason)) = (&state.ending, interrupt.reason()) {
            state.ending = interrupted(reason, state.branches);
        }
        if state.ending == Ending::Running {
            state.ending = Ending::Finished;
        }
        // Otherwise the interrupt is raised: checks still queued or
        // running end at their next exit.
        Ok(pool.finish())
    })?;
    // The time may have run out in the middle of the last round, whose
    // finished branches merged after.
    if let Ending::TimeSpent { branches } = &mut state.ending {
        *branches = state.branches;
    }
    Ok(state.exploration(config, guest_profile))
}

/// Rounds of `batch` branches until the budget is spent or the exploration
/// ends otherwise: picked from the nodes as they stand when the round
/// begins, run by every worker, merged in branch order. The exploration
/// depends on the batch, never on the workers.
fn branch_rounds(
    pool: &mut Pool,
    shared: &Shared,
    config: &ExploreConfig,
    cx: &BugContext,
    state: &mut State,
    interrupt: &Interrupt,
    watch: &mut dyn Watch,
) {
    let mut picker = Stream::new(config.seed, &config.shard.picker());
    let share = config.budget.branches.map(|b| config.shard.share(b));
    let mut checkpointed = Instant::now();
    // What ends the exploration by what it merged: decided after each
    // merged branch, so a round merges up to the same branch whatever the
    // workers. The wall clock ends it between rounds only, or through the
    // timer's interrupt: every branch of a round that finished merges.
    let spent = |s: &State| {
        (config.stop_at_first_bug && !s.bugs.records.is_empty())
            || s.saturated(config)
            || share.is_some_and(|b| s.branches >= b)
            || config.budget.vtime.is_some_and(|v| s.vtime_total >= v.nanos())
    };
    let time_up = |s: &State| config.budget.wall.is_some_and(|w| s.started.elapsed() >= w);
    while state.ending == Ending::Running && !spent(state) {
        if let Some(reason) = interrupt.reason() {
            state.ending = interrupted(reason, state.branches);
            break;
        }
        if time_up(state) {
            state.ending = Ending::TimeSpent { branches: state.branches };
            break;
        }
        let remaining = share.map_or(u64::MAX, |b| b - state.branches);
        let round = Arc::new(state.known.clone());
        // Decided from merged knowledge, the same for every branch of the round.
        let root = Vtime(state.root.point.vtime_ns);
        let winddown = if config.target.has_composer() {
            config.winddown.at(config.span, root, &state.known.composer)
        } else {
            None
        };
        // Each branch's share of what the budget has left (the tree is
        // within it between rounds): decided from merged state and the
        // batch, never the workers.
        let round_bytes = state.tree.bytes;
        let memory_share = state.tree.budget_bytes.saturating_sub(round_bytes) / config.batch as u64;
        let jobs: Vec<(BranchJob, Arc<Knowledge>)> = (1..=(config.batch as u64).min(remaining))
            .map(|k| {
                let branch = config.shard.branch(state.branches + k);
                let seed = branch_seed(config.seed, branch);
                // A revisit asked for by a merged branch goes first, while
                // the snapshot it starts from is held (`revisit.rs`).
                while state.revisits.front().is_some_and(|r| !state.schedule.holds(r.tree_id)) {
                    state.revisits.pop_front();
                }
                let job = if let Some(r) = state.revisits.pop_front() {
                    BranchJob { branch, memory_share, largest_delta: state.largest_delta, ..r }
                } else if config.branch_from_snapshots {
                    let assertions = &state.known.assertions;
                    let satisfied = |id: &str| assertions.by_id.get(id).is_some_and(|a| a.passes > 0);
                    let p = state.schedule.pick(&mut picker, &satisfied);
                    // A line of descent leaving the root: the bandit's.
                    let line = if p.tree_id == state.schedule.nodes()[0].tree_id {
                        state.bandit.choose(&mut picker)
                    } else {
                        LineChoice::default()
                    };
                    BranchJob {
                        branch,
                        seed,
                        tree_id: p.tree_id,
                        base: p.timeline,
                        draw: p.draw,
                        first_draw: p.first_draw,
                        winddown,
                        line,
                        lead: p.lead,
                        values: p.values,
                        memory_share,
                        largest_delta: state.largest_delta,
                        revisit: None,
                    }
                } else {
                    let root = &state.schedule.nodes()[0];
                    BranchJob {
                        branch,
                        seed,
                        tree_id: root.tree_id,
                        base: root.timeline.clone(),
                        draw: None,
                        first_draw: FirstDraw::Unarmed,
                        winddown,
                        line: state.bandit.choose(&mut picker),
                        lead: None,
                        values: Vec::new(),
                        memory_share,
                        largest_delta: state.largest_delta,
                        revisit: None,
                    }
                };
                tracing::debug!(branch, from = job.tree_id, seed = job.seed, draw = ?job.draw, lead = ?job.lead, values = ?job.values, revisit = ?job.revisit, "branch");
                (job, round.clone())
            })
            .collect();
        if let (Some(first), Some(last)) = (jobs.first(), jobs.last()) {
            watch.progress(Progress::Round { first: first.0.branch, last: last.0.branch, of: share });
        }
        let runs = match pool.run_round(jobs, shared, &mut |c| state.checked(c, watch, interrupt)) {
            Ok(runs) => runs,
            Err(e) => {
                state.fail(interrupt, format!("the round after {} branch(es)", state.branches), e);
                break;
            }
        };
        let bugs_before = state.bugs.records.len();
        let round_start = state.branches;
        // The most the tree and the round's snapshots held at once: every
        // branch that ran, merged or not.
        let held = runs.iter().flatten().fold(0u64, |sum, run| sum.saturating_add(run.snapshot_bytes));
        state.tree.peak_bytes = state.tree.peak_bytes.max(round_bytes.saturating_add(held));
        let mut merged: Option<u64> = None;
        for (k, run) in runs.into_iter().enumerate() {
            if spent(state) {
                break;
            }
            let run = match run {
                Ok(run) => run,
                Err(e) => {
                    // The exploration ends here (interrupted, or failed); the
                    // branches of the round that finished still merge, in
                    // order, so that no bug one of them saw is lost.
                    state.fail(interrupt, format!("branch {}", config.shard.branch(round_start + k as u64 + 1)), e);
                    continue;
                }
            };
            assert!(merged < Some(run.job.branch), "branches merge in order");
            merged = Some(run.job.branch);
            state.branches += 1;
            state.tree.snapshots_skipped += run.snapshots_skipped;
            state.largest_delta = state.largest_delta.max(run.largest_delta);
            let progress = merge_run(*run, state, shared, cx);
            watch.progress(Progress::Branch(progress));
        }
        state.found(bugs_before, watch, interrupt);
        if config.reexecutions > 0 && state.ending == Ending::Running {
            let checks = (bugs_before..state.bugs.records.len())
                .flat_map(|i| {
                    let record = Arc::new(state.bugs.records[i].clone());
                    (0..config.reexecutions).map(move |_| Check { bug: i, record: record.clone() })
                })
                .collect();
            pool.queue_checks(checks);
        }
        if config.workers == 1 && state.ending == Ending::Running {
            let waiting = Instant::now();
            if let Err(e) = pool.run_checks(shared, &mut |c| state.checked(c, watch, interrupt)) {
                state.fail(interrupt, "re-executions".into(), e);
            }
            state.phases.reexecution_wait_ms += ms_f(waiting.elapsed());
        }
        evict(state, shared);
        if checkpointed.elapsed() >= CHECKPOINT_EVERY && state.ending == Ending::Running {
            checkpointed = Instant::now();
            if let Err(e) = watch.checkpoint(&state.exploration(config, None)) {
                state.fail(interrupt, "writing the report".into(), e);
            }
        }
    }
}

/// The wall-time budget: when it is spent, the machines stop at their
/// next exit, whatever they are in the middle of (`TIME_UP`).
struct WallTimer {
    done: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WallTimer {
    fn start(wall: Duration, interrupt: Interrupt) -> WallTimer {
        let (done, wait) = crossbeam_channel::bounded::<()>(0);
        let thread = std::thread::spawn(move || {
            if wait.recv_timeout(wall) == Err(crossbeam_channel::RecvTimeoutError::Timeout) {
                interrupt.raise(TIME_UP);
            }
        });
        WallTimer { done: Some(done), thread: Some(thread) }
    }
}

impl Drop for WallTimer {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
