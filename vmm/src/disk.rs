//! A node's disk: a read-only base image under an in-memory copy-on-write
//! overlay, with a volatile write cache, and the disk faults of the run's
//! plan drawn from the disk's seeded stream.
//!
//! Writes land in the volatile cache, in order; a flush makes them durable.
//! A simulated crash loses the volatile writes, or (torn) keeps a seed-chosen
//! prefix of them, sector by sector. Reads see volatile over durable over
//! the base image over zeroes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::entropy::Stream;
use crate::faults::disk::{DiskEffect, DiskEpisode};
use crate::faults::{DiskFaults, Landed};

pub const SECTOR: usize = 512;
/// The largest node disk (disks live in host memory, copy-on-write).
pub const MAX_DISK_BYTES: u64 = 64 << 30;
/// The volatile write cache holds this many sector writes; beyond that the
/// oldest are destaged to durable storage, as a real drive's cache does
/// (and as bounds the VMM's memory whatever the guest writes).
pub const CACHE_SECTORS: usize = 64 * 1024;

/// The read-only base image: its path and hash are state; the bytes are
/// loaded from the path (and checked against the hash) on creation and on
/// restore.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Base {
    pub path: String,
    pub sha256: String,
    #[serde(skip)]
    pub bytes: Arc<Vec<u8>>,
}

impl Base {
    /// Reads the image at `path`.
    pub fn load(path: &str) -> Result<Base, String> {
        let bytes = crate::files::read_bounded(std::path::Path::new(path), MAX_DISK_BYTES)
            .map_err(|e| format!("cannot read disk image {path}: {e}"))?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(Base { path: path.to_owned(), sha256, bytes: Arc::new(bytes) })
    }
}

/// What the guest asked, and what happened to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The request failed (`VIRTIO_BLK_S_IOERR`).
    Error,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Disk {
    pub node: u16,
    pub capacity: u64,
    pub base: Option<Base>,
    #[serde(with = "sector_map")]
    durable: BTreeMap<u64, Arc<[u8]>>,
    /// Unflushed writes, oldest first.
    #[serde(with = "sector_list")]
    volatile: Vec<(u64, Arc<[u8]>)>,
    /// Sectors ever written: a thin-provisioned disk's allocated space.
    allocated: BTreeSet<u64>,
    faults: DiskFaults,
    stream: Stream,
    pub landed: Landed,
    /// Drawn faults in force at this disk, in the order they started.
    #[serde(default)]
    episodes: Vec<DiskEpisode>,
    /// Faults are paused: no fault touches a request.
    #[serde(default)]
    paused: bool,
    /// Sectors of unflushed writes that crashes kept (torn) and lost.
    pub crash_kept: u64,
    pub crash_lost: u64,
}

impl Disk {
    /// The sectors' contents it holds, each as (an identity every copy of
    /// the disk that holds the same contents shares, its bytes).
    pub fn shared_sectors(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let held = self.durable.values().chain(self.volatile.iter().map(|(_, s)| s));
        held.map(|s| (Arc::as_ptr(s) as *const u8 as usize, s.len()))
    }

    /// What a copy of the disk copies rather than shares: its maps.
    pub fn map_bytes(&self) -> usize {
        // A B-tree entry costs about its key, its value and a share of its node.
        (self.durable.len() + self.allocated.len()) * 48 + self.volatile.len() * 24
    }

    pub fn new(node: u16, capacity: u64, base: Option<Base>, faults: DiskFaults, seed: u64) -> Disk {
        Disk {
            node,
            capacity,
            base,
            durable: BTreeMap::new(),
            volatile: Vec::new(),
            allocated: BTreeSet::new(),
            faults,
            stream: Stream::new(seed, &format!("disk{node}")),
            landed: Landed::default(),
            episodes: Vec::new(),
            paused: false,
            crash_kept: 0,
            crash_lost: 0,
        }
    }

    pub fn reseed(&mut self, seed: u64) {
        self.stream.reseed(seed);
    }

    pub fn set_faults(&mut self, faults: DiskFaults) {
        self.faults = faults;
    }

