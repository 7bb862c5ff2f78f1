//! Bug records, and replaying them.
//!
//! A bug record holds everything needed to reach the failure again from a
//! fresh boot: the target, the master seed (which, with the target, decides
//! the root), and the timeline of re-seeded segments, ending at the exact
//! event where the failure showed. `replay` follows it and checks that the
//! same failure appears at the same point.

use std::path::Path;

use hvsim_guest_image::host::Host;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::{End, Machine, Stop, Vtime};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::is_crash;
use crate::error::{ExploreError, Result};
use crate::sdk::{self, AssertKind, Assertion, SdkMessage};
use crate::timeline::{Point, Timeline};
use crate::{StartOptions, Target};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BugKind {
    /// An always-type assertion failed, or an unreachable point was reached.
    Assertion { id: String, message: String, assertion: AssertKind, details: Value },
    /// The guest crashed (kernel panic, triple fault, exit with an error...).
    Crash { end: End },
}

impl BugKind {
    pub fn from_assertion(a: &Assertion) -> BugKind {
        BugKind::Assertion {
            id: a.id.clone(),
            message: a.message.clone(),
            assertion: a.kind,
            details: a.details.clone(),
        }
    }

    /// Bugs with the same signature are the same bug.
    pub fn signature(&self) -> String {
        match self {
            BugKind::Assertion { id, .. } => format!("assertion:{id}"),
            BugKind::Crash { end } => format!("crash:{}", end.name()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            BugKind::Assertion { message, assertion: AssertKind::Unreachable, .. } => {
                format!("unreachable point reached: {message}")
            }
            BugKind::Assertion { message, .. } => format!("assertion failed: {message}"),
            BugKind::Crash { end } => format!("guest crashed: {}", end.detail()),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BugRecord {
    pub id: String,
    pub bug: BugKind,
    pub summary: String,
    /// Where the failure showed.
    pub at: Point,
    pub timeline: Timeline,
    pub target: Target,
    pub master_seed: u64,
    /// The branch that found it.
    pub branch: u64,
    /// How many times the exploration saw it.
    pub occurrences: u64,
    pub hvsim_version: String,
    /// Filled in when the record is written to a file.
    pub replay_command: String,
    /// The last lines of the console when the bug showed (with containers,
    /// each service's lines carry its name).
    #[serde(default)]
    pub console_tail: Vec<String>,
}

impl BugRecord {
    pub fn new(
        id: String,
        bug: BugKind,
        at: Point,
        timeline: Timeline,
        target: Target,
        master_seed: u64,
        branch: u64,
    ) -> BugRecord {
        BugRecord {
            id,
            summary: bug.describe(),
            bug,
            at,
            timeline,
            target,
            master_seed,
            branch,
            occurrences: 1,
            hvsim_version: env!("CARGO_PKG_VERSION").to_owned(),
            replay_command: String::new(),
            console_tail: Vec::new(),
        }
    }

    pub fn load(path: &Path) -> Result<BugRecord> {
        let err = |what: String| ExploreError::BugFile { path: path.to_owned(), what };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(format!("not a bug record: {e}")))
    }
}

/// Lines of console output kept with a bug.
pub const CONSOLE_TAIL_LINES: usize = 40;

/// The last [`CONSOLE_TAIL_LINES`] lines of a console.
pub fn console_tail(console: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(console);
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    lines[lines.len().saturating_sub(CONSOLE_TAIL_LINES)..].iter().map(|l| (*l).to_owned()).collect()
}

/// What a replay observed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplayOutcome {
    pub reproduced: bool,
    pub expected: String,
    /// The failure observed at the bug's point, if any.
    pub observed: Option<String>,
    pub at: Point,
    pub vtime_ns: u64,
    /// With `--profile-guest`: the replay's samples.
    #[serde(skip)]
    pub profile: Option<GuestProfile>,
}

/// Starts the bug's target and follows its timeline to the failure point.
pub fn replay(bug: &BugRecord, host: &Host, start: &StartOptions) -> Result<ReplayOutcome> {
    let mut m = bug.target.start(bug.master_seed, host, start)?.machine;
    let outcome = |observed: Option<String>, m: &mut Machine| ReplayOutcome {
        reproduced: observed.as_deref() == Some(&bug.summary) && point_of(m) == bug.at,
        expected: bug.summary.clone(),
        observed,
        at: point_of(m),
        vtime_ns: m.now().nanos(),
        profile: m.take_guest_profile(),
    };
    // Root, then every segment but the last, to their exact points.
    let mut stops: Vec<(Option<u64>, Point)> = vec![(None, bug.timeline.root)];
    stops.extend(bug.timeline.segments.iter().map(|s| (Some(s.seed), s.until)));
    let (last_seed, _) = stops.pop().expect("the root is always there");
    for (seed, until) in stops {
        if let Some(seed) = seed {
            m.reseed(seed)?;
        }
        match m.run_until_point(Vtime::MAX, until.events)? {
            Stop::Deadline => {}
            Stop::Ended(end) => return Ok(outcome(Some(BugKind::Crash { end }.describe()), &mut m)),
            Stop::Message => unreachable!("not stopping on messages here"),
        }
    }
    if let Some(seed) = last_seed {
        m.reseed(seed)?;
    }
    // The last stretch: watch every message up to the failure point.
    m.set_stop_on_message(true);
    let mut observed = None;
    loop {
        match m.run_until_point(Vtime::MAX, bug.at.events)? {
            Stop::Message => {
                for msg in m.take_messages() {
                    if let SdkMessage::Assert(a) = sdk::parse(&msg.bytes) {
                        let kind = BugKind::from_assertion(&a);
                        if a.hit && matches!(&bug.bug, BugKind::Assertion { id, .. } if *id == a.id) && fails(&a) {
                            observed = Some(kind.describe());
                        }
                    }
                }
            }
            Stop::Deadline => return Ok(outcome(observed, &mut m)),
            Stop::Ended(end) => {
                let o = is_crash(&end).then(|| BugKind::Crash { end }.describe()).or(observed);
                return Ok(outcome(o, &mut m));
            }
        }
    }
}

fn point_of(m: &Machine) -> Point {
    Point { events: m.trace_state().events, vtime_ns: m.now().nanos() }
}

fn fails(a: &Assertion) -> bool {
    match a.kind.demand() {
        sdk::Demand::Every { .. } => !a.condition,
        sdk::Demand::Never => true,
        sdk::Demand::Some => false,
    }
}
