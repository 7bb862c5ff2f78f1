//! Claims: what the product promises, stated in the project manifest
//! (`hvsim.toml`, `[[claim]]`), each with the properties that would
//! falsify it (checkers, SDK assertions) and the faults it must survive.
//! An exploration gives each claim one verdict from a fixed set
//! ([`ClaimVerdict`]) with the evidence behind it, and every failure a
//! blame class ([`Blame`]), so that "the chaos ran cleanly" cannot read as
//! "the claim survived". docs/claims.md gives the rules; this file is them.
//!
//! **Exercised.** A claim is *exercised* in a timeline over the span of
//! virtual time from the first to the last evaluation of any of its
//! properties there: a hit of one of its assertions, or an operation
//! recorded in one of its checkers' histories.
//!
//! **Landed while exercised.** A drawn fault (the per-timeline schedule,
//! `hvsim_vmm::faults::schedule`: each has a start and an end in virtual
//! time) landed while the claim was exercised if it touched something
//! (packets, requests, nodes: its landing evidence) and was in force at
//! some moment of that span. Faults written down in a plan (`[network]`
//! rates, fixed partitions and crashes) carry no per-timeline times and so
//! cannot meet a claim's `faults`; they still show in the report.

use std::collections::{BTreeMap, BTreeSet};

use hvsim_vmm::append_log::AppendLog;
use hvsim_vmm::faults::schedule::{DrawnKind, Episode};
use hvsim_vmm::machine::Message;
use hvsim_vmm::End;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::assertions::Assertions;
use crate::record::bug::{BugKind, BugRecord};
use crate::record::checkers::{Checked, CheckerSpec, CheckerTally};
use crate::record::composer::{self, ComposerEvent};
use crate::record::history::Histories;
use crate::record::sdk::{self, SdkMessage};
use crate::record::services::ServiceExit;

/// One claim, as the manifest states it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimSpec {
    pub id: String,
    pub statement: String,
    /// The manifest's checkers whose violation falsifies it.
    pub checkers: Vec<String>,
    /// SDK assertions (by message or id) whose failure falsifies it.
    pub assertions: Vec<String>,
    /// Drawn fault kinds that must land while it is exercised.
    pub faults: Vec<DrawnKind>,
    /// Fewer history operations checked by its checkers, summed over the
    /// timelines that exercised it, and their verdicts are too thin to
    /// count.
    pub min_operations: u64,
}

/// A claim's verdict over an exploration: a fixed set, in docs/claims.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimVerdict {
    /// Exercised, its properties held, its faults landed while it was
    /// exercised, its checkers decided on enough history.
    Pass,
    /// A property failed, and every re-execution of the timeline failed
    /// the same way.
    FailReproducible,
    /// A property failed, but not every re-execution reproduced it.
    FailFlaky,
    /// A property failed once, and its timeline was not re-executed (or
    /// the failure is a checker refusing the history it was given).
    FailUnconfirmed,
    /// Its properties held, but a fault it must survive never landed while
    /// it was exercised.
    InconclusiveFaultsNotLanded,
    /// A property of it was never evaluated.
    InconclusiveNeverReached,
    /// A checker of it was undecided, or checked fewer operations than the
    /// claim asks.
    InconclusiveChecker,
    /// A workload or Test Composer driver failed, or the guest crashed,
    /// outside any assertion or checker: nothing it says can be trusted.
    HarnessError,
}

impl ClaimVerdict {
    pub fn name(self) -> &'static str {
        match self {
            ClaimVerdict::Pass => "pass",
            ClaimVerdict::FailReproducible => "fail-reproducible",
            ClaimVerdict::FailFlaky => "fail-flaky",
            ClaimVerdict::FailUnconfirmed => "fail-unconfirmed",
            ClaimVerdict::InconclusiveFaultsNotLanded => "inconclusive-faults-not-landed",
            ClaimVerdict::InconclusiveNeverReached => "inconclusive-never-reached",
            ClaimVerdict::InconclusiveChecker => "inconclusive-checker",
            ClaimVerdict::HarnessError => "harness-error",
        }
    }

    pub fn is_fail(self) -> bool {
        matches!(self, ClaimVerdict::FailReproducible | ClaimVerdict::FailFlaky | ClaimVerdict::FailUnconfirmed)
    }
}

/// Whose failure it is (docs/claims.md gives the rules, in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Blame {
    /// The system under test: an assertion or checker it broke, reproduced
    /// (or seen once and never contradicted).
    System,
    /// The test itself: a workload or Test Composer driver that failed
    /// outside any assertion or checker, a crashed guest, or hvsim failing
    /// to reproduce a timeline on a host with nothing to explain it.
    Harness,
    /// The oracle: a checker that could not read the history it was given.
    Checker,
    /// The host: a failure that did not reproduce where the host's limits
    /// (`hvsim doctor`) let something outside the seed reach the guest.
    Environment,
}

