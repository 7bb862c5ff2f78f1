//! Node faults: a node loses power (a crash) and perhaps gets it back.
//! A plan's `[[crash]]` entries happen at fixed times; drawn crashes (see
//! `schedule.rs`) at times a timeline draws. Either way the virtio devices
//! carry them out (`devices/virtio/mod.rs`): the node's disk loses (or
//! tears) its unflushed writes, its NIC and disk go dead, and the guest's
//! init kills its processes, and restarts its service when power returns.

use serde::{Deserialize, Serialize};

/// A node loses power at `at_ns`: its disk loses (or tears) the writes not
/// yet flushed, its NIC and disk go dead, and the guest's init kills its
/// processes. With `restart_ns` it gets power back that much later.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Crash {
    pub node: u16,
    pub at_ns: u64,
    /// Tear the unflushed writes (keep a seed-chosen prefix, sector by
    /// sector) instead of losing them all.
    pub torn: bool,
    /// Downtime before the node restarts; `None`: it stays down.
    pub restart_ns: Option<u64>,
}

impl Crash {
    /// When the node is back, if ever.
    pub fn up_at_ns(&self) -> Option<u64> {
        self.restart_ns.map(|d| self.at_ns.saturating_add(d))
    }
}

/// A node loses or regains power.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerChange {
    pub at_ns: u64,
    pub node: u16,
    pub on: bool,
    /// Losing power tears the unflushed writes rather than losing them.
    pub torn: bool,
}

/// The power changes of `crashes`, in order.
pub fn power_schedule(crashes: &[Crash]) -> Vec<PowerChange> {
    let mut s: Vec<PowerChange> = crashes
        .iter()
        .flat_map(|c| {
            let off = PowerChange { at_ns: c.at_ns, node: c.node, on: false, torn: c.torn };
            let on = c.up_at_ns().map(|at_ns| PowerChange { at_ns, node: c.node, on: true, torn: false });
            std::iter::once(off).chain(on)
        })
        .collect();
    // A restart at the very moment of another crash of the node comes first.
    s.sort_by_key(|p| (p.at_ns, p.node, !p.on));
    s
}
