//! What faults did over a whole exploration: per fault kind, the packets or
//! requests it touched (landing evidence) and the drawn faults of that kind
//! that struck, summed over the root run and every branch, each branch
//! counting only what happened after its snapshot.

use std::collections::BTreeMap;

use hvsim_vmm::faults::FaultReport;
use hvsim_vmm::Machine;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FaultTally {
    pub landed: BTreeMap<String, u64>,
    #[serde(default)]
    pub drawn: BTreeMap<String, u64>,
}

/// Where a timeline's fault counters stood when a stretch of it began.
pub(crate) struct Mark(Vec<FaultReport>);

impl FaultTally {
    pub(crate) fn mark(m: &Machine) -> Mark {
        Mark(m.state().devices.virtio.fault_report())
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
    }

    /// Adds another tally (a branch's).
    pub(crate) fn merge(&mut self, other: &FaultTally) {
        for (kind, n) in &other.landed {
            *self.landed.entry(kind.clone()).or_insert(0) += n;
        }
        for (kind, n) in &other.drawn {
            *self.drawn.entry(kind.clone()).or_insert(0) += n;
        }
    }

    pub fn reports(&self) -> Vec<FaultReport> {
        self.landed
            .iter()
            .map(|(kind, &landed)| FaultReport::new(kind, landed, self.drawn.get(kind).copied().unwrap_or(0)))
            .collect()
    }
}
