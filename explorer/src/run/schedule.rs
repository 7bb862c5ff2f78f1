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
//!   [`SMALL_VALUES`] — and then the branch's own stream. A branch from a
//!   draw point with a lead (known or guessed) also takes its other untried
//!   values, to give inside its timeline when its first leads nowhere
//!   (`steer.rs`).
//!
//! - **energy**, the explorer before this module: a new snapshot gets 1 + 2
//!   × its new signals, × 0.8 per pick; draws are not decision points.
//!   Kept to measure the rarity policy against (`hvsim bench explore`).
//!
//! Every choice depends only on what the exploration merged (and the
//! explorer's seeded stream), never on workers or timing.

use std::collections::{BTreeMap, BTreeSet};

use hvsim_vmm::entropy::Stream;
use serde::{Deserialize, Serialize};

use crate::record::coverage::FreshBits;
use crate::record::discovery::Incidence;
use crate::record::exploration::{DrawTally, Policy};
use crate::record::timeline::Timeline;
use crate::run::steer::{FirstDraw, Lead, Process};

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
/// Untried values of its draw point a branch may give inside its timeline,
/// after its first (`steer.rs`): all it has (those it does not reach come
/// back to the point), so that one branch can try them all and, on the way,
/// teach draw points further on the way to them (`learn_leads`).
const RETRY_VALUES: u64 = SMALL_VALUES;
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawPoint {
    /// How many outcomes the program makes of the value, if its SDK said.
    pub options: Option<u64>,
    /// The next value to try (`0, 1, ...`).
    pub next: u64,
    /// Values a branch took to try inside its timeline and did not reach
    /// (`steer.rs`): tried first.
    #[serde(default)]
    pub returned: Vec<u64>,
    /// The values that open the way here, oldest first: known, guessed,
    /// or not (`steer.rs`).
    #[serde(default)]
    pub lead: Option<Lead>,
}

impl DrawPoint {
    /// The value the next branch from here takes, if any is left to try.
    fn untried(&self) -> Option<u64> {
        self.returned
            .first()
            .copied()
            .or_else(|| (self.next < self.options.map_or(SMALL_VALUES, |n| n.min(SMALL_VALUES))).then_some(self.next))
    }

    /// The decision it is, where its way is known: a process's draw after
    /// the same values drawn, whichever snapshot stands at it.
    fn decision(&self) -> Option<Decision> {
        self.lead.as_ref().filter(|l| l.exact).map(|l| (l.process, l.values.clone()))
    }

