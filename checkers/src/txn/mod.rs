//! Transactional histories, checked as Elle checks them (Kingsbury and
//! Alvaro, "Elle: Inferring Isolation Anomalies from Experimental
//! Observations", VLDB 2020): infer from the transactions' reads and
//! writes which must precede which (`list_append.rs`, `rw_register.rs` into
//! `graph.rs`), add real-time order, find the cycles and name them
//! (`cycle.rs`), and say which consistency models the anomalies rule out
//! (`consistency.rs`). Every anomaly comes with its evidence: the
//! transactions, and for a cycle each edge and why it is there.
//!
//! A clean verdict is a claim too. The cycle searches decide each class's
//! presence (`cycle.rs`); where reads leave the order of writes open (two
//! blind writes to a register), `execution.rs` searches for an execution
//! that explains the history at the level asked, and a search that stops
//! at its bound leaves the verdict undecided, never valid. The graph has a
//! few edges per transaction and its components are found in linear time;
//! what each search costs is in docs/checkers.md.

pub mod consistency;
pub mod cycle;
pub mod execution;
pub mod generate;
pub mod graph;
pub mod inference;
pub mod list_append;
pub mod lost_update;
pub mod rw_register;
pub mod transaction;

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Serialize;

use crate::error::Result;
use crate::history::Event;
pub use consistency::{Anomaly, Consistency, Standing};
use cycle::{Cyclic, Unsearched};
use execution::{Level, Outcome, Searched};
use graph::{Kind, Source};
use inference::Inference;
pub use transaction::TxnModel;
use transaction::{Status, Txn};

/// Instances of each anomaly explained in a verdict; all are counted.
const SHOWN: usize = 3;

/// What a transactional check is held to and bounded by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnOptions {
    /// The model the history must satisfy.
    pub consistency: Consistency,
    /// rw-register: a transaction's write to a key follows the version of
    /// it the transaction read (`rw_register.rs`; always off at
    /// read-uncommitted, where it does not hold).
    pub writes_follow_reads: bool,
    /// Steps the searches may take: the G-single search's edges, the
    /// execution search's moves. The same answer on every machine.
    pub steps: u64,
    /// The models an execution is searched for where reads leave the
    /// order of writes open.
    pub searches: Searches,
}

/// Which models to search executions for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Searches {
    /// The model asked, then every other one the standing names.
    Standing,
    /// The model asked only: the others are left undecided.
    Asked,
    /// None: a verdict that needs one is undecided (what the shrinker
    /// asks, when the anomalies it keeps are cycles the graph shows).
    Off,
}

impl TxnOptions {
    pub fn new(consistency: Consistency) -> TxnOptions {
        TxnOptions { consistency, writes_follow_reads: true, steps: 10_000_000, searches: Searches::Standing }
    }
}

/// A transactional history's verdict.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct TxnVerdict {
    /// `valid`: the history is consistent with the model asked for;
    /// `undecided`: no anomaly was found, and a search that would prove it
    /// stopped at its bound (`search`).
    pub verdict: Validity,
    pub model: TxnModel,
    /// The model the history was asked to satisfy.
    pub consistency: Consistency,
    pub transactions: Counts,
    /// Dependency edges inferred (write-write, write-read, read-write,
    /// real-time).
    pub edges: usize,
    /// The strongly connected components of data edges: where cycles are.
    pub components: Cyclic,
    /// Each anomaly found, and how many times (cycles: one per strongly
    /// connected component).
    pub found: BTreeMap<Anomaly, usize>,
    /// The first few of each, explained.
    pub anomalies: Vec<Explained>,
    /// Cycle classes whose search did not run to its end somewhere, and
    /// why that leaves the verdict as it is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsearched: Vec<Unsearched>,
    /// The searches for an execution, where reads left the order of
    /// writes open: the model asked first, then those the standing names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<LevelSearch>,
    #[serde(flatten)]
    pub standing: Standing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Invalid,
    Undecided,
}

/// Transactions by how they ended.
#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct Counts {
    pub ok: usize,
    pub info: usize,
    pub fail: usize,
}

/// One anomaly and its evidence.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Explained {
    pub anomaly: Anomaly,
    /// The transactions involved, `T<id>` in `what` and `cycle`.
    pub transactions: Vec<Shown>,
    /// What was seen (a read's), or the cycle in one line.
    pub what: String,
    /// A cycle's edges in order, the last leading back to the first's
    /// transaction; empty for an anomaly a read shows alone.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cycle: Vec<Step>,
}

