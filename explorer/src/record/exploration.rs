//! What an exploration is, as plain data: its result ([`Exploration`],
//! what report.json's summary and every report are made from), how it
//! ended, where its time went, and the tallies beside them. Nothing here
//! runs a machine: the loop that fills it in is `engine.rs`; reports,
//! merge and triage read it.

use std::collections::BTreeMap;
use std::time::Duration;

use hvsim_guest_image::world::World;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::Vtime;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::assertions::Assertions;
use crate::record::bug::BugRecord;
use crate::record::checkers::CheckerTally;
use crate::record::claims::{ClaimTally, HarnessTally};
use crate::record::composer::ComposerTally;
use crate::record::coverage::FreshBits;
use crate::record::discovery::{Discovered, Incidence};
use crate::record::faults::FaultTally;
use crate::record::services::ServiceExit;
use crate::record::shard::Shards;
use crate::record::timeline::{Point, Span};
use crate::Target;

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

/// What an exploration learned about the program's instrumentation.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Instrumentation {
    /// Each distinct SDK identification (`antithesis_sdk`) received.
    pub sdks: Vec<serde_json::Value>,
    /// Instrumented modules: name, edges, base (`hvsim_coverage_module`).
    pub coverage_modules: BTreeMap<String, (u64, u64)>,
}

/// Messages whose key was new to a table already holding
/// [`MAX_GUEST_KEYS`] keys: counted, not kept. Guest programs name
/// assertions, guidance and events; a program that makes up names without
/// end (a counter in an assertion's id) would otherwise grow the
/// explorer's memory without bound.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Dropped {
    pub assertions: u64,
    pub guidance: u64,
    pub events: u64,
    /// Test Composer templates and commands.
    #[serde(default)]
    pub composer: u64,
    /// SDKs and coverage modules announced.
    #[serde(default)]
    pub instrumentation: u64,
}

impl Dropped {
    /// A sentence for the reports, if anything was dropped.
    pub fn describe(&self) -> Option<String> {
        (*self != Dropped::default()).then(|| {
            format!(
                "messages ignored because their name was one of more than {MAX_GUEST_KEYS}: {} assertions, {} guidance, {} events, {} composer, {} instrumentation",
                self.assertions, self.guidance, self.events, self.composer, self.instrumentation
            )
        })
    }
}

/// The most keys a table named by guest programs holds (assertion ids,
/// guidance ids, event names).
pub const MAX_GUEST_KEYS: usize = 10_000;

/// Garbage on the SDK channel: counted, a few kept as examples.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Garbage {
    pub count: u64,
    pub examples: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
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
    /// The features timelines reached and how often, for the discovery
    /// estimates (`discovery.rs`; zero in merged shards, whose counts
    /// per feature are not kept).
    #[serde(default)]
    pub incidence: Incidence,
}

/// How the root snapshot was reached.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RootInfo {
    pub point: Point,
    /// False if the target never reported setup complete within the limit.
    pub setup_complete: bool,
    /// The target ended before setup complete, after a bug (how it ended):
    /// there is no root to branch from.
    #[serde(default)]
    pub ended: Option<String>,
    /// Restored from a saved root (`roots.rs`) rather than run.
    #[serde(default)]
    pub restored: bool,
    /// A service exited with an error before setup complete: the setup
    /// stopped there, and there is no root to branch from.
    #[serde(default)]
    pub setup_failed: Option<ServiceExit>,
}

/// Why an exploration ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "how", rename_all = "kebab-case")]
pub enum Ending {
    /// It has not ended (a checkpoint's report).
    #[default]
    Running,
    /// Its budget was spent, or there was nothing more to explore.
    Finished,
    /// Its wall-time budget (`--time`) was spent, after `branches`
    /// merged: branches still running then were cut short (one that had
    /// already failed kept its bug, `branch.rs`).
    TimeSpent { branches: u64 },
    /// Its interrupt was raised from outside (`reason`: as raised; a
    /// signal's number for `hvsim explore`).
    Interrupted { reason: usize },
    /// A host-side error (not the guest's doing) ended it.
    Failed { during: String, error: String },
}