impl Blame {
    pub fn name(self) -> &'static str {
        match self {
            Blame::System => "system",
            Blame::Harness => "harness",
            Blame::Checker => "checker",
            Blame::Environment => "environment",
        }
    }
}

/// Whether `command` (`template/file`) is a Test Composer workload command
/// (`first_` or a driver), whose failure is the harness's. Its checks
/// (`finally_`, `eventually_`, `anytime_`) are oracles, whose failure is
/// the system's.
fn is_driver(command: &str) -> bool {
    use hvsim_abi::composer::Kind;
    composer::kind(command).is_some_and(|k| k == Kind::First || k.is_driver())
}

/// The Test Composer driver a failing assertion stands for, if it is one
/// (init's composer makes each command's exit the always-assertion
/// `Test Composer: T/F exits 0`: guest-init/src/container/composer.rs).
fn failed_driver(message: &str) -> Option<&str> {
    let command = composer::command_of(message)?;
    is_driver(command).then_some(command)
}

/// Whose failure `bug` is. `host_limits`: the host lets something outside
/// the seed reach the guest (`hvsim doctor`'s limits).
pub fn blame(bug: &BugRecord, host_limits: bool) -> Blame {
    let r = &bug.reproduction;
    let flaky = r.reproduced < r.attempts;
    // A failure that did not reproduce is the host's only where its limits
    // explain it; elsewhere hvsim broke its own promise.
    if flaky {
        return if host_limits { Blame::Environment } else { Blame::Harness };
    }
    match &bug.bug {
        BugKind::Crash { .. } => Blame::Harness,
        BugKind::Assertion { message, .. } if failed_driver(message).is_some() => Blame::Harness,
        BugKind::Assertion { .. } | BugKind::Checker { .. } => Blame::System,
    }
}

/// How far re-executions back `bug`'s failure.
pub fn fail_verdict(bug: &BugRecord) -> ClaimVerdict {
    let r = &bug.reproduction;
    if r.reproduced < r.attempts {
        ClaimVerdict::FailFlaky
    } else if r.attempts > 0 && r.confirmed() {
        ClaimVerdict::FailReproducible
    } else {
        ClaimVerdict::FailUnconfirmed
    }
}

/// The claims as a Markdown table: one row each, with its verdict, blame
/// and why (report.md and findings.md).
pub fn table(claims: &[ClaimReport]) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut t = String::from("| claim | verdict | blame | why |\n| --- | --- | --- | --- |\n");
    for c in claims {
        t += &format!(
            "| {} | {} | {} | {} |\n",
            cell(&c.id),
            c.verdict.name(),
            c.blame.map_or("", Blame::name),
            cell(&c.reason)
        );
    }
    t
}

/// Whether `bug` falsifies `claim`.
pub fn falsifies(claim: &ClaimSpec, bug: &BugKind) -> bool {
    match bug {
        BugKind::Assertion { id, message, .. } => claim.assertions.iter().any(|a| a == id || a == message),
        BugKind::Checker { checker, .. } => claim.checkers.contains(&checker.name),
        BugKind::Crash { .. } => false,
    }
}

/// One claim in one timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exercise {
    /// First and last evaluation, ns of virtual time.
    pub window: Option<(u64, u64)>,
    pub evaluations: u64,
    /// Drawn faults that landed while it was exercised.
    pub landings: Vec<Landing>,
    /// History operations its checkers checked.
    pub operations: u64,
    /// One of its checkers was undecided.
    pub undecided: bool,
    /// One of its checkers could not read the history: why.
    pub unreadable: Option<String>,
}

/// A drawn fault that landed: its kind, when it was in force (ns of
/// virtual time), and what it touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Landing {
    pub kind: String,
    pub start_ns: u64,
    pub until_ns: u64,
    pub touches: u64,
}

/// A landing while a claim was exercised, in one branch: evidence a
/// reviewer can read against the claim's window there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LandingExample {
    pub branch: u64,
    /// The claim's first and last evaluation there.
    pub exercised_from_ns: u64,
    pub exercised_until_ns: u64,
    pub landing: Landing,
}

/// Landings kept as examples, per fault kind.
pub(crate) const EXAMPLES: usize = 3;

/// Every claim in one timeline, and whether its harness failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimelineClaims {
    pub claims: Vec<Exercise>,
    /// What failed outside any assertion or checker, if something did.
    pub harness: Option<String>,
    /// The service whose exit that was, if it was one.
    pub service_exit: Option<ServiceExit>,
}

