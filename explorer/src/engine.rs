//! The exploration loop.
//!
//! Boot the target with the master seed and run it until it reports setup
//! complete: that is the root snapshot. Then, branch after branch: pick a
//! snapshot (weighted by energy), reset the machine to it, re-seed every
//! stream from (master seed, branch number), and run a slice of virtual
//! time. Each SDK message is checked for something new (an assertion state
//! never seen, a better numeric or boolean watermark, a coverage edge) and
//! for a bug (an always-type assertion failing, an unreachable point
//! reached, the guest crashing). Where something is new, the machine is
//! snapshotted, and that snapshot gets energy to be branched from. Every
//! decision depends only on the master seed, so an exploration with a
//! branch budget is itself reproducible. A new bug's timeline is executed
//! again from the root (from the root snapshot, or a fresh start for a bug
//! found before it) a few times before the bug is reported, and a bug that
//! does not come back the same every time is reported as flaky.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use hvsim_guest_image::host::Host;
use hvsim_guest_image::world::World;
use hvsim_snapshot::SnapshotTree;
use hvsim_vmm::entropy::Stream;
use hvsim_vmm::faults::FaultReport;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::{End, Machine, Stop, Vtime};
use serde::{Deserialize, Serialize};

use crate::assertions::Assertions;
use crate::branch::{BranchJob, BranchRun, Failure, Rules};
use crate::bug::{self, BugKind, BugRecord};
use crate::coverage::{Coverage, FreshBits};
use crate::error::{ExploreError, Result};
use crate::sdk::{self, SdkMessage};
use crate::timeline::{branch_seed, Point, Segment, Timeline};
use crate::workers::{Done, Job, MachineSettings, Pool, Shared};
use crate::{StartOptions, Target};

/// When to stop exploring. With only a branch budget an exploration is a
/// pure function of its master seed; a wall-time budget trades that for a
/// bound on how long it takes.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Budget {
    pub branches: Option<u64>,
    pub wall: Option<Duration>,
    /// Total virtual time run across all branches.
    pub vtime: Option<Vtime>,
}

#[derive(Clone, Debug)]
pub struct ExploreConfig {
    pub target: Target,
    pub seed: u64,
    pub budget: Budget,
    /// Virtual time each branch runs.
    pub slice: Vtime,
    /// How long (virtual) to wait for setup complete before taking the root
    /// snapshot anyway.
    pub setup_limit: Vtime,
    /// `false`: every branch starts from the root (the baseline that
    /// `hvsim bench explore` compares against).
    pub branch_from_snapshots: bool,
    /// Stop as soon as a bug is found.
    pub stop_at_first_bug: bool,
    /// How many times each new bug's timeline is executed again before the
    /// bug is reported (0: not at all; its record then says `expected`).
    pub reexecutions: u32,
    /// How to boot the target.
    pub start: StartOptions,
    /// Branches per round: picked together, from the snapshots as they
    /// stand when the round begins, and merged in order. The exploration is
    /// a function of the seed and the batch (1: each branch sees all before it).
    pub batch: usize,
    /// Machines (threads) running a round's branches: speed only.
    pub workers: usize,
}

impl ExploreConfig {
    /// How long (virtual) the root waits for setup complete unless told:
    /// long enough for a cluster to form, short enough that a program that
    /// never reports it costs minutes, not an hour, on a slow host.
    pub fn default_setup_limit(linux: bool) -> Vtime {
        Vtime::from_secs(if linux { 60 } else { 10 })
    }
}

/// A snapshot the explorer can branch from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Node {
    pub timeline: Timeline,
    pub energy: f64,
    pub picks: u64,
    #[serde(skip)]
    tree_id: usize,
}

/// What was learned from messages, across every timeline.
#[derive(Clone, Debug, Default)]
struct Signals {
    /// The best value of each numeric guidance so far.
    numeric: HashMap<String, f64>,
    /// The best count of true conditions of each boolean guidance so far.
    boolean: HashMap<String, u64>,
    /// The values of each JSON guidance seen so far (at most
    /// [`MAX_JSON_VALUES`] each).
    json: HashMap<String, HashSet<String>>,
    coverage: Coverage,
    total: u64,
}

/// Distinct values of one JSON guidance that count as progress.
const MAX_JSON_VALUES: usize = 1000;

