//! The boot cache: machines booted to init's ready point (`hc::op::READY`),
//! saved as snapshot files and restored for every later run of the same
//! machine shape.
//!
//! Every Linux run boots the same way for a given shape, under the fixed
//! boot seed, until init is ready for its run; only then do the run's
//! seed and work reach the machine (`Machine::begin_run`). So the booted
//! machine can be kept: the first run of a shape boots it and saves it here,
//! and every later run restores it in a fraction of a second. A restored
//! machine is the very state a boot reaches, so a run is the same whether
//! its boot came from the cache or not (tests compare the hashes).
//!
//! - Entries are keyed by the SHA-256 of their [`Shape`]: everything that
//!   decides the booted state.
//! - Concurrent runs that miss the same entry boot it once: one holds the
//!   entry's lock while it boots and saves; the others wait, then restore.
//! - Files are written to a temporary name and renamed, and verified by
//!   their checksum when loaded; a corrupt entry is deleted and rebuilt.
//! - The cache is bounded (`HVSIM_BOOT_CACHE_MAX`, default 4 GiB): after a
//!   save, the least recently used entries go until it fits.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hvsim_snapshot::file;
use hvsim_vmm::host::open_kvm;
use hvsim_vmm::machine::{Boot, HostSettings, MachineSpec};
use hvsim_vmm::{cpuid, Machine, MachineConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache;
use crate::error::{io, ImageError, Result};
use crate::snapshot_store::{max_bytes_from_env, SnapshotStore, StoreEntry};

/// The seed every Linux boot runs under, whatever the run's seed: the boot
/// is shared by all runs of a shape (and can be cached) because its
/// entropy is fixed. The run's seed takes over at init's ready point.
pub const BOOT_SEED: u64 = 0;
/// Bound of the cache's size unless `HVSIM_BOOT_CACHE_MAX` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
pub const MAX_BYTES_ENV: &str = "HVSIM_BOOT_CACHE_MAX";

/// Everything that decides the state of a machine booted to its ready
/// point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Shape {
    /// The machine model (`hvsim_vmm::MODEL_ID`) and snapshot format.
    pub model: String,
    pub snapshot_format: u32,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
    /// The kernel command line before the devices are appended.
    pub cmdline: String,
    /// RAM, devices, CPUID workarounds.
    pub spec: MachineSpec,
    /// SHA-256 of the CPUID the guest is given on this host.
    pub cpuid_sha256: String,
    pub boot_seed: u64,
    /// Unix time of the guest's RTC at virtual time zero.
    pub epoch: u64,
    /// The host CPU the vCPU runs on, where CPUID is not virtualized
    /// (`HostSettings::pin_cpu`): user programs then read that CPU's APIC ID
    /// (glibc keeps CPUID leaf 1 in every process), so a boot on one CPU and
    /// a boot on another differ in memory, not in what they do.
    pub host_cpu: Option<usize>,
}

impl Shape {
    /// The shape of the Linux machine `config` boots (on this host: the
    /// CPUID the guest gets is this host's).
    pub fn of(config: &MachineConfig) -> Result<Shape> {
        let Boot::Linux(image) = &config.boot else {
            return Err(ImageError::Setup("only Linux boots are cached".into()));
        };
        let kernel = std::fs::read(&image.kernel).map_err(io("reading the guest kernel", &image.kernel))?;
        let kvm = open_kvm()?;
        let cpuid_sha256 = cpuid::guest_cpuid_sha256(&kvm, config.spec.nested_workarounds)?;
        Ok(Shape {
            model: hvsim_vmm::MODEL_ID.to_owned(),
            snapshot_format: file::VERSION,
            kernel_sha256: hex::encode(Sha256::digest(&kernel)),
            initrd_sha256: hex::encode(Sha256::digest(&image.initrd)),
            cmdline: image.cmdline.clone(),
            spec: config.spec.clone(),
            cpuid_sha256,
            boot_seed: config.seed,
            epoch: config.epoch,
            host_cpu: config.host.pin_cpu,
        })
    }

    /// The cache key: SHA-256 of the shape, hex.
    pub fn key(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_vec(self).expect("shapes serialize")))
    }
}

/// How a run got its booted machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BootKind {
    /// Nothing booted: a raw guest starts from the run's seed, and a
    /// snapshot is the machine itself.
    Direct,
    /// Booted now, and not cached (`--cold-boot`, or the cache failed).
    Cold,
    /// Booted now and saved to the cache.
    Saved,
    /// Restored from the cache.
    Cached,
}

/// What the boot cost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BootReport {
    pub kind: BootKind,
    /// Wall time from nothing to a machine ready for its run.
    pub wall_ms: u64,
    /// The cache key of the machine's shape (Linux guests).
    pub key: Option<String>,
}

/// One entry, for `hvsim cache ls`: its description is the machine's shape.
pub type Entry = StoreEntry<Shape>;

pub struct BootCache {
    store: SnapshotStore,
}

impl BootCache {
    /// The cache under hvsim's cache directory, bounded by
    /// `HVSIM_BOOT_CACHE_MAX` (a size such as `2G`).
    pub fn open() -> Result<BootCache> {
        let max_bytes = max_bytes_from_env(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)?;
        Ok(BootCache::at(cache::dir().join("boot"), max_bytes))
    }

    pub fn at(dir: PathBuf, max_bytes: u64) -> BootCache {
        BootCache { store: SnapshotStore::new(dir, max_bytes, "the boot cache") }
    }

    pub fn dir(&self) -> &Path {
        self.store.dir()
    }

    pub fn max_bytes(&self) -> u64 {
        self.store.max_bytes()
    }

    /// The machine of `shape`, ready for its run: restored from the cache,
    /// or booted by `boot` (which must return a machine stopped at `READY`)
    /// and saved for the next run.
    pub fn get_or_boot(
        &self,
        shape: &Shape,
        host: &HostSettings,
        boot: impl FnOnce() -> Result<Machine>,
    ) -> Result<(Machine, BootReport)> {
        let start = Instant::now();
        let key = shape.key();
        let report = |kind| BootReport { kind, wall_ms: start.elapsed().as_millis() as u64, key: Some(key.clone()) };
        if let Some(m) = self.store.restore(&key, host) {
            return Ok((m, report(BootKind::Cached)));
        }
        // One booter per entry; whoever waited restores what it saved.
        let _lock = self.store.lock(&key)?;
        if let Some(m) = self.store.restore(&key, host) {
            return Ok((m, report(BootKind::Cached)));
        }
        let mut machine = boot()?;
        let kind = match self.store.save(&key, shape, &mut machine, "linux", shape.boot_seed, &Default::default()) {
            Ok(()) => BootKind::Saved,
            Err(e) => {
                tracing::warn!("cannot save the booted machine in the boot cache: {e}");
                BootKind::Cold
            }
        };
        Ok((machine, report(kind)))
    }

    /// Every entry, most recently used first.
    pub fn entries(&self) -> Result<Vec<Entry>> {
        self.store.entries()
    }

    /// Removes every entry; returns how many and their bytes.
    pub fn clear(&self) -> Result<(usize, u64)> {
        self.store.clear()
    }
}
