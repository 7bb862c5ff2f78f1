//! One verdict for every model: whether a history is valid, invalid or
//! undecided, a line for people, the model's own verdict, and the
//! anomalies it found, each named so that a sub-history can be asked
//! whether it still shows them (`shrink.rs`). `hvsim check` prints it; the
//! explorer files an invalid one as a bug.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::history::Event;
use crate::lease::{self, LeaseVerdict};
use crate::ledger::{self, LedgerVerdict};
use crate::linearizable::{self, Limits, Verdict};
use crate::log::{self, LogReport, LogVerdict};
use crate::model;
use crate::queue::{self, QueueKey, QueueVerdict};
use crate::set::{self, SetKey, SetVerdict};
use crate::txn::{self, Consistency, Searches, TxnModel, TxnOptions, TxnVerdict, Validity};

/// What a history's objects are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// A read/write/compare-and-set register per key: linearizability.
    Register,
    /// A set per key: `add`, and a final `read` of all of it.
    Set,
    /// A queue per key: `enqueue`, `dequeue`, and a final `drain`.
    Queue,
    /// Accounts: `open`, `transfer`, `read` of every balance; totals
    /// conserved, no account below zero.
    Ledger,
    /// A lease per key: `acquire` (for a term) and `release`; no two
    /// holders at once, in virtual time.
    Lease,
    /// An append-only log: `append`, and `read` of all of it; one order for
    /// every reader, no acknowledged entry lost.
    Log,
    /// Transactions appending to and reading lists: isolation anomalies.
    #[serde(rename = "list-append")]
    ListAppend,
    /// Transactions writing and reading registers: isolation anomalies.
    #[serde(rename = "rw-register")]
    RwRegister,
}

impl ModelKind {
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Register => "register",
            ModelKind::Set => "set",
            ModelKind::Queue => "queue",
            ModelKind::Ledger => "ledger",
            ModelKind::Lease => "lease",
            ModelKind::Log => "log",
            ModelKind::ListAppend => "list-append",
            ModelKind::RwRegister => "rw-register",
        }
    }

    /// Its transactional model, if it is one.
    pub fn transactional(self) -> Option<TxnModel> {
        match self {
            ModelKind::ListAppend => Some(TxnModel::ListAppend),
            ModelKind::RwRegister => Some(TxnModel::RwRegister),
            ModelKind::Register
            | ModelKind::Set
            | ModelKind::Queue
            | ModelKind::Ledger
            | ModelKind::Lease
            | ModelKind::Log => None,
        }
    }
}

/// What a check is bounded by and held to.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The linearizability search's bounds; their steps bound the
    /// transactional searches too.
    pub limits: Limits,
    /// The model a transactional history must satisfy.
    pub consistency: Consistency,
    /// rw-register: writes follow reads within a transaction
    /// (`txn::rw_register`).
    pub writes_follow_reads: bool,
    /// Which models a transactional check searches executions for.
    pub searches: Searches,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            limits: Limits::default(),
            consistency: Consistency::Serializable,
            writes_follow_reads: true,
            searches: Searches::Standing,
        }
    }
}