/// What an exploration learned about the program's instrumentation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Instrumentation {
    /// Each distinct SDK identification (`antithesis_sdk`) received.
    pub sdks: Vec<serde_json::Value>,
    /// Instrumented modules: name, edges, base (`hvsim_coverage_module`).
    pub coverage_modules: BTreeMap<String, (u64, u64)>,
}

/// Garbage on the SDK channel: counted, a few kept as examples.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Garbage {
    pub count: u64,
    pub examples: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub branch: u64,
    pub wall_ms: u64,
    pub snapshots: usize,
    pub signals: u64,
    pub bugs: usize,
    /// Coverage edges this branch's timeline reached first.
    #[serde(default)]
    pub new_edges: u64,
    /// Coverage edges reached so far, over every timeline.
    #[serde(default)]
    pub edges: usize,
}

/// How the root snapshot was reached.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RootInfo {
    pub point: Point,
    /// False if the target never reported setup complete within the limit.
    pub setup_complete: bool,
}

/// Everything an exploration produced.
#[derive(Debug, Serialize, Deserialize)]
pub struct Exploration {
    pub target: Target,
    pub seed: u64,
    pub budget: Budget,
    pub slice_ns: u64,
    pub branch_from_snapshots: bool,
    /// Branches per round, and the workers that ran them (see
    /// [`ExploreConfig::batch`]).
    #[serde(default = "one")]
    pub batch: usize,
    #[serde(default = "one")]
    pub workers: usize,
    pub root: RootInfo,
    pub branches: u64,
    pub snapshots: usize,
    pub signals: u64,
    pub wall_ms: u64,
    pub vtime_ns: u64,
    pub assertions: Assertions,
    pub bugs: Vec<BugRecord>,
    pub events: BTreeMap<String, u64>,
    pub garbage: Garbage,
    pub faults: FaultTally,
    pub coverage_edges: usize,
    pub instrumentation: Instrumentation,
    pub series: Vec<SeriesPoint>,
    /// Branch at which the first bug appeared, and how long it took.
    pub first_bug: Option<(u64, u64)>,
    pub phases: Phases,
    /// With `--profile-guest`: the samples of the root run and every branch.
    #[serde(skip)]
    pub guest_profile: Option<GuestProfile>,
}

/// Landing evidence summed over every timeline: per configured fault kind,
/// how many packets or requests it touched in the root run and in all
/// branches (each branch counts only what it did after its snapshot).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FaultTally(pub BTreeMap<String, u64>);

impl FaultTally {
    pub(crate) fn landed(m: &Machine) -> Vec<FaultReport> {
        m.state().devices.virtio.fault_report()
    }

    /// Adds what happened between the `before` report and now.
    pub(crate) fn add(&mut self, before: &[FaultReport], m: &Machine) {
        for now in Self::landed(m) {
            let was = before.iter().find(|b| b.kind == now.kind).map_or(0, |b| b.landed);
            debug_assert!(now.landed >= was, "fault counters only grow within a timeline");
            *self.0.entry(now.kind).or_insert(0) += now.landed.saturating_sub(was);
        }
    }

    /// Adds another tally (a branch's).
    pub(crate) fn merge(&mut self, other: &FaultTally) {
        for (kind, landed) in &other.0 {
            *self.0.entry(kind.clone()).or_insert(0) += landed;
        }
    }

    pub fn reports(&self) -> Vec<FaultReport> {
        self.0.iter().map(|(kind, &landed)| FaultReport::new(kind, landed)).collect()
    }
}

/// A view of the exploration so far, for progress displays.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// The root runs and has not reported setup complete yet.
    Setup { vtime: Vtime, limit: Vtime, elapsed: Duration },
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

/// Where an exploration's wall time went, in milliseconds. Branches,
/// restores and snapshots are summed over the workers: with several, they
/// add up to more than the wall time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Phases {
    /// Booting the target, or restoring it from the boot cache.
    pub start_ms: u64,
    /// Running the root until setup complete (or the setup limit).
    pub setup_ms: u64,
    /// Running branches.
    pub branches_ms: u64,
    /// Putting snapshots back at the start of branches.
    pub restore_ms: u64,
    /// Taking snapshots.
    pub snapshot_ms: u64,
    /// Executing new bugs' timelines again, to check they reproduce.
    #[serde(default)]
    pub reexecution_ms: u64,
}

/// The root's setup runs in steps of this much virtual time, with a
/// progress report after each.
const SETUP_STEP: Vtime = Vtime(10_000_000);

