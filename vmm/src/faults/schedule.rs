//! The per-timeline fault schedule: the faults a plan's `[[draw]]` rules let
//! a timeline draw, as opposed to those the plan writes down.
//!
//! Each rule is a generator: a kind of fault, how often one starts (a gap
//! drawn from `every` after the previous one's start), how long it lasts,
//! and whom it may hit (a target selector drawn per fault). Everything is
//! drawn from the schedule's own stream, `fault-draw`, which a branch
//! re-seeds: the faults in force at a snapshot carry on in every branch of
//! it to their drawn ends (a partition heals, a crashed node restarts), and
//! each branch draws what comes after from its own seed, so two branches
//! of one snapshot suffer different faults at different times. Faults may
//! overlap.
//!
//! **Swarm testing.** A line of descent switches on a random half of the
//! rules (at least one) at its first branch from the root, and its
//! descendants inherit the choice: a timeline with partitions only can find
//! what one with every fault at once drowns. Before that first branch (the
//! root, `hvsim run`) every rule is on.
//!
//! **Arming.** Nothing is drawn until the schedule is armed: when the guest
//! reports setup complete (or at the run's start with `before_setup`).
//!
//! **Pausing.** The guest can pause every fault for a while (see
//! `control.rs`): the faults in force end at once (the network heals,
//! crashed nodes come back), explicit faults hold off too, and drawn ones
//! resume by themselves when the pause ends.
//!
//! What struck is kept (`struck`): kind, times, effect and what it touched,
//! so a bug record holds the schedule that led to it.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::clock::ClockChange;
use super::disk::DiskEffect;
use super::network::{Cut, LinkEffect};
use super::node::NodeAction;
use crate::entropy::Stream;

/// The kinds of fault a rule may draw: every fault hvsim has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrawnKind {
    Partition,
    Clog,
    Drop,
    Duplicate,
    Reorder,
    Latency,
    ReadError,
    WriteError,
    Corrupt,
    Misdirect,
    Stall,
    LyingFlush,
    Enospc,
    Crash,
    Pause,
    Kill,
    Stop,
    Hang,
    Wipe,
    Bump,
    Strobe,
    Drift,
    Custom,
    Slow,
    BadNode,
}

impl DrawnKind {
    pub const ALL: [DrawnKind; 25] = [
        DrawnKind::Partition,
        DrawnKind::Clog,
        DrawnKind::Drop,
        DrawnKind::Duplicate,
        DrawnKind::Reorder,
        DrawnKind::Latency,
        DrawnKind::ReadError,
        DrawnKind::WriteError,
        DrawnKind::Corrupt,
        DrawnKind::Misdirect,
        DrawnKind::Stall,
        DrawnKind::LyingFlush,
        DrawnKind::Enospc,
        DrawnKind::Crash,
        DrawnKind::Pause,
        DrawnKind::Kill,
        DrawnKind::Stop,
        DrawnKind::Hang,
        DrawnKind::Wipe,
        DrawnKind::Bump,
        DrawnKind::Strobe,
        DrawnKind::Drift,
        DrawnKind::Custom,
        DrawnKind::Slow,
        DrawnKind::BadNode,
    ];

    /// As a plan writes it.
    pub fn name(self) -> &'static str {
        match self {
            DrawnKind::Partition => "partition",
            DrawnKind::Clog => "clog",
            DrawnKind::Drop => "drop",
            DrawnKind::Duplicate => "duplicate",
            DrawnKind::Reorder => "reorder",
            DrawnKind::Latency => "latency",
            DrawnKind::ReadError => "read_error",
            DrawnKind::WriteError => "write_error",
            DrawnKind::Corrupt => "corrupt",
            DrawnKind::Misdirect => "misdirect",
            DrawnKind::Stall => "stall",
            DrawnKind::LyingFlush => "lying_flush",
            DrawnKind::Enospc => "enospc",
            DrawnKind::Crash => "crash",
            DrawnKind::Pause => "pause",
            DrawnKind::Kill => "kill",
            DrawnKind::Stop => "stop",
            DrawnKind::Hang => "hang",
            DrawnKind::Wipe => "wipe",
            DrawnKind::Bump => "bump",
            DrawnKind::Strobe => "strobe",
            DrawnKind::Drift => "drift",
            DrawnKind::Custom => "custom",
            DrawnKind::Slow => "slow",
            DrawnKind::BadNode => "bad_node",
        }
    }

    pub fn parse(name: &str) -> Option<DrawnKind> {
        DrawnKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Its name in landing evidence (shared with the plan's fixed faults).
    pub fn landing(self) -> &'static str {
        match self {
            DrawnKind::Partition => "net.partition",
            DrawnKind::Clog => "net.clog",
            DrawnKind::Drop => "net.drop",
            DrawnKind::Duplicate => "net.duplicate",
            DrawnKind::Reorder => "net.reorder",
            DrawnKind::Latency => "net.latency",
            DrawnKind::Crash => "node.crash",
            DrawnKind::Pause => "node.pause",
            DrawnKind::Kill => "node.kill",
            DrawnKind::Stop => "node.stop",
            DrawnKind::Hang => "node.hang",
            DrawnKind::Wipe => "node.wipe",
            DrawnKind::Bump => "clock.bump",
            DrawnKind::Strobe => "clock.strobe",
            DrawnKind::Drift => "clock.drift",
            DrawnKind::Custom => "node.custom",
            DrawnKind::Slow => "net.slow",
            DrawnKind::BadNode => "net.bad_node",
            k => k.disk_effect(0).expect("the rest are disk kinds").landing(),
        }
    }

    /// A cut between groups of nodes (rather than faults on a set of them).
    pub fn cuts(self) -> bool {
        matches!(self, DrawnKind::Partition | DrawnKind::Clog | DrawnKind::Slow)
    }

    /// Per packet or request, with a probability drawn per fault.
    pub fn has_probability(self) -> bool {
        matches!(self, DrawnKind::Drop | DrawnKind::Duplicate | DrawnKind::Reorder | DrawnKind::BadNode)
            || self.disk_effect(0).is_some_and(|e| e != DiskEffect::Enospc)
    }

    /// A fault of processes or power, which only a node that has power
    /// suffers.
    pub fn needs_power(self) -> bool {
        matches!(
            self,
            DrawnKind::Crash | DrawnKind::Pause | DrawnKind::Kill | DrawnKind::Stop | DrawnKind::Hang | DrawnKind::Wipe
        )
    }

    /// A fault of the machine's clock rate, which every node shares
    /// (`faults/clock.rs`).
    pub fn machine_wide(self) -> bool {
        self == DrawnKind::Drift
    }

    /// With a delay drawn per fault: added latency, the reorder window, the
    /// stall.
    pub fn has_delay(self) -> bool {
        matches!(
            self,
            DrawnKind::Latency | DrawnKind::Reorder | DrawnKind::Stall | DrawnKind::Slow | DrawnKind::BadNode
        )
    }

    /// What a disk kind does, with `delay_ns` for a stall.
    pub fn disk_effect(self, delay_ns: u64) -> Option<DiskEffect> {
        Some(match self {
            DrawnKind::ReadError => DiskEffect::ReadError,
            DrawnKind::WriteError => DiskEffect::WriteError,
            DrawnKind::Corrupt => DiskEffect::Corrupt,
            DrawnKind::Misdirect => DiskEffect::Misdirect,
            DrawnKind::Stall => DiskEffect::Stall { stall_ns: delay_ns },
            DrawnKind::LyingFlush => DiskEffect::LyingFlush,
            DrawnKind::Enospc => DiskEffect::Enospc,
            _ => return None,
        })
    }
}

