//! The project's checkers (`manifest.rs`), run at the end of every timeline
//! on the histories its programs recorded through the SDK (`history.rs`).
//! A timeline whose history a checker finds invalid has a bug, like a
//! failed assertion; its record keeps the smallest violating sub-history
//! the shrinker finds and the checker's explanation. A checker runs only
//! on a timeline that recorded events for it: a timeline with nothing to
//! check is not counted as valid.

use hvsim_checkers::history::Event;
use hvsim_checkers::shrink::{self, Shrunk};
use hvsim_checkers::txn::Consistency;
use hvsim_checkers::{judge, Judgement, Limits, ModelKind, Options, Status};
use hvsim_vmm::machine::Message;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::history::Histories;

/// A checker the project names: which model, over which history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CheckerSpec {
    /// Its name in reports and in its bugs' ids.
    pub name: String,
    pub model: ModelKind,
    /// The history it checks (the events' `history` field); `None`: the
    /// events without one.
    #[serde(default)]
    pub history: Option<String>,
    /// The isolation level a transactional model's history must keep
    /// (`serializable` if not given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistency: Option<Consistency>,
    /// rw-register: whether a transaction's write to a key follows the
    /// version of it the transaction read (true if not given; never at
    /// read-uncommitted; docs/checkers.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_follow_reads: Option<bool>,
}

impl CheckerSpec {
    fn options(&self) -> Options {
        let default = Options::default();
        Options {
            limits: LIMITS,
            consistency: self.consistency.unwrap_or(default.consistency),
            writes_follow_reads: self.writes_follow_reads.unwrap_or(default.writes_follow_reads),
            ..default
        }
    }
}

/// How far a linearizability search may go on one key at a timeline's
/// end; beyond it the verdict is "undecided", never a guess.
pub const LIMITS: Limits = Limits { memo: true, steps: 10_000_000, memo_bytes: 1 << 28, time: None };

/// Candidate sub-histories the shrinker may check for one new bug.
const SHRINK_CHECKS: u32 = 2_000;

/// What one checker said of one timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Checked {
    pub checker: String,
    /// The verdict, or why the history could not be checked (it breaks the
    /// format: a process invoking twice, an add of a duplicate element).
    pub status: Result<Status, String>,
    /// Operations (invocations) in the history.
    pub operations: u64,
}

/// A checker that found a timeline's history invalid.
#[derive(Clone, Debug)]
pub struct Violation {
    pub spec: CheckerSpec,
    pub judgement: Judgement,
    pub events: Vec<Event>,
}

/// Runs every checker on a timeline's histories (`sdk::histories` its whole
/// run); the first violation, in the manifest's order, is returned whole.
pub fn run(specs: &[CheckerSpec], histories: &Histories) -> (Vec<Checked>, Option<Violation>) {
    let mut checked = Vec::new();
    let mut violation = None;
    for spec in specs {
        let Some(events) = histories.get(&spec.history).filter(|e| !e.is_empty()) else { continue };
        let operations = events.iter().filter(|e| e.kind == hvsim_checkers::history::EventType::Invoke).count();
        let judged = judge(spec.model, events, spec.options());
        let status = judged.as_ref().map(|j| j.status).map_err(ToString::to_string);
        checked.push(Checked { checker: spec.name.clone(), status, operations: operations as u64 });
        match judged {
            Ok(judgement) if judgement.status == Status::Invalid && violation.is_none() => {
                violation = Some(Violation { spec: spec.clone(), judgement, events: events.clone() });
            }
            _ => {}
        }
    }
    (checked, violation)
}

/// Whether `spec` finds the history in `messages` invalid, and its
/// summary: what a replay observes at a checker bug's point.
pub fn observe<'a>(spec: &CheckerSpec, messages: impl IntoIterator<Item = &'a Message>) -> Option<String> {
    let (_, violation) = run(std::slice::from_ref(spec), &crate::record::sdk::histories(messages));
    violation.map(|v| v.judgement.summary)
}

/// What a checker bug's record keeps of the history.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HistoryFinding {
    pub checker: CheckerSpec,
    /// The whole history's verdict, as the model gives it.
    pub verdict: Value,
    /// Each thing wrong, named.
    pub anomalies: Vec<String>,
    /// How the sub-history was found.
    pub shrink: Shrunk,
    /// The smallest violating sub-history found, events stamped with
    /// virtual time: as JSON lines, `hvsim check --model M` takes it.
    pub sub_history: Vec<Event>,
}

impl Violation {
    /// Shrinks the history to the smallest sub-history found that shows
    /// the same anomalies (`hvsim_checkers::shrink`).
    pub fn finding(&self) -> HistoryFinding {
        let mut shrunk = shrink::shrink(
            self.spec.model,
            &self.events,
            &self.judgement.anomalies,
            self.spec.options(),
            SHRINK_CHECKS,
        );
        HistoryFinding {
            checker: self.spec.clone(),
            verdict: self.judgement.verdict.clone(),
            anomalies: self.judgement.anomalies.iter().cloned().collect(),
            sub_history: std::mem::take(&mut shrunk.events),
            shrink: shrunk,
        }
    }
}

/// One checker over an exploration.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CheckerTally {
    #[serde(flatten)]
    pub spec: CheckerSpec,
    /// Timelines that recorded a history for it, and its verdicts there.
    pub timelines: u64,
    pub valid: u64,
    pub invalid: u64,
    pub undecided: u64,
    /// Histories it could not check (they break the format), and the
    /// first reason.
    pub malformed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed_example: Option<String>,
    /// Operations checked, over every timeline.
    pub operations: u64,
    /// Its first bug's id.
    #[serde(default)]
    pub bug: Option<String>,
}

impl CheckerTally {
    pub fn new(spec: &CheckerSpec) -> CheckerTally {
        CheckerTally {
            spec: spec.clone(),
            timelines: 0,
            valid: 0,
            invalid: 0,
            undecided: 0,
            malformed: 0,
            malformed_example: None,
            operations: 0,
            bug: None,
        }
    }

    pub fn add(&mut self, c: &Checked) {
        assert_eq!(c.checker, self.spec.name);
        self.timelines += 1;
        self.operations += c.operations;
        match &c.status {
            Ok(Status::Valid) => self.valid += 1,
            Ok(Status::Invalid) => self.invalid += 1,
            Ok(Status::Undecided) => self.undecided += 1,
            Err(why) => {
                self.malformed += 1;
                self.malformed_example.get_or_insert_with(|| why.clone());
            }
        }
    }
}
