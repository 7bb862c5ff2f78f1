//! Network faults: what a plan's `[network]` section resolves to (rates and
//! link delays for the whole run, partitions at fixed times), and what a
//! drawn network fault does to the links while it lasts. The switch
//! (`switch.rs`) applies both to every frame.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A temporary condition on a link: starts with `probability` per packet,
/// lasts `duration_ns` plus up to `jitter_ns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Span {
    pub probability: f64,
    pub duration_ns: u64,
    pub jitter_ns: u64,
}

/// Correlated loss (Gilbert-Elliott): a link moves between a good and a bad
/// state; in the bad state packets drop with probability `drop`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub enter: f64,
    pub leave: f64,
    pub drop: f64,
}

/// Which links a partition (or clog) cuts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Cut {
    /// No traffic between nodes of different groups.
    Groups(Vec<Vec<u16>>),
    /// No traffic from `from` to `to` (the reverse direction flows).
    OneWay { from: Vec<u16>, to: Vec<u16> },
    /// No traffic between the nodes of each pair, either way (a ring of
    /// overlapping majorities cuts each node from those far from it).
    Pairs(Vec<(u16, u16)>),
}

impl Cut {
    /// Whether this cut stops a frame from `src` to `dst`.
    pub fn blocks(&self, src: u16, dst: u16) -> bool {
        match self {
            Cut::Groups(groups) => {
                let group = |n: u16| groups.iter().position(|g| g.contains(&n));
                matches!((group(src), group(dst)), (Some(a), Some(b)) if a != b)
            }
            Cut::OneWay { from, to } => from.contains(&src) && to.contains(&dst),
            Cut::Pairs(pairs) => pairs.iter().any(|&(a, b)| (a, b) == (src, dst) || (b, a) == (src, dst)),
        }
    }

    /// Every node the cut names.
    pub fn nodes(&self) -> Vec<u16> {
        let mut all: Vec<u16> = match self {
            Cut::Groups(groups) => groups.iter().flatten().copied().collect(),
            Cut::OneWay { from, to } => from.iter().chain(to).copied().collect(),
            Cut::Pairs(pairs) => pairs.iter().flat_map(|&(a, b)| [a, b]).collect(),
        };
        all.sort_unstable();
        all.dedup();
        all
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub start_ns: u64,
    pub heal_ns: u64,
    pub cut: Cut,
}

impl Partition {
    /// Whether a packet from `src` to `dst` sent at `t` is cut off.
    pub fn blocks(&self, src: u16, dst: u16, t: u64) -> bool {
        (self.start_ns..self.heal_ns).contains(&t) && self.cut.blocks(src, dst)
    }
}

/// Latency and jitter of the links from `from` to `to`, instead of the
/// network-wide values (the last matching entry wins).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkDelay {
    pub from: Vec<u16>,
    pub to: Vec<u16>,
    pub latency_ns: u64,
    pub jitter_ns: u64,
}

/// A plan's network faults, resolved.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetFaults {
    pub latency_ns: u64,
    pub jitter_ns: u64,
    pub links: Vec<LinkDelay>,
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub reorder_ns: u64,
    pub clog: Option<Span>,
    pub cut: Option<Span>,
    pub burst: Option<Burst>,
    pub partitions: Vec<Partition>,
}

impl NetFaults {
    /// Latency and jitter of the link from `src` to `dst`.
    pub fn delay(&self, src: u16, dst: u16) -> (u64, u64) {
        self.links
            .iter()
            .rev()
            .find(|l| l.from.contains(&src) && l.to.contains(&dst))
            .map_or((self.latency_ns, self.jitter_ns), |l| (l.latency_ns, l.jitter_ns))
    }
}

/// What a drawn network fault does to frames while it lasts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum LinkEffect {
    /// Frames across the cut are dropped (a partition).
    Partition(Cut),
    /// Frames across the cut are held until the fault ends (a clog: a
    /// jammed link), at most [`JAM_LIMIT`] of them; more are dropped.
    Clog(Cut),
    /// Frames across the cut are delayed by `delay_ns` more (each frame up
    /// to twice that): a slowed link.
    Slow { cut: Cut, delay_ns: u64 },
    /// Every link of `nodes` is bad at once: frames to or from them are
    /// dropped with `probability`, and the rest delayed by `delay_ns` more
    /// (up to twice that).
    BadNode { nodes: Vec<u16>, probability: f64, delay_ns: u64 },
    /// Frames to or from `nodes` are dropped with `probability`.
    Drop { nodes: Vec<u16>, probability: f64 },
    /// ... duplicated with `probability`.
    Duplicate { nodes: Vec<u16>, probability: f64 },
    /// ... delayed by up to `delay_ns` more with `probability`, out of order.
    Reorder { nodes: Vec<u16>, probability: f64, delay_ns: u64 },
    /// ... delayed by `delay_ns` more (each frame up to twice that).
    Latency { nodes: Vec<u16>, delay_ns: u64 },
}

/// The most frames one clog holds: a switch's buffer is finite. Frames
/// beyond it are dropped and counted (`net.clog_overflow`).
pub const JAM_LIMIT: u64 = 4096;

/// A drawn network fault in force at the switch, and what it touched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetEpisode {
    /// The fault's number in its timeline (see `schedule.rs`).
    pub id: u64,
    pub effect: LinkEffect,
    /// When it ends: a clog holds frames until then.
    pub end_ns: u64,
    pub landed: u64,
    /// A clog: the frames it holds (or held), up to [`JAM_LIMIT`].
    #[serde(default)]
    pub held: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_stop_what_they_name() {
        let groups = Cut::Groups(vec![vec![0], vec![1, 2]]);
        assert!(groups.blocks(0, 1) && groups.blocks(2, 0) && !groups.blocks(1, 2) && !groups.blocks(3, 0));
        let one_way = Cut::OneWay { from: vec![0], to: vec![1] };
        assert!(one_way.blocks(0, 1) && !one_way.blocks(1, 0));
        let pairs = Cut::Pairs(vec![(0, 2)]);
        assert!(pairs.blocks(0, 2) && pairs.blocks(2, 0) && !pairs.blocks(0, 1));
        assert_eq!(pairs.nodes(), [0, 2]);
        let p = Partition { start_ns: 10, heal_ns: 20, cut: groups };
        assert!(!p.blocks(0, 1, 9) && p.blocks(0, 1, 10) && !p.blocks(0, 1, 20));
    }
}
