//! The Linux guest: hvsim's kernel, its initramfs, and the command line,
//! which make the boot (the same for every run of a machine shape, see
//! `boot_cache`), and the run's work, which init receives once booted (see
//! docs/guest-kernel.md).

pub mod boot_cache;
pub mod initramfs;
pub mod kernel;
pub mod packages;

use std::path::PathBuf;

use hvsim_vmm::boot::linux::LinuxImage;
use hvsim_vmm::cpuid::{self, Reg, Why};
use hvsim_vmm::{Machine, MachineConfig, Stop, Vtime};
use schemars::JsonSchema;

use crate::error::{ImageError, Result};

/// How to boot: the same for every run of a machine shape.
#[derive(Clone, Debug)]
pub struct LinuxOptions {
    /// Pass the boot parameters that enable the kernel's workarounds for a
    /// nested `kvm_pvm` host (only there: elsewhere they cost speed).
    pub nested_workarounds: bool,
    /// Keep the kernel's boot messages (no `quiet`).
    pub verbose: bool,
    /// Whether this host really gives the guest hvsim's CPUID (see
    /// `raw::probes`). If not, the kernel is told which features to ignore.
    pub cpuid_virtualized: bool,
}

/// A file made for a run: its absolute path in the guest, its mode and
/// its contents.
pub type RunFile = (String, u32, Vec<u8>);

/// What a run gives the booted guest: init writes it before it starts
/// anything (see `hvsim_abi::inbox`).
#[derive(Clone, Debug, Default)]
pub struct LinuxWork {
    /// Shell command init runs (`/bin/sh -c`); its exit status ends the run.
    pub command: String,
    /// With simulated nodes: the shell command init runs on every node when
    /// the run starts and again whenever a crashed node restarts.
    pub node_command: Option<String>,
    /// Host files to put into the guest (executable).
    pub files: Vec<GuestFile>,
    /// Files made for the run (path, mode, contents): containers' descriptions.
    pub extra_files: Vec<RunFile>,
}

impl LinuxWork {
    /// The work as the guest's inbox: its files, read from the host now.
    pub fn inbox(&self) -> Result<Vec<u8>> {
        let mut files = vec![(hvsim_abi::linux::COMMAND.to_owned(), 0o644, self.command.clone().into_bytes())];
        if let Some(c) = &self.node_command {
            files.push((hvsim_abi::linux::NODE_COMMAND.to_owned(), 0o644, c.clone().into_bytes()));
        }
        for f in &self.files {
            let bytes = hvsim_vmm::files::read_bounded(&f.host, hvsim_vmm::memory::MAX_RAM as u64)
                .map_err(crate::error::io("reading a file for the guest", &f.host))?;
            files.push((f.guest.clone(), 0o755, bytes));
        }
        files.extend(self.extra_files.iter().cloned());
        let mut out = Vec::with_capacity(files.iter().map(|f| f.0.len() + f.2.len() + 16).sum::<usize>() + 8);
        let mut sink = |b: &[u8]| out.extend_from_slice(b);
        hvsim_abi::inbox::encode_header(&mut sink);
        for (path, mode, data) in &files {
            hvsim_abi::inbox::encode_file(&hvsim_abi::inbox::File { path, mode: *mode, data }, &mut sink);
        }
        Ok(out)
    }
}

/// A host file copied into the guest's initramfs.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, JsonSchema)]
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

/// The vmlinux Linux targets boot: `HVSIM_KERNEL`, or the cached build
/// (built first if missing).
pub fn vmlinux() -> Result<std::path::PathBuf> {
    Ok(match std::env::var_os(KERNEL_OVERRIDE_ENV) {
        Some(path) => path.into(),
        None => kernel::ensure_built()?.vmlinux,
    })
}

/// Builds (or reuses) the kernel and assembles the initramfs and command line.
pub fn prepare(opts: &LinuxOptions) -> Result<LinuxImage> {
    let vmlinux = vmlinux()?;
    let busybox = initramfs::host_busybox()?;
    Ok(LinuxImage { kernel: vmlinux, initrd: initramfs::build(&busybox, &[]), cmdline: cmdline(opts) })
}

