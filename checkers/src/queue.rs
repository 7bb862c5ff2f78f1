//! Queues (Jepsen's total-queue checker): clients `enqueue` unique values
//! and `dequeue` them (an `ok` dequeue's value is what it took; `fail`:
//! nothing), and at the end `drain` what is left (an `ok` drain's value is
//! an array). Every acknowledged enqueue must come out exactly once.
//!
//! Per key:
//! - **lost**: enqueued `ok`, never dequeued nor drained;
//! - **duplicated**: came out more than once;
//! - **unexpected**: came out, but was never enqueued (or its enqueue
//!   failed);
//! - **recovered**: enqueued with an unknown outcome, and came out.
//!
//! Lost values are only known after a successful drain: without one, a
//! history whose acknowledged values did not all come out is undecided.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::{Event, EventType};

/// What a queue's history shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct QueueKey {
    pub key: Option<String>,
    pub enqueued: usize,
    pub acknowledged: usize,
    /// Values that came out (dequeues and drains).
    pub dequeued: usize,
    /// The line of the last successful drain, if any.
    pub drained: Option<usize>,
    pub lost: Vec<Value>,
    pub duplicated: Vec<Value>,
    pub unexpected: Vec<Value>,
    pub recovered: usize,
    /// Acknowledged values not out yet, without a drain to tell.
    pub outstanding: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum QueueVerdict {
    Valid { keys: Vec<QueueKey> },
    Invalid { keys: Vec<QueueKey> },
    Undecided { keys: Vec<QueueKey> },
}

