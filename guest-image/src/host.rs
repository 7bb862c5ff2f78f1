//! The host a guest runs on: KVM checked for what hvsim needs, probed for
//! what it really does, and the settings that follow for each kind of guest.

use std::time::Duration;

use hvsim_vmm::host::{open_kvm, HostProfile};
use hvsim_vmm::machine::HostSettings;

use crate::error::{ImageError, Result};
use crate::raw::probes::HostProbes;

/// Default watchdog for Linux guests: on nested hosts the emulated kernel
/// runs for seconds between exits (e.g. unpacking the initramfs).
pub const LINUX_WATCHDOG: Duration = Duration::from_secs(60);

pub struct Host {
    pub profile: HostProfile,
    pub probes: HostProbes,
    /// The CPUs this process may run on, read before any vCPU thread
    /// pinned itself (a pinned thread sees only its own CPU).
    pub cpus: Vec<usize>,
    /// Where vCPU threads are pinned, the first of `cpus` this process
    /// takes: shards sharing a host each start at their own (docs/scale.md).
    pub cpu_offset: usize,
}

impl Host {
    /// Opens KVM, refuses a host without what hvsim needs, runs the probes.
    pub fn open() -> Result<Host> {
        let cpus = hvsim_vmm::host::allowed_cpus();
        let kvm = open_kvm().map_err(|e| ImageError::Setup(e.to_string()))?;
        let profile = HostProfile::detect(&kvm);
        let missing = profile.missing();
        if !missing.is_empty() {
            return Err(ImageError::Setup(format!(
                "this host's KVM lacks capabilities hvsim needs: {} (see `hvsim doctor`)",
                missing.join(", ")
            )));
        }
        let probes = HostProbes::run(&profile).map_err(|e| ImageError::Setup(format!("cannot probe the host: {e}")))?;
        Ok(Host { profile, probes, cpus, cpu_offset: 0 })
    }

    /// Settings for running a guest here; `linux` selects the longer
    /// watchdog; `watchdog` (from the command line) overrides it.
    pub fn settings(&self, linux: bool, watchdog: Option<Option<Duration>>) -> HostSettings {
        self.worker_settings(linux, watchdog, 0)
    }

    /// [`settings`](Self::settings) for the explorer's worker `worker`
    /// (0 is the thread that started the target): where vCPU threads are
    /// pinned, each worker gets a CPU of its own while there are enough,
    /// counted from `cpu_offset`.
    pub fn worker_settings(&self, linux: bool, watchdog: Option<Option<Duration>>, worker: usize) -> HostSettings {
        let mut s = HostSettings::for_host(&self.profile);
        if linux {
            s.watchdog = Some(LINUX_WATCHDOG);
        }
        self.probes.configure(&mut s);
        if s.pin_cpu.is_some() && !self.cpus.is_empty() {
            s.pin_cpu = Some(self.cpus[(self.cpu_offset + worker) % self.cpus.len()]);
        }
        if let Some(w) = watchdog {
            s.watchdog = w;
        }
        s
    }
}
