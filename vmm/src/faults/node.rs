//! Node faults: a node loses power (a crash) and perhaps gets it back.
//! A plan's `[[crash]]` entries happen at fixed times; drawn crashes (see
//! `schedule.rs`) at times a timeline draws. Either way the virtio devices
//! carry them out (`devices/virtio/mod.rs`): the node's disk loses (or
//! tears) its unflushed writes, its NIC and disk go dead, and the guest's
//! init kills its processes, and restarts its service when power returns.
//!
//! Drawn `pause`, `kill` and `stop` faults leave the node's power, disk and NIC
//! alone and act on its processes, through the guest's init
//! ([`NodeAction`]; `hvsim_abi::hc::event`).

use schemars::JsonSchema;
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

/// What a drawn node fault does to a node's processes for its duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeAction {
    /// Every process of the node is stopped (`SIGSTOP`) and continued
    /// (`SIGCONT`) at the end: a GC pause as peers see it; the node's
    /// kernel network stack keeps acknowledging.
    Pause,
    /// Every process of the node is killed (`SIGKILL`); its service starts
    /// again at the end. Unlike a crash the page cache survives: writes the
    /// processes made, flushed or not, are there after the restart.
    Kill,
    /// A graceful stop: every process of the node gets `SIGTERM`, and
    /// `SIGKILL` if it outlives [`hvsim_abi::hc::event::STOP_GRACE_MS`];
    /// the service starts again at the end (hvsim's restart, not a restart
    /// policy's: Docker would not restart a container stopped on purpose).
    Stop,
}

impl NodeAction {
    /// The machine events that start and end it (`hc::event`).
    pub fn events(self) -> (u32, u32) {
        use hvsim_abi::hc::event;
        match self {
            NodeAction::Pause => (event::NODE_PAUSE, event::NODE_RESUME),
            NodeAction::Kill => (event::NODE_KILL, event::NODE_START),
            NodeAction::Stop => (event::NODE_STOP, event::NODE_START),
        }
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
