//! Cycles in the dependency graph and what they are. Inside each strongly
//! connected component the search looks, most severe first, for the
//! shortest cycle of each class Elle names: G0 (write-write edges only),
//! G1c (write-write and write-read), G-single (exactly one read-write
//! edge), G-nonadjacent (read-write edges, none adjacent) and G2-item (any
//! read-write edges), then their `-realtime` variants, cycles that need
//! real-time order. Each search is a breadth-first walk over (transaction,
//! read-write edges so far, whether the last edge was one) from one edge
//! back to where it started; a few start edges per component keep it near
//! linear. Every edge of a component lies on some cycle, so a component
//! always yields at least one, and each cycle found is named by what it is
//! made of, not by which search found it.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::consistency::{self, Anomaly};
use super::graph::{Components, Graph, Kind, Kinds};

/// Start edges tried per component and class: the shortest cycle through
/// any of them is kept.
const STARTS: usize = 16;

/// How many read-write edges a cycle of a class may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rw {
    None,
    One,
    NonAdjacent,
    Any,
}

struct Class {
    start: Kind,
    /// The other edges it may use, read-write ones aside.
    others: Kinds,
    rw: Rw,
}

const DATA_CLASSES: [Class; 5] = [
    Class { start: Kind::Ww, others: Kinds::of(&[Kind::Ww]), rw: Rw::None },
    Class { start: Kind::Wr, others: Kinds::of(&[Kind::Ww, Kind::Wr]), rw: Rw::None },
    Class { start: Kind::Rw, others: Kinds::of(&[Kind::Ww, Kind::Wr]), rw: Rw::One },
    Class { start: Kind::Rw, others: Kinds::of(&[Kind::Ww, Kind::Wr]), rw: Rw::NonAdjacent },
    Class { start: Kind::Rw, others: Kinds::of(&[Kind::Ww, Kind::Wr]), rw: Rw::Any },
];

const REALTIME_CLASSES: [Class; 5] = [
    Class { start: Kind::Realtime, others: Kinds::of(&[Kind::Ww, Kind::Realtime]), rw: Rw::None },
    Class { start: Kind::Realtime, others: Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Realtime]), rw: Rw::None },
    Class { start: Kind::Realtime, others: Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Realtime]), rw: Rw::One },
    Class { start: Kind::Realtime, others: Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Realtime]), rw: Rw::NonAdjacent },
    Class { start: Kind::Realtime, others: Kinds::of(&[Kind::Ww, Kind::Wr, Kind::Realtime]), rw: Rw::Any },
];

/// A cycle: edge indices, each edge's `to` the next one's `from`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cycle {
    pub anomaly: Anomaly,
    pub edges: Vec<usize>,
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

/// The cycles of `graph`: the shortest found of each class in each
/// component, first over data edges, then with real-time order.
pub fn cycles(graph: &Graph) -> Vec<Cycle> {
    let mut found = Vec::new();
    for (kinds, classes) in [(Kinds::DATA, &DATA_CLASSES), (Kinds::ALL, &REALTIME_CLASSES)] {
        let components = graph.components(kinds);
        for c in 0..components.members.len() {
            let mut in_component: Vec<Cycle> = Vec::new();
            for class in classes {
                let Some(edges) = shortest(graph, &components, c as u32, class) else { continue };
                let anomaly = classify(graph, &edges);
                // Shown from its earliest transaction.
                let first = (0..edges.len()).min_by_key(|&i| graph.edges[edges[i]].from).expect("a cycle has edges");
                let edges = [&edges[first..], &edges[..first]].concat();
                debug_assert!(kinds == Kinds::ALL || !matches!(anomaly, Anomaly::G0Realtime | Anomaly::G1cRealtime));
                match in_component.iter_mut().find(|f| f.anomaly == anomaly) {
                    Some(f) if f.edges.len() > edges.len() => f.edges = edges,
                    Some(_) => {}
                    None => in_component.push(Cycle { anomaly, edges }),
                }
            }
            // Every class's start edges lie on cycles, and the last class
            // accepts any; a component found again with real-time order
            // but without a real-time edge was searched in the first pass.
            let starts_any = components.members[c].iter().flat_map(|&n| graph.out(n)).any(|e| {
                let edge = &graph.edges[e];
                components.of[edge.to] == c as u32 && classes.iter().any(|class| edge.kind == class.start)
            });
            assert!(!starts_any || !in_component.is_empty(), "component {c} has a cycle the search missed");
            found.extend(in_component);
        }
    }
    // A real-time cycle tells nothing more where the data cycles already
    // imply its kind (every G0 is a G0-realtime, trivially).
    let data: BTreeSet<Anomaly> = found.iter().map(|c| c.anomaly).filter(|a| !a.needs_realtime()).collect();
    let implied = consistency::implied(&data);
    found.retain(|c| !c.anomaly.needs_realtime() || !implied.contains(&c.anomaly));
    found
}

