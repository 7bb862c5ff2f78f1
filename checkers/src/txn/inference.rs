//! What a model infers from a history's transactions: the dependency graph
//! (`graph.rs`), and the anomalies single reads show without any cycle (an
//! aborted read, a list with an element twice), each with its evidence;
//! and what both models infer from first: each value's writer.

use std::collections::HashMap;

use super::consistency::Anomaly;
use super::graph::Graph;
use super::transaction::{Mop, Scalar, Status, Txn};
use crate::error::{Error, Result};

/// An anomaly one or two transactions' reads show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub anomaly: Anomaly,
    /// The transactions involved, the reader first.
    pub txns: Vec<usize>,
    /// What was seen, for people.
    pub what: String,
}

pub struct Inference {
    pub graph: Graph,
    pub observed: Vec<Observation>,
    /// Whether the reads leave the order of some committed writes open:
    /// then the graph alone cannot prove a verdict valid above read
    /// committed, and `execution.rs` searches.
    pub open: bool,
}

/// A write's (or an append's) key and value.
fn written(mop: &Mop) -> Option<(&Scalar, &Scalar)> {
    match mop {
        Mop::Append { key, value } | Mop::Write { key, value } => Some((key, value)),
        Mop::Read { .. } => None,
    }
}

/// Where a value was written (or appended) to a key.
#[derive(Clone, Copy, Debug)]
pub struct Write {
    pub txn: usize,
    pub mop: usize,
    /// The transaction's last write to this key.
    pub last: bool,
}

/// Every value's writer. A value written twice to one key breaks the
/// format: a read could not name its writer.
pub fn writers(txns: &[Txn]) -> Result<HashMap<(Scalar, Scalar), Write>> {
    let mut writers: HashMap<(Scalar, Scalar), Write> = HashMap::new();
    for (t, txn) in txns.iter().enumerate() {
        let mut last: HashMap<&Scalar, usize> = HashMap::new();
        for (m, mop) in txn.mops.iter().enumerate() {
            if let Some((key, _)) = written(mop) {
                last.insert(key, m);
            }
        }
        for (m, mop) in txn.mops.iter().enumerate() {
            let Some((key, value)) = written(mop) else { continue };
            let write = Write { txn: t, mop: m, last: last[key] == m };
            if let Some(earlier) = writers.insert((key.clone(), value.clone()), write) {
                let (verb, what) =
                    if matches!(mop, Mop::Append { .. }) { ("appended", "element") } else { ("written", "value") };
                return Err(Error::Malformed {
                    line: txn.line,
                    detail: format!(
                        "{value} {verb} to {key} again (first at line {}): each {what} is {verb} to a key once",
                        txns[earlier.txn].line
                    ),
                });
            }
        }
    }
    Ok(writers)
}

/// What a read of `w`'s write shows on its own: a future read (the reader's
/// own write, made only after mop `m`), an aborted read (a failed
/// transaction's). `read` says what transaction `t` read (`read x = 3`);
/// `verb` and `done` how the value came (`writes`, `written`).
pub fn observe_read_of(
    txns: &[Txn],
    (t, m): (usize, usize),
    w: Write,
    read: &str,
    (verb, done): (&str, &str),
    observed: &mut Vec<Observation>,
) {
    if w.txn == t && w.mop > m {
        observed.push(Observation {
            anomaly: Anomaly::FutureRead,
            txns: vec![t],
            what: format!("{read}, which it {verb} only later"),
        });
    }
    if txns[w.txn].status == Status::Fail {
        observed.push(Observation {
            anomaly: Anomaly::G1a,
            txns: vec![t, w.txn],
            what: format!("{read}, {done} by a transaction that failed"),
        });
    }
}
