//! Bug records, and replaying them.
//!
//! A bug record holds everything needed to reach the failure again from a
//! fresh boot: the target, the master seed (which, with the target, decides
//! the root), and the timeline of re-seeded segments, ending at the exact
//! event where the failure showed; and what to check a replay against: the
//! world it was found in (see `hvsim_guest_image::world`) and the trace and
//! memory hashes at the failure. [`follow`] takes a machine along the
//! timeline and checks that the same failure appears at the same point with
//! the same trace; the explorer does that from its root snapshot before it
//! reports a bug, `hvsim replay` from a fresh start.

use std::collections::BTreeMap;
use std::path::Path;

use hvsim_guest_image::host::Host;
use hvsim_guest_image::world::World;
use hvsim_vmm::faults::buggify::Site;
use hvsim_vmm::faults::schedule::Episode;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::summary::Replayable;
use hvsim_vmm::{End, Machine, Stop, Vtime};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::checkers::{self, CheckerSpec, HistoryFinding};
use crate::composer::Composition;
use crate::document::Tag;
use crate::error::{ExploreError, Result};
use crate::roots::{RootId, Roots};
use crate::sdk::{self, AssertKind, Assertion, SdkMessage};
use crate::story;
use crate::timeline::is_crash;
use crate::timeline::{Point, Segment, Timeline};
use crate::{StartOptions, Target};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BugKind {
    /// An always-type assertion failed, or an unreachable point was reached.
    Assertion { id: String, message: String, assertion: AssertKind, details: Value },
    /// The guest crashed (kernel panic, triple fault, exit with an error...).
    Crash { end: End },
    /// A checker found the history its timeline recorded invalid
    /// (`checkers.rs`); `summary`: the checker's explanation.
    Checker { checker: CheckerSpec, summary: String },
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

    /// Bugs with the same signature are the same bug: an assertion's id
    /// (the SDKs' identity of a property), or how the guest ended, with
    /// its status or code where it has one.
    pub fn signature(&self) -> String {
        match self {
            BugKind::Assertion { id, .. } => format!("assertion:{id}"),
            BugKind::Crash { end: End::Exit { status } } => format!("crash:exit:{status}"),
            BugKind::Crash { end: End::GuestPanic { code } } => format!("crash:guest-panic:{code:#x}"),
            BugKind::Crash { end } => format!("crash:{}", end.name()),
            BugKind::Checker { checker, .. } => format!("checker:{}", checker.name),
        }
    }

    /// The checker, for a checker's bug.
    pub fn checker(&self) -> Option<&String> {
        match self {
            BugKind::Checker { checker, .. } => Some(&checker.name),
            _ => None,
        }
    }

    /// The bug's id: `BUG-` and 12 hex digits of the SHA-256 of its
    /// signature. A content id, so the same failure has the same id in
    /// every exploration, on every host, whatever else changed in the
    /// program, and no counter or source line enters it.
    pub fn id(&self) -> String {
        let digest = Sha256::digest(self.signature().as_bytes());
        format!("BUG-{}", &hex::encode(digest)[..12])
    }

    /// Whether the SDK message `bytes` shows this bug: its assertion,
    /// failing.
    pub fn shown_by(&self, bytes: &[u8]) -> bool {
        match (self, sdk::parse(bytes)) {
            (BugKind::Assertion { id, .. }, SdkMessage::Assert(a)) => a.hit && a.id == *id && a.kind.fails(a.condition),
            _ => false,
        }
    }

    /// Whether the run ending `end` shows this bug: the same crash.
    pub fn shown_by_end(&self, end: &End) -> bool {
        is_crash(end) && BugKind::Crash { end: end.clone() }.id() == self.id()
    }

    /// For a checker's bug: whether the history `m` recorded so far is
    /// still invalid.
    pub fn judged_in(&self, m: &Machine) -> bool {
        matches!(self, BugKind::Checker { checker, .. } if checkers::observe(checker, m.messages()).is_some())
    }

    pub fn describe(&self) -> String {
        match self {
            BugKind::Assertion { message, assertion: AssertKind::Unreachable, .. } => {
                format!("unreachable point reached: {message}")
            }
            BugKind::Assertion { message, .. } => format!("assertion failed: {message}"),
            BugKind::Crash { end } => format!("guest crashed: {}", end.detail()),
            BugKind::Checker { checker, summary } => {
                format!("checker {} ({}) found the history {summary}", checker.name, checker.model.name())
            }
        }
    }
}

