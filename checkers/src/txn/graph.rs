//! The dependency graph of a transactional history (Adya's direct
//! serialization graph, as far as the history lets one infer it): a node
//! per transaction that committed or may have, an edge `T1 -> T2` wherever
//! T1 must come before T2 in any serial order the model allows, each edge
//! keeping the evidence it was inferred from. Strongly connected
//! components (Tarjan's algorithm, iterative) bound where cycles can be.

use std::collections::HashSet;

use schemars::JsonSchema;
use serde::Serialize;

use super::transaction::{Scalar, Status, Txn};

/// Why one transaction must precede another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Write-write: T2 overwrote (appended after) T1's version.
    Ww,
    /// Write-read: T2 read T1's version.
    Wr,
    /// Read-write (anti-dependency): T1 read a version that T2's write
    /// replaced.
    Rw,
    /// T1 completed before T2 was invoked.
    Realtime,
}

/// A set of edge kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds(u8);

impl Kinds {
    pub const DATA: Kinds = Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Rw]);
    pub const ALL: Kinds = Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Rw, Kind::Realtime]);

    pub const fn of(kinds: &[Kind]) -> Kinds {
        let mut bits = 0;
        let mut i = 0;
        while i < kinds.len() {
            bits |= 1 << kinds[i] as u8;
            i += 1;
        }
        Kinds(bits)
    }

    pub fn has(self, k: Kind) -> bool {
        self.0 & (1 << k as u8) != 0
    }
}

/// The evidence of a data edge: the key, and the versions (list elements,
/// register values) on either side of it; `None` is the initial state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why {
    pub key: Scalar,
    pub before: Option<Scalar>,
    pub after: Option<Scalar>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub kind: Kind,
    /// `None` for real-time edges.
    pub why: Option<Why>,
}

/// Transactions and the edges between them, nodes indexed as the history's
/// transactions are.
#[derive(Debug)]
pub struct Graph {
    pub edges: Vec<Edge>,
    out: Vec<Vec<u32>>,
    seen: HashSet<(u32, u32, Kind)>,
}

/// A graph's strongly connected components of more than one transaction.
pub struct Components {
    /// Each transaction's component (`NONE`: on no cycle).
    pub of: Vec<u32>,
    pub members: Vec<Vec<usize>>,
}

impl Components {
    pub const NONE: u32 = u32::MAX;
}

impl Graph {
    pub fn new(transactions: usize) -> Graph {
        Graph { edges: Vec::new(), out: vec![Vec::new(); transactions], seen: HashSet::new() }
    }

