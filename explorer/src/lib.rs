//! hvsim's explorer: coverage-guided branching of whole-VM timelines.
//!
//! - [`sdk`]: the guest's JSON-lines protocol (Antithesis SDK shapes).
//! - [`assertions`]: the catalog and per-assertion verdicts.
//! - [`history`], [`checkers`], [`manifest`]: histories recorded through
//!   the SDK, checked at the end of every timeline by the checkers the
//!   project's `hvsim.toml` names.
//! - [`composer`]: what Test Composer ran, in a timeline and over all;
//!   [`winddown`]: when it winds down so that its checks run.
//! - [`coverage`]: the edges every timeline reached.
//! - [`exploration`]: what an exploration is, as plain data: its result,
//!   how it ended, where its time went.
//! - [`engine`]: the exploration loop over the snapshot tree, in rounds of
//!   branches that `workers` run (one machine per thread) and `branch`
//!   describes.
//! - [`timeline`], [`bug`]: replayable timelines and bug records; `bugs`:
//!   the bugs of one exploration, found and then confirmed; [`replay`]:
//!   following a record's timeline on a machine.
//! - [`report`]: report.md, report.json, report.html and the bug files, in
//!   an exploration's own directory ([`report::RunDir`]).
//! - [`roots`]: saved roots, the machine at setup complete kept on disk.
//! - [`shard`], [`merge`]: one exploration split over hosts, and its
//!   shards' results combined into one.
//! - [`schema`]: the JSON documents hvsim writes and their versioned
//!   schemas; [`document`]: the one way each is written and checked.
//!
//! What is explored is a [`Target`] (`hvsim_guest_image::target`).

pub mod assertions;
mod bandit;
mod branch;
pub mod bug;
mod bugs;
pub mod checkers;
pub mod claims;
pub mod composer;
pub mod config;
pub mod coverage;
pub mod discovery;
pub mod document;
pub mod engine;
pub mod error;
mod eviction;
pub mod exploration;
pub mod faults;
pub mod history;
mod knowledge;
pub mod likelihood;
pub mod live;
pub mod manifest;
pub mod merge;
mod merge_branch;
pub mod minimize;
pub mod replay;
pub mod report;
pub mod retest;
mod revisit;
pub mod roots;
pub mod schedule;
pub mod schema;
pub mod sdk;
pub mod services;
mod setup;
pub mod shard;
mod state;
mod steer;
pub mod story;
pub mod timeline;
pub mod watch;
pub mod winddown;
mod workers;

pub use config::{ExploreConfig, LikelihoodParams};
pub use error::{ExploreError, Result};
pub use watch::{BranchProgress, Progress, Watch, CHECKPOINT_EVERY};

pub use exploration::{Budget, Ending, Exploration, Phases, TimelineEnds, TreeMemory};
pub use hvsim_guest_image::target::{StartOptions, System, Target};
pub use hvsim_vmm::Interrupt;
pub use timeline::Span;

/// Explores `config.target` (`engine.rs`), then estimates each bug's
/// likelihood on the exploration's own tree (`likelihood.rs`): what
/// `hvsim explore` runs.
pub fn explore(
    config: &ExploreConfig,
    host: &hvsim_guest_image::host::Host,
    watch: &mut dyn Watch,
) -> Result<Exploration> {
    engine::run(config, host, watch, &mut likelihood::Estimates)
}
