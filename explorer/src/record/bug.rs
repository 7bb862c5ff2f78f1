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

use hvsim_guest_image::world::World;
use hvsim_vmm::faults::buggify::Site;
use hvsim_vmm::faults::schedule::Episode;
use hvsim_vmm::summary::Replayable;
use hvsim_vmm::{End, Machine};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::record::checkers::{self, CheckerSpec, HistoryFinding};
use crate::record::composer::Composition;
use crate::record::document::Tag;
use crate::record::error::{ExploreError, Result};
use crate::record::sdk::{self, AssertKind, Assertion, SdkMessage};
use crate::record::story;
use crate::record::timeline::is_crash;
use crate::record::timeline::{Point, Timeline};
use crate::Target;

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
    pub likelihood: Option<Likelihood>,
    /// A record `hvsim minimize` wrote: what it kept of the original's
    /// decisions, and what it took back (its timeline's vetoes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimized: Option<Minimization>,
    /// `verified` if every re-execution reached the same failure with the
    /// same trace and memory; `no` (a flaky bug) if one did not.
    #[serde(default = "unverified")]
    pub replayable: Replayable,
    /// Why `replayable` is not `verified`.
    #[serde(default)]
    pub replayable_reasons: Vec<String>,
    /// What reached the run that found it from outside the seed, as the
    /// machine noted it (watchdog-forced exits): such a run is not
    /// replayable, whatever its re-executions say (docs/determinism.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_seed: Vec<String>,
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
            outside_seed: Vec::new(),
            shards: Vec::new(),
        }
    }

    /// Notes what reached the run from outside the seed (`outside_seed`)
    /// and judges the record again.
    pub fn reached_from_outside(&mut self, reasons: &[String]) {
        self.outside_seed = reasons.to_vec();
        self.judge();
    }

    /// `replayable` from the re-executions, unless something outside the
    /// seed reached the run.
    fn judge(&mut self) {
        let (verdict, why) = self.reproduction.verdict();
        (self.replayable, self.replayable_reasons) = if self.outside_seed.is_empty() {
            (verdict, why.into_iter().collect())
        } else {
            (Replayable::No, self.outside_seed.clone())
        };
    }

    /// Counts one re-execution (`replay::ReplayOutcome::count_in`) and
    /// updates the verdict.
    pub fn count_reexecution(&mut self, reproduced: bool, memory_matches: bool) {
        let r = &mut self.reproduction;
        r.attempts += 1;
        if reproduced {
            r.reproduced += 1;
            if memory_matches {
                r.same_memory += 1;
            }
        }
        self.judge();
    }

    /// "reproduced 3/3" and the like.
    pub fn reproduction_words(&self) -> String {
        let r = &self.reproduction;
        match self.replayable {
            Replayable::No if !self.outside_seed.is_empty() => {
                "NOT REPLAYABLE: something outside the seed reached its run".to_owned()
            }
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

    /// Its id has the shape of one (commands name files after it, so it
    /// must not name a path), and the timeline's points follow each other:
    /// the root, each segment's end, the failure, in events and in virtual
    /// time. (An id that is not what the record's failure hashes to is left
    /// to replay, which then does not reproduce it, and to merge.)
    fn check(&self) -> std::result::Result<(), String> {
        let hex = self.id.strip_prefix("BUG-").unwrap_or_default();
        if hex.len() != 12 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            let shown: String = self.id.chars().take(40).collect();
            return Err(format!("damaged bug record: its id {shown:?} is not BUG- and 12 hex digits"));
        }
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

// A bug's likelihood over its own timeline, as its record keeps it
// (estimated by `likelihood.rs`).

/// One moment of the bug's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "LikelihoodPoint")]
pub struct LikelihoodPoint {
    pub vtime_ns: u64,
    pub runs: u32,
    /// Runs in which the same bug followed.
    pub hits: u32,
    /// The 95% Wilson interval of `hits / runs`.
    pub low: f64,
    pub high: f64,
}

impl LikelihoodPoint {
    pub fn share(&self) -> f64 {
        f64::from(self.hits) / f64::from(self.runs.max(1))
    }
}

/// A bug's likelihood over its timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Likelihood {
    pub points: Vec<LikelihoodPoint>,
    /// How far each run went at most: the exploration's horizon.
    pub horizon_ns: u64,
    /// Virtual time the runs took, and wall time.
    pub vtime_ns: u64,
    pub wall_ms: f64,
    /// Why there is no estimate, if there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_estimated: Option<String>,
}

impl Likelihood {
    /// No estimate, and why.
    pub fn unestimated(why: String) -> Likelihood {
        Likelihood { not_estimated: Some(why), ..Likelihood::default() }
    }

    /// Where the share rose most between two consecutive points, and by
    /// how much: `(before, after)`.
    pub fn jump(&self) -> Option<(&LikelihoodPoint, &LikelihoodPoint)> {
        self.points
            .windows(2)
            .map(|w| (&w[0], &w[1]))
            .filter(|(a, b)| b.share() > a.share())
            .max_by(|(a, b), (c, d)| (b.share() - a.share()).total_cmp(&(d.share() - c.share())))
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.not_estimated {
            return format!("not estimated: {why}");
        }
        let shares: Vec<String> =
            self.points.iter().map(|p| format!("{:.3}s {}/{}", p.vtime_ns as f64 / 1e9, p.hits, p.runs)).collect();
        let jump = match self.jump() {
            Some((a, b)) => format!(
                "; it became likely between {:.3} s and {:.3} s ({:.2} to {:.2})",
                a.vtime_ns as f64 / 1e9,
                b.vtime_ns as f64 / 1e9,
                a.share(),
                b.share()
            ),
            None => String::new(),
        };
        format!("{}{jump}", shares.join(", "))
    }
}

/// The 95% Wilson score interval of `hits` in `runs`.
pub fn wilson(hits: u32, runs: u32) -> (f64, f64) {
    if runs == 0 {
        return (0.0, 1.0);
    }
    let (n, p, z) = (f64::from(runs), f64::from(hits) / f64::from(runs), 1.959_964);
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * ((p * (1.0 - p) + z * z / (4.0 * n)) / n).sqrt() / (1.0 + z * z / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

// What `hvsim minimize` found (`minimize.rs`), as the minimized record
// keeps it.

/// One decision of a timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    /// A drawn fault that struck (its number in the timeline).
    Fault { id: u64, what: String },
    /// A buggify site that fired.
    Buggify { site: String },
    /// A Test Composer command that started (its run number in the timeline).
    Command { run: u64, command: String, service: String },
    /// The value the explorer chose for the SDK draw at segment `segment`.
    Draw { segment: usize, value: u64 },
}

impl Decision {
    pub fn describe(&self) -> String {
        match self {
            Decision::Fault { what, .. } => format!("fault {what}"),
            Decision::Buggify { site } => format!("buggify site {site:?} fires"),
            Decision::Command { run, command, service } => {
                format!("Test Composer runs {command} in {service} (run {run})")
            }
            Decision::Draw { segment, value } => format!("the draw at segment {segment} takes {value:#x}"),
        }
    }
}

/// What a minimization found, as its record keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Minimization {
    /// The record it minimized: its failure point and how many decisions
    /// its timeline made.
    pub from_at: Point,
    pub decisions: usize,
    /// The decisions kept: the failure needs every one of them (if
    /// `one_minimal`).
    pub kept: Vec<Decision>,
    pub removed: Vec<Decision>,
    /// Candidate runs, and whether the search finished (a run budget may
    /// stop it short of 1-minimal).
    pub runs: u32,
    pub one_minimal: bool,
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

    /// A bug whose run a watchdog-forced exit reached is not replayable,
    /// however its re-executions went (docs/determinism.md).
    #[test]
    fn a_run_reached_from_outside_the_seed_is_not_replayable_whatever_its_reexecutions() {
        let at = Point { events: 1, vtime_ns: 1 };
        let fp = Fingerprint { trace_hash: "t".into(), memory_hash: "m".into() };
        let record = |outside: &[String]| {
            let target = crate::Target::Raw { guest: "spin".into() };
            let kind = BugKind::Crash { end: End::Exit { status: 3 } };
            let mut b = BugRecord::new(kind, at, Timeline::at(at), target, 1, 1, World::default(), fp.clone(), 2);
            if !outside.is_empty() {
                b.reached_from_outside(outside);
            }
            b.count_reexecution(true, true);
            b.count_reexecution(true, true);
            b
        };
        assert_eq!(record(&[]).replayable, Replayable::Verified);
        let kick = "watchdog: the vCPU ran 2 s without an exit".to_owned();
        let b = record(std::slice::from_ref(&kick));
        assert_eq!((b.replayable, b.replayable_reasons.clone()), (Replayable::No, vec![kick]));
        assert!(b.reproduction_words().starts_with("NOT REPLAYABLE"), "{}", b.reproduction_words());
    }

    /// An id that could name a path outside the record's directory (minimize
    /// writes `<id>.min.json` beside it) is refused when the record is read.
    #[test]
    fn an_id_that_is_not_a_bug_id_is_refused() {
        let (_, data) = fuzz_inputs("bug_record").into_iter().find(|(f, _)| f.iter().any(|c| c == "corpus")).unwrap();
        let mut record: serde_json::Value = serde_json::from_slice(&data).unwrap();
        assert!(BugRecord::parse(&record.to_string()).is_ok());
        for id in ["../../x", "BUG-../../../x", "BUG-0123456789AB", "BUG-0123456789abc", ""] {
            record["id"] = id.into();
            let e = BugRecord::parse(&record.to_string()).unwrap_err();
            assert!(e.contains("is not BUG- and 12 hex digits"), "{id}: {e}");
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
