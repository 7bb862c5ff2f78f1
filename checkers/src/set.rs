//! Sets (Jepsen's set checker): clients `add` unique elements, and a final
//! `read` returns the whole set (a JSON array). Every acknowledged add must
//! be in it.
//!
//! Against the last successful read of each key:
//! - **lost**: added `ok`, absent;
//! - **unexpected** (phantom): present, but never added;
//! - **duplicated**: present more than once;
//! - **failed but present**: added `fail` (it did not happen), present;
//! - **recovered** and **indeterminate**: added with an unknown outcome
//!   (`info`, or never completed), present or absent: neither is wrong.
//!
//! A key without a successful read is undecided, not lost: nobody looked.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::{Event, EventType};

/// What a set's history shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SetKey {
    pub key: Option<String>,
    /// Adds invoked, acknowledged, failed, of unknown outcome.
    pub attempted: usize,
    pub acknowledged: usize,
    pub failed: usize,
    pub unknown: usize,
    /// The line of the final read, if any read succeeded.
    pub final_read: Option<usize>,
    pub lost: Vec<Value>,
    pub unexpected: Vec<Value>,
    pub duplicated: Vec<Value>,
    pub failed_but_present: Vec<Value>,
    pub recovered: usize,
    pub indeterminate: usize,
}

impl SetKey {
    fn wrong(&self) -> bool {
        !(self.lost.is_empty()
            && self.unexpected.is_empty()
            && self.duplicated.is_empty()
            && self.failed_but_present.is_empty())
    }
}

/// The verdict for a history of sets.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum SetVerdict {
    Valid {
        keys: Vec<SetKey>,
    },
    Invalid {
        keys: Vec<SetKey>,
    },
    /// A key was never read successfully (and nothing else was wrong).
    Undecided {
        keys: Vec<SetKey>,
    },
}

/// Canonical JSON, so that `1` and `1.0` are not confused with `"1"`.
fn canon(v: &Value) -> String {
    v.to_string()
}