impl Ending {
    /// Whether it ended as its budget says (rather than interrupted, or
    /// ended by an error).
    pub fn ran_to_end(&self) -> bool {
        matches!(self, Ending::Finished | Ending::TimeSpent { .. })
    }

    /// One line for humans.
    pub fn describe(&self) -> String {
        match self {
            Ending::Running => "still running".into(),
            Ending::Finished => "finished".into(),
            Ending::TimeSpent { branches } => format!(
                "the time budget was spent after {branches} branch(es); the branches running then were cut short"
            ),
            Ending::Interrupted { reason } => match *reason {
                2 => "interrupted (SIGINT)".into(),
                15 => "interrupted (SIGTERM)".into(),
                r => format!("interrupted ({r})"),
            },
            Ending::Failed { during, error } => format!("ended by an error in {during}: {error}"),
        }
    }
}

/// Everything an exploration produced.
#[derive(Debug, Serialize, Deserialize)]
pub struct Exploration {
    pub target: Target,
    pub seed: u64,
    pub budget: Budget,
    pub span: Span,
    #[serde(default)]
    pub snapshot_every_ns: Option<u64>,
    /// How timelines ended: at the guest's end or at their limit.
    #[serde(default)]
    pub timelines: TimelineEnds,
    /// What the snapshot tree held.
    #[serde(default)]
    pub tree: TreeMemory,
    pub branch_from_snapshots: bool,
    /// How branches picked their snapshot (`schedule.rs`).
    #[serde(default)]
    pub policy: Policy,
    /// Random draws as decision points.
    #[serde(default)]
    pub draws: DrawTally,
    /// The fault rules as the bandit saw them (`--schedule bandit`; empty
    /// otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleTally>,
    /// The Test Composer templates as the bandit saw them (`--schedule
    /// bandit`, a target with several; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<TemplateTally>,
    /// The Test Composer commands a line may switch off, as the bandit
    /// saw them (`--schedule bandit`; empty otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<CommandTally>,
    /// Branches per round, and the workers that ran them (see
    /// `ExploreConfig::batch`).
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
    /// What Test Composer ran, if the target has templates.
    #[serde(default)]
    pub composer: ComposerTally,
    /// The project's checkers, and what they said of the timelines.
    #[serde(default)]
    pub checkers: Vec<CheckerTally>,
    /// The project's claims, and what the timelines said of them.
    #[serde(default)]
    pub claims: Vec<ClaimTally>,
    /// Timelines whose harness failed outside any assertion or checker.
    #[serde(default)]
    pub harness: HarnessTally,
    /// What this host lets reach the guest from outside the seed
    /// (`hvsim doctor`): what blames a failure that did not reproduce on
    /// the environment.
    #[serde(default)]
    pub host_limits: Vec<String>,
    pub garbage: Garbage,
    /// Messages whose assertion, guidance or event name was one too many.
    #[serde(default)]
    pub dropped: Dropped,
    pub faults: FaultTally,
    pub coverage_edges: usize,
    pub instrumentation: Instrumentation,
    pub series: Vec<SeriesPoint>,
    /// How much is likely still unfound, and whether the stop rule ended it.
    #[serde(default)]
    pub discovery: Discovered,
    /// Branch at which the first bug appeared, and how long it took.
    pub first_bug: Option<(u64, u64)>,
    pub phases: Phases,
    /// Why it ended.
    #[serde(default)]
    pub ending: Ending,
    /// Which shards of the exploration this holds (`shard.rs`).
    #[serde(default)]
    pub shards: Shards,
    /// The world it ran in: shards of different worlds do not merge.
    #[serde(default)]
    pub world: World,
    /// Every coverage edge reached, as the map's set bits, so that shards'
    /// coverage merges as a union.
    #[serde(default)]
    pub coverage: FreshBits,
    /// With `--profile-guest`: the samples of the root run and every branch.
    #[serde(skip)]
    pub guest_profile: Option<GuestProfile>,
}

