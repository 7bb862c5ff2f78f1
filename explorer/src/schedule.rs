//! The explorer's scheduling policy: which snapshot each branch starts from,
//! and, at an SDK draw, which value it takes. `engine.rs` runs the loop;
//! this decides.
//!
//! Two policies ([`Policy`]):
//!
//! - **rarity** (the default), what a user of AFL++ or Antithesis expects of
//!   a guided search. A snapshot's weight is the product of
//!   - its *rarity*: the rarest of the features first reached there (an
//!     assertion's passing or failing hit, a guidance reached), as 1 / the
//!     number of timelines that reached that feature themselves (AFL's
//!     rare-edge idea, over SDK signals); a snapshot of new coverage edges
//!     or the root counts as rare, and interval snapshots, where nothing
//!     was new, share the weight of one rare snapshot between them;
//!   - its *guidance*: more for snapshots whose timelines reached a
//!     `sometimes` (or reachability) assertion that no timeline has
//!     satisfied yet, the closest place to satisfying it, and for the one
//!     that holds a numeric or boolean guidance's best value;
//!   - its *depth*: how many places where an assertion or guidance reached
//!     something new its timeline passed through (new coverage edges alone
//!     do not count); each step short of the deepest quarters the weight,
//!     so that a chain of progress (a gate, then the next) is followed;
//!   - its *freshness*: 0.8 per branch started there, so that exhausted
//!     snapshots lose weight; a snapshot at an SDK draw followed by a
//!     property not yet satisfied (or at the end of the deepest chain of
//!     progress), with values not yet tried, keeps its
//!     weight (each branch tries another value), and more, until one of
//!     its values leads somewhere new.
//!
//!   Random draws are decision points: the first draw a branch makes after
//!   something new (or after its start, once per snapshot) is snapshotted,
//!   and branches from there take the values `0, 1, 2, ...` in turn (what
//!   `random_choice` over N options turns into options `0..N` in order:
//!   the SDKs take the value modulo N) — up to the draw's option count, or
//!   [`SMALL_VALUES`] — and then the branch's own stream.
//!
//! - **energy**, the explorer before this module: a new snapshot gets 1 + 2
//!   × its new signals, × 0.8 per pick; draws are not decision points.
//!   Kept to measure the rarity policy against (`hvsim bench explore`).
//!
//! Every choice depends only on what the exploration merged (and the
//! explorer's seeded stream), never on workers or timing.

use std::collections::BTreeMap;

use hvsim_vmm::entropy::Stream;
use serde::{Deserialize, Serialize};

use crate::discovery::Incidence;
use crate::exploration::{DrawTally, Policy};
use crate::timeline::Timeline;

/// Values a draw of unknown (or larger) option count is tried with before
/// its branches go back to their streams.
pub const SMALL_VALUES: u64 = 16;

const DECAY: f64 = 0.8;
const MIN_FRESHNESS: f64 = 0.01;
/// Timelines from here reached an assertion not yet satisfied.
const APPROACH_BONUS: f64 = 4.0;
/// Here a guidance reached its best value so far.
const WATERMARK_BONUS: f64 = 2.0;
/// A draw with values not yet tried.
const DRAW_BONUS: f64 = 4.0;
/// Each step short of the deepest divides the weight by this.
const DEPTH_FACTOR: f64 = 4.0;

/// The energy policy's constants.
const NEW_NODE_ENERGY: f64 = 1.0;
const ENERGY_PER_SIGNAL: f64 = 2.0;
const INTERVAL_ENERGY: f64 = 0.25;
const MIN_ENERGY: f64 = 0.05;

/// A feature, interned (see [`Schedule::feature`]).
type Feature = u32;

/// A draw a snapshot stands at, and the values tried there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawPoint {
    /// How many outcomes the program makes of the value, if its SDK said.
    pub options: Option<u64>,
    /// The next value to try (`0, 1, ...`).
    pub next: u64,
}

impl DrawPoint {
    /// The value the next branch from here takes, if any is left to try.
    fn untried(&self) -> Option<u64> {
        (self.next < self.options.map_or(SMALL_VALUES, |n| n.min(SMALL_VALUES))).then_some(self.next)
    }
}

