//! What faults did over a whole exploration: per fault kind, the packets or
//! requests it touched (landing evidence) and the drawn faults of that kind
//! that struck, summed over the root run and every branch, each branch
//! counting only what happened after its snapshot; and what each buggify
//! site did.

use std::collections::BTreeMap;

use hvsim_vmm::faults::buggify::Site;
use hvsim_vmm::faults::FaultReport;
use hvsim_vmm::Machine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct FaultTally {
    pub landed: BTreeMap<String, u64>,
    #[serde(default)]
    pub drawn: BTreeMap<String, u64>,
    /// Buggify sites (`hvsim_vmm::faults::buggify`), by name.
    #[serde(default)]
    pub buggify: BTreeMap<String, BuggifyTally>,
}

/// One buggify site over an exploration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BuggifyTally {
    /// Timelines (the root run and branches) in which it was enabled.
    pub timelines_enabled: u64,
    /// Timelines that reached it.
    pub timelines: u64,
    pub reached: u64,
    pub fired: u64,
}

/// Where a timeline's fault counters stood when a stretch of it began.
pub(crate) struct Mark(Vec<FaultReport>, BTreeMap<String, Site>);

impl FaultTally {
    pub(crate) fn mark(m: &Machine) -> Mark {
        Mark(m.state().devices.virtio.fault_report(), m.state().devices.hc.buggify().sites().clone())
    }

    /// Adds what happened on `m` since `mark`.
    pub(crate) fn add(&mut self, mark: &Mark, m: &Machine) {
        for now in m.state().devices.virtio.fault_report() {
            let was = mark.0.iter().find(|b| b.kind == now.kind);
            let (landed, drawn) = was.map_or((0, 0), |b| (b.landed, b.drawn));
            debug_assert!(now.landed >= landed && now.drawn >= drawn, "fault counters only grow within a timeline");
            *self.landed.entry(now.kind.clone()).or_insert(0) += now.landed.saturating_sub(landed);
            *self.drawn.entry(now.kind).or_insert(0) += now.drawn.saturating_sub(drawn);
        }
        for (name, now) in m.state().devices.hc.buggify().sites() {
            let was = mark.1.get(name).copied().unwrap_or_default();
            let t = self.buggify.entry(name.clone()).or_default();
            t.timelines += 1;
            t.timelines_enabled += u64::from(now.enabled);
            t.reached += now.reached.saturating_sub(was.reached);
            t.fired += now.fired.saturating_sub(was.fired);
        }
    }

    /// Adds another tally (a branch's, or a shard's, read from a file:
    /// counts stay at the top rather than wrap).
    pub(crate) fn merge(&mut self, other: &FaultTally) {
        let add = |to: &mut u64, n: u64| *to = to.saturating_add(n);
        for (kind, n) in &other.landed {
            add(self.landed.entry(kind.clone()).or_insert(0), *n);
        }
        for (kind, n) in &other.drawn {
            add(self.drawn.entry(kind.clone()).or_insert(0), *n);
        }
        for (name, b) in &other.buggify {
            let t = self.buggify.entry(name.clone()).or_default();
            add(&mut t.timelines_enabled, b.timelines_enabled);
            add(&mut t.timelines, b.timelines);
            add(&mut t.reached, b.reached);
            add(&mut t.fired, b.fired);
        }
    }

    pub fn reports(&self) -> Vec<FaultReport> {
        self.landed
            .iter()
            .map(|(kind, &landed)| FaultReport::new(kind, landed, self.drawn.get(kind).copied().unwrap_or(0)))
            .collect()
    }
}
