//! Logs: clients `append` unique entries to an append-only log and `read`
//! it whole (a JSON array, in the log's order). Every reader must see one
//! order: each successful read is a prefix of the longest one. Against the
//! last successful read (as the set checker):
//!
//! - **lost**: appended `ok` before that read was invoked, absent from it;
//! - **unexpected**: present, but never appended, or its append failed;
//! - **duplicated**: present twice in one read;
//! - **reordered**: a read that is not a prefix of the longest read (two
//!   readers saw different orders), named with both reads' lines.
//!
//! Appends of unknown outcome (`info`, never completed) may be present or
//! not. Without a successful read nothing is known: undecided.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::{Event, EventType};

/// What a log's history shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LogReport {
    /// Appends acknowledged, failed, of unknown outcome; reads that
    /// succeeded.
    pub acknowledged: usize,
    pub failed: usize,
    pub unknown: usize,
    pub reads: usize,
    /// The longest read's line and length: the log's order.
    pub longest: Option<(usize, usize)>,
    pub lost: Vec<Value>,
    pub unexpected: Vec<Value>,
    pub duplicated: Vec<Value>,
    /// Reads that are not a prefix of the longest: (its line, the
    /// longest's line).
    pub reordered: Vec<(usize, usize)>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum LogVerdict {
    Valid(LogReport),
    Invalid(LogReport),
    /// No read succeeded.
    Undecided(LogReport),
}