/// A snapshot the explorer can branch from.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Node {
    pub timeline: Timeline,
    /// Branches started here.
    pub picks: u64,
    /// Branches from here that found something new.
    pub fruitful: u64,
    /// The energy policy's energy (the rarity policy computes weights).
    pub energy: f64,
    /// Features first reached here (for a draw: at the novelty before it).
    features: Vec<Feature>,
    /// Places where something was new on the way here (see the module's
    /// comment).
    pub depth: u32,
    /// An interval snapshot: nothing was new here.
    interval: bool,
    /// The draw this snapshot stands at, if it is a decision point.
    pub draw: Option<DrawPoint>,
    /// A branch from here made a draw point of its first draw.
    has_draw_child: bool,
    /// Assertions (features of their ids) that timelines from here
    /// reached without satisfying.
    approaches: Vec<Feature>,
    #[serde(skip)]
    pub(crate) tree_id: usize,
}

/// What a new snapshot is, as the merge saw it.
pub(crate) struct NewNode<'a> {
    pub timeline: Timeline,
    pub tree_id: usize,
    /// Stops of its branch, up to this one, where a feature was new.
    pub novel_stops: u32,
    /// Signals new here (0 for an interval snapshot or a draw).
    pub signals: u64,
    pub features: &'a [String],
    pub interval: bool,
    pub draw: Option<Option<u64>>,
    /// Assertions the rest of the branch reached without satisfying.
    pub approaches: &'a [String],
    /// Guidance whose best value was reached here.
    pub watermarks: &'a [String],
}

/// Where the next branch starts.
#[derive(Clone, Debug)]
pub(crate) struct Pick {
    pub tree_id: usize,
    pub timeline: Timeline,
    /// The value its draw takes (a draw point with values left to try).
    pub draw: Option<u64>,
    /// Whether its first draw is to be a decision point.
    pub arm_draw: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    policy: Policy,
    nodes: Vec<Node>,
    /// Interned features: assertion states (`pass`/`fail` hits), guidance,
    /// and assertion ids (for approaches).
    names: BTreeMap<String, Feature>,
    /// Per feature: timelines whose own branch reached it.
    hits: Vec<u64>,
    /// Per guidance: the snapshot (tree id) where its best value was reached.
    watermarks: BTreeMap<Feature, usize>,
    /// What draws did: for the report.
    pub draws: DrawTally,
}

