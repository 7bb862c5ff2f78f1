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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::Serialize;

use crate::error::Result;
use crate::history::{Op, Outcome};
use crate::model::{Map, Model, Register, RegisterOp};

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
    /// Lowe's memo of (placed set, state) pairs; off only to measure what
    /// it saves (`hvsim bench checkers`).
    pub memo: bool,
    /// Steps (default 10,000,000): a bound that gives the same answer on
    /// every machine, as a timeline's checks must.
    pub steps: u64,
    /// Wall time for the whole check (default none): `hvsim check
    /// --time`, for a person waiting on one history.
    pub time: Option<std::time::Duration>,
    /// Bytes its memo of (placed set, register) pairs may hold (default
    /// 1 GiB): a long history's placed sets are long, and the memo must not
    /// take the host's memory.
    pub memo_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { memo: true, steps: 10_000_000, memo_bytes: 1 << 30, time: None }
    }
}

/// What a check cost: steps taken and the memo's bytes, over every key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    pub steps: u64,
    pub memo_bytes: usize,
}

/// Checks a history's operations against the register model, key by key.
pub fn check(ops: &[Op], limits: Limits) -> Result<Verdict> {
    check_costed(ops, limits).map(|(v, _)| v)
}

/// [`check`], and what it cost. Keys are searched in rounds of growing
/// step budgets (25,000 steps, then four times as many, up to the limit),
/// so that a key whose search runs long does not hide another key's
/// violation, which is the answer as soon as one is found. The rounds
/// repeat work a whole search would not: a key whose search takes S steps
/// costs under 7S/3 over its rounds (the earlier budgets sum to a third of
/// the last, which is under 4S); the last key left goes straight to the
/// limit. A round's keys are searched in parallel, as Porcupine does, and
/// their answers taken in key order, so the verdict is the same on any
/// number of cores (the cost, in steps, is not: a later key's search stops
/// when an earlier key is found not linearizable).
pub fn check_costed(ops: &[Op], limits: Limits) -> Result<(Verdict, Cost)> {
    let mut cost = Cost::default();
    let mut by_key: BTreeMap<Option<String>, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_key.entry(op.key.clone()).or_default().push(op);
    }
    let keys = by_key.len();
    // Refused here, in key order, before any search: the searches make
    // their own (their values are not shared between threads).
    for ops in by_key.values() {
        ops.iter().try_for_each(|op| RegisterOp::of(op).map(drop))?;
    }
    let mut pending: Vec<(Option<String>, Vec<&Op>)> = by_key.into_iter().collect();
    let deadline = limits.time.map(|t| Instant::now() + t);
    let mut budget = if pending.len() == 1 { limits.steps } else { FIRST_ROUND.min(limits.steps) };
    let mut undecided = None;
    while !pending.is_empty() {
        let round = Limits { steps: budget, ..limits };
        let searched = search_keys(&pending, round, deadline);
        let mut next = Vec::new();
        for ((key, ops), (found, c)) in pending.into_iter().zip(searched) {
            cost.steps += c.steps;
            cost.memo_bytes = cost.memo_bytes.max(c.memo_bytes);
            assert!(
                !matches!(found, Search::GaveUp { why: SUPERSEDED, .. }),
                "a search stops for an earlier key's violation only after it, and that key answers first"
            );
            match found {
                Search::GaveUp { why: STEP_LIMIT, .. } if budget < limits.steps => next.push((key, ops)),
                found => match verdict(found, key, &ops) {
                    Some(v @ Verdict::NotLinearizable { .. }) => return Ok((v, cost)),
                    Some(v) => {
                        undecided.get_or_insert(v);
                    }
                    None => {}
                },
            }
        }
        // One key left: nothing else to find a violation in first.
        budget = if next.len() == 1 { limits.steps } else { budget.saturating_mul(4).min(limits.steps) };
        pending = next;
    }
    Ok((undecided.unwrap_or(Verdict::Linearizable { operations: ops.len(), keys }), cost))
}

