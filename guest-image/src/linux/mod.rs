//! The Linux guest: hvsim's kernel, its initramfs, and the command line that
//! ties them to the run (see docs/guest-kernel.md).

pub mod initramfs;
pub mod kernel;
pub mod packages;

use std::path::PathBuf;

use hvsim_vmm::boot::linux::LinuxImage;
use hvsim_vmm::cpuid::{self, Reg, Why};

use crate::error::Result;

/// What to boot.
#[derive(Clone, Debug)]
pub struct LinuxOptions {
    /// Shell command init runs (`/bin/sh -c`); its exit status ends the run.
    pub command: String,
    /// With simulated nodes: the shell command init runs on every node at
    /// boot and again whenever a crashed node restarts.
    pub node_command: Option<String>,
    /// Pass the boot parameters that enable the kernel's workarounds for a
    /// nested `kvm_pvm` host (only there: elsewhere they cost speed).
    pub nested_workarounds: bool,
    /// Keep the kernel's boot messages (no `quiet`).
    pub verbose: bool,
    /// Whether this host really gives the guest hvsim's CPUID (see
    /// `raw::probes`). If not, the kernel is told which features to ignore.
    pub cpuid_virtualized: bool,
    /// Host files to put into the guest (executable).
    pub files: Vec<GuestFile>,
}

/// A host file copied into the guest's initramfs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GuestFile {
    pub host: PathBuf,
    /// Absolute path in the guest.
    pub guest: String,
}

impl GuestFile {
    /// Parses `HOST:GUEST` (GUEST absolute).
    pub fn parse(s: &str) -> std::result::Result<GuestFile, String> {
        match s.split_once(':') {
            Some((host, guest)) if !host.is_empty() && guest.starts_with('/') && guest.len() > 1 => {
                Ok(GuestFile { host: host.into(), guest: guest.to_owned() })
            }
            _ => Err(format!("`{s}` is not HOST_PATH:/GUEST/PATH")),
        }
    }
}

/// Parameters for the nested-host workarounds in patch 0003.
pub const NESTED_PARAMS: &[&str] = &["syscall_pf_fixup", "no_int3_selftest", "no_fpu_drop_fwait"];

/// Linux's number for a CPUID feature bit (its `X86_FEATURE_*` in
/// arch/x86/include/asm/cpufeatures.h): word * 32 + bit.
fn linux_feature(leaf: u32, reg: Reg, bit: u8) -> Option<u16> {
    let word = match (leaf, reg) {
        (0x1, Reg::Edx) => 0,
        (0x8000_0001, Reg::Edx) => 1,
        (0x1, Reg::Ecx) => 4,
        (0x8000_0001, Reg::Ecx) => 6,
        (0x7, Reg::Ebx) => 9,
        (0x7, Reg::Ecx) => 16,
        (0x7, Reg::Edx) => 18,
        // Linux keeps these in its "scattered" word 3.
        (0x6, Reg::Ecx) if bit == 0 => return Some(3 * 32 + 28), // aperfmperf
        _ => return None,
    };
    Some(word * 32 + u16::from(bit))
}

/// `clearcpuid=` telling the kernel to ignore every feature hvsim's CPUID
/// policy hides: for hosts where the policy does not reach the guest.
pub fn clearcpuid(nested_host: bool) -> String {
    let mut bits: Vec<u16> = cpuid::HIDDEN_BITS
        .iter()
        .filter(|h| h.why != Why::NestedHost || nested_host)
        .filter_map(|h| linux_feature(h.leaf, h.reg, h.bit))
        .collect();
    bits.sort_unstable();
    bits.dedup();
    let list: Vec<String> = bits.iter().map(u16::to_string).collect();
    format!("clearcpuid={}", list.join(","))
}

