//! Linearizability: is there one order of the operations, each placed
//! between its invocation and its completion, in which a correct object
//! (the [`Register`] model) gives every answer the clients saw?
//!
//! The search is Wing and Gong's, with Lowe's memoization (as in Porcupine
//! and Knossos): walk the invocations and completions in real-time order;
//! at an invocation, try to place the operation now (the model must accept
//! it) and go on without it; at a completion whose operation is not placed
//! yet, no order of what came before explains it: undo the last placement
//! and try the next candidate. A (placed set, model state) pair seen before
//! cannot lead anywhere new and is skipped. Operations whose outcome is
//! unknown complete "at the end of time": they may be placed anywhere after
//! their invocation, or never. Linearizability is compositional, so each
//! key is checked on its own.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use crate::error::Result;
use crate::history::{Op, Outcome};
use crate::model::{Register, RegisterOp};

/// The answer for a history.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    Linearizable {
        operations: usize,
        keys: usize,
    },
    /// No order explains `op`'s completion; at best `placed` of the key's
    /// `of` operations could be ordered before the search ran out.
    NotLinearizable {
        key: Option<String>,
        op: String,
        line: usize,
        placed: usize,
        of: usize,
    },
    /// The search gave up on `key` after `steps` steps: it took as many as
    /// it may, or its memo outgrew its bound (`why` says which: [`Limits`]).
    Unknown {
        key: Option<String>,
        steps: u64,
        why: String,
    },
}

/// How far the search may go on one key before it answers `Unknown`.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Steps (default 10,000,000).
    pub steps: u64,
    /// Bytes its memo of (placed set, register) pairs may hold (default
    /// 1 GiB): a long history's placed sets are long, and the memo must not
    /// take the host's memory.
    pub memo_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { steps: 10_000_000, memo_bytes: 1 << 30 }
    }
}

/// Checks a history's operations against the register model, key by key.
pub fn check(ops: &[Op], limits: Limits) -> Result<Verdict> {
    let mut by_key: BTreeMap<Option<String>, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key.clone()).or_default().push(op);
    }
    for (key, ops) in &by_key {
        let model_ops = ops.iter().map(|op| RegisterOp::of(op)).collect::<Result<Vec<_>>>()?;
        match search(ops, &model_ops, limits) {
            Search::Found => {}
            Search::Stuck { op, placed } => {
                return Ok(Verdict::NotLinearizable {
                    key: key.clone(),
                    op: ops[op].describe(),
                    line: ops[op].line,
                    placed,
                    of: ops.len(),
                })
            }
            Search::GaveUp { steps, why } => return Ok(Verdict::Unknown { key: key.clone(), steps, why: why.into() }),
        }
    }
    Ok(Verdict::Linearizable { operations: ops.len(), keys: by_key.len() })
}

enum Search {
    Found,
    /// `op` (an index into the key's operations) could not be placed.
    Stuck {
        op: usize,
        placed: usize,
    },
    GaveUp {
        steps: u64,
        why: &'static str,
    },
}

/// An invocation or a completion, in a doubly linked list in real-time
/// order (index 0 is the list's head).
#[derive(Clone, Copy)]
struct Entry {
    op: usize,
    call: bool,
    /// For a call: its completion's entry.
    partner: usize,
    prev: usize,
    next: usize,
}

const END: usize = usize::MAX;

struct List(Vec<Entry>);

impl List {
    fn new(ops: &[&Op], model_ops: &[RegisterOp]) -> List {
        // (time, is a completion, op): unknown outcomes complete after
        // everything; a read whose result is unknown constrains nothing.
        let mut times: Vec<(usize, bool, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if op.outcome == Outcome::Unknown && matches!(model_ops[i], RegisterOp::Read(_)) {
                continue;
            }
            times.push((op.invoked, false, i));
            times.push((op.completed.unwrap_or(usize::MAX), true, i));
        }
        times.sort_unstable();
        let head = Entry { op: usize::MAX, call: false, partner: END, prev: END, next: END };
        let mut entries = vec![head];
        let mut call_of = vec![END; ops.len()];
        for &(_, completion, op) in &times {
            let at = entries.len();
            entries.push(Entry { op, call: !completion, partner: END, prev: at - 1, next: END });
            entries[at - 1].next = at;
            if completion {
                entries[call_of[op]].partner = at;
            } else {
                call_of[op] = at;
            }
        }
        List(entries)
    }

    fn first(&self) -> usize {
        self.0[0].next
    }

    fn unlink(&mut self, e: usize) {
        let Entry { prev, next, .. } = self.0[e];
        self.0[prev].next = next;
        if next != END {
            self.0[next].prev = prev;
        }
    }

    fn relink(&mut self, e: usize) {
        let Entry { prev, next, .. } = self.0[e];
        self.0[prev].next = e;
        if next != END {
            self.0[next].prev = e;
        }
    }

    /// Takes a call and its completion out of the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.0[call].partner);
    }

    /// Puts them back (the reverse of [`lift`](Self::lift)).
    fn unlift(&mut self, call: usize) {
        self.relink(self.0[call].partner);
        self.relink(call);
    }
}

fn search(ops: &[&Op], model_ops: &[RegisterOp], limits: Limits) -> Search {
    let mut list = List::new(ops, model_ops);
    let mut placed = vec![0u64; ops.len().div_ceil(64)];
    let set = |bits: &mut Vec<u64>, i: usize, on: bool| {
        if on {
            bits[i / 64] |= 1 << (i % 64);
        } else {
            bits[i / 64] &= !(1 << (i % 64));
        }
    };
    let mut seen: HashSet<(Vec<u64>, Register)> = HashSet::new();
    let mut memo_bytes = 0usize;
    let mut stack: Vec<(usize, Register)> = Vec::new();
    let mut state = Register::empty();
    // The completion that stopped the deepest search, for the report.
    let mut stuck = (0, 0);
    let mut entry = list.first();
    let mut steps = 0u64;
    while list.first() != END {
        steps += 1;
        if steps > limits.steps {
            return Search::GaveUp { steps: limits.steps, why: "the step limit" };
        }
        debug_assert!(entry != END, "a completion always comes before the list's end");
        let e = list.0[entry];
        if e.call {
            if let Some(next) = state.step(&model_ops[e.op]) {
                set(&mut placed, e.op, true);
                // What a memo entry costs: its set, its value, the table's share.
                let entry_bytes = placed.len() * 8 + next.0.len() + 64;
                if memo_bytes + entry_bytes > limits.memo_bytes {
                    return Search::GaveUp { steps, why: "the memory limit" };
                }
                if seen.insert((placed.clone(), next.clone())) {
                    memo_bytes += entry_bytes;
                    stack.push((entry, std::mem::replace(&mut state, next)));
                    list.lift(entry);
                    entry = list.first();
                    continue;
                }
                set(&mut placed, e.op, false);
            }
            entry = e.next;
        } else {
            if ops[e.op].outcome == Outcome::Unknown {
                // Only operations that may never have happened are left.
                return Search::Found;
            }
            if stack.len() >= stuck.1 {
                stuck = (e.op, stack.len());
            }
            let Some((call, before)) = stack.pop() else {
                return Search::Stuck { op: stuck.0, placed: stuck.1 };
            };
            set(&mut placed, list.0[call].op, false);
            state = before;
            list.unlift(call);
            entry = list.0[call].next;
        }
    }
    Search::Found
}
