//! The MSR policy: the values MSRs start with, and which MSRs the guest may
//! not touch without the VMM seeing it.
//!
//! KVM handles ordinary MSRs itself. Those that expose host time or host
//! performance counters are filtered (`KVM_X86_SET_MSR_FILTER`) so that every
//! access exits to the VMM: reads of `IA32_TSC` return virtual time, writes to
//! it are ignored, and every other filtered MSR raises #GP in the guest, as
//! on a CPU without the feature. MSRs unknown to KVM also exit (and #GP), so
//! each one shows up in the determinism log.

use kvm_bindings::{
    kvm_enable_cap, KVM_CAP_X86_USER_SPACE_MSR, KVM_MSR_EXIT_REASON_FILTER, KVM_MSR_EXIT_REASON_INVAL,
    KVM_MSR_EXIT_REASON_UNKNOWN,
};
use kvm_ioctls::{MsrFilterDefaultAction, MsrFilterRange, MsrFilterRangeFlags, VmFd};

use crate::error::{KvmResultExt, Result};

pub const IA32_TSC: u32 = 0x10;
pub const IA32_SYSENTER_CS: u32 = 0x174;
pub const IA32_SYSENTER_ESP: u32 = 0x175;
pub const IA32_SYSENTER_EIP: u32 = 0x176;
pub const IA32_MISC_ENABLE: u32 = 0x1A0;
pub const IA32_MTRR_DEF_TYPE: u32 = 0x2FF;
pub const IA32_PAT: u32 = 0x277;
pub const STAR: u32 = 0xC000_0081;
pub const LSTAR: u32 = 0xC000_0082;
pub const CSTAR: u32 = 0xC000_0083;
pub const SYSCALL_MASK: u32 = 0xC000_0084;
pub const KERNEL_GS_BASE: u32 = 0xC000_0102;

/// Virtual TSC rate for `RDMSR IA32_TSC`: one tick per virtual nanosecond.
pub const VIRTUAL_TSC_HZ: u64 = 1_000_000_000;

/// Values every MSR the boot protocol cares about starts with, so that no
/// host-dependent leftover reaches the guest.
pub const BOOT_MSRS: &[(u32, u64)] = &[
    (IA32_SYSENTER_CS, 0),
    (IA32_SYSENTER_ESP, 0),
    (IA32_SYSENTER_EIP, 0),
    // Linux's segment layout: kernel CS at 47:32, 32-bit user CS at 63:48.
    // Nested `kvm_pvm` derives the guest's kernel and user segments from it.
    (
        STAR,
        ((hvsim_abi::raw::selector::USER32_CODE as u64 & !3) << 48)
            | ((hvsim_abi::raw::selector::KERNEL_CODE as u64) << 32),
    ),
    (LSTAR, 0),
    (CSTAR, 0),
    (SYSCALL_MASK, 0),
    (KERNEL_GS_BASE, 0),
    (IA32_TSC, 0),
    // Fast string operations on.
    (IA32_MISC_ENABLE, 1),
    // MTRRs enabled, default type write-back.
    (IA32_MTRR_DEF_TYPE, (1 << 11) | 6),
    (IA32_PAT, 0x0007_0406_0007_0406),
];

/// MSR ranges (first, count, what) whose every access exits to the VMM.
pub const FILTERED: &[(u32, u32, &str)] = &[
    (0x10, 1, "IA32_TSC"),
    (0x11, 2, "KVM kvmclock (legacy)"),
    (0x3B, 1, "IA32_TSC_ADJUST"),
    (0xC1, 8, "IA32_PMCx"),
    (0xE7, 2, "IA32_MPERF, IA32_APERF"),
    (0x186, 8, "IA32_PERFEVTSELx"),
    (0x309, 3, "IA32_FIXED_CTRx"),
    (0x38D, 4, "IA32_PERF_GLOBAL_*"),
    (0x6E0, 1, "IA32_TSC_DEADLINE"),
    (0x4B56_4D00, 16, "KVM paravirtual MSRs (kvmclock, steal time, ...)"),
    (0xC001_0000, 8, "AMD PERF_CTL/PERF_CTR legacy"),
    (0xC001_0200, 12, "AMD PERF_CTL/PERF_CTR"),
    (0xC000_0104, 1, "AMD TSC_RATIO"),
];

/// SHA-256 (hex) of the MSR policy: the boot values and the filtered
/// ranges (what a bug record pins; the handling of each is hvsim's code,
/// pinned by its version).
pub fn policy_sha256() -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(format!("{BOOT_MSRS:?}{FILTERED:?}")))
}

/// Installs the filter and asks KVM to send filtered, unknown and invalid
/// MSR accesses to userspace.
pub fn install_filter(vm: &VmFd) -> Result<()> {
    let cap = kvm_enable_cap {
        cap: KVM_CAP_X86_USER_SPACE_MSR,
        args: [
            u64::from(KVM_MSR_EXIT_REASON_FILTER | KVM_MSR_EXIT_REASON_UNKNOWN | KVM_MSR_EXIT_REASON_INVAL),
            0,
            0,
            0,
        ],
        ..Default::default()
    };
    vm.enable_cap(&cap).kvm("KVM_ENABLE_CAP(X86_USER_SPACE_MSR)")?;
    // A zero bit denies the MSR, i.e. sends it to userspace.
    let deny = [0u8; 2];
    let ranges: Vec<MsrFilterRange<'_>> = FILTERED
        .iter()
        .map(|&(base, count, _)| MsrFilterRange {
            flags: MsrFilterRangeFlags::READ | MsrFilterRangeFlags::WRITE,
            base,
            msr_count: count,
            bitmap: &deny,
        })
        .collect();
    vm.set_msr_filter(MsrFilterDefaultAction::ALLOW, &ranges).kvm("KVM_X86_SET_MSR_FILTER")
}

/// What the VMM answers to an MSR access that exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsrAnswer {
    Value(u64),
    /// Completed with no effect (a write the VMM ignores).
    Ignored,
    /// Inject #GP.
    Fault,
}

pub fn read(index: u32, vtime_ns: u64) -> MsrAnswer {
    match index {
        IA32_TSC => MsrAnswer::Value(vtime_ns),
        _ => MsrAnswer::Fault,
    }
}

pub fn write(index: u32) -> MsrAnswer {
    match index {
        IA32_TSC => MsrAnswer::Ignored,
        _ => MsrAnswer::Fault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_ranges_fit_kvm_limits() {
        assert!(FILTERED.len() <= kvm_bindings::KVM_MSR_FILTER_MAX_RANGES as usize);
        assert!(FILTERED.iter().all(|&(_, n, _)| n > 0 && n <= 16));
    }

    #[test]
    fn tsc_reads_virtual_time() {
        assert_eq!(VIRTUAL_TSC_HZ, 1_000_000_000);
        assert_eq!(read(IA32_TSC, 42), MsrAnswer::Value(42));
        assert_eq!(read(0x4B56_4D01, 42), MsrAnswer::Fault);
        assert_eq!(write(IA32_TSC), MsrAnswer::Ignored);
    }
}
