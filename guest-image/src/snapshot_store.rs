//! A directory of machines kept as snapshot files, each under the hex
//! SHA-256 key of what decides its state, with that description beside it
//! as JSON; bounded in bytes, least recently used first out. The boot cache
//! (`linux/boot_cache.rs`) and the explorer's saved roots
//! (`hvsim_explorer::roots`) are two such stores.
//!
//! - `KEY.snap` is written to a temporary name and renamed, and verified by
//!   its checksum when loaded: a corrupt or unusable entry is removed (the
//!   caller then makes it again), never half-restored.
//! - `KEY.lock` serializes the makers of one entry: whoever waited on it
//!   finds what the first saved.
//! - Restoring an entry marks it recently used (its modification time).
//! - A store that hosts share (`--roots DIR`) evicts nothing: a shard may
//!   still need what another host would drop.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hvsim_snapshot::file;
use hvsim_vmm::machine::HostSettings;
use hvsim_vmm::Machine;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cache::Lock;
use crate::error::{io, ImageError, Result};

pub struct SnapshotStore {
    dir: PathBuf,
    max_bytes: u64,
    /// What the entries are, for messages ("the boot cache").
    what: &'static str,
    /// Shared with other hosts (`shared`): an entry this host cannot
    /// restore is kept (it may be only this host that cannot), and nothing
    /// is evicted (another host may still need it).
    shared: bool,
}

/// A description larger than this is not one hvsim wrote: it is not read.
const MAX_DESCRIPTION_BYTES: u64 = 1 << 20;

/// One entry, for listings.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StoreEntry<D> {
    pub key: String,
    pub bytes: u64,
    /// When a run last used it (milliseconds since the Unix epoch).
    pub last_used_ms: u64,
    /// Its description, if readable.
    pub description: Option<D>,
}

/// The bound in bytes from the environment variable `var` (a size such as
/// `2G`), else `default`.
pub fn max_bytes_from_env(var: &str, default: u64) -> Result<u64> {
    match std::env::var(var) {
        Ok(v) => hvsim_vmm::faults::parse_size(&v).map_err(|e| ImageError::Setup(format!("{var}: {e}"))),
        Err(_) => Ok(default),
    }
}

impl SnapshotStore {
    pub fn new(dir: PathBuf, max_bytes: u64, what: &'static str) -> SnapshotStore {
        SnapshotStore { dir, max_bytes, what, shared: false }
    }

    /// The same store, shared with other hosts: an entry this host cannot
    /// restore is left for them.
    pub fn shared(self) -> SnapshotStore {
        SnapshotStore { shared: true, ..self }
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

    fn description_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// Held while an entry is made, so that it is made once.
    pub fn lock(&self, key: &str) -> Result<Lock> {
        std::fs::create_dir_all(&self.dir).map_err(io("creating", &self.dir))?;
        Lock::acquire(&self.dir.join(format!("{key}.lock")))
    }

    /// The description of `key`, if there is a readable one (and not one
    /// too large for hvsim to have written).
    pub fn description<D: DeserializeOwned>(&self, key: &str) -> Option<D> {
        let file = std::fs::File::open(self.description_path(key)).ok()?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_DESCRIPTION_BYTES + 1), &mut bytes).ok()?;
        if bytes.len() as u64 > MAX_DESCRIPTION_BYTES {
            tracing::warn!(
                key,
                "{} entry's description is larger than {MAX_DESCRIPTION_BYTES} bytes: ignored",
                self.what
            );
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    }

    /// The machine of `key`, if there is a sound one. A corrupt or unusable
    /// entry is removed.
    pub fn restore(&self, key: &str, host: &HostSettings) -> Option<Machine> {
        let path = self.snapshot_path(key);
        if !path.exists() {
            return None;
        }
        let restored = file::load(&path).and_then(|loaded| {
            tracing::debug!(path = %path.display(), "restoring a machine from {}", self.what);
            loaded.restore(host)
        });
        match restored {
            Ok(m) => {
                // Recently used: the last to be evicted.
                let _ = std::fs::File::open(&path).and_then(|f| f.set_modified(SystemTime::now()));
                Some(m)
            }
            Err(e) if self.shared => {
                tracing::warn!("{} entry {} cannot be restored here (kept for others): {e}", self.what, path.display());
                None
            }
            Err(e) => {
                tracing::warn!("{} entry unusable, making it again: {e}", self.what);
                self.remove(key);
                None
            }
        }
    }