/// Whom a drawn fault hits, among the nodes its rule allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    /// One node (a cut: it against the rest).
    One,
    /// A strict minority, (n-1)/2 nodes (at least one).
    Minority,
    /// A majority, n/2+1 nodes.
    Majority,
    /// Every node (not for cuts).
    All,
    /// A random split into this many groups (cuts only).
    Split(u16),
    /// A ring of overlapping majorities: each node reaches those near it on
    /// a random ring, a majority, and no two the same one (cuts only).
    Ring,
    /// These nodes (a cut: them against the rest).
    Nodes(Vec<u16>),
    /// These groups (cuts only).
    Groups(Vec<Vec<u16>>),
}

/// One kind of fault a timeline may draw, and its ranges (`[min, max]`,
/// drawn uniformly per fault).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub kind: DrawnKind,
    /// From one fault's start to the next's.
    pub every_ns: [u64; 2],
    pub duration_ns: [u64; 2],
    /// One is drawn per fault.
    pub targets: Vec<Selector>,
    /// The nodes it may hit; every node if empty.
    pub among: Vec<u16>,
    /// Cuts: the chance that one is one-way (the targets cannot send to
    /// the rest, but hear them).
    pub one_way: f64,
    pub probability: [f64; 2],
    pub delay_ns: [u64; 2],
    /// Crashes: the chance that unflushed writes tear rather than vanish,
    /// and that the node stays down.
    pub torn: f64,
    pub stays_down: f64,
    /// Clock bumps and strobes: how far realtime jumps (forward or
    /// backward, drawn per fault).
    #[serde(default)]
    pub offset_ns: [u64; 2],
    /// Strobes: how long each offset holds.
    #[serde(default)]
    pub period_ns: [u64; 2],
    /// Drifts: how fast or slow the clock runs, in parts per million.
    #[serde(default)]
    pub rate_ppm: [u64; 2],
    /// Custom faults: the command's number among the plan's custom
    /// commands (`FaultPlan::custom_commands`).
    #[serde(default)]
    pub command: Option<u16>,
}

/// What a drawn fault does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub enum Effect {
    Links(LinkEffect),
    Disks {
        nodes: Vec<u16>,
        effect: DiskEffect,
        probability: f64,
    },
    /// The nodes lose power, and get it back when the fault ends.
    Crash {
        nodes: Vec<u16>,
        torn: bool,
    },
    /// The nodes' processes are paused, or killed, until the fault ends
    /// (`faults/node.rs`).
    Node {
        nodes: Vec<u16>,
        action: NodeAction,
    },
    /// The nodes stop answering: their processes are paused and every
    /// frame to or from them is held at the switch until the fault ends.
    Hang {
        nodes: Vec<u16>,
    },
    /// The nodes lose power and their disks every write: they come back
    /// when the fault ends with the disks as the run began them (a
    /// replaced machine).
    Wipe {
        nodes: Vec<u16>,
    },
    /// The nodes' realtime clocks are off true time (a drift: the
    /// machine's clock, every node).
    Clock {
        nodes: Vec<u16>,
        change: ClockChange,
    },
    /// The plan's custom command `command` runs on the nodes (at the start;
    /// it runs to its own end).
    Custom {
        nodes: Vec<u16>,
        command: u16,
    },
}

/// A drawn fault: what, when, whom, and (once it ended) what it touched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Episode {
    /// Its number in its timeline: a branch goes on from its snapshot's.
    pub id: u64,
    pub kind: DrawnKind,
    pub start_ns: u64,
    /// When it ends, as drawn; `u64::MAX` for a node that stays down.
    pub end_ns: u64,
    pub effect: Effect,
    /// Packets or requests it touched (a crash: the nodes it took down).
    pub landed: u64,
    /// When it really ended, if it has: earlier than `end_ns` if faults
    /// were paused.
    pub ended_ns: Option<u64>,
}