    /// A drawn fault starts at this disk.
    pub fn start(&mut self, id: u64, effect: DiskEffect, probability: f64) {
        self.episodes.push(DiskEpisode { id, effect, probability, landed: 0 });
    }

    /// A drawn fault ends; what it touched here.
    pub fn end(&mut self, id: u64) -> u64 {
        let i = self.episodes.iter().position(|e| e.id == id).expect("only a fault in force ends");
        self.episodes.remove(i).landed
    }

    /// What the drawn fault `id`, in force, touched here so far.
    pub fn episode_landed(&self, id: u64) -> u64 {
        self.episodes.iter().filter(|e| e.id == id).map(|e| e.landed).sum()
    }

    pub fn set_paused(&mut self, paused: bool) {
        self.paused = paused;
    }

    /// Whether a drawn fault of the kind `is` picks strikes this request
    /// (each in force gets its chance, in order); what it does.
    fn drawn(&mut self, is: impl Fn(DiskEffect) -> bool) -> Option<DiskEffect> {
        for e in &mut self.episodes {
            if is(e.effect) && self.stream.chance(e.probability) {
                e.landed += 1;
                self.landed.hit(e.effect.landing());
                return Some(e.effect);
            }
        }
        None
    }

    /// Loads the base image's bytes again (a deserialized disk has only its
    /// path and hash), refusing an image that changed since.
    pub fn attach_base(&mut self) -> Result<(), String> {
        let Some(base) = &mut self.base else { return Ok(()) };
        if !base.bytes.is_empty() || base.sha256.is_empty() {
            return Ok(());
        }
        let fresh = Base::load(&base.path)?;
        if fresh.sha256 != base.sha256 {
            return Err(format!(
                "disk image {} changed since the snapshot was taken (sha256 {} then, {} now)",
                base.path, base.sha256, fresh.sha256
            ));
        }
        *base = fresh;
        Ok(())
    }

    pub fn sectors(&self) -> u64 {
        self.capacity / SECTOR as u64
    }

    pub fn latency_ns(&mut self) -> u64 {
        if self.paused {
            return 0;
        }
        let mut ns = self.faults.latency_ns;
        if self.faults.stall > 0.0 && self.stream.chance(self.faults.stall) {
            ns += self.faults.stall_ns;
            self.landed.hit("disk.stall");
        }
        if let Some(DiskEffect::Stall { stall_ns }) = self.drawn(|e| matches!(e, DiskEffect::Stall { .. })) {
            ns += stall_ns;
        }
        ns
    }

    fn sector(&self, s: u64) -> Vec<u8> {
        if let Some((_, d)) = self.volatile.iter().rev().find(|(n, _)| *n == s) {
            return d.to_vec();
        }
        if let Some(d) = self.durable.get(&s) {
            return d.to_vec();
        }
        let mut out = vec![0u8; SECTOR];
        if let Some(b) = &self.base {
            let at = s as usize * SECTOR;
            if at < b.bytes.len() {
                let n = (b.bytes.len() - at).min(SECTOR);
                out[..n].copy_from_slice(&b.bytes[at..at + n]);
            }
        }
        out
    }

