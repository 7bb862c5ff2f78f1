//! Histories: what clients of a system asked and what they were told, in
//! real-time order, one JSON object per line (the shape of Jepsen's
//! histories):
//!
//! ```text
//! {"process": 0, "type": "invoke", "f": "write", "key": "x", "value": 1}
//! {"process": 1, "type": "invoke", "f": "read",  "key": "x", "value": null}
//! {"process": 0, "type": "ok",     "f": "write", "key": "x", "value": 1}
//! {"process": 1, "type": "ok",     "f": "read",  "key": "x", "value": 1}
//! ```
//!
//! A process has at most one operation outstanding: its next `ok`, `fail`
//! or `info` completes its last `invoke`. `fail` means the operation did not
//! happen; `info` (a timeout, a crash) that it may have happened, at any
//! time after its invocation, or never; an invocation without a completion
//! is taken as `info`. A process that saw `info` may not invoke again (a
//! client that lost track of an operation starts over as a new process).

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What happened: a client asked, or was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventType {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One line of a history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    /// The operation: `read`, `write` or `cas` for a register.
    pub f: String,
    /// The object operated on (a register's name, a key); one object if
    /// absent.
    #[serde(default)]
    pub key: Option<String>,
    /// A write's value, a read's result (on its completion), a cas's
    /// `[expected, new]`.
    #[serde(default)]
    pub value: serde_json::Value,
    /// When it happened: nanoseconds of virtual time, as hvsim stamps the
    /// events a guest records through the SDK (ignored by the checkers,
    /// which go by the history's order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<u64>,
    /// Its line in the history file (1-based; blank lines count).
    #[serde(skip)]
    pub line: usize,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It happened, between its invocation and its completion.
    Ok,
    /// It may have happened, at any time after its invocation.
    Unknown,
    /// It did not happen.
    Failed,
}

/// An operation: an invocation and how it completed.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    pub process: u64,
    pub f: String,
    pub key: Option<String>,
    /// The value of its completion if it completed `ok`, else of its
    /// invocation.
    pub value: serde_json::Value,
    /// Indices in the history of its invocation and completion (`None`:
    /// it never completed, or completed `info`).
    pub invoked: usize,
    pub completed: Option<usize>,
    pub outcome: Outcome,
    /// Line of its invocation in the history file (1-based).
    pub line: usize,
}

impl Op {
    /// `read x -> 1` and the like, for people.
    pub fn describe(&self) -> String {
        let key = self.key.as_deref().map(|k| format!(" {k}")).unwrap_or_default();
        let outcome = match self.outcome {
            Outcome::Ok => "",
            Outcome::Unknown => " (outcome unknown)",
            Outcome::Failed => " (failed)",
        };
        format!("process {} {}{key} {}{outcome}, line {}", self.process, self.f, self.value, self.line)
    }
}

/// Reads a history (JSON lines; blank lines are skipped).
pub fn parse(text: &str) -> Result<Vec<Event>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let mut e: Event =
                serde_json::from_str(l).map_err(|e| Error::Parse { line: i + 1, detail: e.to_string() })?;
            e.line = i + 1;
            Ok(e)
        })
        .collect()
}

/// Pairs each invocation with its completion. Failed operations did not
/// happen and are left out.
pub fn operations(events: &[Event]) -> Result<Vec<Op>> {
    Ok(all_operations(events)?.into_iter().filter(|o| o.outcome != Outcome::Failed).collect())
}

/// Pairs each invocation with its completion, failed operations too (a
/// transactional checker must know what a read should never have seen).
pub fn all_operations(events: &[Event]) -> Result<Vec<Op>> {
    let mut ops: Vec<Op> = Vec::new();
    // Per process: its outstanding operation, or that it saw `info`.
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut crashed: HashMap<u64, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let line = e.line;
        if let Some(&at) = crashed.get(&e.process) {
            return Err(Error::Malformed {
                line,
                detail: format!("process {} acts after its operation at line {at} ended in info", e.process),
            });
        }
        match e.kind {
            EventType::Invoke => {
                if let Some(&o) = open.get(&e.process) {
                    return Err(Error::Malformed {
                        line,
                        detail: format!(
                            "process {} invokes while its operation at line {} is open",
                            e.process, ops[o].line
                        ),
                    });
                }
                open.insert(e.process, ops.len());
                ops.push(Op {
                    process: e.process,
                    f: e.f.clone(),
                    key: e.key.clone(),
                    value: e.value.clone(),
                    invoked: i,
                    completed: None,
                    outcome: Outcome::Unknown,
                    line,
                });
            }
            EventType::Ok | EventType::Fail | EventType::Info => {
                let Some(o) = open.remove(&e.process) else {
                    return Err(Error::Malformed { line, detail: format!("process {} completes nothing", e.process) });
                };
                let op = &mut ops[o];
                if op.f != e.f || op.key != e.key {
                    return Err(Error::Malformed {
                        line,
                        detail: format!(
                            "completes {} {:?} but line {} invoked {} {:?}",
                            e.f, e.key, op.line, op.f, op.key
                        ),
                    });
                }
                match e.kind {
                    EventType::Ok => {
                        op.completed = Some(i);
                        op.outcome = Outcome::Ok;
                        if !e.value.is_null() || op.f == "read" {
                            op.value = e.value.clone();
                        }
                    }
                    EventType::Fail => {
                        op.completed = Some(i);
                        op.outcome = Outcome::Failed;
                    }
                    _ => {
                        crashed.insert(e.process, line);
                    }
                }
            }
        }
    }
    Ok(ops)
}