#[cfg(test)]
impl Exploration {
    /// An exploration of `target` that ran two 5 ms slices from a root at
    /// `root` and found nothing, for tests to fill in.
    pub(crate) fn example(target: Target, root: Point) -> Exploration {
        Exploration {
            target,
            seed: 1,
            budget: Budget::default(),
            span: Span::Slice(Vtime(5_000_000)),
            snapshot_every_ns: None,
            timelines: TimelineEnds::default(),
            tree: TreeMemory::default(),
            branch_from_snapshots: true,
            policy: Policy::default(),
            draws: DrawTally::default(),
            rules: Vec::new(),
            templates: Vec::new(),
            commands: Vec::new(),
            batch: 1,
            workers: 1,
            root: RootInfo { point: root, setup_complete: true, ended: None, restored: false, setup_failed: None },
            branches: 2,
            snapshots: 1,
            signals: 1,
            wall_ms: 1,
            vtime_ns: 1,
            assertions: Assertions::default(),
            bugs: Vec::new(),
            events: BTreeMap::new(),
            composer: ComposerTally::default(),
            checkers: Vec::new(),
            claims: Vec::new(),
            harness: HarnessTally::default(),
            host_limits: Vec::new(),
            garbage: Garbage::default(),
            dropped: Dropped::default(),
            faults: FaultTally::default(),
            coverage_edges: 0,
            instrumentation: Instrumentation::default(),
            series: Vec::new(),
            discovery: Default::default(),
            first_bug: None,
            phases: Phases::default(),
            ending: Ending::Finished,
            shards: Shards::default(),
            world: World::default(),
            coverage: FreshBits::default(),
            guest_profile: None,
        }
    }
}

/// Where an exploration's wall time went, in milliseconds. Branches,
/// restores and snapshots are summed over the workers: with several, they
/// add up to more than the wall time.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Phases {
    /// Booting the target, or restoring it from the boot cache.
    pub start_ms: f64,
    /// Running the root until setup complete (or the setup limit).
    pub setup_ms: f64,
    /// Running branches.
    pub branches_ms: f64,
    /// Putting snapshots back at the start of branches.
    pub restore_ms: f64,
    /// Taking snapshots.
    pub snapshot_ms: f64,
    /// Executing new bugs' timelines again, to check they reproduce
    /// (summed over the workers).
    #[serde(default)]
    pub reexecution_ms: f64,
    /// How long the exploration waited for those: between rounds with one
    /// worker; with more, only at the end, for the last ones.
    #[serde(default)]
    pub reexecution_wait_ms: f64,
    /// Telling each bug's story (`story.rs`), summed over the workers.
    #[serde(default)]
    pub story_ms: f64,
    /// Estimating each bug's likelihood over its timeline, at the end.
    #[serde(default)]
    pub likelihood_ms: f64,
}

fn one() -> usize {
    1
}

impl Phases {
    /// Wall time before the first branch: starting the target and its setup.
    pub fn to_root_ms(&self) -> u64 {
        (self.start_ms + self.setup_ms) as u64
    }
}

impl Exploration {
    /// How far branches ran, and the snapshot intervals, for people.
    pub fn describe_span(&self) -> String {
        let d = |ns: u64| format!("{:?}", Duration::from_nanos(ns));
        let every = self.snapshot_every_ns.map_or(String::new(), |e| format!(", snapshots every {}", d(e)));
        match self.span {
            Span::Whole { limit } => format!("whole timelines of up to {} from the root{every}", d(limit.nanos())),
            Span::Slice(slice) => format!("slices of {} from their snapshots{every}", d(slice.nanos())),
        }
    }
}

/// How branches ended.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct TimelineEnds {
    /// The guest ended (its test is over: every service exited, or the
    /// program powered off).
    pub ended: u64,
    /// The timeline's limit (or the slice) ran out first.
    pub at_limit: u64,
}

/// The snapshot tree's memory: pages and machine states.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct TreeMemory {
    /// The root's copy of guest RAM (part of `bytes`).
    #[serde(default)]
    pub root_bytes: u64,
    pub bytes: u64,
    /// Of `bytes`, the snapshots' machine states (console, messages, disk
    /// sectors, registers), what their lines of descent share counted once.
    #[serde(default)]
    pub state_bytes: u64,
    pub peak_bytes: u64,
    pub budget_bytes: u64,
    /// Snapshots evicted to stay within the budget.
    pub evicted: u64,
    /// Interval and draw snapshots branches did not take, to keep what
    /// they held within their share of the budget during a round.
    #[serde(default)]
    pub snapshots_skipped: u64,
}

