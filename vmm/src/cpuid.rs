//! The CPUID policy: what the guest is told about its CPU.
//!
//! Starting from what KVM supports on this host, hvsim hides every feature
//! that would let the guest observe time or entropy behind the VMM's back
//! (RDRAND, RDSEED, RDTSCP, TSX, kvmclock and the other KVM paravirtual
//! features, the PMU, invariant TSC, TSC-deadline, TSC/crystal frequency
//! leaves, MONITOR/MWAIT and WAITPKG), the local APIC (this machine has none:
//! interrupts come from the userspace 8259), and nested virtualization. On a
//! host whose nested hypervisor cannot execute some instructions in guest
//! kernel mode (`kvm_pvm`), those are hidden too, and only there.

use kvm_bindings::{kvm_cpuid_entry2, CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::Kvm;

use crate::error::{KvmResultExt, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reg {
    Eax,
    Ebx,
    Ecx,
    Edx,
}

/// Why a feature is hidden.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// It would leak host time or entropy into the guest.
    Determinism,
    /// The machine does not have the hardware it describes.
    NotEmulated,
    /// This host's nested hypervisor cannot run it in guest kernel mode.
    NestedHost,
}

/// One CPUID feature bit that the policy clears.
#[derive(Clone, Copy, Debug)]
pub struct HiddenBit {
    pub leaf: u32,
    pub reg: Reg,
    pub bit: u8,
    pub name: &'static str,
    pub why: Why,
}

const fn bit(leaf: u32, reg: Reg, bit: u8, name: &'static str, why: Why) -> HiddenBit {
    HiddenBit { leaf, reg, bit, name, why }
}

use Reg::*;
use Why::*;

/// Feature bits cleared (leaf 7 means subleaf 0).
pub const HIDDEN_BITS: &[HiddenBit] = &[
    bit(0x1, Ecx, 30, "rdrand", Determinism),
    // The TSC runs on host time and KVM cannot trap RDTSC. Without the bit,
    // Linux keeps it out of sched_clock, delay loops and clocksources.
    bit(0x1, Edx, 4, "tsc", Determinism),
    bit(0x1, Ecx, 24, "tsc-deadline", Determinism),
    bit(0x1, Ecx, 3, "monitor/mwait", Determinism),
    bit(0x1, Ecx, 5, "vmx", NotEmulated),
    bit(0x1, Ecx, 21, "x2apic", NotEmulated),
    bit(0x1, Edx, 9, "apic", NotEmulated),
    bit(0x1, Edx, 28, "htt", NotEmulated),
    bit(0x6, Ecx, 0, "aperf/mperf", Determinism),
    bit(0x7, Ebx, 1, "tsc-adjust", Determinism),
    bit(0x7, Ebx, 4, "hle", Determinism),
    bit(0x7, Ebx, 11, "rtm", Determinism),
    bit(0x7, Ebx, 18, "rdseed", Determinism),
    bit(0x7, Ecx, 5, "waitpkg", Determinism),
    bit(0x7, Ecx, 22, "rdpid", Determinism),
    bit(0x80000001, Ecx, 2, "svm", NotEmulated),
    bit(0x80000001, Edx, 27, "rdtscp", Determinism),
    bit(0x80000007, Edx, 8, "invariant-tsc", Determinism),
    // See ../shared/guest-kernel-notes: the kvm_pvm emulator of guest ring 0
    // fails or spins on these.
    bit(0x1, Ecx, 13, "cx16", NestedHost),
    bit(0x1, Ecx, 26, "xsave", NestedHost),
    bit(0x1, Ecx, 27, "osxsave", NestedHost),
    bit(0x1, Ecx, 23, "popcnt", NestedHost),
    bit(0x1, Ecx, 17, "pcid", NestedHost),
    // AVX state needs XSAVE; without it these must go too.
    bit(0x1, Ecx, 28, "avx", NestedHost),
    bit(0x1, Ecx, 29, "f16c", NestedHost),
    bit(0x1, Ecx, 12, "fma", NestedHost),
    bit(0x7, Ebx, 5, "avx2", NestedHost),
    bit(0x7, Ebx, 16, "avx512f", NestedHost),
    bit(0x7, Ebx, 0, "fsgsbase", NestedHost),
    bit(0x7, Ebx, 10, "invpcid", NestedHost),
    bit(0x7, Ebx, 20, "smap", NestedHost),
    bit(0x80000001, Ecx, 5, "abm/lzcnt", NestedHost),
    bit(0x7, Ebx, 9, "erms", NestedHost),
    bit(0x7, Edx, 4, "fsrm", NestedHost),
];

/// Leaves zeroed entirely, and why.
pub const HIDDEN_LEAVES: &[(u32, &str, Why)] = &[
    (0xA, "architectural PMU", Determinism),
    (0x15, "TSC/crystal clock ratio", Determinism),
    (0x16, "processor frequency", Determinism),
    (0x40000001, "KVM paravirtual features (kvmclock, steal time, async PF...)", Determinism),
    (0x80000022, "AMD PMU v2", Determinism),
    (0xD, "XSAVE state components", NestedHost),
];

/// The CPUID the guest is given: KVM's supported set under this policy.
/// SHA-256 (hex) of the CPUID [`guest_cpuid`] gives the guest on this host:
/// part of a booted machine's shape and of a bug record's world.
pub fn guest_cpuid_sha256(kvm: &Kvm, nested_host: bool) -> Result<String> {
    use sha2::{Digest, Sha256};
    let cpuid = guest_cpuid(kvm, nested_host)?;
    let bytes = serde_json::to_vec(cpuid.as_slice()).expect("CPUID entries serialize");
    Ok(hex::encode(Sha256::digest(bytes)))
}

pub fn guest_cpuid(kvm: &Kvm, nested_host: bool) -> Result<CpuId> {
    let mut cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).kvm("KVM_GET_SUPPORTED_CPUID")?;
    apply(cpuid.as_mut_slice(), nested_host);
    Ok(cpuid)
}