/// A timeline at its end, as the claims see it.
pub struct TimelineEnd<'a> {
    /// Its messages, from power-on (its whole line of descent).
    pub messages: &'a AppendLog<Message>,
    /// Its histories (empty without checkers).
    pub histories: &'a Histories,
    /// The drawn faults that struck in it.
    pub faults: &'a [Episode],
    /// Its checkers' verdicts.
    pub checked: &'a [Checked],
    /// How the guest ended; `None`: the timeline reached its limit first.
    pub end: Option<&'a End>,
    pub end_ns: u64,
    /// When its first failure (an assertion) showed, if one did: what the
    /// harness did after it is a consequence, not a failure of its own.
    pub failed_ns: Option<u64>,
    /// Services that exited with an error in it, no fault having struck
    /// before (`branch.rs`), in order.
    pub service_exits: &'a [ServiceExit],
}

/// What a timeline says of each claim.
pub fn observe(claims: &[ClaimSpec], checkers: &[CheckerSpec], t: &TimelineEnd) -> TimelineClaims {
    let (harness, service_exit) = harness_failure(t).unzip();
    let service_exit = service_exit.flatten();
    if claims.is_empty() {
        return TimelineClaims { claims: Vec::new(), harness, service_exit };
    }
    // Every assertion hit: (vtime, id, message).
    let hits: Vec<(u64, String, String)> = t
        .messages
        .iter()
        .filter_map(|m| match sdk::parse(&m.bytes) {
            SdkMessage::Assert(a) if a.hit => Some((m.vtime.nanos(), a.id, a.message)),
            _ => None,
        })
        .collect();
    let claims = claims
        .iter()
        .map(|claim| {
            let mut times: Vec<u64> = hits
                .iter()
                .filter(|(_, id, message)| claim.assertions.iter().any(|a| a == id || a == message))
                .map(|(t, _, _)| *t)
                .collect();
            let mut e = Exercise::default();
            for name in &claim.checkers {
                let Some(spec) = checkers.iter().find(|c| &c.name == name) else { continue };
                if let Some(events) = t.histories.get(&spec.history) {
                    times.extend(events.iter().filter_map(|ev| ev.time));
                }
                if let Some(c) = t.checked.iter().find(|c| &c.checker == name) {
                    e.operations += c.operations;
                    match &c.status {
                        // A timeline cut off at its limit never made its
                        // final read: undecided there says nothing.
                        Ok(hvsim_checkers::Status::Undecided) => e.undecided |= t.end.is_some(),
                        Ok(_) => {}
                        Err(why) => e.unreadable = Some(format!("{name}: {why}")),
                    }
                }
            }
            e.evaluations = times.len() as u64;
            e.window = times.iter().min().zip(times.iter().max()).map(|(a, b)| (*a, *b));
            if let Some((from, to)) = e.window {
                for f in t.faults.iter().filter(|f| f.landed > 0) {
                    let until_ns = f.ended_ns.unwrap_or(f.end_ns).min(t.end_ns);
                    if f.start_ns <= to && until_ns >= from {
                        let kind = f.kind.name().to_owned();
                        e.landings.push(Landing { kind, start_ns: f.start_ns, until_ns, touches: f.landed });
                    }
                }
            }
            e
        })
        .collect();
    TimelineClaims { claims, harness, service_exit }
}

/// A failure of the harness in a timeline, before any other failure: a
/// service exiting with an error where no fault struck (with it, the exit),
/// the guest ending in a crash, or a Test Composer workload command that
/// exited with an error (not one a fault or the composer stopped).
fn harness_failure(t: &TimelineEnd) -> Option<(String, Option<ServiceExit>)> {
    let before_failure = |ns: u64| t.failed_ns.is_none_or(|f| ns < f);
    if let Some(exit) = t.service_exits.iter().find(|e| before_failure(e.vtime_ns)) {
        return Some((exit.describe_in_timeline(), Some(exit.clone())));
    }
    if let Some(end) = t.end.filter(|e| crate::record::timeline::is_crash(e) && t.failed_ns.is_none()) {
        return Some((format!("the guest ended: {}", end.detail()), None));
    }
    let driver = t.messages.iter().filter(|m| before_failure(m.vtime.nanos())).find_map(|m| {
        match ComposerEvent::of(&m.bytes)? {
            ComposerEvent::Exit { command, service, status, fault: false, stopped: false, .. }
                if status != 0 && is_driver(&command) =>
            {
                Some(format!("Test Composer's {command} in {service} exited with status {status}"))
            }
            _ => None,
        }
    });
    driver.map(|words| (words, None))
}