/// A transaction as a verdict shows it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Shown {
    /// Its position among the history's transactions (0-based).
    pub id: usize,
    pub process: u64,
    /// The line of its invocation.
    pub line: usize,
    pub status: Status,
    /// Its micro-operations, as completed: `append x 1, r y [1 2]`.
    pub ops: String,
}

/// One edge of a cycle.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Step {
    pub from: usize,
    pub to: usize,
    pub kind: Kind,
    /// Why `from` precedes `to`.
    pub why: String,
}

/// Checks a transactional history against `options.consistency`.
pub fn check(model: TxnModel, events: &[Event], options: TxnOptions) -> Result<TxnVerdict> {
    let consistency = options.consistency;
    let txns = transaction::transactions(model, events)?;
    let Inference { mut graph, observed, open } = match model {
        TxnModel::ListAppend => list_append::infer(&txns)?,
        TxnModel::RwRegister => {
            let wfr = options.writes_follow_reads && consistency != Consistency::ReadUncommitted;
            rw_register::infer(&txns, wfr)?
        }
    };
    graph.add_realtime(&txns);
    let cycles = cycle::cycles(&graph, options.steps);

    let mut found: BTreeMap<Anomaly, usize> = BTreeMap::new();
    let mut anomalies = Vec::new();
    let mut note = |found: &mut BTreeMap<Anomaly, usize>, anomaly: Anomaly, explained: &dyn Fn() -> Explained| {
        let n = found.entry(anomaly).or_default();
        *n += 1;
        if *n <= SHOWN {
            anomalies.push(explained());
        }
    };
    for o in observed.iter().chain(&lost_update::lost_updates(&txns)) {
        note(&mut found, o.anomaly, &|| Explained {
            anomaly: o.anomaly,
            transactions: o.txns.iter().map(|&t| shown(&txns, t)).collect(),
            what: format!("T{} {}", o.txns[0], o.what),
            cycle: Vec::new(),
        });
    }
    for c in &cycles.found {
        note(&mut found, c.anomaly, &|| explain_cycle(model, &txns, events, &graph, c));
    }
    // What the graph leaves open: the order of writes no read shows (two
    // blind writes to a register, two appends no read shows). The graph
    // decides read uncommitted and read committed alone (no version order
    // makes a G1c go away that the reads do not show).
    let mut searches: Vec<LevelSearch> = Vec::new();
    let mut undecided = Vec::new();
    if open {
        // The model asked first (its verdict), then each other the
        // standing names, strongest first, until every one is ruled out
        // by what was found, proven by an execution found, or left
        // undecided by a search that stopped.
        let mut proven: BTreeSet<Consistency> = BTreeSet::new();
        let order = [consistency].into_iter().chain(Consistency::ALL.into_iter().rev());
        for m in order {
            let Some(level) = level(m) else { continue };
            let ruled_out = Standing::of(&found.keys().copied().collect(), &[]).rules_out(m);
            if ruled_out || proven.contains(&m) || undecided.contains(&m) {
                continue;
            }
            let wanted = match options.searches {
                Searches::Standing => true,
                Searches::Asked => m == consistency,
                Searches::Off => false,
            };
            if !wanted {
                undecided.push(m);
                continue;
            }
            // The model asked decides the verdict, and gets every step;
            // each other one a hundredth, or four a transaction (enough
            // for an execution found without going back): a history with
            // a cycle in every order and none shown can take a search all
            // its steps to refute.
            let bound = if m == consistency {
                options.steps
            } else {
                (options.steps / 100).max(4 * txns.len() as u64).min(options.steps)
            };
            let s = execution::search(model, &txns, &graph, level, bound);
            match s.outcome {
                Outcome::Explained => proven.extend(proves(level, s.realtime)),
                Outcome::Unexplained => {
                    let anomaly = unexplained(m);
                    note(&mut found, anomaly, &|| {
                        Explained {
                        anomaly,
                        transactions: Vec::new(),
                        what: format!(
                            "no order of the writes the reads leave open explains every read at {m}: every one has a cycle it forbids ({} steps searched)",
                            s.steps
                        ),
                        cycle: Vec::new(),
                    }
                    });
                }
                Outcome::Stopped => undecided.push(m),
            }
            searches.push(LevelSearch { consistency: m, search: s });
        }
    }
    let standing = Standing::of(&found.keys().copied().collect(), &undecided);
    let verdict = if standing.rules_out(consistency) {
        Validity::Invalid
    } else if standing.undecided.contains(&consistency) {
        Validity::Undecided
    } else {
        Validity::Valid
    };
    let mut transactions = Counts::default();
    for t in &txns {
        *match t.status {
            Status::Ok => &mut transactions.ok,
            Status::Info => &mut transactions.info,
            Status::Fail => &mut transactions.fail,
        } += 1;
    }
    Ok(TxnVerdict {
        verdict,
        model,
        consistency,
        transactions,
        edges: graph.edges.len(),
        components: cycles.components,
        found,
        anomalies,
        unsearched: cycles.unsearched,
        searches,
        standing,
    })
}

