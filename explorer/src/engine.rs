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

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hvsim_guest_image::host::Host;
use hvsim_guest_image::world::World;
use hvsim_snapshot::{Delta, SnapshotTree};
use hvsim_vmm::entropy::Stream;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::{Interrupt, Machine, Stop, Vtime};

use crate::branch::{BranchJob, BranchRun, DrawStop, Failure, Rules};
use crate::bug::{BugKind, BugRecord, Later, Likelihood};
use crate::bugs::{BugContext, Bugs, Filed};
use crate::checkers::{CheckerSpec, CheckerTally};
use crate::claims::{ClaimSpec, ClaimTally, HarnessTally};
use crate::error::{ExploreError, Result};
use crate::exploration::{
    Budget, Ending, Exploration, Phases, Policy, RootInfo, SeriesPoint, TimelineEnds, TreeMemory,
};
use crate::faults::FaultTally;
use crate::knowledge::Knowledge;
use crate::likelihood;
use crate::replay;
use crate::roots::{RootId, Roots, SavedRoot};
use crate::schedule::{NewNode, Schedule};
use crate::shard::{Shard, Shards};
use crate::story;
use crate::timeline::{branch_seed, is_crash, point, Point, Segment, Span, Timeline};
use crate::workers::{Check, Checked, MachineSettings, Pool, Shared};
use crate::{StartOptions, Target};

#[derive(Clone, Debug)]
pub struct ExploreConfig {
    pub target: Target,
    pub seed: u64,
    pub budget: Budget,
    /// Virtual time each branch runs.
    /// How far each branch runs.
    pub span: Span,
    /// Snapshots at every multiple of this much virtual time from the root
    /// (`None`: only where something is new).
    pub snapshot_every: Option<Vtime>,
    /// The snapshot tree's page memory: above it, the least promising
    /// leaves are evicted between rounds (`u64::MAX`: no bound).
    pub snapshot_memory: u64,
    /// How long (virtual) to wait for setup complete before taking the root
    /// snapshot anyway.
    pub setup_limit: Vtime,
    /// `false`: every branch starts from the root (the baseline that
    /// `hvsim bench explore` compares against).
    pub branch_from_snapshots: bool,
    /// Stop as soon as a bug is found.
    pub stop_at_first_bug: bool,
    /// How many times each new bug's timeline is executed again to confirm
    /// it (0: not at all; its record then says `expected`).
    pub reexecutions: u32,
    /// How to boot the target; its `interrupt`, raised, ends the
    /// exploration.
    pub start: StartOptions,
    /// Branches per round: picked together, from the snapshots as they
    /// stand when the round begins, and merged in order. The exploration is
    /// a function of the seed and the batch (1: each branch sees all before it).
    pub batch: usize,
    /// Machines (threads) running a round's branches: speed only.
    pub workers: usize,
    /// Keep the root of a Linux target on disk, and start from a saved one
    /// (`roots.rs`).
    pub saved_roots: bool,
    /// Run the root even if a saved one exists (and save it again).
    pub fresh_root: bool,
    /// Where saved roots are kept: `None`, hvsim's cache; a directory
    /// shards share, where the root step left the root (docs/scale.md).
    pub roots_dir: Option<PathBuf>,
    /// Refuse to make the root: it must be a saved one, made by the same
    /// hvsim on the same world (a shard's root is made once, for all).
    pub require_root: bool,
    /// Which shard of the exploration this is (`shard.rs`); the default is
    /// the whole.
    pub shard: Shard,
    /// How branches pick their snapshot (`schedule.rs`).
    pub policy: Policy,
    /// Checkers run at the end of every timeline (`checkers.rs`).
    pub checkers: Vec<CheckerSpec>,
    /// The project's claims, observed at the end of every timeline
    /// (`claims.rs`).
    pub claims: Vec<ClaimSpec>,
    /// Each bug's likelihood over its timeline, estimated at the end
    /// (`likelihood.rs`).
    pub likelihood: likelihood::Params,
}

impl ExploreConfig {
    /// How long (virtual) the root waits for setup complete unless told:
    /// long enough for a cluster to form, short enough that a program that
    /// never reports it costs minutes, not an hour, on a slow host.
    pub fn default_setup_limit(linux: bool) -> Vtime {
        Vtime::from_secs(if linux { 60 } else { 10 })
    }
}

