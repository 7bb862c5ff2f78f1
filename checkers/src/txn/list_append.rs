//! List-append histories (Elle's richest model): each key is a list,
//! transactions append unique elements and read whole lists. A read of a
//! list shows the order of every append before its last element, so the
//! longest read of a key is that key's version order, and every other read
//! must be a prefix of it. From it:
//!
//! - write-write: consecutive elements' appenders, in list order;
//! - write-read: the appender of the last element a transaction read;
//! - read-write: a reader, to the appender of the element right after
//!   what it read (the first, if it read an empty list).
//!
//! Only a transaction's external reads (a key's first read, before the
//! transaction appends to it) carry dependencies; every read of a committed
//! transaction helps order the list. Reads alone show the anomalies that
//! need no cycle: duplicate elements, incompatible orders, reads that
//! disagree with the transaction's own earlier reads and appends
//! (internal), elements appended later by the reader itself (future read),
//! elements of failed transactions (G1a), a list ending in an element its
//! appender followed with another of its own (G1b).

use std::collections::{BTreeMap, HashMap, HashSet};

use super::consistency::Anomaly;
use super::graph::{Graph, Kind, Why};
use super::inference::{observe_read_of, writers, Inference, Observation, Write};
use super::transaction::{Mop, Scalar, Status, Txn};
use crate::error::Result;

pub fn infer(txns: &[Txn]) -> Result<Inference> {
    let appends = writers(txns)?;
    let writer = |key: &Scalar, e: &Scalar| appends.get(&(key.clone(), e.clone())).copied();
    let mut observed = Vec::new();
    // Per key, the reads of committed transactions: (reader, elements).
    let mut reads: HashMap<&Scalar, Vec<(usize, &[Scalar])>> = HashMap::new();
    // External reads: (reader, key, elements).
    let mut external: Vec<(usize, &Scalar, &[Scalar])> = Vec::new();
    for (t, txn) in txns.iter().enumerate().filter(|(_, t)| t.status == Status::Ok) {
        // Per key, what this transaction knows of the list: all of it
        // (after a read) or only its own appends so far, at its end.
        let mut known: HashMap<&Scalar, (bool, Vec<Scalar>)> = HashMap::new();
        for (m, mop) in txn.mops.iter().enumerate() {
            match mop {
                Mop::Append { key, value } => known.entry(key).or_default().1.push(value.clone()),
                Mop::Read { key, value: Some(list) } => {
                    let mut seen = HashSet::new();
                    if let Some(dup) = list.iter().find(|e| !seen.insert(*e)) {
                        observed.push(Observation {
                            anomaly: Anomaly::DuplicateElements,
                            txns: vec![t],
                            what: format!("read {key} with {dup} twice"),
                        });
                    }
                    match known.get(key) {
                        None => external.push((t, key, list)),
                        Some((whole, so_far)) => {
                            let agrees = if *whole { list == so_far } else { list.ends_with(so_far) };
                            if !agrees {
                                let so_far: Vec<String> = so_far.iter().map(ToString::to_string).collect();
                                let expected = if *whole { "exactly" } else { "ending in its own appends" };
                                observed.push(Observation {
                                    anomaly: Anomaly::Internal,
                                    txns: vec![t],
                                    what: format!("{mop}, where it expected {expected} [{}]", so_far.join(" ")),
                                });
                            }
                        }
                    }
                    known.insert(key, (true, list.clone()));
                    reads.entry(key).or_default().push((t, list));
                    observe_elements(txns, t, m, key, list, &writer, &mut observed);
                }
                Mop::Read { value: None, .. } => unreachable!("a committed transaction's reads are known"),
                Mop::Write { .. } => unreachable!("list-append transactions do not write"),
            }
        }
    }
    let mut graph = Graph::new(txns.len());
    let orders = version_orders(txns, &reads, &mut observed);
    for (key, order) in &orders {
        for pair in order.windows(2) {
            let (Some(a), Some(b)) = (writer(key, &pair[0]), writer(key, &pair[1])) else { continue };
            if txns[a.txn].status != Status::Fail && txns[b.txn].status != Status::Fail {
                let why = Why { key: (*key).clone(), before: Some(pair[0].clone()), after: Some(pair[1].clone()) };
                graph.add(a.txn, b.txn, Kind::Ww, Some(why));
            }
        }
    }
    for (t, key, list) in external {
        if let Some(w) = list.last().and_then(|e| writer(key, e)) {
            if txns[w.txn].status != Status::Fail {
                let why = Why { key: key.clone(), before: list.last().cloned(), after: None };
                graph.add(w.txn, t, Kind::Wr, Some(why));
            }
        }
        let Some(order) = orders.get(key).filter(|o| o.starts_with(list)) else { continue };
        let Some(next) = order.get(list.len()) else { continue };
        if let Some(w) = writer(key, next).filter(|w| txns[w.txn].status != Status::Fail) {
            let why = Why { key: key.clone(), before: list.last().cloned(), after: Some(next.clone()) };
            graph.add(t, w.txn, Kind::Rw, Some(why));
        }
    }
    Ok(Inference { graph, observed })
}

/// What a read's elements show on their own: aborted reads, intermediate
/// reads, reads of the reader's own later appends.
fn observe_elements(
    txns: &[Txn],
    t: usize,
    m: usize,
    key: &Scalar,
    list: &[Scalar],
    writer: &impl Fn(&Scalar, &Scalar) -> Option<Write>,
    observed: &mut Vec<Observation>,
) {
    for e in list {
        let Some(w) = writer(key, e) else { continue };
        observe_read_of(txns, (t, m), w, &format!("read {key} with {e}"), ("appends", "appended"), observed);
    }
    if let Some(w) = list.last().and_then(|e| writer(key, e)) {
        if w.txn != t && !w.last {
            observed.push(Observation {
                anomaly: Anomaly::G1b,
                txns: vec![t, w.txn],
                what: format!(
                    "read {key} ending in {}, which its appender followed with another append to {key}",
                    list.last().expect("a last element")
                ),
            });
        }
    }
}

/// Each key's version order, its longest read; a read that is not a prefix
/// of it is an incompatible order.
fn version_orders<'a>(
    txns: &[Txn],
    reads: &HashMap<&'a Scalar, Vec<(usize, &'a [Scalar])>>,
    observed: &mut Vec<Observation>,
) -> BTreeMap<&'a Scalar, &'a [Scalar]> {
    let mut orders = BTreeMap::new();
    let mut keys: Vec<&&Scalar> = reads.keys().collect();
    keys.sort();
    for key in keys {
        let of_key = &reads[*key];
        let &(longest_by, longest) =
            of_key.iter().max_by_key(|(t, r)| (r.len(), std::cmp::Reverse(*t))).expect("a read");
        if let Some((t, r)) = of_key.iter().find(|(_, r)| !longest.starts_with(r)) {
            let show = |l: &[Scalar]| l.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
            observed.push(Observation {
                anomaly: Anomaly::IncompatibleOrder,
                txns: vec![*t, longest_by],
                what: format!(
                    "read {key} as [{}] and, at line {}, as [{}]",
                    show(r),
                    txns[longest_by].line,
                    show(longest)
                ),
            });
        }
        orders.insert(*key, longest);
    }
    orders
}
