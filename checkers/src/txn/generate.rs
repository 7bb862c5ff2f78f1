//! Transactional histories of a simulated database, for benchmarks and
//! tests, deterministic from a seed. Clients run transactions of a few
//! reads and appends (or writes) over a rotating set of keys, Elle's
//! workload shape, against a store that is either
//!
//! - serializable: each transaction takes effect at one instant between its
//!   invocation and its completion, so every history is strict
//!   serializable; or
//! - snapshot isolation: a transaction reads the snapshot of its start and
//!   commits at its end unless a transaction that committed since its
//!   start wrote a key it writes (first committer wins), so histories may
//!   show write skew and nothing worse;
//! - read committed: a transaction reads what is committed when it runs,
//!   and its writes commit only when it completes, whatever committed in
//!   between: lost updates and write skews everywhere, tied by their
//!   read-write edges into one strongly connected component as large as
//!   the history.
//!
//! Some transactions fail (and take no effect) or end unknown (`info`: they
//! take effect or not, and their process is replaced by a new one).

use std::collections::HashMap;

use serde_json::{json, Value};

use super::transaction::TxnModel;
use crate::generate::Rng;
use crate::history::{Event, EventType};

/// How the simulated store runs transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Serializable,
    SnapshotIsolation,
    ReadCommitted,
}

/// The workload.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub transactions: usize,
    pub processes: usize,
    /// Keys in use at once.
    pub keys: usize,
    /// Writes to a key before it is retired for a fresh one.
    pub writes_per_key: usize,
    /// Micro-operations per transaction, at most.
    pub ops: usize,
    /// Whether some transactions fail or end unknown.
    pub faults: bool,
}

impl Shape {
    pub fn new(transactions: usize) -> Shape {
        Shape { transactions, processes: 8, keys: 8, writes_per_key: 32, ops: 4, faults: true }
    }
}

/// A planned micro-operation: a read, or a write of a fresh value.
#[derive(Clone, Copy)]
enum Planned {
    Read(u64),
    Write(u64, u64),
}

enum Phase {
    Idle,
    Invoked {
        plan: Vec<Planned>,
        snapshot: Option<(u64, HashMap<u64, Vec<u64>>)>,
    },
    /// Executed: its reads (`None`: it failed), and the writes it commits
    /// when it completes (a read-committed store's).
    Done {
        plan: Vec<Planned>,
        outcome: Option<Vec<Value>>,
        pending: Vec<(u64, u64)>,
    },
}

struct Sim {
    model: TxnModel,
    shape: Shape,
    rng: Rng,
    /// Each key's list (a register's value is its list's last element).
    data: HashMap<u64, Vec<u64>>,
    /// Each key's last commit, by commit count.
    committed_at: HashMap<u64, u64>,
    commits: u64,
    active: Vec<u64>,
    writes: HashMap<u64, usize>,
    next_key: u64,
    next_value: u64,
    events: Vec<Event>,
}

/// A history of `shape.transactions` transactions, as events.
pub fn history(model: TxnModel, store: Store, shape: Shape, seed: u64) -> Vec<Event> {
    assert!(shape.processes > 0 && shape.keys > 0 && shape.ops > 0 && shape.writes_per_key > 0);
    let mut sim = Sim {
        model,
        shape,
        rng: Rng(seed),
        data: HashMap::new(),
        committed_at: HashMap::new(),
        commits: 0,
        active: (0..shape.keys as u64).collect(),
        writes: HashMap::new(),
        next_key: shape.keys as u64,
        next_value: 1,
        events: Vec::new(),
    };
    let mut processes: Vec<(u64, Phase)> = (0..shape.processes as u64).map(|p| (p, Phase::Idle)).collect();
    let mut next_process = shape.processes as u64;
    let mut started = 0;
    while started < shape.transactions || processes.iter().any(|(_, p)| !matches!(p, Phase::Idle)) {
        let i = sim.rng.below(processes.len() as u64) as usize;
        let (process, phase) = &mut processes[i];
        *phase = match std::mem::replace(phase, Phase::Idle) {
            Phase::Idle if started < shape.transactions => {
                started += 1;
                let plan = sim.plan();
                sim.emit(*process, EventType::Invoke, &plan, None);
                let snapshot = (store == Store::SnapshotIsolation).then(|| (sim.commits, touched(&sim.data, &plan)));
                Phase::Invoked { plan, snapshot }
            }
            Phase::Idle => Phase::Idle,
            Phase::Invoked { plan, snapshot } => {
                let defer = store == Store::ReadCommitted;
                let (outcome, pending) = sim.execute(&plan, snapshot, defer);
                Phase::Done { plan, outcome, pending }
            }
            Phase::Done { plan, outcome, pending } => {
                sim.commit(&pending);
                let unknown = shape.faults && sim.rng.below(40) == 0;
                match outcome {
                    _ if unknown => {
                        sim.emit(*process, EventType::Info, &plan, None);
                        *process = next_process;
                        next_process += 1;
                    }
                    Some(reads) => sim.emit(*process, EventType::Ok, &plan, Some(&reads)),
                    None => sim.emit(*process, EventType::Fail, &plan, None),
                }
                Phase::Idle
            }
        };
    }
    sim.events
}

