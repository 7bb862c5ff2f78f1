//! The simulated Ethernet switch every node's NIC is plugged into, inside
//! the VMM: no TAP device, no host network. Frames go from one node's
//! virtio-net to another's on the virtual clock, through the network faults
//! of the run's plan, each decision drawn from the switch's seeded stream.
//!
//! Per frame and destination, in this order: a partition in force drops it;
//! a cut link (connection-cutting burst) drops it, or a new cut starts; the
//! link's correlated-loss state (Gilbert-Elliott) may drop it; independent
//! loss may drop it; otherwise it is delayed by latency plus jitter, held
//! behind a clogged link (or starts a clog), possibly delayed further to be
//! reordered (else kept in order behind the link's previous frame), and
//! possibly duplicated. Every fault that touches a frame is counted.
//!
//! Drawn faults in force (`faults/schedule.rs`) come first, in the order
//! they started: a partition drops the frame, a clog holds it until the
//! fault ends, and faults on a node's links drop, duplicate, reorder or
//! delay frames to and from it. Each counts what it touched.
//!
//! A node without power (crashed, not yet restarted) neither sends nor
//! receives: its frames, and frames in flight to it, are dropped. While
//! faults are paused, frames go straight through.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::clock::Vtime;
use crate::entropy::Stream;
use crate::faults::network::{LinkEffect, NetEpisode, JAM_LIMIT};
use crate::faults::{Landed, NetFaults, Span};

/// The MAC address of node `i`'s NIC.
pub fn mac(node: u16) -> [u8; 6] {
    let [hi, lo] = (node + 1).to_be_bytes();
    [0x52, 0x54, 0x00, 0x00, hi, lo]
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Link {
    clogged_until: u64,
    cut_until: u64,
    /// In the bad state of the correlated-loss model.
    bad: bool,
    /// Delivery time of the link's last in-order frame.
    last: u64,
}

// Tuple-keyed maps serialize as lists of pairs: snapshot headers are JSON.
#[serde_with::serde_as]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Switch {
    nodes: u16,
    faults: NetFaults,
    stream: Stream,
    #[serde_as(as = "Vec<(_, _)>")]
    links: BTreeMap<(u16, u16), Link>,
    /// Frames in flight: (delivery time, sequence) -> (destination, frame).
    #[serde_as(as = "Vec<(_, _)>")]
    in_flight: BTreeMap<(u64, u64), (u16, Vec<u8>)>,
    seq: u64,
    pub landed: Landed,
    pub frames_sent: u64,
    pub frames_delivered: u64,
    /// Unicast frames to a MAC no node has.
    pub unknown_destination: u64,
    /// Nodes without power.
    #[serde(default)]
    down: BTreeSet<u16>,
    /// Frames dropped because their sender or receiver had no power.
    #[serde(default)]
    pub dropped_node_down: u64,
    /// Drawn faults in force, in the order they started.
    #[serde(default)]
    episodes: Vec<NetEpisode>,
    /// Faults are paused: no fault touches a frame.
    #[serde(default)]
    paused: bool,
}

impl Switch {
    /// Bytes of the frames it holds in flight (clogged or delayed), as a
    /// snapshot copies them.
    pub fn held_bytes(&self) -> usize {
        self.in_flight.values().map(|(_, f)| f.len() + std::mem::size_of::<((u64, u64), (u16, Vec<u8>))>()).sum()
    }

    pub fn new(nodes: u16, faults: NetFaults, seed: u64) -> Switch {
        Switch {
            nodes,
            faults,
            stream: Stream::new(seed, "net"),
            links: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            seq: 0,
            landed: Landed::default(),
            frames_sent: 0,
            frames_delivered: 0,
            unknown_destination: 0,
            down: BTreeSet::new(),
            dropped_node_down: 0,
            episodes: Vec::new(),
            paused: false,
        }
    }