/// What an exploration hands out as it goes.
pub trait Watch {
    /// Where it stands, for a progress display.
    fn progress(&mut self, _: Progress) {}
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

/// How often (wall time) a running exploration is handed out whole.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(10);

/// The reason the explorer raises its machines' interrupt with when an
/// error ends the exploration.
const ENDED_BY_ERROR: usize = usize::MAX;

/// A view of the exploration so far, for progress displays.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// The root runs and has not reported setup complete yet.
    Setup { vtime: Vtime, limit: Vtime, elapsed: Duration },
    /// The root was restored from a saved root, which took `made_ms` of
    /// wall time to make.
    RootRestored { made_ms: u64 },
    /// A branch ended.
    Branch(BranchProgress),
}

#[derive(Clone, Copy, Debug)]
pub struct BranchProgress {
    pub branches: u64,
    pub snapshots: usize,
    pub signals: u64,
    pub bugs: usize,
    pub elapsed: Duration,
    pub phases: Phases,
}

/// The root's setup runs in steps of this much virtual time, with a
/// progress report after each.
const SETUP_STEP: Vtime = Vtime(10_000_000);

/// Milliseconds, with the fraction: phases sum many short stretches (a
/// branch of the demo takes 2-3 ms), which whole milliseconds would cut.
fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The reason the explorer's timer raises its machines' interrupt with
/// when the wall-time budget is spent: the exploration has finished.
const TIME_UP: usize = usize::MAX - 1;

/// How an exploration whose machines were interrupted for `reason` ended:
/// its wall-time budget was spent, or it was interrupted.
fn interrupted(reason: usize) -> Ending {
    if reason == TIME_UP {
        Ending::Finished
    } else {
        Ending::Interrupted { reason }
    }
}

/// Everything an [`Exploration`] is made of, as the loop keeps it.
struct State {
    started: Instant,
    known: Knowledge,
    bugs: Bugs,
    root: RootInfo,
    schedule: Schedule,
    branches: u64,
    vtime_total: u64,
    series: Vec<SeriesPoint>,
    first_bug: Option<(u64, u64)>,
    phases: Phases,
    faults: FaultTally,
    timelines: TimelineEnds,
    tree: TreeMemory,
    ending: Ending,
    checkers: Vec<CheckerTally>,
    claims: Vec<ClaimTally>,
    harness: HarnessTally,
    host_limits: Vec<String>,
    world: World,
}

impl State {
    fn exploration(&self, config: &ExploreConfig, guest_profile: Option<GuestProfile>) -> Exploration {
        Exploration {
            target: config.target.clone(),
            seed: config.seed,
            budget: config.budget,
            span: config.span,
            snapshot_every_ns: config.snapshot_every.map(Vtime::nanos),
            timelines: self.timelines,
            tree: self.tree,
            branch_from_snapshots: config.branch_from_snapshots,
            policy: config.policy,
            draws: self.schedule.draws,
            batch: config.batch,
            workers: config.workers,
            root: self.root.clone(),
            branches: self.branches,
            snapshots: self.schedule.len(),
            signals: self.known.signals.total,
            wall_ms: ms(self.started.elapsed()),
            vtime_ns: self.vtime_total,
            coverage_edges: self.known.signals.coverage.edges(),
            instrumentation: self.known.instrumentation.clone(),
            assertions: self.known.assertions.clone(),
            bugs: self.bugs.records.clone(),
            events: self.known.events.clone(),
            composer: self.known.composer.clone(),
            checkers: self.checkers.clone(),
            claims: self.claims.clone(),
            harness: self.harness.clone(),
            host_limits: self.host_limits.clone(),
            garbage: self.known.garbage.clone(),
            faults: self.faults.clone(),
            series: self.series.clone(),
            first_bug: self.first_bug,
            phases: self.phases,
            ending: self.ending.clone(),
            shards: Shards::of(config.shard),
            world: self.world.clone(),
            coverage: self.known.signals.coverage.bits(),
            guest_profile,
        }
    }

    /// Ends the exploration with `e`, which happened `during` something,
    /// unless it already ended: an error that follows an interruption is
    /// the interruption's doing.
    fn fail(&mut self, interrupt: &Interrupt, during: String, e: ExploreError) {
        if self.ending != Ending::Running {
            return;
        }
        self.ending = match interrupt.reason() {
            Some(reason) => interrupted(reason),
            None => Ending::Failed { during, error: e.to_string() },
        };
        interrupt.raise(ENDED_BY_ERROR);
    }

