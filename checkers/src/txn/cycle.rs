//! Cycles in the dependency graph and what they are. Each strongly
//! connected component is searched, most severe class first, for a cycle
//! of each class Elle names: G0 (write-write edges only), G1c (write-write
//! and write-read), G-single (exactly one read-write edge), G-nonadjacent
//! (read-write edges, none adjacent) and G2-item (read-write edges, some
//! adjacent); then, over components real-time order closes, their
//! `-realtime` variants. As Elle does, a class implied by one already
//! found in the component (G0 is a G1c; G-single is a G-nonadjacent) is
//! not searched.
//!
//! Each search decides whether its class is present, not just whether a
//! few tries found it:
//!
//! - G0 and G1c: a component of the write-write (and write-read)
//!   subgraph holding an edge of the kind the class needs; every edge of a
//!   strongly connected graph lies on a simple cycle.
//! - G-single: a read-write edge `a -> b` with `b` reaching `a` over
//!   write-write and write-read edges; up to 64 such questions are
//!   answered at once by pushing bit masks down the condensation of that
//!   subgraph in topological order. Bounded by a number of steps: the
//!   only search that can stop early, and where it does the G-nonadjacent
//!   search below still finds its cycle (and names it by what it is).
//! - G-nonadjacent: a cycle of `Graph::product_sccs` through a read-write
//!   edge; unfolded into a cycle of transactions, it is one with no two
//!   read-write edges in a row, or, where G0 or G1c cycles share the
//!   component, possibly one without read-write edges: then a bounded
//!   search looks further, and if it finds nothing the class is reported
//!   as not searched to the end (the G0 or G1c found there rule out every
//!   model a G-nonadjacent would).
//! - G2-item: any cycle through a read-write edge, once no G-single or
//!   G-nonadjacent was found.
//!
//! Whatever a search returns is named by what its edges are (`classify`),
//! and checked to be a cycle of the component.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::Serialize;

use super::consistency::{self, Anomaly};
use super::graph::{Graph, Kind, Kinds, Sccs};

/// Start edges tried per component and class for a shorter cycle to show
/// (presence is decided without this bound).
const STARTS: usize = 16;

/// A cycle: edge indices, each edge's `to` the next one's `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub anomaly: Anomaly,
    pub edges: Vec<usize>,
}

/// A class whose search did not run to its end in one component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Unsearched {
    pub anomaly: Anomaly,
    /// Transactions in the component.
    pub transactions: usize,
    /// Why, and what it means for the verdict.
    pub why: String,
}

/// What the searches found.
#[derive(Debug, Default)]
pub struct Cycles {
    pub found: Vec<Cycle>,
    pub unsearched: Vec<Unsearched>,
    /// The components of data edges that hold a cycle.
    pub components: Cyclic,
}

/// How many strongly connected components of data edges hold a cycle, and
/// the largest's transactions: where the searches had to look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Cyclic {
    pub count: usize,
    pub largest: usize,
}

/// Names a cycle by its edges.
pub fn classify(graph: &Graph, edges: &[usize]) -> Anomaly {
    let kinds: Vec<Kind> = edges.iter().map(|&e| graph.edges[e].kind).collect();
    let realtime = kinds.contains(&Kind::Realtime);
    let rws = kinds.iter().filter(|&&k| k == Kind::Rw).count();
    let adjacent = (0..kinds.len()).any(|i| kinds[i] == Kind::Rw && kinds[(i + 1) % kinds.len()] == Kind::Rw);
    let only_ww = kinds.iter().all(|&k| matches!(k, Kind::Ww | Kind::Realtime));
    match (rws, realtime) {
        (0, false) if only_ww => Anomaly::G0,
        (0, false) => Anomaly::G1c,
        (0, true) if only_ww => Anomaly::G0Realtime,
        (0, true) => Anomaly::G1cRealtime,
        (1, false) => Anomaly::GSingle,
        (1, true) => Anomaly::GSingleRealtime,
        (_, false) if !adjacent => Anomaly::GNonadjacent,
        (_, true) if !adjacent => Anomaly::GNonadjacentRealtime,
        (_, false) => Anomaly::G2Item,
        (_, true) => Anomaly::G2ItemRealtime,
    }
}

