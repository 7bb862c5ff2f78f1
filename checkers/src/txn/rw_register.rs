//! Read-write-register histories: each key holds one value, transactions
//! write unique values and read them. A read names its writer exactly
//! (write-read edges), but a register keeps no history, so the version
//! order is known only in part, from what Elle infers without assuming
//! more of the database:
//!
//! - the initial state (a read of `null`) precedes every written value;
//! - a transaction that read `a` from a key and then wrote `b` to it
//!   installed `b` after `a`.
//!
//! Each known `a` before `b` gives write-write (a's writer to b's) and
//! read-write (every other external reader of `a` to b's writer) edges.
//! Reads alone show internal inconsistency, future reads, aborted (G1a)
//! and intermediate (G1b) reads.

use std::collections::{BTreeMap, HashMap};

use super::consistency::Anomaly;
use super::graph::{Graph, Kind, Why};
use super::inference::{observe_read_of, writers, Inference, Observation, Write};
use super::transaction::{Mop, Scalar, Status, Txn};
use crate::error::Result;

/// A version of a key: `None` is the initial state.
type Version = Option<Scalar>;

pub fn infer(txns: &[Txn]) -> Result<Inference> {
    let writes = writers(txns)?;
    let writer = |key: &Scalar, v: &Scalar| writes.get(&(key.clone(), v.clone())).copied();
    let mut observed = Vec::new();
    // Per key and version, the transactions that read it externally.
    let mut readers: BTreeMap<(&Scalar, Version), Vec<usize>> = BTreeMap::new();
    // Per key, the versions known to come before another: (a, b).
    let mut before: HashMap<&Scalar, Vec<(Version, Scalar)>> = HashMap::new();
    // Per key, its written values.
    let mut written: HashMap<&Scalar, Vec<&Scalar>> = HashMap::new();
    for (t, txn) in txns.iter().enumerate() {
        if txn.status == Status::Fail {
            continue;
        }
        // Per key, what the transaction last read or wrote; whether its
        // first access was a read, and of what.
        let mut state: HashMap<&Scalar, Version> = HashMap::new();
        let mut read_first: HashMap<&Scalar, Version> = HashMap::new();
        for (m, mop) in txn.mops.iter().enumerate() {
            match mop {
                Mop::Write { key, value } => {
                    written.entry(key).or_default().push(value);
                    if let Some(a) = read_first.get(key) {
                        if writer(key, value).is_some_and(|w| w.last && w.mop == m) {
                            before.entry(key).or_default().push((a.clone(), value.clone()));
                        }
                    }
                    state.insert(key, Some(value.clone()));
                }
                Mop::Read { key, value: Some(v) } => {
                    let v: Version = v.first().cloned();
                    match state.get(key) {
                        None => {
                            read_first.insert(key, v.clone());
                            readers.entry((key, v.clone())).or_default().push(t);
                        }
                        Some(expected) if *expected != v => observed.push(Observation {
                            anomaly: Anomaly::Internal,
                            txns: vec![t],
                            what: format!("{mop}, where it had seen {}", show(expected)),
                        }),
                        Some(_) => {}
                    }
                    state.insert(key, v.clone());
                    observe_value(txns, t, m, key, &v, &writer, &mut observed);
                }
                Mop::Read { value: None, .. } => {}
                Mop::Append { .. } => unreachable!("rw-register transactions do not append"),
            }
        }
    }
    let mut graph = Graph::new(txns.len());
    for ((key, v), rs) in &readers {
        let Some(v) = v else { continue };
        let Some(w) = writer(key, v).filter(|w| txns[w.txn].status != Status::Fail) else { continue };
        for &r in rs {
            let why = Why { key: (*key).clone(), before: Some(v.clone()), after: None };
            graph.add(w.txn, r, Kind::Wr, Some(why));
        }
    }
    let mut keys: Vec<&&Scalar> = written.keys().collect();
    keys.sort();
    for key in keys {
        let initial = written[*key].iter().map(|b| (None, (*b).clone()));
        let known = before.get(*key).into_iter().flatten().cloned();
        for (a, b) in initial.chain(known) {
            let Some(wb) = writer(key, &b).filter(|w| txns[w.txn].status != Status::Fail) else { continue };
            let why = || Some(Why { key: (*key).clone(), before: a.clone(), after: Some(b.clone()) });
            if let Some(wa) = a.as_ref().and_then(|a| writer(key, a)) {
                if txns[wa.txn].status != Status::Fail {
                    graph.add(wa.txn, wb.txn, Kind::Ww, why());
                }
            }
            for &r in readers.get(&(*key, a.clone())).into_iter().flatten() {
                graph.add(r, wb.txn, Kind::Rw, why());
            }
        }
    }
    Ok(Inference { graph, observed })
}

fn show(v: &Version) -> String {
    v.as_ref().map_or_else(|| "null".to_owned(), ToString::to_string)
}

/// What a read's value shows on its own.
fn observe_value(
    txns: &[Txn],
    t: usize,
    m: usize,
    key: &Scalar,
    v: &Version,
    writer: &impl Fn(&Scalar, &Scalar) -> Option<Write>,
    observed: &mut Vec<Observation>,
) {
    let Some(w) = v.as_ref().and_then(|v| writer(key, v)) else { return };
    let v = show(v);
    observe_read_of(txns, (t, m), w, &format!("read {key} = {v}"), ("writes", "written"), observed);
    if txns[w.txn].status != Status::Fail && w.txn != t && !w.last {
        observed.push(Observation {
            anomaly: Anomaly::G1b,
            txns: vec![t, w.txn],
            what: format!("read {key} = {v}, which its writer overwrote before it committed"),
        });
    }
}
