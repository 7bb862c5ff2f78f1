//! The guest profiler (`--profile-guest`): where a run's wall time goes,
//! inside the guest. A sampler thread kicks the vCPU out of `KVM_RUN` at a
//! fixed wall-clock rate; at that exit the run loop reads the registers and
//! the stack, and resumes the guest without charging virtual time, injecting
//! anything or logging an event. A sample is therefore invisible to the
//! guest: the trace and memory are those of the same run without the
//! profiler (cli/tests/profile.rs checks both).
//!
//! Each sample records the mode (user or kernel), the stack (kernel frames
//! through the guest kernel's frame pointers, user frames where the program
//! keeps them), and the task the guest kernel says is running: its patched
//! kernel writes the pid, name and UTS node name to `hvsim_task` at every
//! context switch, and the profiler reads that page from guest memory
//! ([`crate::guest_task`]).
//! User addresses are named at the sample, by the ELF image mapped there
//! and the offset in it ([`images`]); kernel symbols come afterwards, from
//! vmlinux ([`symbols`]), and [`report`]
//! turns the counts into folded stacks, a flame graph and a top list.

pub mod images;
pub mod report;
pub mod sampler;
pub mod symbols;
pub mod walk;

use std::collections::HashMap;
use std::time::Duration;

use kvm_bindings::{kvm_regs, kvm_sregs};

use crate::memory::GuestRam;
use images::{ImageOffset, Images};
use walk::AddressSpace;

/// How to profile.
#[derive(Clone, Copy, Debug)]
pub struct ProfilerConfig {
    /// Samples per second of wall time.
    pub rate_hz: u32,
}

impl ProfilerConfig {
    pub const MAX_RATE_HZ: u32 = 10_000;

    pub fn period(&self) -> Duration {
        assert!((1..=Self::MAX_RATE_HZ).contains(&self.rate_hz), "sampling rate {}", self.rate_hz);
        Duration::from_nanos(1_000_000_000 / u64::from(self.rate_hz))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    Kernel,
    User,
}

/// A profiler attached to a machine: its sampler runs while the machine's
/// vCPU thread is set up (started by the run loop, on that thread).
pub(crate) struct Attached {
    pub config: ProfilerConfig,
    pub sampler: Option<sampler::Sampler>,
    pub profile: GuestProfile,
    /// The images user addresses were found in, kept across samples.
    pub images: Images,
}

impl Attached {
    pub fn new(config: ProfilerConfig) -> Attached {
        Attached { config, sampler: None, profile: GuestProfile::default(), images: Images::default() }
    }

    /// Records the sample the registers describe; `task_page`: where the
    /// guest kernel publishes its running task ([`crate::guest_task`]).
    pub fn record(&mut self, ram: &GuestRam, task_page: Option<u64>, regs: &kvm_regs, sregs: &kvm_sregs) {
        self.profile.record(ram, task_page, &mut self.images, regs, sregs);
    }

    /// Stops the sampler, keeping what it counted.
    pub fn stop_sampler(&mut self) {
        if let Some(s) = self.sampler.take() {
            self.profile.vmm_ticks += s.vmm_ticks();
        }
    }
}

/// Who was running at a sample, as the guest kernel published it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Task {
    /// The simulated node (its UTS node name); empty before nodes exist.
    pub node: String,
    /// The process name (`comm`).
    pub comm: String,
}

/// One frame of a stack: an instruction pointer or a return address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Frame {
    /// A kernel address, named afterwards from vmlinux.
    Kernel(u64),
    /// A user address, and the image it lies in if one was found.
    User(u64, Option<ImageOffset>),
}

impl Frame {
    pub fn addr(&self) -> u64 {
        match *self {
            Frame::Kernel(a) | Frame::User(a, _) => a,
        }
    }
}

/// One distinct stack and where it ran.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackKey {
    pub task: Task,
    pub mode: Mode,
    /// Innermost first: the instruction pointer, then return addresses.
    pub stack: Vec<Frame>,
}

/// The samples of one or more runs, counted by stack.
#[derive(Clone, Debug, Default)]
pub struct GuestProfile {
    pub stacks: HashMap<StackKey, u64>,
    /// Sampler ticks that found the VMM, not the guest, on the vCPU thread.
    pub vmm_ticks: u64,
    /// Samples whose registers could not be read.
    pub failed: u64,
}

impl GuestProfile {
    pub fn samples(&self) -> u64 {
        self.stacks.values().sum()
    }

    /// Adds another run's profile (the explorer's branches) to this one.
    pub fn merge(&mut self, other: GuestProfile) {
        for (key, n) in other.stacks {
            *self.stacks.entry(key).or_default() += n;
        }
        self.vmm_ticks += other.vmm_ticks;
        self.failed += other.failed;
    }

    fn record(
        &mut self,
        ram: &GuestRam,
        task_page: Option<u64>,
        images: &mut Images,
        regs: &kvm_regs,
        sregs: &kvm_sregs,
    ) {
        let space = AddressSpace::new(ram, sregs.cr3, sregs.cr4);
        // The kernel half is kernel code whatever CS says: on this nested
        // host a sample can land on `entry_SYSCALL_64` with CS still the
        // user's (the SYSCALL is emulated around the sample).
        let mode = if sregs.cs.selector & 3 == 0 || regs.rip >= images::USER_END { Mode::Kernel } else { Mode::User };
        // Kernel stacks are 16 KiB; user frames are looked for within 1 MiB
        // of the stack pointer.
        let span = match mode {
            Mode::Kernel => 16 << 10,
            Mode::User => 1 << 20,
        };
        let addrs = walk::frame_pointer_stack(&space, regs.rip, regs.rsp, regs.rbp, span);
        let stack = match mode {
            Mode::Kernel => addrs.into_iter().map(Frame::Kernel).collect(),
            Mode::User => {
                // The root without its PCID bits.
                let root = sregs.cr3 & !0xfff;
                addrs.into_iter().map(|a| Frame::User(a, images.find(&space, root, a))).collect()
            }
        };
        let task = task_page
            .and_then(|va| crate::guest_task::read(&space, va))
            .map(|t| Task { node: t.node, comm: t.comm })
            .unwrap_or_default();
        *self.stacks.entry(StackKey { task, mode, stack }).or_default() += 1;
    }
}
