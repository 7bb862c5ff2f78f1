//! List-append histories (Elle's richest model): each key is a list,
//! transactions append unique elements and read whole lists. A read of a
//! list shows the order of every append before its last element, so the
//! longest read of a key is that key's version order, and every other read
//! must be a prefix of it. An append no read shows still has a place: after
//! the last element of the longest read (after the empty list if nothing
//! was read), since every append follows the elements already there
//! (Elle's `previously-appended-element`). From that order, as Elle infers
//! it for every append of a transaction that committed or may have:
//!
//! - write-write: from the appender of the element before an append (read,
//!   or placed as above) to the append's transaction;
//! - read-write: from every transaction that read the list ending in that
//!   element (empty, for the first) to the append's transaction;
//! - write-read: from the appender of the last element a read shows to the
//!   reader.
//!
//! Appends no read shows, of two or more transactions, may have happened
//! in either order: the graph then gives each one the edges it would have
//! if it came first (`Inference::open`), and what that leaves open
//! `execution.rs` decides.
//!
//! Elements of transactions that failed never were: the order skips them
//! (a read that shows one is an aborted read), and a read's version is its
//! last element of a transaction that did not fail. A read that ends in
//! the reader's own appends orders only what it shows before them: those
//! are the transaction's own view (Elle takes the whole read, so an append
//! of another transaction committed in between reads as an incompatible
//! order; here it is the read-write cycle it is, which read committed
//! allows).
//!
//! Reads alone show the anomalies that need no cycle: duplicate elements,
//! incompatible orders (two reads neither a prefix of the other, or a
//! read showing a transaction's appends to a key out of the order it made
//! them, or a later one without an earlier), reads that disagree with the transaction's own
//! earlier reads and appends (internal), elements appended later by the
//! reader itself (future read), elements of failed transactions (G1a), a
//! list ending in an element its appender followed with another of its own
//! (G1b), and a committed append right after a failed one in a list's
//! order (dirty update).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::consistency::Anomaly;
use super::graph::{Graph, Kind, Source, Why};
use super::inference::{observe_read_of, writers, Inference, Observation, Write};
use super::transaction::{Mop, Scalar, Status, Txn};
use crate::error::Result;

/// A version of a list: its last element, `None` for the empty list.
type Version = Option<Scalar>;