/// One round: each key's search within `limits`, in the keys' order, on as
/// many threads as the host has cores (the keys dealt out in turn). Once
/// a key is found not linearizable, searches of later keys stop: the
/// round's answer is the first such key, which they cannot change.
fn search_keys(keys: &[(Option<String>, Vec<&Op>)], limits: Limits, deadline: Option<Instant>) -> Vec<(Search, Cost)> {
    let first_stuck = AtomicUsize::new(usize::MAX);
    let one = |i: usize| {
        let ops = &keys[i].1;
        let model_ops: Vec<RegisterOp> =
            ops.iter().map(|op| RegisterOp::of(op).expect("refused before the search")).collect();
        let stop = Stop { deadline, later_than: Some((&first_stuck, i)) };
        let found = search(ops, &model_ops, Register::empty(), limits, &stop);
        if matches!(found.0, Search::Stuck { .. }) {
            first_stuck.fetch_min(i, Ordering::Relaxed);
        }
        found
    };
    // A small round is over before threads would start (and asking for
    // the cores reads cgroup files).
    let ops: usize = keys.iter().map(|(_, ops)| ops.len()).sum();
    let threads = if keys.len() > 1 && ops >= PARALLEL_FROM {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        1
    };
    let threads = threads.min(keys.len());
    if threads <= 1 {
        return (0..keys.len()).map(one).collect();
    }
    let mut found: Vec<Option<(Search, Cost)>> = (0..keys.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let one = &one;
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || (t..keys.len()).step_by(threads).map(|i| (i, one(i))).collect::<Vec<_>>()))
            .collect();
        for h in handles {
            for (i, r) in h.join().expect("a key's search does not panic") {
                found[i] = Some(r);
            }
        }
    });
    found.into_iter().map(|r| r.expect("every key searched")).collect()
}

/// Operations in a round from which its keys are searched in parallel.
const PARALLEL_FROM: usize = 1_000;

/// When a search stops early: at its deadline, or (`later_than`: the
/// round's first key found not linearizable, and this search's key) once
/// an earlier key than its own was found not linearizable.
struct Stop<'a> {
    deadline: Option<Instant>,
    later_than: Option<(&'a AtomicUsize, usize)>,
}

impl Stop<'_> {
    fn why(&self) -> Option<&'static str> {
        if self.later_than.is_some_and(|(first, me)| first.load(Ordering::Relaxed) < me) {
            return Some(SUPERSEDED);
        }
        self.deadline.is_some_and(|d| Instant::now() >= d).then_some("the time limit")
    }
}

/// Why a search of a later key stopped (never a verdict: the earlier key's
/// is the round's answer).
const SUPERSEDED: &str = "an earlier key's violation";

/// The first round's step budget per key.
const FIRST_ROUND: u64 = 25_000;

const STEP_LIMIT: &str = "the step limit";

/// The plain search, for comparison: the whole history as one object (a
/// map of registers, not split by key), with or without the memo as
/// `limits` says.
pub fn check_whole(ops: &[Op], limits: Limits) -> Result<(Verdict, Cost)> {
    let refs: Vec<&Op> = ops.iter().collect();
    let model_ops = ops.iter().map(|op| Ok((op.key.clone(), RegisterOp::of(op)?))).collect::<Result<Vec<_>>>()?;
    let stop = Stop { deadline: limits.time.map(|t| Instant::now() + t), later_than: None };
    let (found, cost) = search(&refs, &model_ops, Map::default(), limits, &stop);
    let keys = ops.iter().map(|op| &op.key).collect::<HashSet<_>>().len();
    Ok((verdict(found, None, &refs).unwrap_or(Verdict::Linearizable { operations: ops.len(), keys }), cost))
}