/// One claim over an exploration: what its timelines said.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ClaimTally {
    pub spec: ClaimSpec,
    /// Timelines run, and those that exercised it.
    pub timelines: u64,
    pub exercised: u64,
    pub evaluations: u64,
    /// Per drawn fault kind: timelines in which one landed while it was
    /// exercised, and over them, the faults and what they touched.
    pub landed: BTreeMap<String, Landings>,
    /// The first few such landings of each kind, with their branch.
    pub examples: Vec<LandingExample>,
    /// History operations its checkers checked, over every timeline.
    pub operations: u64,
    /// Timelines in which a checker of it was undecided.
    pub undecided: u64,
    /// Timelines in which a checker of it could not read the history, and
    /// the first reason.
    pub unreadable: u64,
    pub unreadable_example: Option<String>,
}

/// Drawn faults of one kind that landed while a claim was exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Landings {
    pub timelines: u64,
    pub faults: u64,
    pub touches: u64,
}

/// Timelines whose harness failed, over an exploration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HarnessTally {
    pub timelines: u64,
    /// The first failure, in words.
    pub example: Option<String>,
    /// Where that was a service's exit: the service, its status and what
    /// it wrote last (null: it was not).
    #[serde(default)]
    pub service_exit: Option<ServiceExit>,
}

impl ClaimTally {
    pub fn new(spec: &ClaimSpec) -> ClaimTally {
        ClaimTally {
            spec: spec.clone(),
            timelines: 0,
            exercised: 0,
            evaluations: 0,
            landed: BTreeMap::new(),
            examples: Vec::new(),
            operations: 0,
            undecided: 0,
            unreadable: 0,
            unreadable_example: None,
        }
    }

    /// Adds what `branch`'s timeline said.
    pub fn add(&mut self, e: &Exercise, branch: u64) {
        self.timelines += 1;
        let Some((from, until)) = e.window else { return };
        self.exercised += 1;
        self.evaluations += e.evaluations;
        let mut kinds = BTreeSet::new();
        for landing in &e.landings {
            let l = self.landed.entry(landing.kind.clone()).or_default();
            l.timelines += u64::from(kinds.insert(&landing.kind));
            l.faults += 1;
            l.touches += landing.touches;
            if self.examples.iter().filter(|x| x.landing.kind == landing.kind).count() < EXAMPLES {
                self.examples.push(LandingExample {
                    branch,
                    exercised_from_ns: from,
                    exercised_until_ns: until,
                    landing: landing.clone(),
                });
            }
        }
        self.operations += e.operations;
        self.undecided += u64::from(e.undecided);
        if let Some(why) = &e.unreadable {
            self.unreadable += 1;
            self.unreadable_example.get_or_insert_with(|| why.clone());
        }
    }
}

impl HarnessTally {
    /// Adds a timeline's harness failure, if it had one.
    pub fn add(&mut self, t: &TimelineClaims) {
        if let Some(f) = &t.harness {
            self.timelines += 1;
            if self.example.is_none() {
                self.example = Some(f.clone());
                self.service_exit = t.service_exit.clone();
            }
        }
    }
}

/// A claim's verdict, why, and the evidence: what report.json, report.md,
/// report.html and findings say of it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ClaimReport {
    pub id: String,
    pub statement: String,
    pub verdict: ClaimVerdict,
    /// For a fail or a harness error: whose it is.
    pub blame: Option<Blame>,
    /// Why this verdict, in one sentence.
    pub reason: String,
    pub evidence: Evidence,
    /// The bugs that falsify it, most trusted first.
    pub bugs: Vec<String>,
}

/// What a verdict rests on.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Evidence {
    /// Timelines run, and those that exercised the claim.
    pub timelines: u64,
    pub exercised: u64,
    /// Evaluations of its properties (assertion hits, history operations
    /// recorded), over every timeline.
    pub evaluations: u64,
    /// The fault kinds it must survive.
    pub required_faults: Vec<String>,
    /// Per drawn fault kind, what landed while it was exercised.
    pub faults_landed: BTreeMap<String, Landings>,
    /// The first few of those landings of each kind, each with its branch,
    /// its times and the claim's window there.
    pub landings: Vec<LandingExample>,
    /// Per checker: timelines checked and operations checked.
    pub checkers: Vec<CheckerEvidence>,
    /// Per assertion: hits and passes.
    pub assertions: Vec<AssertionEvidence>,
    /// History operations its checkers checked, summed over the timelines
    /// that exercised it (what a prefix shared by branches recorded counts
    /// in each), and the least the claim accepts.
    pub operations: u64,
    pub min_operations: u64,
}

/// What one checker of a claim did over the exploration.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CheckerEvidence {
    pub name: String,
    /// Timelines it judged, and the operations it checked over them.
    pub timelines: u64,
    pub operations: u64,
    /// It judged no timeline.
    pub never_reached: bool,
}

/// What one assertion of a claim did over the exploration (every
/// assertion with that message or id).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct AssertionEvidence {
    pub name: String,
    pub hits: u64,
    /// Hits where its condition held.
    pub held: u64,
    /// No timeline hit it.
    pub never_reached: bool,
}

