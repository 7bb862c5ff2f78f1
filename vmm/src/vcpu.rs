//! The one vCPU: `KVM_RUN`, decoding of `kvm_run` into [`Exit`], and the
//! interrupt-injection ioctls kvm-ioctls does not wrap.
//!
//! Exits are decoded here rather than through kvm-ioctls' `VcpuExit` because
//! the run loop needs fields it drops (the size and count of string port I/O,
//! the MSR exit reason) and must never trust offsets the kernel wrote without
//! checking them against the mapping.

use kvm_bindings::*;
use kvm_ioctls::VcpuFd;
use vmm_sys_util::errno;
use vmm_sys_util::ioctl::ioctl_with_ref;
use vmm_sys_util::ioctl_iow_nr;

use crate::error::{KvmResultExt, Result};

ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);

/// A decoded exit. Data slices point into the `kvm_run` mapping: for `In`
/// and MMIO reads, what the VMM writes there is what the guest reads.
#[derive(Debug)]
pub enum Exit<'a> {
    IoOut {
        port: u16,
        size: u8,
        data: &'a [u8],
    },
    IoIn {
        port: u16,
        size: u8,
        data: &'a mut [u8],
    },
    MmioRead {
        addr: u64,
        data: &'a mut [u8],
    },
    MmioWrite {
        addr: u64,
        data: &'a [u8],
    },
    /// RDMSR the VMM must answer: set `*value` or set `*error` to inject #GP.
    MsrRead {
        index: u32,
        reason: u32,
        value: &'a mut u64,
        error: &'a mut u8,
    },
    MsrWrite {
        index: u32,
        reason: u32,
        value: u64,
        error: &'a mut u8,
    },
    Hlt,
    IrqWindowOpen,
    /// Triple fault.
    Shutdown,
    /// `KVM_RUN` returned EINTR: a signal (the watchdog's or the profiler's)
    /// kicked the vCPU out.
    Interrupted,
    /// KVM could not run or emulate the guest (`suberror`, extra data words).
    InternalError {
        suberror: u32,
        data: Vec<u64>,
    },
    FailEntry {
        reason: u64,
    },
    /// An exit reason the VMM does not handle.
    Other(u32),
}

pub struct Vcpu {
    fd: VcpuFd,
    /// Size of the `kvm_run` mapping, to bound the I/O data offset.
    run_size: usize,
}

impl Vcpu {
    pub fn new(fd: VcpuFd, run_size: usize) -> Vcpu {
        Vcpu { fd, run_size }
    }

    pub fn fd(&self) -> &VcpuFd {
        &self.fd
    }

    pub fn fd_mut(&mut self) -> &mut VcpuFd {
        &mut self.fd
    }

    /// Runs the guest until its next exit.
    pub fn run(&mut self) -> std::result::Result<Exit<'_>, errno::Error> {
        match self.fd.run().map(|_| ()) {
            Ok(()) => {}
            Err(e) if e.errno() == libc::EINTR => return Ok(Exit::Interrupted),
            Err(e) => return Err(e),
        }
        let run_size = self.run_size;
        let run = self.fd.get_kvm_run();
        let base = run as *mut kvm_run as *mut u8;
        // SAFETY (all union reads below): `exit_reason`, set by the kernel,
        // names the union member that is valid.
        Ok(match run.exit_reason {
            KVM_EXIT_IO => {
                let io = unsafe { run.__bindgen_anon_1.io };
                let len = usize::from(io.size) * io.count as usize;
                let off = io.data_offset as usize;
                if off.checked_add(len).is_none_or(|end| end > run_size) {
                    return Err(errno::Error::new(libc::EFAULT));
                }
                // SAFETY: [off, off+len) lies inside the kvm_run mapping
                // (checked above), which lives as long as the vCPU fd.
                let data = unsafe { std::slice::from_raw_parts_mut(base.add(off), len) };
                if u32::from(io.direction) == KVM_EXIT_IO_OUT {
                    Exit::IoOut { port: io.port, size: io.size, data }
                } else {
                    Exit::IoIn { port: io.port, size: io.size, data }
                }
            }
            KVM_EXIT_MMIO => {
                let mmio = unsafe { &mut run.__bindgen_anon_1.mmio };
                let len = (mmio.len as usize).min(mmio.data.len());
                if mmio.is_write != 0 {
                    Exit::MmioWrite { addr: mmio.phys_addr, data: &mmio.data[..len] }
                } else {
                    Exit::MmioRead { addr: mmio.phys_addr, data: &mut mmio.data[..len] }
                }
            }
            KVM_EXIT_X86_RDMSR => {
                let msr = unsafe { &mut run.__bindgen_anon_1.msr };
                Exit::MsrRead { index: msr.index, reason: msr.reason, value: &mut msr.data, error: &mut msr.error }
            }
            KVM_EXIT_X86_WRMSR => {
                let msr = unsafe { &mut run.__bindgen_anon_1.msr };
                Exit::MsrWrite { index: msr.index, reason: msr.reason, value: msr.data, error: &mut msr.error }
            }
            KVM_EXIT_HLT => Exit::Hlt,
            KVM_EXIT_IRQ_WINDOW_OPEN => Exit::IrqWindowOpen,
            KVM_EXIT_SHUTDOWN => Exit::Shutdown,
            KVM_EXIT_INTR => Exit::Interrupted,
            KVM_EXIT_INTERNAL_ERROR => {
                let ie = unsafe { run.__bindgen_anon_1.internal };
                let n = (ie.ndata as usize).min(ie.data.len());
                Exit::InternalError { suberror: ie.suberror, data: ie.data[..n].to_vec() }
            }
            KVM_EXIT_FAIL_ENTRY => {
                let fe = unsafe { run.__bindgen_anon_1.fail_entry };
                Exit::FailEntry { reason: fe.hardware_entry_failure_reason }
            }
            other => Exit::Other(other),
        })
    }

    /// Whether RFLAGS.IF was set at the last exit.
    pub fn if_flag(&mut self) -> bool {
        self.fd.get_kvm_run().if_flag != 0
    }

    /// Whether KVM can inject an external interrupt right now (IF set, no
    /// interrupt shadow, no event already pending).
    pub fn ready_for_interrupt(&mut self) -> bool {
        self.fd.get_kvm_run().ready_for_interrupt_injection != 0
    }

    /// Asks KVM to exit as soon as the guest can take an interrupt.
    pub fn request_interrupt_window(&mut self, on: bool) {
        self.fd.get_kvm_run().request_interrupt_window = u8::from(on);
    }

    /// Makes the next `KVM_RUN` return at once (completing pending I/O).
    pub fn set_immediate_exit(&mut self, on: bool) {
        self.fd.set_kvm_immediate_exit(u8::from(on));
    }

    /// Queues external interrupt `vector` (`KVM_INTERRUPT`); delivered on entry.
    pub fn inject(&self, vector: u8) -> Result<()> {
        let irq = kvm_interrupt { irq: u32::from(vector) };
        // SAFETY: KVM_INTERRUPT reads one kvm_interrupt from the pointer we
        // pass, which outlives the call; the fd is a vCPU fd.
        let ret = unsafe { ioctl_with_ref(&self.fd, KVM_INTERRUPT(), &irq) };
        if ret == 0 {
            Ok(())
        } else {
            Err(errno::Error::last()).kvm("KVM_INTERRUPT")
        }
    }
}