/// The verdict a search's end gives, if not linearizable.
fn verdict(found: Search, key: Option<String>, ops: &[&Op]) -> Option<Verdict> {
    match found {
        Search::Found => None,
        Search::Stuck { op, placed } => {
            Some(Verdict::NotLinearizable { key, op: ops[op].describe(), line: ops[op].line, placed, of: ops.len() })
        }
        Search::GaveUp { steps, why } => Some(Verdict::Unknown { key, steps, why: why.into() }),
    }
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
    fn new<M: Model>(ops: &[&Op], model_ops: &[M::Op]) -> List {
        // (time, is a completion, op): unknown outcomes complete after
        // everything; a read whose result is unknown constrains nothing.
        let mut times: Vec<(usize, bool, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if op.outcome == Outcome::Unknown && M::is_read(&model_ops[i]) {
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

/// The set of placed operations, with a hash kept as it changes (Zobrist's:
/// one random word per operation, XORed in and out), so that a memo lookup
/// costs a word, not the whole set.
struct Placed {
    bits: Vec<u64>,
    hash: u64,
}

/// Operation `i`'s random word (splitmix64 of `i`).
fn zobrist(i: usize) -> u64 {
    let mut z = (i as u64).wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Placed {
    fn flip(&mut self, i: usize, on: bool) {
        debug_assert_eq!(self.bits[i / 64] >> (i % 64) & 1 == 1, !on, "placed once, lifted once");
        self.bits[i / 64] ^= 1 << (i % 64);
        self.hash ^= zobrist(i);
    }
}

/// Lowe's memo: the (placed set, state) pairs seen. Keyed by the set's
/// hash and the state; the sets with one key are chained through an arena
/// and compared whole (a verdict never rests on a hash). One allocation
/// per table, not per entry: a long search makes millions of entries, and
/// freeing them one by one took a third of it.
struct Memo<M> {
    /// Each key's latest set (an index into `sets`).
    heads: HashMap<(u64, M), u32, foldhash::fast::FixedState>,
    /// The sets, `words` each, one after another.
    sets: Vec<u64>,
    /// Each set's predecessor with the same key (`u32::MAX`: none).
    chain: Vec<u32>,
    words: usize,
}

impl<M: Model> Memo<M> {
    fn new(words: usize) -> Memo<M> {
        Memo { heads: HashMap::default(), sets: Vec::new(), chain: Vec::new(), words }
    }

    /// Whether `(placed, state)` is new; remembered if so.
    fn insert(&mut self, placed: &Placed, state: &M) -> bool {
        let (sets, chain, words) = (&mut self.sets, &mut self.chain, self.words);
        let index = u32::try_from(chain.len()).expect("the memory limit bounds the memo under 2^32 sets");
        let mut fresh = true;
        self.heads
            .entry((placed.hash, state.clone()))
            .and_modify(|head| {
                let mut at = *head;
                while at != u32::MAX {
                    let start = at as usize * words;
                    if sets[start..start + words] == placed.bits[..] {
                        fresh = false;
                        return;
                    }
                    at = chain[at as usize];
                }
                chain.push(*head);
                sets.extend_from_slice(&placed.bits);
                *head = index;
            })
            .or_insert_with(|| {
                chain.push(u32::MAX);
                sets.extend_from_slice(&placed.bits);
                index
            });
        fresh
    }
}

fn search<M: Model>(ops: &[&Op], model_ops: &[M::Op], initial: M, limits: Limits, stop: &Stop) -> (Search, Cost) {
    let mut list = List::new::<M>(ops, model_ops);
    let mut placed = Placed { bits: vec![0u64; ops.len().div_ceil(64)], hash: 0 };
    let mut seen = Memo::<M>::new(placed.bits.len());
    let mut memo_bytes = 0usize;
    let mut stack: Vec<(usize, M)> = Vec::new();
    let mut state = initial;
    // The completion that stopped the deepest search, for the report.
    let mut stuck = (0, 0);
    let mut entry = list.first();
    let mut steps = 0u64;
    let cost = |steps, memo_bytes| Cost { steps, memo_bytes };
    while list.first() != END {
        steps += 1;
        if steps > limits.steps {
            return (Search::GaveUp { steps: limits.steps, why: STEP_LIMIT }, cost(limits.steps, memo_bytes));
        }
        if steps.is_multiple_of(4096) {
            if let Some(why) = stop.why() {
                return (Search::GaveUp { steps, why }, cost(steps, memo_bytes));
            }
        }
        debug_assert!(entry != END, "a completion always comes before the list's end");
        let e = list.0[entry];
        if e.call {
            if let Some(next) = state.step(&model_ops[e.op]) {
                placed.flip(e.op, true);
                // What a memo entry costs: its set, its value, the table's share.
                let entry_bytes = placed.bits.len() * 8 + next.bytes() + 64;
                if limits.memo && memo_bytes + entry_bytes > limits.memo_bytes {
                    return (Search::GaveUp { steps, why: "the memory limit" }, cost(steps, memo_bytes));
                }
                let new = !limits.memo || seen.insert(&placed, &next);
                if new {
                    if limits.memo {
                        memo_bytes += entry_bytes;
                    }
                    stack.push((entry, std::mem::replace(&mut state, next)));
                    list.lift(entry);
                    entry = list.first();
                    continue;
                }
                placed.flip(e.op, false);
            }
            entry = e.next;
        } else {
            if ops[e.op].outcome == Outcome::Unknown {
                // Only operations that may never have happened are left.
                return (Search::Found, cost(steps, memo_bytes));
            }
            if stack.len() >= stuck.1 {
                stuck = (e.op, stack.len());
            }
            let Some((call, before)) = stack.pop() else {
                return (Search::Stuck { op: stuck.0, placed: stuck.1 }, cost(steps, memo_bytes));
            };
            placed.flip(list.0[call].op, false);
            state = before;
            list.unlift(call);
            entry = list.0[call].next;
        }
    }
    (Search::Found, cost(steps, memo_bytes))
}