/// A bug's record (`bugs/BUG-<id>.json`): how to reach its failure again
/// from a fresh boot, and what to check a replay against.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct BugRecord {
    /// Missing in records written before records named their schema.
    #[serde(default)]
    pub schema: Tag<BugRecord>,
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
    /// The world it was found in: a replay elsewhere refuses a different
    /// one. Empty in records written before records pinned their world.
    #[serde(default)]
    pub world: World,
    /// The machine at the failure; `None` in records written before then.
    #[serde(default)]
    pub failure: Option<Fingerprint>,
    /// The drawn faults that struck in its timeline before the failure
    /// (`hvsim_vmm::faults::schedule`), with what each touched: the
    /// schedule that led to it. (Its seeds reproduce them in a replay.)
    #[serde(default)]
    pub faults: Vec<Episode>,
    /// With Test Composer: the template its timeline ran and the commands
    /// that had started before the failure, where and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub composer: Option<Composition>,
    /// The buggify sites enabled in its timeline up to the failure, with
    /// how often each was reached and fired (its seeds decide them again in
    /// a replay).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub buggify: BTreeMap<String, Site>,
    /// What happened in its timeline up to the failure, on one line of
    /// virtual time: the last output of every node and service, init's
    /// words on services and Test Composer, SDK messages, every fault as it
    /// struck and ended, and the failure (`story.rs`).
    #[serde(default)]
    pub story: Vec<story::Entry>,
    /// What failed after it in the same timeline (a service exiting with
    /// an error, another assertion): consequences of the bug, not bugs of
    /// their own.
    #[serde(default)]
    pub after: Vec<Later>,
    /// The console's lines from the failure to the end of the timeline
    /// that found it (at most [`CONSOLE_TAIL_LINES`], the last ones).
    #[serde(default)]
    pub console_after: Vec<String>,
    /// For a checker's bug: the history's verdict, and the smallest
    /// violating sub-history found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryFinding>,
    /// How the explorer's re-executions of the timeline went.
    #[serde(default)]
    pub reproduction: Reproduction,
    /// How likely the bug was from moments of its timeline on
    /// (`likelihood.rs`); `None` where the exploration did not estimate it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<crate::likelihood::Likelihood>,
    /// A record `hvsim minimize` wrote: what it kept of the original's
    /// decisions, and what it took back (its timeline's vetoes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimized: Option<crate::minimize::Minimization>,
    /// `verified` if every re-execution reached the same failure with the
    /// same trace and memory; `no` (a flaky bug) if one did not.
    #[serde(default = "unverified")]
    pub replayable: Replayable,
    /// Why `replayable` is not `verified`.
    #[serde(default)]
    pub replayable_reasons: Vec<String>,
    /// In a merge of shards (`hvsim merge`): every shard that saw it; this
    /// record is the one found first (by virtual time, shard, branch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<u32>,
}

fn unverified() -> Replayable {
    Replayable::Expected
}

/// The machine at a point: what a replay must reach again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Fingerprint {
    pub trace_hash: String,
    pub memory_hash: String,
}

impl Fingerprint {
    pub fn of(m: &Machine) -> Fingerprint {
        Fingerprint { trace_hash: m.trace_state().hash_hex(), memory_hash: hex::encode(m.ram().hash()) }
    }
}

/// Something that failed after a bug in the timeline that found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Later {
    pub at: Point,
    /// As a bug of its own would say it (`guest crashed: ...`).
    pub what: String,
}

/// How many times the explorer re-executed a bug's timeline from its root,
/// and how many of those reached the same failure with the same trace
/// (and, of those, the same memory); and how many it meant to: a bug is
/// confirmed once all of those have run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reproduction {
    pub attempts: u32,
    pub reproduced: u32,
    pub same_memory: u32,
    /// The re-executions asked for (`--reexecute`); 0 in records written
    /// before records said.
    #[serde(default)]
    pub wanted: u32,
}

impl Reproduction {
    /// Whether every re-execution asked for has run.
    pub fn confirmed(&self) -> bool {
        self.attempts >= self.wanted
    }