/// Checks a history of `enqueue`, `dequeue` and `drain` operations.
pub fn check(events: &[Event]) -> Result<QueueVerdict> {
    #[derive(Default)]
    struct Key {
        /// Each enqueued value and how its enqueue ended.
        enqueues: BTreeMap<String, (Value, Option<EventType>)>,
        /// Each value that came out, and how many times.
        out: BTreeMap<String, (Value, usize)>,
        drained: Option<usize>,
    }
    let mut keys: BTreeMap<Option<String>, Key> = BTreeMap::new();
    let mut open: BTreeMap<u64, (Option<String>, String)> = BTreeMap::new();
    for e in events {
        let bad = |detail: String| Error::Model { line: e.line, detail };
        let k = keys.entry(e.key.clone()).or_default();
        let mut take = |v: &Value| k.out.entry(v.to_string()).or_insert((v.clone(), 0)).1 += 1;
        match (e.f.as_str(), e.kind) {
            ("enqueue", EventType::Invoke) => {
                let v = e.value.to_string();
                if k.enqueues.insert(v.clone(), (e.value.clone(), None)).is_some() {
                    return Err(bad(format!("{v} is enqueued twice: a queue's values must be unique")));
                }
                open.insert(e.process, (e.key.clone(), v));
            }
            ("enqueue", done) => {
                let Some((key, v)) = open.remove(&e.process) else {
                    return Err(bad(format!("process {} completes an enqueue it never invoked", e.process)));
                };
                keys.get_mut(&key).expect("invoked on this key").enqueues.get_mut(&v).expect("invoked").1 = Some(done);
            }
            ("dequeue", EventType::Ok) => take(&e.value),
            ("drain", EventType::Ok) => {
                let Some(items) = e.value.as_array() else {
                    return Err(bad(format!("a drain returns an array, not {}", e.value)));
                };
                items.iter().for_each(&mut take);
                k.drained = Some(e.line);
            }
            ("dequeue" | "drain", _) => {}
            (f, _) => return Err(bad(format!("a queue knows enqueue, dequeue and drain, not `{f}`"))),
        }
    }
    let mut out = Vec::new();
    for (key, k) in keys {
        let mut q = QueueKey { key, enqueued: k.enqueues.len(), drained: k.drained, ..QueueKey::default() };
        for (c, (value, n)) in &k.out {
            q.dequeued += n;
            if *n > 1 {
                q.duplicated.push(value.clone());
            }
            match k.enqueues.get(c).map(|e| e.1) {
                None | Some(Some(EventType::Fail)) => q.unexpected.push(value.clone()),
                Some(Some(EventType::Ok)) => {}
                Some(_) => q.recovered += 1,
            }
        }
        for (c, (value, done)) in &k.enqueues {
            if *done == Some(EventType::Ok) {
                q.acknowledged += 1;
                if !k.out.contains_key(c) {
                    if k.drained.is_some() {
                        q.lost.push(value.clone());
                    } else {
                        q.outstanding += 1;
                    }
                }
            }
        }
        out.push(q);
    }
    let wrong = |q: &QueueKey| !(q.lost.is_empty() && q.duplicated.is_empty() && q.unexpected.is_empty());
    Ok(if out.iter().any(wrong) {
        QueueVerdict::Invalid { keys: out }
    } else if out.iter().any(|q| q.outstanding > 0) {
        QueueVerdict::Undecided { keys: out }
    } else {
        QueueVerdict::Valid { keys: out }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    fn verdict(lines: &[&str]) -> QueueVerdict {
        check(&parse(&lines.join("\n")).unwrap()).unwrap()
    }

    #[test]
    fn each_acknowledged_value_out_once_is_valid() {
        let v = verdict(&[
            r#"{"process":0,"type":"invoke","f":"enqueue","value":"a"}"#,
            r#"{"process":0,"type":"ok","f":"enqueue","value":"a"}"#,
            r#"{"process":1,"type":"invoke","f":"enqueue","value":"b"}"#,
            r#"{"process":1,"type":"info","f":"enqueue","value":"b"}"#,
            r#"{"process":2,"type":"invoke","f":"dequeue"}"#,
            r#"{"process":2,"type":"ok","f":"dequeue","value":"b"}"#,
            r#"{"process":2,"type":"invoke","f":"dequeue"}"#,
            r#"{"process":2,"type":"fail","f":"dequeue"}"#,
            r#"{"process":3,"type":"invoke","f":"drain"}"#,
            r#"{"process":3,"type":"ok","f":"drain","value":["a"]}"#,
        ]);
        let QueueVerdict::Valid { keys } = v else { panic!("{v:?}") };
        assert_eq!((keys[0].acknowledged, keys[0].dequeued, keys[0].recovered), (1, 2, 1));
    }

    #[test]
    fn lost_duplicated_and_unexpected_values_are_told_apart() {
        let v = verdict(&[
            r#"{"process":0,"type":"invoke","f":"enqueue","value":1}"#,
            r#"{"process":0,"type":"ok","f":"enqueue","value":1}"#,
            r#"{"process":0,"type":"invoke","f":"enqueue","value":2}"#,
            r#"{"process":0,"type":"ok","f":"enqueue","value":2}"#,
            r#"{"process":1,"type":"invoke","f":"dequeue"}"#,
            r#"{"process":1,"type":"ok","f":"dequeue","value":2}"#,
            r#"{"process":1,"type":"invoke","f":"drain"}"#,
            r#"{"process":1,"type":"ok","f":"drain","value":[2, 7]}"#,
        ]);
        let QueueVerdict::Invalid { keys } = v else { panic!("{v:?}") };
        assert_eq!((keys[0].lost.clone(), keys[0].duplicated.clone()), (vec![Value::from(1)], vec![Value::from(2)]));
        assert_eq!(keys[0].unexpected, [Value::from(7)]);
    }

    #[test]
    fn without_a_drain_values_not_out_are_undecided() {
        let v = verdict(&[
            r#"{"process":0,"type":"invoke","f":"enqueue","value":1}"#,
            r#"{"process":0,"type":"ok","f":"enqueue","value":1}"#,
        ]);
        let QueueVerdict::Undecided { keys } = v else { panic!("{v:?}") };
        assert_eq!((keys[0].outstanding, keys[0].lost.len()), (1, 0));
    }
}