impl Schedule {
    /// A schedule starting from the root snapshot.
    pub fn new(policy: Policy, timeline: Timeline, tree_id: usize) -> Schedule {
        let root = Node {
            timeline,
            picks: 0,
            fruitful: 0,
            energy: NEW_NODE_ENERGY,
            features: Vec::new(),
            depth: 0,
            interval: false,
            draw: None,
            has_draw_child: false,
            approaches: Vec::new(),
            tree_id,
        };
        Schedule { policy, nodes: vec![root], ..Schedule::default() }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    fn feature(&mut self, name: &str) -> Feature {
        if let Some(&f) = self.names.get(name) {
            return f;
        }
        let f = self.hits.len() as Feature;
        self.names.insert(name.to_owned(), f);
        self.hits.push(0);
        f
    }

    fn index(&self, tree_id: usize) -> Option<usize> {
        self.nodes.iter().position(|n| n.tree_id == tree_id)
    }

    /// Picks where the next branch starts, drawing from `stream`;
    /// `satisfied` says whether an assertion (by id) has been satisfied.
    pub fn pick(&mut self, stream: &mut Stream, satisfied: &dyn Fn(&str) -> bool) -> Pick {
        let weights: Vec<f64> = match self.policy {
            Policy::Energy => self.nodes.iter().map(|n| n.energy).collect(),
            Policy::Rarity | Policy::Bandit => {
                let unsatisfied: Vec<bool> = {
                    let mut u = vec![false; self.hits.len()];
                    for (name, &f) in &self.names {
                        if let Some(id) = name.strip_prefix("id ") {
                            u[f as usize] = !satisfied(id);
                        }
                    }
                    u
                };
                let intervals = self.nodes.iter().filter(|n| n.interval).count();
                let deepest = self.nodes.iter().map(|n| n.depth).max().unwrap_or(0);
                self.nodes
                    .iter()
                    .map(|n| {
                        let short = (deepest - n.depth).min(60) as i32;
                        self.weight(n, &unsatisfied, intervals, deepest) / DEPTH_FACTOR.powi(short)
                    })
                    .collect()
            }
        };
        let i = weighted(&weights, stream);
        let policy = self.policy;
        let n = &mut self.nodes[i];
        n.picks += 1;
        n.energy = (n.energy * DECAY).max(MIN_ENERGY);
        let draw = n.draw.as_mut().and_then(|d| {
            let v = d.untried()?;
            d.next += 1;
            Some(v)
        });
        // Not after interval snapshots: there are many, each much like the
        // others, and their draws would be as many decision points.
        let arm_draw = policy.draws() && n.draw.is_none() && !n.has_draw_child && !n.interval;
        self.draws.chosen += u64::from(draw.is_some());
        Pick { tree_id: n.tree_id, timeline: n.timeline.clone(), draw, arm_draw }
    }

    /// The rarity policy's weight of `n` (see the module's comment).
    fn weight(&self, n: &Node, unsatisfied: &[bool], intervals: usize, deepest: u32) -> f64 {
        let rarity = match n.features.iter().map(|&f| 1.0 / self.hits[f as usize].max(1) as f64).reduce(f64::max) {
            Some(r) => r,
            // Interval snapshots are alike: together, as much as one new one.
            None if n.interval => 1.0 / intervals.max(1) as f64,
            None => 1.0,
        };
        let approaching = n.approaches.iter().any(|&f| unsatisfied[f as usize]);
        let mut guidance = 1.0;
        if approaching {
            guidance *= APPROACH_BONUS;
        }
        if self.watermarks.values().any(|&t| t == n.tree_id) {
            guidance *= WATERMARK_BONUS;
        }
        // A draw followed by a property not yet satisfied, or right after
        // the deepest progress (a feature, not new edges alone), with
        // values left to try, keeps its
        // weight until one of them leads somewhere new; otherwise it is one
        // place among others.
        let freshness = match n.draw.and_then(|d| d.untried()) {
            Some(_) if n.fruitful == 0 && (approaching || (n.depth == deepest && !n.features.is_empty())) => DRAW_BONUS,
            _ => DECAY.powi(n.picks.min(1000) as i32).max(MIN_FRESHNESS),
        };
        rarity * guidance * freshness
    }

    /// Each feature's count of timelines that reached it, over `timelines`
    /// merged branches: what the discovery estimates go by.
    pub fn incidence(&self, timelines: u64) -> Incidence {
        Incidence::of(timelines, self.hits.iter().copied())
    }

    /// Takes in what a merged branch from `from` (a tree id) reached: the
    /// features of its own messages, the assertions it reached without
    /// satisfying, and whether it found anything new.
    pub fn branch_merged(&mut self, from: usize, reached: &[String], approaches: &[String], fruitful: bool) {
        let mut seen: Vec<Feature> = reached.iter().map(|r| self.feature(r)).collect();
        seen.sort_unstable();
        seen.dedup();
        for f in seen {
            self.hits[f as usize] += 1;
        }
        let approached: Vec<Feature> = approaches.iter().map(|a| self.feature(&format!("id {a}"))).collect();
        if let Some(i) = self.index(from) {
            let n = &mut self.nodes[i];
            n.fruitful += u64::from(fruitful);
            for f in approached {
                if !n.approaches.contains(&f) {
                    n.approaches.push(f);
                }
            }
        }
    }

    /// Whether a branch from `from` may still make a draw point of its
    /// first draw (no other branch from there did).
    pub fn draw_child_wanted(&self, from: usize) -> bool {
        self.index(from).is_some_and(|i| {
            let n = &self.nodes[i];
            !n.has_draw_child && n.draw.is_none() && !n.interval
        })
    }

    /// Adds a snapshot to branch from; `from`: the snapshot its branch
    /// started at. A draw point was armed by `draw_parent` (a snapshot:
    /// `from`, or one the same branch made before it), whose first draw it
    /// is: branches from there do not make it again.
    pub fn add(&mut self, node: NewNode<'_>, from: usize, draw_parent: Option<usize>) {
        let mut features: Vec<Feature> = node.features.iter().map(|f| self.feature(f)).collect();
        let depth = self.index(from).map_or(0, |i| self.nodes[i].depth) + node.novel_stops;
        if let Some(i) = draw_parent.and_then(|p| self.index(p)) {
            self.nodes[i].has_draw_child = true;
            // The draw right after it: as rare as it is.
            if features.is_empty() {
                features = self.nodes[i].features.clone();
            }
        }
        let approaches: Vec<Feature> = node.approaches.iter().map(|a| self.feature(&format!("id {a}"))).collect();
        for w in node.watermarks {
            let f = self.feature(&format!("guidance {w}"));
            self.watermarks.insert(f, node.tree_id);
        }
        let energy = if node.signals > 0 {
            NEW_NODE_ENERGY + ENERGY_PER_SIGNAL * node.signals as f64
        } else if node.draw.is_some() {
            NEW_NODE_ENERGY
        } else {
            INTERVAL_ENERGY
        };
        self.draws.points += u64::from(node.draw.is_some());
        tracing::debug!(
            tree_id = node.tree_id,
            from,
            depth,
            draw = ?node.draw,
            features = ?node.features,
            approaches = ?node.approaches,
            "snapshot to branch from"
        );
        self.nodes.push(Node {
            timeline: node.timeline,
            picks: 0,
            fruitful: 0,
            energy,
            features,
            depth,
            interval: node.interval,
            draw: node.draw.map(|options| DrawPoint { options, next: 0 }),
            has_draw_child: false,
            approaches,
            tree_id: node.tree_id,
        });
    }

    /// The snapshot to evict first among those `evictable` says may go: the
    /// least energy (the oldest first among equals). Removes it from the
    /// schedule and returns its tree id.
    pub fn evict(&mut self, evictable: &dyn Fn(usize) -> bool) -> Option<usize> {
        let i = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| evictable(n.tree_id))
            .min_by(|(i, a), (j, b)| a.energy.total_cmp(&b.energy).then(i.cmp(j)))
            .map(|(i, _)| i)?;
        let node = self.nodes.remove(i);
        self.watermarks.retain(|_, &mut t| t != node.tree_id);
        Some(node.tree_id)
    }

