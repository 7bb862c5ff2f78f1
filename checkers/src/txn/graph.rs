//! The dependency graph of a transactional history (Adya's direct
//! serialization graph, as far as the history lets one infer it): a node
//! per transaction that committed or may have, an edge `T1 -> T2` wherever
//! T1 must come before T2 in any serial order the model allows, each edge
//! keeping the evidence it was inferred from. Strongly connected
//! components (Tarjan's algorithm, iterative) say where cycles can be, of
//! any subset of edge kinds, and of the graph of "no two read-write edges
//! in a row" (`product_sccs`) that snapshot isolation forbids cycles in.

use std::collections::{HashMap, HashSet, VecDeque};

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

    pub const fn with(self, k: Kind) -> Kinds {
        Kinds(self.0 | 1 << k as u8)
    }
}

/// How an edge's versions are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Reads show both versions in this order (or the first is the
    /// initial state).
    Reads,
    /// No read shows the later version (an append nobody read back): it
    /// follows the last element any read of the key shows, as every
    /// element appended to a list follows those already in it.
    Unread,
    /// The later version's writer read the earlier one before writing it
    /// (writes follow reads within a transaction).
    WritesFollowReads,
}

/// The evidence of a data edge: the key, and the versions (list elements,
/// register values) on either side of it; `None` is the initial state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why {
    pub key: Scalar,
    pub before: Option<Scalar>,
    pub after: Option<Scalar>,
    pub source: Source,
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

/// The strongly connected components of a graph (or of a subgraph).
pub struct Sccs {
    /// Each node's component, numbered in the order Tarjan's algorithm
    /// closes them: an edge between two components always goes from a
    /// higher number to a lower one (reverse topological order).
    pub id: Vec<u32>,
    /// Each component's number of nodes.
    pub size: Vec<u32>,
}

impl Sccs {
    /// Whether `node` lies on a cycle (its component has more than one
    /// node: the graphs here have no self-edges).
    pub fn cyclic(&self, node: usize) -> bool {
        self.size[self.id[node] as usize] > 1
    }

    /// Whether `a` and `b` lie on a common cycle.
    pub fn together(&self, a: usize, b: usize) -> bool {
        self.id[a] == self.id[b] && self.cyclic(a)
    }
}

/// What a node's next neighbour is, for Tarjan's walk.
enum Step {
    Done,
    Skip,
    To(usize),
}

