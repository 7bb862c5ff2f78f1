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
use std::time::{Instant, SystemTime};

use hvsim_snapshot::file;
use hvsim_vmm::host::open_kvm;
use hvsim_vmm::machine::{Boot, HostSettings, MachineSpec};
use hvsim_vmm::{cpuid, Machine, MachineConfig};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::{self, Lock};
use crate::error::{io, ImageError, Result};

/// The seed every Linux boot runs under, whatever the run's seed: the boot
/// is shared by all runs of a shape (and can be cached) because its
/// entropy is fixed. The run's seed takes over at init's ready point.
pub const BOOT_SEED: u64 = 0;
/// Bound of the cache's size unless `HVSIM_BOOT_CACHE_MAX` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;
pub const MAX_BYTES_ENV: &str = "HVSIM_BOOT_CACHE_MAX";

/// Everything that decides the state of a machine booted to its ready
/// point.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
        })
    }

    /// The cache key: SHA-256 of the shape, hex.
    pub fn key(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_vec(self).expect("shapes serialize")))
    }
}

/// How a run got its booted machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootReport {
    pub kind: BootKind,
    /// Wall time from nothing to a machine ready for its run.
    pub wall_ms: u64,
    /// The cache key of the machine's shape (Linux guests).
    pub key: Option<String>,
}

/// One entry, for `hvsim cache ls`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    pub bytes: u64,
    /// When a run last used it (milliseconds since the Unix epoch).
    pub last_used_ms: u64,
    /// The shape, if its description is readable.
    pub shape: Option<Shape>,
}

pub struct BootCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl BootCache {
    /// The cache under hvsim's cache directory, bounded by
    /// `HVSIM_BOOT_CACHE_MAX` (a size such as `2G`).
    pub fn open() -> Result<BootCache> {
        let max_bytes = match std::env::var(MAX_BYTES_ENV) {
            Ok(v) => {
                hvsim_vmm::faults::parse_size(&v).map_err(|e| ImageError::Setup(format!("{MAX_BYTES_ENV}: {e}")))?
            }
            Err(_) => DEFAULT_MAX_BYTES,
        };
        Ok(BootCache::at(cache::dir().join("boot"), max_bytes))
    }

    pub fn at(dir: PathBuf, max_bytes: u64) -> BootCache {
        BootCache { dir, max_bytes }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn snapshot_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.snap"))
    }

    fn shape_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
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
        if let Some(m) = self.restore(&key, host) {
            return Ok((m, report(BootKind::Cached)));
        }
        std::fs::create_dir_all(&self.dir).map_err(io("creating the boot cache", &self.dir))?;
        // One booter per entry; whoever waited restores what it saved.
        let _lock = Lock::acquire(&self.dir.join(format!("{key}.lock")))?;
        if let Some(m) = self.restore(&key, host) {
            return Ok((m, report(BootKind::Cached)));
        }
        let mut machine = boot()?;
        let kind = match self.save(&key, shape, &mut machine) {
            Ok(()) => BootKind::Saved,
            Err(e) => {
                tracing::warn!("cannot save the booted machine in the boot cache: {e}");
                BootKind::Cold
            }
        };
        self.evict(&key);
        Ok((machine, report(kind)))
    }

    /// The cached machine for `key`, if there is a sound one. A corrupt or
    /// unusable entry is removed (and then rebuilt by the caller).
    fn restore(&self, key: &str, host: &HostSettings) -> Option<Machine> {
        let path = self.snapshot_path(key);
        if !path.exists() {
            return None;
        }
        let restored = file::load(&path).and_then(|loaded| {
            tracing::debug!(path = %path.display(), "restoring a booted machine from the boot cache");
            loaded.restore(host)
        });
        match restored {
            Ok(m) => {
                // Recently used: the last to be evicted.
                let _ = std::fs::File::open(&path).and_then(|f| f.set_modified(SystemTime::now()));
                Some(m)
            }
            Err(e) => {
                tracing::warn!("boot cache entry unusable, booting instead: {e}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn save(&self, key: &str, shape: &Shape, machine: &mut Machine) -> Result<()> {
        let shape_path = self.shape_path(key);
        let mut tmp =
            tempfile::NamedTempFile::new_in(&self.dir).map_err(io("writing a boot cache entry", &self.dir))?;
        serde_json::to_writer_pretty(&mut tmp, shape)
            .map_err(|e| io("writing a boot cache entry", &shape_path)(e.into()))?;
        tmp.persist(&shape_path).map_err(|e| io("writing a boot cache entry", &shape_path)(e.error))?;
        file::save(&self.snapshot_path(key), machine, "linux", shape.boot_seed, &Default::default())
            .map_err(|e| ImageError::Setup(e.to_string()))?;
        Ok(())
    }

    /// Every entry, most recently used first.
    pub fn entries(&self) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let dir = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io("reading the boot cache", &self.dir)(e)),
        };
        for entry in dir {
            let entry = entry.map_err(io("reading the boot cache", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(key) = name.strip_suffix(".snap") else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            let last_used_ms = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
            let shape = std::fs::read(self.shape_path(key)).ok().and_then(|b| serde_json::from_slice(&b).ok());
            out.push(Entry { key: key.to_owned(), bytes: meta.len(), last_used_ms, shape });
        }
        out.sort_by(|a, b| b.last_used_ms.cmp(&a.last_used_ms).then_with(|| a.key.cmp(&b.key)));
        Ok(out)
    }

    /// Removes every entry; returns how many and their bytes.
    pub fn clear(&self) -> Result<(usize, u64)> {
        let entries = self.entries()?;
        for e in &entries {
            self.remove(&e.key);
        }
        Ok((entries.len(), entries.iter().map(|e| e.bytes).sum()))
    }

    /// Removes an entry. Its lock file stays: a run may hold or wait on it.
    fn remove(&self, key: &str) {
        for path in [self.snapshot_path(key), self.shape_path(key)] {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Drops least recently used entries (never `keep`) until the cache fits.
    fn evict(&self, keep: &str) {
        let Ok(entries) = self.entries() else { return };
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        for e in entries.iter().rev() {
            if total <= self.max_bytes {
                break;
            }
            if e.key != keep {
                tracing::debug!(key = %e.key, bytes = e.bytes, "evicting a boot cache entry");
                self.remove(&e.key);
                total -= e.bytes;
            }
        }
    }
}
