//! The summary of a run: what `hvsim run --json` prints.

use serde::{Deserialize, Serialize};

use crate::devices::hypercall::ChannelStats;
use crate::devices::virtio::DeviceReport;
use crate::devices::BusStats;
use crate::faults::FaultReport;
use crate::machine::{Counters, End, Machine};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub guest: String,
    pub seed: u64,
    /// Why the run stopped (see [`End::name`]).
    pub end: String,
    pub end_detail: String,
    /// Exit status, when the guest powered off through the hvsim port.
    pub exit_status: Option<u8>,
    /// Chained SHA-256 of every exit (the determinism log).
    pub trace_hash: String,
    /// SHA-256 of all guest RAM at the end of the run.
    pub memory_hash: String,
    pub exits: u64,
    pub vtime_ns: u64,
    pub replayable: bool,
    pub nonreplayable_reasons: Vec<String>,
    /// What this host cannot keep from the guest (see `hvsim doctor`): the
    /// run is replayable only if the guest does not rely on these.
    pub host_limits: Vec<String>,
    /// Everything the guest wrote to its serial console (lossy UTF-8).
    pub console: String,
    pub console_dropped_bytes: u64,
    /// Messages on the hypercall channel (lossy UTF-8), in order.
    pub messages: Vec<String>,
    pub counters: Counters,
    pub channel: ChannelStats,
    pub bus: BusStats,
    /// Landing evidence: for each fault kind the plan switches on, how many
    /// packets or requests it touched ("not landed" if none).
    pub faults: Vec<FaultReport>,
    /// Virtio devices: counters, and why the guest broke one, if it did.
    pub devices: Vec<DeviceReport>,
    /// Wall-clock duration of the run (informational; not deterministic).
    pub wall_ms: u64,
}

impl Summary {
    pub fn of(machine: &Machine, guest: &str, seed: u64, end: &End, wall_ms: u64) -> Summary {
        let state = machine.state();
        let devices = &state.devices;
        Summary {
            guest: guest.to_owned(),
            seed,
            end: end.name().to_owned(),
            end_detail: end.detail(),
            exit_status: match end {
                End::Exit { status } => Some(*status),
                _ => None,
            },
            trace_hash: machine.trace_state().hash_hex(),
            memory_hash: hex::encode(machine.ram().hash()),
            exits: machine.trace_state().events,
            vtime_ns: machine.now().nanos(),
            replayable: state.nonreplayable.is_empty(),
            nonreplayable_reasons: state.nonreplayable.clone(),
            host_limits: Vec::new(),
            console: String::from_utf8_lossy(devices.serial.console()).into_owned(),
            console_dropped_bytes: devices.serial.dropped(),
            messages: machine.messages().iter().map(|m| String::from_utf8_lossy(&m.bytes).into_owned()).collect(),
            counters: state.counters.clone(),
            channel: devices.hc.stats().clone(),
            bus: devices.stats.clone(),
            faults: devices.virtio.fault_report(),
            devices: devices.virtio.device_reports(),
            wall_ms,
        }
    }
}