fn one() -> usize {
    1
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What messages taught the exploration: everything that decides whether
/// a message brings something new. A worker judges its branch against a
/// copy taken when the branch's round began.
#[derive(Clone, Debug, Default)]
pub(crate) struct Knowledge {
    assertions: Assertions,
    signals: Signals,
    events: BTreeMap<String, u64>,
    garbage: Garbage,
    instrumentation: Instrumentation,
}

/// What one message meant.
#[derive(Default)]
pub(crate) struct Outcome {
    pub new_signals: u64,
    /// Coverage edges never seen before (also counted in `new_signals`).
    pub new_edges: u64,
    pub bug: Option<BugKind>,
    pub setup_complete: bool,
}

impl Knowledge {
    pub(crate) fn process(&mut self, line: &[u8]) -> Outcome {
        let mut o = Outcome::default();
        match sdk::parse(line) {
            SdkMessage::Assert(a) => {
                let seen = self.assertions.observe(&a);
                o.new_signals += u64::from(seen.new_state);
                if seen.failed {
                    o.bug = Some(BugKind::from_assertion(&a));
                }
            }
            SdkMessage::Numeric { id, value, maximize } => {
                let better = |old: f64| if maximize { value > old } else { value < old };
                let best = self.signals.numeric.entry(id).or_insert(f64::NAN);
                if best.is_nan() || better(*best) {
                    *best = value;
                    o.new_signals += 1;
                }
            }
            SdkMessage::Boolean { id, true_count, maximize } => {
                let better = |old: u64| {
                    if maximize {
                        true_count > old
                    } else {
                        true_count < old
                    }
                };
                match self.signals.boolean.get_mut(&id) {
                    Some(best) if !better(*best) => {}
                    Some(best) => {
                        *best = true_count;
                        o.new_signals += 1;
                    }
                    None => {
                        self.signals.boolean.insert(id, true_count);
                        o.new_signals += 1;
                    }
                }
            }
            SdkMessage::Json { id, value } => {
                let seen = self.signals.json.entry(id).or_default();
                if seen.len() < MAX_JSON_VALUES && seen.insert(value.to_string()) {
                    o.new_signals += 1;
                }
            }
            SdkMessage::GuidanceRegistered { .. } => {}
            SdkMessage::Coverage { edges } => {
                for e in edges {
                    o.new_edges += u64::from(self.signals.coverage.add_edge(e));
                }
                o.new_signals += o.new_edges;
            }
            SdkMessage::CoverageModule { name, edges, base } => {
                self.instrumentation.coverage_modules.insert(name, (edges, base));
            }
            SdkMessage::SetupComplete { .. } => o.setup_complete = true,
            SdkMessage::Event { name, .. } => *self.events.entry(name).or_insert(0) += 1,
            SdkMessage::SdkInfo(info) => {
                if !self.instrumentation.sdks.contains(&info) {
                    self.instrumentation.sdks.push(info);
                }
            }
            SdkMessage::Garbage(why) => {
                self.garbage.count += 1;
                if self.garbage.examples.len() < 10 {
                    self.garbage.examples.push(why);
                }
            }
        }
        self.signals.total += o.new_signals;
        o
    }

    /// Edges the guest's coverage map shows that no timeline reached before
    /// (counted as signals).
    pub(crate) fn new_coverage(&mut self, m: &Machine) -> FreshBits {
        let fresh = m.coverage_map().map(|map| self.signals.coverage.merge_map(map)).unwrap_or_default();
        self.signals.total += fresh.count();
        fresh
    }

    /// Adds coverage a worker found; returns how many edges are new here.
    fn merge_coverage(&mut self, fresh: &FreshBits) -> u64 {
        let new = self.signals.coverage.merge_bits(fresh);
        self.signals.total += new;
        new
    }
}

/// The bugs found so far.
#[derive(Default)]
struct Bugs {
    records: Vec<BugRecord>,
    by_signature: HashMap<String, usize>,
    /// New bugs not re-executed yet (indices into `records`).
    unchecked: Vec<usize>,
}

/// What every bug record of one exploration shares.
struct BugContext<'a> {
    target: &'a Target,
    world: &'a World,
    seed: u64,
}