impl Sim {
    fn plan(&mut self) -> Vec<Planned> {
        let n = 1 + self.rng.below(self.shape.ops as u64) as usize;
        let mut plan = Vec::with_capacity(n);
        for _ in 0..n {
            let slot = self.rng.below(self.active.len() as u64) as usize;
            let key = self.active[slot];
            if self.rng.below(2) == 0 {
                plan.push(Planned::Read(key));
                continue;
            }
            plan.push(Planned::Write(key, self.next_value));
            self.next_value += 1;
            let w = self.writes.entry(key).or_default();
            *w += 1;
            if *w >= self.shape.writes_per_key {
                self.active[slot] = self.next_key;
                self.next_key += 1;
            }
        }
        plan
    }

    /// Runs a transaction: its reads' values, or `None` if it failed; and,
    /// if it is to `defer` its commit, the writes to commit.
    fn execute(
        &mut self,
        plan: &[Planned],
        snapshot: Option<(u64, HashMap<u64, Vec<u64>>)>,
        defer: bool,
    ) -> (Option<Vec<Value>>, Vec<(u64, u64)>) {
        if self.shape.faults && self.rng.below(20) == 0 {
            return (None, Vec::new());
        }
        let (start, mut view) = match snapshot {
            Some((start, view)) => (Some(start), view),
            None => (None, touched(&self.data, plan)),
        };
        if let Some(start) = start {
            let conflict = plan
                .iter()
                .any(|p| matches!(p, Planned::Write(k, _) if self.committed_at.get(k).is_some_and(|&at| at > start)));
            if conflict {
                return (None, Vec::new());
            }
        }
        let mut reads = Vec::new();
        for p in plan {
            match *p {
                Planned::Read(k) => {
                    let list = view.get(&k).cloned().unwrap_or_default();
                    reads.push(match self.model {
                        TxnModel::ListAppend => json!(list),
                        TxnModel::RwRegister => json!(list.last()),
                    });
                }
                Planned::Write(k, v) => view.entry(k).or_default().push(v),
            }
        }
        let writes: Vec<(u64, u64)> = plan
            .iter()
            .filter_map(|p| match *p {
                Planned::Write(k, v) => Some((k, v)),
                Planned::Read(_) => None,
            })
            .collect();
        if defer {
            return (Some(reads), writes);
        }
        self.commit(&writes);
        (Some(reads), Vec::new())
    }

    fn commit(&mut self, writes: &[(u64, u64)]) {
        if writes.is_empty() {
            return;
        }
        self.commits += 1;
        for &(k, v) in writes {
            self.data.entry(k).or_default().push(v);
            self.committed_at.insert(k, self.commits);
        }
    }

