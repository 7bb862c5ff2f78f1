//! What this host can do: KVM access and capabilities, a PMU for exact
//! preemption, and whether it is a nested hypervisor that needs workarounds.
//! `hvsim doctor` prints this; the machine consults it when it configures the
//! guest.

use std::path::Path;

use kvm_ioctls::{Cap, Kvm};
use serde::Serialize;

use crate::error::{Error, Result};

/// A KVM capability hvsim relies on, and whether this host has it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct CapabilityCheck {
    pub name: &'static str,
    pub present: bool,
    pub required: bool,
    pub used_for: &'static str,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct HostProfile {
    pub kvm_api_version: i32,
    /// `kvm_pvm`, a page-table-based nested hypervisor: guest ring 0 is
    /// emulated, some instructions fail there, user-mode SYSCALL is misdelivered.
    pub nested_pvm: bool,
    /// KVM shadows the guest's page tables instead of letting the hardware
    /// walk them (PVM, or EPT/NPT turned off): a snapshot reset, which puts
    /// page-table pages back behind KVM's write protection, must make KVM
    /// drop its shadows.
    pub shadow_paging: bool,
    /// Hardware branch counters usable for exact preemption (rr's technique).
    pub pmu: PmuStatus,
    pub capabilities: Vec<CapabilityCheck>,
}

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(tag = "status", content = "detail", rename_all = "kebab-case")]
pub enum PmuStatus {
    Available,
    Unavailable(String),
}

/// A capability, by kvm-ioctls name or raw number (for those it does not name).
#[derive(Clone, Copy)]
enum CapId {
    Named(Cap),
    Raw(u32),
}
use CapId::{Named, Raw};

const CAPS: &[(CapId, &str, bool, &str)] = &[
    (Named(Cap::UserMemory), "USER_MEMORY", true, "guest RAM"),
    (Named(Cap::ExtCpuid), "EXT_CPUID", true, "the CPUID policy"),
    (Named(Cap::ImmediateExit), "IMMEDIATE_EXIT", true, "completing I/O before snapshots"),
    (Named(Cap::X86UserSpaceMsr), "X86_USER_SPACE_MSR", true, "the MSR policy"),
    (Named(Cap::X86MsrFilter), "X86_MSR_FILTER", true, "the MSR policy"),
    (Named(Cap::VcpuEvents), "VCPU_EVENTS", true, "snapshots"),
    (Named(Cap::Debugregs), "DEBUGREGS", true, "snapshots"),
    (Named(Cap::Xsave), "XSAVE", false, "snapshots of extended FPU state"),
    (Named(Cap::Xcrs), "XCRS", false, "snapshots of XCR0"),
    (Raw(kvm_bindings::KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2), "MANUAL_DIRTY_LOG_PROTECT2", false, "fast snapshot reset"),
    (Named(Cap::TscControl), "TSC_CONTROL", false, "a fixed guest TSC rate (informational)"),
];

/// Environment variable naming the KVM device instead of `/dev/kvm`
/// (for tests of hosts without KVM, and for unusual setups).
pub const KVM_PATH_ENV: &str = "HVSIM_KVM_PATH";

/// Opens the KVM device with a one-line, actionable error.
pub fn open_kvm() -> Result<Kvm> {
    let path = std::env::var_os(KVM_PATH_ENV).unwrap_or_else(|| "/dev/kvm".into());
    let cpath = std::ffi::CString::new(path.as_encoded_bytes())
        .map_err(|_| Error::Config(format!("{KVM_PATH_ENV} contains a NUL byte")))?;
    Kvm::new_with_path(&cpath).map_err(|e| Error::KvmUnavailable {
        path: path.to_string_lossy().into_owned(),
        err: std::io::Error::from_raw_os_error(e.errno()),
    })
}

impl HostProfile {
    pub fn detect(kvm: &Kvm) -> HostProfile {
        let capabilities = CAPS
            .iter()
            .map(|&(cap, name, required, used_for)| CapabilityCheck {
                name,
                present: match cap {
                    Named(c) => kvm.check_extension(c),
                    Raw(n) => kvm.check_extension_raw(n.into()) > 0,
                },
                required,
                used_for,
            })
            .collect();
        HostProfile {
            kvm_api_version: kvm.get_api_version(),
            nested_pvm: Path::new("/sys/module/kvm_pvm").exists(),
            shadow_paging: shadow_paging(),
            pmu: detect_pmu(),
            capabilities,
        }
    }

    /// Required capabilities this host lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        self.capabilities.iter().filter(|c| c.required && !c.present).map(|c| c.name).collect()
    }
}

/// The CPUs this process may run on, lowest first (CPU 0 if that cannot
/// be read).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    let cpus: Vec<usize> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        } else {
            Vec::new()
        }
    };
    if cpus.is_empty() {
        vec![0]
    } else {
        cpus
    }
}