    /// Saves `machine` under `key` with its description, then evicts least
    /// recently used entries (never this one) until the store fits.
    pub fn save<D: Serialize>(
        &self,
        key: &str,
        description: &D,
        machine: &mut Machine,
        guest: &str,
        seed: u64,
        world: &BTreeMap<String, String>,
    ) -> Result<()> {
        let path = self.description_path(key);
        let context = io("writing an entry of", &path);
        std::fs::create_dir_all(&self.dir).map_err(io("creating", &self.dir))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(io("writing an entry of", &self.dir))?;
        serde_json::to_writer_pretty(&mut tmp, description).map_err(|e| context(e.into()))?;
        tmp.persist(&path).map_err(|e| io("writing an entry of", &path)(e.error))?;
        file::save(&self.snapshot_path(key), machine, guest, seed, world)
            .map_err(|e| ImageError::Setup(e.to_string()))?;
        self.evict(key);
        Ok(())
    }

    /// Every entry, most recently used first.
    pub fn entries<D: DeserializeOwned>(&self) -> Result<Vec<StoreEntry<D>>> {
        let mut out = Vec::new();
        let dir = match std::fs::read_dir(&self.dir) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io("reading", &self.dir)(e)),
        };
        for entry in dir {
            let entry = entry.map_err(io("reading", &self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(key) = name.strip_suffix(".snap") else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            let last_used_ms = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
            let description = self.description(key);
            out.push(StoreEntry { key: key.to_owned(), bytes: meta.len(), last_used_ms, description });
        }
        out.sort_by(|a, b| b.last_used_ms.cmp(&a.last_used_ms).then_with(|| a.key.cmp(&b.key)));
        Ok(out)
    }

    /// Removes every entry; returns how many and their bytes.
    pub fn clear(&self) -> Result<(usize, u64)> {
        let entries = self.entries::<serde::de::IgnoredAny>()?;
        for e in &entries {
            self.remove(&e.key);
        }
        Ok((entries.len(), entries.iter().map(|e| e.bytes).sum()))
    }

    /// Removes an entry. Its lock file stays: a run may hold or wait on it.
    fn remove(&self, key: &str) {
        for path in [self.snapshot_path(key), self.description_path(key)] {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Drops least recently used entries (never `keep`) until the store
    /// fits; in a shared store, none.
    fn evict(&self, keep: &str) {
        if self.shared {
            return;
        }
        let Ok(entries) = self.entries::<serde::de::IgnoredAny>() else { return };
        let mut total: u64 = entries.iter().map(|e| e.bytes).sum();
        for e in entries.iter().rev() {
            if total <= self.max_bytes {
                break;
            }
            if e.key != keep {
                tracing::debug!(key = %e.key, bytes = e.bytes, "evicting an entry of {}", self.what);
                self.remove(&e.key);
                total -= e.bytes;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared store keeps every entry whatever its bound; one of this
    /// host's drops the least recently used. A description is read only up
    /// to a bound.
    #[test]
    fn a_shared_store_evicts_nothing_and_descriptions_are_read_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for (key, age) in [("old", 100), ("new", 0)] {
            let path = dir.path().join(format!("{key}.snap"));
            std::fs::write(&path, vec![0u8; 100]).unwrap();
            let when = SystemTime::now() - std::time::Duration::from_secs(age);
            std::fs::File::options().write(true).open(&path).unwrap().set_modified(when).unwrap();
        }
        let keys = |store: &SnapshotStore| -> Vec<String> {
            store.entries::<serde::de::IgnoredAny>().unwrap().into_iter().map(|e| e.key).collect()
        };
        let shared = SnapshotStore::new(dir.path().into(), 150, "test").shared();
        shared.evict("new");
        assert_eq!(keys(&shared), ["new", "old"]);
        let own = SnapshotStore::new(dir.path().into(), 150, "test");
        own.evict("new");
        assert_eq!(keys(&own), ["new"]);
        let description = dir.path().join("new.json");
        std::fs::write(&description, format!("\"{}\"", "x".repeat(MAX_DESCRIPTION_BYTES as usize))).unwrap();
        assert_eq!(own.description::<String>("new"), None);
        std::fs::write(&description, "\"small\"").unwrap();
        assert_eq!(own.description::<String>("new").as_deref(), Some("small"));
    }
}