    pub fn counters(&self) -> BTreeMap<String, u64> {
        [
            ("frames_sent", self.frames_sent),
            ("frames_delivered", self.frames_delivered),
            ("unknown_destination", self.unknown_destination),
            ("dropped_node_down", self.dropped_node_down),
        ]
        .map(|(k, v)| (k.to_owned(), v))
        .into()
    }

    /// Cuts or restores `node`'s power.
    pub fn set_power(&mut self, node: u16, on: bool) {
        if on {
            self.down.remove(&node);
        } else {
            self.down.insert(node);
        }
    }

    pub fn nodes(&self) -> u16 {
        self.nodes
    }

    /// The nodes without power.
    pub fn down(&self) -> &BTreeSet<u16> {
        &self.down
    }

    /// A drawn fault starts: `effect` applies until `end_ns`.
    pub fn start(&mut self, id: u64, effect: LinkEffect, end_ns: u64) {
        self.episodes.push(NetEpisode { id, effect, end_ns, landed: 0, held: 0 });
    }

    /// The cuts of the drawn clogs in force.
    #[cfg(test)]
    pub(crate) fn clogs(&self) -> Vec<&crate::faults::network::Cut> {
        self.episodes
            .iter()
            .filter_map(|e| match &e.effect {
                LinkEffect::Clog(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// A drawn fault ends; what it touched.
    pub fn end(&mut self, id: u64) -> u64 {
        let i = self.episodes.iter().position(|e| e.id == id).expect("only a fault in force ends");
        self.episodes.remove(i).landed
    }

    /// What the drawn fault `id`, in force, touched so far.
    pub fn episode_landed(&self, id: u64) -> Option<u64> {
        self.episodes.iter().find(|e| e.id == id).map(|e| e.landed)
    }

    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    pub fn set_faults(&mut self, faults: NetFaults) {
        self.faults = faults;
    }

    pub fn reseed(&mut self, seed: u64) {
        self.stream.reseed(seed);
    }

    /// When the next frame is due, if any is in flight.
    pub fn deadline(&self) -> Option<Vtime> {
        self.in_flight.keys().next().map(|&(t, _)| Vtime(t))
    }

    /// Frames due at `now`, in delivery order.
    pub fn due(&mut self, now: Vtime) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(entry) = self.in_flight.first_entry() {
            if entry.key().0 > now.0 {
                break;
            }
            let (dst, frame) = entry.remove();
            if self.down.contains(&dst) {
                self.dropped_node_down += 1;
                continue;
            }
            out.push((dst, frame));
            self.frames_delivered += 1;
        }
        out
    }

    /// Node `src` sends `frame` at `now`.
    pub fn send(&mut self, src: u16, frame: &[u8], now: Vtime) {
        self.frames_sent += 1;
        if self.down.contains(&src) {
            self.dropped_node_down += 1;
            return;
        }
        if frame.len() < 14 {
            return;
        }
        let dst_mac: [u8; 6] = frame[..6].try_into().expect("6 bytes");
        if dst_mac[0] & 1 != 0 {
            // Broadcast or multicast: every other node.
            for dst in (0..self.nodes).filter(|&d| d != src) {
                self.forward(src, dst, frame, now.0);
            }
        } else if let Some(dst) = (0..self.nodes).find(|&d| mac(d) == dst_mac) {
            self.forward(src, dst, frame, now.0);
        } else {
            self.unknown_destination += 1;
        }
    }

    fn span_length(stream: &mut Stream, span: &Span) -> u64 {
        span.duration_ns + if span.jitter_ns > 0 { stream.below(span.jitter_ns + 1) } else { 0 }
    }

    fn forward(&mut self, src: u16, dst: u16, frame: &[u8], now: u64) {
        if self.paused {
            let link = self.links.entry((src, dst)).or_default();
            let at = now.max(link.last);
            link.last = at;
            self.schedule(at, dst, frame.to_vec());
            return;
        }
        // Drawn faults first: what they do to the frame's time and copies.
        let mut extra = 0u64;
        let mut hold_until = 0u64;
        let mut reordered = false;
        let mut copies = 1;
        for e in &mut self.episodes {
            let touches = |nodes: &[u16]| nodes.contains(&src) || nodes.contains(&dst);
            let hit = match &e.effect {
                LinkEffect::Partition(cut) if cut.blocks(src, dst) => {
                    e.landed += 1;
                    self.landed.hit("net.partition");
                    return;
                }
                LinkEffect::Drop { nodes, probability } if touches(nodes) && self.stream.chance(*probability) => {
                    e.landed += 1;
                    self.landed.hit("net.drop");
                    return;
                }
                LinkEffect::Clog(cut) if cut.blocks(src, dst) => {
                    if e.held >= JAM_LIMIT {
                        self.landed.hit("net.clog_overflow");
                        return;
                    }
                    e.held += 1;
                    hold_until = hold_until.max(e.end_ns);
                    Some("net.clog")
                }
                LinkEffect::Slow { cut, delay_ns } if cut.blocks(src, dst) => {
                    extra += delay_ns + self.stream.below(delay_ns + 1);
                    Some("net.slow")
                }
                LinkEffect::BadNode { nodes, probability, delay_ns } if touches(nodes) => {
                    e.landed += 1;
                    self.landed.hit("net.bad_node");
                    if self.stream.chance(*probability) {
                        return;
                    }
                    extra += delay_ns + self.stream.below(delay_ns + 1);
                    None
                }
                LinkEffect::Duplicate { nodes, probability } if touches(nodes) && self.stream.chance(*probability) => {
                    copies = 2;
                    Some("net.duplicate")
                }
                LinkEffect::Reorder { nodes, probability, delay_ns }
                    if touches(nodes) && self.stream.chance(*probability) =>
                {
                    extra += 1 + self.stream.below((*delay_ns).max(1));
                    reordered = true;
                    Some("net.reorder")
                }
                LinkEffect::Latency { nodes, delay_ns } if touches(nodes) => {
                    extra += delay_ns + self.stream.below(delay_ns + 1);
                    Some("net.latency")
                }
                _ => None,
            };
            if let Some(kind) = hit {
                e.landed += 1;
                self.landed.hit(kind);
            }
        }
        let f = &self.faults;
        let s = &mut self.stream;
        let link = self.links.entry((src, dst)).or_default();
        if f.partitions.iter().any(|p| p.blocks(src, dst, now)) {
            self.landed.hit("net.partition");
            return;
        }
        if let Some(cut) = &f.cut {
            if link.cut_until > now {
                self.landed.hit("net.cut");
                return;
            }
            if cut.probability > 0.0 && s.chance(cut.probability) {
                link.cut_until = now + Self::span_length(s, cut);
                self.landed.hit("net.cut");
                return;
            }
        }
        if let Some(b) = &f.burst {
            link.bad = if link.bad { !s.chance(b.leave) } else { s.chance(b.enter) };
            if link.bad && s.chance(b.drop) {
                self.landed.hit("net.burst");
                return;
            }
        }
        if f.drop > 0.0 && s.chance(f.drop) {
            self.landed.hit("net.drop");
            return;
        }
        let (latency, jitter) = f.delay(src, dst);
        let mut at = now + latency;
        if latency > 0 {
            self.landed.hit("net.latency");
        }
        if jitter > 0 {
            at += s.below(jitter + 1);
            self.landed.hit("net.jitter");
        }
        if let Some(clog) = &f.clog {
            if link.clogged_until > now {
                at = at.max(link.clogged_until);
                self.landed.hit("net.clog");
            } else if clog.probability > 0.0 && s.chance(clog.probability) {
                link.clogged_until = now + Self::span_length(s, clog);
                at = at.max(link.clogged_until);
                self.landed.hit("net.clog");
            }
        }
        at = at.saturating_add(extra).max(hold_until);
        if f.reorder > 0.0 && s.chance(f.reorder) {
            at += if f.reorder_ns > 0 { 1 + s.below(f.reorder_ns) } else { 1 };
            self.landed.hit("net.reorder");
        } else if !reordered {
            at = at.max(link.last);
            link.last = at;
        }
        let duplicate = f.duplicate > 0.0 && s.chance(f.duplicate);
        if duplicate {
            self.landed.hit("net.duplicate");
            copies += 1;
        }
        for _ in 0..copies {
            self.schedule(at, dst, frame.to_vec());
        }
    }

    fn schedule(&mut self, at: u64, dst: u16, frame: Vec<u8>) {
        self.in_flight.insert((at, self.seq), (dst, frame));
        self.seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultPlan;

    fn frame(src: u16, dst: u16, n: u32) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&mac(dst));
        f.extend_from_slice(&mac(src));
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&n.to_be_bytes());
        f
    }

    /// Sends `count` frames 0 -> 1, one per microsecond, and drains the switch.
    fn traffic(plan: &str, count: u32) -> (Switch, Vec<(u64, Vec<u8>)>) {
        let faults = FaultPlan::parse(plan, 7, 2).unwrap().network;
        let mut sw = Switch::new(2, faults, 7);
        let mut got = Vec::new();
        for n in 0..count {
            let t = Vtime(u64::from(n) * 1000);
            sw.send(0, &frame(0, 1, n), t);
            got.extend(sw.due(t).into_iter().map(|(d, f)| (d as u64, f)));
        }
        while let Some(t) = sw.deadline() {
            got.extend(sw.due(t).into_iter().map(|(_, f)| (t.0, f)));
        }
        (sw, got)
    }

    #[test]
    fn a_zero_plan_delivers_everything_in_order_untouched() {
        let (sw, got) = traffic("", 500);
        assert_eq!(got.len(), 500);
        for (i, (_, f)) in got.iter().enumerate() {
            assert_eq!(f, &frame(0, 1, i as u32));
        }
        assert!(sw.landed.0.is_empty());
    }

    #[test]
    fn every_network_fault_lands() {
        for (plan, kind) in [
            ("[network]\nlatency = \"1ms\"", "net.latency"),
            ("[network]\njitter = \"1ms\"", "net.jitter"),
            ("[network]\ndrop = 0.2", "net.drop"),
            ("[network]\nduplicate = 0.2", "net.duplicate"),
            ("[network]\nreorder = 0.2\nreorder_delay = \"1ms\"", "net.reorder"),
            ("[network.clog]\nprobability = 0.05\nduration = \"2ms\"", "net.clog"),
            ("[network.cut]\nprobability = 0.05\nduration = \"2ms\"", "net.cut"),
            ("[network.burst]\nenter = 0.1\nleave = 0.3\ndrop = 0.9", "net.burst"),
            ("[[network.partition]]\nstart = \"100us\"\nheal = \"200us\"\ngroups = [[0], [1]]", "net.partition"),
        ] {
            let (sw, got) = traffic(plan, 500);
            assert!(sw.landed.get(kind) > 0, "{kind} did not land");
            let lost = 500 - got.len() as i64;
            match kind {
                "net.drop" | "net.cut" | "net.burst" | "net.partition" => assert!(lost > 0, "{kind}"),
                "net.duplicate" => assert!(lost < 0, "{kind}"),
                _ => assert_eq!(lost, 0, "{kind}"),
            }
        }
    }

    /// Drawn faults in force do what they say to the links they touch,
    /// count what they touched, and a pause lets every frame through.
    #[test]
    fn drawn_faults_touch_their_links_and_a_pause_stops_every_fault() {
        use crate::faults::network::{Cut, LinkEffect};
        let count = |effect: LinkEffect, paused: bool| {
            let mut sw = Switch::new(3, FaultPlan::parse("[network]\ndrop = 0.3", 7, 3).unwrap().network, 7);
            sw.start(1, effect, 1_000_000);
            sw.set_paused(paused);
            for n in 0..200 {
                sw.send(0, &frame(0, 1, n), Vtime(u64::from(n) * 1000));
                sw.send(2, &frame(2, 1, n), Vtime(u64::from(n) * 1000));
            }
            let mut got = Vec::new();
            while let Some(t) = sw.deadline() {
                got.extend(sw.due(t).into_iter().map(|(_, f)| (t.0, f[6..12].to_vec())));
            }
            let from = |n: u16| got.iter().filter(|(_, src)| src[..] == mac(n)).count();
            (from(0), from(2), sw.end(1), got)
        };
        // A partition isolating node 0: its frames are all dropped, node 2's
        // go through the plan's own 30% loss.
        let (a, b, landed, _) = count(LinkEffect::Partition(Cut::Groups(vec![vec![0], vec![1, 2]])), false);
        assert_eq!((a, landed), (0, 200));
        assert!((100..180).contains(&b), "{b}");
        // Paused: no fault at all, not even the plan's.
        let (a, b, landed, _) = count(LinkEffect::Partition(Cut::Groups(vec![vec![0], vec![1, 2]])), true);
        assert_eq!((a, b, landed), (200, 200, 0));
        // A clog holds node 0's frames until the fault ends.
        let (a, _, landed, got) = count(LinkEffect::Clog(Cut::OneWay { from: vec![0], to: vec![1] }), false);
        assert!(a > 100 && landed as usize >= a);
        assert!(got.iter().filter(|(_, src)| src[..] == mac(0)).all(|(t, _)| *t >= 1_000_000));
        // Drop, duplicate, latency on node 2's links only.
        let (_, b, landed, _) = count(LinkEffect::Drop { nodes: vec![2], probability: 1.0 }, false);
        assert_eq!((b, landed), (0, 200));
        let (_, b, landed, _) = count(LinkEffect::Duplicate { nodes: vec![2], probability: 1.0 }, false);
        assert!(b > 200 && landed > 100, "{b} {landed}");
        let (_, _, landed, got) = count(LinkEffect::Latency { nodes: vec![2], delay_ns: 5_000_000 }, false);
        assert!(landed > 100 && got.iter().filter(|(_, src)| src[..] == mac(2)).all(|(t, _)| *t >= 5_000_000));
        // A slowed cut delays what crosses it, and only that.
        let slow = LinkEffect::Slow { cut: Cut::Groups(vec![vec![0], vec![1, 2]]), delay_ns: 5_000_000 };
        let (a, b, landed, got) = count(slow, false);
        assert!(landed == 200 && (100..180).contains(&a) && (100..180).contains(&b), "{a} {b} {landed}");
        let late = |n: u16, at: u64| got.iter().filter(|(t, src)| src[..] == mac(n) && *t >= at).count();
        assert_eq!(late(0, 5_000_000), a, "every frame of node 0 that got through came late");
        assert!(late(2, 5_000_000) < 10, "node 2's frames do not cross the cut");
        // A bad node: every link of node 2 loses and delays frames.
        let bad = LinkEffect::BadNode { nodes: vec![2], probability: 0.5, delay_ns: 5_000_000 };
        let (a, b, landed, got) = count(bad, false);
        assert!((30..110).contains(&b) && landed == 200 && a > 100, "{a} {b} {landed}");
        assert!(got.iter().filter(|(_, src)| src[..] == mac(2)).all(|(t, _)| *t >= 5_000_000));
    }

    /// A clog holds at most JAM_LIMIT frames; the rest are dropped, counted.
    #[test]
    fn a_jammed_link_holds_a_bounded_number_of_frames() {
        use crate::faults::network::{Cut, LinkEffect, JAM_LIMIT};
        let mut sw = Switch::new(2, NetFaults::default(), 7);
        sw.start(1, LinkEffect::Clog(Cut::Groups(vec![vec![0], vec![1]])), 1_000_000_000);
        let sent = JAM_LIMIT as u32 + 100;
        for n in 0..sent {
            sw.send(0, &frame(0, 1, n), Vtime(u64::from(n)));
        }
        // What a snapshot copies counts every frame held, not a guess.
        let held = JAM_LIMIT as usize * frame(0, 1, 0).len();
        assert!((held..2 * held + 64 * JAM_LIMIT as usize).contains(&sw.held_bytes()), "{}", sw.held_bytes());
        let mut got = Vec::new();
        while let Some(t) = sw.deadline() {
            got.extend(sw.due(t).into_iter().map(|_| t.0));
        }
        assert_eq!(got.len() as u64, JAM_LIMIT);
        assert_eq!(sw.held_bytes(), 0);
        assert!(got.iter().all(|&t| t == 1_000_000_000), "delivered together when the jam ends");
        assert_eq!(sw.landed.get("net.clog_overflow"), 100);
    }

    #[test]
    fn partitions_heal_on_schedule_and_reordering_reorders() {
        let (_, got) = traffic("[[network.partition]]\nstart = \"100us\"\nheal = \"200us\"\ngroups = [[0], [1]]", 300);
        let numbers: Vec<u32> = got.iter().map(|(_, f)| u32::from_be_bytes(f[14..18].try_into().unwrap())).collect();
        assert!(numbers.contains(&99) && !numbers.contains(&100) && !numbers.contains(&199) && numbers.contains(&200));
        let (_, got) = traffic("[network]\nreorder = 0.3\nreorder_delay = \"5us\"", 300);
        let numbers: Vec<u32> = got.iter().map(|(_, f)| u32::from_be_bytes(f[14..18].try_into().unwrap())).collect();
        assert!(numbers.windows(2).any(|w| w[0] > w[1]), "some frames overtake others");
    }

    #[test]
    fn links_can_have_their_own_latency() {
        let plan = "[network]\nlatency = \"1ms\"\n[[network.link]]\nfrom = [0]\nto = [1]\nlatency = \"5ms\"";
        let mut sw = Switch::new(3, FaultPlan::parse(plan, 1, 3).unwrap().network, 1);
        sw.send(0, &frame(0, 1, 0), Vtime(0));
        sw.send(1, &frame(1, 0, 0), Vtime(0));
        sw.send(0, &frame(0, 2, 0), Vtime(0));
        let mut times = Vec::new();
        while let Some(t) = sw.deadline() {
            times.extend(sw.due(t).iter().map(|_| t.0));
        }
        assert_eq!(times, [1_000_000, 1_000_000, 5_000_000], "only 0 -> 1 is slow");
    }

    #[test]
    fn a_node_without_power_neither_sends_nor_receives() {
        let plan = "[network]\nlatency = \"1ms\"";
        let mut sw = Switch::new(2, FaultPlan::parse(plan, 1, 2).unwrap().network, 1);
        sw.send(0, &frame(0, 1, 0), Vtime(0));
        sw.set_power(1, false);
        sw.send(1, &frame(1, 0, 1), Vtime(0));
        assert!(sw.due(Vtime(1_000_000)).is_empty(), "in flight to a dead node, and from it");
        assert_eq!(sw.dropped_node_down, 2);
        sw.set_power(1, true);
        sw.send(1, &frame(1, 0, 2), Vtime(2_000_000));
        assert_eq!(sw.due(Vtime(3_000_000)), vec![(0, frame(1, 0, 2))]);
    }

    #[test]
    fn decisions_follow_the_seed() {
        let plan = "[network]\ndrop = 0.3";
        let run = |seed| {
            let mut sw = Switch::new(2, FaultPlan::parse(plan, 1, 2).unwrap().network, seed);
            for n in 0..200 {
                sw.send(0, &frame(0, 1, n), Vtime(u64::from(n)));
            }
            sw.landed.get("net.drop")
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }
}
