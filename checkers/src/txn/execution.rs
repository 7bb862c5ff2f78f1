//! Whether some execution explains a history at an isolation level: the
//! search that decides what the inferred graph leaves open. A register
//! keeps no history, so two blind writes to one key may have happened in
//! either order, and a history can be non-serializable in every order
//! while no one order is known (Biswas and Enea show the question
//! NP-complete for serializability and snapshot isolation). Where the
//! graph shows no anomaly the level prohibits, this search looks for the
//! witness that proves the verdict valid:
//!
//! - repeatable read, serializable, strict serializable: a serial order of
//!   the committed transactions in which every read sees the latest write
//!   before it (strict: one that also keeps real-time order);
//! - snapshot isolation: an order of starts and commits in which every
//!   read sees the commits before its transaction's start, and no two
//!   transactions writing one key overlap (first committer wins).
//!
//! Executions that keep real-time order (a transaction that completed
//! before another was invoked comes first) are tried first: most databases
//! keep it, and it leaves few choices at each step.
//!
//! It is a depth-first search over what may come next, pruned by what must
//! hold of any witness: the graph's edges; a write may not bury a version
//! some transaction still has to read; states already left behind are not
//! entered again. Its steps (each candidate move weighed counts one, so
//! that the bound bounds time) are bounded (`--step-limit`): a search that
//! stops there leaves the verdict undecided, never valid. A transaction
//! that may have committed (`info`) and whose writes no one read is taken
//! as not committed, which only removes constraints.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};

use schemars::JsonSchema;
use serde::Serialize;

use super::graph::{Graph, Kind};
use super::transaction::{Mop, Scalar, Status, Txn, TxnModel};

/// The levels a search decides (the others the graph decides alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// A serial order, each read seeing the latest write.
    Serial { realtime: bool },
    /// Starts and commits, each read seeing its start's snapshot.
    SnapshotIsolation { realtime: bool },
}

impl Level {
    /// Whether its executions keep real-time order: a transaction that
    /// completed before another was invoked comes first (its commit
    /// before the other's start).
    pub fn realtime(self) -> bool {
        match self {
            Level::Serial { realtime } | Level::SnapshotIsolation { realtime } => realtime,
        }
    }

    fn with_realtime(self) -> Level {
        match self {
            Level::Serial { .. } => Level::Serial { realtime: true },
            Level::SnapshotIsolation { .. } => Level::SnapshotIsolation { realtime: true },
        }
    }
}

/// How a search ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// An execution explains every read.
    Explained,
    /// No execution does: every one was tried.
    Unexplained,
    /// The search stopped at its bound of steps.
    Stopped,
}

/// What a search did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Searched {
    pub outcome: Outcome,
    /// Whether the execution found keeps real-time order too.
    pub realtime: bool,
    /// Moves made (a transaction placed; for snapshot isolation, started
    /// or committed).
    pub steps: u64,
}

type Key = u32;

/// What a transaction saw of a key before its own writes to it: a list
/// (list-append), or a register's value (`None`: the initial state).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Seen {
    List(Vec<Scalar>),
    Value(Option<Scalar>),
}

impl Seen {
    /// The version it names: a list's last element, a register's value.
    fn version(&self) -> Option<&Scalar> {
        match self {
            Seen::List(l) => l.last(),
            Seen::Value(v) => v.as_ref(),
        }
    }

    fn matches(&self, state: &[(Scalar, u64)]) -> bool {
        match self {
            Seen::List(l) => l.len() == state.len() && l.iter().zip(state).all(|(a, (b, _))| a == b),
            Seen::Value(v) => v.as_ref() == state.last().map(|(v, _)| v),
        }
    }
}

