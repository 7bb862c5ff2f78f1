//! Guests that hvsim can boot.
//!
//! - `raw`: tiny freestanding x86-64 programs, assembled in-process by the
//!   workspace itself (dynasm; no external assembler), that exercise the
//!   machine: timers, halting, entropy, serial output, misbehaviour.
//! - `linux`: hvsim's guest kernel (built from Debian's source with the
//!   project's config and patches, cached outside the repository), an
//!   initramfs holding hvsim's static init and busybox, and the boot cache
//!   of machines booted to init's ready point.
//! - `target`: what a run runs, and the one place that starts it; `inputs`:
//!   the host files it reads, and copies of them that travel with records.

pub mod cache;
pub mod compose;
pub mod composer;
pub mod container;
pub mod error;
pub mod hash;
pub mod host;
pub mod inputs;
pub mod k8s;
pub mod linux;
pub mod oci;
pub mod progress;
pub mod raw;
pub mod snapshot_store;
pub mod target;
pub mod world;

pub use error::{ImageError, Result};