    /// Counts a finished check (a re-execution of a bug's timeline); the
    /// record goes out again once the bug is confirmed.
    fn checked(&mut self, c: Checked, watch: &mut dyn Watch, interrupt: &Interrupt) {
        self.phases.reexecution_ms += ms_f(c.took);
        match c.outcome {
            Ok(outcome) => {
                if self.bugs.reexecuted(c.bug, &outcome) {
                    let record = &self.bugs.records[c.bug];
                    tracing::debug!(bug = %record.id, "{}", record.reproduction_words());
                    if let Err(e) = watch.bug(record) {
                        self.fail(interrupt, format!("writing {}", record.id), e);
                    }
                }
            }
            Err(e) => {
                let during = format!("a re-execution of {}", self.bugs.records[c.bug].id);
                self.fail(interrupt, during, e);
            }
        }
    }

    /// Hands out the records of bugs found since `from` (their index).
    fn found(&mut self, from: usize, watch: &mut dyn Watch, interrupt: &Interrupt) {
        for i in from..self.bugs.records.len() {
            if let Err(e) = watch.bug(&self.bugs.records[i]) {
                self.fail(interrupt, format!("writing {}", self.bugs.records[i].id), e);
            }
        }
    }
}

pub fn explore(config: &ExploreConfig, host: &Host, watch: &mut dyn Watch) -> Result<Exploration> {
    assert!(config.workers >= 1 && config.batch >= 1, "at least one worker and one branch per round");
    let target = &config.target;
    // The explorer raises it too, to end every machine's run on an error.
    let interrupt = config.start.interrupt.clone().unwrap_or_default();
    let start = StartOptions { interrupt: Some(interrupt.clone()), ..config.start.clone() };
    let _timer = config.budget.wall.map(|wall| WallTimer::start(wall, interrupt.clone()));
    let mut state = State {
        started: Instant::now(),
        known: Knowledge::default(),
        bugs: Bugs::new(config.reexecutions),
        root: RootInfo { point: Point { events: 0, vtime_ns: 0 }, setup_complete: false, ended: None, restored: false },
        schedule: Schedule::default(),
        branches: 0,
        vtime_total: 0,
        series: Vec::new(),
        first_bug: None,
        phases: Phases::default(),
        faults: FaultTally::default(),
        timelines: TimelineEnds::default(),
        tree: TreeMemory { budget_bytes: config.snapshot_memory, ..TreeMemory::default() },
        ending: Ending::Running,
        checkers: config.checkers.iter().map(CheckerTally::new).collect(),
        claims: config.claims.iter().map(ClaimTally::new).collect(),
        harness: HarnessTally::default(),
        host_limits: host.probes.limits(),
        world: World::of(target, host)?,
    };
    let world = state.world.clone();
    let cx = BugContext { target, world: &world, seed: config.seed };
    // A Linux root is kept (roots.rs): a saved one is restored rather than
    // made again. Not with a guest profile, which covers the whole run.
    let roots = if config.saved_roots && target.is_linux() && !start.cold_boot && start.profiler.is_none() {
        let store = match &config.roots_dir {
            Some(dir) => Roots::open_at(dir.clone())?,
            None => Roots::open()?,
        };
        Some((store, RootId::new(target, &world, config.seed)?))
    } else {
        None
    };
    let restored = roots
        .as_ref()
        .filter(|_| !config.fresh_root)
        .and_then(|(roots, id)| roots.get(id, &host.settings(true, start.watchdog)))
        .filter(|(_, saved)| saved.point.vtime_ns <= config.setup_limit.nanos());
    if let (None, Some((roots, id)), true) = (&restored, &roots, config.require_root) {
        return Err(roots.missing(id));
    }
    let (mut machine, branchable) = match restored {
        Some((mut machine, saved)) => {
            start.prepare(&mut machine);
            machine.set_stop_on_message(true);
            restored_root(&mut machine, &saved, &mut state);
            state.phases.start_ms = ms_f(state.started.elapsed());
            watch.progress(Progress::RootRestored { made_ms: saved.wall_ms });
            (machine, true)
        }
        None => {
            let mut machine = target.start(config.seed, host, &start)?.machine;
            state.phases.start_ms = ms_f(state.started.elapsed());
            machine.set_stop_on_message(true);
            // Messages before the run (none, or the boot's) are not its own.
            let first_message = machine.messages().len();

            // The root: run until setup complete.
            let before = FaultTally::mark(&machine);
            let setup_started = Instant::now();
            let setup = setup(&mut machine, config, &cx, &mut state, watch);
            state.phases.setup_ms = ms_f(setup_started.elapsed());
            state.root.point = point(&machine);
            state.faults.add(&before, &machine);
            // False: the target ended after a bug, and there is no root.
            let branchable = setup.unwrap_or_else(|e| {
                state.fail(&interrupt, "the root's setup".into(), e);
                false
            });
            let clean = branchable && state.root.setup_complete && state.bugs.records.is_empty();
            if let Some((roots, id)) = roots.as_ref().filter(|_| clean && state.ending == Ending::Running) {
                let saved = SavedRoot {
                    id: id.clone(),
                    point: state.root.point,
                    faults: state.faults.clone(),
                    first_message,
                    wall_ms: state.phases.to_root_ms(),
                };
                // Losing it costs the next exploration time, nothing else;
                // but a root step's root is what its shards need.
                match roots.put(&saved, &mut machine) {
                    Err(e) if config.roots_dir.is_some() => return Err(e),
                    Err(e) => tracing::warn!("cannot save the root: {e}"),
                    Ok(()) => {}
                }
            }
            (machine, branchable)
        }
    };
    // Bugs before the root are re-executed from a fresh start.
    let checking = Instant::now();
    for i in 0..state.bugs.records.len() {
        for _ in 0..config.reexecutions {
            if state.ending != Ending::Running {
                break;
            }
            let took = Instant::now();
            // Before the root: no saved root is of use.
            let outcome = replay::replay(&state.bugs.records[i], host, &start, None, None, &mut ()).map(|(o, _)| o);
            state.checked(Checked { bug: i, outcome, took: took.elapsed() }, watch, &interrupt);
        }
    }
    state.phases.reexecution_wait_ms += ms_f(checking.elapsed());
    if !branchable && state.ending == Ending::Running {
        state.ending = Ending::Finished;
    }
    if state.ending != Ending::Running {
        return Ok(state.exploration(config, machine.take_guest_profile()));
    }
    state.known.new_coverage(&machine);
    let taken = Instant::now();
    let (tree, cursor) = SnapshotTree::new(&mut machine)?;
    state.phases.snapshot_ms += ms_f(taken.elapsed());
    state.tree.root_bytes = tree.memory_bytes() as u64;
    state.tree.bytes = state.tree.root_bytes;
    state.tree.peak_bytes = state.tree.root_bytes;
    let shared = Shared {
        tree: RwLock::new(tree),
        rules: Rules {
            span: config.span,
            every: config.snapshot_every,
            root: Vtime(state.root.point.vtime_ns),
            snapshots: config.branch_from_snapshots,
            draws: config.branch_from_snapshots && config.policy.draws(),
            checkers: config.checkers.clone(),
            claims: config.claims.clone(),
            nodes: story::nodes(target),
        },
        memory_may_differ: replay::memory_may_differ(target, host),
    };
    let settings = MachineSettings {
        hosts: (0..config.workers).map(|w| host.worker_settings(target.is_linux(), config.start.watchdog, w)).collect(),
        profiler: config.start.profiler,
        interrupt: interrupt.clone(),
    };
    state.schedule = Schedule::new(config.policy, Timeline::at(state.root.point), shared.tree().root());
    let guest_profile = std::thread::scope(|scope| -> Result<Option<GuestProfile>> {
        let mut pool = Pool::start(scope, machine, cursor, &shared, &settings)?;
        branch_rounds(&mut pool, &shared, config, &cx, &mut state, &interrupt, watch);
        if state.ending == Ending::Running {
            // The last confirmations.
            let waiting = Instant::now();
            let run = pool.run_checks(&shared, &mut |c| state.checked(c, watch, &interrupt));
            if let Err(e) = run {
                state.fail(&interrupt, "re-executions".into(), e);
            }
            state.phases.reexecution_wait_ms += ms_f(waiting.elapsed());
        }
        if state.ending == Ending::Running && config.likelihood.runs > 0 {
            let estimating = Instant::now();
            estimate_likelihoods(&mut pool, &shared, config, &mut state, &interrupt);
            state.phases.likelihood_ms += ms_f(estimating.elapsed());
        }
        if state.ending == Ending::Running {
            state.ending = Ending::Finished;
        }
        // Otherwise the interrupt is raised: checks still queued or
        // running end at their next exit.
        Ok(pool.finish())
    })?;
    Ok(state.exploration(config, guest_profile))
}

