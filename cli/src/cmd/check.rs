//! `hvsim check HISTORY`: is a history of operations linearizable (a
//! register per key); with `--model set|queue`, did the set or queue keep
//! every acknowledged element; with `--model ledger`, did every read keep
//! the total; with `--model log`, did every reader see one order; with `--model list-append|rw-register`, do
//! its transactions keep an isolation level (`--consistency`)?

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_checkers::history::EventType;
use hvsim_checkers::txn::transaction::Scalar;
use hvsim_checkers::txn::{Consistency, TxnOptions};
use hvsim_checkers::{history, judge, Limits, ModelKind, Options, Status};
use hvsim_explorer::document::{Document, Tag};
use schemars::JsonSchema;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    /// The history: JSON lines of invocations and completions (see
    /// docs/checkers.md).
    history: PathBuf,
    /// What the history's objects are.
    #[arg(long, value_enum, default_value = "register")]
    model: Model,
    /// The isolation level a transactional history must keep
    /// (list-append, rw-register): read-uncommitted, read-committed,
    /// repeatable-read, snapshot-isolation, serializable or
    /// strict-serializable.
    #[arg(long, default_value = "serializable")]
    consistency: Consistency,
    /// rw-register: do not take a transaction's write to a key as following
    /// the version of it the transaction read (Elle's `wfr-keys?` off;
    /// it is never taken at read-uncommitted).
    #[arg(long)]
    no_writes_follow_reads: bool,
    /// Steps the linearizability search may take per key before it
    /// answers "undecided" (default: no limit but `--time`); for a
    /// transactional history, the steps its searches may take (default
    /// 10,000,000: the G-single search's edges, the search for an execution
    /// where reads leave the order of writes open).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    step_limit: Option<u64>,
    /// Wall time the linearizability search may take over the whole
    /// history before it answers "undecided" (`90s`, `10m`; a
    /// transactional history's searches are bounded by `--step-limit`).
    #[arg(long, default_value = "5m", value_parser = crate::util::parse_duration)]
    time: std::time::Duration,
}

/// What `hvsim check --json` prints: the model's own verdict, with all it
/// counted (docs/checkers.md); its fields are the model's.
#[derive(Serialize, JsonSchema)]
pub struct CheckReport {
    schema: Tag<CheckReport>,
    #[serde(flatten)]
    verdict: serde_json::Map<String, serde_json::Value>,
}

impl Document for CheckReport {
    const NAME: &'static str = "check";
    const SCHEMA: &'static str = "hvsim-check-v1";
    const ABOUT: &'static str = "a history's verdict: `hvsim check --json`";
}

/// One line of a transactional history, as `hvsim check --model
/// list-append|rw-register` and the per-timeline checkers read it
/// (docs/checkers.md): only its schema is written, for the programs that
/// record such histories.
#[derive(Serialize, JsonSchema)]
pub struct TxnHistoryLine {
    /// The client (one transaction open at a time).
    process: u64,
    #[serde(rename = "type")]
    kind: EventType,
    f: TxnF,
    /// The micro-operations in order; an invocation's reads are `null`.
    value: Vec<MicroOp>,
    /// Virtual nanoseconds, as hvsim stamps the events it records.
    #[serde(skip_serializing_if = "Option::is_none")]
    time: Option<u64>,
    /// Which of a run's histories the line belongs to (SDK events).
    #[serde(skip_serializing_if = "Option::is_none")]
    history: Option<String>,
}

#[allow(dead_code, reason = "only the schema of these is written")]
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum TxnF {
    Txn,
}

/// `[f, key, value]`.
#[allow(dead_code, reason = "only the schema of these is written")]
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
enum MicroOp {
    /// `["append", key, element]` (list-append) or `["w", key, value]`
    /// (rw-register).
    Write(WriteF, Scalar, Scalar),
    /// `["r", key, read]`.
    Read(ReadF, Scalar, Read),
}

#[allow(dead_code, reason = "only the schema of these is written")]
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum WriteF {
    Append,
    W,
}

#[allow(dead_code, reason = "only the schema of these is written")]
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum ReadF {
    R,
}

#[allow(dead_code, reason = "only the schema of these is written")]
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
enum Read {
    /// A list's elements (list-append).
    List(Vec<Scalar>),
    /// A register's value (rw-register).
    Value(Scalar),
    /// Unknown (an invocation), an empty list, or a register's initial
    /// state.
    Null(()),
}

