//! Guests that hvsim can boot.
//!
//! - `raw`: tiny freestanding x86-64 programs, assembled in-process by the
//!   workspace itself (dynasm; no external assembler), that exercise the
//!   machine: timers, halting, entropy, serial output, misbehaviour.
//! - `linux`: hvsim's guest kernel (built from Debian's source with the
//!   project's config and patches, cached outside the repository) and an
//!   initramfs holding hvsim's static init and busybox.

pub mod cache;
pub mod error;
pub mod host;
pub mod linux;
pub mod raw;

pub use error::{ImageError, Result};
