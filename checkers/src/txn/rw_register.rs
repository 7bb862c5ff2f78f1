//! Read-write-register histories: each key holds one value, transactions
//! write unique values and read them. A read names its writer exactly
//! (write-read edges), but a register keeps no history, so the version
//! order is known only in part, from what holds without assuming more of
//! the database:
//!
//! - the initial state (a read of `null`) precedes every written value;
//! - writes follow reads: a transaction that read `a` from a key and wrote
//!   `b` to it installed `b` after `a`. In every version order with `b`
//!   before `a`, `a`'s writer precedes the reader (it read `a`) and the
//!   reader precedes `a`'s writer (through the versions from `b` to `a`):
//!   a G1c. So this holds of any history that read committed allows, but
//!   not below it: at read uncommitted it is off (`infer`'s
//!   `writes_follow_reads`), and it can be switched off (Elle's
//!   `wfr-keys?`, off by default there).
//!
//! Each known `a` before `b` gives read-write edges from every other
//! reader of `a` to b's writer. No write-write edge is inferred: the one
//! writes-follow-reads would give, from a's writer to b's, is the
//! write-read edge of b's writer reading `a` already, and only the
//! initial state is known to precede anything without a read.
//!
//! Every read of a committed transaction carries dependencies, as in
//! Adya's model, where each read observes a version; a read of the
//! transaction's own write carries none. Reads alone show internal
//! inconsistency, future reads, aborted (G1a) and intermediate (G1b)
//! reads. What the partial order leaves open, `execution.rs` searches.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::consistency::Anomaly;
use super::graph::{Graph, Kind, Source, Why};
use super::inference::{observe_read_of, writers, Inference, Observation, Write};
use super::transaction::{Mop, Scalar, Status, Txn};
use crate::error::Result;

/// A version of a key: `None` is the initial state.
type Version = Option<Scalar>;

pub fn infer(txns: &[Txn], writes_follow_reads: bool) -> Result<Inference> {
    let writes = writers(txns)?;
    let writer = |key: &Scalar, v: &Scalar| writes.get(&(key.clone(), v.clone())).copied();
    let committed = |w: Option<Write>| w.filter(|w| txns[w.txn].status != Status::Fail);
    let mut observed = Vec::new();
    // Per key and version, the committed transactions that read it (not
    // their own write).
    let mut readers: BTreeMap<(&Scalar, Version), Vec<usize>> = BTreeMap::new();
    // Per key, the versions known to come before another: (a, b).
    let mut before: BTreeMap<&Scalar, Vec<(Scalar, Scalar)>> = BTreeMap::new();
    // Per key, its written values.
    let mut written: BTreeMap<&Scalar, Vec<&Scalar>> = BTreeMap::new();
    for (t, txn) in txns.iter().enumerate() {
        if txn.status == Status::Fail {
            continue;
        }
        // Per key, what the transaction last read or wrote.
        let mut state: HashMap<&Scalar, Version> = HashMap::new();
        // Per key, the versions of other transactions it read.
        let mut read: BTreeMap<&Scalar, Vec<Scalar>> = BTreeMap::new();
        for (m, mop) in txn.mops.iter().enumerate() {
            match mop {
                Mop::Write { key, value } => {
                    written.entry(key).or_default().push(value);
                    state.insert(key, Some(value.clone()));
                }
                Mop::Read { key, value: Some(v) } => {
                    let v: Version = v.first().cloned();
                    if let Some(expected) = state.get(key).filter(|&e| *e != v) {
                        observed.push(Observation {
                            anomaly: Anomaly::Internal,
                            txns: vec![t],
                            what: format!("{mop}, where it had seen {}", show(expected)),
                        });
                    }
                    state.insert(key, v.clone());
                    observe_value(txns, t, m, key, &v, &writer, &mut observed);
                    let own = v.as_ref().and_then(|v| writer(key, v)).is_some_and(|w| w.txn == t);
                    if !own {
                        readers.entry((key, v.clone())).or_default().push(t);
                        // A version of another transaction that did not
                        // fail, or of the key before the history began.
                        if let Some(a) = v.filter(|a| writer(key, a).is_none_or(|w| txns[w.txn].status != Status::Fail))
                        {
                            read.entry(key).or_default().push(a);
                        }
                    }
                }
                Mop::Read { value: None, .. } => {}
                Mop::Append { .. } => unreachable!("rw-register transactions do not append"),
            }
        }
        if writes_follow_reads && txn.status == Status::Ok {
            for (key, values) in read {
                // The transaction's final write to the key, if any.
                let Some(b) = txn.mops.iter().rev().find_map(|m| match m {
                    Mop::Write { key: k, value } if k == key => Some(value),
                    _ => None,
                }) else {
                    continue;
                };
                before.entry(key).or_default().extend(values.into_iter().map(|a| (a, b.clone())));
            }
        }
    }
    let mut graph = Graph::new(txns.len());
    for ((key, v), rs) in &readers {
        let Some(v) = v else { continue };
        let Some(w) = committed(writer(key, v)) else { continue };
        for &r in rs {
            let why = Why { key: (*key).clone(), before: Some(v.clone()), after: None, source: Source::Reads };
            graph.add(w.txn, r, Kind::Wr, Some(why));
        }
    }
    for (key, values) in &written {
        let initial = values.iter().map(|b| (None, (*b).clone(), Source::Reads));
        let known =
            before.get(key).into_iter().flatten().map(|(a, b)| (Some(a.clone()), b.clone(), Source::WritesFollowReads));
        for (a, b, source) in initial.chain(known) {
            let Some(wb) = committed(writer(key, &b)) else { continue };
            for &r in readers.get(&(*key, a.clone())).into_iter().flatten() {
                let why = Why { key: (*key).clone(), before: a.clone(), after: Some(b.clone()), source };
                graph.add(r, wb.txn, Kind::Rw, Some(why));
            }
        }
    }
    // Two committed writers of one key: which wrote last, reads may not
    // say.
    let open = written.iter().any(|(key, values)| {
        let writers: BTreeSet<usize> = values.iter().filter_map(|v| committed(writer(key, v))).map(|w| w.txn).collect();
        writers.len() > 1
    });
    Ok(Inference { graph, observed, open })
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