impl Bugs {
    /// Records a bug unless one with the same signature exists (then counts
    /// it). A new bug waits in `unchecked` for its re-executions.
    fn record(
        &mut self,
        kind: BugKind,
        timeline: Timeline,
        failure: &Failure,
        known: &mut Knowledge,
        cx: &BugContext,
        branch: u64,
    ) {
        let signature = kind.signature();
        if let Some(&i) = self.by_signature.get(&signature) {
            self.records[i].occurrences += 1;
            return;
        }
        let id = format!("BUG-{}", self.records.len() + 1);
        tracing::debug!(bug = %id, at = failure.at.events, "{}", kind.describe());
        if let BugKind::Assertion { id: assertion, .. } = &kind {
            if let Some(r) = known.assertions.by_id.get_mut(assertion) {
                r.bug.get_or_insert(id.clone());
            }
        }
        self.by_signature.insert(signature, self.records.len());
        let mut record = BugRecord::new(
            id,
            kind,
            failure.at,
            timeline,
            cx.target.clone(),
            cx.seed,
            branch,
            cx.world.clone(),
            failure.fingerprint.clone(),
        );
        record.console_tail = failure.console_tail.clone();
        self.unchecked.push(self.records.len());
        self.records.push(record);
    }
    /// Executes each new bug's timeline `times` times again, from the root
    /// snapshot, on every worker, and counts what came back.
    fn reexecute_new(&mut self, pool: &mut Pool, shared: &Shared, times: u32) -> Result<()> {
        let unchecked = std::mem::take(&mut self.unchecked);
        let jobs = unchecked
            .iter()
            .flat_map(|&i| {
                let record = Arc::new(self.records[i].clone());
                (0..times).map(move |_| Job::Reexecute(record.clone()))
            })
            .collect();
        let mut outcomes = pool.run(jobs, shared)?.into_iter();
        for &i in &unchecked {
            for done in outcomes.by_ref().take(times as usize) {
                let Done::Reexecuted(outcome) = done else { unreachable!("a re-execution returns its outcome") };
                self.records[i].count_reexecution(&outcome);
            }
            tracing::debug!(bug = %self.records[i].id, "{}", self.records[i].reproduction_words());
        }
        Ok(())
    }
}

pub(crate) fn point(m: &Machine) -> Point {
    Point { events: m.trace_state().events, vtime_ns: m.now().nanos() }
}

/// Whether a run ending this way is a crash (a bug) rather than a finish.
pub fn is_crash(end: &End) -> bool {
    !matches!(end, End::Exit { status: 0 } | End::VtimeLimit)
}