impl Episode {
    /// One line for people: what, whom, when, and what it touched; `name`
    /// names a node.
    pub fn describe(&self, name: &dyn Fn(u16) -> String) -> String {
        let t = |ns: u64| format!("{:.3}s", ns as f64 / 1e9);
        let until = match (self.ended_ns, self.end_ns) {
            (Some(e), planned) if e < planned => format!("{} (cut short by a pause)", t(e)),
            (_, u64::MAX) => "never (stays down)".to_owned(),
            (_, planned) => t(planned),
        };
        format!("{} {}, {} to {until}: touched {}", self.kind.name(), self.whom(name), t(self.start_ns), self.landed)
    }

    /// Whom or what it strikes, for people; `name` names a node.
    pub fn whom(&self, name: &dyn Fn(u16) -> String) -> String {
        let list = |nodes: &[u16]| nodes.iter().map(|&n| name(n)).collect::<Vec<_>>().join(" ");
        let cut = |c: &Cut| match c {
            Cut::Groups(groups) => groups.iter().map(|g| list(g)).collect::<Vec<_>>().join(" | "),
            Cut::OneWay { from, to } => format!("{} -> {} (one way)", list(from), list(to)),
            Cut::Pairs(pairs) => {
                let p: Vec<String> = pairs.iter().map(|&(a, b)| format!("{}-{}", name(a), name(b))).collect();
                format!("ring, cut {}", p.join(" "))
            }
        };
        match &self.effect {
            Effect::Links(LinkEffect::Partition(c) | LinkEffect::Clog(c)) => cut(c),
            Effect::Links(LinkEffect::Slow { cut: c, delay_ns }) => {
                format!("{} (+{:?})", cut(c), std::time::Duration::from_nanos(*delay_ns))
            }
            Effect::Links(LinkEffect::BadNode { nodes, probability, delay_ns }) => format!(
                "every link of {} (p={probability:.2}, +{:?})",
                list(nodes),
                std::time::Duration::from_nanos(*delay_ns)
            ),
            Effect::Links(
                LinkEffect::Drop { nodes, probability }
                | LinkEffect::Duplicate { nodes, probability }
                | LinkEffect::Reorder { nodes, probability, .. },
            ) => format!("links of {} (p={probability:.2})", list(nodes)),
            Effect::Links(LinkEffect::Latency { nodes, delay_ns }) => {
                format!("links of {} (+{:?})", list(nodes), std::time::Duration::from_nanos(*delay_ns))
            }
            Effect::Disks { nodes, probability, .. } => format!("disks of {} (p={probability:.2})", list(nodes)),
            Effect::Crash { nodes, torn } => {
                format!("{}{}", list(nodes), if *torn { ", unflushed writes torn" } else { "" })
            }
            Effect::Node { nodes, .. } | Effect::Hang { nodes } | Effect::Wipe { nodes } => list(nodes),
            Effect::Clock { nodes, change: change @ ClockChange::Drift { .. } } if nodes.len() > 1 => {
                format!("every node: {}", change.describe())
            }
            Effect::Clock { nodes, change } => format!("{}: {}", list(nodes), change.describe()),
            Effect::Custom { nodes, command } => format!("command {command} on {}", list(nodes)),
        }
    }
}

/// Whether faults are paused, and until when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pause {
    #[default]
    Off,
    Until(u64),
    /// Until the guest resumes them.
    Indefinite,
}

/// What the devices do, in order, when the schedule says so.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Start(Episode),
    /// The fault ends: the devices undo it and report what it touched
    /// ([`Schedule::close`]).
    End(Episode),
    /// Every fault stops: the network heals, nodes come back.
    Pause,
    Resume,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Schedule {
    pub rules: Vec<Rule>,
    /// Draw from the run's start instead of from setup complete.
    pub before_setup: bool,
    pub swarm: bool,
    nodes: u16,
    /// The rules this line of descent switched on; `None` before its first
    /// branch: every rule.
    on: Option<Vec<bool>>,
    armed: bool,
    /// When each rule's next fault starts.
    next_ns: Vec<Option<u64>>,
    active: Vec<Episode>,
    ended: Vec<Episode>,
    next_id: u64,
    stream: Stream,
    pause: Pause,
    /// Faults drawn that do not strike (`Vetoes`).
    #[serde(default)]
    vetoes: super::Vetoes,
    /// When Test Composer must wind down (virtual ns), so that its last
    /// check ends before the timeline's limit: `Control::ComposerBudget`.
    #[serde(default)]
    winddown_ns: Option<u64>,
    /// Re-seeded once already: the run's own start (`Machine::begin_run`)
    /// is the first re-seed; every later one is a branch.
    #[serde(default)]
    seeded: bool,
    /// The Test Composer template this line of descent runs, when the
    /// explorer chose it (`Control::ComposerTemplate`).
    #[serde(default)]
    template: Option<String>,
    /// The Test Composer commands this line of descent switches on, when
    /// the explorer chose them (`Control::ComposerCommands`).
    #[serde(default)]
    commands: Option<Vec<String>>,
}

/// A uniform draw from `[lo, hi]`.
fn between(stream: &mut Stream, [lo, hi]: [u64; 2]) -> u64 {
    debug_assert!(lo <= hi, "plans check their ranges");
    lo + match (hi - lo).checked_add(1) {
        Some(n) => stream.below(n),
        None => stream.next_u64(),
    }
}

/// A magnitude drawn from `[lo, hi]`, forward or backward at even odds.
fn signed(stream: &mut Stream, range: [u64; 2]) -> i64 {
    let magnitude = i64::try_from(between(stream, range)).unwrap_or(i64::MAX);
    if stream.chance(0.5) {
        -magnitude
    } else {
        magnitude
    }
}

