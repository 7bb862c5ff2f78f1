//! The smallest violating sub-history: delta debugging (Zeller's ddmin)
//! over a history's operations, keeping a sub-history while the model
//! still finds every anomaly the whole history showed (`judge.rs`). An
//! operation goes whole (its invocation and completion together), so every
//! candidate is a well-formed history of the same processes.
//!
//! What the result shows depends on the model. For a register it is a
//! 1-minimal history that no order explains: remove any one operation and
//! some order does. For a set it is the lost (or duplicated, or phantom)
//! adds and the final read: elements of that read whose adds were cut read
//! as unexpected in it, which the whole history's verdict says they were
//! not.

use std::collections::{BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::history::{Event, EventType};
use crate::judge::{judge, ModelKind, Options, Status};
use crate::txn::Searches;

/// A sub-history, and what finding it took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Shrunk {
    #[serde(skip)]
    pub events: Vec<Event>,
    /// Operations in the whole history, and in the sub-history.
    pub operations: usize,
    pub kept: usize,
    /// Checks of candidate sub-histories made.
    pub checks: u32,
    /// No single operation can be removed (false: the check budget ran
    /// out first, and a smaller one may exist).
    pub minimal: bool,
}

/// Each event's operation: an invocation and the completion that follows
/// it on the same process share one.
fn operations(events: &[Event]) -> Vec<usize> {
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut next = 0;
    events
        .iter()
        .map(|e| {
            let open_op = if e.kind == EventType::Invoke { None } else { open.remove(&e.process) };
            open_op.unwrap_or_else(|| {
                next += 1;
                if e.kind == EventType::Invoke {
                    open.insert(e.process, next - 1);
                }
                next - 1
            })
        })
        .collect()
}

/// Shrinks `events`, which `model` judges invalid with `anomalies`, to a
/// sub-history that still shows all of them, making at most `max_checks`
/// checks.
pub fn shrink(
    model: ModelKind,
    events: &[Event],
    anomalies: &BTreeSet<String>,
    options: Options,
    max_checks: u32,
) -> Shrunk {
    assert!(!anomalies.is_empty(), "shrinking a history with nothing wrong");
    let op_of = operations(events);
    let count = op_of.iter().max().map_or(0, |m| m + 1);
    // The events of the operations in `ops`.
    let sub_history = |ops: &[usize]| -> Vec<Event> {
        let keep: BTreeSet<usize> = ops.iter().copied().collect();
        events.iter().zip(&op_of).filter(|(_, o)| keep.contains(o)).map(|(e, _)| e.clone()).collect()
    };
    // A transactional history's anomalies that the graph shows need no
    // search for an execution: a sub-history that would need one to be
    // found invalid does not fail the same way.
    let searches = if anomalies.iter().any(|a| a.ends_with("-cycle-exists")) { Searches::Asked } else { Searches::Off };
    let options = Options { searches, ..options };
    let mut checks = 0;
    let mut still_fails = |ops: &[usize]| -> Option<bool> {
        if checks >= max_checks {
            return None;
        }
        checks += 1;
        let sub = sub_history(ops);
        if model == ModelKind::Register && !reads_are_written(&sub) {
            return Some(false);
        }
        Some(
            judge(model, &sub, options).is_ok_and(|j| j.status == Status::Invalid && anomalies.is_subset(&j.anomalies)),
        )
    };
    let (kept, minimal) = ddmin((0..count).collect(), &mut still_fails);
    Shrunk { events: sub_history(&kept), operations: count, kept: kept.len(), checks, minimal }
}

/// Whether every value a read returns was written in `events` (or is the
/// empty register's `null`). Cutting the write a stale read saw would make
/// it a read of a value nobody wrote: also not linearizable, but no longer
/// the anomaly the whole history showed.
fn reads_are_written(events: &[Event]) -> bool {
    let written: BTreeSet<(Option<&str>, String)> = events
        .iter()
        .filter(|e| e.kind == EventType::Invoke)
        .filter_map(|e| match e.f.as_str() {
            "write" => Some((e.key.as_deref(), e.value.to_string())),
            "cas" => e.value.get(1).map(|v| (e.key.as_deref(), v.to_string())),
            _ => None,
        })
        .collect();
    events
        .iter()
        .filter(|e| e.kind == EventType::Ok && e.f == "read" && !e.value.is_null())
        .all(|e| written.contains(&(e.key.as_deref(), e.value.to_string())))
}

