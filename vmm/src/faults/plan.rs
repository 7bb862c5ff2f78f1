//! Fault plans: the TOML file (see examples/faults/ and docs/faults.md).
//!
//! A plan writes faults down, and describes faults to draw:
//!
//! - `[network]`, `[disk]` and `[[crash]]` are faults written down: rates
//!   for the whole run, link delays, partitions and crashes at fixed times.
//!   Every number may be a fixed value or a `[min, max]` range; ranges are
//!   resolved once, at machine creation, from the run's seed (stream
//!   `fault-plan`), so these describe a family of chaos profiles and the
//!   seed picks one. Every decision to inject one of them is drawn from the
//!   devices' own seeded streams.
//! - `[draw]` and its `[[draw.fault]]` rules describe a space: which kinds
//!   may happen, how often, how long, and whom they may hit. A timeline
//!   draws its own faults from them as it runs (see `schedule.rs`).

use serde::{Deserialize, Serialize};

use super::disk::DiskFaults;
use super::network::{Burst, Cut, LinkDelay, NetFaults, Partition, Span};
use super::node::Crash;
use super::schedule::{DrawnKind, Rule, Selector};
use crate::entropy::Stream;

/// The most custom faults a plan may name: each is a machine event kind
/// (`hvsim_abi::hc::event::CUSTOM_BASE + i`), 16 bits.
const MAX_CUSTOM: usize = 1024;
const _: () = assert!(hvsim_abi::hc::event::CUSTOM_BASE as usize + MAX_CUSTOM <= 0xFFFF, "event kinds are 16 bits");

/// A number, or a range the seed picks from.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged, expecting = "expected a number, or a range of two numbers like [0.01, 0.1]")]
enum Num {
    Fixed(f64),
    Range([f64; 2]),
}