/// Each bug's likelihood over its timeline (`likelihood.rs`), on the
/// calling thread's machine, within the budget, in the order found.
fn estimate_likelihoods(
    pool: &mut Pool,
    shared: &Shared,
    config: &ExploreConfig,
    state: &mut State,
    interrupt: &Interrupt,
) {
    let params = config.likelihood;
    let mut budget = (params.budget.max(0.0) * state.vtime_total as f64) as u64;
    let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
    let (machine, cursor) = pool.main_machine();
    for i in 0..state.bugs.records.len() {
        let record = &state.bugs.records[i];
        if record.timeline.segments.is_empty() {
            let why = "found before the root: no branch starts before it".to_owned();
            state.bugs.records[i].likelihood = Some(Likelihood::unestimated(why));
            continue;
        }
        let horizon = match config.span {
            Span::Whole { limit } => Vtime(record.timeline.root.vtime_ns.saturating_add(limit.nanos())),
            Span::Slice(slice) => Vtime(record.at.vtime_ns.saturating_add(slice.nanos())),
        };
        match likelihood::estimate(record, params, horizon, &mut tree, cursor, machine, &mut budget) {
            Ok(l) => state.bugs.records[i].likelihood = Some(l),
            Err(_) if interrupt.raised() => return,
            Err(e) => {
                state.bugs.records[i].likelihood = Some(Likelihood::unestimated(format!("the estimate failed: {e}")))
            }
        }
    }
}