/// The edges a layer of the search uses: data edges alone, or with
/// real-time order.
struct Layer {
    realtime: bool,
    /// G0's edges: write-write (and real-time).
    base: Kinds,
    /// G1c's: those and write-read.
    flow: Kinds,
    /// Every kind the layer has: those and read-write.
    all: Kinds,
}

impl Layer {
    const DATA: Layer = Layer {
        realtime: false,
        base: Kinds::of(&[Kind::Ww]),
        flow: Kinds::of(&[Kind::Ww, Kind::Wr]),
        all: Kinds::DATA,
    };
    const REALTIME: Layer = Layer {
        realtime: true,
        base: Kinds::of(&[Kind::Ww, Kind::Realtime]),
        flow: Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Realtime]),
        all: Kinds::ALL,
    };

    fn name(&self, data: Anomaly) -> Anomaly {
        use Anomaly::*;
        match (self.realtime, data) {
            (false, a) => a,
            (true, G0) => G0Realtime,
            (true, G1c) => G1cRealtime,
            (true, GSingle) => GSingleRealtime,
            (true, GNonadjacent) => GNonadjacentRealtime,
            (true, G2Item) => G2ItemRealtime,
            (true, a) => unreachable!("{a} has no real-time variant"),
        }
    }
}

/// Steps the G-single search may still take.
struct Work {
    left: u64,
    bound: u64,
}

/// The cycles of `graph`: one of each class in each component, first over
/// data edges, then with real-time order; `bound` steps for the G-single
/// searches in all.
pub fn cycles(graph: &Graph, bound: u64) -> Cycles {
    let mut out = Cycles::default();
    let mut work = Work { left: bound, bound };
    let data = graph.sccs(Layer::DATA.all);
    let cyclic = data.size.iter().filter(|&&s| s > 1);
    out.components = Cyclic { count: cyclic.clone().count(), largest: cyclic.max().map_or(0, |&s| s as usize) };
    let by_component = search(graph, &Layer::DATA, &data, None, &mut work, &mut out);
    let all = graph.sccs(Layer::REALTIME.all);
    search(graph, &Layer::REALTIME, &all, Some((&data, &by_component)), &mut work, &mut out);
    // A real-time cycle tells nothing more where the data cycles already
    // imply its kind (every G0 is a G0-realtime, trivially).
    let data: BTreeSet<Anomaly> = out.found.iter().map(|c| c.anomaly).filter(|a| !a.needs_realtime()).collect();
    let implied = consistency::implied(&data);
    out.found.retain(|c| !c.anomaly.needs_realtime() || !implied.contains(&c.anomaly));
    out.unsearched.retain(|u| !u.anomaly.needs_realtime() || !implied.contains(&u.anomaly));
    out
}