/// The transactions to order, as the search needs them.
struct Problem {
    /// Transactions (history indices) taken as committed.
    members: Vec<usize>,
    /// Per member: its writes in order.
    writes: Vec<Vec<(Key, Scalar)>>,
    /// Per member: what it saw of keys before writing them.
    seen: Vec<Vec<(Key, Seen)>>,
    /// Per member: members that must come first (serial), or commit
    /// before it starts (snapshot isolation: write-write and write-read
    /// edges), and the members that wait on it so.
    before: Vec<Vec<usize>>,
    after: Vec<Vec<usize>>,
    /// Snapshot isolation: members that must start before it commits
    /// (read-write edges), and the other way round.
    started_before: Vec<Vec<usize>>,
    started_after: Vec<Vec<usize>>,
    /// Per key and version, the members that saw it.
    readers: HashMap<(Key, Option<Scalar>), Vec<usize>>,
    /// Each key's state before the history: values reads show that no
    /// transaction wrote (a register's one such value; a list's elements
    /// no transaction appended, at the start of its longest read).
    initial: HashMap<Key, Vec<Scalar>>,
    /// Whether every version seen is one some committed transaction wrote
    /// (or was there before the history): if not, no execution can show it.
    feasible: bool,
    /// Per member, its place in the order candidates are tried in: by when
    /// it completed (it took effect before), or for one that never did,
    /// when it was invoked (it took effect after).
    rank: Vec<(usize, usize)>,
}

/// Searches for an execution of `txns` at `level`, within `bound` steps.
/// The executions that keep real-time order are tried first, with half
/// the steps: they are what databases mostly do, and real time narrows
/// the choices at each step to the transactions running at once.
pub fn search(model: TxnModel, txns: &[Txn], graph: &Graph, level: Level, bound: u64) -> Searched {
    let p = Problem::new(model, txns, graph, level);
    // Too few steps for even one move per transaction count as all spent.
    let stopped =
        |level: Level, bound: u64| Searched { outcome: Outcome::Stopped, realtime: level.realtime(), steps: bound };
    if !p.feasible {
        return Searched { outcome: Outcome::Unexplained, realtime: level.realtime(), steps: 0 };
    }
    // An execution takes a move per transaction (two for snapshot
    // isolation's start and commit): a bound below that cannot find one.
    let moves = p.members.len() as u64 * if matches!(level, Level::Serial { .. }) { 1 } else { 2 };
    let run = |at: Level, bound: u64| {
        if bound < moves {
            return stopped(at, bound);
        }
        // The problem at `level` is built already; the hinted one adds
        // real-time order.
        let hinted;
        let p = if at == level {
            &p
        } else {
            hinted = Problem::new(model, txns, graph, at);
            &hinted
        };
        let mut s = Search::new(p, at, bound);
        let outcome = s.run();
        Searched { outcome, realtime: at.realtime(), steps: s.steps.min(bound) }
    };
    if level.realtime() {
        return run(level, bound);
    }
    // Room for one attempt only: the one most likely to succeed.
    if bound / 2 < moves {
        let hinted = run(level.with_realtime(), bound);
        return if hinted.outcome == Outcome::Explained { hinted } else { stopped(level, bound) };
    }
    let hinted = run(level.with_realtime(), bound / 2);
    if hinted.outcome == Outcome::Explained {
        return hinted;
    }
    let plain = run(level, bound - hinted.steps);
    Searched { steps: hinted.steps + plain.steps, ..plain }
}