impl Options {
    /// The transactional checker's options.
    pub fn txn(&self) -> TxnOptions {
        TxnOptions {
            consistency: self.consistency,
            writes_follow_reads: self.writes_follow_reads,
            steps: self.limits.steps,
            searches: self.searches,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Valid,
    Invalid,
    /// Nothing wrong was found, and the history cannot tell whether
    /// something is: the search gave up, or nobody read the set back.
    Undecided,
}

/// A model's verdict on a history.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    pub status: Status,
    /// One line for people.
    pub summary: String,
    /// The model's own verdict, with all it counted.
    pub verdict: Value,
    /// What is wrong, one name each (`lost "s" 3`, `not linearizable "r"`).
    pub anomalies: BTreeSet<String>,
}

/// Checks `events` against `model`.
pub fn judge(model: ModelKind, events: &[Event], options: Options) -> Result<Judgement> {
    match model {
        ModelKind::Register => {
            let v = linearizable::check(&model::operations(events)?, options.limits)?;
            Ok(register(&v))
        }
        ModelKind::ListAppend | ModelKind::RwRegister => {
            let model = model.transactional().expect("a transactional model");
            Ok(transactional(&txn::check(model, events, options.txn())?))
        }
        ModelKind::Set => Ok(set(&set::check(events)?)),
        ModelKind::Queue => Ok(queue(&queue::check(events)?)),
        ModelKind::Ledger => Ok(ledger(&ledger::check(events)?)),
        ModelKind::Lease => Ok(lease(&lease::check(events)?)),
        ModelKind::Log => Ok(log(&log::check(events)?)),
    }
}

fn key_prefix(key: &Option<String>) -> String {
    key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default()
}

fn register(v: &Verdict) -> Judgement {
    let in_key = |key: &Option<String>| key.as_deref().map(|k| format!(" (key {k})")).unwrap_or_default();
    let (status, summary, anomalies) = match v {
        Verdict::Linearizable { operations, keys } => {
            (Status::Valid, format!("linearizable: {operations} operations on {keys} key(s)"), BTreeSet::new())
        }
        Verdict::NotLinearizable { key, op, placed, of, .. } => (
            Status::Invalid,
            format!(
                "NOT linearizable{}: no order of the operations explains {op} (at best {placed} of {of} ordered)",
                in_key(key)
            ),
            BTreeSet::from([format!("not linearizable {}", Value::from(key.clone()))]),
        ),
        Verdict::Unknown { key, steps, why } => (
            Status::Undecided,
            format!("undecided{}: the search reached {why} after {steps} steps", in_key(key)),
            BTreeSet::new(),
        ),
    };
    Judgement { status, summary, verdict: serde_json::to_value(v).expect("verdicts serialize"), anomalies }
}

fn ledger(v: &LedgerVerdict) -> Judgement {
    let counted = |t: &ledger::Transfers| {
        format!("{} transfers ({} ok, {} failed, {} unknown)", t.ok + t.failed + t.unknown, t.ok, t.failed, t.unknown)
    };
    let (status, summary, anomalies) = match v {
        LedgerVerdict::Valid { total, reads, transfers } => (
            Status::Valid,
            format!(
                "valid: every one of {reads} read(s) shows the total {total}, no account below zero; {}",
                counted(transfers)
            ),
            BTreeSet::new(),
        ),
        LedgerVerdict::Invalid { total, reads, transfers, bad } => {
            let each: Vec<String> = bad
                .iter()
                .map(|b| {
                    let mut what = vec![format!("the read at line {} shows {}", b.line, b.total)];
                    what.extend(b.negative.iter().map(|(a, v)| format!("{a} at {v}")));
                    what.extend(b.unexpected.iter().map(|a| format!("{a} never opened")));
                    what.extend(b.missing.iter().map(|a| format!("{a} missing")));
                    what.join(", ")
                })
                .collect();
            let anomalies = bad.iter().map(|b| format!("bad read at line {}", b.line)).collect();
            let summary = format!(
                "INVALID: total {total}, {} of {reads} read(s) wrong: {}; {}",
                bad.len(),
                each.join("; "),
                counted(transfers)
            );
            (Status::Invalid, summary, anomalies)
        }
        LedgerVerdict::Undecided { transfers } => {
            (Status::Undecided, format!("undecided (no read succeeded); {}", counted(transfers)), BTreeSet::new())
        }
    };
    Judgement { status, summary, verdict: serde_json::to_value(v).expect("verdicts serialize"), anomalies }
}

fn lease(v: &LeaseVerdict) -> Judgement {
    let (status, summary) = match v {
        LeaseVerdict::Valid { tenures, leases } => {
            (Status::Valid, format!("valid: {tenures} tenure(s) of {leases} lease(s), never two holders at once"))
        }
        LeaseVerdict::Invalid { tenures, leases, overlaps } => {
            let each: Vec<String> = overlaps
                .iter()
                .map(|o| {
                    format!(
                        "{}processes {} (line {}) and {} (line {}) both held it for {:.1} ms: {}",
                        key_prefix(&o.key),
                        o.first.process,
                        o.first.line,
                        o.second.process,
                        o.second.line,
                        o.overlap_ns as f64 / 1e6,
                        o.explanation()
                    )
                })
                .collect();
            let summary = format!(
                "INVALID: {} time(s) two holders at once, in {tenures} tenure(s) of {leases} lease(s): {}",
                overlaps.len(),
                each.join("; ")
            );
            (Status::Invalid, summary)
        }
        LeaseVerdict::Undecided { acquires } => {
            (Status::Undecided, format!("undecided: none of {acquires} acquire(s) succeeded"))
        }
    };
    let anomalies = lease::anomalies(v);
    Judgement { status, summary, verdict: serde_json::to_value(v).expect("verdicts serialize"), anomalies }
}

fn log(v: &LogVerdict) -> Judgement {
    let (r, status, what): (&LogReport, _, _) = match v {
        LogVerdict::Valid(r) => (r, Status::Valid, "valid"),
        LogVerdict::Invalid(r) => (r, Status::Invalid, "INVALID"),
        LogVerdict::Undecided(r) => (r, Status::Undecided, "undecided (the log was never read)"),
    };
    let mut anomalies = BTreeSet::new();
    named(&mut anomalies, "lost", &None, &r.lost);
    named(&mut anomalies, "unexpected", &None, &r.unexpected);
    named(&mut anomalies, "duplicated", &None, &r.duplicated);
    anomalies.extend(r.reordered.iter().map(|(line, _)| format!("reordered read at line {line}")));
    let reordered: Vec<String> =
        r.reordered.iter().map(|(line, longest)| format!("line {line} against line {longest}")).collect();
    let summary = format!(
        "{what}: {} acknowledged of {} appended, {} read(s): {} lost {}, {} unexpected {}, {} duplicated, {} read(s) in another order [{}]",
        r.acknowledged,
        r.acknowledged + r.failed + r.unknown,
        r.reads,
        r.lost.len(),
        Value::from(r.lost.clone()),
        r.unexpected.len(),
        Value::from(r.unexpected.clone()),
        r.duplicated.len(),
        r.reordered.len(),
        reordered.join(", ")
    );
    Judgement { status, summary, verdict: serde_json::to_value(v).expect("verdicts serialize"), anomalies }
}

fn transactional(v: &TxnVerdict) -> Judgement {
    let status = match v.verdict {
        Validity::Valid => Status::Valid,
        Validity::Invalid => Status::Invalid,
        Validity::Undecided => Status::Undecided,
    };
    Judgement {
        status,
        summary: v.summary(),
        verdict: serde_json::to_value(v).expect("verdicts serialize"),
        anomalies: v.violations().into_iter().map(|a| a.name().to_owned()).collect(),
    }
}

/// `what key value` for each value.
fn named(anomalies: &mut BTreeSet<String>, what: &str, key: &Option<String>, values: &[Value]) {
    let key = Value::from(key.clone());
    anomalies.extend(values.iter().map(|v| format!("{what} {key} {v}")));
}

fn set(v: &SetVerdict) -> Judgement {
    let (keys, status, what) = match v {
        SetVerdict::Valid { keys } => (keys, Status::Valid, "valid"),
        SetVerdict::Invalid { keys } => (keys, Status::Invalid, "INVALID"),
        SetVerdict::Undecided { keys } => (keys, Status::Undecided, "undecided (a set was never read)"),
    };
    let mut anomalies = BTreeSet::new();
    let each = |k: &SetKey| {
        format!(
            "{}{} acknowledged of {} added: {} lost {}, {} unexpected {}, {} duplicated, {} failed but present, {} recovered",
            key_prefix(&k.key),
            k.acknowledged,
            k.attempted,
            k.lost.len(),
            Value::from(k.lost.clone()),
            k.unexpected.len(),
            Value::from(k.unexpected.clone()),
            k.duplicated.len(),
            k.failed_but_present.len(),
            k.recovered
        )
    };
    for k in keys {
        named(&mut anomalies, "lost", &k.key, &k.lost);
        named(&mut anomalies, "unexpected", &k.key, &k.unexpected);
        named(&mut anomalies, "duplicated", &k.key, &k.duplicated);
        named(&mut anomalies, "failed but present", &k.key, &k.failed_but_present);
    }
    let summary = format!("{what}: {}", keys.iter().map(each).collect::<Vec<_>>().join("; "));
    Judgement { status, summary, verdict: serde_json::to_value(v).expect("verdicts serialize"), anomalies }
}

fn queue(v: &QueueVerdict) -> Judgement {
    let (keys, status, what) = match v {
        QueueVerdict::Valid { keys } => (keys, Status::Valid, "valid"),
        QueueVerdict::Invalid { keys } => (keys, Status::Invalid, "INVALID"),
        QueueVerdict::Undecided { keys } => (keys, Status::Undecided, "undecided (no drain)"),
    };
    let mut anomalies = BTreeSet::new();
    let each = |k: &QueueKey| {
        format!(
            "{}{} acknowledged of {} enqueued, {} out: {} lost {}, {} duplicated {}, {} unexpected {}",
            key_prefix(&k.key),
            k.acknowledged,
            k.enqueued,
            k.dequeued,
            k.lost.len(),
            Value::from(k.lost.clone()),
            k.duplicated.len(),
            Value::from(k.duplicated.clone()),
            k.unexpected.len(),
            Value::from(k.unexpected.clone())
        )
    };
    for k in keys {
        named(&mut anomalies, "lost", &k.key, &k.lost);
        named(&mut anomalies, "duplicated", &k.key, &k.duplicated);
        named(&mut anomalies, "unexpected", &k.key, &k.unexpected);
    }
    let summary = format!("{what}: {}", keys.iter().map(each).collect::<Vec<_>>().join("; "));
    Judgement { status, summary, verdict: serde_json::to_value(v).expect("verdicts serialize"), anomalies }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    fn judged(model: ModelKind, lines: &[&str]) -> Judgement {
        judge(model, &parse(&lines.join("\n")).unwrap(), Options::default()).unwrap()
    }

    #[test]
    fn each_model_names_what_is_wrong() {
        let j = judged(
            ModelKind::Set,
            &[
                r#"{"process":0,"type":"invoke","f":"add","key":"s","value":1}"#,
                r#"{"process":0,"type":"ok","f":"add","key":"s","value":1}"#,
                r#"{"process":1,"type":"invoke","f":"read","key":"s"}"#,
                r#"{"process":1,"type":"ok","f":"read","key":"s","value":[9]}"#,
            ],
        );
        assert_eq!(j.status, Status::Invalid);
        assert_eq!(j.anomalies, BTreeSet::from([r#"lost "s" 1"#.to_owned(), r#"unexpected "s" 9"#.to_owned()]));
        assert!(j.summary.starts_with("INVALID: s: 1 acknowledged of 1 added: 1 lost [1]"), "{}", j.summary);
        let j = judged(
            ModelKind::Register,
            &[
                r#"{"process":0,"type":"invoke","f":"write","key":"r","value":1}"#,
                r#"{"process":0,"type":"ok","f":"write","key":"r","value":1}"#,
                r#"{"process":0,"type":"invoke","f":"read","key":"r"}"#,
                r#"{"process":0,"type":"ok","f":"read","key":"r","value":null}"#,
            ],
        );
        assert_eq!((j.status, j.anomalies.len()), (Status::Invalid, 1));
        assert_eq!(j.verdict["verdict"], "not-linearizable");
        let j = judged(
            ModelKind::Queue,
            &[
                r#"{"process":0,"type":"invoke","f":"enqueue","value":1}"#,
                r#"{"process":0,"type":"ok","f":"enqueue","value":1}"#,
            ],
        );
        assert_eq!((j.status, j.anomalies.len()), (Status::Undecided, 0));
    }
}