    /// Reads `len` bytes (a multiple of the sector size) from sector `first`.
    pub fn read(&mut self, first: u64, len: usize) -> (Outcome, Vec<u8>) {
        let data: Vec<u8> = (0..(len / SECTOR) as u64).flat_map(|i| self.sector(first + i)).collect();
        if self.paused {
            return (Outcome::Ok, data);
        }
        if self.faults.read_error > 0.0 && self.stream.chance(self.faults.read_error) {
            self.landed.hit("disk.read_error");
            return (Outcome::Error, Vec::new());
        }
        if self.drawn(|e| e == DiskEffect::ReadError).is_some() {
            return (Outcome::Error, Vec::new());
        }
        let mut data = data;
        let corrupt = self.faults.corrupt > 0.0 && !data.is_empty() && self.stream.chance(self.faults.corrupt);
        if corrupt {
            self.landed.hit("disk.corrupt");
        }
        if corrupt || (!data.is_empty() && self.drawn(|e| e == DiskEffect::Corrupt).is_some()) {
            let bit = self.stream.below(data.len() as u64 * 8);
            data[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        (Outcome::Ok, data)
    }

    /// Writes `data` (whole sectors) at sector `first`, into the volatile cache.
    pub fn write(&mut self, first: u64, data: &[u8]) -> Outcome {
        let n = (data.len() / SECTOR) as u64;
        let mut first = first;
        if !self.paused {
            if self.faults.write_error > 0.0 && self.stream.chance(self.faults.write_error) {
                self.landed.hit("disk.write_error");
                return Outcome::Error;
            }
            if self.drawn(|e| e == DiskEffect::WriteError).is_some() {
                return Outcome::Error;
            }
            let fits = self.sectors() > n;
            let mut misdirect = self.faults.misdirect > 0.0 && self.stream.chance(self.faults.misdirect) && fits;
            if misdirect {
                self.landed.hit("disk.misdirect");
            } else if fits && self.drawn(|e| e == DiskEffect::Misdirect).is_some() {
                misdirect = true;
            }
            if misdirect {
                first = self.stream.below(self.sectors() - n + 1);
            }
            // Like a thin-provisioned volume: overwriting allocated space
            // always works; allocating beyond the quota fails.
            let new = (first..first + n).filter(|s| !self.allocated.contains(s)).count() as u64;
            if let Some(quota) = self.faults.quota {
                if new > 0 && (self.allocated.len() as u64 + new) * SECTOR as u64 > quota {
                    self.landed.hit("disk.enospc");
                    return Outcome::Error;
                }
            }
            if new > 0 && self.drawn(|e| e == DiskEffect::Enospc).is_some() {
                return Outcome::Error;
            }
        }
        for (i, chunk) in data.chunks(SECTOR).enumerate() {
            self.volatile.push((first + i as u64, Arc::from(chunk)));
            self.allocated.insert(first + i as u64);
        }
        if self.volatile.len() > CACHE_SECTORS {
            let excess = self.volatile.len() - CACHE_SECTORS;
            for (s, d) in self.volatile.drain(..excess) {
                self.durable.insert(s, d);
            }
        }
        Outcome::Ok
    }

    /// Makes every cached write durable (unless the flush lies).
    pub fn flush(&mut self) -> Outcome {
        if !self.paused && !self.volatile.is_empty() {
            if self.faults.lying_flush > 0.0 && self.stream.chance(self.faults.lying_flush) {
                self.landed.hit("disk.lying_flush");
                return Outcome::Ok;
            }
            if self.drawn(|e| e == DiskEffect::LyingFlush).is_some() {
                return Outcome::Ok;
            }
        }
        for (s, d) in self.volatile.drain(..) {
            self.durable.insert(s, d);
        }
        Outcome::Ok
    }

    /// A power loss: unflushed writes are lost, or (`torn`) a seed-chosen
    /// prefix of them, sector by sector, survives.
    pub fn crash(&mut self, torn: bool) {
        let pending = std::mem::take(&mut self.volatile);
        let keep = if torn && !pending.is_empty() { self.stream.below(pending.len() as u64 + 1) as usize } else { 0 };
        let lost = pending.len() - keep;
        for (s, d) in pending.into_iter().take(keep) {
            self.durable.insert(s, d);
        }
        self.crash_kept += keep as u64;
        self.crash_lost += lost as u64;
        // Landing evidence: the unflushed sectors the crash lost or tore.
        let kind = if torn { "disk.crash_torn" } else { "disk.crash_lost" };
        self.landed.add(kind, (keep + lost) as u64);
    }

    /// The machine is replaced: every write is gone, flushed or not, and
    /// reads see the base image again. Returns the sectors discarded.
    pub fn wipe(&mut self) -> u64 {
        let discarded = (self.durable.len() + self.volatile.len()) as u64;
        self.durable.clear();
        self.volatile.clear();
        self.allocated.clear();
        self.landed.add("disk.wiped", discarded);
        discarded
    }

    pub fn unflushed_sectors(&self) -> usize {
        self.volatile.len()
    }
}

/// Sectors serialize as hex strings (compact and readable in snapshots).
mod sector_map {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &BTreeMap<u64, Arc<[u8]>>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(k, v)| (k, hex::encode(v))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, Arc<[u8]>>, D::Error> {
        let m: BTreeMap<u64, String> = BTreeMap::deserialize(d)?;
        m.into_iter()
            .map(|(k, v)| hex::decode(v).map(|b| (k, Arc::from(b))).map_err(serde::de::Error::custom))
            .collect()
    }
}

mod sector_list {
    use super::*;
    use serde::{Deserializer, Serializer};

    type Sectors = Vec<(u64, Arc<[u8]>)>;

    pub fn serialize<S: Serializer>(l: &[(u64, Arc<[u8]>)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(l.iter().map(|(k, v)| (k, hex::encode(v))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Sectors, D::Error> {
        let l: Vec<(u64, String)> = Vec::deserialize(d)?;
        l.into_iter()
            .map(|(k, v)| hex::decode(v).map(|b| (k, Arc::from(b))).map_err(serde::de::Error::custom))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultPlan;

    fn disk(plan: &str, seed: u64) -> Disk {
        Disk::new(0, 1 << 20, None, FaultPlan::parse(plan, seed, 1).unwrap().disk, seed)
    }

    #[test]
    fn flushed_writes_survive_a_crash_unflushed_do_not() {
        let mut d = disk("", 1);
        d.write(0, &[b'A'; 1024]);
        d.flush();
        d.write(2, &[b'B'; 512]);
        assert_eq!(d.read(2, 512).1, vec![b'B'; 512], "visible before the crash");
        d.crash(false);
        assert_eq!(d.read(0, 1024).1, vec![b'A'; 1024]);
        assert_eq!(d.read(2, 512).1, vec![0; 512]);
        assert_eq!(d.landed.get("disk.crash_lost"), 1);
    }

    #[test]
    fn torn_crashes_keep_a_seeded_prefix_sector_by_sector() {
        let kept = |seed| {
            let mut d = disk("", seed);
            d.write(0, &[b'B'; 8 * 512]);
            d.crash(true);
            (0..8).filter(|&s| d.read(s, 512).1[0] == b'B').count()
        };
        assert_eq!(kept(3), kept(3));
        let all: Vec<usize> = (0..20).map(kept).collect();
        assert!(all.iter().any(|&k| k > 0 && k < 8), "some crashes tear mid-write: {all:?}");
        // Kept sectors form a prefix.
        let mut d = disk("", 5);
        d.write(0, &[b'B'; 8 * 512]);
        d.crash(true);
        let present: Vec<bool> = (0..8).map(|s| d.read(s, 512).1[0] == b'B').collect();
        assert!(present.windows(2).all(|w| w[0] || !w[1]), "{present:?}");
    }

    /// Each drawn disk fault does what its kind says while in force, counts
    /// what it touched, and nothing touches a paused disk.
    #[test]
    fn drawn_disk_faults_strike_while_in_force() {
        let effects = [
            DiskEffect::ReadError,
            DiskEffect::WriteError,
            DiskEffect::Corrupt,
            DiskEffect::Misdirect,
            DiskEffect::Stall { stall_ns: 7 },
            DiskEffect::LyingFlush,
            DiskEffect::Enospc,
        ];
        for effect in effects {
            for paused in [false, true] {
                let mut d = disk("", 1);
                d.start(9, effect, 1.0);
                d.set_paused(paused);
                let stalled = d.latency_ns();
                let wrote = d.write(0, &[b'A'; 512]);
                let flushed = d.flush();
                let (read, data) = d.read(0, 512);
                d.crash(false);
                let survived = d.read(0, 512).1 == vec![b'A'; 512];
                let landed = d.end(9);
                if paused {
                    assert_eq!((landed, wrote, survived), (0, Outcome::Ok, true), "{effect:?} paused");
                    continue;
                }
                assert!(landed > 0 && d.landed.get(effect.landing()) == landed, "{effect:?}");
                match effect {
                    DiskEffect::ReadError => assert_eq!(read, Outcome::Error),
                    DiskEffect::WriteError | DiskEffect::Enospc => assert_eq!(wrote, Outcome::Error),
                    DiskEffect::Corrupt => assert_ne!(data, vec![b'A'; 512]),
                    DiskEffect::Misdirect | DiskEffect::LyingFlush => assert!(!survived, "{effect:?}"),
                    DiskEffect::Stall { .. } => assert_eq!(stalled, 7),
                }
                assert_eq!(flushed, Outcome::Ok);
            }
        }
    }

    #[test]
    fn every_disk_fault_lands_and_a_zero_plan_changes_nothing() {
        for (plan, kind) in [
            ("[disk]\nread_error = 0.5", "disk.read_error"),
            ("[disk]\nwrite_error = 0.5", "disk.write_error"),
            ("[disk]\ncorrupt = 0.5", "disk.corrupt"),
            ("[disk]\nmisdirect = 0.5", "disk.misdirect"),
            ("[disk]\nstall = 0.5\nstall_time = \"1ms\"", "disk.stall"),
            ("[disk]\nlying_flush = 0.5", "disk.lying_flush"),
            ("[disk]\nquota = \"4K\"", "disk.enospc"),
        ] {
            let mut d = disk(plan, 2);
            for i in 0..40 {
                d.latency_ns();
                d.write(i, &[i as u8; 512]);
                d.read(i, 512);
                d.flush();
            }
            assert!(d.landed.get(kind) > 0, "{kind}");
        }
        let mut d = disk("", 2);
        for i in 0..40 {
            assert_eq!(d.write(i, &[i as u8; 512]), Outcome::Ok);
            assert_eq!(d.read(i, 512), (Outcome::Ok, vec![i as u8; 512]));
            d.flush();
        }
        assert!(d.landed.0.is_empty());
    }

    #[test]
    fn a_restored_disk_reloads_its_base_image_and_refuses_a_changed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.img");
        std::fs::write(&path, [9u8; 512]).unwrap();
        let base = Base::load(path.to_str().unwrap()).unwrap();
        let d = Disk::new(0, 1 << 20, Some(base), Default::default(), 1);
        let json = serde_json::to_string(&d).unwrap();
        let mut back: Disk = serde_json::from_str(&json).unwrap();
        back.attach_base().unwrap();
        assert_eq!(back.read(0, 512).1, vec![9u8; 512]);
        std::fs::write(&path, [8u8; 512]).unwrap();
        let mut changed: Disk = serde_json::from_str(&json).unwrap();
        assert!(changed.attach_base().unwrap_err().contains("changed since the snapshot"));
    }

    #[test]
    fn the_write_cache_is_bounded() {
        let mut d = disk("", 1);
        for i in 0..(CACHE_SECTORS as u64 + 10) {
            d.write(i % 100, &[i as u8; SECTOR]);
        }
        assert_eq!(d.unflushed_sectors(), CACHE_SECTORS);
        d.crash(false);
        let last = CACHE_SECTORS as u64 + 9;
        assert_ne!(d.read(last % 100, SECTOR).1, vec![last as u8; SECTOR], "cached writes are still lost");
    }

    #[test]
    fn base_image_shows_through_and_state_serializes() {
        let base = Base { path: "b".into(), sha256: String::new(), bytes: Arc::new(vec![7u8; 1000]) };
        let mut d = Disk::new(0, 1 << 20, Some(base), Default::default(), 1);
        assert_eq!(d.read(1, 512).1[..488], [7u8; 488]);
        assert_eq!(d.read(1, 512).1[488..], [0u8; 24]);
        d.write(0, &[1; 512]);
        let json = serde_json::to_string(&d).unwrap();
        let mut back: Disk = serde_json::from_str(&json).unwrap();
        assert_eq!(back.read(0, 512).1, vec![1; 512]);
        assert_eq!(back.unflushed_sectors(), 1);
    }
}
