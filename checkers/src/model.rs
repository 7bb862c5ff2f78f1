//! Models: what a correct object answers, operation by operation.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::rc::Rc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::{self, Event, Op, Outcome};

/// A read-write register with compare-and-set, starting empty (`null`),
/// which also answers a key-value store's operations (Jepsen's and
/// Porcupine's: `get`, `put`, `append`).
///
/// - `write v` (`put v`): the register holds `v`;
/// - `read` (`get`): completes with the value held (`null` if none; a
///   `get` of a key never written answers `""`, as a key-value store's
///   missing key does);
/// - `append s`: the register holds its string (`""` if none) followed by
///   `s`;
/// - `cas [expected, new]`: if the register holds `expected` it holds
///   `new`. A cas that completes `fail` found another value: the register
///   did not hold `expected` at some instant of the call (an observation,
///   not an operation that never happened);
/// - `acquire` and `release` (a lock, Knossos's mutex): the register holds
///   the acquiring process while it holds the lock; an acquire succeeds
///   only when no one holds it, a release only by the holder. An acquire
///   that completes `fail` found the lock held (an observation, as a cas).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Register(pub Rc<str>);

/// An operation as the register sees it, values in canonical JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    Read(Rc<str>),
    Get(Rc<str>),
    Write(Rc<str>),
    /// The appended string as it appears inside a JSON string (escaped,
    /// without its quotes): JSON escapes character by character, so the
    /// register's canonical JSON grows by exactly this.
    Append(String),
    Cas(Rc<str>, Rc<str>),
    /// A cas that found another value than this.
    CasFailed(Rc<str>),
    /// A lock's acquire and release by a process (its number, as JSON).
    Acquire(Rc<str>),
    Release(Rc<str>),
    /// An acquire that found the lock held.
    AcquireFailed,
}

/// Values are compared as canonical JSON, shared: a step that keeps or
/// writes a value copies a pointer, not the string.
fn canonical(v: &Value) -> Rc<str> {
    v.to_string().into()
}

impl RegisterOp {
    pub fn of(op: &Op) -> Result<RegisterOp> {
        let bad = |detail: String| Error::Model { line: op.line, detail };
        Ok(match op.f.as_str() {
            "read" => RegisterOp::Read(canonical(&op.value)),
            "get" => RegisterOp::Get(canonical(&op.value)),
            "write" | "put" => RegisterOp::Write(canonical(&op.value)),
            "append" => match &op.value {
                Value::String(s) => {
                    let quoted = canonical(&Value::String(s.clone()));
                    RegisterOp::Append(quoted[1..quoted.len() - 1].to_owned())
                }
                v => return Err(bad(format!("an append's value is a string, not {v}"))),
            },
            "cas" => match (op.value.as_array().map(Vec::as_slice), op.outcome) {
                (Some([expected, _]), Outcome::Failed) => RegisterOp::CasFailed(canonical(expected)),
                (Some([expected, new]), _) => RegisterOp::Cas(canonical(expected), canonical(new)),
                _ => return Err(bad(format!("a cas's value is [expected, new], not {}", op.value))),
            },
            "acquire" if op.outcome == Outcome::Failed => RegisterOp::AcquireFailed,
            "acquire" => RegisterOp::Acquire(canonical(&op.process.into())),
            "release" => RegisterOp::Release(canonical(&op.process.into())),
            f => {
                return Err(bad(format!(
                    "a register knows read, write, cas, get, put, append, acquire and release, not `{f}`"
                )));
            }
        })
    }
}

/// The operations a register search places: failed ones did not happen,
/// except a cas or an acquire, whose failure is what it saw.
pub fn operations(events: &[Event]) -> Result<Vec<Op>> {
    Ok(history::all_operations(events)?
        .into_iter()
        .filter(|op| op.outcome != Outcome::Failed || op.f == "cas" || op.f == "acquire")
        .collect())
}

impl Register {
    pub fn empty() -> Register {
        Register(canonical(&Value::Null))
    }

    /// The register after `op`, if a correct register could have done it.
    pub fn step(&self, op: &RegisterOp) -> Option<Register> {
        let empty = &*self.0 == "null";
        match op {
            RegisterOp::Read(v) => (*v == self.0).then(|| self.clone()),
            RegisterOp::Get(v) => (*v == self.0 || (empty && &**v == "\"\"")).then(|| self.clone()),
            RegisterOp::Write(v) => Some(Register(v.clone())),
            RegisterOp::Append(escaped) => {
                let held = if empty { "\"\"" } else { &*self.0 };
                // Only a string can be appended to.
                let inside = held.strip_prefix('"')?.strip_suffix('"')?;
                Some(Register(format!("\"{inside}{escaped}\"").into()))
            }
            RegisterOp::Cas(expected, new) => (*expected == self.0).then(|| Register(new.clone())),
            RegisterOp::CasFailed(expected) => (*expected != self.0).then(|| self.clone()),
            RegisterOp::Acquire(p) => empty.then(|| Register(p.clone())),
            RegisterOp::Release(p) => (*p == self.0).then(Register::empty),
            RegisterOp::AcquireFailed => (!empty).then(|| self.clone()),
        }
    }
}

/// An object the linearizability search can check: its state after an
/// operation, if a correct object could have done it.
pub trait Model: Clone + Eq + Hash {
    type Op;
    fn step(&self, op: &Self::Op) -> Option<Self>;
    /// A read whose answer is unknown constrains nothing: the search
    /// leaves it out.
    fn is_read(op: &Self::Op) -> bool;
    /// Bytes the state takes in the search's memo.
    fn bytes(&self) -> usize;
}

impl Model for Register {
    type Op = RegisterOp;

    fn step(&self, op: &RegisterOp) -> Option<Register> {
        Register::step(self, op)
    }

    fn is_read(op: &RegisterOp) -> bool {
        matches!(op, RegisterOp::Read(_) | RegisterOp::Get(_) | RegisterOp::CasFailed(_) | RegisterOp::AcquireFailed)
    }

    fn bytes(&self) -> usize {
        self.0.len()
    }
}

/// Every key's register as one object: what a search that does not split
/// a history by key (the plain search `hvsim bench checkers` measures
/// against) checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Map(pub BTreeMap<Option<String>, Register>);

impl Model for Map {
    type Op = (Option<String>, RegisterOp);

    fn step(&self, (key, op): &Self::Op) -> Option<Map> {
        let now = self.0.get(key).cloned().unwrap_or_else(Register::empty);
        let next = now.step(op)?;
        let mut map = self.clone();
        map.0.insert(key.clone(), next);
        Some(map)
    }

    fn is_read((_, op): &Self::Op) -> bool {
        Register::is_read(op)
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(|(k, v)| k.as_ref().map_or(0, String::len) + v.0.len() + 16).sum()
    }
}