    /// What the re-executions say about replaying the bug, and why.
    pub fn verdict(&self) -> (Replayable, Option<String>) {
        if self.reproduced < self.attempts {
            let why = format!(
                "flaky: {} of {} re-executions of its timeline reached the same failure with the same trace",
                self.reproduced, self.attempts
            );
            (Replayable::No, Some(why))
        } else if !self.confirmed() {
            let why = format!(
                "unconfirmed: the exploration ended after {} of the {} re-executions of its timeline",
                self.attempts, self.wanted
            );
            (Replayable::Expected, Some(why))
        } else if self.attempts == 0 {
            (Replayable::Expected, Some("its timeline was not re-executed".into()))
        } else if self.same_memory < self.attempts {
            let why = format!(
                "the trace reproduced {0}/{0}, but guest memory differed in {1} (something outside hvsim's \
                 view, such as a user-mode TSC read on this host, reached the guest)",
                self.attempts,
                self.attempts - self.same_memory
            );
            (Replayable::Expected, Some(why))
        } else {
            (Replayable::Verified, None)
        }
    }
}

impl BugRecord {
    /// A bug's record as found: `wanted` re-executions will confirm it.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        bug: BugKind,
        at: Point,
        timeline: Timeline,
        target: Target,
        master_seed: u64,
        branch: u64,
        world: World,
        failure: Fingerprint,
        wanted: u32,
    ) -> BugRecord {
        let reproduction = Reproduction { wanted, ..Reproduction::default() };
        let (replayable, why) = reproduction.verdict();
        BugRecord {
            schema: Tag::new(),
            id: bug.id(),
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
            world,
            failure: Some(failure),
            faults: Vec::new(),
            composer: None,
            buggify: BTreeMap::new(),
            story: Vec::new(),
            after: Vec::new(),
            console_after: Vec::new(),
            history: None,
            minimized: None,
            likelihood: None,
            reproduction,
            replayable,
            replayable_reasons: why.into_iter().collect(),
            shards: Vec::new(),
        }
    }

    /// Counts one re-execution and updates the verdict.
    pub fn count_reexecution(&mut self, outcome: &ReplayOutcome) {
        tracing::debug!(
            bug = %self.id,
            reproduced = outcome.reproduced,
            observed = ?outcome.observed,
            at = outcome.at.events,
            trace_matches = outcome.trace_matches,
            memory_matches = outcome.memory_matches,
            "re-executed"
        );
        let r = &mut self.reproduction;
        r.attempts += 1;
        if outcome.reproduced {
            r.reproduced += 1;
            if outcome.memory_matches {
                r.same_memory += 1;
            }
        }
        let (verdict, why) = r.verdict();
        self.replayable = verdict;
        self.replayable_reasons = why.into_iter().collect();
    }

    /// "reproduced 3/3" and the like.
    pub fn reproduction_words(&self) -> String {
        let r = &self.reproduction;
        match self.replayable {
            Replayable::No => format!("FLAKY: reproduced {}/{}", r.reproduced, r.attempts),
            _ if !r.confirmed() => format!("UNCONFIRMED: re-executed {} of {} times", r.attempts, r.wanted),
            _ if r.attempts == 0 => "not re-executed".to_owned(),
            _ => format!("reproduced {}/{}", r.reproduced, r.attempts),
        }
    }

    pub fn load(path: &Path) -> Result<BugRecord> {
        let err = |what: String| ExploreError::BugFile { path: path.to_owned(), what };
        let text = hvsim_vmm::files::read_text(path).map_err(|e| err(e.to_string()))?;
        BugRecord::parse(&text).map_err(err)
    }

    /// Parses and checks a bug record file's text: what [`BugRecord::load`]
    /// does once the file is read (its errors are `load`'s, without the path).
    pub fn parse(text: &str) -> std::result::Result<BugRecord, String> {
        let record: BugRecord = serde_json::from_str(text).map_err(|e| format!("not a bug record: {e}"))?;
        record.check()?;
        Ok(record)
    }

    /// The timeline's points must follow each other: the root, each
    /// segment's end, the failure, in events and in virtual time.
    fn check(&self) -> std::result::Result<(), String> {
        let mut points = vec![("the root", self.timeline.root)];
        points.extend(self.timeline.segments.iter().map(|s| ("a segment's end", s.until)));
        points.push(("the failure point", self.at));
        for pair in points.windows(2) {
            let ((_, a), (what, b)) = (pair[0], pair[1]);
            if b.events < a.events || b.vtime_ns < a.vtime_ns {
                return Err(format!(
                    "damaged bug record: {what} (event {}) comes before the point before it",
                    b.events
                ));
            }
        }
        Ok(())
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
    /// The same failure at the same point, with the same trace (and memory,
    /// unless the host lets it differ: see [`memory_may_differ`]).
    pub reproduced: bool,
    pub expected: String,
    /// The failure observed at the bug's point, if any.
    pub observed: Option<String>,
    pub at: Point,
    pub vtime_ns: u64,
    /// The machine where the replay stopped.
    pub fingerprint: Fingerprint,
    /// Whether the trace and memory hashes match the record's (false for a
    /// record without them).
    pub trace_matches: bool,
    pub memory_matches: bool,
    /// With `--profile-guest`: the replay's samples.
    #[serde(skip)]
    pub profile: Option<GuestProfile>,
    /// It started from a saved root (`roots.rs`).
    pub from_saved_root: bool,
}

