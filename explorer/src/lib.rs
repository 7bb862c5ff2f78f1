//! hvsim's explorer: coverage-guided branching of whole-VM timelines.
//!
//! Four layers, one folder each, lowest first (docs/architecture.md): what
//! an exploration and a bug are (`record/`), running timelines (`run/`),
//! triage on top of runs (`triage/`), outputs (`output/`). A file imports
//! only its own layer or below (`ci/circles.py`); the modules callers use
//! are re-exported here by their names.
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

mod output;
mod record;
mod run;
mod triage;

// The crate's modules, by their names (a file's layer is its folder:
// docs/architecture.md).
pub use output::{merge, report, schema};
pub use record::{
    assertions, bug, checkers, claims, composer, config, coverage, discovery, document, error, exploration, faults,
    history, manifest, sdk, services, shard, story, timeline, winddown,
};
pub use run::{engine, live, replay, roots, schedule, watch};
pub use triage::{likelihood, minimize, retest};

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
    run::engine::run(config, host, watch, &mut triage::likelihood::Estimates)
}
