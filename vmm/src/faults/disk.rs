//! Disk faults: what a plan's `[disk]` section resolves to (rates for the
//! whole run), and drawn disk faults in force at a node's disk. The disk
//! (`disk.rs`) applies both to every request.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskFaults {
    pub latency_ns: u64,
    pub read_error: f64,
    pub write_error: f64,
    /// Silent corruption: a bit of the data read is flipped.
    pub corrupt: f64,
    /// A write lands on another sector than the one asked for.
    pub misdirect: f64,
    pub stall: f64,
    pub stall_ns: u64,
    /// A flush reports success but persists nothing.
    pub lying_flush: f64,
    /// A thin-provisioned disk's space: writes that would allocate beyond
    /// it fail (ENOSPC, reported as EIO); overwrites succeed.
    pub quota: Option<u64>,
}

/// What a drawn disk fault does to each request while it lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DiskEffect {
    ReadError,
    WriteError,
    Corrupt,
    Misdirect,
    /// A request waits `stall_ns` more.
    Stall {
        stall_ns: u64,
    },
    LyingFlush,
    /// Every write that allocates fails, as on a full disk.
    Enospc,
}

impl DiskEffect {
    /// Its name in landing evidence (the same as a plan's rate's).
    pub fn landing(self) -> &'static str {
        match self {
            DiskEffect::ReadError => "disk.read_error",
            DiskEffect::WriteError => "disk.write_error",
            DiskEffect::Corrupt => "disk.corrupt",
            DiskEffect::Misdirect => "disk.misdirect",
            DiskEffect::Stall { .. } => "disk.stall",
            DiskEffect::LyingFlush => "disk.lying_flush",
            DiskEffect::Enospc => "disk.enospc",
        }
    }
}

/// A drawn disk fault in force at one disk, and what it touched there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskEpisode {
    /// The fault's number in its timeline (see `schedule.rs`).
    pub id: u64,
    pub effect: DiskEffect,
    /// Per request (Enospc: every allocating write).
    pub probability: f64,
    pub landed: u64,
}
