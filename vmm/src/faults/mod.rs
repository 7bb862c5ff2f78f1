//! Faults: what a run injects, and the evidence of what landed.
//!
//! - [`plan`]: the plan file (TOML, see examples/faults/): faults written
//!   down (rates, links, partitions and crashes at fixed times) and the
//!   rules of faults a timeline draws;
//! - [`schedule`]: the per-timeline schedule of drawn faults: generators,
//!   swarm testing, pausing, and what struck;
//! - [`network`], [`disk`], [`node`], [`clock`]: what each kind does, as
//!   the switch, the disks, the node power schedule and the guest's clock
//!   apply it;
//! - [`buggify`]: faulty behaviour programs turn on at their own code
//!   points, each site enabled or not per timeline;
//! - [`Vetoes`]: decisions of a timeline taken back (`hvsim minimize`).
//!
//! Every fault that touches a packet, a request or a node is counted by
//! kind ([`Landed`]): a kind a plan switches on that touched nothing is
//! reported as not landed.

pub mod buggify;
pub mod clock;
pub mod disk;
pub mod network;
pub mod node;
pub mod plan;
pub mod schedule;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use disk::DiskFaults;
pub use network::{Burst, Cut, LinkDelay, NetFaults, Partition, Span};
pub use node::Crash;
pub use plan::{parse_size, FaultPlan};

/// Decisions a timeline's seeds make that a minimized timeline takes back
/// (`hvsim minimize`): drawn faults that do not strike, by their number in
/// the timeline (`schedule::Episode::id`), and buggify sites that do not
/// fire. Every draw is still made, so what the seeds decide otherwise stays
/// the same as far as the run itself does.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Vetoes {
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub faults: std::collections::BTreeSet<u64>,
    /// Nor does any fault numbered from this on: a minimized timeline has
    /// only the decisions it kept, none drawn after its original failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub faults_from: Option<u64>,
    /// If set, only these buggify sites fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buggify_only: Option<std::collections::BTreeSet<String>>,
    /// Test Composer commands that do not start, by their run number (as
    /// init's composer numbers the commands it decides to run).
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub commands: std::collections::BTreeSet<u64>,
    /// Nor does any command numbered from this on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands_from: Option<u64>,
}

impl Vetoes {
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
            && self.faults_from.is_none()
            && self.buggify_only.is_none()
            && self.commands.is_empty()
            && self.commands_from.is_none()
    }

    /// Whether Test Composer's command run `run` starts.
    pub fn starts(&self, run: u64) -> bool {
        !self.commands.contains(&run) && self.commands_from.is_none_or(|from| run < from)
    }

    /// Whether drawn fault `id` strikes.
    pub fn strikes(&self, id: u64) -> bool {
        !self.faults.contains(&id) && self.faults_from.is_none_or(|from| id < from)
    }

    /// Whether buggify site `name` may fire.
    pub fn fires(&self, name: &str) -> bool {
        self.buggify_only.as_ref().is_none_or(|only| only.contains(name))
    }
}

/// How many packets or requests each fault kind touched.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Landed(pub BTreeMap<String, u64>);

impl Landed {
    pub fn hit(&mut self, kind: &str) {
        tracing::debug!(fault = kind, "fault landed");
        *self.0.entry(kind.to_owned()).or_insert(0) += 1;
    }

    pub fn add(&mut self, kind: &str, n: u64) {
        if n > 0 {
            *self.0.entry(kind.to_owned()).or_insert(0) += n;
        }
    }

    pub fn get(&self, kind: &str) -> u64 {
        self.0.get(kind).copied().unwrap_or(0)
    }

    pub fn merge(&mut self, other: &Landed) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_insert(0) += v;
        }
    }
}

/// Landing evidence of what a fault did besides its own kind.
const CONSEQUENCES: [&str; 2] = ["net.clog_overflow", "disk.wiped"];

/// One line of landing evidence for the summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FaultReport {
    pub kind: String,
    pub landed: u64,
    /// "landed", or "not landed": configured but touched nothing.
    pub status: String,
    /// Drawn faults of this kind that struck.
    #[serde(default)]
    pub drawn: u64,
}

impl FaultReport {
    pub fn new(kind: &str, landed: u64, drawn: u64) -> FaultReport {
        let status = if landed > 0 { "landed" } else { "not landed" }.into();
        FaultReport { kind: kind.to_owned(), landed, status, drawn }
    }
}

/// Landing evidence for every kind `plan` switches on, with the drawn
/// faults of each kind that `struck`.
pub fn report(plan: &FaultPlan, landed: &Landed, struck: &[schedule::Episode]) -> Vec<FaultReport> {
    let drawn = |kind: &str| struck.iter().filter(|e| e.kind.landing() == kind).count() as u64;
    let mut lines: Vec<FaultReport> =
        plan.configured().into_iter().map(|kind| FaultReport::new(kind, landed.get(kind), drawn(kind))).collect();
    // What some faults did besides, when they did it: frames a jammed link
    // had no room for, sectors wipes discarded.
    for kind in CONSEQUENCES {
        if landed.get(kind) > 0 {
            lines.push(FaultReport::new(kind, landed.get(kind), 0));
        }
    }
    lines
}