/// Search state: a transaction, read-write edges taken (0, 1, 2 or more),
/// whether the last edge taken was one.
type State = (usize, u8, bool);

/// The shortest cycle of `class` in component `c` through one of its first
/// `STARTS` start edges.
fn shortest(graph: &Graph, components: &Components, c: u32, class: &Class) -> Option<Vec<usize>> {
    let members = &components.members[c as usize];
    let starts = members
        .iter()
        .flat_map(|&n| graph.out(n))
        .filter(|&e| graph.edges[e].kind == class.start && components.of[graph.edges[e].to] == c)
        .take(STARTS);
    starts.filter_map(|e| through(graph, components, c, class, e)).min_by_key(Vec::len)
}

/// The shortest cycle of `class` that starts with edge `start`.
fn through(graph: &Graph, components: &Components, c: u32, class: &Class, start: usize) -> Option<Vec<usize>> {
    let first = &graph.edges[start];
    let home = first.from;
    let start_rw = first.kind == Kind::Rw;
    let initial: State = (first.to, u8::from(start_rw), start_rw);
    // Each state reached, and the state and edge it was reached by.
    let mut came: HashMap<State, (State, usize)> = HashMap::new();
    let mut queue = VecDeque::from([initial]);
    let path = |came: &HashMap<State, (State, usize)>, mut s: State, last: usize| {
        let mut edges = vec![last];
        while s != initial {
            let (prev, e) = came[&s];
            edges.push(e);
            s = prev;
        }
        edges.push(start);
        edges.reverse();
        edges
    };
    while let Some(state @ (node, rws, last_rw)) = queue.pop_front() {
        for e in graph.out(node) {
            let edge = &graph.edges[e];
            if components.of[edge.to] != c {
                continue;
            }
            let next: State = if edge.kind == Kind::Rw {
                let allowed = match class.rw {
                    Rw::None => false,
                    Rw::One => rws == 0,
                    Rw::NonAdjacent => !last_rw,
                    Rw::Any => true,
                };
                if !allowed {
                    continue;
                }
                (edge.to, (rws + 1).min(2), true)
            } else if class.others.has(edge.kind) {
                (edge.to, rws, false)
            } else {
                continue;
            };
            if edge.to == home {
                let (_, rws, last_rw) = next;
                let closes = match class.rw {
                    Rw::None => rws == 0,
                    Rw::One => rws == 1,
                    Rw::NonAdjacent => rws >= 2 && !(last_rw && start_rw),
                    Rw::Any => true,
                };
                if closes {
                    return Some(path(&came, state, e));
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

    fn graph(n: usize, edges: &[(usize, usize, Kind)]) -> Graph {
        let mut g = Graph::new(n);
        for &(a, b, k) in edges {
            g.add(a, b, k, None);
        }
        g
    }

    fn names(g: &Graph) -> Vec<Anomaly> {
        let mut v: Vec<Anomaly> = cycles(g).iter().map(|c| c.anomaly).collect();
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
        // Broken, each is no cycle at all.
        assert!(names(&graph(3, &[(0, 1, Rw), (1, 2, Rw)])).is_empty());
    }

    #[test]
    fn the_shortest_cycle_of_each_class_is_found_in_one_component() {
        // A long G0 cycle 0->1->2->3->0 and, through 0 and 2, a short
        // G-single: 0 -rw-> 2 -wr-> 0. And a G1c 1 -wr-> 3 -ww-> 0 -ww-> 1.
        let g = graph(4, &[(0, 1, Ww), (1, 2, Ww), (2, 3, Ww), (3, 0, Ww), (0, 2, Rw), (2, 0, Wr), (1, 3, Wr)]);
        let found = cycles(&g);
        let by = |a| found.iter().find(|c| c.anomaly == a).map(|c| c.edges.len());
        assert_eq!(by(Anomaly::G0), Some(4));
        assert_eq!(by(Anomaly::GSingle), Some(2));
        assert_eq!(by(Anomaly::G1c), Some(3));
        for c in &found {
            for w in c.edges.windows(2) {
                assert_eq!(g.edges[w[0]].to, g.edges[w[1]].from, "{c:?} is a path");
            }
            assert_eq!(g.edges[*c.edges.last().unwrap()].to, g.edges[c.edges[0]].from, "{c:?} closes");
            assert_eq!(classify(&g, &c.edges), c.anomaly);
        }
    }
}