/// Starts the bug's target, or restores its timeline's root if the root
/// `root` names was saved and is that root (`roots.rs`: the id is of the
/// target as explored, before its files were relocated), and follows its
/// timeline to the failure point. `limit`, if given, bounds the virtual
/// time the replay may run. Returns the machine where it stopped too
/// (`hvsim debug` goes on from there).
pub fn replay(
    bug: &BugRecord,
    host: &Host,
    start: &StartOptions,
    limit: Option<Vtime>,
    root: Option<&RootId>,
    observer: &mut dyn Observer,
) -> Result<(ReplayOutcome, Machine)> {
    let (mut m, from_saved_root) = machine(bug, host, start, root)?;
    observer.prepare(&mut m)?;
    let mut outcome = follow(&mut m, bug, memory_may_differ(&bug.target, host), limit, observer)?;
    observer.finish(&mut m)?;
    outcome.profile = m.take_guest_profile();
    outcome.from_saved_root = from_saved_root;
    Ok((outcome, m))
}

/// A machine to follow the bug's timeline on: its saved root, restored,
/// if `root` names it (true), else the target started afresh (false).
pub fn machine(bug: &BugRecord, host: &Host, start: &StartOptions, root: Option<&RootId>) -> Result<(Machine, bool)> {
    match root.and_then(|id| saved_root(bug, id, host, start)) {
        Some(m) => Ok((m, true)),
        None => Ok((bug.target.start(bug.master_seed, host, start)?.machine, false)),
    }
}

/// What a replay does besides following the timeline: `hvsim replay`
/// tells the timeline's story as it goes (`story.rs`), writes logs, saves
/// a snapshot; the explorer's re-executions do nothing more (`()`).
pub trait Observer {
    /// Before the timeline is followed, with the machine at its start or
    /// at its root.
    fn prepare(&mut self, _: &mut Machine) -> Result<()> {
        Ok(())
    }
    /// At each stop on the way: a segment's end, an SDK message.
    fn stopped(&mut self, _: &Machine) {}
    /// Where the replay stopped: at the failure, where the timeline went
    /// elsewhere, or at the virtual-time limit.
    fn finish(&mut self, _: &mut Machine) -> Result<()> {
        Ok(())
    }
}

impl Observer for () {}

/// The root of the bug's timeline, restored, if `id`'s root was saved and
/// is that root.
fn saved_root(bug: &BugRecord, id: &RootId, host: &Host, start: &StartOptions) -> Option<Machine> {
    if !bug.target.is_linux() || start.cold_boot || start.profiler.is_some() {
        return None;
    }
    let (mut m, saved) = Roots::open().ok()?.get(id, &host.settings(true, start.watchdog))?;
    if saved.point != bug.timeline.root {
        return None;
    }
    start.prepare(&mut m);
    Some(m)
}

/// How far past a recorded point's virtual time a replay may run without
/// reaching the point's event before it counts as diverged.
pub const SLACK: Vtime = Vtime(1_000_000_000);

/// Whether guest memory may differ between executions of the same trace:
/// on a host that lets Linux's user mode read the TSC or RDRAND without a
/// trap (see `host_limits`), programs such as glibc's dynamic loader keep
/// what they read in memory.
pub fn memory_may_differ(target: &Target, host: &Host) -> bool {
    target.is_linux() && !host.probes.limits().is_empty()
}