/// Rewrites KVM's supported CPUID into the guest's.
pub fn apply(entries: &mut [kvm_cpuid_entry2], nested_host: bool) {
    let applies = |why: Why| why != NestedHost || nested_host;
    for e in entries.iter_mut() {
        if HIDDEN_LEAVES.iter().any(|&(leaf, _, why)| leaf == e.function && applies(why)) {
            e.eax = 0;
            e.ebx = 0;
            e.ecx = 0;
            e.edx = 0;
            continue;
        }
        let subleaf0 = e.index == 0;
        for h in HIDDEN_BITS {
            if h.leaf == e.function && applies(h.why) && (h.leaf != 0x7 || subleaf0) {
                let r = match h.reg {
                    Eax => &mut e.eax,
                    Ebx => &mut e.ebx,
                    Ecx => &mut e.ecx,
                    Edx => &mut e.edx,
                };
                *r &= !(1u32 << h.bit);
            }
        }
        if nested_host && e.function == 0x7 {
            // Every AVX-512 flavour (ebx 16..31 AVX512 family, ecx vector extensions).
            e.ebx &= !0xDC23_0000;
            e.ecx &= !0x0000_5F42;
            e.edx &= !0x0000_010C;
            if e.index == 1 {
                e.eax &= !0x0000_0030; // AVX-VNNI, AVX512-BF16
            }
        }
        match e.function {
            0x1 => {
                // One CPU, initial APIC ID 0, one logical processor.
                e.ebx = (e.ebx & 0x0000_FFFF) | (1 << 16);
            }
            0xB | 0x1F => {
                // x2APIC topology: report the single vCPU's own ID.
                e.edx = 0;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(function: u32, index: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 { function, index, eax: !0, ebx: !0, ecx: !0, edx: !0, ..Default::default() }
    }

    #[test]
    fn determinism_bits_always_hidden_nested_ones_only_on_nested_hosts() {
        for nested in [false, true] {
            let mut es = vec![entry(0x1, 0), entry(0x7, 0), entry(0x80000001, 0), entry(0xA, 0)];
            apply(&mut es, nested);
            assert_eq!(es[0].ecx & (1 << 30), 0, "rdrand");
            assert_eq!(es[1].ebx & (1 << 18), 0, "rdseed");
            assert_eq!(es[2].edx & (1 << 27), 0, "rdtscp");
            assert_eq!((es[3].eax, es[3].ebx, es[3].ecx, es[3].edx), (0, 0, 0, 0), "pmu");
            assert_eq!(es[0].ecx & (1 << 13) == 0, nested, "cx16");
            assert_eq!(es[1].ebx & (1 << 20) == 0, nested, "smap");
            assert_eq!(es[0].ebx >> 16, 1);
        }
    }

    #[test]
    fn leaf7_bits_only_touch_subleaf0() {
        let mut es = vec![entry(0x7, 1)];
        apply(&mut es, false);
        assert_eq!(es[0].ebx, !0);
    }
}