/// Searches every component of `sccs` (the layer's, which for real-time
/// order must hold a real-time edge); returns what each one showed.
fn search(
    graph: &Graph,
    layer: &Layer,
    sccs: &Sccs,
    data: Option<(&Sccs, &HashMap<u32, BTreeSet<Anomaly>>)>,
    work: &mut Work,
    out: &mut Cycles,
) -> HashMap<u32, BTreeSet<Anomaly>> {
    let mut members: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for v in (0..graph.len()).filter(|&v| sccs.cyclic(v)) {
        members.entry(sccs.id[v]).or_default().push(v);
    }
    let mut by_component = HashMap::new();
    if members.is_empty() {
        return by_component;
    }
    let base = graph.sccs(layer.base);
    let flow = graph.sccs(layer.flow);
    let product = graph.product_sccs(layer.flow);
    for (c, m) in &members {
        let inside = |v: usize| sccs.id[v] == *c;
        let edges: Vec<usize> = m
            .iter()
            .flat_map(|&v| graph.out(v))
            .filter(|&e| inside(graph.edges[e].to) && layer.all.has(graph.edges[e].kind))
            .collect();
        let of = |k: Kind| edges.iter().copied().filter(move |&e| graph.edges[e].kind == k);
        if layer.realtime && of(Kind::Realtime).next().is_none() {
            continue;
        }
        // What the component is already known to show: for real-time
        // order, the data components inside it.
        let mut known: BTreeSet<Anomaly> = BTreeSet::new();
        if let Some((data_sccs, data_found)) = data {
            for &v in m {
                known.extend(data_found.get(&data_sccs.id[v]).into_iter().flatten());
            }
        }
        let mut here = Component { graph, m, inside: &inside, found: BTreeMap::new() };
        let mut unsearched = Vec::new();
        let wanted = |here: &Component, data: Anomaly| {
            let anomaly = layer.name(data);
            let present: BTreeSet<Anomaly> = known.iter().chain(here.found.keys()).copied().collect();
            (!consistency::implied(&present).contains(&anomaly)).then_some(anomaly)
        };
        let in_layer = |e: &super::graph::Edge| inside(e.from) && inside(e.to) && layer.all.has(e.kind);

        if wanted(&here, Anomaly::G0).is_some() {
            // Real-time order: a G0-realtime cycle needs a real-time edge.
            let start = if layer.realtime { Kind::Realtime } else { Kind::Ww };
            let starts = of(start).filter(|&e| base.together(graph.edges[e].from, graph.edges[e].to));
            here.shortest(starts, |e| layer.base.has(e.kind) && base.together(e.from, e.to) && in_layer(e));
        }
        if wanted(&here, Anomaly::G1c).is_some() {
            let starts = of(Kind::Wr).filter(|&e| flow.together(graph.edges[e].from, graph.edges[e].to));
            here.shortest(starts, |e| layer.flow.has(e.kind) && flow.together(e.from, e.to) && in_layer(e));
        }
        if let Some(anomaly) = wanted(&here, Anomaly::GSingle) {
            let rws: Vec<usize> = of(Kind::Rw).collect();
            match single(graph, layer, &flow, m, &inside, &rws, work) {
                Ok(Some(cycle)) => here.record(cycle),
                Ok(None) => {}
                Err(()) => unsearched.push(Unsearched {
                    anomaly,
                    transactions: m.len(),
                    why: format!(
                        "the search stopped at its bound of {} steps (--step-limit); the models it would rule out are decided by the G-nonadjacent search",
                        work.bound
                    ),
                }),
            }
        }
        if let Some(anomaly) = wanted(&here, Anomaly::GNonadjacent) {
            let starts = of(Kind::Rw)
                .filter(|&e| product.id[2 * graph.edges[e].from] == product.id[2 * graph.edges[e].to + 1])
                .take(STARTS);
            let mut best: Option<Vec<usize>> = None;
            for start in starts {
                let (a, b) = (graph.edges[start].from, graph.edges[start].to);
                let walk = graph.product_path((b, true), a, layer.flow, in_layer).expect("a product cycle");
                let cycle = simple(graph, [&[start][..], &walk].concat());
                if cycle.iter().any(|&e| graph.edges[e].kind == Kind::Rw)
                    && best.as_ref().is_none_or(|b| b.len() > cycle.len())
                {
                    best = Some(cycle);
                }
            }
            let starts_any =
                of(Kind::Rw).any(|e| product.id[2 * graph.edges[e].from] == product.id[2 * graph.edges[e].to + 1]);
            if let Some(cycle) = best.or_else(|| {
                // Only cycles without read-write edges came out: G0 or G1c
                // share the component.
                if !starts_any {
                    return None;
                }
                of(Kind::Rw)
                    .take(STARTS)
                    .filter_map(|e| nonadjacent_through(graph, e, layer, &inside))
                    .min_by_key(Vec::len)
            }) {
                here.record(cycle);
            } else if starts_any {
                unsearched.push(Unsearched {
                    anomaly,
                    transactions: m.len(),
                    why: format!(
                        "the component's cycles without two read-write edges in a row found so far have none at all ({} found there rules out every model {anomaly} would)",
                        here.found.keys().next().map_or("G0 or G1c", |a| a.name())
                    ),
                });
            }
        }
        if wanted(&here, Anomaly::G2Item).is_some() {
            here.shortest(of(Kind::Rw), in_layer);
        }
        // A class found after all (a bounded G-single search's cycle came
        // out of the G-nonadjacent search) was searched enough.
        out.unsearched.extend(unsearched.into_iter().filter(|u: &Unsearched| !here.found.contains_key(&u.anomaly)));
        by_component.insert(*c, here.found.keys().copied().collect());
        out.found.extend(here.found.into_values());
    }
    by_component
}