/// Tarjan's algorithm, iterative, over `n` nodes whose neighbours
/// `neighbour(node, i)` gives one at a time.
fn tarjan(n: usize, neighbour: impl Fn(usize, usize) -> Step) -> Sccs {
    const UNSEEN: u32 = u32::MAX;
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<usize> = Vec::new();
    let mut calls: Vec<(usize, usize)> = Vec::new();
    let mut next = 0u32;
    let mut id = vec![UNSEEN; n];
    let mut size = Vec::new();
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
            let step = neighbour(v, *pos);
            *pos += 1;
            match step {
                Step::Skip => continue,
                Step::To(w) if index[w] == UNSEEN => {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    calls.push((w, 0));
                    continue;
                }
                Step::To(w) => {
                    if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                    continue;
                }
                Step::Done => {}
            }
            calls.pop();
            if let Some(&(u, _)) = calls.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                let c = size.len() as u32;
                let mut members = 0;
                loop {
                    let w = stack.pop().expect("v is on the stack");
                    on_stack[w] = false;
                    id[w] = c;
                    members += 1;
                    if w == v {
                        break;
                    }
                }
                size.push(members);
            }
        }
    }
    assert!(id.iter().all(|&c| c != UNSEEN), "every node is in a component");
    Sccs { id, size }
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
        assert_eq!(why.is_none(), kind == Kind::Realtime, "data edges carry evidence, real-time ones none");
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
    pub fn sccs(&self, kinds: Kinds) -> Sccs {
        tarjan(self.len(), |v, i| match self.out[v].get(i) {
            None => Step::Done,
            Some(&e) => {
                let edge = &self.edges[e as usize];
                if kinds.has(edge.kind) {
                    Step::To(edge.to)
                } else {
                    Step::Skip
                }
            }
        })
    }

    /// The components of the graph whose node `2v + f` is transaction `v`
    /// reached by a read-write edge (`f = 1`) or not (`f = 0`), over edges
    /// of `order` kinds and read-write edges, where a read-write edge may
    /// not follow another. A cycle there is a closed walk with no two
    /// read-write edges in a row (Cerone and Gotsman's characterisation of
    /// what snapshot isolation forbids), and `cycle.rs` turns one into a
    /// cycle of the transactions.
    pub fn product_sccs(&self, order: Kinds) -> Sccs {
        tarjan(2 * self.len(), |node, i| {
            let (v, after_rw) = (node / 2, node % 2 == 1);
            match self.out[v].get(i) {
                None => Step::Done,
                Some(&e) => {
                    let edge = &self.edges[e as usize];
                    if order.has(edge.kind) {
                        Step::To(2 * edge.to)
                    } else if edge.kind == Kind::Rw && !after_rw {
                        Step::To(2 * edge.to + 1)
                    } else {
                        Step::Skip
                    }
                }
            }
        })
    }

    /// The shortest path from `from` to `to` over the edges `allowed`
    /// admits, as edge indices (empty when `from == to`).
    pub fn path(&self, from: usize, to: usize, allowed: impl Fn(&Edge) -> bool) -> Option<Vec<usize>> {
        let mut came: HashMap<usize, usize> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        let mut reached = from == to;
        while let Some(v) = queue.pop_front() {
            if reached {
                break;
            }
            for e in self.out(v) {
                let edge = &self.edges[e];
                if edge.to == from || came.contains_key(&edge.to) || !allowed(edge) {
                    continue;
                }
                came.insert(edge.to, e);
                if edge.to == to {
                    reached = true;
                    break;
                }
                queue.push_back(edge.to);
            }
        }
        if !reached {
            return None;
        }
        let mut path = Vec::new();
        let mut v = to;
        while v != from {
            let e = came[&v];
            path.push(e);
            v = self.edges[e].from;
        }
        path.reverse();
        Some(path)
    }

    /// The shortest walk in the graph of `product_sccs` from `(from,
    /// after_rw)` to `(to, false)` over the edges `allowed` admits, as
    /// edge indices.
    pub fn product_path(
        &self,
        (from, after_rw): (usize, bool),
        to: usize,
        order: Kinds,
        allowed: impl Fn(&Edge) -> bool,
    ) -> Option<Vec<usize>> {
        let start = (from, after_rw);
        let target = (to, false);
        let mut came: HashMap<(usize, bool), ((usize, bool), usize)> = HashMap::new();
        let mut queue = VecDeque::from([start]);
        while let Some(state @ (v, after)) = queue.pop_front() {
            if state == target {
                break;
            }
            for e in self.out(v) {
                let edge = &self.edges[e];
                let next = if order.has(edge.kind) {
                    (edge.to, false)
                } else if edge.kind == Kind::Rw && !after {
                    (edge.to, true)
                } else {
                    continue;
                };
                if next == start || came.contains_key(&next) || !allowed(edge) {
                    continue;
                }
                came.insert(next, (state, e));
                queue.push_back(next);
            }
        }
        if start != target && !came.contains_key(&target) {
            return None;
        }
        let mut walk = Vec::new();
        let mut s = target;
        while s != start {
            let (prev, e) = came[&s];
            walk.push(e);
            s = prev;
        }
        walk.reverse();
        Some(walk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why() -> Option<Why> {
        Some(Why { key: Scalar::Int(0), before: None, after: None, source: Source::Reads })
    }

    fn graph(n: usize, edges: &[(usize, usize, Kind)]) -> Graph {
        let mut g = Graph::new(n);
        for &(a, b, k) in edges {
            g.add(a, b, k, if k == Kind::Realtime { None } else { why() });
        }
        g
    }

    #[test]
    fn components_are_the_cycles_of_the_kinds_asked_for() {
        use Kind::*;
        let g = graph(5, &[(0, 1, Ww), (1, 2, Wr), (2, 0, Rw), (2, 0, Rw), (3, 4, Ww), (4, 3, Realtime), (4, 4, Ww)]);
        assert_eq!(g.edges.len(), 5, "duplicates and self-edges are dropped");
        let data = g.sccs(Kinds::DATA);
        assert!(data.together(0, 1) && data.together(1, 2));
        assert!(!data.cyclic(3) && !data.cyclic(4));
        let all = g.sccs(Kinds::ALL);
        assert!(all.together(3, 4) && !all.together(2, 3));
        let flow = g.sccs(Kinds::of(&[Ww, Wr]));
        assert!((0..5).all(|v| !flow.cyclic(v)));
        // Reverse topological numbering: 0 -> 1 -> 2 without the rw edge.
        assert!(flow.id[0] > flow.id[1] && flow.id[1] > flow.id[2]);
    }

    #[test]
    fn the_product_graph_has_cycles_exactly_where_no_two_rw_edges_are_adjacent() {
        use Kind::*;
        let order = Kinds::of(&[Ww, Wr]);
        // Write skew: 0 -rw-> 1 -rw-> 0 (adjacent): no product cycle.
        let skew = graph(2, &[(0, 1, Rw), (1, 0, Rw)]);
        let p = skew.product_sccs(order);
        assert!((0..4).all(|v| !p.cyclic(v)));
        // G-nonadjacent: 0 -rw-> 1 -wr-> 2 -rw-> 3 -ww-> 0.
        let g = graph(4, &[(0, 1, Rw), (1, 2, Wr), (2, 3, Rw), (3, 0, Ww)]);
        let p = g.product_sccs(order);
        assert!(p.together(0, 2 + 1), "(0, after no rw) and (1, after rw) on one cycle");
        let walk = g.product_path((1, true), 0, order, |_| true).unwrap();
        let kinds: Vec<Kind> = walk.iter().map(|&e| g.edges[e].kind).collect();
        assert_eq!(kinds, [Wr, Rw, Ww]);
    }

    #[test]
    fn paths_are_shortest_over_the_edges_allowed() {
        use Kind::*;
        let g = graph(4, &[(0, 1, Ww), (1, 2, Ww), (2, 3, Ww), (0, 3, Rw)]);
        assert_eq!(g.path(0, 3, |_| true).unwrap().len(), 1);
        assert_eq!(g.path(0, 3, |e| e.kind == Ww).unwrap().len(), 3);
        assert_eq!(g.path(3, 0, |_| true), None);
        assert_eq!(g.path(2, 2, |_| true), Some(Vec::new()));
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
