//! Transactional histories, checked as Elle checks them (Kingsbury and
//! Alvaro, "Elle: Inferring Isolation Anomalies from Experimental
//! Observations", VLDB 2020): infer from the transactions' reads and
//! writes which must precede which (`list_append.rs`, `rw_register.rs` into
//! `graph.rs`), add real-time order, find the cycles and name them
//! (`cycle.rs`), and say which consistency models the anomalies rule out
//! (`consistency.rs`). Every anomaly comes with its evidence: the
//! transactions, and for a cycle each edge and why it is there.
//!
//! The checker is linear in the history, as Elle is: the graph has a few
//! edges per transaction, the components are found in one pass, and the
//! cycle searches stay inside components and try a bounded number of
//! starting edges (`cycle.rs`).

pub mod consistency;
pub mod cycle;
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
use graph::Kind;
use inference::Inference;
pub use transaction::TxnModel;
use transaction::{Status, Txn};

/// Instances of each anomaly explained in a verdict; all are counted.
const SHOWN: usize = 3;

/// A transactional history's verdict.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct TxnVerdict {
    /// `valid`: the history is consistent with the model asked for.
    pub verdict: Validity,
    pub model: TxnModel,
    /// The model the history was asked to satisfy.
    pub consistency: Consistency,
    pub transactions: Counts,
    /// Dependency edges inferred (write-write, write-read, read-write,
    /// real-time).
    pub edges: usize,
    /// Each anomaly found, and how many times (cycles: one per strongly
    /// connected component).
    pub found: BTreeMap<Anomaly, usize>,
    /// The first few of each, explained.
    pub anomalies: Vec<Explained>,
    #[serde(flatten)]
    pub standing: Standing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Invalid,
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

/// Checks a transactional history against `consistency`.
pub fn check(model: TxnModel, events: &[Event], consistency: Consistency) -> Result<TxnVerdict> {
    let txns = transaction::transactions(model, events)?;
    let Inference { mut graph, observed } = match model {
        TxnModel::ListAppend => list_append::infer(&txns)?,
        TxnModel::RwRegister => rw_register::infer(&txns)?,
    };
    graph.add_realtime(&txns);
    let cycles = cycle::cycles(&graph);

    let mut found: BTreeMap<Anomaly, usize> = BTreeMap::new();
    let mut anomalies = Vec::new();
    let mut note = |anomaly: Anomaly, explained: &mut dyn FnMut() -> Explained| {
        let n = found.entry(anomaly).or_default();
        *n += 1;
        if *n <= SHOWN {
            anomalies.push(explained());
        }
    };
    for o in observed.iter().chain(&lost_update::lost_updates(&txns)) {
        note(o.anomaly, &mut || Explained {
            anomaly: o.anomaly,
            transactions: o.txns.iter().map(|&t| shown(&txns, t)).collect(),
            what: format!("T{} {}", o.txns[0], o.what),
            cycle: Vec::new(),
        });
    }
    for c in &cycles {
        note(c.anomaly, &mut || explain_cycle(model, &txns, events, &graph, c));
    }
    let standing = Standing::of(&found.keys().copied().collect());
    let verdict = if standing.rules_out(consistency) { Validity::Invalid } else { Validity::Valid };
    let mut transactions = Counts::default();
    for t in &txns {
        *match t.status {
            Status::Ok => &mut transactions.ok,
            Status::Info => &mut transactions.info,
            Status::Fail => &mut transactions.fail,
        } += 1;
    }
    Ok(TxnVerdict { verdict, model, consistency, transactions, edges: graph.edges.len(), found, anomalies, standing })
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
        if self.found.is_empty() {
            return format!("{} as asked: {counted}, no anomaly; {strongest}", self.consistency);
        }
        let found: Vec<String> = self.found.iter().map(|(a, n)| format!("{a} ({n})")).collect();
        let head = match self.verdict {
            Validity::Invalid => format!("NOT {}", self.consistency),
            Validity::Valid => format!("{} as asked", self.consistency),
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
    match (model, e.kind) {
        (TxnModel::ListAppend, Kind::Ww) => {
            format!("{a} appended {before} to {key}, and {b} appended {after} right after it")
        }
        (TxnModel::ListAppend, Kind::Wr) => format!("{b} read {key} ending in {before}, which {a} appended"),
        (TxnModel::ListAppend, Kind::Rw) if w.before.is_none() => {
            format!("{a} read {key} empty, and {b} appended {after}, its first element")
        }
        (TxnModel::ListAppend, Kind::Rw) => {
            format!("{a} read {key} ending in {before}, and {b} appended {after}, the next element")
        }
        (TxnModel::RwRegister, Kind::Ww) => format!("{a} wrote {key} = {before}, and {b} later wrote {after}"),
        (TxnModel::RwRegister, Kind::Wr) => format!("{b} read {key} = {before}, which {a} wrote"),
        (TxnModel::RwRegister, Kind::Rw) => format!("{a} read {key} = {before}, and {b} later wrote {after}"),
        (_, Kind::Realtime) => unreachable!("real-time edges carry no data evidence"),
    }
}