/// ddmin: the smallest subset of `items` it finds on which `fails` holds
/// (it holds on `items`), and whether that subset is 1-minimal. `fails`
/// answers `None` when no more checks may be made.
fn ddmin(mut items: Vec<usize>, fails: &mut impl FnMut(&[usize]) -> Option<bool>) -> (Vec<usize>, bool) {
    let mut parts = 2;
    while items.len() >= 2 {
        let size = items.len().div_ceil(parts);
        let chunks: Vec<Vec<usize>> = items.chunks(size).map(<[usize]>::to_vec).collect();
        let mut reduced = false;
        // A chunk alone, then everything but a chunk.
        for chunk in &chunks {
            match fails(chunk) {
                None => return (items, false),
                Some(true) => {
                    (items, parts, reduced) = (chunk.clone(), 2, true);
                    break;
                }
                Some(false) => {}
            }
        }
        if !reduced && chunks.len() > 2 {
            for i in 0..chunks.len() {
                let rest: Vec<usize> =
                    chunks.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, c)| c.iter().copied()).collect();
                match fails(&rest) {
                    None => return (items, false),
                    Some(true) => {
                        (items, parts, reduced) = (rest, (parts - 1).max(2), true);
                        break;
                    }
                    Some(false) => {}
                }
            }
        }
        if !reduced {
            if parts >= items.len() {
                // Every single item was tried out: 1-minimal.
                return (items, true);
            }
            parts = (parts * 2).min(items.len());
        }
    }
    (items, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    #[test]
    fn ddmin_finds_the_one_minimal_pair() {
        // Fails when both 3 and 7 are in.
        let mut calls = 0;
        let (kept, minimal) = ddmin((0..20).collect(), &mut |s: &[usize]| {
            calls += 1;
            Some(s.contains(&3) && s.contains(&7))
        });
        assert_eq!((kept, minimal), (vec![3, 7], true));
        assert!(calls < 60, "{calls} checks");
        // Out of checks: what it had, not minimal.
        let (kept, minimal) = ddmin((0..20).collect(), &mut |_: &[usize]| None);
        assert_eq!((kept.len(), minimal), (20, false));
    }

    /// Two writers and readers on two keys; the stale read of key r needs
    /// the write it saw, the write it missed, and nothing else.
    #[test]
    fn a_stale_read_shrinks_to_the_write_it_missed_and_itself() {
        let mut lines = Vec::new();
        for i in 1..=5 {
            for (p, key) in [(0, "p"), (2, "r")] {
                lines.push(format!(r#"{{"process":{p},"type":"invoke","f":"write","key":"{key}","value":{i}}}"#));
                lines.push(format!(r#"{{"process":{p},"type":"ok","f":"write","key":"{key}","value":{i}}}"#));
                lines.push(format!(r#"{{"process":{},"type":"invoke","f":"read","key":"{key}"}}"#, p + 1));
                let seen = if key == "r" && i == 3 { 2 } else { i };
                lines.push(format!(r#"{{"process":{},"type":"ok","f":"read","key":"{key}","value":{seen}}}"#, p + 1));
            }
        }
        let events = parse(&lines.join("\n")).unwrap();
        let j = judge(ModelKind::Register, &events, Options::default()).unwrap();
        assert_eq!(j.status, Status::Invalid, "{}", j.summary);
        let s = shrink(ModelKind::Register, &events, &j.anomalies, Options::default(), 1000);
        assert!(s.minimal);
        let kept: Vec<(String, serde_json::Value)> =
            s.events.iter().filter(|e| e.kind == EventType::Ok).map(|e| (e.f.clone(), e.value.clone())).collect();
        // Read 2 after write 3 completed.
        let want = [("write".into(), 2.into()), ("write".into(), 3.into()), ("read".into(), 2.into())];
        assert_eq!(kept, want, "{:?}", s.events);
        assert_eq!((s.operations, s.kept), (20, 3));
    }

    #[test]
    fn a_lost_add_shrinks_to_its_add_and_the_final_read() {
        let mut lines = Vec::new();
        for i in 0..30 {
            lines.push(format!(r#"{{"process":{},"type":"invoke","f":"add","value":{i}}}"#, i % 3));
            lines.push(format!(r#"{{"process":{},"type":"ok","f":"add","value":{i}}}"#, i % 3));
        }
        let read: Vec<u32> = (0..30).filter(|i| *i != 17).collect();
        lines.push(r#"{"process":9,"type":"invoke","f":"read"}"#.into());
        lines.push(format!(r#"{{"process":9,"type":"ok","f":"read","value":{read:?}}}"#));
        let events = parse(&lines.join("\n")).unwrap();
        let j = judge(ModelKind::Set, &events, Options::default()).unwrap();
        let s = shrink(ModelKind::Set, &events, &j.anomalies, Options::default(), 1000);
        assert!(s.minimal);
        let fs: Vec<(&str, &serde_json::Value)> = s.events.iter().map(|e| (e.f.as_str(), &e.value)).collect();
        assert_eq!(fs.len(), 4, "{fs:?}");
        assert_eq!((fs[0].1, fs[3].0), (&serde_json::Value::from(17), "read"));
    }
}
