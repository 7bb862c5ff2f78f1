//! Whole-VM snapshots.
//!
//! A snapshot is guest RAM plus a [`MachineSnapshot`] (vCPU, devices,
//! clock, entropy streams, trace hash). Two forms:
//!
//! - [`file`]: a self-checking file (magic, version, checksum, sparse
//!   zstd-compressed memory) that another process can restore;
//! - [`tree`]: snapshots kept in memory as a tree of page deltas, which the
//!   explorer branches from; resetting copies back only the pages that
//!   differ, found through KVM's dirty log.
//!
//! See docs/snapshots.md.

pub mod file;
pub mod tree;

pub use file::{Header, SnapshotError};
pub use hvsim_vmm::machine::MachineSnapshot;
pub use tree::{Cursor, Delta, NodeId, SnapshotTree};