/// Checks a history of `append` and `read` operations on one log.
pub fn check(events: &[Event]) -> Result<LogVerdict> {
    let mut r = LogReport::default();
    // Each append's value (canonical JSON) and outcome; each process's
    // open operation.
    let mut appended: BTreeMap<String, EventType> = BTreeMap::new();
    // Acknowledged appends, with the index of their completion.
    let mut acked_at: Vec<(usize, String, Value)> = Vec::new();
    let mut open: BTreeMap<u64, (String, Value)> = BTreeMap::new();
    // Successful reads: (line, invocation index, elements).
    let mut reads: Vec<(usize, usize, Vec<Value>)> = Vec::new();
    let mut invoked_at: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind == EventType::Invoke {
            if !matches!(e.f.as_str(), "append" | "read") {
                return Err(Error::Model {
                    line: e.line,
                    detail: format!("a log knows append and read, not `{}`", e.f),
                });
            }
            if e.f == "append" && appended.insert(e.value.to_string(), EventType::Invoke).is_some() {
                return Err(Error::Model {
                    line: e.line,
                    detail: format!("{} appended twice: entries are unique", e.value),
                });
            }
            open.insert(e.process, (e.f.clone(), e.value.clone()));
            invoked_at.insert(e.process, i);
            continue;
        }
        let Some((f, value)) = open.remove(&e.process) else {
            return Err(Error::Malformed { line: e.line, detail: format!("process {} completes nothing", e.process) });
        };
        match (f.as_str(), e.kind) {
            ("append", kind) => {
                appended.insert(value.to_string(), kind);
                match kind {
                    EventType::Ok => {
                        r.acknowledged += 1;
                        acked_at.push((i, value.to_string(), value));
                    }
                    EventType::Fail => r.failed += 1,
                    _ => r.unknown += 1,
                }
            }
            ("read", EventType::Ok) => {
                let Value::Array(entries) = &e.value else {
                    return Err(Error::Model {
                        line: e.line,
                        detail: format!("a log's read is an array, not {}", e.value),
                    });
                };
                reads.push((e.line, invoked_at[&e.process], entries.clone()));
            }
            _ => {}
        }
    }
    r.unknown += open.values().filter(|(f, _)| f == "append").count();
    r.reads = reads.len();
    let Some((_, last_invoked, last)) = reads.last() else { return Ok(LogVerdict::Undecided(r)) };
    let (longest_line, longest) =
        reads.iter().map(|(l, _, v)| (*l, v)).max_by_key(|(l, v)| (v.len(), *l)).expect("a read");
    r.longest = Some((longest_line, longest.len()));
    // A read that is a prefix of the longest holds nothing the longest
    // does not: only the longest and the reordered ones are gone through.
    let mut entries_of = |read: &[Value]| {
        let mut seen = BTreeSet::new();
        for v in read {
            let key = v.to_string();
            let wrote = appended.get(&key);
            if !seen.insert(key) && !r.duplicated.contains(v) {
                r.duplicated.push(v.clone());
            }
            if matches!(wrote, None | Some(EventType::Fail)) && !r.unexpected.contains(v) {
                r.unexpected.push(v.clone());
            }
        }
    };
    entries_of(longest);
    for (line, _, read) in &reads {
        if !longest.starts_with(read) {
            entries_of(read);
            r.reordered.push((*line, longest_line));
        }
    }
    let in_last: BTreeSet<String> = last.iter().map(Value::to_string).collect();
    r.lost = acked_at
        .into_iter()
        .filter(|(done, key, _)| done < last_invoked && !in_last.contains(key))
        .map(|(_, _, v)| v)
        .collect();
    let wrong = !(r.lost.is_empty() && r.unexpected.is_empty() && r.duplicated.is_empty() && r.reordered.is_empty());
    Ok(if wrong { LogVerdict::Invalid(r) } else { LogVerdict::Valid(r) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    fn ev(p: u64, kind: &str, f: &str, value: &str) -> String {
        format!(r#"{{"process":{p},"type":"{kind}","f":"{f}","value":{value}}}"#)
    }

    fn verdict(lines: &[String]) -> LogVerdict {
        check(&parse(&lines.join("\n")).unwrap()).unwrap()
    }

    fn appends() -> Vec<String> {
        let mut v = Vec::new();
        for (p, x) in [(0, "1"), (1, "2")] {
            v.push(ev(p, "invoke", "append", x));
            v.push(ev(p, "ok", "append", x));
        }
        v
    }

    fn read(p: u64, got: &str) -> [String; 2] {
        [ev(p, "invoke", "read", "null"), ev(p, "ok", "read", got)]
    }

    #[test]
    fn every_reader_sees_one_order_and_every_acknowledged_entry() {
        let h = |reads: &[[String; 2]]| [appends(), reads.concat()].concat();
        assert!(matches!(verdict(&h(&[read(2, "[1]"), read(3, "[1,2]")])), LogVerdict::Valid(_)));
        let LogVerdict::Invalid(r) = verdict(&h(&[read(2, "[2]"), read(3, "[1,2]")])) else { panic!() };
        assert_eq!(r.reordered, [(6, 8)]);
        let LogVerdict::Invalid(r) = verdict(&h(&[read(2, "[1]")])) else { panic!() };
        assert_eq!(r.lost, [Value::from(2)]);
        let LogVerdict::Invalid(r) = verdict(&h(&[read(2, "[1,2,2,7]")])) else { panic!() };
        assert_eq!((r.duplicated.clone(), r.unexpected.clone()), (vec![Value::from(2)], vec![Value::from(7)]));
        assert!(matches!(verdict(&appends()), LogVerdict::Undecided(_)));
        // An append of unknown outcome may be there or not; a failed one
        // must not be.
        let unknown = [ev(4, "invoke", "append", "3")];
        assert!(matches!(
            verdict(&[appends(), unknown.to_vec(), read(2, "[1,2,3]").to_vec()].concat()),
            LogVerdict::Valid(_)
        ));
        let failed = [ev(4, "invoke", "append", "3"), ev(4, "fail", "append", "3")];
        let LogVerdict::Invalid(r) = verdict(&[appends(), failed.to_vec(), read(2, "[1,2,3]").to_vec()].concat())
        else {
            panic!()
        };
        assert_eq!(r.unexpected, [Value::from(3)]);
        // A generated log is valid; with one entry of a read moved, not.
        let text = crate::generate::log(5_000, 2);
        let LogVerdict::Valid(r) = check(&parse(&text).unwrap()).unwrap() else { panic!() };
        assert_eq!((r.reads, r.acknowledged + r.failed), (3, 5_000));
        let mut events = parse(&text).unwrap();
        let first = events.iter_mut().find(|e| e.f == "read" && e.kind == EventType::Ok).unwrap();
        first.value.as_array_mut().unwrap().swap(0, 1);
        let line = first.line;
        let LogVerdict::Invalid(r) = check(&events).unwrap() else { panic!() };
        assert_eq!(r.reordered, [(line, r.longest.unwrap().0)]);
        let e = check(&parse(&ev(0, "invoke", "pop", "null")).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not `pop`"), "{e}");
    }
}