/// The kernel command line for `opts`.
pub fn cmdline(opts: &LinuxOptions) -> String {
    let mut p: Vec<String> = vec![
        "console=ttyS0".into(),
        // A panic ends the run at once (the hvsim panic notifier reports it).
        "panic=-1".into(),
        // No local APIC or I/O APIC: interrupts come from the 8259 pair.
        "nolapic".into(),
        "noapic".into(),
        // Delay loops need no calibration (which would spin waiting for
        // ticks) and take no virtual time anyway.
        "lpj=1000".into(),
        "hvsim".into(),
        // The boot RNG seed hvsim passes is the pool's (deterministic) entropy.
        "random.trust_bootloader=on".into(),
    ];
    if !opts.verbose {
        p.push("quiet".into());
    }
    if opts.nested_workarounds {
        p.extend(NESTED_PARAMS.iter().map(|s| s.to_string()));
    }
    if !opts.cpuid_virtualized {
        p.push(clearcpuid(opts.nested_workarounds));
    }
    p.join(" ")
}

/// Environment variable naming a vmlinux to boot instead of the cached
/// build (for kernel development: patch, `make vmlinux`, boot).
pub const KERNEL_OVERRIDE_ENV: &str = "HVSIM_KERNEL";

/// Builds (or reuses) the kernel and assembles the initramfs and command line.
pub fn prepare(opts: &LinuxOptions) -> Result<LinuxImage> {
    let vmlinux = match std::env::var_os(KERNEL_OVERRIDE_ENV) {
        Some(path) => path.into(),
        None => kernel::ensure_built()?.vmlinux,
    };
    let busybox = initramfs::host_busybox()?;
    // The commands travel as files: the kernel command line holds 2 KiB.
    let mut extra = vec![(hvsim_abi::linux::COMMAND.to_owned(), opts.command.clone().into_bytes())];
    if let Some(c) = &opts.node_command {
        extra.push((hvsim_abi::linux::NODE_COMMAND.to_owned(), c.clone().into_bytes()));
    }
    for f in &opts.files {
        let bytes = std::fs::read(&f.host).map_err(crate::error::io("reading a file for the guest", &f.host))?;
        extra.push((f.guest.clone(), bytes));
    }
    Ok(LinuxImage {
        kernel: vmlinux,
        initrd: initramfs::build(&busybox, &extra),
        cmdline: cmdline(opts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workarounds_only_when_asked() {
        let mut o = LinuxOptions {
            command: "echo 'a b'".into(),
            node_command: None,
            nested_workarounds: false,
            verbose: false,
            cpuid_virtualized: true,
            files: vec![],
        };
        let c = cmdline(&o);
        assert!(!c.contains("syscall_pf_fixup") && !c.contains("echo"), "{c}");
        assert!(!c.contains("clearcpuid"));
        o.nested_workarounds = true;
        assert!(cmdline(&o).contains("syscall_pf_fixup no_int3_selftest no_fpu_drop_fwait"));
    }

    #[test]
    fn guest_file_specs() {
        assert_eq!(
            GuestFile::parse("/tmp/a:/bin/a"),
            Ok(GuestFile { host: "/tmp/a".into(), guest: "/bin/a".into() })
        );
        assert!(GuestFile::parse("/tmp/a:bin/a").is_err());
        assert!(GuestFile::parse("/tmp/a").is_err());
        assert!(GuestFile::parse(":/x").is_err());
    }

    #[test]
    fn clearcpuid_uses_linux_feature_numbers() {
        let c = clearcpuid(true);
        let nums: Vec<u16> = c.trim_start_matches("clearcpuid=").split(',').map(|n| n.parse().unwrap()).collect();
        // X86_FEATURE_TSC, RDRAND, XSAVE, RDSEED, RDTSCP, APERFMPERF.
        for n in [4, 4 * 32 + 30, 4 * 32 + 26, 9 * 32 + 18, 32 + 27, 3 * 32 + 28] {
            assert!(nums.contains(&n), "{n} missing from {c}");
        }
        assert!(!clearcpuid(false).split(['=', ',']).any(|n| n == (4 * 32 + 26).to_string()), "xsave only on nested hosts");
    }
}