/// Follows the bug's timeline from `m`, which is at the start of the
/// target's run or at the timeline's root, to the failure point, and says
/// whether the same failure showed there with the same trace and memory
/// (the memory need not match if `memory_may_differ`).
///
/// A timeline that has not reached a point's event within [`SLACK`] of
/// virtual time after the point's own time has diverged: the replay stops
/// there (so an edited or foreign record cannot run forever), and at
/// `limit` in any case.
pub fn follow(
    m: &mut Machine,
    bug: &BugRecord,
    memory_may_differ: bool,
    limit: Option<Vtime>,
    observer: &mut dyn Observer,
) -> Result<ReplayOutcome> {
    assert!(point_of(m).events <= bug.timeline.root.events, "the machine is past the bug's root");
    let outcome = |observed: Option<String>, m: &mut Machine| {
        let fingerprint = Fingerprint::of(m);
        let (trace_matches, memory_matches) = match &bug.failure {
            Some(f) => (f.trace_hash == fingerprint.trace_hash, f.memory_hash == fingerprint.memory_hash),
            None => (false, false),
        };
        ReplayOutcome {
            reproduced: observed.as_deref() == Some(&bug.summary)
                && point_of(m) == bug.at
                && trace_matches
                && (memory_matches || memory_may_differ),
            expected: bug.summary.clone(),
            observed,
            at: point_of(m),
            vtime_ns: m.now().nanos(),
            fingerprint,
            trace_matches,
            memory_matches,
            profile: None,
            from_saved_root: false,
        }
    };
    let stop_on_message = m.stop_on_message();
    // Every message is a stop: the observer hears of it as it comes
    // (stopping changes nothing in the run).
    m.set_stop_on_message(true);
    m.take_messages();
    let deadline = |p: Point| Vtime(p.vtime_ns.saturating_add(SLACK.nanos())).min(limit.unwrap_or(Vtime::MAX));
    let result = follow_timeline(m, bug, outcome, deadline, observer);
    m.set_stop_on_message(stop_on_message);
    result
}

/// A segment's start: every stream re-seeded, and the pending draw's value
/// if the segment chose it (it starts at a draw point). False if no draw
/// is pending there: the timeline went elsewhere.
pub(crate) fn begin(m: &mut Machine, segment: &Segment) -> Result<bool> {
    m.reseed(segment.seed)?;
    match segment.draw {
        Some(_) if !m.draw_pending() => Ok(false),
        Some(value) => Ok(m.choose_draw(value).map(|()| true)?),
        None => Ok(true),
    }
}

/// Runs `m` to virtual time `t`, stopping at every message, watching for
/// `bug`: `Some(shown)` if the run decided on the way (the bug showed in a
/// message, or the machine ended: then whether with this bug), `None` at
/// `t`. For fresh runs that look for a known bug (`likelihood.rs`,
/// `retest.rs`).
pub(crate) fn watch(bug: &BugKind, m: &mut Machine, t: Vtime) -> Result<Option<bool>> {
    m.set_stop_on_message(true);
    loop {
        match m.run_until(t)? {
            Stop::Message => {
                if m.take_messages().iter().any(|msg| bug.shown_by(&msg.bytes)) {
                    return Ok(Some(true));
                }
            }
            Stop::Deadline => return Ok(None),
            Stop::Ended(end) => return Ok(Some(bug.shown_by_end(&end) || bug.judged_in(m))),
        }
    }
}

/// How a run to a point of a timeline went.
pub(crate) enum Reach {
    Reached,
    /// Short of the point, or past it: the timeline went elsewhere.
    Elsewhere,
    Ended(End),
}

/// Runs `m` to `until` exactly, by `deadline` at the latest, telling the
/// observer of every stop on the way.
pub(crate) fn reach(m: &mut Machine, until: Point, deadline: Vtime, observer: &mut dyn Observer) -> Result<Reach> {
    loop {
        let stop = m.run_until_point(deadline, until.events)?;
        observer.stopped(m);
        match stop {
            Stop::Message => {
                m.take_messages();
            }
            Stop::Deadline if m.trace_state().events < until.events => return Ok(Reach::Elsewhere),
            Stop::Deadline => break,
            Stop::Ended(end) => return Ok(Reach::Ended(end)),
        }
    }
    // A point the explorer stopped at on the clock (an interval, the end of
    // a slice, the setup limit) may lie after its last exit: the guest was
    // halted and the clock ran on to it, exit-less. The same wait here; an
    // exit on the way means the timeline went elsewhere.
    if m.now().nanos() < until.vtime_ns {
        match m.run_until(Vtime(until.vtime_ns))? {
            Stop::Deadline if m.trace_state().events == until.events => {}
            Stop::Ended(end) => return Ok(Reach::Ended(end)),
            _ => return Ok(Reach::Elsewhere),
        }
    }
    Ok(Reach::Reached)
}

