//! Transactions as a history records them: an operation `f = "txn"` whose
//! value is a list of micro-operations `[f, key, value]`, Elle's shape:
//!
//! ```text
//! {"process":0,"type":"invoke","f":"txn","value":[["append","x",1],["r","y",null]]}
//! {"process":0,"type":"ok",    "f":"txn","value":[["append","x",1],["r","y",[1,2]]]}
//! ```
//!
//! A list-append history appends (`append`) and reads whole lists (`r`); a
//! read-write-register history writes (`w`) and reads (`r`) one value, a
//! read of `null` seeing the initial state. Reads are known only when the
//! transaction completed `ok`; a `fail`ed one did not happen, and an
//! `info` one may have (its writes may be seen; its reads are unknown).
//! Every value written to a key must be unique to that key: that is what
//! lets a read name its writer.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::{self, Event, Outcome};

/// A key or a value: an integer or a string, as histories write them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Scalar {
    Int(i64),
    Str(String),
}

impl Scalar {
    fn from_json(v: &Value) -> Option<Scalar> {
        match v {
            Value::Number(n) => n.as_i64().map(Scalar::Int),
            Value::String(s) => Some(Scalar::Str(s.clone())),
            _ => None,
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Str(s) => f.write_str(s),
        }
    }
}

/// Which micro-operations a history's transactions are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TxnModel {
    ListAppend,
    RwRegister,
}

impl TxnModel {
    pub fn name(self) -> &'static str {
        match self {
            TxnModel::ListAppend => "list-append",
            TxnModel::RwRegister => "rw-register",
        }
    }
}

/// One micro-operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mop {
    Append {
        key: Scalar,
        value: Scalar,
    },
    Write {
        key: Scalar,
        value: Scalar,
    },
    /// A read: for a list, its elements; for a register, none (the
    /// initial state) or its one value. `None`: the result is unknown.
    Read {
        key: Scalar,
        value: Option<Vec<Scalar>>,
    },
}

impl Mop {
    pub fn key(&self) -> &Scalar {
        match self {
            Mop::Append { key, .. } | Mop::Write { key, .. } | Mop::Read { key, .. } => key,
        }
    }
}

impl std::fmt::Display for Mop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mop::Append { key, value } => write!(f, "append {key} {value}"),
            Mop::Write { key, value } => write!(f, "w {key} {value}"),
            Mop::Read { key, value: None } => write!(f, "r {key} ?"),
            Mop::Read { key, value: Some(v) } => {
                let v: Vec<String> = v.iter().map(ToString::to_string).collect();
                write!(f, "r {key} [{}]", v.join(" "))
            }
        }
    }
}

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It committed, between its invocation and its completion.
    Ok,
    /// It may have committed, at any time after its invocation.
    Info,
    /// It did not commit.
    Fail,
}

/// A transaction: its micro-operations and how it ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Txn {
    pub process: u64,
    pub status: Status,
    pub mops: Vec<Mop>,
    /// Line of its invocation in the history file (1-based).
    pub line: usize,
    /// Indices in the history of its invocation and of an `ok` completion.
    pub invoked: usize,
    pub completed: Option<usize>,
}

impl Txn {
    /// `process 3, line 45: append x 1, r y [1 2]`, for people.
    pub fn describe(&self) -> String {
        let mops: Vec<String> = self.mops.iter().map(ToString::to_string).collect();
        let status = match self.status {
            Status::Ok => "",
            Status::Info => " (outcome unknown)",
            Status::Fail => " (failed)",
        };
        format!("process {}, line {}{status}: {}", self.process, self.line, mops.join(", "))
    }
}

/// The transactions of a history, in invocation order.
pub fn transactions(model: TxnModel, events: &[Event]) -> Result<Vec<Txn>> {
    history::all_operations(events)?
        .into_iter()
        .map(|op| {
            // A committed transaction's micro-operations are its completion's.
            let line = op.completed.filter(|_| op.outcome == Outcome::Ok).map_or(op.line, |c| events[c].line);
            let malformed = |detail: String| Error::Malformed { line, detail };
            if op.f != "txn" {
                return Err(malformed(format!(
                    "a {} history holds transactions (`f: \"txn\"`), not {:?}",
                    model.name(),
                    op.f
                )));
            }
            let status = match op.outcome {
                Outcome::Ok => Status::Ok,
                Outcome::Unknown => Status::Info,
                Outcome::Failed => Status::Fail,
            };
            if let Some(c) = op.completed.filter(|_| status == Status::Ok) {
                completes_its_invocation(&events[op.invoked], &events[c])?;
            }
            let Value::Array(mops) = &op.value else {
                return Err(malformed(format!("a transaction's value is a list of [f, key, value], not {}", op.value)));
            };
            let mops = mops
                .iter()
                .map(|m| {
                    mop(model, m, status == Status::Ok).map_err(|why| malformed(format!("micro-operation {m}: {why}")))
                })
                .collect::<Result<Vec<Mop>>>()?;
            let completed = op.completed.filter(|_| status == Status::Ok);
            Ok(Txn { process: op.process, status, mops, line: op.line, invoked: op.invoked, completed })
        })
        .collect()
}