    /// Takes the next untried value.
    fn take(&mut self) -> Option<u64> {
        let v = self.untried()?;
        if self.returned.first() == Some(&v) {
            self.returned.remove(0);
        } else {
            self.next += 1;
        }
        Some(v)
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
    /// The draw point a branch from here made of its first draw (tree id).
    draw_child: Option<usize>,
    /// Assertions (features of their ids) that timelines from here
    /// reached without satisfying.
    approaches: Vec<Feature>,
    /// The process whose message was new here, or the last to speak before
    /// (`steer.rs`), if named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    novel_by: Option<u32>,
    /// Every feature its timeline reached on the way here, sorted: what a
    /// branch from here reaches again is not new to its timeline.
    #[serde(skip)]
    reached: Vec<Feature>,
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
    /// For a draw: the way to it, known or guessed (`steer.rs`).
    pub lead: Option<Lead>,
    /// Assertions the rest of the branch reached without satisfying.
    pub approaches: &'a [String],
    /// Features its branch reached up to it.
    pub reached: &'a [String],
    /// Guidance whose best value was reached here.
    pub watermarks: &'a [String],
    /// The process whose message was new here, or the last to speak
    /// before, if named.
    pub novel_by: Option<u32>,
}

/// Where the next branch starts.
#[derive(Clone, Debug)]
pub(crate) struct Pick {
    pub tree_id: usize,
    pub timeline: Timeline,
    /// The value its draw takes (a draw point with values left to try).
    pub draw: Option<u64>,
    /// Whether its first draw is to be a decision point, and whose.
    pub first_draw: FirstDraw,
    /// With a value: the way to the draw, if known or guessed, and the
    /// draw's untried values the branch may give inside its timeline after
    /// the first (`steer.rs`).
    pub lead: Option<Lead>,
    pub values: Vec<u64>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    policy: Policy,
    nodes: Vec<Node>,
    /// Interned features: assertion states (`pass`/`fail` hits), guidance,
    /// and assertion ids (for approaches).
    names: BTreeMap<String, Feature>,
    /// Per feature: timelines whose own branch reached it (rarity).
    hits: Vec<u64>,
    /// Per feature and per coverage edge (bit in the guest's map):
    /// timelines whose own branch reached it when the way to the branch's
    /// start had not. One meaning for both, what the discovery estimates
    /// count (`discovery.rs`): a coverage map only shows an edge's first
    /// reach, so a feature reached again is not counted either.
    new_hits: Vec<u64>,
    edge_hits: BTreeMap<u32, u64>,
    /// Per guidance: the snapshot (tree id) where its best value was reached.
    watermarks: BTreeMap<Feature, usize>,
    /// What draws did: for the report.
    pub draws: DrawTally,
    /// Per decision, the values branches took there (given back when not
    /// reached): one tried at a snapshot is not tried again at another
    /// that stands at the same decision.
    tried: BTreeMap<Decision, BTreeSet<u64>>,
}

/// A draw by its way (`steer.rs`): the process, and the values it drew on
/// the way, known exactly.
type Decision = (Process, Vec<u64>);

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
            draw_child: None,
            approaches: Vec::new(),
            novel_by: None,
            reached: Vec::new(),
            tree_id,
        };
        Schedule { policy, nodes: vec![root], ..Schedule::default() }
    }

    /// Takes in the features reached before the root (during setup).
    pub fn reached_before_root(&mut self, reached: &[String]) {
        let prefix = self.features_of(reached);
        self.nodes[0].reached = prefix;
    }

    /// Takes in the process that said setup complete: the root's first
    /// draw is its.
    pub fn set_up_by(&mut self, process: Process) {
        self.nodes[0].novel_by = process;
    }

    /// The features named, sorted, once each.
    fn features_of(&mut self, names: &[String]) -> Vec<Feature> {
        let mut fs: Vec<Feature> = names.iter().map(|r| self.feature(r)).collect();
        fs.sort_unstable();
        fs.dedup();
        fs
    }

    fn reached_at(&self, tree_id: usize) -> &[Feature] {
        self.index(tree_id).map_or(&[], |i| &self.nodes[i].reached)
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
        self.new_hits.push(0);
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
            Policy::Rarity | Policy::RarityOneValue | Policy::Bandit => {
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
        let (draw, lead, values) = self.take_values(i);
        let n = &self.nodes[i];
        // Not after interval snapshots: there are many, each much like the
        // others, and their draws would be as many decision points.
        let first_draw = if policy.draws() && n.draw.is_none() && n.draw_child.is_none() && !n.interval {
            FirstDraw::Armed(n.novel_by)
        } else {
            FirstDraw::Unarmed
        };
        self.draws.chosen += u64::from(draw.is_some());
        Pick { tree_id: n.tree_id, timeline: n.timeline.clone(), draw, first_draw, lead, values }
    }

    /// The value a branch from node `i` takes at its draw point, if it
    /// stands at one with values left, with the way there and the values
    /// to give inside its timeline.
    fn take_values(&mut self, i: usize) -> (Option<u64>, Option<Lead>, Vec<u64>) {
        let Some(d) = self.nodes[i].draw.as_mut() else { return (None, None, Vec::new()) };
        // Values another snapshot at the same decision tried are passed
        // over.
        let tried = d.decision().map(|k| self.tried.entry(k).or_default());
        // Only along a way, known or guessed (`steer.rs`).
        let more = if self.policy.steers() && d.lead.is_some() { RETRY_VALUES } else { 0 };
        let lead = d.lead.clone();
        let mut take = || loop {
            let v = d.take()?;
            if !tried.as_ref().is_some_and(|t| t.contains(&v)) {
                return Some(v);
            }
        };
        let Some(v) = take() else { return (None, None, Vec::new()) };
        let values: Vec<u64> = (0..more).map_while(|_| take()).collect();
        if let Some(t) = tried {
            t.insert(v);
            t.extend(&values);
        }
        (Some(v), lead, values)
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
        let freshness = match n.draw.as_ref().and_then(DrawPoint::untried) {
            Some(_) if n.fruitful == 0 && (approaching || (n.depth == deepest && !n.features.is_empty())) => DRAW_BONUS,
            _ => DECAY.powi(n.picks.min(1000) as i32).max(MIN_FRESHNESS),
        };
        // Where a branch gives values inside its timeline (`steer.rs`), a
        // snapshot whose first draw is a point with values left hands it
        // most of its weight: a branch from here would re-roll that draw
        // at random, which the point tries in order, several at a time.
        let handed_on = self.policy.steers()
            && n.draw_child
                .and_then(|t| self.index(t))
                .is_some_and(|c| self.nodes[c].draw.as_ref().and_then(DrawPoint::untried).is_some());
        rarity * guidance * freshness / if handed_on { DRAW_BONUS } else { 1.0 }
    }

    /// Each feature's count of timelines that reached it, over `timelines`
    /// merged branches: what the discovery estimates go by.
    pub fn incidence(&self, timelines: u64) -> Incidence {
        Incidence::of(timelines, self.new_hits.iter().chain(self.edge_hits.values()).copied())
    }

    /// Takes in the coverage edges a merged branch reached that its
    /// timeline had not reached before it.
    pub fn edges_reached(&mut self, edges: &FreshBits) {
        for e in edges.edges() {
            *self.edge_hits.entry(e).or_default() += 1;
        }
    }

    /// Takes in what a merged branch from `from` (a tree id) reached: the
    /// features of its own messages, the assertions it reached without
    /// satisfying, and whether it found anything new.
    pub fn branch_merged(&mut self, from: usize, reached: &[String], approaches: &[String], fruitful: bool) {
        let seen = self.features_of(reached);
        let before = self.reached_at(from).to_vec();
        for f in seen {
            self.hits[f as usize] += 1;
            if before.binary_search(&f).is_err() {
                self.new_hits[f as usize] += 1;
            }
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

    /// Gives back to the draw point at `tree_id` values a branch took to
    /// try inside its timeline and did not reach (`steer.rs`).
    pub fn give_back(&mut self, tree_id: usize, values: &[u64]) {
        let Some(d) = self.index(tree_id).and_then(|i| self.nodes[i].draw.as_mut()) else { return };
        if let Some(t) = d.decision().and_then(|k| self.tried.get_mut(&k)) {
            t.retain(|v| !values.contains(v));
        }
        d.returned.extend_from_slice(values);
        d.returned.sort_unstable();
        d.returned.dedup();
    }

    /// A timeline reached `reached` (features) along `way`, an exact way
    /// (`steer.rs`): draw points of the same process that stand right
    /// after one of those features, their lead not known yet (or guessed),
    /// learn it.
    pub fn learn_leads(&mut self, reached: &[String], way: &Lead) {
        assert!(way.exact, "only an exact way is learned");
        let reached: Vec<Feature> = reached.iter().filter_map(|r| self.names.get(r).copied()).collect();
        for n in &mut self.nodes {
            let Some(d) = n.draw.as_mut() else { continue };
            let learns = match &d.lead {
                Some(l) => !l.exact && l.process == way.process,
                None => true,
            };
            if learns && n.features.iter().any(|f| reached.contains(f)) {
                tracing::debug!(tree_id = n.tree_id, ?way, "a draw point learns its lead");
                d.lead = Some(way.clone());
            }
        }
    }

    /// Whether a branch from `from` may still make a draw point of its
    /// first draw (no other branch from there did).
    pub fn draw_child_wanted(&self, from: usize) -> bool {
        self.index(from).is_some_and(|i| {
            let n = &self.nodes[i];
            n.draw_child.is_none() && n.draw.is_none() && !n.interval
        })
    }

    /// Adds a snapshot to branch from; `from`: the snapshot its branch
    /// started at. A draw point was armed by `draw_parent` (a snapshot:
    /// `from`, or one the same branch made before it), whose first draw it
    /// is: branches from there do not make it again.
    pub fn add(&mut self, node: NewNode<'_>, from: usize, draw_parent: Option<usize>) {
        let mut features: Vec<Feature> = node.features.iter().map(|f| self.feature(f)).collect();
        let mut reached = self.features_of(node.reached);
        reached.extend_from_slice(self.reached_at(from));
        reached.sort_unstable();
        reached.dedup();
        let depth = self.index(from).map_or(0, |i| self.nodes[i].depth) + node.novel_stops;
        if let Some(i) = draw_parent.and_then(|p| self.index(p)) {
            self.nodes[i].draw_child = Some(node.tree_id);
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
            lead = ?node.lead,
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
            draw: node.draw.map(|options| DrawPoint { options, next: 0, returned: Vec::new(), lead: node.lead }),
            draw_child: None,
            approaches,
            novel_by: node.novel_by,
            reached,
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
    use crate::record::timeline::Point;

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
            lead: Some(Lead { values: Vec::new(), exact: true, process: None }),
            approaches,
            watermarks: &[],
            novel_by: None,
            reached: features,
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
                tried.push((p.draw, p.values));
                if tried.len() == 1 {
                    // The branch reached 1 inside its timeline, not 2.
                    s.give_back(1, &[2]);
                }
            }
        }
        let expected = [(Some(0), vec![1, 2]), (Some(2), vec![]), (None, vec![])];
        assert_eq!(&tried[..3], &expected, "options in order (the rest to try inside the timeline), then the stream");
        assert_eq!(s.draws.chosen, 2);
        // Its first draw was made a decision point: the root arms no other.
        assert!(!s.draw_child_wanted(0));
    }

    #[test]
    fn coverage_edges_count_among_the_features_of_the_estimates() {
        let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
        let map = |bytes: &[(usize, u8)]| {
            let mut m = vec![0u8; 16];
            for &(i, b) in bytes {
                m[i] = b;
            }
            FreshBits::of_map(&m)
        };
        // Three timelines: edge 0 in all (before the root), 9 in two, 10 and
        // 17 in one each.
        assert_eq!(map(&[(1, 0b110)]).edges().collect::<Vec<_>>(), [9, 10]);
        s.edges_reached(&map(&[(0, 1), (1, 0b110)]));
        s.edges_reached(&map(&[(0, 1), (1, 0b010)]));
        s.edges_reached(&map(&[(0, 1), (2, 0b10)]));
        let i = s.incidence(3);
        assert_eq!((i.observed, i.singletons, i.doubletons), (4, 2, 1), "{i:?}");
    }

    #[test]
    fn a_snapshot_hands_its_weight_to_its_draw_point_while_it_has_values() {
        for (policy, handed) in [(Policy::Rarity, true), (Policy::RarityOneValue, false)] {
            let mut s = Schedule::new(policy, timeline(), 0);
            let g1 = ["assert pass gate 1".to_owned()];
            s.branch_merged(0, &g1, &[], true);
            s.add(node(1, &g1, None, &[]), 0, None);
            s.add(NewNode { novel_stops: 0, ..node(2, &[], Some(Some(2)), &[]) }, 0, Some(1));
            let weights = |s: &Schedule| {
                let deepest = s.nodes.iter().map(|n| n.depth).max().unwrap();
                s.nodes.iter().map(|n| s.weight(n, &[], 0, deepest)).collect::<Vec<f64>>()
            };
            let before = weights(&s);
            // The point's values run out: the snapshot has its weight back.
            let mut stream = Stream::new(1, "test");
            while s.nodes[2].draw.as_ref().and_then(DrawPoint::untried).is_some() {
                let mut n = s.clone();
                let p = n.pick(&mut stream, &|_| true);
                if p.tree_id == 2 {
                    s = n;
                }
            }
            let after = weights(&s);
            assert_eq!(before[1] * DRAW_BONUS == after[1], handed, "{policy:?}: {before:?} then {after:?}");
        }
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
        // Gates 1 and 2 are satisfied; gate 3 is not. Each branch from the
        // draw reaches none of the values it took to try in its timeline.
        let mut stream = Stream::new(7, "test");
        let mut counts = BTreeMap::<usize, usize>::new();
        for _ in 0..10 {
            let p = s.pick(&mut stream, &|id| id != "gate 3");
            *counts.entry(p.tree_id).or_default() += 1;
            s.give_back(p.tree_id, &p.values);
        }
        assert!(counts.get(&3).copied().unwrap_or(0) >= 7, "the frontier's draw: {counts:?}");
        // The energy policy makes no decision points of draws.
        let mut e = Schedule::new(Policy::Energy, timeline(), 0);
        e.add(node(1, &g1, None, &to_g2), 0, None);
        let mut stream = Stream::new(1, "test");
        assert!((0..50).all(|_| e.pick(&mut stream, &|_| false).first_draw == FirstDraw::Unarmed));
    }

    #[test]
    fn two_snapshots_at_the_same_decision_share_the_values_tried() {
        let way = |values: Vec<u64>, exact| Lead { values, exact, process: Some(3) };
        let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
        let f = ["assert pass a".to_owned()];
        // Three snapshots at process 3's draw of 8 options: two after it
        // drew 5 (known), one where that is only a guess.
        for (tree_id, lead) in [(1, way(vec![5], true)), (2, way(vec![5], true)), (3, way(vec![5], false))] {
            s.add(NewNode { lead: Some(lead), ..node(tree_id, &f, Some(Some(8)), &[]) }, 0, Some(0));
        }
        let at = |s: &Schedule, tree_id| s.index(tree_id).unwrap();
        let first = s.take_values(at(&s, 1));
        assert_eq!((first.0, &first.2[..]), (Some(0), &[1, 2, 3, 4, 5, 6, 7][..]), "the first takes all, in order");
        // Its timeline reached 1 and 2 of the values it gave inside: the
        // rest are given back, untried.
        s.give_back(1, &[3, 4, 5, 6, 7]);
        let second = s.take_values(at(&s, 2));
        assert_eq!(
            (second.0, &second.2[..]),
            (Some(3), &[4, 5, 6, 7][..]),
            "0, 1 and 2 were tried at the same decision"
        );
        assert_eq!(s.take_values(at(&s, 3)).0, Some(0), "a guessed way is no known decision: its values are its own");
        // Every value was tried at the decision: the first point, its own
        // values given back, has none left to take.
        assert_eq!(s.take_values(at(&s, 1)), (None, None, Vec::new()));
    }

    #[test]
    fn a_snapshot_arms_the_first_draw_of_the_process_that_made_it_new() {
        let mut s = Schedule::new(Policy::Rarity, timeline(), 0);
        let (by_7, by_none) = (["assert pass seven".to_owned()], ["assert pass anyone".to_owned()]);
        s.add(NewNode { novel_by: Some(7), ..node(1, &by_7, None, &[]) }, 0, None);
        s.add(node(2, &by_none, None, &[]), 0, None);
        s.add(NewNode { interval: true, novel_by: Some(7), ..node(3, &[], None, &[]) }, 0, None);
        let mut stream = Stream::new(5, "test");
        let mut seen = BTreeMap::new();
        for _ in 0..60 {
            let p = s.pick(&mut stream, &|_| true);
            seen.insert(p.tree_id, p.first_draw);
        }
        let expected = [
            (1, FirstDraw::Armed(Some(7))),
            (2, FirstDraw::Armed(None)),
            // Intervals are many and alike: their draws are no decision points.
            (3, FirstDraw::Unarmed),
        ];
        for (tree_id, first_draw) in expected {
            assert_eq!(seen.get(&tree_id), Some(&first_draw), "node {tree_id}: {seen:?}");
        }
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
            assert_eq!((pa.tree_id, pa.draw, pa.first_draw), (pb.tree_id, pb.draw, pb.first_draw));
        }
    }
}