fn between_f(stream: &mut Stream, [lo, hi]: [f64; 2]) -> f64 {
    lo + (hi - lo) * ((stream.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
}

/// `items` in a random order.
fn shuffled(stream: &mut Stream, mut items: Vec<u16>) -> Vec<u16> {
    for i in (1..items.len()).rev() {
        let j = stream.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
    items
}

impl Schedule {
    pub fn new(rules: Vec<Rule>, before_setup: bool, swarm: bool, nodes: u16, seed: u64) -> Schedule {
        let n = rules.len();
        Schedule {
            rules,
            before_setup,
            swarm,
            nodes,
            on: None,
            armed: false,
            next_ns: vec![None; n],
            active: Vec::new(),
            ended: Vec::new(),
            next_id: 0,
            stream: Stream::new(seed, "fault-draw"),
            pause: Pause::Off,
            vetoes: super::Vetoes::default(),
            winddown_ns: None,
            seeded: false,
            template: None,
            commands: None,
        }
    }

    /// From now on, the drawn faults `vetoes` names do not strike (nor the
    /// Test Composer commands it names start: `Control::ComposerRun`).
    pub fn veto(&mut self, vetoes: &super::Vetoes) {
        self.vetoes = vetoes.clone();
    }

    pub fn vetoes(&self) -> &super::Vetoes {
        &self.vetoes
    }

    /// Test Composer winds down at virtual time `ns` (the explorer decides
    /// when, per timeline: `explorer/src/record/winddown.rs`).
    pub fn set_winddown(&mut self, ns: u64) {
        self.winddown_ns = Some(ns);
    }

    pub fn winddown(&self) -> Option<u64> {
        self.winddown_ns
    }

    /// What Test Composer's budget question reads at `now`: nanoseconds
    /// until it winds down (0 if that time has passed), `u64::MAX` when it
    /// never does.
    pub fn composer_budget(&self, now: u64) -> u64 {
        self.winddown_ns.map_or(u64::MAX, |at| at.saturating_sub(now))
    }

    /// This line of descent runs Test Composer template `name` (chosen by
    /// the explorer as the line leaves the root; a line keeps it).
    pub fn choose_template(&mut self, name: &str) {
        self.template = Some(name.to_owned());
    }

    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// What Test Composer's template question reads: the index of the
    /// template chosen for this line among the guest's `among`, `u64::MAX`
    /// when none was chosen or it is not among them (the composer draws).
    pub fn template_among(&self, among: &[String]) -> u64 {
        self.template.as_ref().and_then(|t| among.iter().position(|a| a == t)).map_or(u64::MAX, |i| i as u64)
    }

    /// This line of descent switches on Test Composer commands `on` (named
    /// `template/file`; chosen by the explorer as the line leaves the root).
    pub fn choose_commands(&mut self, on: &[String]) {
        assert!(!on.is_empty(), "a line of descent keeps at least one command");
        self.commands = Some(on.to_vec());
    }

    pub fn commands(&self) -> Option<&[String]> {
        self.commands.as_deref()
    }

    /// What Test Composer's commands question reads: a mask of the guest's
    /// `among` that this line switched on (bit i: `among[i]`); every one
    /// (`u64::MAX`) when none was chosen, none of them is on, or there are
    /// more than a mask holds.
    pub fn commands_among(&self, among: &[String]) -> u64 {
        let Some(on) = &self.commands else { return u64::MAX };
        if among.len() > 64 {
            return u64::MAX;
        }
        let mask = among.iter().enumerate().filter(|(_, c)| on.contains(c)).fold(0u64, |m, (i, _)| m | 1 << i);
        if mask == 0 {
            u64::MAX
        } else {
            mask
        }
    }

    pub fn armed(&self) -> bool {
        self.armed
    }

    pub fn paused(&self) -> bool {
        self.pause != Pause::Off
    }

    /// The rules a line of descent switches on, chosen by the explorer (a
    /// bandit over what each rule's faults found) in place of swarm's
    /// coins, as the line leaves the root (the explorer keeps a line's
    /// choice for all of it). A plan without swarm keeps every rule on.
    pub fn choose_rules(&mut self, on: &[bool]) {
        assert_eq!(on.len(), self.rules.len(), "a choice for each rule");
        assert!(on.contains(&true), "a line of descent keeps at least one rule");
        if self.swarm {
            self.on = Some(on.to_vec());
        }
    }

    /// Which rules this line of descent switched on (`None`: none chosen
    /// yet, every rule on).
    pub fn rules_on(&self) -> Option<&[bool]> {
        self.on.as_deref()
    }

    /// The rules switched on in this line of descent.
    pub fn on(&self) -> Vec<DrawnKind> {
        (0..self.rules.len()).filter(|&i| self.enabled(i)).map(|i| self.rules[i].kind).collect()
    }

    fn enabled(&self, i: usize) -> bool {
        self.on.as_ref().is_none_or(|on| on[i])
    }

    /// Starts drawing, from `now` (once).
    pub fn arm(&mut self, now: u64) {
        if self.armed || self.rules.is_empty() {
            return;
        }
        self.armed = true;
        for i in 0..self.rules.len() {
            self.next_ns[i] = self.draw_next(i, now);
        }
    }

    /// A branch: what comes after `now` is drawn from `seed`; the faults in
    /// force go on. The first branch of a line of descent picks its rules
    /// (with one rule there is nothing to pick); the run's own start keeps
    /// every rule on, as the root does.
    pub fn reseed(&mut self, seed: u64, now: u64) {
        self.stream.reseed(seed);
        let branch = std::mem::replace(&mut self.seeded, true);
        if self.rules.is_empty() {
            return;
        }
        if self.swarm && self.on.is_none() && (!branch || self.rules.len() > 1) {
            let mut on: Vec<bool> = (0..self.rules.len()).map(|_| self.stream.chance(0.5)).collect();
            if !on.contains(&true) {
                let n = on.len() as u64;
                on[self.stream.below(n) as usize] = true;
            }
            // The run's start draws the coins and keeps none of them, as it
            // always drew them: what it draws after is as it was.
            if branch {
                self.on = Some(on);
            }
        }
        if self.armed && !self.paused() {
            for i in 0..self.rules.len() {
                self.next_ns[i] = self.draw_next(i, now);
            }
        }
    }

    fn draw_next(&mut self, i: usize, from: u64) -> Option<u64> {
        if !self.enabled(i) {
            return None;
        }
        let every = self.rules[i].every_ns;
        Some(from.saturating_add(between(&mut self.stream, every).max(1)))
    }

    /// When the schedule next has something to do.
    pub fn deadline(&self) -> Option<u64> {
        match self.pause {
            Pause::Until(t) => return Some(t),
            Pause::Indefinite => return None,
            Pause::Off => {}
        }
        let ends = self.active.iter().map(|e| e.end_ns).filter(|&t| t != u64::MAX);
        let starts = self.next_ns.iter().flatten().copied();
        ends.chain(starts).min()
    }

    /// What is due at `now`: a pause ending, faults ending (first), faults
    /// starting. `down` are the nodes without power (a crash takes only
    /// nodes that have it).
    pub fn due(&mut self, now: u64, down: &BTreeSet<u16>) -> Vec<Step> {
        let mut steps = Vec::new();
        if matches!(self.pause, Pause::Until(t) if t <= now) {
            steps.extend(self.resume(now));
        }
        if self.paused() {
            return steps;
        }
        self.active.sort_by_key(|e| (e.end_ns, e.id));
        while self.active.first().is_some_and(|e| e.end_ns <= now) {
            let mut e = self.active.remove(0);
            e.ended_ns = Some(e.end_ns);
            steps.push(Step::End(e));
        }
        let mut down = down.clone();
        for i in 0..self.rules.len() {
            while let Some(t) = self.next_ns[i].filter(|&t| t <= now) {
                if let Some(e) = self.draw(i, t, &down).filter(|e| self.vetoes.strikes(e.id)) {
                    if let Effect::Crash { nodes, .. } = &e.effect {
                        down.extend(nodes);
                    }
                    self.active.push(e.clone());
                    steps.push(Step::Start(e));
                }
                self.next_ns[i] = self.draw_next(i, t);
            }
        }
        steps
    }

    /// Pauses every fault from `now` until `until` (`None`: until resumed).
    /// A pause already in force lasts until the later of the two.
    pub fn pause(&mut self, now: u64, until: Option<u64>) -> Vec<Step> {
        let was = self.pause;
        self.pause = match (was, until) {
            (Pause::Indefinite, _) | (_, None) => Pause::Indefinite,
            (Pause::Until(a), Some(b)) => Pause::Until(a.max(b)),
            (Pause::Off, Some(b)) => Pause::Until(b),
        };
        if was != Pause::Off {
            return Vec::new();
        }
        let mut steps = vec![Step::Pause];
        self.active.sort_by_key(|e| e.id);
        for mut e in std::mem::take(&mut self.active) {
            e.ended_ns = Some(now);
            steps.push(Step::End(e));
        }
        steps
    }

    /// Ends a pause: drawing resumes from `now`.
    pub fn resume(&mut self, now: u64) -> Vec<Step> {
        if self.pause == Pause::Off {
            return Vec::new();
        }
        self.pause = Pause::Off;
        if self.armed {
            for i in 0..self.rules.len() {
                if self.next_ns[i].is_none_or(|t| t < now) {
                    self.next_ns[i] = self.draw_next(i, now);
                }
            }
        }
        vec![Step::Resume]
    }

    /// Keeps an ended fault with what it touched.
    pub fn close(&mut self, mut e: Episode, landed: u64) {
        debug_assert!(e.ended_ns.is_some(), "only ended faults are closed");
        e.landed = landed;
        self.ended.push(e);
    }

    /// Every drawn fault that struck in this timeline, in the order they
    /// started: those that ended, then those in force (with what they
    /// touched so far left to the devices to fill in).
    pub fn struck(&self) -> Vec<Episode> {
        let mut all: Vec<Episode> = self.ended.iter().chain(&self.active).cloned().collect();
        all.sort_by_key(|e| e.id);
        all
    }

    /// The faults in force.
    pub fn active(&self) -> &[Episode] {
        &self.active
    }

    /// Draws rule `i`'s fault starting at `t`; none if it can hit nobody.
    fn draw(&mut self, i: usize, t: u64, down: &BTreeSet<u16>) -> Option<Episode> {
        let rule = self.rules[i].clone();
        let s = &mut self.stream;
        let duration = between(s, rule.duration_ns);
        let mut end_ns = t.saturating_add(duration).max(t + 1);
        let mut candidates: Vec<u16> =
            if rule.among.is_empty() { (0..self.nodes).collect() } else { rule.among.clone() };
        if rule.kind.needs_power() {
            candidates.retain(|n| !down.contains(n));
        }
        let selector = rule.targets[s.below(rule.targets.len() as u64) as usize].clone();
        let effect = if rule.kind.cuts() {
            let cut = draw_cut(s, &selector, &candidates, rule.one_way)?;
            Effect::Links(match rule.kind {
                DrawnKind::Partition => LinkEffect::Partition(cut),
                DrawnKind::Clog => LinkEffect::Clog(cut),
                _ => LinkEffect::Slow { cut, delay_ns: between(s, rule.delay_ns) },
            })
        } else {
            let nodes = draw_set(s, &selector, &candidates)?;
            let probability = if rule.kind.has_probability() { between_f(s, rule.probability) } else { 1.0 };
            let delay_ns = if rule.kind.has_delay() { between(s, rule.delay_ns) } else { 0 };
            match rule.kind {
                DrawnKind::Drop => Effect::Links(LinkEffect::Drop { nodes, probability }),
                DrawnKind::Duplicate => Effect::Links(LinkEffect::Duplicate { nodes, probability }),
                DrawnKind::Reorder => Effect::Links(LinkEffect::Reorder { nodes, probability, delay_ns }),
                DrawnKind::Latency => Effect::Links(LinkEffect::Latency { nodes, delay_ns }),
                DrawnKind::BadNode => Effect::Links(LinkEffect::BadNode { nodes, probability, delay_ns }),
                DrawnKind::Crash => {
                    let torn = s.chance(rule.torn);
                    if s.chance(rule.stays_down) {
                        end_ns = u64::MAX;
                    }
                    Effect::Crash { nodes, torn }
                }
                DrawnKind::Pause => Effect::Node { nodes, action: NodeAction::Pause },
                DrawnKind::Kill => Effect::Node { nodes, action: NodeAction::Kill },
                DrawnKind::Stop => Effect::Node { nodes, action: NodeAction::Stop },
                DrawnKind::Hang => Effect::Hang { nodes },
                DrawnKind::Wipe => Effect::Wipe { nodes },
                DrawnKind::Bump => {
                    Effect::Clock { nodes, change: ClockChange::Bump { offset_ns: signed(s, rule.offset_ns) } }
                }
                DrawnKind::Strobe => Effect::Clock {
                    nodes,
                    change: ClockChange::Strobe {
                        offset_ns: signed(s, rule.offset_ns),
                        period_ns: between(s, rule.period_ns).max(1),
                    },
                },
                DrawnKind::Drift => {
                    Effect::Clock { nodes, change: ClockChange::Drift { ppm: signed(s, rule.rate_ppm) } }
                }
                DrawnKind::Custom => {
                    Effect::Custom { nodes, command: rule.command.expect("plans give custom faults a command") }
                }
                k => Effect::Disks {
                    nodes,
                    effect: k.disk_effect(delay_ns).expect("every other kind is a disk kind"),
                    probability,
                },
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        tracing::debug!(id, kind = rule.kind.name(), start = t, end = end_ns, "drawn fault");
        Some(Episode { id, kind: rule.kind, start_ns: t, end_ns, effect, landed: 0, ended_ns: None })
    }
}

/// The nodes a selector picks among `candidates`; none if it picks nobody.
fn draw_set(s: &mut Stream, selector: &Selector, candidates: &[u16]) -> Option<Vec<u16>> {
    let n = candidates.len();
    let take = |s: &mut Stream, k: usize| {
        let mut picked: Vec<u16> = shuffled(s, candidates.to_vec()).into_iter().take(k).collect();
        picked.sort_unstable();
        picked
    };
    let set = match selector {
        Selector::One => take(s, 1),
        Selector::Minority => take(s, ((n.saturating_sub(1)) / 2).max(1)),
        Selector::Majority => take(s, (n / 2 + 1).min(n)),
        Selector::All => candidates.to_vec(),
        Selector::Nodes(nodes) => nodes.iter().copied().filter(|x| candidates.contains(x)).collect(),
        Selector::Split(_) | Selector::Ring | Selector::Groups(_) => {
            unreachable!("plans allow these selectors for cuts only")
        }
    };
    (!set.is_empty()).then_some(set)
}

/// The cut a selector makes among `candidates`; none if it cuts nothing.
fn draw_cut(s: &mut Stream, selector: &Selector, candidates: &[u16], one_way: f64) -> Option<Cut> {
    let cut = match selector {
        Selector::Split(k) => {
            let k = usize::from(*k).min(candidates.len());
            let mut groups = vec![Vec::new(); k];
            for (i, node) in shuffled(s, candidates.to_vec()).into_iter().enumerate() {
                groups[i % k].push(node);
            }
            groups.iter_mut().for_each(|g| g.sort_unstable());
            Cut::Groups(groups)
        }
        Selector::Ring => {
            let ring = shuffled(s, candidates.to_vec());
            let n = ring.len();
            // Each node reaches those within `reach` on the ring: with
            // itself, a majority.
            let reach = (n / 2).div_ceil(2);
            let mut pairs = Vec::new();
            for i in 0..n {
                for j in i + 1..n {
                    let d = (j - i).min(n - (j - i));
                    if d > reach {
                        let (a, b) = (ring[i].min(ring[j]), ring[i].max(ring[j]));
                        pairs.push((a, b));
                    }
                }
            }
            pairs.sort_unstable();
            Cut::Pairs(pairs)
        }
        Selector::Groups(groups) => Cut::Groups(groups.clone()),
        _ => {
            let side = draw_set(s, selector, candidates)?;
            let rest: Vec<u16> = candidates.iter().copied().filter(|n| !side.contains(n)).collect();
            if rest.is_empty() {
                return None;
            }
            if s.chance(one_way) {
                Cut::OneWay { from: side, to: rest }
            } else {
                Cut::Groups(vec![side, rest])
            }
        }
    };
    let cuts_something = match &cut {
        Cut::Groups(g) => g.iter().filter(|g| !g.is_empty()).count() >= 2,
        Cut::Pairs(p) => !p.is_empty(),
        Cut::OneWay { .. } => true,
    };
    cuts_something.then_some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: DrawnKind, targets: Vec<Selector>) -> Rule {
        Rule {
            kind,
            every_ns: [1_000, 2_000],
            duration_ns: [100, 500],
            targets,
            among: Vec::new(),
            one_way: 0.0,
            probability: [0.1, 0.2],
            delay_ns: [10, 20],
            torn: 0.5,
            stays_down: 0.0,
            offset_ns: [5, 9],
            period_ns: [3, 4],
            rate_ppm: [100, 200],
            command: None,
        }
    }

    fn run(s: &mut Schedule, until: u64) -> Vec<Step> {
        let mut steps = Vec::new();
        while let Some(t) = s.deadline().filter(|&t| t <= until) {
            steps.extend(s.due(t, &BTreeSet::new()));
        }
        steps
    }

    fn starts(steps: &[Step]) -> Vec<(u64, u64)> {
        steps.iter().filter_map(|s| if let Step::Start(e) = s { Some((e.start_ns, e.end_ns)) } else { None }).collect()
    }

    #[test]
    fn nothing_is_drawn_until_armed_and_a_seed_always_draws_the_same() {
        let rules = vec![rule(DrawnKind::Partition, vec![Selector::Minority, Selector::Ring])];
        let mut a = Schedule::new(rules.clone(), false, false, 5, 1);
        assert_eq!(a.deadline(), None, "not armed");
        a.arm(10_000);
        let mut b = a.clone();
        let (sa, sb) = (run(&mut a, 50_000), run(&mut b, 50_000));
        assert_eq!(sa, sb);
        let first = starts(&sa);
        assert!(first.len() >= 15 && first.iter().all(|&(s, e)| s >= 11_000 && e > s), "{first:?}");
    }

    #[test]
    fn two_branches_of_one_snapshot_draw_differently_and_keep_what_is_in_force() {
        let rules = vec![rule(DrawnKind::Partition, vec![Selector::Minority])];
        let mut root = Schedule::new(rules, false, false, 5, 1);
        root.arm(0);
        run(&mut root, 5_000);
        let in_force = root.active().to_vec();
        let (mut a, mut b) = (root.clone(), root.clone());
        a.reseed(11, 5_000);
        b.reseed(12, 5_000);
        assert_eq!(a.active(), in_force.as_slice(), "the partition in force carries on");
        let (sa, sb) = (run(&mut a, 20_000), run(&mut b, 20_000));
        assert_ne!(starts(&sa), starts(&sb));
        // What was in force ends when it was drawn to, in both.
        for e in &in_force {
            for steps in [&sa, &sb] {
                assert!(steps
                    .iter()
                    .any(|s| matches!(s, Step::End(x) if x.id == e.id && x.ended_ns == Some(e.end_ns))));
            }
        }
        let mut a2 = root.clone();
        a2.reseed(11, 5_000);
        assert_eq!(run(&mut a2, 20_000), sa, "the same branch seed draws the same");
    }

    /// Test Composer's budget: none until the explorer sets a wind-down,
    /// then the time left to it, never below zero; a snapshot keeps it.
    #[test]
    fn the_composer_budget_counts_down_to_the_winddown() {
        let mut s = Schedule::new(Vec::new(), false, false, 1, 1);
        assert_eq!((s.winddown(), s.composer_budget(5)), (None, u64::MAX));
        s.set_winddown(1_000);
        assert_eq!([s.composer_budget(0), s.composer_budget(400), s.composer_budget(1_000)], [1_000, 600, 0]);
        assert_eq!(s.composer_budget(7_000), 0);
        let copy: Schedule = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(copy.winddown(), Some(1_000));
    }

    /// Test Composer's template question: the composer draws its own until
    /// the explorer chose one for the line; then that one's index among
    /// the guest's, wherever it stands there; a snapshot keeps it.
    #[test]
    fn the_template_question_names_the_chosen_template_among_the_guests() {
        let mut s = Schedule::new(Vec::new(), false, false, 1, 1);
        let among = |names: &[&str]| names.iter().map(|&n| n.to_owned()).collect::<Vec<_>>();
        assert_eq!(s.template_among(&among(&["a", "b"])), u64::MAX);
        s.choose_template("b");
        assert_eq!(s.template_among(&among(&["a", "b"])), 1);
        assert_eq!(s.template_among(&among(&["b", "a", "c"])), 0);
        assert_eq!(s.template_among(&among(&["a", "c"])), u64::MAX, "not among them: the composer draws");
        let copy: Schedule = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(copy.template(), Some("b"));
    }

    /// Test Composer's commands question: every command until the explorer
    /// switched some on for the line; then a mask of those among the
    /// guest's; every one again when none of them is on (a line keeps at
    /// least one command) or the list is too long for a mask.
    #[test]
    fn the_commands_question_masks_the_commands_switched_on() {
        let mut s = Schedule::new(Vec::new(), false, false, 1, 1);
        let names = |n: &[&str]| n.iter().map(|&c| c.to_owned()).collect::<Vec<_>>();
        assert_eq!(s.commands_among(&names(&["t/a", "t/b", "t/c"])), u64::MAX);
        s.choose_commands(&names(&["t/a", "t/c"]));
        assert_eq!(s.commands_among(&names(&["t/a", "t/b", "t/c"])), 0b101);
        assert_eq!(s.commands_among(&names(&["t/c", "t/b"])), 0b01);
        assert_eq!(s.commands_among(&names(&["u/a"])), u64::MAX, "none of them on: every one");
        let many: Vec<String> = (0..65).map(|i| format!("t/{i}")).collect();
        assert_eq!(s.commands_among(&many), u64::MAX);
        let copy: Schedule = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(copy.commands(), Some(&names(&["t/a", "t/c"])[..]));
    }

    /// A vetoed fault is drawn (the others keep their numbers, times and
    /// targets) but does not strike; nor does any from `faults_from` on.
    #[test]
    fn vetoed_faults_are_drawn_but_do_not_strike() {
        let rules = vec![rule(DrawnKind::Latency, vec![Selector::One])];
        let mut all = Schedule::new(rules, false, false, 5, 1);
        all.arm(0);
        let mut vetoed = all.clone();
        let struck = |steps: &[Step]| -> Vec<Episode> {
            steps.iter().filter_map(|s| if let Step::Start(e) = s { Some(e.clone()) } else { None }).collect()
        };
        let every = struck(&run(&mut all, 20_000));
        assert!(every.len() >= 8, "{every:?}");
        vetoed.veto(&super::super::Vetoes {
            faults: [1, 3].into(),
            faults_from: Some(6),
            ..super::super::Vetoes::default()
        });
        let kept = struck(&run(&mut vetoed, 20_000));
        let expected: Vec<Episode> = every.into_iter().filter(|e| ![1, 3].contains(&e.id) && e.id < 6).collect();
        assert_eq!(kept, expected);
    }

    #[test]
    fn vetoed_commands_do_not_start() {
        let v = super::super::Vetoes { commands: [2].into(), commands_from: Some(5), ..Default::default() };
        let starts: Vec<u64> = (1..8).filter(|&r| v.starts(r)).collect();
        assert_eq!(starts, vec![1, 3, 4]);
        assert!(super::super::Vetoes::default().starts(1000) && super::super::Vetoes::default().is_empty());
    }

    #[test]
    fn swarm_switches_on_a_subset_per_line_of_descent() {
        let rules: Vec<Rule> = DrawnKind::ALL.iter().map(|&k| rule(k, vec![Selector::One])).collect();
        let mut root = Schedule::new(rules, false, true, 3, 1);
        // The run's own start (`Machine::begin_run`) keeps every rule on.
        root.reseed(1, 0);
        root.arm(0);
        assert_eq!(root.on().len(), DrawnKind::ALL.len(), "every rule before the first branch");
        let mut seen = BTreeSet::new();
        for seed in 0..20 {
            let mut child = root.clone();
            child.reseed(seed, 0);
            let on = child.on();
            assert!(!on.is_empty() && on.len() < DrawnKind::ALL.len(), "{on:?}");
            let mut grandchild = child.clone();
            grandchild.reseed(seed + 100, 10);
            assert_eq!(grandchild.on(), on, "descendants inherit the choice");
            seen.insert(on);
        }
        assert!(seen.len() > 10, "lines of descent differ: {seen:?}");
        // Rules chosen for a line of descent replace the coins, before or
        // after its first re-seed, and its descendants keep them.
        let only_second: Vec<bool> = (0..DrawnKind::ALL.len()).map(|i| i == 1).collect();
        for chosen_first in [true, false] {
            let mut chosen = root.clone();
            if chosen_first {
                chosen.choose_rules(&only_second);
            }
            chosen.reseed(7, 0);
            chosen.choose_rules(&only_second);
            chosen.reseed(8, 10);
            assert_eq!((chosen.on(), chosen.rules_on()), (vec![DrawnKind::ALL[1]], Some(&only_second[..])));
        }
        // Without swarm, every rule stays on.
        let mut all = Schedule::new(vec![rule(DrawnKind::Drop, vec![Selector::One]); 2], false, false, 3, 1);
        all.choose_rules(&[true, false]);
        all.reseed(1, 0);
        assert_eq!((all.on().len(), all.rules_on()), (2, None));
    }

    #[test]
    fn a_pause_ends_what_is_in_force_and_drawing_resumes_after_it() {
        let rules = vec![rule(DrawnKind::Crash, vec![Selector::One])];
        let mut s = Schedule::new(rules, false, false, 3, 1);
        s.arm(0);
        let before = run(&mut s, 1_999);
        assert!(!starts(&before).is_empty());
        let mut s2 = s.clone();
        while s2.active().is_empty() {
            let t = s2.deadline().unwrap();
            s2.due(t, &BTreeSet::new());
        }
        let now = s2.active()[0].start_ns;
        let steps = s2.pause(now, Some(now + 10_000));
        assert_eq!(steps[0], Step::Pause);
        assert!(steps[1..].iter().all(|st| matches!(st, Step::End(e) if e.ended_ns == Some(now))), "{steps:?}");
        assert_eq!(s2.deadline(), Some(now + 10_000), "nothing until the pause ends");
        let after = run(&mut s2, now + 20_000);
        assert_eq!(after[0], Step::Resume);
        assert!(starts(&after).iter().all(|&(start, _)| start >= now + 10_000), "{after:?}");
        assert!(!starts(&after).is_empty(), "drawing resumed");
    }

    #[test]
    fn selectors_pick_what_they_say() {
        let mut s = Stream::new(1, "test");
        let five: Vec<u16> = (0..5).collect();
        assert_eq!(draw_set(&mut s, &Selector::One, &five).unwrap().len(), 1);
        assert_eq!(draw_set(&mut s, &Selector::Minority, &five).unwrap().len(), 2);
        assert_eq!(draw_set(&mut s, &Selector::Majority, &five).unwrap().len(), 3);
        assert_eq!(draw_set(&mut s, &Selector::Nodes(vec![1, 9]), &five).unwrap(), [1]);
        let Some(Cut::Groups(g)) = draw_cut(&mut s, &Selector::Split(3), &five, 0.0) else { panic!() };
        assert_eq!((g.len(), g.iter().map(Vec::len).sum::<usize>()), (3, 5));
        let Some(Cut::OneWay { from, to }) = draw_cut(&mut s, &Selector::Minority, &five, 1.0) else { panic!() };
        assert_eq!((from.len(), to.len()), (2, 3));
        let Some(ring @ Cut::Pairs(_)) = draw_cut(&mut s, &Selector::Ring, &five, 0.0) else { panic!() };
        // Each node reaches a majority (itself and two others), and no two
        // reach the same set.
        let reach: Vec<Vec<u16>> =
            five.iter().map(|&a| five.iter().copied().filter(|&b| !ring.blocks(a, b)).collect()).collect();
        assert!(reach.iter().all(|r| r.len() == 3), "{reach:?}");
        let distinct: BTreeSet<&Vec<u16>> = reach.iter().collect();
        assert_eq!(distinct.len(), 5);
        assert_eq!(draw_cut(&mut s, &Selector::All, &five, 0.0), None, "nobody on the other side");
    }
}