/// A duration ("200us", "1.5s"), or a range of them.
#[derive(Clone, Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a duration like \"200us\" or \"1.5s\", or a range of two like [\"1ms\", \"5ms\"]"
)]
enum Dur {
    Fixed(String),
    Range([String; 2]),
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NetFile {
    latency: Option<Dur>,
    jitter: Option<Dur>,
    drop: Option<Num>,
    duplicate: Option<Num>,
    reorder: Option<Num>,
    reorder_delay: Option<Dur>,
    clog: Option<SpanFile>,
    cut: Option<SpanFile>,
    burst: Option<BurstFile>,
    #[serde(default)]
    partition: Vec<PartitionFile>,
    #[serde(default)]
    link: Vec<LinkFile>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkFile {
    from: Vec<NodeRef>,
    to: Vec<NodeRef>,
    latency: Option<Dur>,
    jitter: Option<Dur>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpanFile {
    probability: Num,
    duration: Dur,
    jitter: Option<Dur>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BurstFile {
    enter: Num,
    leave: Num,
    drop: Num,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionFile {
    start: Dur,
    heal: Dur,
    groups: Option<Vec<Vec<NodeRef>>>,
    from: Option<Vec<NodeRef>>,
    to: Option<Vec<NodeRef>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiskFile {
    latency: Option<Dur>,
    read_error: Option<Num>,
    write_error: Option<Num>,
    corrupt: Option<Num>,
    misdirect: Option<Num>,
    stall: Option<Num>,
    stall_time: Option<Dur>,
    lying_flush: Option<Num>,
    quota: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CrashFile {
    node: NodeRef,
    at: Dur,
    #[serde(default)]
    torn: bool,
    restart: Option<Dur>,
}

/// A node in a plan file: its number, or its name (a compose service).
#[derive(Clone, Debug, PartialEq, Eq)]
enum NodeRef {
    Index(u64),
    Name(String),
}

impl<'de> Deserialize<'de> for NodeRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<NodeRef, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = NodeRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a node number or a service name")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<NodeRef, E> {
                Ok(NodeRef::Index(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<NodeRef, E> {
                u64::try_from(v).map(NodeRef::Index).map_err(|_| E::custom(format!("node {v} does not exist")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<NodeRef, E> {
                Ok(NodeRef::Name(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Resolves node references against the run's nodes.
struct Nodes<'a> {
    count: u16,
    names: &'a [String],
    /// Names that stand for several nodes (a Kubernetes Service: its pods).
    groups: &'a [(String, Vec<u16>)],
}

impl Nodes<'_> {
    /// The nodes `r` names: one, or a group's.
    fn resolve(&self, r: &NodeRef, what: &str) -> Result<Vec<u16>, String> {
        match r {
            NodeRef::Index(i) => u16::try_from(*i)
                .ok()
                .filter(|&i| i < self.count)
                .map(|i| vec![i])
                .ok_or_else(|| format!("{what}: node {i} does not exist (the run has {})", self.count)),
            NodeRef::Name(n) => {
                if let Some(i) = self.names.iter().position(|x| x == n) {
                    return Ok(vec![i as u16]);
                }
                if let Some((_, group)) = self.groups.iter().find(|(g, _)| g == n) {
                    return Ok(group.clone());
                }
                if self.names.is_empty() {
                    return Err(format!("{what}: node {n:?}: nodes have names only in compose projects"));
                }
                let groups: Vec<&str> = self.groups.iter().map(|(g, _)| g.as_str()).collect();
                let and_groups =
                    if groups.is_empty() { String::new() } else { format!("; groups {}", groups.join(", ")) };
                Err(format!("{what}: no node named {n:?} (the nodes are {}{and_groups})", self.names.join(", ")))
            }
        }
    }

    /// The one node `r` names.
    fn one(&self, r: &NodeRef, what: &str) -> Result<u16, String> {
        match self.resolve(r, what)?[..] {
            [node] => Ok(node),
            ref more => {
                let name = match r {
                    NodeRef::Name(n) => format!("{n:?}"),
                    NodeRef::Index(i) => i.to_string(),
                };
                Err(format!("{what}: {name} names {} nodes, not one", more.len()))
            }
        }
    }

    /// The nodes `refs` name, each once, in order.
    fn all(&self, refs: &[NodeRef], what: &str) -> Result<Vec<u16>, String> {
        let mut out = Vec::new();
        for r in refs {
            for node in self.resolve(r, what)? {
                if !out.contains(&node) {
                    out.push(node);
                }
            }
        }
        Ok(out)
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    #[serde(default)]
    network: NetFile,
    #[serde(default)]
    disk: DiskFile,
    #[serde(default)]
    crash: Vec<CrashFile>,
    #[serde(default)]
    draw: DrawFile,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DrawFile {
    #[serde(default)]
    before_setup: bool,
    swarm: Option<bool>,
    #[serde(default)]
    fault: Vec<RuleFile>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    kind: String,
    every: Dur,
    duration: Option<Dur>,
    targets: Option<Vec<TargetFile>>,
    among: Option<Vec<NodeRef>>,
    one_way: Option<f64>,
    probability: Option<Num>,
    delay: Option<Dur>,
    torn: Option<f64>,
    stays_down: Option<f64>,
    offset: Option<Dur>,
    period: Option<Dur>,
    rate: Option<[u64; 2]>,
    command: Option<String>,
}

/// A target selector as written: a name (`one`, `minority`, `majority`,
/// `all`, `ring`, `split K`), a list of nodes, or `{ groups = [...] }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "expected a selector (\"one\", \"minority\", \"majority\", \"all\", \"ring\", \"split 3\"), a list of nodes, or { groups = [[...], [...]] }"
)]
enum TargetFile {
    Name(String),
    Nodes(Vec<NodeRef>),
    Groups { groups: Vec<Vec<NodeRef>> },
}

/// A resolved plan: concrete numbers only, and the rules of drawn faults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultPlan {
    pub network: NetFaults,
    pub disk: DiskFaults,
    /// Node crashes, earliest first.
    pub crashes: Vec<Crash>,
    /// Faults a timeline draws.
    #[serde(default)]
    pub draw: Draw,
}

/// A plan's `[draw]` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Draw {
    pub rules: Vec<Rule>,
    /// Draw from the run's start, not from setup complete.
    pub before_setup: bool,
    /// Swarm testing: each line of descent switches on a random subset of
    /// the rules.
    pub swarm: bool,
    /// The custom faults' commands (`hvsim_abi::linux::CUSTOM_FAULTS`).
    #[serde(default)]
    pub custom: Vec<String>,
}

fn dur(s: &str) -> Result<u64, String> {
    humantime::parse_duration(s)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .map_err(|e| format!("`{s}` is not a duration: {e}"))
}

/// A duration or range as `[min, max]` nanoseconds, not drawn.
fn dur_range(d: &Dur, what: &str) -> Result<[u64; 2], String> {
    let (lo, hi) = match d {
        Dur::Fixed(s) => (dur(s), dur(s)),
        Dur::Range([a, b]) => (dur(a), dur(b)),
    };
    let (lo, hi) = (lo.map_err(|e| format!("{what}: {e}"))?, hi.map_err(|e| format!("{what}: {e}"))?);
    if lo > hi {
        return Err(format!("{what}: range is empty"));
    }
    Ok([lo, hi])
}

/// A probability or range of them as `[min, max]`, not drawn.
fn prob_range(n: &Num, what: &str) -> Result<[f64; 2], String> {
    let [lo, hi] = match n {
        Num::Fixed(v) => [*v, *v],
        Num::Range(r) => *r,
    };
    for v in [lo, hi] {
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{what}: probability {v} is not between 0 and 1"));
        }
    }
    if lo > hi {
        return Err(format!("{what}: range [{lo}, {hi}] is empty"));
    }
    Ok([lo, hi])
}

fn chance(p: Option<f64>, what: &str) -> Result<f64, String> {
    let p = p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&p) {
        return Err(format!("{what}: probability {p} is not between 0 and 1"));
    }
    Ok(p)
}

/// A `[[draw.fault]]` rule, checked against its kind and the run's nodes;
/// `custom` numbers the plan's custom commands so far.
fn rule(r: &RuleFile, nodes: &Nodes, what: &str, custom: &mut Vec<String>) -> Result<Rule, String> {
    let kind = DrawnKind::parse(&r.kind).ok_or_else(|| {
        let kinds: Vec<&str> = DrawnKind::ALL.iter().map(|k| k.name()).collect();
        format!("{what}: unknown kind {:?} (the kinds are {})", r.kind, kinds.join(", "))
    })?;
    let what = format!("{what} ({})", kind.name());
    let refuse = |given: bool, field: &str| -> Result<(), String> {
        if given {
            return Err(format!("{what}: `{field}` does not apply to this kind"));
        }
        Ok(())
    };
    refuse(r.one_way.is_some() && !kind.cuts(), "one_way")?;
    refuse(r.probability.is_some() && !kind.has_probability(), "probability")?;
    refuse(r.delay.is_some() && !kind.has_delay(), "delay")?;
    refuse((r.torn.is_some() || r.stays_down.is_some()) && kind != DrawnKind::Crash, "torn and stays_down")?;
    let clock_shifts = matches!(kind, DrawnKind::Bump | DrawnKind::Strobe);
    refuse(r.offset.is_some() && !clock_shifts, "offset")?;
    refuse(r.period.is_some() && kind != DrawnKind::Strobe, "period")?;
    refuse(r.rate.is_some() && kind != DrawnKind::Drift, "rate")?;
    refuse(r.command.is_some() && kind != DrawnKind::Custom, "command")?;
    let command = match (&r.command, kind == DrawnKind::Custom) {
        (Some(c), _) if c.trim().is_empty() || c.contains('\0') => {
            return Err(format!("{what}: `command` must be a non-empty shell command without NUL bytes"))
        }
        (Some(_), _) if custom.len() >= MAX_CUSTOM => {
            return Err(format!("{what}: too many custom faults (at most {MAX_CUSTOM})"))
        }
        (Some(c), _) => {
            custom.push(c.clone());
            Some((custom.len() - 1) as u16)
        }
        (None, true) => return Err(format!("{what}: `command` is required (a shell command to run on the node)")),
        (None, false) => None,
    };
    // A custom fault is a moment: its command runs to its own end.
    let duration_ns = match (&r.duration, kind == DrawnKind::Custom) {
        (Some(d), _) => dur_range(d, &format!("{what}: duration"))?,
        (None, true) => [0, 0],
        (None, false) => return Err(format!("{what}: `duration` is required")),
    };
    let required = |d: &Option<Dur>, field: &str, needed: bool| -> Result<[u64; 2], String> {
        match d {
            Some(d) => dur_range(d, &format!("{what}: {field}")),
            None if needed => Err(format!("{what}: `{field}` is required")),
            None => Ok([0, 0]),
        }
    };
    let offset_ns = required(&r.offset, "offset", clock_shifts)?;
    let period_ns = required(&r.period, "period", kind == DrawnKind::Strobe)?;
    if kind == DrawnKind::Strobe && period_ns[0] == 0 {
        return Err(format!("{what}: period must be more than 0s"));
    }
    let rate_ppm = match (r.rate, kind == DrawnKind::Drift) {
        (Some([lo, hi]), _) if lo > hi => return Err(format!("{what}: rate: range [{lo}, {hi}] is empty")),
        (Some([_, hi]), _) if hi > super::clock::MAX_PPM as u64 => {
            return Err(format!("{what}: rate {hi} ppm is more than {} (10%)", super::clock::MAX_PPM))
        }
        (Some(r), _) => r,
        (None, true) => return Err(format!("{what}: give a `rate` in parts per million, e.g. [100, 5000]")),
        (None, false) => [0, 0],
    };
    let every_ns = dur_range(&r.every, &format!("{what}: every"))?;
    if every_ns[0] == 0 {
        return Err(format!("{what}: every must be more than 0s"));
    }
    let probability = match (&r.probability, kind.has_probability()) {
        (Some(p), _) => prob_range(p, &what)?,
        (None, true) => return Err(format!("{what}: give a `probability` (per packet or request)")),
        (None, false) => [1.0, 1.0],
    };
    let delay_ns = match (&r.delay, kind.has_delay()) {
        (Some(d), _) => dur_range(d, &format!("{what}: delay"))?,
        (None, true) => return Err(format!("{what}: give a `delay`")),
        (None, false) => [0, 0],
    };
    let default_targets = if kind.cuts() {
        vec![Selector::One, Selector::Minority, Selector::Majority]
    } else if kind.machine_wide() {
        vec![Selector::All]
    } else {
        vec![Selector::One]
    };
    if kind.machine_wide() && (r.targets.is_some() || r.among.is_some()) {
        return Err(format!(
            "{what}: a drift hits every node (they share one kernel clock rate, see docs/faults.md#clocks): \
             drop `targets` and `among`"
        ));
    }
    let targets = match &r.targets {
        None => default_targets,
        Some(t) if t.is_empty() => return Err(format!("{what}: `targets` is empty")),
        Some(t) => t.iter().map(|t| selector(t, kind, nodes, &what)).collect::<Result<_, _>>()?,
    };
    Ok(Rule {
        kind,
        every_ns,
        duration_ns,
        targets,
        among: r.among.as_ref().map(|a| nodes.all(a, &what)).transpose()?.unwrap_or_default(),
        one_way: chance(r.one_way, &format!("{what}: one_way"))?,
        probability,
        delay_ns,
        torn: chance(r.torn, &format!("{what}: torn"))?,
        stays_down: chance(r.stays_down, &format!("{what}: stays_down"))?,
        offset_ns,
        period_ns,
        rate_ppm,
        command,
    })
}

fn selector(t: &TargetFile, kind: DrawnKind, nodes: &Nodes, what: &str) -> Result<Selector, String> {
    let s = match t {
        TargetFile::Name(name) => match name.as_str() {
            "one" => Selector::One,
            "minority" => Selector::Minority,
            "majority" => Selector::Majority,
            "all" => Selector::All,
            "ring" => Selector::Ring,
            other => match other.strip_prefix("split").map(|k| k.trim().parse::<u16>()) {
                Some(Ok(k)) if k >= 2 => Selector::Split(k),
                _ => {
                    return Err(format!(
                        "{what}: unknown target {other:?} (one, minority, majority, all, ring, split K with K >= 2, \
                         a list of nodes, or {{ groups = [...] }})"
                    ))
                }
            },
        },
        TargetFile::Nodes(list) => Selector::Nodes(nodes.all(list, what)?),
        TargetFile::Groups { groups } if groups.len() >= 2 => {
            Selector::Groups(groups.iter().map(|g| nodes.all(g, what)).collect::<Result<_, _>>()?)
        }
        TargetFile::Groups { .. } => return Err(format!("{what}: `groups` needs two groups or more")),
    };
    let cut_only = matches!(s, Selector::Split(_) | Selector::Ring | Selector::Groups(_));
    if cut_only && !kind.cuts() {
        return Err(format!("{what}: split, ring and groups apply to cuts only (partition, clog, slow)"));
    }
    if s == Selector::All && kind.cuts() {
        return Err(format!("{what}: `all` cuts nothing: name a side (one, minority, majority, nodes)"));
    }
    Ok(s)
}

/// Parses a size like `128M`, `1G`, `512K`, `2MiB` or `4096` (bytes).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches("IB").trim_end_matches('B') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return Err(format!("`{s}`: unknown size unit `{unit}` (use K, M or G)")),
    };
    let n: u64 = digits.parse().map_err(|_| format!("`{s}` is not a size (e.g. 128M)"))?;
    n.checked_shl(shift).filter(|v| v >> shift == n).ok_or_else(|| format!("`{s}` is too large"))
}

/// Draws concrete values for ranges, in a fixed order.
struct Resolver {
    stream: Stream,
}

impl Resolver {
    fn num(&mut self, n: &Option<Num>, what: &str) -> Result<f64, String> {
        let v = match n {
            None => 0.0,
            Some(Num::Fixed(v)) => *v,
            Some(Num::Range([lo, hi])) => {
                if lo > hi {
                    return Err(format!("{what}: range [{lo}, {hi}] is empty"));
                }
                lo + (hi - lo) * ((self.stream.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            }
        };
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{what}: probability {v} is not between 0 and 1"));
        }
        Ok(v)
    }

    fn dur(&mut self, d: &Option<Dur>, what: &str) -> Result<u64, String> {
        match d {
            None => Ok(0),
            Some(Dur::Fixed(s)) => dur(s).map_err(|e| format!("{what}: {e}")),
            Some(Dur::Range([lo, hi])) => {
                let (lo, hi) =
                    (dur(lo).map_err(|e| format!("{what}: {e}"))?, dur(hi).map_err(|e| format!("{what}: {e}"))?);
                if lo > hi {
                    return Err(format!("{what}: range is empty"));
                }
                // [0, u64::MAX] (durations saturate) has 2^64 values.
                Ok(lo
                    + match (hi - lo).checked_add(1) {
                        Some(n) => self.stream.below(n),
                        None => self.stream.next_u64(),
                    })
            }
        }
    }

    fn span(&mut self, s: &Option<SpanFile>, what: &str) -> Result<Option<Span>, String> {
        s.as_ref()
            .map(|s| {
                Ok(Span {
                    probability: self.num(&Some(s.probability.clone()), what)?,
                    duration_ns: self.dur(&Some(s.duration.clone()), what)?,
                    jitter_ns: self.dur(&s.jitter, what)?,
                })
            })
            .transpose()
    }
}

impl FaultPlan {
    /// Whether the plan writes down faults of its own (network or disk
    /// settings, node crashes), besides the rules it draws from: those are
    /// in force from the start, in every timeline.
    pub fn writes_faults(&self) -> bool {
        self.network != NetFaults::default() || self.disk != DiskFaults::default() || !self.crashes.is_empty()
    }

    /// Parses a plan file's text and resolves its ranges with `seed`.
    pub fn parse(text: &str, seed: u64, nodes: u16) -> Result<FaultPlan, String> {
        FaultPlan::parse_named(text, seed, nodes, &[])
    }

    /// [`FaultPlan::parse`] for a run whose nodes have names (a compose
    /// project's services): the plan may name them instead of numbering
    /// them.
    pub fn parse_named(text: &str, seed: u64, nodes: u16, names: &[String]) -> Result<FaultPlan, String> {
        FaultPlan::parse_grouped(text, seed, nodes, names, &[])
    }

    /// [`FaultPlan::parse_named`] where some names stand for several nodes
    /// (a Kubernetes Service for the pods it selects). A node's own name
    /// comes first.
    pub fn parse_grouped(
        text: &str,
        seed: u64,
        nodes: u16,
        names: &[String],
        groups: &[(String, Vec<u16>)],
    ) -> Result<FaultPlan, String> {
        assert!(names.is_empty() || names.len() == usize::from(nodes), "a name for every node, or none");
        assert!(groups.iter().all(|(_, g)| !g.is_empty() && g.iter().all(|&n| n < nodes)), "groups of real nodes");
        let nodes = Nodes { count: nodes, names, groups };
        let file: PlanFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            format!("line {line}: {}", e.message().trim_end().replace('\n', "; "))
        })?;
        let mut r = Resolver { stream: Stream::new(seed, "fault-plan") };
        let n = &file.network;
        let mut partitions = Vec::new();
        for (i, p) in n.partition.iter().enumerate() {
            let what = format!("network.partition[{i}]");
            let start_ns = r.dur(&Some(p.start.clone()), &what)?;
            let heal_ns = r.dur(&Some(p.heal.clone()), &what)?;
            if heal_ns <= start_ns {
                return Err(format!("{what}: heal must come after start"));
            }
            let cut = match (&p.groups, &p.from, &p.to) {
                (Some(g), None, None) if g.len() >= 2 => {
                    Cut::Groups(g.iter().map(|g| nodes.all(g, &what)).collect::<Result<_, _>>()?)
                }
                (None, Some(from), Some(to)) => {
                    Cut::OneWay { from: nodes.all(from, &what)?, to: nodes.all(to, &what)? }
                }
                _ => return Err(format!("{what}: give either `groups` (two or more) or `from` and `to`")),
            };
            partitions.push(Partition { start_ns, heal_ns, cut });
        }
        let mut links = Vec::new();
        for (i, l) in n.link.iter().enumerate() {
            let what = format!("network.link[{i}]");
            links.push(LinkDelay {
                from: nodes.all(&l.from, &what)?,
                to: nodes.all(&l.to, &what)?,
                latency_ns: r.dur(&l.latency, &what)?,
                jitter_ns: r.dur(&l.jitter, &what)?,
            });
        }
        let network = NetFaults {
            latency_ns: r.dur(&n.latency, "network.latency")?,
            jitter_ns: r.dur(&n.jitter, "network.jitter")?,
            links,
            drop: r.num(&n.drop, "network.drop")?,
            duplicate: r.num(&n.duplicate, "network.duplicate")?,
            reorder: r.num(&n.reorder, "network.reorder")?,
            reorder_ns: r.dur(&n.reorder_delay, "network.reorder_delay")?,
            clog: r.span(&n.clog, "network.clog")?,
            cut: r.span(&n.cut, "network.cut")?,
            burst: n
                .burst
                .as_ref()
                .map(|b| -> Result<Burst, String> {
                    Ok(Burst {
                        enter: r.num(&Some(b.enter.clone()), "network.burst.enter")?,
                        leave: r.num(&Some(b.leave.clone()), "network.burst.leave")?,
                        drop: r.num(&Some(b.drop.clone()), "network.burst.drop")?,
                    })
                })
                .transpose()?,
            partitions,
        };
        let d = &file.disk;
        let disk = DiskFaults {
            latency_ns: r.dur(&d.latency, "disk.latency")?,
            read_error: r.num(&d.read_error, "disk.read_error")?,
            write_error: r.num(&d.write_error, "disk.write_error")?,
            corrupt: r.num(&d.corrupt, "disk.corrupt")?,
            misdirect: r.num(&d.misdirect, "disk.misdirect")?,
            stall: r.num(&d.stall, "disk.stall")?,
            stall_ns: r.dur(&d.stall_time, "disk.stall_time")?,
            lying_flush: r.num(&d.lying_flush, "disk.lying_flush")?,
            quota: d.quota.as_deref().map(parse_size).transpose().map_err(|e| format!("disk.quota: {e}"))?,
        };
        let mut crashes = Vec::new();
        for (i, c) in file.crash.iter().enumerate() {
            let what = format!("crash[{i}]");
            let node = nodes.one(&c.node, &what)?;
            let at_ns = r.dur(&Some(c.at.clone()), &what)?;
            let restart_ns = c.restart.as_ref().map(|d| r.dur(&Some(d.clone()), &what)).transpose()?;
            crashes.push(Crash { node, at_ns, torn: c.torn, restart_ns });
        }
        crashes.sort_by_key(|c| (c.at_ns, c.node));
        // A node must be up to crash: each crash comes after the node's
        // previous one restarted it.
        for (i, c) in crashes.iter().enumerate() {
            if let Some(prev) = crashes[..i].iter().rev().find(|p| p.node == c.node) {
                if prev.up_at_ns().is_none_or(|up| up > c.at_ns) {
                    return Err(format!(
                        "crash: node {} crashes at {:?} while still down from its crash at {:?}",
                        c.node,
                        std::time::Duration::from_nanos(c.at_ns),
                        std::time::Duration::from_nanos(prev.at_ns)
                    ));
                }
            }
        }
        let mut custom = Vec::new();
        let rules = file
            .draw
            .fault
            .iter()
            .enumerate()
            .map(|(i, r)| rule(r, &nodes, &format!("draw.fault[{i}]"), &mut custom))
            .collect::<Result<Vec<_>, _>>()?;
        if !rules.is_empty() && nodes.count == 0 {
            return Err("draw: drawn faults need nodes".into());
        }
        let draw = Draw { rules, before_setup: file.draw.before_setup, swarm: file.draw.swarm.unwrap_or(true), custom };
        Ok(FaultPlan { network, disk, crashes, draw })
    }

    /// The fault kinds this plan switches on (those that can land).
    pub fn configured(&self) -> Vec<&'static str> {
        let n = &self.network;
        let d = &self.disk;
        let mut k = Vec::new();
        let mut on = |cond: bool, kind: &'static str| {
            if cond {
                k.push(kind);
            }
        };
        on(n.latency_ns > 0 || n.links.iter().any(|l| l.latency_ns > 0), "net.latency");
        on(n.jitter_ns > 0 || n.links.iter().any(|l| l.jitter_ns > 0), "net.jitter");
        on(n.drop > 0.0, "net.drop");
        on(n.duplicate > 0.0, "net.duplicate");
        on(n.reorder > 0.0, "net.reorder");
        on(n.clog.as_ref().is_some_and(|c| c.probability > 0.0), "net.clog");
        on(n.cut.as_ref().is_some_and(|c| c.probability > 0.0), "net.cut");
        on(n.burst.as_ref().is_some_and(|b| b.enter > 0.0 && b.drop > 0.0), "net.burst");
        on(!n.partitions.is_empty(), "net.partition");
        on(d.read_error > 0.0, "disk.read_error");
        on(d.write_error > 0.0, "disk.write_error");
        on(d.corrupt > 0.0, "disk.corrupt");
        on(d.misdirect > 0.0, "disk.misdirect");
        on(d.stall > 0.0, "disk.stall");
        on(d.lying_flush > 0.0, "disk.lying_flush");
        on(d.quota.is_some(), "disk.enospc");
        on(self.crashes.iter().any(|c| !c.torn), "disk.crash_lost");
        on(self.crashes.iter().any(|c| c.torn), "disk.crash_torn");
        on(!self.crashes.is_empty(), "node.crash");
        for r in &self.draw.rules {
            if !k.contains(&r.kind.landing()) {
                k.push(r.kind.landing());
            }
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
        [network]
        latency = "100us"
        jitter = ["10us", "50us"]
        drop = [0.0, 0.1]
        [[network.partition]]
        start = "1s"
        heal = "3s"
        groups = [[0], [1, 2]]
        [[network.partition]]
        start = "5s"
        heal = "6s"
        from = [0]
        to = [1]
        [disk]
        read_error = 0.01
        quota = "1M"
        [[crash]]
        node = 2
        at = "2s"
        torn = true
        restart = ["100ms", "1s"]
        [[crash]]
        node = 2
        at = "5s"
    "#;

    #[test]
    fn parses_and_resolves_ranges_from_the_seed() {
        let a = FaultPlan::parse(PLAN, 1, 3).unwrap();
        assert_eq!(a, FaultPlan::parse(PLAN, 1, 3).unwrap());
        assert_ne!(a, FaultPlan::parse(PLAN, 2, 3).unwrap(), "ranges follow the seed");
        assert_eq!(a.network.latency_ns, 100_000);
        assert!((10_000..=50_000).contains(&a.network.jitter_ns));
        assert!((0.0..=0.1).contains(&a.network.drop));
        assert_eq!(a.disk.quota, Some(1 << 20));
        assert_eq!(a.crashes.len(), 2);
        assert_eq!((a.crashes[0].node, a.crashes[0].at_ns, a.crashes[0].torn), (2, 2_000_000_000, true));
        assert!(a.crashes[0].up_at_ns().is_some_and(|t| (2_100_000_000..=3_000_000_000).contains(&t)));
        assert_eq!(a.crashes[1].up_at_ns(), None, "no restart: the node stays down");
        assert!(a.configured().contains(&"net.partition") && a.configured().contains(&"disk.crash_torn"));
    }

    /// Rates and crashes written down are faults in force from the start;
    /// rules to draw from, or rates of zero, are not.
    #[test]
    fn a_plan_writes_faults_only_with_rates_or_crashes() {
        assert!(FaultPlan::parse(PLAN, 1, 3).unwrap().writes_faults());
        let drawn = "[[draw.fault]]\nkind = \"kill\"\nevery = \"1ms\"\nduration = \"2ms\"\ntargets = [[0]]\n";
        let quiet = "[network]\ndrop = 0.0\n[disk]\nread_error = 0.0\n";
        for text in [drawn, quiet, ""] {
            assert!(!FaultPlan::parse(text, 1, 2).unwrap().writes_faults(), "{text}");
        }
        assert!(FaultPlan::parse("[disk]\nwrite_error = 0.01\n", 1, 2).unwrap().writes_faults());
    }

    #[test]
    fn partitions_cut_what_they_say() {
        let a = FaultPlan::parse(PLAN, 1, 3).unwrap();
        let (sym, oneway) = (&a.network.partitions[0], &a.network.partitions[1]);
        assert!(sym.blocks(0, 1, 1_500_000_000) && sym.blocks(2, 0, 1_500_000_000));
        assert!(!sym.blocks(1, 2, 1_500_000_000), "same group");
        assert!(!sym.blocks(0, 1, 3_000_000_000), "healed");
        assert!(oneway.blocks(0, 1, 5_500_000_000) && !oneway.blocks(1, 0, 5_500_000_000));
    }

    #[test]
    fn bad_plans_say_what_is_wrong() {
        for (text, needle) in [
            ("[network]\ndrop = 1.5", "not between 0 and 1"),
            ("[network]\nlatency = \"fast\"", "not a duration"),
            ("[network]\nbogus = 1", "line 2: unknown field `bogus`"),
            ("[[network.partition]]\nstart = \"2s\"\nheal = \"1s\"\ngroups = [[0],[1]]", "heal must come after"),
            ("[[network.partition]]\nstart = \"1s\"\nheal = \"2s\"\ngroups = [[0],[7]]", "node 7 does not exist"),
            ("[[crash]]\nnode = 9\nat = \"1s\"", "node 9 does not exist"),
            ("[[crash]]\nnode = 1\nat = \"1s\"\n[[crash]]\nnode = 1\nat = \"2s\"", "while still down"),
            (
                "[[crash]]\nnode = 1\nat = \"1s\"\nrestart = \"2s\"\n[[crash]]\nnode = 1\nat = \"2s\"",
                "while still down",
            ),
            ("[disk]\ncrash = []", "unknown field `crash`"),
        ] {
            let e = FaultPlan::parse(text, 1, 2).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn nodes_can_be_named() {
        let names = ["db1".to_owned(), "db2".to_owned(), "client".to_owned()];
        let text = "[[network.partition]]\nstart = \"1s\"\nheal = \"2s\"\ngroups = [[\"db1\"], [\"db2\", 2]]\n\n[[crash]]\nnode = \"db2\"\nat = \"3s\"\n";
        let p = FaultPlan::parse_named(text, 1, 3, &names).unwrap();
        assert_eq!(p.network.partitions[0].cut, Cut::Groups(vec![vec![0], vec![1, 2]]));
        assert_eq!(p.crashes[0].node, 1);
        let e = FaultPlan::parse_named(&text.replace("\"db2\", 2", "\"db3\""), 1, 3, &names).unwrap_err();
        assert!(e.contains("no node named \"db3\" (the nodes are db1, db2, client)"), "{e}");
        let e = FaultPlan::parse(text, 1, 3).unwrap_err();
        assert!(e.contains("nodes have names only in compose projects"), "{e}");
        let e = FaultPlan::parse("[[crash]]\nnode = 1.5\nat = \"1s\"\n", 1, 3).unwrap_err();
        assert!(e.contains("a node number or a service name"), "{e}");
    }

    /// A group's name (a Kubernetes Service) stands for its nodes wherever
    /// a list of nodes is written, once each; not where one node is.
    #[test]
    fn a_group_names_its_nodes() {
        let names = ["db-0".to_owned(), "db-1".to_owned(), "client".to_owned()];
        let groups = [("db".to_owned(), vec![0, 1])];
        let text =
            "[[network.partition]]\nstart = \"1s\"\nheal = \"2s\"\ngroups = [[\"db\", \"db-1\"], [\"client\"]]\n";
        let p = FaultPlan::parse_grouped(text, 1, 3, &names, &groups).unwrap();
        assert_eq!(p.network.partitions[0].cut, Cut::Groups(vec![vec![0, 1], vec![2]]));
        let crash = "[[crash]]\nnode = \"db\"\nat = \"3s\"\n";
        let e = FaultPlan::parse_grouped(crash, 1, 3, &names, &groups).unwrap_err();
        assert!(e.contains("crash[0]: \"db\" names 2 nodes, not one"), "{e}");
        let e = FaultPlan::parse_grouped(&crash.replace("\"db\"", "\"dc\""), 1, 3, &names, &groups).unwrap_err();
        assert!(e.contains("no node named \"dc\" (the nodes are db-0, db-1, client; groups db)"), "{e}");
        assert_eq!(
            FaultPlan::parse_grouped(&crash.replace("\"db\"", "\"db-0\""), 1, 3, &names, &groups).unwrap().crashes[0]
                .node,
            0
        );
    }

    #[test]
    fn the_examples_parse_for_three_nodes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/faults");
        let mut seen = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for seed in 0..20 {
                let plan = FaultPlan::parse(&text, seed, 3).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(!plan.configured().is_empty(), "{}", path.display());
            }
            seen.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
        seen.sort();
        assert_eq!(seen, ["chaos.toml", "disk-crash.toml", "drawn.toml", "partition.toml"]);
    }

    const DRAW: &str = r#"
        [draw]
        swarm = false
        [[draw.fault]]
        kind = "partition"
        every = ["1s", "5s"]
        duration = ["100ms", "2s"]
        targets = ["minority", "ring", "split 3", ["db1"], { groups = [["db1"], ["db2", "client"]] }]
        one_way = 0.25
        [[draw.fault]]
        kind = "drop"
        every = "2s"
        duration = "500ms"
        probability = [0.1, 0.5]
        among = ["db1", "db2"]
        [[draw.fault]]
        kind = "crash"
        every = "10s"
        duration = ["1s", "3s"]
        targets = ["one", "majority"]
        torn = 0.5
        stays_down = 0.1
        [[draw.fault]]
        kind = "stall"
        every = "3s"
        duration = "1s"
        probability = 0.2
        delay = ["10ms", "50ms"]
    "#;

    #[test]
    fn draw_rules_are_ranges_left_to_each_timeline() {
        let names = ["db1".to_owned(), "db2".to_owned(), "client".to_owned()];
        let plan = FaultPlan::parse_named(DRAW, 1, 3, &names).unwrap();
        assert_eq!(plan, FaultPlan::parse_named(DRAW, 2, 3, &names).unwrap(), "nothing drawn from the plan's seed");
        let d = &plan.draw;
        assert!(!d.swarm && !d.before_setup);
        let p = &d.rules[0];
        assert_eq!(
            (p.kind, p.every_ns, p.duration_ns),
            (DrawnKind::Partition, [1_000_000_000, 5_000_000_000], [100_000_000, 2_000_000_000])
        );
        assert_eq!(
            p.targets,
            [
                Selector::Minority,
                Selector::Ring,
                Selector::Split(3),
                Selector::Nodes(vec![0]),
                Selector::Groups(vec![vec![0], vec![1, 2]])
            ]
        );
        assert_eq!(p.one_way, 0.25);
        assert_eq!((d.rules[1].probability, d.rules[1].among.clone()), ([0.1, 0.5], vec![0, 1]));
        assert_eq!(d.rules[1].targets, [Selector::One], "one node by default");
        assert_eq!((d.rules[2].torn, d.rules[2].stays_down), (0.5, 0.1));
        assert_eq!(d.rules[3].delay_ns, [10_000_000, 50_000_000]);
        let configured = plan.configured();
        for kind in ["net.partition", "net.drop", "node.crash", "disk.stall"] {
            assert!(configured.contains(&kind), "{configured:?}");
        }
        // Swarm testing is on unless a plan says otherwise.
        let plain =
            FaultPlan::parse("[[draw.fault]]\nkind = \"clog\"\nevery = \"1s\"\nduration = \"1s\"\n", 1, 3).unwrap();
        assert!(plain.draw.swarm);
        assert_eq!(plain.draw.rules[0].targets, [Selector::One, Selector::Minority, Selector::Majority]);
    }

    #[test]
    fn bad_draw_rules_say_what_is_wrong() {
        let rule = |body: &str| format!("[[draw.fault]]\nevery = \"1s\"\nduration = \"1s\"\n{body}");
        for (body, needle) in [
            ("kind = \"meteor\"", "unknown kind \"meteor\" (the kinds are partition, clog, drop"),
            ("kind = \"drop\"", "draw.fault[0] (drop): give a `probability`"),
            ("kind = \"latency\"", "give a `delay`"),
            ("kind = \"partition\"\nprobability = 0.5", "`probability` does not apply"),
            ("kind = \"crash\"\none_way = 0.5", "`one_way` does not apply"),
            ("kind = \"drop\"\nprobability = 0.1\ntargets = [\"ring\"]", "apply to cuts only"),
            ("kind = \"partition\"\ntargets = [\"all\"]", "`all` cuts nothing"),
            ("kind = \"partition\"\ntargets = [\"split 1\"]", "unknown target \"split 1\""),
            ("kind = \"partition\"\ntargets = [[7]]", "node 7 does not exist"),
            ("kind = \"crash\"\ntorn = 2.0", "not between 0 and 1"),
            ("kind = \"crash\"\nsometimes = 1", "unknown field `sometimes`"),
            ("kind = \"bump\"", "(bump): `offset` is required"),
            ("kind = \"strobe\"\noffset = \"1s\"", "(strobe): `period` is required"),
            ("kind = \"strobe\"\noffset = \"1s\"\nperiod = \"0s\"", "period must be more than 0s"),
            ("kind = \"drift\"", "give a `rate` in parts per million"),
            ("kind = \"drift\"\nrate = [10, 200000]", "rate 200000 ppm is more than 100000"),
            ("kind = \"drift\"\nrate = [10, 5]", "rate: range [10, 5] is empty"),
            ("kind = \"drift\"\nrate = [10, 50]\ntargets = [\"one\"]", "a drift hits every node"),
            ("kind = \"wipe\"\noffset = \"1s\"", "`offset` does not apply"),
            ("kind = \"custom\"", "`command` is required"),
            ("kind = \"custom\"\ncommand = \" \"", "`command` must be a non-empty shell command"),
            ("kind = \"crash\"\ncommand = \"true\"", "`command` does not apply"),
            ("kind = \"bump\"\noffset = \"1s\"\nrate = [1, 2]", "`rate` does not apply"),
        ] {
            let e = FaultPlan::parse(&rule(body), 1, 3).unwrap_err();
            assert!(e.contains(needle), "{body}: {e}");
        }
        let e =
            FaultPlan::parse("[[draw.fault]]\nkind = \"clog\"\nevery = \"0s\"\nduration = \"1s\"\n", 1, 3).unwrap_err();
        assert!(e.contains("every must be more than 0s"), "{e}");
        let e = FaultPlan::parse(&rule("kind = \"clog\""), 1, 0).unwrap_err();
        assert!(e.contains("drawn faults need nodes"), "{e}");
    }

    #[test]
    fn clock_and_wipe_rules() {
        let text = "[[draw.fault]]\nkind = \"bump\"\nevery = \"1s\"\nduration = \"1s\"\noffset = [\"4ms\", \"262s\"]\n\
                    [[draw.fault]]\nkind = \"strobe\"\nevery = \"1s\"\nduration = \"1s\"\noffset = \"2s\"\nperiod = \"50ms\"\n\
                    [[draw.fault]]\nkind = \"drift\"\nevery = \"1s\"\nduration = \"1s\"\nrate = [100, 5000]\n\
                    [[draw.fault]]\nkind = \"wipe\"\nevery = \"1s\"\nduration = \"1s\"\n";
        let p = FaultPlan::parse(text, 1, 3).unwrap();
        let r = &p.draw.rules;
        assert_eq!(r[0].offset_ns, [4_000_000, 262_000_000_000]);
        assert_eq!((r[1].offset_ns, r[1].period_ns), ([2_000_000_000; 2], [50_000_000; 2]));
        assert_eq!(r[2].rate_ppm, [100, 5000]);
        assert_eq!(r[2].targets, [Selector::All], "a drift hits every node");
        assert!([&r[0], &r[1], &r[3]].iter().all(|r| r.targets == [Selector::One]), "bumps and strobes hit a node");
        assert_eq!(p.configured(), ["clock.bump", "clock.strobe", "clock.drift", "node.wipe"]);
        // Custom commands are numbered in plan order; a custom fault needs
        // no duration, every other kind does.
        let custom = "[[draw.fault]]\nkind = \"custom\"\nevery = \"1s\"\ncommand = \"kill -HUP 1\"\n\
                      [[draw.fault]]\nkind = \"custom\"\nevery = \"2s\"\ncommand = \"redis-cli failover\"\n";
        let p = FaultPlan::parse(custom, 1, 3).unwrap();
        assert_eq!(p.draw.custom, ["kill -HUP 1", "redis-cli failover"]);
        assert_eq!((p.draw.rules[0].command, p.draw.rules[1].command), (Some(0), Some(1)));
        let e = FaultPlan::parse("[[draw.fault]]\nkind = \"clog\"\nevery = \"1s\"\n", 1, 3).unwrap_err();
        assert!(e.contains("`duration` is required"), "{e}");
        let many = "[[draw.fault]]\nkind = \"custom\"\nevery = \"1s\"\ncommand = \"true\"\n".repeat(MAX_CUSTOM + 1);
        let e = FaultPlan::parse(&many, 1, 3).unwrap_err();
        assert!(e.contains("draw.fault[1024] (custom): too many custom faults (at most 1024)"), "{e}");
    }

    #[test]
    fn a_zero_plan_configures_nothing() {
        assert!(FaultPlan::parse("", 1, 2).unwrap().configured().is_empty());
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// A range up to a duration that saturates (600 years is more than
    /// 2^64 ns) spans every u64: it once overflowed counting its values.
    #[test]
    fn a_range_of_every_duration_resolves() {
        let plan = FaultPlan::parse("[network]\njitter = [\"0s\", \"600y\"]\n", 1, 2).unwrap();
        assert_eq!(plan, FaultPlan::parse("[network]\njitter = [\"0s\", \"600y\"]\n", 1, 2).unwrap());
        let plan = FaultPlan::parse("[network]\nlatency = [\"600y\", \"700y\"]\n", 1, 2).unwrap();
        assert_eq!(plan.network.latency_ns, u64::MAX);
    }

    /// What the `fault_plan` fuzz target does (byte 0 picks the seed, byte 1
    /// the node count, the rest is the plan), over its corpus and
    /// regressions; every seed (the examples' plans) parses.
    #[test]
    fn fuzz_corpus_and_regressions_parse_or_fail_cleanly() {
        let inputs = fuzz_inputs("fault_plan");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let [seed, nodes, text @ ..] = &data[..] else { continue };
            let Ok(text) = std::str::from_utf8(text) else { continue };
            let seed = u64::from(*seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let nodes = u16::from(*nodes % 17);
            let names: Vec<String> = (0..nodes)
                .map(|i| ["db", "web", "cache"].get(usize::from(i)).map_or(format!("n{i}"), |s| s.to_string()))
                .collect();
            let named = FaultPlan::parse_named(text, seed, nodes, &names);
            let plain = FaultPlan::parse(text, seed, nodes);
            if file.iter().any(|c| c == "corpus") {
                assert!(named.is_ok(), "{}: {named:?}", file.display());
            }
            for plan in [named, plain].into_iter().flatten() {
                let _ = plan.configured();
            }
        }
    }
}