/// What a verdict needs besides the claim's own tally.
pub struct Context<'a> {
    pub assertions: &'a Assertions,
    pub checkers: &'a [CheckerTally],
    pub bugs: &'a [BugRecord],
    pub harness: &'a HarnessTally,
    pub host_limits: bool,
}

/// The claim's verdict, by the rules in docs/claims.md, in their order.
pub fn judge(t: &ClaimTally, cx: &Context) -> ClaimReport {
    let spec = &t.spec;
    let checkers: Vec<CheckerEvidence> = spec
        .checkers
        .iter()
        .map(|name| {
            let c = cx.checkers.iter().find(|c| &c.spec.name == name);
            let (timelines, operations) = c.map_or((0, 0), |c| (c.timelines, c.operations));
            CheckerEvidence { name: name.clone(), timelines, operations, never_reached: timelines == 0 }
        })
        .collect();
    let assertions: Vec<AssertionEvidence> = spec
        .assertions
        .iter()
        .map(|a| {
            let (hits, held) = cx
                .assertions
                .iter()
                .filter(|r| &r.id == a || &r.message == a)
                .fold((0, 0), |(h, p), r| (h + r.hits, p + r.passes));
            AssertionEvidence { name: a.clone(), hits, held, never_reached: hits == 0 }
        })
        .collect();
    let required: Vec<String> = spec.faults.iter().map(|k| k.name().to_owned()).collect();
    let evidence = Evidence {
        timelines: t.timelines,
        exercised: t.exercised,
        evaluations: t.evaluations,
        required_faults: required.clone(),
        faults_landed: t.landed.clone(),
        landings: t.examples.clone(),
        checkers,
        assertions,
        operations: t.operations,
        min_operations: spec.min_operations,
    };
    let mut bugs: Vec<&BugRecord> = cx.bugs.iter().filter(|b| falsifies(spec, &b.bug)).collect();
    bugs.sort_by_key(|b| (fail_verdict(b), b.at.vtime_ns));
    let report = |verdict: ClaimVerdict, blame: Option<Blame>, reason: String| ClaimReport {
        id: spec.id.clone(),
        statement: spec.statement.clone(),
        verdict,
        blame,
        reason,
        evidence: evidence.clone(),
        bugs: bugs.iter().map(|b| b.id.clone()).collect(),
    };
    // 1. A property failed.
    if let Some(first) = bugs.first() {
        let verdict = fail_verdict(first);
        let blame = blame(first, cx.host_limits);
        let why = format!("{} {}: {} ({})", first.id, first.summary, first.reproduction_words(), blame.name());
        return report(verdict, Some(blame), why);
    }
    // 2. Its oracle could not read what it was given.
    if let Some(why) = &t.unreadable_example {
        let reason = format!("in {} timeline(s) a checker could not read the history: {why}", t.unreadable);
        return report(ClaimVerdict::FailUnconfirmed, Some(Blame::Checker), reason);
    }
    // 3. The harness failed: nothing else can be trusted.
    if let Some(why) = &cx.harness.example {
        let reason = format!("the harness failed in {} timeline(s): {why}", cx.harness.timelines);
        return report(ClaimVerdict::HarnessError, Some(Blame::Harness), reason);
    }
    // 4. It, or one of its properties, was never evaluated.
    let never: Vec<&str> = (evidence.checkers.iter().filter(|c| c.never_reached).map(|c| c.name.as_str()))
        .chain(evidence.assertions.iter().filter(|a| a.never_reached).map(|a| a.name.as_str()))
        .collect();
    if t.exercised == 0 || !never.is_empty() {
        let reason = if never.is_empty() {
            format!("none of its properties was evaluated in {} timeline(s)", t.timelines)
        } else {
            format!("never evaluated: {}", never.join(", "))
        };
        return report(ClaimVerdict::InconclusiveNeverReached, None, reason);
    }
    // 5. Its checkers said too little.
    if t.undecided > 0 {
        let reason = format!(
            "a checker was undecided in {} timeline(s) that ran to the guest's end (no final read or drain, or the \
             search's limits)",
            t.undecided
        );
        return report(ClaimVerdict::InconclusiveChecker, None, reason);
    }
    if !spec.checkers.is_empty() && t.operations < spec.min_operations {
        let reason = format!(
            "its checkers checked {} operation(s), fewer than the {} it asks",
            t.operations, spec.min_operations
        );
        return report(ClaimVerdict::InconclusiveChecker, None, reason);
    }
    // 6. The faults it must survive never struck while it was exercised.
    let missing: Vec<&str> = required.iter().filter(|k| !t.landed.contains_key(*k)).map(String::as_str).collect();
    if !missing.is_empty() {
        let reason =
            format!("exercised in {} timeline(s), but no {} landed while it was", t.exercised, missing.join(" or "));
        return report(ClaimVerdict::InconclusiveFaultsNotLanded, None, reason);
    }
    let landed: Vec<String> = required
        .iter()
        .map(|k| {
            let l = t.landed[k];
            format!("{k}: {} fault(s) in {} timeline(s), touching {}", l.faults, l.timelines, l.touches)
        })
        .collect();
    let mut reason = format!("held in {} exercised timeline(s)", t.exercised);
    if !landed.is_empty() {
        reason += &format!(" under {}", landed.join("; "));
    }
    if t.operations > 0 {
        reason += &format!("; {} history operation(s) checked", t.operations);
    }
    report(ClaimVerdict::Pass, None, reason)
}