impl Problem {
    fn new(model: TxnModel, txns: &[Txn], graph: &Graph, level: Level) -> Problem {
        let mut keys: HashMap<&Scalar, Key> = HashMap::new();
        let mut key = |k| {
            let n = keys.len() as Key;
            *keys.entry(k).or_insert(n)
        };
        // Every value's writer, to tell which info transactions' writes
        // were read (and so committed).
        let mut writer: HashMap<(&Scalar, &Scalar), usize> = HashMap::new();
        for (t, txn) in txns.iter().enumerate() {
            for mop in &txn.mops {
                if let Mop::Append { key, value } | Mop::Write { key, value } = mop {
                    writer.insert((key, value), t);
                }
            }
        }
        let mut read_by_committed: HashSet<usize> = HashSet::new();
        for txn in txns.iter().filter(|t| t.status == Status::Ok) {
            for mop in &txn.mops {
                if let Mop::Read { key, value: Some(vs) } = mop {
                    read_by_committed.extend(vs.iter().filter_map(|v| writer.get(&(key, v))));
                }
            }
        }
        let members: Vec<usize> = (0..txns.len())
            .filter(|&t| match txns[t].status {
                Status::Ok => true,
                Status::Info => read_by_committed.contains(&t),
                Status::Fail => false,
            })
            .collect();
        let index: HashMap<usize, usize> = members.iter().enumerate().map(|(i, &t)| (t, i)).collect();
        let n = members.len();
        let mut writes = vec![Vec::new(); n];
        let mut seen = vec![Vec::new(); n];
        let mut readers: HashMap<(Key, Option<Scalar>), Vec<usize>> = HashMap::new();
        for (i, &t) in members.iter().enumerate() {
            let txn = &txns[t];
            // Per key, this transaction's own writes so far.
            let mut own: HashMap<&Scalar, Vec<Scalar>> = HashMap::new();
            let mut saw: BTreeSet<(Key, Seen)> = BTreeSet::new();
            for mop in &txn.mops {
                match mop {
                    Mop::Append { key: k, value } | Mop::Write { key: k, value } => {
                        writes[i].push((key(k), value.clone()));
                        own.entry(k).or_default().push(value.clone());
                    }
                    Mop::Read { key: k, value: Some(vs) } if txn.status == Status::Ok => {
                        let mine = own.get(k).map(Vec::as_slice).unwrap_or_default();
                        let before = match model {
                            // What a list read shows before the reader's
                            // own appends it ends with (internal consistency
                            // is checked apart).
                            TxnModel::ListAppend => Some(Seen::List(super::list_append::before_own(vs, mine).to_vec())),
                            // A read of its own write says nothing of what
                            // was there before.
                            TxnModel::RwRegister => {
                                let v = vs.first().cloned();
                                let is_own = v.as_ref().is_some_and(|v| writer.get(&(k, v)) == Some(&t));
                                (!is_own).then_some(Seen::Value(v))
                            }
                        };
                        if let Some(s) = before {
                            saw.insert((key(k), s));
                        }
                    }
                    Mop::Read { .. } => {}
                }
            }
            for (k, s) in &saw {
                readers.entry((*k, s.version().cloned())).or_default().push(i);
            }
            seen[i] = saw.into_iter().collect();
        }
        let mut before = vec![Vec::new(); n];
        let mut started_before = vec![Vec::new(); n];
        for e in &graph.edges {
            let (Some(&a), Some(&b)) = (index.get(&e.from), index.get(&e.to)) else { continue };
            match (level, e.kind) {
                (_, Kind::Realtime) if !level.realtime() => {}
                (Level::SnapshotIsolation { .. }, Kind::Rw) => started_before[b].push(a),
                _ => before[b].push(a),
            }
        }
        let mut after = vec![Vec::new(); n];
        let mut started_after = vec![Vec::new(); n];
        for (b, (pre, started)) in before.iter_mut().zip(started_before.iter_mut()).enumerate() {
            for v in [&mut *pre, &mut *started] {
                v.sort_unstable();
                v.dedup();
            }
            pre.iter().for_each(|&a| after[a].push(b));
            started.iter().for_each(|&a| started_after[a].push(b));
        }
        let rank = members.iter().map(|&t| (txns[t].completed.unwrap_or(txns[t].invoked), t)).collect();
        let written: HashSet<(Key, &Scalar)> = writes.iter().flatten().map(|(k, v)| (*k, v)).collect();
        let mut initial: HashMap<Key, Vec<Scalar>> = HashMap::new();
        let mut unwritten: HashMap<Key, BTreeSet<Scalar>> = HashMap::new();
        for (k, s) in seen.iter().flatten() {
            match s {
                Seen::List(l) => {
                    let before: Vec<Scalar> = l.iter().take_while(|e| !written.contains(&(*k, *e))).cloned().collect();
                    let longest = initial.entry(*k).or_default();
                    if before.len() > longest.len() {
                        *longest = before;
                    }
                }
                Seen::Value(Some(v)) if !written.contains(&(*k, v)) => {
                    unwritten.entry(*k).or_default().insert(v.clone());
                }
                Seen::Value(_) => {}
            }
        }
        // One value from before the history is the register's initial
        // state; two cannot both be.
        initial
            .extend(unwritten.into_iter().filter(|(_, vs)| vs.len() == 1).map(|(k, vs)| (k, vs.into_iter().collect())));
        let feasible = seen.iter().flatten().all(|(k, s)| {
            let first = initial.get(k).map(Vec::as_slice).unwrap_or_default();
            match s {
                Seen::List(l) => {
                    l.iter().enumerate().all(|(i, e)| written.contains(&(*k, e)) || first.get(i) == Some(e))
                }
                Seen::Value(Some(v)) => written.contains(&(*k, v)) || first == [v.clone()],
                Seen::Value(None) => true,
            }
        });
        Problem {
            members,
            writes,
            seen,
            before,
            after,
            started_before,
            started_after,
            readers,
            initial,
            rank,
            feasible,
        }
    }
}

