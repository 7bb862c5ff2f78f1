//! hvsim's explorer: coverage-guided branching of whole-VM timelines.
//!
//! - [`sdk`]: the guest's JSON-lines protocol (Antithesis SDK shapes).
//! - [`assertions`]: the catalog and per-assertion verdicts.
//! - [`coverage`]: the edges every timeline reached.
//! - [`engine`]: the exploration loop over the snapshot tree, in rounds of
//!   branches that `workers` run (one machine per thread) and `branch`
//!   describes.
//! - [`timeline`], [`bug`]: replayable timelines and bug records.
//! - [`report`]: report.md, report.json and the bug files.
//!
//! What is explored is a [`Target`] (`hvsim_guest_image::target`).

pub mod assertions;
mod branch;
pub mod bug;
pub mod coverage;
pub mod engine;
pub mod error;
pub mod report;
pub mod sdk;
pub mod timeline;
mod workers;

pub use engine::{explore, BranchProgress, Budget, Exploration, ExploreConfig, Phases, Progress};
pub use error::{ExploreError, Result};
pub use hvsim_guest_image::target::{StartOptions, System, Target};