    pub fn len(&self) -> usize {
        self.out.len()
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Adds an edge; a transaction's edges to itself and a second edge of
    /// the same kind between the same two are dropped (the first keeps
    /// its evidence).
    pub fn add(&mut self, from: usize, to: usize, kind: Kind, why: Option<Why>) {
        assert!(from < self.len() && to < self.len(), "edge {from} -> {to} outside {} transactions", self.len());
        if from == to || !self.seen.insert((from as u32, to as u32, kind)) {
            return;
        }
        self.out[from].push(self.edges.len() as u32);
        self.edges.push(Edge { from, to, kind, why });
    }

    /// The edges out of `node`, by index.
    pub fn out(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        self.out[node].iter().map(|&e| e as usize)
    }

    /// Real-time order: `T1 -> T2` when T1 completed ok before T2 was
    /// invoked, reduced as it is built to the edges from transactions no
    /// later-completed predecessor of T2 already follows, so the edges grow
    /// with concurrency, not with the square of the history.
    pub fn add_realtime(&mut self, txns: &[Txn]) {
        // (event index, transaction, is its invocation)
        let mut events: Vec<(usize, usize, bool)> = Vec::new();
        for (i, t) in txns.iter().enumerate() {
            if t.status == Status::Fail {
                continue;
            }
            events.push((t.invoked, i, true));
            if let Some(c) = t.completed {
                events.push((c, i, false));
            }
        }
        events.sort_unstable();
        let mut frontier: Vec<usize> = Vec::new();
        let mut preceding: Vec<Vec<usize>> = vec![Vec::new(); txns.len()];
        for (_, t, invoke) in events {
            if invoke {
                for &f in &frontier {
                    self.add(f, t, Kind::Realtime, None);
                }
                preceding[t] = frontier.clone();
            } else {
                // What preceded t precedes whatever follows t.
                let before = std::mem::take(&mut preceding[t]);
                frontier.retain(|f| !before.contains(f));
                frontier.push(t);
            }
        }
    }

    /// The strongly connected components over edges of `kinds`.
    pub fn components(&self, kinds: Kinds) -> Components {
        const UNSEEN: u32 = u32::MAX;
        let n = self.len();
        let mut index = vec![UNSEEN; n];
        let mut low = vec![0u32; n];
        let mut on_stack = vec![false; n];
        let mut stack: Vec<usize> = Vec::new();
        let mut calls: Vec<(usize, usize)> = Vec::new();
        let mut next = 0u32;
        let mut of = vec![Components::NONE; n];
        let mut members = Vec::new();
        for root in 0..n {
            if index[root] != UNSEEN {
                continue;
            }
            index[root] = next;
            low[root] = next;
            next += 1;
            stack.push(root);
            on_stack[root] = true;
            calls.push((root, 0));
            while let Some((v, pos)) = calls.last_mut() {
                let v = *v;
                if let Some(&e) = self.out[v].get(*pos) {
                    *pos += 1;
                    let edge = &self.edges[e as usize];
                    if !kinds.has(edge.kind) {
                        continue;
                    }
                    let w = edge.to;
                    if index[w] == UNSEEN {
                        index[w] = next;
                        low[w] = next;
                        next += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        calls.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                calls.pop();
                if let Some(&(u, _)) = calls.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    loop {
                        let w = stack.pop().expect("v is on the stack");
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    if component.len() > 1 {
                        for &w in &component {
                            of[w] = members.len() as u32;
                        }
                        members.push(component);
                    }
                }
            }
        }
        Components { of, members }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_are_the_cycles_of_the_kinds_asked_for() {
        let mut g = Graph::new(5);
        g.add(0, 1, Kind::Ww, None);
        g.add(1, 2, Kind::Wr, None);
        g.add(2, 0, Kind::Rw, None);
        g.add(2, 0, Kind::Rw, None);
        g.add(3, 4, Kind::Ww, None);
        g.add(4, 3, Kind::Realtime, None);
        g.add(4, 4, Kind::Ww, None);
        assert_eq!(g.edges.len(), 5, "duplicates and self-edges are dropped");
        let data = g.components(Kinds::DATA);
        assert_eq!(data.members.len(), 1);
        let mut c = data.members[0].clone();
        c.sort();
        assert_eq!(c, [0, 1, 2]);
        assert_eq!(data.of[3], Components::NONE);
        assert_eq!(g.components(Kinds::ALL).members.len(), 2);
        assert!(g.components(Kinds::of(&[Kind::Ww, Kind::Wr])).members.is_empty());
    }

    #[test]
    fn realtime_edges_follow_completions_and_skip_what_is_implied() {
        // a: [0, 1], b: [2, 3], c: [4, 6], d: [5, 7] (invoke, complete).
        let t = |invoked, completed| Txn {
            process: 0,
            status: Status::Ok,
            mops: Vec::new(),
            line: invoked + 1,
            invoked,
            completed: Some(completed),
        };
        let txns = [t(0, 1), t(2, 3), t(4, 6), t(5, 7)];
        let mut g = Graph::new(4);
        g.add_realtime(&txns);
        let edges: Vec<(usize, usize)> = g.edges.iter().map(|e| (e.from, e.to)).collect();
        // a -> c is implied by a -> b -> c.
        assert_eq!(edges, [(0, 1), (1, 2), (1, 3)]);
    }
}