/// The hash of a list `v` ends, from the hash of the list before it.
fn chain(before: u64, v: &Scalar) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (before, v).hash(&mut h);
    h.finish()
}

/// A 128-bit fingerprint of a search state, kept incrementally.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
struct Print(u64, u64);

impl Print {
    fn toggle(&mut self, x: impl Hash) {
        let mut a = std::collections::hash_map::DefaultHasher::new();
        (0xa5u8, &x).hash(&mut a);
        let mut b = std::collections::hash_map::DefaultHasher::new();
        (0x5au8, &x).hash(&mut b);
        self.0 ^= a.finish();
        self.1 ^= b.finish();
    }
}

/// One step of an execution: a transaction placed in the serial order,
/// or (snapshot isolation) started or committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Move {
    /// Commits are tried before starts: a transaction that has read what
    /// it read is best out of the way of others.
    Commit(usize),
    Start(usize),
}

/// A search's mutable state.
struct Search<'a> {
    p: &'a Problem,
    level: Level,
    bound: u64,
    /// Moves made and candidate moves weighed: what a bound counts, so
    /// that it bounds the time too, however many candidates each move
    /// passes over.
    steps: u64,
    /// Candidates weighed by `next` since the last step was counted.
    weighed: std::cell::Cell<u64>,
    /// Each key's state: the values written to it, in order, each with a
    /// hash of the list up to it (what the state's fingerprint holds).
    state: HashMap<Key, Vec<(Scalar, u64)>>,
    /// Committed (serial: placed).
    done: Vec<bool>,
    /// Snapshot isolation: started (serial: unused).
    started: Vec<bool>,
    /// Members whose `before` are all done and that have not started
    /// (serial: not been placed), by rank.
    ready: BTreeSet<((usize, usize), usize)>,
    /// Per member: its `before` not yet done, its `started_before` not
    /// yet started.
    waiting: Vec<usize>,
    unstarted: Vec<usize>,
    /// Snapshot isolation: started and not committed, by rank.
    running: BTreeSet<((usize, usize), usize)>,
    print: Print,
    /// States from which no execution was found.
    dead: HashSet<Print>,
}