/// An `ok` completion must say what the transaction read: without its
/// values, its reads would be unknown, and taking them as empty (as a null
/// read of a list is) would invent anomalies or hide them. Its
/// micro-operations are the invocation's, in order, with the reads filled
/// in.
fn completes_its_invocation(invoke: &Event, ok: &Event) -> Result<()> {
    let malformed = |detail: String| Error::Malformed { line: ok.line, detail };
    let Value::Array(done) = &ok.value else {
        return Err(malformed(format!(
            "a transaction completed ok without its micro-operations (value {}): what it read is unknown",
            ok.value
        )));
    };
    let Value::Array(asked) = &invoke.value else { return Ok(()) };
    let head = |m: &Value| m.as_array().map(|m| (m.first().cloned(), m.get(1).cloned()));
    if asked.len() != done.len() || asked.iter().zip(done).any(|(a, d)| head(a) != head(d)) {
        return Err(malformed(format!(
            "the completion's micro-operations {} are not those invoked at line {} ({})",
            ok.value, invoke.line, invoke.value
        )));
    }
    Ok(())
}

fn mop(model: TxnModel, m: &Value, known: bool) -> std::result::Result<Mop, String> {
    let [f, key, value] = m.as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err("not [f, key, value]".into());
    };
    let key = Scalar::from_json(key).ok_or("a key is an integer or a string")?;
    let scalar = |v: &Value| Scalar::from_json(v).ok_or("a value is an integer or a string");
    match (model, f.as_str()) {
        (TxnModel::ListAppend, Some("append")) => Ok(Mop::Append { key, value: scalar(value)? }),
        (TxnModel::RwRegister, Some("w")) => Ok(Mop::Write { key, value: scalar(value)? }),
        (_, Some("r")) if !known => Ok(Mop::Read { key, value: None }),
        (TxnModel::ListAppend, Some("r")) => {
            let elements = match value {
                // An empty list reads as null in some clients.
                Value::Null => Vec::new(),
                Value::Array(v) => v.iter().map(scalar).collect::<std::result::Result<_, _>>()?,
                _ => return Err("a list's read is a list".into()),
            };
            Ok(Mop::Read { key, value: Some(elements) })
        }
        (TxnModel::RwRegister, Some("r")) => {
            let v = if value.is_null() { Vec::new() } else { vec![scalar(value)?] };
            Ok(Mop::Read { key, value: Some(v) })
        }
        (TxnModel::ListAppend, _) => Err("a list-append transaction appends (`append`) and reads (`r`)".into()),
        (TxnModel::RwRegister, _) => Err("a rw-register transaction writes (`w`) and reads (`r`)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    #[test]
    fn transactions_parse_with_their_outcomes_and_refuse_what_is_not_one() {
        let text = [
            r#"{"process":0,"type":"invoke","f":"txn","value":[["append","x",1],["r",9,null]]}"#,
            r#"{"process":1,"type":"invoke","f":"txn","value":[["append","x",2]]}"#,
            r#"{"process":0,"type":"ok","f":"txn","value":[["append","x",1],["r",9,[3,"a"]]]}"#,
            r#"{"process":1,"type":"fail","f":"txn","value":[["append","x",2]]}"#,
            r#"{"process":2,"type":"invoke","f":"txn","value":[["r","x",null]]}"#,
        ]
        .join("\n");
        let t = transactions(TxnModel::ListAppend, &parse(&text).unwrap()).unwrap();
        assert_eq!(t.iter().map(|t| t.status).collect::<Vec<_>>(), [Status::Ok, Status::Fail, Status::Info]);
        assert_eq!(t[0].describe(), "process 0, line 1: append x 1, r 9 [3 a]");
        assert_eq!(t[2].mops, [Mop::Read { key: Scalar::Str("x".into()), value: None }]);
        assert_eq!(t[0].completed, Some(2));
        let refused = |line: &str, model| transactions(model, &parse(line).unwrap()).unwrap_err().to_string();
        let e = refused(r#"{"process":0,"type":"invoke","f":"txn","value":[["w","x",1]]}"#, TxnModel::ListAppend);
        assert!(e.contains("line 1") && e.contains("appends (`append`) and reads"), "{e}");
        let e = refused(r#"{"process":0,"type":"invoke","f":"read","value":null}"#, TxnModel::RwRegister);
        assert!(e.contains("not \"read\""), "{e}");
        let e = refused(r#"{"process":0,"type":"invoke","f":"txn","value":[["w",[1],1]]}"#, TxnModel::RwRegister);
        assert!(e.contains("a key is an integer or a string"), "{e}");
        // Completed ok without its values: refused, not read as empty.
        let invoke = r#"{"process":0,"type":"invoke","f":"txn","value":[["r","x",null]]}"#;
        let e = refused(&format!("{invoke}\n{}", r#"{"process":0,"type":"ok","f":"txn"}"#), TxnModel::ListAppend);
        assert!(e.starts_with("line 2: a transaction completed ok without its micro-operations"), "{e}");
        let other = r#"{"process":0,"type":"ok","f":"txn","value":[["r","y",[]]]}"#;
        let e = refused(&format!("{invoke}\n{other}"), TxnModel::ListAppend);
        assert!(e.starts_with("line 2: the completion's micro-operations") && e.contains("invoked at line 1"), "{e}");
    }
}