/// The distinct fault kinds named, for the manifest's checks.
pub fn kinds(names: &[String]) -> Result<Vec<DrawnKind>, String> {
    let mut seen = BTreeSet::new();
    names
        .iter()
        .map(|n| {
            let k = DrawnKind::parse(n).ok_or_else(|| {
                format!("unknown fault kind {n:?} (the kinds of docs/faults.md's [[draw.fault]], e.g. partition, kill)")
            })?;
            if !seen.insert(k) {
                return Err(format!("fault kind {n:?} named twice"));
            }
            Ok(k)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::bug::{Fingerprint, Reproduction};
    use crate::record::sdk::{AssertKind, Location};
    use crate::record::timeline::{Point, Timeline};
    use hvsim_guest_image::world::World;
    use hvsim_vmm::faults::schedule::Effect;
    use hvsim_vmm::Vtime;
    use serde_json::Value;

    fn claim(assertions: &[&str], checkers: &[&str], faults: &[DrawnKind]) -> ClaimSpec {
        ClaimSpec {
            id: "c".into(),
            statement: "s".into(),
            checkers: checkers.iter().map(|s| s.to_string()).collect(),
            assertions: assertions.iter().map(|s| s.to_string()).collect(),
            faults: faults.to_vec(),
            min_operations: 1,
        }
    }

    fn assertion_bug(message: &str, attempts: u32, reproduced: u32, same_memory: u32) -> BugRecord {
        let kind = BugKind::Assertion {
            id: message.into(),
            message: message.into(),
            assertion: AssertKind::Always,
            details: Value::Null,
        };
        bug(kind, Reproduction { attempts, reproduced, same_memory, wanted: attempts })
    }

    fn bug(kind: BugKind, reproduction: Reproduction) -> BugRecord {
        let at = Point { events: 1, vtime_ns: 1 };
        let fp = Fingerprint { trace_hash: "t".into(), memory_hash: "m".into() };
        let mut b = BugRecord::new(
            kind,
            at,
            Timeline::at(at),
            crate::Target::Raw { guest: "demo".into() },
            1,
            1,
            World::default(),
            fp,
            reproduction.wanted,
        );
        b.reproduction = reproduction;
        b
    }

    #[test]
    fn blame_follows_the_rules_in_order() {
        // Reproduced: the system's, with or without host limits, even if
        // memory differed on a host with limits.
        assert_eq!(blame(&assertion_bug("a", 2, 2, 2), false), Blame::System);
        assert_eq!(blame(&assertion_bug("a", 2, 2, 0), true), Blame::System);
        // Seen once, never contradicted: the system's.
        assert_eq!(blame(&assertion_bug("a", 0, 0, 0), false), Blame::System);
        // Not reproduced: the host's where its limits explain it, else
        // hvsim's (the harness).
        assert_eq!(blame(&assertion_bug("a", 3, 1, 1), true), Blame::Environment);
        assert_eq!(blame(&assertion_bug("a", 3, 1, 1), false), Blame::Harness);
        // A crash, and a Test Composer workload command: the harness's; a
        // Test Composer check: the system's.
        let crash = bug(
            BugKind::Crash { end: End::Exit { status: 3 } },
            Reproduction { attempts: 1, reproduced: 1, same_memory: 1, wanted: 1 },
        );
        assert_eq!(blame(&crash, true), Blame::Harness);
        assert_eq!(
            blame(&assertion_bug("Test Composer: t/parallel_driver_add.sh exits 0", 1, 1, 1), false),
            Blame::Harness
        );
        assert_eq!(blame(&assertion_bug("Test Composer: t/finally_check.sh exits 0", 1, 1, 1), false), Blame::System);
    }

    #[test]
    fn fail_verdicts_follow_the_reexecutions() {
        assert_eq!(fail_verdict(&assertion_bug("a", 2, 2, 2)), ClaimVerdict::FailReproducible);
        assert_eq!(fail_verdict(&assertion_bug("a", 2, 1, 1)), ClaimVerdict::FailFlaky);
        assert_eq!(fail_verdict(&assertion_bug("a", 0, 0, 0)), ClaimVerdict::FailUnconfirmed);
        let mut unconfirmed = assertion_bug("a", 1, 1, 1);
        unconfirmed.reproduction.wanted = 3;
        assert_eq!(fail_verdict(&unconfirmed), ClaimVerdict::FailUnconfirmed);
    }

    fn hit(t: u64, message: &str, condition: bool) -> Message {
        let line = format!(
            r#"{{"antithesis_assert":{{"id":"{message}","message":"{message}","condition":{condition},"hit":true,"must_hit":true,"assert_type":"always","display_type":"Always","location":{{}},"details":null}}}}"#
        );
        Message { vtime: Vtime(t), bytes: line.into_bytes(), sender: None }
    }

    fn partition(start_ns: u64, end_ns: u64, landed: u64) -> Episode {
        Episode {
            id: start_ns,
            kind: DrawnKind::Partition,
            start_ns,
            end_ns,
            effect: Effect::Crash { nodes: vec![0], torn: false },
            landed,
            ended_ns: Some(end_ns),
        }
    }

    #[test]
    fn a_fault_lands_while_exercised_only_if_it_touched_something_in_the_window() {
        let c = claim(&["ok"], &[], &[DrawnKind::Partition]);
        let messages: AppendLog<Message> =
            [hit(100, "ok", true), hit(200, "other", true), hit(300, "ok", true)].into_iter().collect();
        let faults = [partition(10, 50, 4), partition(250, 400, 0), partition(290, 310, 2), partition(301, 500, 9)];
        let histories = Histories::new();
        let end = |faults, end, failed_ns| TimelineEnd {
            messages: &messages,
            histories: &histories,
            faults,
            checked: &[],
            end,
            end_ns: 1000,
            failed_ns,
            service_exits: &[],
        };
        let t = observe(std::slice::from_ref(&c), &[], &end(&faults, None, None));
        let e = &t.claims[0];
        assert_eq!((e.window, e.evaluations), (Some((100, 300)), 2));
        // Before the window, touched nothing, and after it: not counted.
        assert_eq!(e.landings, [Landing { kind: "partition".into(), start_ns: 290, until_ns: 310, touches: 2 }]);
        assert_eq!(t.harness, None);
        // Nothing evaluated: not exercised, nothing landed "meanwhile".
        let t = observe(&[claim(&["never"], &[], &[])], &[], &end(&faults, None, None));
        assert_eq!(t.claims[0], Exercise::default());
        // A crash is the harness's, unless a failure came first (then it is
        // that failure's consequence).
        let crash = End::Exit { status: 3 };
        assert_eq!(observe(&[], &[], &end(&[], Some(&crash), Some(200))).harness, None);
        let t = observe(&[], &[], &end(&[], Some(&crash), None));
        assert_eq!(t.harness.as_deref(), Some("the guest ended: guest powered off with status 3"));
    }

    /// A service's exit where no fault struck is the harness's failure,
    /// named with the service (before the guest's end it led to), unless an
    /// assertion failed first; the tally keeps the first with its output.
    #[test]
    fn a_service_exiting_with_an_error_is_the_harness_failure() {
        let histories = Histories::new();
        let exit =
            ServiceExit { service: "db".into(), status: 3, vtime_ns: 150, last_output: vec!["lost my lease".into()] };
        let crash = End::Exit { status: 3 };
        let t = |failed_ns| {
            observe(
                &[],
                &[],
                &TimelineEnd {
                    messages: &AppendLog::new(),
                    histories: &histories,
                    faults: &[],
                    checked: &[],
                    end: Some(&crash),
                    end_ns: 1000,
                    failed_ns,
                    service_exits: std::slice::from_ref(&exit),
                },
            )
        };
        let first = t(None);
        assert_eq!(
            first.harness.as_deref(),
            Some("service db exited with status 3 at 0.000 s of virtual time, in a timeline where no fault had struck")
        );
        assert_eq!(first.service_exit.as_ref(), Some(&exit));
        let after = t(Some(100));
        assert_eq!((after.harness, after.service_exit), (None, None));
        let mut tally = HarnessTally::default();
        tally.add(&first);
        tally.add(&first);
        assert_eq!((tally.timelines, tally.service_exit), (2, Some(exit)));
    }

    fn set_spec() -> CheckerSpec {
        CheckerSpec {
            name: "set".into(),
            model: hvsim_checkers::ModelKind::Set,
            history: None,
            consistency: None,
            writes_follow_reads: None,
        }
    }

    fn judged(
        c: &ClaimSpec,
        seen: &[Exercise],
        bugs: &[BugRecord],
        harness: &HarnessTally,
        assertions: &Assertions,
    ) -> ClaimReport {
        let mut t = ClaimTally::new(c);
        for e in seen {
            t.add(e, 7);
        }
        let cx = Context { assertions, checkers: &[], bugs, harness, host_limits: true };
        judge(&t, &cx)
    }

    #[test]
    fn verdicts_follow_the_rules_in_order() {
        let c = claim(&["ok"], &[], &[DrawnKind::Partition]);
        let mut assertions = Assertions::default();
        let a = crate::record::sdk::Assertion {
            id: "ok".into(),
            message: "ok".into(),
            kind: AssertKind::Always,
            display: "Always".into(),
            hit: true,
            condition: true,
            location: Location::default(),
            details: Value::Null,
        };
        assertions.observe(&a);
        let landed = Exercise {
            window: Some((1, 2)),
            evaluations: 2,
            landings: vec![
                Landing { kind: "partition".into(), start_ns: 1, until_ns: 2, touches: 3 },
                Landing { kind: "partition".into(), start_ns: 2, until_ns: 3, touches: 4 },
            ],
            ..Exercise::default()
        };
        let held = Exercise { window: Some((1, 2)), evaluations: 2, ..Exercise::default() };
        let clean = HarnessTally::default();
        let r = judged(&c, &[landed.clone(), held.clone()], &[], &clean, &assertions);
        assert_eq!(r.verdict, ClaimVerdict::Pass, "{}", r.reason);
        assert_eq!(r.evidence.faults_landed["partition"], Landings { timelines: 1, faults: 2, touches: 7 });
        assert!(r.reason.contains("partition: 2 fault(s) in 1 timeline(s), touching 7"), "{}", r.reason);
        assert_eq!((r.evidence.landings.len(), r.evidence.landings[1].branch), (2, 7));
        // Held, but the partition never landed while it was exercised.
        let r = judged(&c, std::slice::from_ref(&held), &[], &clean, &assertions);
        assert_eq!(r.verdict, ClaimVerdict::InconclusiveFaultsNotLanded, "{}", r.reason);
        // The harness failed somewhere: nothing can be trusted.
        let broken = HarnessTally { timelines: 1, example: Some("the guest ended".into()), service_exit: None };
        let r = judged(&c, std::slice::from_ref(&landed), &[], &broken, &assertions);
        assert_eq!((r.verdict, r.blame), (ClaimVerdict::HarnessError, Some(Blame::Harness)));
        // A bug falsifies it: that wins over everything.
        let bugs = [assertion_bug("ok", 2, 2, 0)];
        let r = judged(&c, std::slice::from_ref(&landed), &bugs, &broken, &assertions);
        assert_eq!((r.verdict, r.blame), (ClaimVerdict::FailReproducible, Some(Blame::System)));
        assert_eq!(r.bugs, [bugs[0].id.clone()]);
        // Never exercised; an assertion of it never reached.
        let r = judged(&c, &[Exercise::default()], &[], &clean, &assertions);
        assert_eq!(r.verdict, ClaimVerdict::InconclusiveNeverReached);
        let r = judged(&claim(&["ok", "gone"], &[], &[]), std::slice::from_ref(&held), &[], &clean, &assertions);
        assert_eq!(r.verdict, ClaimVerdict::InconclusiveNeverReached);
        assert!(r.reason.contains("gone"), "{}", r.reason);
        // Too little history checked.
        let mut thin = claim(&[], &["set"], &[]);
        thin.min_operations = 5;
        let few = Exercise { operations: 4, ..held.clone() };
        let checked = [crate::record::checkers::CheckerTally {
            timelines: 1,
            operations: 4,
            ..crate::record::checkers::CheckerTally::new(&set_spec())
        }];
        let mut t = ClaimTally::new(&thin);
        t.add(&few, 1);
        let cx =
            Context { assertions: &assertions, checkers: &checked, bugs: &[], harness: &clean, host_limits: false };
        let r = judge(&t, &cx);
        assert_eq!(r.verdict, ClaimVerdict::InconclusiveChecker, "{}", r.reason);
        assert!(r.reason.contains("4 operation(s), fewer than the 5"), "{}", r.reason);
        // A checker undecided; one that could not read the history.
        let undecided = Exercise { undecided: true, ..landed.clone() };
        let r = judged(&c, &[undecided], &[], &clean, &assertions);
        assert_eq!(r.verdict, ClaimVerdict::InconclusiveChecker);
        let unreadable = Exercise { unreadable: Some("set: duplicate add".into()), ..landed.clone() };
        let r = judged(&c, &[unreadable], &[], &clean, &assertions);
        assert_eq!((r.verdict, r.blame), (ClaimVerdict::FailUnconfirmed, Some(Blame::Checker)));
    }
}