pub fn infer(txns: &[Txn]) -> Result<Inference> {
    let appends = writers(txns)?;
    let writer = |key: &Scalar, e: &Scalar| appends.get(&(key.clone(), e.clone())).copied();
    let failed = |w: Option<Write>| w.is_some_and(|w| txns[w.txn].status == Status::Fail);
    // A read's version: its last element of a transaction that did not fail.
    let version_of =
        |key: &Scalar, list: &[Scalar]| -> Version { list.iter().rev().find(|e| !failed(writer(key, e))).cloned() };
    let mut observed = Vec::new();
    // Per key, the reads of committed transactions: (reader, elements).
    let mut reads: BTreeMap<&Scalar, Vec<(usize, Vec<Scalar>)>> = BTreeMap::new();
    for (t, txn) in txns.iter().enumerate().filter(|(_, t)| t.status == Status::Ok) {
        // Per key, what this transaction knows of the list: all of it
        // (after a read) or only its own appends so far, at its end; and
        // all its own appends so far.
        let mut known: HashMap<&Scalar, (bool, Vec<Scalar>)> = HashMap::new();
        let mut own: HashMap<&Scalar, Vec<Scalar>> = HashMap::new();
        for (m, mop) in txn.mops.iter().enumerate() {
            match mop {
                Mop::Append { key, value } => {
                    known.entry(key).or_default().1.push(value.clone());
                    own.entry(key).or_default().push(value.clone());
                }
                Mop::Read { key, value: Some(list) } => {
                    let mut seen = HashSet::new();
                    if let Some(dup) = list.iter().find(|e| !seen.insert(*e)) {
                        observed.push(Observation {
                            anomaly: Anomaly::DuplicateElements,
                            txns: vec![t],
                            what: format!("read {key} with {dup} twice"),
                        });
                    }
                    if let Some((whole, so_far)) = known.get(key) {
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
                    known.insert(key, (true, list.clone()));
                    let mine = own.get(key).map(Vec::as_slice).unwrap_or_default();
                    reads.entry(key).or_default().push((t, before_own(list, mine).to_vec()));
                    observe_elements(txns, t, m, key, list, &writer, &mut observed);
                }
                Mop::Read { value: None, .. } => unreachable!("a committed transaction's reads are known"),
                Mop::Write { .. } => unreachable!("list-append transactions do not write"),
            }
        }
    }
    let orders = version_orders(txns, &reads, &mut observed);
    for (key, order) in &orders {
        observe_dirty_updates(txns, key, order, &writer, &mut observed);
    }
    // Per key and version, the transactions that read it.
    let mut readers: HashMap<(&Scalar, Version), Vec<usize>> = HashMap::new();
    let mut graph = Graph::new(txns.len());
    for (key, of_key) in &reads {
        for (t, list) in of_key {
            let (t, version) = (*t, version_of(key, list));
            if let Some(w) = version.as_ref().and_then(|e| writer(key, e)) {
                let why = Why { key: (*key).clone(), before: version.clone(), after: None, source: Source::Reads };
                graph.add(w.txn, t, Kind::Wr, Some(why));
            }
            readers.entry((key, version)).or_default().push(t);
        }
    }
    // Info transactions some committed read shows an element of: they
    // committed. The others may not have, and are no one's predecessor.
    let mut shown: HashSet<usize> = HashSet::new();
    for (key, of_key) in &reads {
        for (_, list) in of_key {
            shown.extend(list.iter().filter_map(|e| writer(key, e)).map(|w| w.txn));
        }
    }
    // Per key, the transactions that committed an append no read shows:
    // two or more, and their order is open.
    let mut unread: BTreeMap<&Scalar, BTreeSet<usize>> = BTreeMap::new();
    for (t, txn) in txns.iter().enumerate().filter(|(_, t)| t.status != Status::Fail) {
        for mop in &txn.mops {
            let Mop::Append { key, value } = mop else { continue };
            let order = orders.get(key).copied().unwrap_or_default();
            if !order.contains(value) && (txn.status == Status::Ok || shown.contains(&t)) {
                unread.entry(key).or_default().insert(t);
            }
            // The element before this one: in the order, or after all of
            // it if no read shows this one.
            let (before, source) = match order.iter().position(|e| e == value) {
                Some(i) => (order[..i].iter().rev().find(|e| !failed(writer(key, e))).cloned(), Source::Reads),
                None => (version_of(key, order), Source::Unread),
            };
            let why = || Some(Why { key: key.clone(), before: before.clone(), after: Some(value.clone()), source });
            if let Some(w) = before.as_ref().and_then(|e| writer(key, e)) {
                graph.add(w.txn, t, Kind::Ww, why());
            }
            for &r in readers.get(&(key, before.clone())).into_iter().flatten() {
                graph.add(r, t, Kind::Rw, why());
            }
        }
    }
    let open = unread.values().any(|ts| ts.len() > 1);
    Ok(Inference { graph, observed, open })
}

/// What a read of a list showed of the list itself: all but the run of
/// the reader's own appends (`own`, so far) it ends with, which are the
/// reader's own view on top of it. An own append before another's element
/// is where it landed in the list, and stays.
pub(super) fn before_own<'a>(list: &'a [Scalar], own: &[Scalar]) -> &'a [Scalar] {
    let mine = list.iter().rev().take_while(|e| own.contains(e)).count();
    &list[..list.len() - mine]
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
    // A transaction's appends to a key land in the order it made them: an
    // element must follow the one its appender appended to the key before
    // it.
    let position: HashMap<&Scalar, usize> = list.iter().enumerate().map(|(i, e)| (e, i)).collect();
    for (i, e) in list.iter().enumerate() {
        // The reader's own appends out of order: `internal` says so.
        let Some(w) = writer(key, e).filter(|w| w.txn != t) else { continue };
        let earlier = txns[w.txn].mops[..w.mop].iter().rev().find_map(|m| match m {
            Mop::Append { key: k, value } if k == key => Some(value),
            _ => None,
        });
        if let Some(earlier) = earlier.filter(|p| position.get(p).is_none_or(|&j| j > i)) {
            observed.push(Observation {
                anomaly: Anomaly::IncompatibleOrder,
                txns: vec![t, w.txn],
                what: if position.contains_key(earlier) {
                    format!("read {key} with {e} before {earlier}, which T{} appended first", w.txn)
                } else {
                    format!("read {key} with {e} but without {earlier}, which T{} appended before it", w.txn)
                },
            });
            break;
        }
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

/// A committed transaction's append right after (failed appends aside)
/// one of a failed transaction: Elle's dirty update, one per run of failed
/// appends.
fn observe_dirty_updates(
    txns: &[Txn],
    key: &Scalar,
    order: &[Scalar],
    writer: &impl Fn(&Scalar, &Scalar) -> Option<Write>,
    observed: &mut Vec<Observation>,
) {
    // The first failed append since the last committed one.
    let mut aborted: Option<(&Scalar, usize)> = None;
    for e in order {
        let Some(w) = writer(key, e) else { continue };
        match txns[w.txn].status {
            Status::Fail => {
                aborted.get_or_insert((e, w.txn));
            }
            Status::Ok => {
                if let Some((f, by)) = aborted.take() {
                    observed.push(Observation {
                        anomaly: Anomaly::DirtyUpdate,
                        txns: vec![w.txn, by],
                        what: format!("appended {e} to {key} after {f}, appended by T{by}, which failed"),
                    });
                }
            }
            // It may have committed or not: the order says nothing yet.
            Status::Info => {}
        }
    }
}

/// Each key's version order, its longest read; a read that is not a prefix
/// of it is an incompatible order.
fn version_orders<'a>(
    txns: &[Txn],
    reads: &'a BTreeMap<&'a Scalar, Vec<(usize, Vec<Scalar>)>>,
    observed: &mut Vec<Observation>,
) -> BTreeMap<&'a Scalar, &'a [Scalar]> {
    let mut orders = BTreeMap::new();
    for (key, of_key) in reads {
        let (longest_by, longest) =
            of_key.iter().max_by_key(|(t, r)| (r.len(), std::cmp::Reverse(*t))).expect("a read");
        let longest_by = *longest_by;
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
        orders.insert(*key, longest.as_slice());
    }
    orders
}