/// Checks a history of `add` and `read` operations on sets, key by key.
pub fn check(events: &[Event]) -> Result<SetVerdict> {
    // Per key: each add's value and how it ended; the last ok read.
    #[derive(Default)]
    struct Key {
        adds: BTreeMap<String, (Value, Option<EventType>)>,
        read: Option<(usize, Vec<Value>)>,
    }
    let mut keys: BTreeMap<Option<String>, Key> = BTreeMap::new();
    // Per process: the add it has outstanding (key, value).
    let mut open: BTreeMap<u64, (Option<String>, String)> = BTreeMap::new();
    for e in events {
        let bad = |detail: String| Error::Model { line: e.line, detail };
        let k = keys.entry(e.key.clone()).or_default();
        match (e.f.as_str(), e.kind) {
            ("add", EventType::Invoke) => {
                let v = canon(&e.value);
                if k.adds.insert(v.clone(), (e.value.clone(), None)).is_some() {
                    return Err(bad(format!("{v} is added twice: a set's elements must be unique")));
                }
                open.insert(e.process, (e.key.clone(), v));
            }
            ("add", done) => {
                let Some((key, v)) = open.remove(&e.process) else {
                    return Err(bad(format!("process {} completes an add it never invoked", e.process)));
                };
                let k = keys.get_mut(&key).expect("invoked on this key");
                k.adds.get_mut(&v).expect("invoked").1 = Some(done);
            }
            ("read", EventType::Ok) => {
                let Some(items) = e.value.as_array() else {
                    return Err(bad(format!("a set's read returns an array, not {}", e.value)));
                };
                k.read = Some((e.line, items.clone()));
            }
            ("read", _) => {}
            (f, _) => return Err(bad(format!("a set knows add and read, not `{f}`"))),
        }
    }
    let mut out = Vec::new();
    for (key, k) in keys {
        let mut s = SetKey { key, attempted: k.adds.len(), ..SetKey::default() };
        for (_, done) in k.adds.values() {
            match done {
                Some(EventType::Ok) => s.acknowledged += 1,
                Some(EventType::Fail) => s.failed += 1,
                _ => s.unknown += 1,
            }
        }
        if let Some((line, items)) = &k.read {
            s.final_read = Some(*line);
            let mut seen = BTreeSet::new();
            for item in items {
                let c = canon(item);
                if !seen.insert(c.clone()) {
                    s.duplicated.push(item.clone());
                }
                match k.adds.get(&c).map(|a| a.1) {
                    None => s.unexpected.push(item.clone()),
                    Some(Some(EventType::Fail)) => s.failed_but_present.push(item.clone()),
                    _ => {}
                }
            }
            for (c, (value, done)) in &k.adds {
                let present = seen.contains(c);
                match done {
                    Some(EventType::Ok) if !present => s.lost.push(value.clone()),
                    Some(EventType::Ok) | Some(EventType::Fail) => {}
                    _ if present => s.recovered += 1,
                    _ => s.indeterminate += 1,
                }
            }
        }
        out.push(s);
    }
    Ok(if out.iter().any(SetKey::wrong) {
        SetVerdict::Invalid { keys: out }
    } else if out.iter().any(|s| s.final_read.is_none()) {
        SetVerdict::Undecided { keys: out }
    } else {
        SetVerdict::Valid { keys: out }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    fn verdict(lines: &[&str]) -> SetVerdict {
        check(&parse(&lines.join("\n")).unwrap()).unwrap()
    }

    #[test]
    fn every_acknowledged_add_read_back_is_valid() {
        let v = verdict(&[
            r#"{"process":0,"type":"invoke","f":"add","value":1}"#,
            r#"{"process":1,"type":"invoke","f":"add","value":2}"#,
            r#"{"process":0,"type":"ok","f":"add","value":1}"#,
            r#"{"process":1,"type":"info","f":"add","value":2}"#,
            r#"{"process":2,"type":"invoke","f":"add","value":3}"#,
            r#"{"process":2,"type":"fail","f":"add","value":3}"#,
            r#"{"process":3,"type":"invoke","f":"read","value":null}"#,
            r#"{"process":3,"type":"ok","f":"read","value":[1]}"#,
        ]);
        let SetVerdict::Valid { keys } = v else { panic!("{v:?}") };
        let k = &keys[0];
        assert_eq!((k.attempted, k.acknowledged, k.failed, k.unknown), (3, 1, 1, 1));
        assert_eq!((k.recovered, k.indeterminate, k.final_read), (0, 1, Some(8)));
    }

    #[test]
    fn lost_phantom_duplicated_and_failed_adds_are_told_apart() {
        let v = verdict(&[
            r#"{"process":0,"type":"invoke","f":"add","key":"s","value":1}"#,
            r#"{"process":0,"type":"ok","f":"add","key":"s","value":1}"#,
            r#"{"process":0,"type":"invoke","f":"add","key":"s","value":2}"#,
            r#"{"process":0,"type":"ok","f":"add","key":"s","value":2}"#,
            r#"{"process":1,"type":"invoke","f":"add","key":"s","value":3}"#,
            r#"{"process":1,"type":"fail","f":"add","key":"s","value":3}"#,
            r#"{"process":2,"type":"invoke","f":"add","key":"s","value":4}"#,
            r#"{"process":3,"type":"invoke","f":"read","key":"s"}"#,
            r#"{"process":3,"type":"ok","f":"read","key":"s","value":[2,2,3,4,9]}"#,
        ]);
        let SetVerdict::Invalid { keys } = v else { panic!("{v:?}") };
        let k = &keys[0];
        assert_eq!(k.lost, [Value::from(1)]);
        assert_eq!(k.duplicated, [Value::from(2)]);
        assert_eq!(k.failed_but_present, [Value::from(3)]);
        assert_eq!(k.unexpected, [Value::from(9)]);
        assert_eq!((k.recovered, k.indeterminate), (1, 0), "4 never completed, and is there");
    }

    #[test]
    fn without_a_successful_read_nothing_is_lost_but_nothing_is_known() {
        let v = verdict(&[
            r#"{"process":0,"type":"invoke","f":"add","value":1}"#,
            r#"{"process":0,"type":"ok","f":"add","value":1}"#,
            r#"{"process":1,"type":"invoke","f":"read"}"#,
            r#"{"process":1,"type":"info","f":"read"}"#,
        ]);
        let SetVerdict::Undecided { keys } = v else { panic!("{v:?}") };
        assert!(keys[0].lost.is_empty() && keys[0].final_read.is_none());
    }

    #[test]
    fn malformed_set_histories_say_where() {
        for (lines, needle) in [
            (
                vec![
                    r#"{"process":0,"type":"invoke","f":"add","value":1}"#,
                    r#"{"process":1,"type":"invoke","f":"add","value":1}"#,
                ],
                "added twice",
            ),
            (vec![r#"{"process":0,"type":"ok","f":"add","value":1}"#], "never invoked"),
            (vec![r#"{"process":0,"type":"ok","f":"read","value":3}"#], "returns an array"),
            (vec![r#"{"process":0,"type":"invoke","f":"pop"}"#], "not `pop`"),
        ] {
            let e = check(&parse(&lines.join("\n")).unwrap()).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