/// Parses a history and checks it as transactions of `model`.
pub fn check_text(model: TxnModel, text: &str, options: TxnOptions) -> Result<TxnVerdict> {
    check(model, &crate::history::parse(text)?, options)
}

/// The steps the `txn_history` fuzz target's checks may take: few, so that
/// each input takes milliseconds.
pub const FUZZ_STEPS: u64 = 20_000;

/// The execution a model needs searched for, where reads leave the order
/// of writes open.
fn level(m: Consistency) -> Option<Level> {
    match m {
        Consistency::ReadUncommitted | Consistency::ReadCommitted => None,
        Consistency::RepeatableRead | Consistency::Serializable => Some(Level::Serial { realtime: false }),
        Consistency::SnapshotIsolation => Some(Level::SnapshotIsolation { realtime: false }),
        Consistency::StrictSerializable => Some(Level::Serial { realtime: true }),
    }
}

/// A search for an execution at one model.
#[derive(Clone, Copy, Debug, Serialize, JsonSchema)]
pub struct LevelSearch {
    pub consistency: Consistency,
    #[serde(flatten)]
    pub search: Searched,
}

/// The models an execution found at `level` proves: a serial order proves
/// repeatable read, snapshot isolation (each transaction's snapshot taken
/// where it stands) and serializable, strict serializable too if it keeps
/// real-time order; starts and commits prove snapshot isolation.
fn proves(level: Level, realtime: bool) -> Vec<Consistency> {
    use Consistency::*;
    match level {
        Level::Serial { .. } if realtime => vec![RepeatableRead, SnapshotIsolation, Serializable, StrictSerializable],
        Level::Serial { .. } => vec![RepeatableRead, SnapshotIsolation, Serializable],
        Level::SnapshotIsolation { .. } => vec![SnapshotIsolation],
    }
}

/// What a search that found no execution shows, by the model searched
/// (Elle's names for a cycle shown to exist without being named). A
/// serial order is searched the same way for repeatable read as for
/// serializable (reads after the transaction's own writes aside, which
/// internal consistency covers).
fn unexplained(m: Consistency) -> Anomaly {
    match m {
        Consistency::RepeatableRead | Consistency::Serializable => Anomaly::RepeatableReadCycleExists,
        Consistency::SnapshotIsolation => Anomaly::SnapshotIsolationCycleExists,
        Consistency::StrictSerializable => Anomaly::StrictSerializableCycleExists,
        Consistency::ReadUncommitted | Consistency::ReadCommitted => unreachable!("the graph decides {m}"),
    }
}

impl TxnVerdict {
    /// The anomalies that rule out the model asked for: what a smaller
    /// history must still show to fail the same way.
    pub fn violations(&self) -> BTreeSet<Anomaly> {
        let prohibited = self.consistency.prohibited();
        self.found
            .keys()
            .copied()
            .filter(|&a| !consistency::implied(&BTreeSet::from([a])).is_disjoint(&prohibited))
            .collect()
    }

    /// One line for people.
    pub fn summary(&self) -> String {
        let c = &self.transactions;
        let counted =
            format!("{} transactions ({} ok, {} info, {} failed)", c.ok + c.info + c.fail, c.ok, c.info, c.fail);
        let names = |ms: &[Consistency]| ms.iter().map(|m| m.name()).collect::<Vec<_>>().join(" and ");
        let strongest = if self.standing.strongest_consistent.is_empty() {
            "consistent with none of the models".to_owned()
        } else {
            format!("consistent with {}", names(&self.standing.strongest_consistent))
        };
        let strongest = match &self.standing.undecided[..] {
            [] => strongest,
            open => format!("{strongest}; not searched: {}", names(open)),
        };
        if self.verdict == Validity::Undecided {
            let steps = self.searches.first().map_or(0, |s| s.search.steps);
            return format!(
                "undecided whether {}: {counted}, no anomaly found, and the search for an execution that explains every read stopped at its bound of {steps} steps (raise --step-limit); {strongest}",
                self.consistency
            );
        }
        if self.found.is_empty() {
            return format!("{} as asked: {counted}, no anomaly; {strongest}", self.consistency);
        }
        let found: Vec<String> = self.found.iter().map(|(a, n)| format!("{a} ({n})")).collect();
        let head = match self.verdict {
            Validity::Invalid => format!("NOT {}", self.consistency),
            Validity::Valid | Validity::Undecided => format!("{} as asked", self.consistency),
        };
        format!(
            "{head}: {counted}; {}; rules out {}; {strongest}",
            found.join(", "),
            names(&self.standing.weakest_ruled_out)
        )
    }
}

