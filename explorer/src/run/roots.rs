//! Saved roots: the machine at setup complete, kept on disk as the boot
//! cache keeps booted machines, so that a second exploration of a target,
//! a replay of one of its bugs (and shards, later) start from it in a
//! second instead of starting every service again (minutes for a compose
//! project here).
//!
//! A root is a pure function of what its [`RootId`] holds: the target (its
//! command, files by hash, images, compose services and fault plan), the
//! world it runs in (hvsim, machine model, kernel, CPUID), the master seed,
//! and the hvsim executable itself, whose code decides how the guest runs
//! as much as the guest does (a rebuilt hvsim makes its roots anew). The
//! store is keyed by the SHA-256 of that id. Only Linux targets' roots are
//! kept (a raw guest reaches its root in milliseconds), and only roots that
//! reached setup complete without a bug: such a root is the same whatever
//! the setup limit, as long as it was reached before it.
//!
//! The store is `CACHE/roots` (see `hvsim_guest_image::cache::dir`),
//! bounded by `HVSIM_ROOTS_MAX` (default 8 GiB), least recently used out;
//! `hvsim cache ls` lists it and `hvsim cache clear` empties it.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use hvsim_guest_image::cache;
use hvsim_guest_image::snapshot_store::{max_bytes_from_env, SnapshotStore, StoreEntry};
use hvsim_guest_image::world::World;
use hvsim_vmm::machine::HostSettings;
use hvsim_vmm::Machine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::record::error::{ExploreError, Result};
use crate::record::faults::FaultTally;
use crate::record::timeline::Point;
use crate::Target;

pub const MAX_BYTES_ENV: &str = "HVSIM_ROOTS_MAX";
pub const DEFAULT_MAX_BYTES: u64 = 8 << 30;

/// Everything that decides a root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RootId {
    pub target: Target,
    pub world: BTreeMap<String, String>,
    pub seed: u64,
    /// SHA-256 of the hvsim executable that made it.
    pub executable_sha256: String,
}

impl RootId {
    pub fn new(target: &Target, world: &World, seed: u64) -> Result<RootId> {
        Ok(RootId { target: target.clone(), world: world.0.clone(), seed, executable_sha256: executable_sha256()? })
    }

    /// The store's key: SHA-256 of the id, hex.
    pub fn key(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_vec(self).expect("root ids serialize")))
    }
}

/// What is known of a root besides its machine.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SavedRoot {
    pub id: RootId,
    /// Where it is: setup complete, reported at this point.
    pub point: Point,
    /// The faults that landed before it.
    pub faults: FaultTally,
    /// The first of its machine's messages that the run sent (the machine
    /// keeps every message since power-on; those before are the boot's).
    pub first_message: usize,
    /// What making it cost (start and setup), in wall milliseconds.
    pub wall_ms: u64,
}

pub type Entry = StoreEntry<SavedRoot>;

pub struct Roots {
    store: SnapshotStore,
}

impl Roots {
    /// The store under hvsim's cache directory.
    pub fn open() -> Result<Roots> {
        Ok(Roots::at(cache::dir().join("roots"), max_bytes_from_env(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)?))
    }

    /// A store in `dir`, e.g. on a volume that shards share.
    /// A root this host cannot restore stays there for the others.
    pub fn open_at(dir: PathBuf) -> Result<Roots> {
        let Roots { store } = Roots::at(dir, max_bytes_from_env(MAX_BYTES_ENV, DEFAULT_MAX_BYTES)?);
        Ok(Roots { store: store.shared() })
    }

    pub fn at(dir: PathBuf, max_bytes: u64) -> Roots {
        Roots { store: SnapshotStore::new(dir, max_bytes, "the saved roots") }
    }

    pub fn store(&self) -> &SnapshotStore {
        &self.store
    }

    /// The root of `id`, restored, if one was saved.
    pub fn get(&self, id: &RootId, host: &HostSettings) -> Option<(Machine, SavedRoot)> {
        let key = id.key();
        let saved: SavedRoot = self.store.description(&key)?;
        // A hash collision, or an edited file: not this root.
        if saved.id != *id {
            tracing::warn!(key, "a saved root's description is not its key's: ignored");
            return None;
        }
        let machine = self.store.restore(&key, host)?;
        let at = Point { events: machine.trace_state().events, vtime_ns: machine.now().nanos() };
        if at != saved.point || saved.first_message > machine.messages().len() {
            tracing::warn!(key, "a saved root is not what its description says: ignored");
            return None;
        }
        Some((machine, saved))
    }