fn follow_timeline(
    m: &mut Machine,
    bug: &BugRecord,
    outcome: impl Fn(Option<String>, &mut Machine) -> ReplayOutcome,
    deadline: impl Fn(Point) -> Vtime,
    observer: &mut dyn Observer,
) -> Result<ReplayOutcome> {
    // Root, then every segment but the last, to their exact points.
    let mut stops: Vec<(Option<&Segment>, Point)> = vec![(None, bug.timeline.root)];
    stops.extend(bug.timeline.segments.iter().map(|s| (Some(s), s.until)));
    let (last, _) = stops.pop().expect("the root is always there");
    for (segment, until) in stops {
        if let Some(segment) = segment {
            if !begin(m, segment)? {
                return Ok(outcome(None, m));
            }
        }
        match reach(m, until, deadline(until), observer)? {
            Reach::Reached => {}
            Reach::Elsewhere => return Ok(outcome(None, m)),
            Reach::Ended(end) => return Ok(outcome(Some(BugKind::Crash { end }.describe()), m)),
        }
        if segment.is_none() {
            // What the timeline takes back, it takes back from its root.
            m.veto(&bug.timeline.vetoes);
        }
    }
    if let Some(segment) = last {
        if !begin(m, segment)? {
            return Ok(outcome(None, m));
        }
    }
    // The last stretch: watch every message up to the failure point.
    let mut observed = None;
    // A checker's bug shows at the timeline's end: its history judged there.
    let judged = |m: &Machine| match &bug.bug {
        BugKind::Checker { checker, .. } => checkers::observe(checker, m.messages())
            .map(|summary| BugKind::Checker { checker: checker.clone(), summary }.describe()),
        _ => None,
    };
    loop {
        let stop = m.run_until_point(deadline(bug.at), bug.at.events)?;
        observer.stopped(m);
        match stop {
            Stop::Message => {
                for msg in m.take_messages() {
                    if let SdkMessage::Assert(a) = sdk::parse(&msg.bytes) {
                        let kind = BugKind::from_assertion(&a);
                        if a.hit
                            && matches!(&bug.bug, BugKind::Assertion { id, .. } if *id == a.id)
                            && a.kind.fails(a.condition)
                        {
                            observed = Some(kind.describe());
                        }
                    }
                }
            }
            Stop::Deadline => {
                // A timeline's end on the clock may lie after its last exit
                // (the guest halted, the clock ran on): the same wait here.
                if m.trace_state().events == bug.at.events && m.now().nanos() < bug.at.vtime_ns {
                    if let Stop::Ended(end) = m.run_until(Vtime(bug.at.vtime_ns))? {
                        let o = is_crash(&end).then(|| BugKind::Crash { end }.describe());
                        return Ok(outcome(o.or_else(|| judged(m)).or(observed), m));
                    }
                }
                return Ok(outcome(judged(m).or(observed), m));
            }
            Stop::Ended(end) => {
                let o = is_crash(&end).then(|| BugKind::Crash { end }.describe()).or_else(|| judged(m)).or(observed);
                return Ok(outcome(o, m));
            }
        }
    }
}

fn point_of(m: &Machine) -> Point {
    Point { events: m.trace_state().events, vtime_ns: m.now().nanos() }
}

#[cfg(test)]
mod tests {
    use super::*;

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `bug_record` fuzz target does, over its corpus and
    /// regressions; the seed (a record `hvsim explore` wrote) parses.
    #[test]
    fn fuzz_corpus_and_regressions_parse_or_fail_cleanly() {
        let inputs = fuzz_inputs("bug_record");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let Ok(text) = std::str::from_utf8(&data) else { continue };
            match BugRecord::parse(text) {
                Ok(r) => {
                    let _ = (r.bug.signature(), r.bug.describe(), r.reproduction_words(), r.reproduction.verdict());
                }
                // The seed corpus is records hvsim wrote.
                Err(e) => assert!(!file.iter().any(|c| c == "corpus"), "{}: {e}", file.display()),
            }
        }
    }

    #[test]
    fn load_says_which_file_and_what_parse_says() {
        let path = std::env::temp_dir().join(format!("hvsim-bug-parse-{}.json", std::process::id()));
        std::fs::write(&path, "{}").unwrap();
        let e = BugRecord::load(&path).unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(e.contains(&path.display().to_string()) && e.contains(&BugRecord::parse("{}").unwrap_err()), "{e}");
    }
}