/// The lowest-numbered CPU this process may run on.
pub fn first_allowed_cpu() -> usize {
    allowed_cpus()[0]
}

/// Whether KVM shadows guest page tables here: under PVM always; under
/// kvm_intel or kvm_amd when two-dimensional paging (EPT, NPT) is off.
fn shadow_paging() -> bool {
    let param = |path: &str| std::fs::read_to_string(path).ok().map(|v| v.trim().to_owned());
    Path::new("/sys/module/kvm_pvm").exists()
        || param("/sys/module/kvm_intel/parameters/ept").is_some_and(|v| v == "N" || v == "0")
        || param("/sys/module/kvm_amd/parameters/npt").is_some_and(|v| v == "N" || v == "0")
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; sched_setaffinity(0) targets this thread.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(Error::Host("pinning the vCPU thread to a CPU", std::io::Error::last_os_error()))
    }
}

/// Tries to open a hardware branch counter for this thread.
fn detect_pmu() -> PmuStatus {
    if !Path::new("/sys/bus/event_source/devices/cpu").exists() {
        return PmuStatus::Unavailable("no `cpu` PMU in /sys/bus/event_source/devices".into());
    }
    // perf_event_attr, version 0 layout (64 bytes): the kernel accepts it.
    #[repr(C)]
    #[derive(Default)]
    struct PerfEventAttr {
        type_: u32,
        size: u32,
        config: u64,
        sample_period: u64,
        sample_type: u64,
        read_format: u64,
        flags: u64,
        wakeup_events: u32,
        bp_type: u32,
        config1: u64,
    }
    const PERF_TYPE_HARDWARE: u32 = 0;
    const PERF_COUNT_HW_BRANCH_INSTRUCTIONS: u64 = 4;
    const DISABLED: u64 = 1;
    const EXCLUDE_KERNEL: u64 = 1 << 5;
    let attr = PerfEventAttr {
        type_: PERF_TYPE_HARDWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
        flags: DISABLED | EXCLUDE_KERNEL,
        ..Default::default()
    };
    // SAFETY: perf_event_open reads `attr` (valid for the call); the returned
    // fd is closed right away.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, 0, -1, -1, 0) };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        return PmuStatus::Unavailable(format!("perf_event_open(branch-instructions): {err}"));
    }
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    unsafe { libc::close(fd as i32) };
    PmuStatus::Available
}

/// Bytes of memory this host can give without swapping (`MemAvailable` of
/// /proc/meminfo), if it says.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 =
        info.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib << 10)
}

/// Refuses, before anything boots, guest RAM this host cannot hold: `machines`
/// machines of `ram` bytes each. A guest touches its RAM lazily, but its
/// kernel fills what it has with page cache as it runs, so a machine that
/// does not fit would be killed by the host's OOM killer midway, its results
/// lost. `what` names where the size came from, for the error.
pub fn ensure_memory_for(ram: usize, machines: usize, what: &str) -> std::result::Result<(), String> {
    match available_memory() {
        Some(available) => memory_fits(ram, machines, what, available),
        None => Ok(()),
    }
}

fn memory_fits(ram: usize, machines: usize, what: &str, available: u64) -> std::result::Result<(), String> {
    let asked = ram as u64 * machines as u64;
    if asked <= available {
        return Ok(());
    }
    let gib = |b: u64| b as f64 / f64::from(1 << 30);
    let machines_said =
        if machines > 1 { format!("{machines} machines of {:.1} GiB, ", gib(ram as u64)) } else { String::new() };
    Err(format!(
        "the guest RAM asked ({machines_said}{:.1} GiB in all, {what}) is more than this host has available ({:.1} GiB, \
         MemAvailable in /proc/meminfo): give --mem less{}",
        gib(asked),
        gib(available),
        if machines > 1 { " or --workers fewer" } else { "" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_ram_the_host_cannot_hold_is_refused_with_what_to_change() {
        let gib = 1usize << 30;
        assert!(memory_fits(4 * gib, 2, "--mem", 8 << 30).is_ok());
        let one = memory_fits(13 * gib, 1, "by default", 8 << 30).unwrap_err();
        assert!(one.contains("13.0 GiB in all") && one.contains("8.0 GiB") && one.contains("--mem"), "{one}");
        assert!(!one.contains("--workers"), "{one}");
        let many = memory_fits(3 * gib, 4, "--mem", 8 << 30).unwrap_err();
        assert!(many.contains("4 machines of 3.0 GiB") && many.contains("--workers"), "{many}");
        assert!(available_memory().is_some_and(|b| b > 0), "/proc/meminfo says MemAvailable on Linux");
    }
}