/// Virtual time a boot may take to reach init's ready point (it takes
/// about a millisecond).
const BOOT_VTIME_LIMIT: Vtime = Vtime::from_secs(60);

/// Boots `config` until init is ready for its run (`hc::op::READY`).
/// Shows progress on stderr: on nested hosts this takes half a minute.
pub fn boot_to_ready(config: &MachineConfig) -> Result<Machine> {
    let spinner = crate::progress::spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template(
            "hvsim: booting the Linux guest [{elapsed}] {spinner} (later runs of this machine shape restore it from the boot cache)",
        )
        .expect("valid template"),
    );
    spinner.enable_steady_tick(std::time::Duration::from_millis(250));
    let mut m = Machine::new(config)?;
    let stop = m.run_until_ready(BOOT_VTIME_LIMIT);
    spinner.finish_and_clear();
    let why = match stop? {
        None => return Ok(m),
        Some(Stop::Ended(end)) => end.detail(),
        Some(Stop::Deadline) => format!("still booting after {BOOT_VTIME_LIMIT} of virtual time"),
        Some(Stop::Message) => "stopped at a message".to_owned(),
    };
    let console = String::from_utf8_lossy(&m.console()).into_owned();
    // A panic's last lines are its register dump: say its first line too.
    let said = ["Out of memory", "BUG:", "Kernel panic"]
        .iter()
        .find_map(|what| console.lines().find(|l| l.contains(what)))
        .map(|l| format!("; the guest kernel said: {}", l.trim()))
        .unwrap_or_default();
    let tail: Vec<&str> = console.lines().rev().take(8).collect();
    Err(ImageError::Setup(format!(
        "the Linux guest never became ready for its run ({why}{said}); last console lines:\n  {}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n  ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workarounds_only_when_asked() {
        let mut o = LinuxOptions { nested_workarounds: false, verbose: false, cpuid_virtualized: true };
        let c = cmdline(&o);
        assert!(!c.contains("syscall_pf_fixup"), "{c}");
        assert!(!c.contains("clearcpuid"));
        o.nested_workarounds = true;
        assert!(cmdline(&o).contains("syscall_pf_fixup no_int3_selftest no_fpu_drop_fwait"));
    }

    #[test]
    fn the_work_travels_as_files() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, b"\x7fELF...").unwrap();
        let work = LinuxWork {
            command: "echo 'a b'".into(),
            node_command: Some("serve".into()),
            files: vec![GuestFile { host: tool, guest: "/bin/tool".into() }],
            extra_files: vec![("/etc/hvsim/containers/0".into(), 0o644, b"spec".to_vec())],
        };
        let inbox = work.inbox().unwrap();
        let files: Vec<_> = hvsim_abi::inbox::files(&inbox).unwrap().map(|f| f.unwrap()).collect();
        let got: Vec<(&str, u32, &[u8])> = files.iter().map(|f| (f.path, f.mode, f.data)).collect();
        assert_eq!(
            got,
            [
                (hvsim_abi::linux::COMMAND, 0o644, &b"echo 'a b'"[..]),
                (hvsim_abi::linux::NODE_COMMAND, 0o644, b"serve"),
                ("/bin/tool", 0o755, b"\x7fELF..."),
                ("/etc/hvsim/containers/0", 0o644, b"spec"),
            ]
        );
        let missing = LinuxWork { files: vec![GuestFile { host: "/nonexistent".into(), guest: "/x".into() }], ..work };
        assert!(missing.inbox().unwrap_err().to_string().contains("/nonexistent"));
    }

    #[test]
    fn guest_file_specs() {
        assert_eq!(GuestFile::parse("/tmp/a:/bin/a"), Ok(GuestFile { host: "/tmp/a".into(), guest: "/bin/a".into() }));
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
        assert!(
            !clearcpuid(false).split(['=', ',']).any(|n| n == (4 * 32 + 26).to_string()),
            "xsave only on nested hosts"
        );
    }
}