    fn emit(&mut self, process: u64, kind: EventType, plan: &[Planned], reads: Option<&[Value]>) {
        let mut reads = reads.map(|r| r.iter());
        let value: Vec<Value> = plan
            .iter()
            .map(|p| match (*p, self.model) {
                (Planned::Read(k), _) => json!(["r", k, reads.as_mut().and_then(Iterator::next)]),
                (Planned::Write(k, v), TxnModel::ListAppend) => json!(["append", k, v]),
                (Planned::Write(k, v), TxnModel::RwRegister) => json!(["w", k, v]),
            })
            .collect();
        let line = self.events.len() + 1;
        self.events.push(Event {
            process,
            kind,
            f: "txn".into(),
            key: None,
            value: Value::from(value),
            time: None,
            line,
        });
    }
}

/// The lists a plan touches, as they are now.
fn touched(data: &HashMap<u64, Vec<u64>>, plan: &[Planned]) -> HashMap<u64, Vec<u64>> {
    plan.iter()
        .map(|p| match *p {
            Planned::Read(k) | Planned::Write(k, _) => k,
        })
        .filter_map(|k| data.get(&k).map(|l| (k, l.clone())))
        .collect()
}

/// An anomaly `inject` adds to a history, over two keys of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// Two concurrent transactions each read both keys empty and write a
    /// different one; a later reader sees both writes (G2-item).
    WriteSkew,
    /// A transaction writes both keys; a concurrent one reads the first as
    /// it was before and the second as written (G-single).
    ReadSkew,
    /// Two concurrent transactions each write one key and read the other's
    /// write (G1c).
    CircularFlow,
}

/// Appends `anomaly` to a history, on fresh keys and processes.
pub fn inject(model: TxnModel, mut events: Vec<Event>, anomaly: Injected) -> Vec<Event> {
    let p = events.iter().map(|e| e.process).max().map_or(0, |p| p + 1);
    let (x, y) = (1_000_000_000u64, 1_000_000_001u64);
    let w = match model {
        TxnModel::ListAppend => "append",
        TxnModel::RwRegister => "w",
    };
    // A read's result: the list or register holding `v` (nothing: empty).
    let seen = |v: Option<u64>| match (model, v) {
        (TxnModel::ListAppend, v) => json!(v.into_iter().collect::<Vec<_>>()),
        (TxnModel::RwRegister, v) => json!(v),
    };
    // (process, kind, micro-operations with reads known)
    let lines: Vec<(u64, EventType, Value)> = match anomaly {
        Injected::WriteSkew => {
            let t1 = json!([["r", x, seen(None)], ["r", y, seen(None)], [w, x, 1]]);
            let t2 = json!([["r", x, seen(None)], ["r", y, seen(None)], [w, y, 2]]);
            vec![
                (p, EventType::Invoke, t1.clone()),
                (p + 1, EventType::Invoke, t2.clone()),
                (p, EventType::Ok, t1),
                (p + 1, EventType::Ok, t2),
                (p, EventType::Invoke, json!([["r", x, seen(Some(1))], ["r", y, seen(Some(2))]])),
                (p, EventType::Ok, json!([["r", x, seen(Some(1))], ["r", y, seen(Some(2))]])),
            ]
        }
        Injected::ReadSkew => {
            let t1 = json!([[w, x, 1], [w, y, 1]]);
            let t2 = json!([["r", x, seen(None)], ["r", y, seen(Some(1))]]);
            vec![
                (p, EventType::Invoke, t1.clone()),
                (p + 1, EventType::Invoke, t2.clone()),
                (p, EventType::Ok, t1),
                (p + 1, EventType::Ok, t2),
            ]
        }
        Injected::CircularFlow => {
            let t1 = json!([[w, x, 1], ["r", y, seen(Some(1))]]);
            let t2 = json!([[w, y, 1], ["r", x, seen(Some(1))]]);
            vec![
                (p, EventType::Invoke, t1.clone()),
                (p + 1, EventType::Invoke, t2.clone()),
                (p, EventType::Ok, t1),
                (p + 1, EventType::Ok, t2),
            ]
        }
    };
    for (process, kind, mut value) in lines {
        if kind == EventType::Invoke {
            for m in value.as_array_mut().expect("micro-operations") {
                if m[0] == "r" {
                    m[2] = Value::Null;
                }
            }
        }
        let line = events.len() + 1;
        events.push(Event { process, kind, f: "txn".into(), key: None, value, time: None, line });
    }
    events
}