/// Energy-weighted choice of a node, drawing from the explorer's stream.
fn pick(nodes: &[Node], stream: &mut Stream) -> usize {
    let total: f64 = nodes.iter().map(|n| n.energy).sum();
    let mut x = (stream.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    for (i, n) in nodes.iter().enumerate() {
        if x < n.energy {
            return i;
        }
        x -= n.energy;
    }
    nodes.len() - 1
}

const NEW_NODE_ENERGY: f64 = 1.0;
const ENERGY_PER_SIGNAL: f64 = 2.0;
const ENERGY_DECAY: f64 = 0.8;
const MIN_ENERGY: f64 = 0.05;

pub fn explore(config: &ExploreConfig, host: &Host, progress: &mut dyn FnMut(Progress)) -> Result<Exploration> {
    assert!(config.workers >= 1 && config.batch >= 1, "at least one worker and one branch per round");
    let start = Instant::now();
    let target = &config.target;
    let mut phases = Phases::default();
    let world = World::of(target, host)?;
    let cx = BugContext { target, world: &world, seed: config.seed };
    let mut machine = target.start(config.seed, host, &config.start)?.machine;
    phases.start_ms = ms(start.elapsed());
    machine.set_stop_on_message(true);
    let mut known = Knowledge::default();
    let mut bugs = Bugs::default();

    // The root: run until setup complete.
    let mut faults = FaultTally::default();
    let before = FaultTally::landed(&machine);
    let mut setup_complete = false;
    let setup_started = Instant::now();
    while !setup_complete {
        let step = Vtime(machine.now().nanos().saturating_add(SETUP_STEP.nanos()).min(config.setup_limit.nanos()));
        match machine.run_until(step)? {
            Stop::Message => {
                known.new_coverage(&machine);
                for msg in machine.take_messages() {
                    let o = known.process(&msg.bytes);
                    setup_complete |= o.setup_complete;
                    if let Some(kind) = o.bug {
                        let timeline = Timeline { root: point(&machine), segments: vec![] };
                        bugs.record(kind, timeline, &Failure::of(&machine), &mut known, &cx, 0);
                    }
                }
            }
            Stop::Deadline if step >= config.setup_limit => break,
            Stop::Deadline => progress(Progress::Setup {
                vtime: machine.now(),
                limit: config.setup_limit,
                elapsed: setup_started.elapsed(),
            }),
            Stop::Ended(end) => {
                return Err(ExploreError::Target(format!(
                    "the target ended before reporting setup complete: {}",
                    end.detail()
                )))
            }
        }
    }
    phases.setup_ms = ms(setup_started.elapsed());
    // Bugs before the root are re-executed from a fresh start.
    let checking = Instant::now();
    for i in std::mem::take(&mut bugs.unchecked) {
        for _ in 0..config.reexecutions {
            let outcome = bug::replay(&bugs.records[i], host, &config.start, None)?;
            bugs.records[i].count_reexecution(&outcome);
        }
    }
    phases.reexecution_ms += ms(checking.elapsed());
    known.new_coverage(&machine);
    faults.add(&before, &machine);
    let root = RootInfo { point: point(&machine), setup_complete };
    let taken = Instant::now();
    let (tree, cursor) = SnapshotTree::new(&mut machine)?;
    phases.snapshot_ms += ms(taken.elapsed());
    let shared = Shared {
        tree: RwLock::new(tree),
        rules: Rules { slice: config.slice, snapshots: config.branch_from_snapshots },
        memory_may_differ: bug::memory_may_differ(target, host),
    };
    let settings = MachineSettings {
        hosts: (0..config.workers).map(|w| host.worker_settings(target.is_linux(), config.start.watchdog, w)).collect(),
        profiler: config.start.profiler,
    };

    let mut nodes = vec![Node {
        timeline: Timeline { root: root.point, segments: vec![] },
        energy: NEW_NODE_ENERGY,
        picks: 0,
        tree_id: shared.tree().root(),
    }];
    let mut picker = Stream::new(config.seed, "explorer");
    let mut branches = 0u64;
    let mut vtime_total = 0u64;
    let mut series = Vec::new();
    let mut first_bug = (!bugs.records.is_empty()).then_some((0, 0));
    let exhausted = |branches: u64, vtime: u64, bugs: usize| {
        (config.stop_at_first_bug && bugs > 0)
            || config.budget.branches.is_some_and(|b| branches >= b)
            || config.budget.vtime.is_some_and(|v| vtime >= v.nanos())
    };
    let guest_profile = std::thread::scope(|scope| -> Result<Option<GuestProfile>> {
        let mut pool = Pool::start(scope, machine, cursor, &shared, &settings)?;
        // Rounds of `batch` branches: picked from the nodes as they stand
        // when the round begins, run by every worker, merged in branch
        // order. The exploration depends on the batch, never on the workers.
        while !exhausted(branches, vtime_total, bugs.records.len())
            && config.budget.wall.is_none_or(|w| start.elapsed() < w)
        {
            let remaining = config.budget.branches.map_or(u64::MAX, |b| b - branches);
            let round = Arc::new(known.clone());
            let jobs: Vec<Job> = (1..=(config.batch as u64).min(remaining))
                .map(|k| {
                    let branch = branches + k;
                    let ni = if config.branch_from_snapshots { pick(&nodes, &mut picker) } else { 0 };
                    let n = &mut nodes[ni];
                    n.picks += 1;
                    n.energy = (n.energy * ENERGY_DECAY).max(MIN_ENERGY);
                    let seed = branch_seed(config.seed, branch);
                    tracing::debug!(branch, from = n.tree_id, seed, energy = n.energy, "branch");
                    let job = BranchJob { branch, seed, tree_id: n.tree_id, base: n.timeline.clone() };
                    Job::Branch(job, round.clone())
                })
                .collect();
            for done in pool.run(jobs, &shared)? {
                let Done::Branch(run) = done else { unreachable!("a branch job returns a branch") };
                if exhausted(branches, vtime_total, bugs.records.len()) {
                    break;
                }
                branches += 1;
                debug_assert_eq!(run.job.branch, branches, "branches merge in order");
                phases.restore_ms += ms(run.restore);
                phases.snapshot_ms += ms(run.snapshot);
                phases.branches_ms += ms(run.run);
                vtime_total += run.vtime_ns;
                faults.merge(&run.faults);
                let new_edges = merge(*run, &mut known, &mut bugs, &mut nodes, &shared, &cx);
                if first_bug.is_none() && !bugs.records.is_empty() {
                    // Time to find it, not to check it.
                    let found = ms(start.elapsed()).saturating_sub(phases.reexecution_ms);
                    first_bug = Some((branches, found));
                }
                let p = BranchProgress {
                    branches,
                    snapshots: nodes.len(),
                    signals: known.signals.total,
                    bugs: bugs.records.len(),
                    elapsed: start.elapsed(),
                    phases,
                };
                series.push(SeriesPoint {
                    branch: branches,
                    wall_ms: ms(p.elapsed),
                    snapshots: p.snapshots,
                    signals: p.signals,
                    bugs: p.bugs,
                    new_edges,
                    edges: known.signals.coverage.edges(),
                });
                progress(Progress::Branch(p));
            }
            let checking = Instant::now();
            bugs.reexecute_new(&mut pool, &shared, config.reexecutions)?;
            phases.reexecution_ms += ms(checking.elapsed());
        }
        Ok(pool.finish())
    });
    let guest_profile = guest_profile?;
    let snapshots = nodes.len();

    Ok(Exploration {
        target: target.clone(),
        seed: config.seed,
        budget: config.budget,
        slice_ns: config.slice.nanos(),
        branch_from_snapshots: config.branch_from_snapshots,
        batch: config.batch,
        workers: config.workers,
        root,
        branches,
        snapshots,
        signals: known.signals.total,
        wall_ms: ms(start.elapsed()),
        vtime_ns: vtime_total,
        coverage_edges: known.signals.coverage.edges(),
        instrumentation: known.instrumentation,
        assertions: known.assertions,
        bugs: bugs.records,
        events: known.events,
        garbage: known.garbage,
        faults,
        series,
        first_bug,
        phases,
        guest_profile,
    })
}

/// Adds a branch a worker ran to the exploration: its coverage and
/// messages (judged against everything merged before it), its bugs, and
/// each snapshot that is still new as a node to branch from (with the
/// snapshots before it in the branch, which its pages build on). Returns
/// the coverage edges it reached first.
fn merge(
    run: BranchRun,
    known: &mut Knowledge,
    bugs: &mut Bugs,
    nodes: &mut Vec<Node>,
    shared: &Shared,
    cx: &BugContext,
) -> u64 {
    let BranchJob { branch, seed, tree_id, base, .. } = run.job;
    let mut new_edges = 0;
    // Each stop's timeline, snapshot, and whether it is a new node.
    let mut stops = Vec::with_capacity(run.stops.len());
    for stop in run.stops {
        let timeline = base.then(Segment { seed, until: stop.at });
        let covered = known.merge_coverage(&stop.coverage);
        new_edges += covered;
        let mut new_here = covered;
        for msg in &stop.messages {
            let o = known.process(msg);
            new_here += o.new_signals;
            new_edges += o.new_edges;
            if let Some(kind) = o.bug {
                let failure = stop.failure.as_ref().expect("the worker fingerprints every stop where a message fails");
                bugs.record(kind, timeline.clone(), failure, known, cx, branch);
            }
        }
        if new_here > 0 {
            tracing::debug!(branch, signals = new_here, "something new");
            assert!(
                stop.snapshot.is_some() || !shared.rules.snapshots,
                "branch {branch}: new to the exploration but not to the branch"
            );
        }
        stops.push((timeline, new_here, stop.snapshot));
    }
    new_edges += known.merge_coverage(&run.end_coverage);
    if let (Some(end), Some(failure)) = (run.end, &run.crash) {
        let timeline = base.then(Segment { seed, until: failure.at });
        bugs.record(BugKind::Crash { end }, timeline, failure, known, cx, branch);
    }
    // Snapshots after the branch's last new one are of no use.
    let kept = stops.iter().rposition(|(_, new, snap)| *new > 0 && snap.is_some()).map_or(0, |i| i + 1);
    let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
    let mut parent = tree_id;
    for (timeline, new_here, snapshot) in stops.into_iter().take(kept) {
        let Some(delta) = snapshot else { continue };
        parent = tree.insert(parent, delta);
        if new_here > 0 {
            let energy = NEW_NODE_ENERGY + ENERGY_PER_SIGNAL * new_here as f64;
            nodes.push(Node { timeline, energy, picks: 0, tree_id: parent });
        }
    }
    new_edges
}