/// Takes in a saved root as if the exploration had just run it: what its
/// messages (every one since power-on) and coverage say, and the faults
/// that landed before it.
fn restored_root(machine: &mut Machine, saved: &SavedRoot, state: &mut State) {
    state.known.new_coverage(machine);
    let messages = machine.messages()[saved.first_message..].to_vec();
    for msg in messages {
        let o = state.known.process(&msg.bytes);
        assert!(o.bug.is_none(), "only roots reached without a bug are saved");
        state.root.setup_complete |= o.setup_complete;
    }
    assert!(state.root.setup_complete, "only roots at setup complete are saved");
    state.root.point = saved.point;
    state.root.restored = true;
    state.faults = saved.faults.clone();
}

/// Runs the root until the target reports setup complete (or the setup
/// limit): true. False if the target ended first after a bug (the end is
/// then in that bug's record); an error if it ended without one.
fn setup(
    machine: &mut Machine,
    config: &ExploreConfig,
    cx: &BugContext,
    state: &mut State,
    watch: &mut dyn Watch,
) -> Result<bool> {
    let setup_started = Instant::now();
    let mut first: Option<Filed> = None;
    while !state.root.setup_complete {
        let step = Vtime(machine.now().nanos().saturating_add(SETUP_STEP.nanos()).min(config.setup_limit.nanos()));
        match machine.run_until(step)? {
            Stop::Message => {
                state.known.new_coverage(machine);
                for msg in machine.take_messages() {
                    let o = state.known.process(&msg.bytes);
                    state.root.setup_complete |= o.setup_complete;
                    let Some(kind) = o.bug else { continue };
                    let at = point(machine);
                    match first {
                        None => {
                            let timeline = Timeline::at(at);
                            let failure = Failure::of(machine, &story::nodes(cx.target));
                            let filed = state.bugs.record(kind, timeline, &failure, &mut state.known.assertions, cx, 0);
                            first = Some(filed);
                            state.first_bug = Some((0, ms(state.started.elapsed())));
                            watch.bug(&state.bugs.records[filed.index])?;
                        }
                        Some(filed) => {
                            let later = Later { at, what: kind.describe() };
                            state.bugs.later(filed, &kind, later, &mut state.known.assertions);
                        }
                    }
                }
            }
            Stop::Deadline if step >= config.setup_limit => break,
            Stop::Deadline => watch.progress(Progress::Setup {
                vtime: machine.now(),
                limit: config.setup_limit,
                elapsed: setup_started.elapsed(),
            }),
            Stop::Ended(end) => {
                let Some(filed) = first else {
                    return Err(ExploreError::Target(format!(
                        "the target ended before reporting setup complete: {}",
                        end.detail()
                    )));
                };
                let what = BugKind::Crash { end: end.clone() }.describe();
                if is_crash(&end) {
                    let later = Later { at: point(machine), what: what.clone() };
                    state.bugs.later(filed, &BugKind::Crash { end: end.clone() }, later, &mut state.known.assertions);
                }
                state.root.ended = Some(end.detail());
                return Ok(false);
            }
        }
    }
    Ok(true)
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
    let exhausted = |s: &State| {
        (config.stop_at_first_bug && !s.bugs.records.is_empty())
            || share.is_some_and(|b| s.branches >= b)
            || config.budget.vtime.is_some_and(|v| s.vtime_total >= v.nanos())
            || config.budget.wall.is_some_and(|w| s.started.elapsed() >= w)
    };
    while state.ending == Ending::Running && !exhausted(state) {
        if let Some(reason) = interrupt.reason() {
            state.ending = interrupted(reason);
            break;
        }
        let remaining = share.map_or(u64::MAX, |b| b - state.branches);
        let round = Arc::new(state.known.clone());
        let jobs: Vec<(BranchJob, Arc<Knowledge>)> = (1..=(config.batch as u64).min(remaining))
            .map(|k| {
                let branch = config.shard.branch(state.branches + k);
                let seed = branch_seed(config.seed, branch);
                let job = if config.branch_from_snapshots {
                    let assertions = &state.known.assertions;
                    let satisfied = |id: &str| assertions.by_id.get(id).is_some_and(|a| a.passes > 0);
                    let p = state.schedule.pick(&mut picker, &satisfied);
                    BranchJob { branch, seed, tree_id: p.tree_id, base: p.timeline, draw: p.draw, arm_draw: p.arm_draw }
                } else {
                    let root = &state.schedule.nodes()[0];
                    BranchJob {
                        branch,
                        seed,
                        tree_id: root.tree_id,
                        base: root.timeline.clone(),
                        draw: None,
                        arm_draw: false,
                    }
                };
                tracing::debug!(branch, from = job.tree_id, seed, draw = ?job.draw, "branch");
                (job, round.clone())
            })
            .collect();
        let runs = match pool.run_round(jobs, shared, &mut |c| state.checked(c, watch, interrupt)) {
            Ok(runs) => runs,
            Err(e) => {
                state.fail(interrupt, format!("the round after {} branch(es)", state.branches), e);
                break;
            }
        };
        let bugs_before = state.bugs.records.len();
        for run in runs {
            if exhausted(state) {
                break;
            }
            let run = match run {
                Ok(run) => run,
                Err(e) => {
                    // Going on without the branch would make the result
                    // depend on the error; what came before it stands.
                    state.fail(interrupt, format!("branch {}", config.shard.branch(state.branches + 1)), e);
                    break;
                }
            };
            state.branches += 1;
            debug_assert_eq!(run.job.branch, config.shard.branch(state.branches), "branches merge in order");
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

/// Keeps the snapshot tree within its budget, between rounds: evicts the
/// leaves the schedule values least (`Schedule::evict`), and the deltas
/// that only led to them. Decided from the tree's contents and the
/// schedule alone, so it never changes with the workers or the host.
fn evict(state: &mut State, shared: &Shared) {
    let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
    let bytes = tree.memory_bytes() as u64;
    state.tree.peak_bytes = state.tree.peak_bytes.max(bytes);
    let root = tree.root();
    while tree.memory_bytes() as u64 > state.tree.budget_bytes {
        let Some(victim) = state.schedule.evict(&|id| id != root && tree.is_leaf(id)) else { break };
        tree.evict(victim);
        state.tree.evicted += 1;
        // Deltas that were only on the way to it.
        let mut up = tree.parent(victim);
        while let Some(id) = up.filter(|&id| id != root && tree.is_leaf(id)) {
            if state.schedule.holds(id) {
                break;
            }
            tree.evict(id);
            up = tree.parent(id);
        }
    }
    state.tree.bytes = tree.memory_bytes() as u64;
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

/// Adds a branch a worker ran to the exploration, with its progress.
fn merge_run(run: BranchRun, state: &mut State, shared: &Shared, cx: &BugContext) -> BranchProgress {
    state.phases.restore_ms += ms_f(run.restore);
    state.phases.snapshot_ms += ms_f(run.snapshot);
    state.phases.branches_ms += ms_f(run.run);
    state.phases.story_ms += ms_f(run.story_took());
    state.vtime_total += run.vtime_ns;
    state.faults.merge(&run.faults);
    for c in &run.checked {
        let tally = state.checkers.iter_mut().find(|t| t.spec.name == c.checker).expect("a configured checker");
        tally.add(c);
    }
    assert_eq!(run.claims.claims.len(), state.claims.len(), "every claim is observed in every timeline");
    for (tally, e) in state.claims.iter_mut().zip(&run.claims.claims) {
        tally.add(e, run.job.branch);
    }
    state.harness.add(run.claims.harness.as_ref());
    if run.end.is_some() {
        state.timelines.ended += 1;
    } else {
        state.timelines.at_limit += 1;
    }
    let branch = run.job.branch;
    let new_edges = merge(run, &mut state.known, &mut state.bugs, &mut state.schedule, shared, cx);
    for tally in state.checkers.iter_mut().filter(|t| t.bug.is_none()) {
        tally.bug = state.bugs.records.iter().find(|b| b.bug.checker() == Some(&tally.spec.name)).map(|b| b.id.clone());
    }
    if state.first_bug.is_none() && !state.bugs.records.is_empty() {
        // Time to find it, not to check it.
        let found = ms(state.started.elapsed()).saturating_sub(state.phases.reexecution_wait_ms as u64);
        state.first_bug = Some((branch, found));
    }
    let p = BranchProgress {
        branches: state.branches,
        snapshots: state.schedule.len(),
        signals: state.known.signals.total,
        bugs: state.bugs.records.len(),
        elapsed: state.started.elapsed(),
        phases: state.phases,
    };
    state.series.push(SeriesPoint {
        branch,
        wall_ms: ms(p.elapsed),
        snapshots: p.snapshots,
        signals: p.signals,
        bugs: p.bugs,
        new_edges,
        edges: state.known.signals.coverage.edges(),
    });
    p
}

/// Adds a branch a worker ran to the exploration: its coverage and
/// messages (judged against everything merged before it), its first
/// failure as a bug and what failed after it as that bug's consequences,
/// what it reached to the schedule, and each snapshot before that failure
/// that is still new (or a draw point still wanted) as a node to branch
/// from (with the snapshots before it in the branch, which its pages build
/// on). Returns the coverage edges it reached first.
fn merge(
    run: BranchRun,
    known: &mut Knowledge,
    bugs: &mut Bugs,
    schedule: &mut Schedule,
    shared: &Shared,
    cx: &BugContext,
) -> u64 {
    /// A stop as the merge judged it.
    struct Judged {
        timeline: Timeline,
        new_here: u64,
        features: Vec<String>,
        /// Something new here was progress (new edges, or a feature that
        /// is not a sometimes-type assertion's first failing evaluation).
        progress: bool,
        /// A feature new here was progress: the timeline went deeper.
        deeper: bool,
        watermarks: Vec<String>,
        snapshot: Option<Delta>,
        interval: bool,
        draw: Option<DrawStop>,
    }
    let BranchJob { branch, seed, tree_id, base, draw, .. } = run.job;
    let segment = |until| Segment { seed, draw, until };
    let mut new_edges = 0;
    // The branch's first failure, and the stop it showed at.
    let mut first: Option<(Filed, usize)> = None;
    // Every feature the branch reached, and (by stop) the assertions it
    // reached without satisfying.
    let mut reached = Vec::new();
    let mut approaches: Vec<(usize, String)> = Vec::new();
    let mut stops = Vec::with_capacity(run.stops.len());
    for (i, stop) in run.stops.into_iter().enumerate() {
        let timeline = base.then(segment(stop.at));
        let covered = known.merge_coverage(&stop.coverage);
        new_edges += covered;
        let mut judged = Judged {
            timeline,
            new_here: covered,
            features: Vec::new(),
            progress: covered > 0,
            deeper: false,
            watermarks: Vec::new(),
            snapshot: stop.snapshot,
            interval: stop.interval,
            draw: stop.draw,
        };
        for msg in &stop.messages {
            let o = known.process(msg);
            judged.new_here += o.new_signals;
            new_edges += o.new_edges;
            judged.progress |= o.progress;
            if let Some(r) = o.reached {
                if o.new_signals > 0 {
                    judged.deeper |= o.progress;
                    judged.features.push(r.clone());
                }
                reached.push(r);
            }
            approaches.extend(o.approached.map(|a| (i, a)));
            judged.watermarks.extend(o.watermark);
            let Some(kind) = o.bug else { continue };
            match first {
                None => {
                    // The worker judged the same message the same way.
                    let failure = stop.failure.as_ref().expect("the worker fingerprints a branch's first failure");
                    let timeline = judged.timeline.clone();
                    first = Some((bugs.record(kind, timeline, failure, &mut known.assertions, cx, branch), i));
                }
                Some((filed, _)) => {
                    let later = Later { at: stop.at, what: kind.describe() };
                    bugs.later(filed, &kind, later, &mut known.assertions);
                }
            }
        }
        if judged.new_here > 0 && first.is_none() {
            tracing::debug!(branch, signals = judged.new_here, "something new");
            assert!(
                judged.snapshot.is_some() || !shared.rules.snapshots,
                "branch {branch}: new to the exploration but not to the branch"
            );
        }
        stops.push(judged);
    }
    new_edges += known.merge_coverage(&run.end_coverage);
    if let Some(end) = run.end.filter(is_crash) {
        let kind = BugKind::Crash { end };
        match (first, &run.crash) {
            (None, Some(failure)) => {
                let timeline = base.then(segment(failure.at));
                let filed = bugs.record(kind, timeline, failure, &mut known.assertions, cx, branch);
                first = Some((filed, stops.len()));
            }
            (Some((filed, _)), _) => {
                let later = Later { at: run.end_at, what: kind.describe() };
                bugs.later(filed, &kind, later, &mut known.assertions);
            }
            (None, None) => unreachable!("the worker fingerprints a crash that is the branch's first failure"),
        }
    }
    if let Some((violation, failure)) = run.violation {
        let kind = BugKind::Checker { checker: violation.spec.clone(), summary: violation.judgement.summary.clone() };
        match (first, failure) {
            (None, Some(failure)) => {
                let timeline = base.then(segment(failure.at));
                let filed = bugs.record(kind, timeline, &failure, &mut known.assertions, cx, branch);
                if filed.new {
                    bugs.records[filed.index].history = Some(violation.finding());
                }
                first = Some((filed, stops.len()));
            }
            (Some((filed, _)), _) => {
                let later = Later { at: run.end_at, what: kind.describe() };
                bugs.later(filed, &kind, later, &mut known.assertions);
            }
            (None, None) => unreachable!("the worker fingerprints a violation that is the branch's first failure"),
        }
    }
    if let Some((filed, _)) = first.filter(|(f, _)| f.new) {
        bugs.records[filed.index].console_after = run.console_after;
    }
    let fruitful = new_edges > 0 || stops.iter().any(|s| s.new_here > 0) || first.is_some_and(|(f, _)| f.new);
    let all_approached: Vec<String> = approaches.iter().map(|(_, a)| a.clone()).collect();
    schedule.branch_merged(tree_id, &reached, &all_approached, fruitful);
    // A draw point stays one if what armed it is still new here (or, armed
    // at the branch's start, if no other branch from there made one).
    let mut start_draw_wanted = schedule.draw_child_wanted(tree_id);
    for i in 0..stops.len() {
        let keep = match stops[i].draw {
            Some(DrawStop { armed_by: Some(j), .. }) => stops[j].progress,
            Some(DrawStop { armed_by: None, .. }) => std::mem::take(&mut start_draw_wanted),
            None => false,
        };
        if !keep {
            stops[i].draw = None;
        }
    }
    // A stop is a place to branch from if something was new there, it is
    // an interval stop, or a draw point; snapshots after the branch's last
    // such place before its first failure are of no use.
    let before_failure = first.map_or(stops.len(), |(_, at)| at);
    let node_here = |s: &Judged| s.snapshot.is_some() && (s.new_here > 0 || s.interval || s.draw.is_some());
    let kept = stops[..before_failure].iter().rposition(node_here).map_or(0, |i| i + 1);
    let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
    let mut parent = tree_id;
    let mut last_node = None;
    let mut novel_stops = 0;
    for (i, s) in stops.into_iter().take(kept).enumerate() {
        // Progress along a chain of properties; new edges alone are not.
        novel_stops += u32::from(s.deeper);
        let is_node = node_here(&s);
        let Some(delta) = s.snapshot else { continue };
        parent = tree.insert(parent, delta);
        if !is_node {
            continue;
        }
        // A draw point is the draw after the branch's last node before it
        // (or its start): that one makes no other.
        let draw_parent = s.draw.map(|_| last_node.unwrap_or(tree_id));
        last_node = Some(parent);
        let after: Vec<String> = approaches.iter().filter(|(at, _)| *at > i).map(|(_, a)| a.clone()).collect();
        let node = NewNode {
            timeline: s.timeline,
            tree_id: parent,
            novel_stops,
            signals: s.new_here,
            features: &s.features,
            interval: s.interval && s.new_here == 0,
            draw: s.draw.map(|d| d.options),
            approaches: &after,
            watermarks: &s.watermarks,
        };
        schedule.add(node, tree_id, draw_parent);
    }
    new_edges
}