/// One component being searched, and what it showed so far.
struct Component<'a> {
    graph: &'a Graph,
    m: &'a [usize],
    inside: &'a dyn Fn(usize) -> bool,
    found: BTreeMap<Anomaly, Cycle>,
}

impl Component<'_> {
    /// The shortest cycle through one of the first `STARTS` of `starts`,
    /// over the edges `allowed` admits.
    fn shortest(&mut self, starts: impl Iterator<Item = usize>, allowed: impl Fn(&super::graph::Edge) -> bool) {
        let graph = self.graph;
        let best = starts
            .take(STARTS)
            .filter_map(|e| {
                let edge = &graph.edges[e];
                let back = graph.path(edge.to, edge.from, &allowed)?;
                Some([&[e][..], &back].concat())
            })
            .min_by_key(Vec::len);
        if let Some(cycle) = best {
            self.record(cycle);
        }
    }

    /// Keeps a cycle, named by its edges, shown from its earliest
    /// transaction; the first of a class in the component stays.
    fn record(&mut self, edges: Vec<usize>) {
        let graph = self.graph;
        assert!(!edges.is_empty(), "a cycle has edges");
        let mut seen = BTreeSet::new();
        for (i, &e) in edges.iter().enumerate() {
            let (edge, next) = (&graph.edges[e], &graph.edges[edges[(i + 1) % edges.len()]]);
            assert_eq!(edge.to, next.from, "cycle {edges:?} is a closed walk");
            assert!(
                (self.inside)(edge.from),
                "cycle {edges:?} stays in its component of {} transactions",
                self.m.len()
            );
            assert!(seen.insert(edge.from), "cycle {edges:?} visits T{} twice", edge.from);
        }
        let anomaly = classify(graph, &edges);
        let first = (0..edges.len()).min_by_key(|&i| graph.edges[edges[i]].from).expect("a cycle has edges");
        let edges = [&edges[first..], &edges[..first]].concat();
        self.found.entry(anomaly).or_insert(Cycle { anomaly, edges });
    }
}