/// How the explorer picks where to branch from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Energy alone, draws not chosen (the explorer before rarity).
    Energy,
    /// Rarity, guidance, freshness; draws are decision points.
    #[default]
    Rarity,
    /// Rarity with one value per branch at a draw point, none inside its
    /// timeline (the explorer before `steer.rs`, kept for comparison).
    RarityOneValue,
    /// Rarity, and the fault rules of each line of descent chosen by a
    /// bandit over what their faults found (`bandit.rs`).
    Bandit,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Energy => "energy",
            Policy::Rarity => "rarity",
            Policy::RarityOneValue => "rarity-one-value",
            Policy::Bandit => "bandit",
        }
    }

    /// Whether SDK draws are decision points.
    pub fn draws(self) -> bool {
        self != Policy::Energy
    }

    /// Whether a branch gives its draw point's untried values to the draws
    /// inside its timeline (`steer.rs`).
    pub fn steers(self) -> bool {
        self.draws() && self != Policy::RarityOneValue
    }

    /// Whether snapshots are picked by rarity.
    pub fn rarity(self) -> bool {
        self != Policy::Energy
    }
}

/// One drawn-fault rule as `--schedule bandit` saw it (`bandit.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RuleTally {
    /// As the plan writes it, and its name in landing evidence.
    pub kind: String,
    pub landing: String,
    /// Lines of descent in which the bandit chose it (the coins may have
    /// switched it on in others).
    pub chosen: u64,
    /// Timelines it was on in, and those in which its faults struck and
    /// something new was found.
    pub pulls: u64,
    pub rewards: u64,
}

/// One Test Composer template as `--schedule bandit` saw it (`bandit.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateTally {
    pub template: String,
    /// Lines of descent the bandit gave it.
    pub chosen: u64,
    /// Timelines that ran it, and those that found something new.
    pub pulls: u64,
    pub rewards: u64,
}

/// One Test Composer driver or anytime command as `--schedule bandit` saw
/// it (`bandit.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommandTally {
    /// `template/file`.
    pub command: String,
    pub template: String,
    /// Lines of descent in which the bandit chose it (the coins may have
    /// switched it on in others).
    pub chosen: u64,
    /// Timelines it was on in, and those in which it ran and something new
    /// was found.
    pub pulls: u64,
    pub rewards: u64,
}

/// Random draws as decision points, over an exploration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DrawTally {
    /// Snapshots made at draws.
    pub points: u64,
    /// Branches that started at one with a value the explorer chose.
    pub chosen: u64,
    /// Draws the explorer gave a value inside a timeline (`steer.rs`): a
    /// draw point's untried values, after the branch's first led nowhere.
    #[serde(default)]
    pub steered: u64,
    /// Revisits run: branches that returned to a draw before something new
    /// to make it a draw point (`revisit.rs`).
    #[serde(default)]
    pub revisits: u64,
}

/// `exploration.json`, in an exploration's directory: the exploration
/// whole, as `hvsim merge` reads it back (`merge.rs`).
pub const FILE: &str = "exploration.json";
/// Its format's name and version.
pub(crate) const FORMAT: &str = "hvsim-exploration-v1";

#[derive(Serialize)]
struct Written<'a> {
    format: &'static str,
    hvsim_version: &'static str,
    exploration: &'a Exploration,
}

#[derive(Deserialize)]
pub(crate) struct Read {
    pub format: String,
    pub hvsim_version: String,
    pub exploration: Exploration,
}

/// `exp` as `exploration.json` holds it.
pub fn to_json(exp: &Exploration) -> Vec<u8> {
    let written = Written { format: FORMAT, hvsim_version: env!("CARGO_PKG_VERSION"), exploration: exp };
    serde_json::to_vec(&written).expect("explorations serialize")
}
