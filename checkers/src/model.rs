//! Models: what a correct object answers, operation by operation.

use std::collections::BTreeMap;
use std::hash::Hash;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::Op;

/// A read-write register with compare-and-set, starting empty (`null`).
///
/// - `write v`: the register holds `v`;
/// - `read`: completes with the value held (`null` if none);
/// - `cas [expected, new]`: if the register holds `expected` it holds
///   `new` (a cas that found another value completes `fail` and did not
///   happen).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Register(pub String);

/// An operation as the register sees it, values in canonical JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOp {
    Read(String),
    Write(String),
    Cas(String, String),
}

fn canonical(v: &Value) -> String {
    v.to_string()
}

impl RegisterOp {
    pub fn of(op: &Op) -> Result<RegisterOp> {
        let bad = |detail: String| Error::Model { line: op.line, detail };
        Ok(match op.f.as_str() {
            "read" => RegisterOp::Read(canonical(&op.value)),
            "write" => RegisterOp::Write(canonical(&op.value)),
            "cas" => match op.value.as_array().map(Vec::as_slice) {
                Some([expected, new]) => RegisterOp::Cas(canonical(expected), canonical(new)),
                _ => return Err(bad(format!("a cas's value is [expected, new], not {}", op.value))),
            },
            f => return Err(bad(format!("a register knows read, write and cas, not `{f}`"))),
        })
    }
}

impl Register {
    pub fn empty() -> Register {
        Register(canonical(&Value::Null))
    }

    /// The register after `op`, if a correct register could have done it.
    pub fn step(&self, op: &RegisterOp) -> Option<Register> {
        match op {
            RegisterOp::Read(v) => (*v == self.0).then(|| self.clone()),
            RegisterOp::Write(v) => Some(Register(v.clone())),
            RegisterOp::Cas(expected, new) => (*expected == self.0).then(|| Register(new.clone())),
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
        matches!(op, RegisterOp::Read(_))
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
        matches!(op, RegisterOp::Read(_))
    }

    fn bytes(&self) -> usize {
        self.0.iter().map(|(k, v)| k.as_ref().map_or(0, String::len) + v.0.len() + 16).sum()
    }
}
