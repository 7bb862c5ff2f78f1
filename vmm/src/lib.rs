//! hvsim's virtual machine monitor: a deterministic single-vCPU machine on KVM.
//!
//! A run is a pure function of (guest, seed): the vCPU is the only thread
//! that touches guest state, every device is emulated synchronously at VM
//! exits, time is a virtual clock advanced only by exits (see [`clock`]),
//! interrupts are injected only at exits, and all entropy comes from seeded
//! streams (see [`entropy`]). The [`trace`] proves it: every exit is folded
//! into a running hash that two runs of the same seed must agree on.
//!
//! Where to look:
//! - [`machine`]: the VM and its run loop; every VM exit is handled in
//!   `machine/run.rs`.
//! - [`devices`]: PIC, PIT, serial port and the hvsim hypercall port.
//! - [`boot`]: getting a guest to its first instruction.
//! - [`cpuid`], [`msr`]: what the guest may see of the CPU.
//! - [`host`]: what this host can do (`hvsim doctor`).
//! - [`files`]: reading the files users name, refusing what is not one.

pub mod append_log;
pub mod bench;
pub mod boot;
pub mod clock;
pub mod control;
pub mod cpuid;
pub mod devices;
pub mod disk;
pub mod entropy;
pub mod error;
pub mod faults;
pub mod files;
pub mod guest_task;
pub mod host;
pub mod interrupt;
mod kick;
pub mod machine;
pub mod memory;
pub mod msr;
pub mod profiler;
pub mod summary;
pub mod switch;
pub mod trace;
pub mod vcpu;
pub mod vcpu_state;
pub mod watchdog;

/// The machine model's fingerprint (see `vmm/build.rs`): builds that agree
/// on it run every guest the same way.
pub const MODEL_ID: &str = env!("HVSIM_MODEL_ID");

pub use clock::Vtime;
pub use error::{Error, Result};
pub use interrupt::Interrupt;
pub use machine::{End, Machine, MachineConfig, Stop};
