//! The summary of a run: what `hvsim run --json` prints.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::devices::hypercall::ChannelStats;
use crate::devices::virtio::DeviceReport;
use crate::devices::BusStats;
use crate::faults::schedule::Episode;
use crate::faults::FaultReport;
use crate::machine::{Counters, End, Machine};

/// How far a run can be trusted to come out the same from the same seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Replayable {
    /// Something outside the seed influenced the run (a watchdog-forced
    /// exit), or a second execution came out different.
    No,
    /// Nothing hvsim knows to be nondeterministic touched the run, but it
    /// ran once (or the host lets the guest read something hvsim cannot
    /// see: see the reasons).
    Expected,
    /// Executed twice (`run --verify`, a replay, the explorer's
    /// re-execution), with the same trace and memory both times.
    Verified,
}

impl Replayable {
    pub fn name(self) -> &'static str {
        match self {
            Replayable::No => "no",
            Replayable::Expected => "expected",
            Replayable::Verified => "verified",
        }
    }
}

impl Summary {
    /// Adds what this host lets the guest read without hvsim seeing it: the
    /// run is then at most `expected`, for that reason.
    pub fn set_host_limits(&mut self, limits: Vec<String>) {
        if !limits.is_empty() && self.replayable == Replayable::Expected {
            self.replayable_reasons.push(format!(
                "this host lets guest user mode bypass hvsim ({}): a program that does so is not replayable",
                limits.join("; ")
            ));
        }
        self.host_limits = limits;
    }

    /// Compares this run with a second execution of the same seed: the same
    /// trace and memory make it `verified`; any difference makes it `no`,
    /// but the memory alone, on a host that lets guest user mode read what
    /// hvsim cannot see (`host_limits`): `expected`, as the explorer and
    /// `hvsim replay` judge a re-execution (programs such as glibc's loader
    /// keep what they read in memory; the trace is still the same).
    pub fn verify_against(&mut self, second: &Summary) {
        let mut differs = Vec::new();
        for (what, a, b) in [
            ("trace", &self.trace_hash, &second.trace_hash),
            ("memory", &self.memory_hash, &second.memory_hash),
            ("console", &self.console, &second.console),
        ] {
            if a != b {
                differs.push(what);
            }
        }
        if self.replayable == Replayable::No || second.replayable == Replayable::No {
            self.replayable = Replayable::No;
            self.replayable_reasons.extend(second.replayable_reasons.iter().cloned());
        } else if differs.is_empty() {
            self.replayable = Replayable::Verified;
            self.replayable_reasons.clear();
        } else if differs == ["memory"] && !self.host_limits.is_empty() {
            self.replayable = Replayable::Expected;
            self.replayable_reasons.push(format!(
                "a second execution of seed {} had the same trace and console but other memory, which this host \
                 lets a program cause ({})",
                self.seed,
                self.host_limits.join("; ")
            ));
        } else {
            self.replayable = Replayable::No;
            self.replayable_reasons.push(format!(
                "a second execution of seed {} differed in its {} ({} vs {} trace)",
                self.seed,
                differs.join(", "),
                &self.trace_hash[..16.min(self.trace_hash.len())],
                &second.trace_hash[..16.min(second.trace_hash.len())]
            ));
        }
        self.replayable_reasons.sort();
        self.replayable_reasons.dedup();
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// Whether the same seed gives this run again (see [`Replayable`]).
    pub replayable: Replayable,
    /// Why `replayable` is not higher: what touched the run (for `no`), or
    /// what could have without hvsim seeing it (for `expected`).
    pub replayable_reasons: Vec<String>,
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
    /// The drawn faults that struck (a plan's `[[draw.fault]]` rules), in
    /// the order they started, with what each touched.
    pub drawn_faults: Vec<Episode>,
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
            replayable: if state.nonreplayable.is_empty() { Replayable::Expected } else { Replayable::No },
            replayable_reasons: state.nonreplayable.clone(),
            host_limits: Vec::new(),
            console: String::from_utf8_lossy(&devices.serial.console()).into_owned(),
            console_dropped_bytes: devices.serial.dropped(),
            messages: machine.messages().iter().map(|m| String::from_utf8_lossy(&m.bytes).into_owned()).collect(),
            counters: state.counters.clone(),
            channel: devices.hc.stats().clone(),
            bus: devices.stats.clone(),
            faults: devices.virtio.fault_report(),
            drawn_faults: devices.virtio.struck(),
            devices: devices.virtio.device_reports(),
            wall_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(trace: &str, memory: &str, limits: &[&str]) -> Summary {
        let mut s = Summary {
            guest: "g".into(),
            seed: 1,
            end: "exit".into(),
            end_detail: String::new(),
            exit_status: Some(0),
            trace_hash: trace.into(),
            memory_hash: memory.into(),
            exits: 1,
            vtime_ns: 1,
            replayable: Replayable::Expected,
            replayable_reasons: Vec::new(),
            host_limits: Vec::new(),
            console: String::new(),
            console_dropped_bytes: 0,
            messages: Vec::new(),
            counters: Counters::default(),
            channel: ChannelStats::default(),
            bus: BusStats::default(),
            faults: Vec::new(),
            drawn_faults: Vec::new(),
            devices: Vec::new(),
            wall_ms: 0,
        };
        s.set_host_limits(limits.iter().map(|l| l.to_string()).collect());
        s
    }

    /// `run --verify` judges a second execution as the explorer judges a
    /// re-execution: other memory with the same trace is expected where
    /// the host lets user mode read the TSC, never where it does not.
    #[test]
    fn a_second_execution_is_judged_as_the_explorer_judges_it() {
        let verified = |a: Summary, b: Summary| {
            let mut a = a;
            a.verify_against(&b);
            a.replayable
        };
        assert_eq!(verified(run("t", "m", &[]), run("t", "m", &[])), Replayable::Verified);
        assert_eq!(verified(run("t", "m", &[]), run("t", "other", &[])), Replayable::No);
        assert_eq!(verified(run("t", "m", &["rdtsc"]), run("t", "other", &["rdtsc"])), Replayable::Expected);
        assert_eq!(verified(run("t", "m", &["rdtsc"]), run("other", "other", &["rdtsc"])), Replayable::No);
    }
}