/// A G-single cycle of the component, if any: a read-write edge `a -> b`
/// with `b` reaching `a` over the layer's other edges. `Err` when the
/// work bound ran out first.
fn single(
    graph: &Graph,
    layer: &Layer,
    flow: &Sccs,
    m: &[usize],
    inside: &dyn Fn(usize) -> bool,
    rws: &[usize],
    work: &mut Work,
) -> Result<Option<Vec<usize>>, ()> {
    let cycle_through = |rw: usize| {
        let (a, b) = (graph.edges[rw].from, graph.edges[rw].to);
        let back = graph
            .path(b, a, |e| layer.flow.has(e.kind) && inside(e.from) && inside(e.to))
            .expect("b reaches a over the layer's other edges");
        [&[rw][..], &back].concat()
    };
    // Both ends on one cycle of the other edges.
    if let Some(&rw) = rws.iter().find(|&&e| flow.together(graph.edges[e].from, graph.edges[e].to)) {
        return Ok(Some(cycle_through(rw)));
    }
    // Otherwise b must come before a in the condensation's order: an edge
    // between components goes to a lower number.
    let mut queries: Vec<usize> =
        rws.iter().copied().filter(|&e| flow.id[graph.edges[e].to] > flow.id[graph.edges[e].from]).collect();
    if queries.is_empty() {
        return Ok(None);
    }
    queries.sort_by_key(|&e| (flow.id[graph.edges[e].to] - flow.id[graph.edges[e].from], e));
    // The component's nodes by their condensation's component, highest
    // (earliest in topological order) first.
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for &v in m {
        groups.entry(flow.id[v]).or_default().push(v);
    }
    for batch in queries.chunks(64) {
        let mut mask: HashMap<u32, u64> = HashMap::new();
        let (mut hi, mut lo) = (0, u32::MAX);
        for (i, &e) in batch.iter().enumerate() {
            let (a, b) = (flow.id[graph.edges[e].from], flow.id[graph.edges[e].to]);
            *mask.entry(b).or_default() |= 1 << i;
            hi = hi.max(b);
            lo = lo.min(a);
        }
        for (&c, nodes) in groups.range(lo..=hi).rev() {
            let Some(&bits) = mask.get(&c) else { continue };
            for &u in nodes {
                for e in graph.out(u) {
                    let edge = &graph.edges[e];
                    let to = flow.id[edge.to];
                    if layer.flow.has(edge.kind) && inside(edge.to) && to != c && to >= lo {
                        *mask.entry(to).or_default() |= bits;
                    }
                }
                work.left = work.left.checked_sub(graph.out(u).count() as u64 + 1).ok_or(())?;
            }
        }
        for (i, &e) in batch.iter().enumerate() {
            if mask.get(&flow.id[graph.edges[e].from]).is_some_and(|bits| bits & (1 << i) != 0) {
                return Ok(Some(cycle_through(e)));
            }
        }
    }
    Ok(None)
}

/// A closed walk made a cycle of distinct transactions: split where it
/// visits a transaction twice, keeping the part whose two ends do not join
/// two read-write edges (the other part's do, or neither's: the walk had
/// no two in a row), preferring one with a read-write edge.
fn simple(graph: &Graph, mut walk: Vec<usize>) -> Vec<usize> {
    let rw = |e: usize| graph.edges[e].kind == Kind::Rw;
    loop {
        let mut seen: HashMap<usize, usize> = HashMap::new();
        let split = walk.iter().enumerate().find_map(|(j, &e)| {
            let v = graph.edges[e].from;
            seen.insert(v, j).map(|i| (i, j))
        });
        let Some((i, j)) = split else { return walk };
        let inner = walk[i..j].to_vec();
        let outer: Vec<usize> = walk[j..].iter().chain(&walk[..i]).copied().collect();
        let score = |w: &[usize]| {
            let joins_two = rw(w[0]) && rw(w[w.len() - 1]);
            (!joins_two, w.iter().any(|&e| rw(e)))
        };
        walk = if score(&inner) >= score(&outer) { inner } else { outer };
    }
}

