//! What an exploration is asked to do: its target, seed and budget, how
//! its branches run, and what is checked and estimated along the way. Plain
//! data, set by `hvsim explore`'s flags and the benchmarks.

use std::path::PathBuf;

use hvsim_vmm::Vtime;
use serde::{Deserialize, Serialize};

use crate::record::checkers::CheckerSpec;
use crate::record::claims::ClaimSpec;
use crate::record::discovery::Saturation;
use crate::record::exploration::{Budget, Policy};
use crate::record::shard::Shard;
use crate::record::timeline::Span;
use crate::record::winddown::Winddown;
use crate::{StartOptions, Target};

#[derive(Clone, Debug)]
pub struct ExploreConfig {
    pub target: Target,
    pub seed: u64,
    pub budget: Budget,
    /// How far each branch runs.
    pub span: Span,
    /// Snapshots at every multiple of this much virtual time from the root
    /// (`None`: only where something is new).
    pub snapshot_every: Option<Vtime>,
    /// The snapshot tree's page memory: above it, the least promising
    /// leaves are evicted between rounds (`u64::MAX`: no bound).
    pub snapshot_memory: u64,
    /// How long (virtual) to wait for setup complete before taking the root
    /// snapshot anyway.
    pub setup_limit: Vtime,
    /// `false`: every branch starts from the root (the baseline that
    /// `hvsim bench explore` compares against).
    pub branch_from_snapshots: bool,
    /// Stop as soon as a bug is found.
    pub stop_at_first_bug: bool,
    /// Stop once the discovery estimates say the next timelines are
    /// unlikely to find anything new (`--until-saturated`).
    pub until_saturated: Option<Saturation>,
    /// How many times each new bug's timeline is executed again to confirm
    /// it (0: not at all; its record then says `expected`).
    pub reexecutions: u32,
    /// How to boot the target; its `interrupt`, raised, ends the
    /// exploration.
    pub start: StartOptions,
    /// Branches per round: picked together, from the snapshots as they
    /// stand when the round begins, and merged in order. The exploration is
    /// a function of the seed and the batch (1: each branch sees all before it).
    pub batch: usize,
    /// Machines (threads) running a round's branches: speed only.
    pub workers: usize,
    /// Keep the root of a Linux target on disk, and start from a saved one
    /// (`roots.rs`).
    pub saved_roots: bool,
    /// Run the root even if a saved one exists (and save it again).
    pub fresh_root: bool,
    /// Where saved roots are kept: `None`, hvsim's cache; a directory
    /// shards share, where the root step left the root (docs/scale.md).
    pub roots_dir: Option<PathBuf>,
    /// Refuse to make the root: it must be a saved one, made by the same
    /// hvsim on the same world (a shard's root is made once, for all).
    pub require_root: bool,
    /// Which shard of the exploration this is (`shard.rs`); the default is
    /// the whole.
    pub shard: Shard,
    /// How branches pick their snapshot (`schedule.rs`).
    pub policy: Policy,
    /// Checkers run at the end of every timeline (`checkers.rs`).
    pub checkers: Vec<CheckerSpec>,
    /// The project's claims, observed at the end of every timeline
    /// (`claims.rs`).
    pub claims: Vec<ClaimSpec>,
    /// Each bug's likelihood over its timeline, estimated at the end
    /// (`likelihood.rs`).
    pub likelihood: LikelihoodParams,
    /// When Test Composer winds down before a timeline's limit
    /// (`winddown.rs`).
    pub winddown: Winddown,
}

impl ExploreConfig {
    /// How long (virtual) the root waits for setup complete unless told:
    /// long enough for a cluster to form, short enough that a program that
    /// never reports it costs minutes, not an hour, on a slow host.
    pub fn default_setup_limit(linux: bool) -> Vtime {
        Vtime::from_secs(if linux { 60 } else { 10 })
    }
}

/// Each bug's likelihood estimate (`likelihood.rs`): what to estimate, and
/// at what cost at most.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LikelihoodParams {
    /// Branches from each point (0: no estimate).
    pub runs: u32,
    /// Points along each bug's timeline: the root, evenly spaced moments,
    /// and one just before the failure.
    pub points: u32,
    /// The virtual time all estimates may run, as a share of the virtual
    /// time the exploration's branches ran.
    pub budget: f64,
}

impl Default for LikelihoodParams {
    fn default() -> LikelihoodParams {
        LikelihoodParams { runs: 8, points: 5, budget: 0.10 }
    }
}

impl LikelihoodParams {
    pub fn off() -> LikelihoodParams {
        LikelihoodParams { runs: 0, ..LikelihoodParams::default() }
    }
}