    /// Saves `machine`, which is at `root.point`, holding the entry's lock
    /// (explorations of one target on one store save one at a time).
    pub fn put(&self, root: &SavedRoot, machine: &mut Machine) -> Result<()> {
        assert_eq!(machine.now().nanos(), root.point.vtime_ns, "a root is saved where it is");
        assert!(root.first_message <= machine.messages().len(), "a root's first message is one of its machine's");
        let world = root.id.world.clone();
        let key = root.id.key();
        let _lock = self.store.lock(&key)?;
        self.store.save(&key, root, machine, guest_name(&root.id.target), root.id.seed, &world)?;
        Ok(())
    }

    pub fn entries(&self) -> Result<Vec<Entry>> {
        Ok(self.store.entries()?)
    }

    /// Why the root of `id`, required (a shard's), is not here: none was
    /// made for its target and seed, or the one made was made by another
    /// hvsim or on another world, which a shard must not branch from.
    pub fn missing(&self, id: &RootId) -> ExploreError {
        let dir = self.store.dir().display();
        let here = |what: String| ExploreError::Target(format!("the saved roots in {dir}: {what} (docs/scale.md)"));
        let entries = match self.entries() {
            Ok(e) => e,
            Err(e) => return here(format!("cannot be read: {e}")),
        };
        let same_exploration = entries
            .iter()
            .filter_map(|e| e.description.as_ref())
            .find(|s| s.id.target == id.target && s.id.seed == id.seed);
        let Some(saved) = same_exploration else {
            if entries.iter().filter_map(|e| e.description.as_ref()).any(|s| s.id.seed == id.seed) {
                return here(format!(
                    "a root for seed {} is there, of another target: the target as explored (command, files by \
                     content, images, services, fault plan) must be the root step's",
                    id.seed
                ));
            }
            return here(format!(
                "none for this target and seed {}: take the root once first (`hvsim explore ... --branches 0 --roots {dir}`)",
                id.seed
            ));
        };
        if let Some(d) = first_difference(&saved.id.world, &id.world, ["there", "here"]) {
            return here(format!(
                "the root was made on another world ({d}): every shard must run on the same machine type"
            ));
        }
        if saved.id.executable_sha256 != id.executable_sha256 {
            return here(format!(
                "the root was made by another hvsim executable (SHA-256 {} there, {} here): every shard must run the same hvsim",
                short(&saved.id.executable_sha256),
                short(&id.executable_sha256)
            ));
        }
        here("the root for this target and seed is unusable here (corrupt, or reached after --setup-limit)".into())
    }
}

/// The first key on which two worlds differ, in words, each world named
/// (e.g. "there", "here").
pub fn first_difference(
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
    names: [&str; 2],
) -> Option<String> {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter().find(|k| a.get(*k) != b.get(*k)).map(|k| {
        let v = |m: &BTreeMap<String, String>| m.get(k).map_or("(none)".to_owned(), |v| format!("`{}`", short(v)));
        format!("{k}: {} {}, {} {}", v(a), names[0], v(b), names[1])
    })
}

/// A long hash cut to what people compare.
fn short(s: &str) -> &str {
    if s.len() > 16 && s.chars().all(|c| c.is_ascii_hexdigit()) {
        &s[..16]
    } else {
        s
    }
}

fn guest_name(target: &Target) -> &'static str {
    if target.is_linux() {
        "linux"
    } else {
        "raw"
    }
}

/// SHA-256 of the running hvsim executable.
fn executable_sha256() -> Result<String> {
    let path = std::env::current_exe().map_err(|source| ExploreError::Io {
        what: "finding hvsim's executable",
        path: PathBuf::new(),
        source,
    })?;
    let io = |source| ExploreError::Io { what: "reading hvsim's executable", path: path.clone(), source };
    let mut file = std::fs::File::open(&path).map_err(io)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    Ok(hex::encode(hash.finalize()))
}