impl Document for TxnHistoryLine {
    const NAME: &'static str = "txn-history";
    const SCHEMA: &'static str = "hvsim-txn-history-v1";
    const ABOUT: &'static str = "one line of a transactional history: `hvsim check --model list-append|rw-register`";
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let path = args.history.display();
    let text = hvsim_vmm::files::read_text(&args.history).with_context(|| format!("cannot read history {path}"))?;
    let model: ModelKind = args.model.into();
    if model.transactional().is_none() && args.consistency != Options::default().consistency {
        anyhow::bail!("--consistency is for transactional models (list-append, rw-register), not {}", model.name());
    }
    if args.no_writes_follow_reads && model != ModelKind::RwRegister {
        anyhow::bail!("--no-writes-follow-reads is for the rw-register model, not {}", model.name());
    }
    // A transactional history's searches are bounded by steps alone, so
    // that the verdict is the same on every machine.
    let steps = match model.transactional() {
        Some(_) => args.step_limit.unwrap_or(TxnOptions::new(args.consistency).steps),
        None => args.step_limit.unwrap_or(u64::MAX),
    };
    let limits = Limits { steps, time: Some(args.time), ..Limits::default() };
    let options = Options {
        limits,
        consistency: args.consistency,
        writes_follow_reads: !args.no_writes_follow_reads,
        ..Options::default()
    };
    let events = history::parse(&text).with_context(|| format!("history {path}"))?;
    let j = judge(model, &events, options).with_context(|| format!("history {path}"))?;
    if json {
        let serde_json::Value::Object(verdict) = j.verdict else {
            anyhow::bail!("history {path}: the {} checker's verdict is not a JSON object", model.name());
        };
        crate::util::print_json(&CheckReport { schema: Tag::new(), verdict })?;
        eprintln!("hvsim: check {path}: {}", j.summary);
    } else {
        println!("{path}: {}", j.summary);
    }
    Ok(ExitCode::from(match j.status {
        Status::Valid => crate::util::EXIT_OK,
        Status::Invalid => crate::util::EXIT_NOT_LINEARIZABLE,
        Status::Undecided => crate::util::EXIT_UNDECIDED,
    }))
}

/// What the history's objects are.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Model {
    /// A read/write/compare-and-set register per key: linearizability.
    Register,
    /// A set per key: `add`, and a final `read` of all of it.
    Set,
    /// A queue per key: `enqueue`, `dequeue`, and a final `drain`.
    Queue,
    /// Accounts: `open`, `transfer`, `read`; totals conserved, no account
    /// below zero (Jepsen's bank).
    Ledger,
    /// A lease per key: `acquire` (value: its term in ms), `release`; no
    /// two holders at once in virtual time (events need their `time`).
    Lease,
    /// An append-only log: `append`, `read` of all of it; one order for
    /// every reader, no acknowledged entry lost.
    Log,
    /// Transactions appending to and reading lists (Elle's list-append).
    ListAppend,
    /// Transactions writing and reading registers (Elle's rw-register).
    RwRegister,
}

impl From<Model> for ModelKind {
    fn from(m: Model) -> ModelKind {
        match m {
            Model::Register => ModelKind::Register,
            Model::Set => ModelKind::Set,
            Model::Queue => ModelKind::Queue,
            Model::Ledger => ModelKind::Ledger,
            Model::Lease => ModelKind::Lease,
            Model::Log => ModelKind::Log,
            Model::ListAppend => ModelKind::ListAppend,
            Model::RwRegister => ModelKind::RwRegister,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TxnHistoryLine;
    use hvsim_checkers::txn::generate::{self, Shape, Store};
    use hvsim_checkers::txn::TxnModel;

    /// Generated histories of both models, invocations, completions and
    /// failures, match the schema; a line with a write hvsim does not know
    /// does not.
    #[test]
    fn transactional_histories_match_their_schema() {
        for model in [TxnModel::ListAppend, TxnModel::RwRegister] {
            for e in generate::history(model, Store::Serializable, Shape::new(100), 3) {
                let line = serde_json::to_value(&e).unwrap();
                hvsim_explorer::document::check::<TxnHistoryLine>(&line).unwrap_or_else(|err| panic!("{line}: {err}"));
            }
        }
        let bad = serde_json::json!({"process": 0, "type": "ok", "f": "txn", "value": [["put", "x", 1]]});
        assert!(hvsim_explorer::document::check::<TxnHistoryLine>(&bad).is_err());
    }
}