fn shown(txns: &[Txn], t: usize) -> Shown {
    let txn = &txns[t];
    let ops: Vec<String> = txn.mops.iter().map(ToString::to_string).collect();
    Shown { id: t, process: txn.process, line: txn.line, status: txn.status, ops: ops.join(", ") }
}

fn explain_cycle(model: TxnModel, txns: &[Txn], events: &[Event], graph: &graph::Graph, c: &cycle::Cycle) -> Explained {
    let cycle: Vec<Step> = c
        .edges
        .iter()
        .map(|&e| {
            let edge = &graph.edges[e];
            Step { from: edge.from, to: edge.to, kind: edge.kind, why: why(model, txns, events, edge) }
        })
        .collect();
    let mut path: Vec<String> = cycle.iter().map(|s| format!("T{} -{}-> ", s.from, kind_name(s.kind))).collect();
    path.push(format!("T{}", cycle[0].from));
    Explained {
        anomaly: c.anomaly,
        transactions: cycle.iter().map(|s| shown(txns, s.from)).collect(),
        what: path.concat(),
        cycle,
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Ww => "ww",
        Kind::Wr => "wr",
        Kind::Rw => "rw",
        Kind::Realtime => "realtime",
    }
}

/// An edge's evidence, in words.
fn why(model: TxnModel, txns: &[Txn], events: &[Event], e: &graph::Edge) -> String {
    let (a, b) = (format!("T{}", e.from), format!("T{}", e.to));
    let Some(w) = &e.why else {
        let done = txns[e.from].completed.map_or(0, |i| events[i].line);
        return format!("{a} completed (line {done}) before {b} was invoked (line {})", txns[e.to].line);
    };
    let key = &w.key;
    let version = |v: &Option<transaction::Scalar>| v.as_ref().map_or_else(|| "null".to_owned(), ToString::to_string);
    let (before, after) = (version(&w.before), version(&w.after));
    // An append no read shows comes after every element read.
    let placed = match (w.source, &w.before) {
        (Source::Unread, None) => ", which no read shows (so after the empty list)".to_owned(),
        (Source::Unread, Some(_)) => format!(", which no read shows (so after {before}, the last element read)"),
        _ => String::new(),
    };
    match (model, e.kind) {
        (TxnModel::ListAppend, Kind::Ww) => {
            format!("{a} appended {before} to {key}, and {b} appended {after} right after it{placed}")
        }
        (TxnModel::ListAppend, Kind::Wr) => format!("{b} read {key} ending in {before}, which {a} appended"),
        (TxnModel::ListAppend, Kind::Rw) if w.before.is_none() => {
            format!("{a} read {key} empty, and {b} appended {after}, its first element{placed}")
        }
        (TxnModel::ListAppend, Kind::Rw) => {
            format!("{a} read {key} ending in {before}, and {b} appended {after}, the next element{placed}")
        }
        (TxnModel::RwRegister, Kind::Wr) => format!("{b} read {key} = {before}, which {a} wrote"),
        (TxnModel::RwRegister, Kind::Rw) if w.source == Source::WritesFollowReads => {
            format!("{a} read {key} = {before}, and {b}, which read {before} too, then wrote {after}")
        }
        (TxnModel::RwRegister, Kind::Rw) => format!("{a} read {key} = {before}, and {b} later wrote {after}"),
        (TxnModel::RwRegister, Kind::Ww) => unreachable!("no write-write edge is inferred between registers"),
        (_, Kind::Realtime) => unreachable!("real-time edges carry no data evidence"),
    }
}

#[cfg(test)]
mod tests {
    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `txn_history` fuzz target does, over its corpus and
    /// regressions: every seed is a history with a verdict.
    #[test]
    fn fuzz_corpus_and_regressions_check_without_panics() {
        let inputs = fuzz_inputs("txn_history");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let text = std::str::from_utf8(&data).expect("a text seed");
            let model =
                if text.contains("\"append\"") { super::TxnModel::ListAppend } else { super::TxnModel::RwRegister };
            for c in super::Consistency::ALL {
                let options = super::TxnOptions { steps: super::FUZZ_STEPS, ..super::TxnOptions::new(c) };
                let verdict = super::check_text(model, text, options);
                if file.iter().any(|c| c == "corpus") {
                    assert!(verdict.is_ok(), "{}: {verdict:?}", file.display());
                }
            }
        }
    }
}