impl<'a> Search<'a> {
    fn new(p: &'a Problem, level: Level, bound: u64) -> Search<'a> {
        let n = p.members.len();
        let waiting: Vec<usize> = p.before.iter().map(Vec::len).collect();
        let ready = (0..n).filter(|&i| waiting[i] == 0).map(|i| (p.rank[i], i)).collect();
        let mut state: HashMap<Key, Vec<(Scalar, u64)>> = HashMap::new();
        for (k, vs) in &p.initial {
            let s = state.entry(*k).or_default();
            for v in vs {
                s.push((v.clone(), chain(s.last().map_or(0, |(_, h)| *h), v)));
            }
        }
        Search {
            p,
            level,
            bound,
            steps: 0,
            weighed: std::cell::Cell::new(0),
            state,
            done: vec![false; n],
            started: vec![false; n],
            ready,
            waiting,
            unstarted: p.started_before.iter().map(Vec::len).collect(),
            running: BTreeSet::new(),
            print: Print::default(),
            dead: HashSet::new(),
        }
    }

    fn current(&self, k: Key) -> &[(Scalar, u64)] {
        self.state.get(&k).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether `i` saw what the state holds now.
    fn sees_now(&self, i: usize) -> bool {
        self.p.seen[i].iter().all(|(k, s)| s.matches(self.current(*k)))
    }

    /// Whether `i`'s writes would bury a version some transaction not yet
    /// `past` (placed, or started) has still to see, or make one whose
    /// reader must first see a write to the same key still to come.
    fn buries(&self, i: usize, past: &[bool]) -> bool {
        let p = self.p;
        let keys: BTreeSet<Key> = p.writes[i].iter().map(|(k, _)| *k).collect();
        keys.into_iter().any(|k| {
            let now = self.current(k).last().map(|(v, _)| v.clone());
            let waiting = p.readers.get(&(k, now)).into_iter().flatten().any(|&r| r != i && !past[r]);
            let mine = p.writes[i].iter().rev().find(|(key, _)| *key == k).map(|(_, v)| v.clone());
            let doomed = p.readers.get(&(k, mine)).into_iter().flatten().any(|&r| {
                p.before[r].iter().any(|&w| w != i && !self.done[w] && p.writes[w].iter().any(|(key, _)| *key == k))
            });
            waiting || doomed
        })
    }

    /// Counts a candidate weighed (always true, to sit in a filter).
    fn weigh(&self) -> bool {
        self.weighed.set(self.weighed.get() + 1);
        true
    }

    /// The next move after `after`, in the order moves are tried.
    fn next(&self, after: Option<Move>) -> Option<Move> {
        let p = self.p;
        let from = |m: Option<Move>, commit: bool| match m {
            Some(Move::Commit(i)) if commit => std::ops::Bound::Excluded((p.rank[i], i)),
            Some(Move::Start(i)) if !commit => std::ops::Bound::Excluded((p.rank[i], i)),
            _ => std::ops::Bound::Unbounded,
        };
        if let Level::Serial { .. } = self.level {
            return self
                .ready
                .range((from(after, false), std::ops::Bound::Unbounded))
                .map(|&(_, i)| i)
                .find(|&i| self.weigh() && self.sees_now(i) && !self.buries(i, &self.done))
                .map(Move::Start);
        }
        if !matches!(after, Some(Move::Start(_))) {
            let commit = self
                .running
                .range((from(after, true), std::ops::Bound::Unbounded))
                .map(|&(_, i)| i)
                .find(|&i| self.weigh() && self.unstarted[i] == 0 && !self.buries(i, &self.started));
            if let Some(i) = commit {
                return Some(Move::Commit(i));
            }
        }
        let writes_key = |i: usize, k: Key| p.writes[i].iter().any(|(key, _)| *key == k);
        self.ready
            .range((from(after, false), std::ops::Bound::Unbounded))
            .map(|&(_, i)| i)
            .find(|&i| {
                // First committer wins: no two writers of a key overlap.
                self.weigh()
                    && self.sees_now(i)
                    && !self.running.iter().any(|&(_, u)| p.writes[i].iter().any(|(k, _)| writes_key(u, *k)))
            })
            .map(Move::Start)
    }

    fn apply(&mut self, i: usize) {
        for (k, v) in &self.p.writes[i] {
            let state = self.state.entry(*k).or_default();
            let before = state.last().map_or(0, |(_, h)| *h);
            let after = chain(before, v);
            state.push((v.clone(), after));
            // The fingerprint holds each key's hash and the empty list's:
            // the terms in between cancel out.
            self.print.toggle((*k, before));
            self.print.toggle((*k, after));
        }
    }

    fn undo(&mut self, i: usize) {
        for (k, _) in self.p.writes[i].iter().rev() {
            let state = self.state.get_mut(k).expect("written");
            let (_, after) = state.pop().expect("a value written");
            let before = state.last().map_or(0, |(_, h)| *h);
            self.print.toggle((*k, after));
            self.print.toggle((*k, before));
        }
    }

    fn perform(&mut self, m: Move) {
        let p = self.p;
        let serial = matches!(self.level, Level::Serial { .. });
        match m {
            Move::Start(i) => {
                assert!(self.ready.remove(&(p.rank[i], i)), "T{} starts once, when ready", p.members[i]);
                self.started[i] = true;
                self.print.toggle(("started", i));
                for &s in &p.started_after[i] {
                    self.unstarted[s] -= 1;
                }
                if serial {
                    self.commit(i);
                } else {
                    self.running.insert((p.rank[i], i));
                }
            }
            Move::Commit(i) => {
                assert!(self.running.remove(&(p.rank[i], i)), "T{} commits once, after it started", p.members[i]);
                self.commit(i);
            }
        }
    }

    fn commit(&mut self, i: usize) {
        let p = self.p;
        self.apply(i);
        self.done[i] = true;
        self.print.toggle(("committed", i));
        for &s in &p.after[i] {
            self.waiting[s] -= 1;
            if self.waiting[s] == 0 {
                self.ready.insert((p.rank[s], s));
            }
        }
    }

    fn revert(&mut self, m: Move) {
        let p = self.p;
        let serial = matches!(self.level, Level::Serial { .. });
        match m {
            Move::Start(i) => {
                if serial {
                    self.uncommit(i);
                } else {
                    assert!(self.running.remove(&(p.rank[i], i)));
                }
                for &s in &p.started_after[i] {
                    self.unstarted[s] += 1;
                }
                self.started[i] = false;
                self.print.toggle(("started", i));
                self.ready.insert((p.rank[i], i));
            }
            Move::Commit(i) => {
                self.uncommit(i);
                self.running.insert((p.rank[i], i));
            }
        }
    }

    fn uncommit(&mut self, i: usize) {
        let p = self.p;
        for &s in &p.after[i] {
            if self.waiting[s] == 0 {
                self.ready.remove(&(p.rank[s], s));
            }
            self.waiting[s] += 1;
        }
        self.done[i] = false;
        self.print.toggle(("committed", i));
        self.undo(i);
    }

    /// Depth-first over moves: each level of the stack the last move
    /// tried there and whether it is in effect.
    fn run(&mut self) -> Outcome {
        let n = self.p.members.len();
        let mut committed = 0;
        let mut stack: Vec<(Option<Move>, bool)> = vec![(None, false)];
        loop {
            if committed == n {
                return Outcome::Explained;
            }
            let Some(&(last, in_effect)) = stack.last() else { return Outcome::Unexplained };
            if in_effect {
                let m = last.expect("a move in effect");
                self.revert(m);
                committed -= self.commits(m);
            }
            let next = self.next(last);
            self.steps += self.weighed.take();
            if self.steps > self.bound {
                return Outcome::Stopped;
            }
            let Some(m) = next else {
                self.dead.insert(self.print);
                stack.pop();
                continue;
            };
            *stack.last_mut().expect("still there") = (Some(m), true);
            self.perform(m);
            committed += self.commits(m);
            if !self.dead.contains(&self.print) {
                stack.push((None, false));
            }
        }
    }

    /// Transactions a move commits.
    fn commits(&self, m: Move) -> usize {
        match (m, self.level) {
            (Move::Commit(_), _) | (Move::Start(_), Level::Serial { .. }) => 1,
            (Move::Start(_), Level::SnapshotIsolation { .. }) => 0,
        }
    }
}