/// The shortest cycle through `start` (a read-write edge) with no two
/// read-write edges in a row and at least two in all, by a breadth-first
/// walk over (transaction, read-write edges so far, whether the last edge
/// was one): the fallback where the component's product cycles unfold
/// only into cycles without read-write edges.
fn nonadjacent_through(
    graph: &Graph,
    start: usize,
    layer: &Layer,
    inside: &dyn Fn(usize) -> bool,
) -> Option<Vec<usize>> {
    type State = (usize, u8, bool);
    let first = &graph.edges[start];
    let home = first.from;
    let initial: State = (first.to, 1, true);
    let mut came: HashMap<State, (State, usize)> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([initial]);
    while let Some(state @ (node, rws, last_rw)) = queue.pop_front() {
        for e in graph.out(node) {
            let edge = &graph.edges[e];
            if !inside(edge.to) {
                continue;
            }
            let next: State = match edge.kind {
                Kind::Rw if last_rw => continue,
                Kind::Rw => (edge.to, (rws + 1).min(2), true),
                k if layer.flow.has(k) => (edge.to, rws, false),
                _ => continue,
            };
            if edge.to == home {
                if next.1 >= 2 && !next.2 {
                    let mut edges = vec![e];
                    let mut s = state;
                    while s != initial {
                        let (prev, e) = came[&s];
                        edges.push(e);
                        s = prev;
                    }
                    edges.push(start);
                    edges.reverse();
                    // A walk may visit a transaction twice: keep it only
                    // as a cycle.
                    let distinct: BTreeSet<usize> = edges.iter().map(|&e| graph.edges[e].from).collect();
                    if distinct.len() == edges.len() {
                        return Some(edges);
                    }
                }
                continue;
            }
            if next != initial && !came.contains_key(&next) {
                came.insert(next, (state, e));
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::graph::{Source, Why};
    use crate::txn::transaction::Scalar;

    fn graph(n: usize, edges: &[(usize, usize, Kind)]) -> Graph {
        let mut g = Graph::new(n);
        for &(a, b, k) in edges {
            let why = (k != Kind::Realtime).then_some(Why {
                key: Scalar::Int(0),
                before: None,
                after: None,
                source: Source::Reads,
            });
            g.add(a, b, k, why);
        }
        g
    }

    fn names(g: &Graph) -> Vec<Anomaly> {
        let mut v: Vec<Anomaly> = cycles(g, u64::MAX).found.iter().map(|c| c.anomaly).collect();
        v.sort();
        v
    }

    use Kind::*;

    #[test]
    fn each_cycle_is_named_by_its_edges() {
        assert_eq!(names(&graph(2, &[(0, 1, Ww), (1, 0, Ww)])), [Anomaly::G0]);
        assert_eq!(names(&graph(2, &[(0, 1, Ww), (1, 0, Wr)])), [Anomaly::G1c]);
        assert_eq!(names(&graph(2, &[(0, 1, Rw), (1, 0, Wr)])), [Anomaly::GSingle]);
        // Write skew: two adjacent anti-dependencies.
        assert_eq!(names(&graph(2, &[(0, 1, Rw), (1, 0, Rw)])), [Anomaly::G2Item]);
        assert_eq!(names(&graph(4, &[(0, 1, Rw), (1, 2, Wr), (2, 3, Rw), (3, 0, Ww)])), [Anomaly::GNonadjacent]);
        assert_eq!(names(&graph(2, &[(0, 1, Rw), (1, 0, Realtime)])), [Anomaly::GSingleRealtime]);
        assert_eq!(names(&graph(2, &[(0, 1, Ww), (1, 0, Realtime)])), [Anomaly::G0Realtime]);
        assert_eq!(names(&graph(3, &[(0, 1, Wr), (1, 2, Ww), (2, 0, Realtime)])), [Anomaly::G1cRealtime]);
        // Broken, each is no cycle at all.
        assert!(names(&graph(3, &[(0, 1, Rw), (1, 2, Rw)])).is_empty());
    }

    #[test]
    fn each_class_is_found_in_one_component_and_shown_as_a_cycle_of_its_kinds() {
        // A long G0 cycle 0->1->2->3->0 and, through 0 and 2, a short
        // G-single: 0 -rw-> 2 -wr-> 0.
        let g = graph(4, &[(0, 1, Ww), (1, 2, Ww), (2, 3, Ww), (3, 0, Ww), (0, 2, Rw), (2, 0, Wr)]);
        let found = cycles(&g, u64::MAX).found;
        let by = |a| found.iter().find(|c| c.anomaly == a).map(|c| c.edges.clone());
        assert_eq!(by(Anomaly::G0).map(|c| c.len()), Some(4));
        let single = by(Anomaly::GSingle).unwrap();
        assert_eq!(single.iter().map(|&e| g.edges[e].kind).collect::<Vec<_>>(), [Rw, Wr]);
        // G0 implies G1c, and G-single implies G-nonadjacent and G2-item:
        // none of them is reported again.
        let mut names: Vec<Anomaly> = found.iter().map(|c| c.anomaly).collect();
        names.sort();
        assert_eq!(names, [Anomaly::G0, Anomaly::GSingle]);
    }

    /// Many start edges that lead nowhere before the one that closes the
    /// class: presence is decided, not sampled (the bounded search of
    /// sixteen start edges missed these).
    #[test]
    fn a_class_is_found_however_many_edges_come_first() {
        // A ring of 40 read skews 0 -rw-> 1 -rw-> ... (adjacent rw: G2-item),
        // then one G-single 40 -rw-> 41 -wr-> 40, all one component.
        let mut edges: Vec<(usize, usize, Kind)> = (0..40).map(|i| (i, (i + 1) % 40, Rw)).collect();
        edges.extend([(0, 40, Ww), (40, 41, Rw), (41, 40, Wr), (41, 0, Ww)]);
        let g = graph(42, &edges);
        let found = names(&g);
        assert!(found.contains(&Anomaly::GSingle), "{found:?}");
        // A G1c tied by read-write edges to twenty write skews.
        let mut edges: Vec<(usize, usize, Kind)> = Vec::new();
        for i in 0..20 {
            let (a, b) = (2 * i, 2 * i + 1);
            edges.extend([(a, b, Rw), (b, a, Rw), (b, 40, Rw), (40, a, Rw)]);
        }
        edges.extend([(40, 41, Wr), (41, 40, Ww)]);
        let found = names(&graph(42, &edges));
        assert!(found.contains(&Anomaly::G1c), "{found:?}");
    }

    #[test]
    fn a_bounded_g_single_search_says_so_and_the_nonadjacent_search_still_finds_the_cycle() {
        // 0 -rw-> 1 -ww-> 2 -ww-> 0: a G-single the batched search must
        // walk to (b and a in different components of ww/wr edges); with
        // no steps left, the G-nonadjacent search finds it.
        let g = graph(3, &[(0, 1, Rw), (1, 2, Ww), (2, 0, Ww)]);
        let out = cycles(&g, 0);
        assert!(out.unsearched.is_empty(), "{:?}", out.unsearched);
        assert_eq!(out.found.iter().map(|c| c.anomaly).collect::<Vec<_>>(), [Anomaly::GSingle]);
        // A G-nonadjacent and no G-single: that the G-single search ended
        // early is said.
        let g = graph(4, &[(0, 1, Rw), (1, 2, Wr), (2, 3, Rw), (3, 0, Ww)]);
        let out = cycles(&g, 0);
        assert_eq!(out.unsearched.iter().map(|u| u.anomaly).collect::<Vec<_>>(), [Anomaly::GSingle]);
        assert!(out.unsearched[0].why.contains("--step-limit"), "{:?}", out.unsearched);
        assert_eq!(out.found.iter().map(|c| c.anomaly).collect::<Vec<_>>(), [Anomaly::GNonadjacent]);
        assert!(cycles(&g, u64::MAX).unsearched.is_empty());
    }

    #[test]
    fn closed_walks_unfold_into_cycles_without_two_rw_edges_in_a_row() {
        // 0 -rw-> 1 -wr-> 2 -rw-> 0 -ww-> 3 -ww-> 0: no two rw in a row as
        // a walk, but its cycles are a G2-item and a G0.
        let g = graph(4, &[(0, 1, Rw), (1, 2, Wr), (2, 0, Rw), (0, 3, Ww), (3, 0, Ww)]);
        let walk = vec![0, 1, 2, 3, 4];
        let kinds: Vec<Kind> = simple(&g, walk).iter().map(|&e| g.edges[e].kind).collect();
        assert_eq!(kinds, [Ww, Ww], "the part whose ends join no two rw edges");
        let found = names(&g);
        assert!(found.contains(&Anomaly::G0) && found.contains(&Anomaly::G2Item), "{found:?}");
        let out = cycles(&g, u64::MAX);
        assert_eq!(out.unsearched.iter().map(|u| u.anomaly).collect::<Vec<_>>(), [Anomaly::GNonadjacent]);
    }
}