    /// Whether a snapshot (tree id) is one to branch from.
    pub fn holds(&self, tree_id: usize) -> bool {
        self.index(tree_id).is_some()
    }
}

/// A weighted choice, drawing from `stream`.
fn weighted(weights: &[f64], stream: &mut Stream) -> usize {
    debug_assert!(!weights.is_empty() && weights.iter().all(|w| w.is_finite() && *w >= 0.0));
    let total: f64 = weights.iter().sum();
    let mut x = (stream.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
    for (i, &w) in weights.iter().enumerate() {
        if x < w {
            return i;
        }
        x -= w;
    }
    weights.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Point;

    fn timeline() -> Timeline {
        Timeline::at(Point { events: 0, vtime_ns: 0 })
    }

    fn node<'a>(
        tree_id: usize,
        features: &'a [String],
        draw: Option<Option<u64>>,
        approaches: &'a [String],
    ) -> NewNode<'a> {
        NewNode {
            timeline: timeline(),
            tree_id,
            novel_stops: u32::from(!features.is_empty()),
            signals: features.len() as u64,
            features,
            interval: false,
            draw,
            approaches,
            watermarks: &[],
        }
    }

    /// How often each tree id is picked in `n` picks (picks are not merged:
    /// nothing is learned in between).
    fn picks(s: &mut Schedule, n: usize, satisfied: &dyn Fn(&str) -> bool) -> BTreeMap<usize, usize> {
        let mut stream = Stream::new(7, "test");
        let mut counts = BTreeMap::new();
        for _ in 0..n {
            *counts.entry(s.pick(&mut stream, satisfied).tree_id).or_default() += 1;
        }
        counts
    }

    #[test]
    fn a_draw_tries_every_option_in_order_then_its_stream() {
        let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
        let gate = ["assert pass gate 1".to_owned()];
        let next = ["gate 2".to_owned()];
        s.add(node(1, &gate, Some(Some(3)), &next), 0, Some(0));
        let mut stream = Stream::new(1, "test");
        let unsatisfied = |_: &str| false;
        let mut tried = Vec::new();
        for _ in 0..200 {
            let p = s.pick(&mut stream, &|id| !unsatisfied(id) && id != "gate 2");
            if p.tree_id == 1 {
                tried.push(p.draw);
            }
        }
        assert_eq!(&tried[..4], &[Some(0), Some(1), Some(2), None], "options in order, then the stream");
        assert_eq!(s.draws.chosen, 3);
        // Its first draw was made a decision point: the root arms no other.
        assert!(!s.draw_child_wanted(0));
    }

    #[test]
    fn the_untried_draw_before_an_unsatisfied_property_takes_most_branches() {
        let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
        let (g1, g2) = (["assert pass gate 1".to_owned()], ["assert pass gate 2".to_owned()]);
        let (to_g2, to_g3) = (["gate 2".to_owned()], ["gate 3".to_owned()]);
        s.branch_merged(0, &g1, &[], true);
        s.add(node(1, &g1, None, &to_g2), 0, None);
        s.branch_merged(1, &g2, &[], true);
        s.add(node(2, &g2, None, &to_g3), 1, None);
        // The draw right after gate 2, in the branch that opened it.
        s.add(NewNode { novel_stops: 1, ..node(3, &[], Some(None), &to_g3) }, 1, Some(2));
        // Gates 1 and 2 are satisfied; gate 3 is not.
        let counts = picks(&mut s, 10, &|id| id != "gate 3");
        assert!(counts.get(&3).copied().unwrap_or(0) >= 7, "the frontier's draw: {counts:?}");
        // The energy policy makes no decision points of draws.
        let mut e = Schedule::new(Policy::Energy, timeline(), 0);
        e.add(node(1, &g1, None, &to_g2), 0, None);
        let mut stream = Stream::new(1, "test");
        assert!((0..50).all(|_| !e.pick(&mut stream, &|_| false).arm_draw));
    }

    #[test]
    fn rare_features_outweigh_common_ones_and_picks_wear_a_node_out() {
        let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
        let (common, rare) = (["assert pass common".to_owned()], ["assert pass rare".to_owned()]);
        for _ in 0..20 {
            s.branch_merged(0, &common, &[], false);
        }
        s.branch_merged(0, &rare, &[], true);
        // Two snapshots at the same depth: one of a feature twenty
        // timelines reached, one of a feature one timeline reached.
        s.add(node(1, &common, None, &[]), 0, None);
        s.add(node(2, &rare, None, &[]), 0, None);
        let counts = picks(&mut s, 12, &|_| true);
        assert!(counts[&2] > counts.get(&1).copied().unwrap_or(0), "{counts:?}");
        // Picked many times without anything new, it weighs less.
        let n = &s.nodes()[s.index(2).unwrap()];
        assert!(n.picks >= 6 && s.weight(n, &vec![false; s.hits.len()], 0, 1) < 0.3);
    }

    #[test]
    fn the_same_history_picks_the_same_way() {
        let build = || {
            let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
            let f = ["assert pass a".to_owned()];
            s.branch_merged(0, &f, &[], true);
            s.add(node(1, &f, Some(Some(4)), &[]), 0, Some(0));
            s.add(node(2, &[], None, &[]), 1, None);
            s
        };
        let (mut a, mut b) = (build(), build());
        let (mut sa, mut sb) = (Stream::new(3, "explorer"), Stream::new(3, "explorer"));
        for _ in 0..50 {
            let (pa, pb) = (a.pick(&mut sa, &|_| false), b.pick(&mut sb, &|_| false));
            assert_eq!((pa.tree_id, pa.draw, pa.arm_draw), (pb.tree_id, pb.draw, pb.arm_draw));
        }
    }
}
