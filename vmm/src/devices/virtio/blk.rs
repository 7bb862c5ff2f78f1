//! virtio-blk: a node's disk (see `disk.rs` for the overlay, the write
//! cache and the faults), or a node's read-only image disk.
//!
//! A request does its I/O against the disk when the driver submits it, and
//! completes (used ring, interrupt) when the disk's latency has passed on
//! the virtual clock. The device offers a volatile write cache
//! (`VIRTIO_BLK_F_FLUSH`), so the guest must flush for durability: exactly
//! what a simulated crash tests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::mmio::Mmio;
use super::{add_used, open_queue, pop, Chain};
use crate::clock::Vtime;
use crate::disk::{Disk, Outcome, SECTOR};
use crate::memory::GuestRam;

pub const DEVICE_ID: u32 = 2;
/// VIRTIO_BLK_F_SEG_MAX | VIRTIO_BLK_F_FLUSH.
pub const FEATURES: u64 = (1 << 2) | (1 << 9);
/// VIRTIO_BLK_F_RO: image disks are read-only.
const F_RO: u64 = 1 << 5;
/// Segments per request the driver may use (config `seg_max`).
const SEG_MAX: u32 = 126;
/// The largest request accepted (beyond what `seg_max` lets Linux send).
const MAX_REQUEST: u64 = 16 << 20;
const HEADER: usize = 16;

const T_IN: u32 = 0;
const T_OUT: u32 = 1;
const T_FLUSH: u32 = 4;
const T_GET_ID: u32 = 8;
const S_OK: u8 = 0;
const S_IOERR: u8 = 1;
const S_UNSUPP: u8 = 2;
/// Bytes of the device ID string (`VIRTIO_BLK_ID_BYTES`).
const ID_BYTES: usize = 20;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Stats {
    reads: u64,
    writes: u64,
    flushes: u64,
    errors: u64,
    unsupported: u64,
    /// Requests refused (I/O error) while the node had no power.
    #[serde(default)]
    refused_node_down: u64,
}

/// What a disk is to its node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The node's own disk: writable, with the plan's faults and the
    /// node's power.
    #[default]
    Node,
    /// The node's image (a container image's root file system): read-only,
    /// no faults; it holds what the run brought, whatever happens to the node.
    Image,
}

#[serde_with::serde_as]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Blk {
    pub disk: Disk,
    #[serde(default)]
    pub role: Role,
    /// Requests done but not yet returned: (due, sequence) -> (head, used length).
    #[serde_as(as = "Vec<(_, _)>")]
    pending: BTreeMap<(u64, u64), (u16, u32)>,
    seq: u64,
    stats: Stats,
    /// The node has no power: every request fails.
    #[serde(default)]
    down: bool,
}

impl Blk {
    pub fn new(disk: Disk, role: Role) -> Blk {
        Blk { disk, role, pending: BTreeMap::new(), seq: 0, stats: Stats::default(), down: false }
    }

    pub fn features(&self) -> u64 {
        match self.role {
            Role::Node => FEATURES,
            Role::Image => FEATURES | F_RO,
        }
    }

    /// The node loses power (the disk loses or tears its unflushed writes,
    /// then refuses every request) or gets it back.
    pub fn set_power(&mut self, on: bool, torn: bool) {
        if !on {
            self.disk.crash(torn);
        }
        self.down = !on;
    }

    /// Configuration space: capacity in sectors, then `size_max` (unused)
    /// and `seg_max`.
    pub fn config(&self) -> Vec<u8> {
        let mut c = self.disk.sectors().to_le_bytes().to_vec();
        c.extend_from_slice(&0u32.to_le_bytes());
        c.extend_from_slice(&SEG_MAX.to_le_bytes());
        c
    }

    pub fn reset(&mut self) {
        self.pending.clear();
    }

    pub fn deadline(&self) -> Option<Vtime> {
        self.pending.keys().next().map(|&(t, _)| Vtime(t))
    }

    pub fn notify(&mut self, q: u16, mmio: &mut Mmio, ram: &GuestRam, now: Vtime) -> Result<(), String> {
        if q != 0 {
            return Err(format!("notify of queue {q}; a disk has one"));
        }
        let mut queue = open_queue(mmio, 0, ram)?;
        let r = (|| {
            while let Some(chain) = pop(&mut queue, ram)? {
                let used = self.execute(&chain, ram)?;
                let due = now.0.saturating_add(self.disk.latency_ns());
                self.pending.insert((due, self.seq), (chain.head, used));
                self.seq += 1;
            }
            Ok(())
        })();
        mmio.queues[0].update(&queue);
        r
    }

    /// Returns every request due by `now` to the driver.
    pub fn complete(&mut self, now: Vtime, mmio: &mut Mmio, ram: &GuestRam) -> Result<(), String> {
        if self.pending.first_key_value().is_none_or(|(&(t, _), _)| t > now.0) {
            return Ok(());
        }
        let mut queue = open_queue(mmio, 0, ram)?;
        let r = (|| {
            while let Some(entry) = self.pending.first_entry() {
                if entry.key().0 > now.0 {
                    break;
                }
                let (head, used) = entry.remove();
                add_used(&mut queue, mmio, ram, head, used)?;
            }
            Ok(())
        })();
        mmio.queues[0].update(&queue);
        r
    }

    /// Does one request's I/O and writes its status; returns the used
    /// length (bytes written into the chain). Errors only for chains no
    /// driver could mean (no status byte, too large): a request the disk
    /// refuses gets an error status instead.
    fn execute(&mut self, chain: &Chain, ram: &GuestRam) -> Result<u32, String> {
        let head = chain.head;
        if chain.writable_len() == 0 {
            return Err(format!("request at head {head} has no status byte"));
        }
        if chain.readable_len() + chain.writable_len() > MAX_REQUEST + HEADER as u64 + 1 {
            return Err(format!("request at head {head} exceeds {MAX_REQUEST} bytes"));
        }
        let readable = chain.read_all(ram, MAX_REQUEST + HEADER as u64)?;
        if readable.len() < HEADER {
            return Err(format!("request at head {head} has a {}-byte header; 16 expected", readable.len()));
        }
        let kind = u32::from_le_bytes(readable[..4].try_into().expect("4 bytes"));
        let sector = u64::from_le_bytes(readable[8..16].try_into().expect("8 bytes"));
        let payload = &readable[HEADER..];
        // Writable bytes: data (for reads and GET_ID), then the status byte.
        let room = chain.writable_len() - 1;
        let in_range = |len: u64| {
            len.is_multiple_of(SECTOR as u64)
                && sector.checked_add(len / SECTOR as u64).is_some_and(|end| end <= self.disk.sectors())
        };
        if self.down {
            self.stats.refused_node_down += 1;
            chain.write_at(ram, room, &[S_IOERR])?;
            return Ok(1);
        }
        let (status, data_len) = match kind {
            T_IN if in_range(room) => {
                self.stats.reads += 1;
                match self.disk.read(sector, room as usize) {
                    (Outcome::Ok, data) => {
                        chain.write_at(ram, 0, &data)?;
                        (S_OK, room)
                    }
                    (Outcome::Error, _) => (S_IOERR, 0),
                }
            }
            T_OUT if self.role == Role::Image => (S_IOERR, 0),
            T_OUT if in_range(payload.len() as u64) => {
                self.stats.writes += 1;
                match self.disk.write(sector, payload) {
                    Outcome::Ok => (S_OK, 0),
                    Outcome::Error => (S_IOERR, 0),
                }
            }
            T_IN | T_OUT => (S_IOERR, 0),
            T_FLUSH => {
                self.stats.flushes += 1;
                match self.disk.flush() {
                    Outcome::Ok => (S_OK, 0),
                    Outcome::Error => (S_IOERR, 0),
                }
            }
            T_GET_ID => {
                let kind = match self.role {
                    Role::Node => "node",
                    Role::Image => "image",
                };
                let mut id = format!("hvsim-{kind}{}", self.disk.node).into_bytes();
                id.resize(ID_BYTES.min(room as usize), 0);
                chain.write_at(ram, 0, &id)?;
                (S_OK, id.len() as u64)
            }
            _ => {
                self.stats.unsupported += 1;
                (S_UNSUPP, 0)
            }
        };
        if status == S_IOERR {
            self.stats.errors += 1;
        }
        chain.write_at(ram, room, &[status])?;
        Ok(data_len as u32 + 1)
    }

    pub fn counters(&self) -> BTreeMap<String, u64> {
        let s = &self.stats;
        super::counters(&[
            ("reads", s.reads),
            ("writes", s.writes),
            ("flushes", s.flushes),
            ("errors", s.errors),
            ("unsupported", s.unsupported),
            ("refused_node_down", s.refused_node_down),
            ("unflushed_sectors", self.disk.unflushed_sectors() as u64),
            ("crash_kept_sectors", self.disk.crash_kept),
            ("crash_lost_sectors", self.disk.crash_lost),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::super::driver::*;
    use super::*;
    use crate::faults::FaultPlan;

    struct Rig {
        blk: Blk,
        mmio: Mmio,
        ram: GuestRam,
        ring: Ring,
        next: u16,
    }

    impl Rig {
        fn new(plan: &str) -> Rig {
            Rig::with_role(plan, Role::Node)
        }

        fn with_role(plan: &str, role: Role) -> Rig {
            let faults = FaultPlan::parse(plan, 1, 1).unwrap().disk;
            let blk = Blk::new(Disk::new(0, 1 << 20, None, faults, 1), role);
            let mut mmio = Mmio::new(DEVICE_ID, blk.features(), 1);
            driver_ok(&mut mmio, &[Ring::new(0, 0)]);
            Rig { blk, mmio, ram: GuestRam::new(8 << 20).unwrap(), ring: Ring::new(0, 0), next: 0 }
        }

        /// Submits a request at `now`; returns (status address, head).
        fn submit(&mut self, kind: u32, sector: u64, data: Option<&[u8]>, read_len: u32, now: u64) -> (u64, u16) {
            let head = self.next;
            let base = 0x40_0000 + u64::from(head) * 0x1_0000;
            let buffer = match data {
                Some(d) => {
                    self.ram.write(base + 0x100, d).unwrap();
                    Some((d.len() as u32, false))
                }
                None if read_len > 0 => Some((read_len, true)),
                None => None,
            };
            let (next, status) = self.ring.blk_request(&self.ram, head, base, (kind, sector), buffer);
            self.next = next;
            self.blk.notify(0, &mut self.mmio, &self.ram, Vtime(now)).unwrap();
            (status, head)
        }

        fn status(&self, at: u64) -> u8 {
            let mut s = [0xEEu8];
            self.ram.read(at, &mut s).unwrap();
            s[0]
        }

        fn data(&self, head: u16, len: usize) -> Vec<u8> {
            let mut d = vec![0u8; len];
            self.ram.read(0x40_0000 + u64::from(head) * 0x1_0000 + 0x100, &mut d).unwrap();
            d
        }
    }

    #[test]
    fn write_flush_read_and_id() {
        let mut r = Rig::new("");
        let (s, _) = r.submit(T_OUT, 3, Some(&[0xAB; 1024]), 0, 0);
        assert_eq!(r.status(s), S_OK);
        let (s, _) = r.submit(T_FLUSH, 0, None, 0, 0);
        assert_eq!(r.status(s), S_OK);
        let (s, head) = r.submit(T_IN, 3, None, 1024, 0);
        assert_eq!((r.status(s), r.data(head, 1024)), (S_OK, vec![0xAB; 1024]));
        let (s, head) = r.submit(T_GET_ID, 0, None, 20, 0);
        assert_eq!(r.status(s), S_OK);
        assert_eq!(&r.data(head, 11), b"hvsim-node0");
        r.blk.complete(Vtime(0), &mut r.mmio, &r.ram).unwrap();
        let used = r.ring.used(&r.ram);
        assert_eq!(used.iter().map(|u| u.1).collect::<Vec<_>>(), [1, 1, 1025, 21]);
        assert_eq!(r.mmio.interrupt_status, 1);
    }

    #[test]
    fn image_disks_are_read_only_and_say_so() {
        let mut r = Rig::with_role("", Role::Image);
        assert_ne!(r.blk.features() & F_RO, 0);
        let base = crate::disk::Base { path: "img".into(), sha256: String::new(), bytes: vec![7u8; 4096].into() };
        r.blk.disk.base = Some(base);
        let (s, _) = r.submit(T_OUT, 0, Some(&[1; 512]), 0, 0);
        assert_eq!(r.status(s), S_IOERR, "a write to an image");
        let (s, head) = r.submit(T_IN, 0, None, 512, 0);
        assert_eq!((r.status(s), r.data(head, 512)), (S_OK, vec![7u8; 512]), "the image is unchanged");
        let (s, head) = r.submit(T_GET_ID, 0, None, 20, 0);
        assert_eq!(r.status(s), S_OK);
        assert_eq!(&r.data(head, 12), b"hvsim-image0");
        assert!(r.mmio.broken.is_none());
    }

    #[test]
    fn out_of_range_and_unknown_requests_fail_without_breaking_the_device() {
        let mut r = Rig::new("");
        let (s, _) = r.submit(T_IN, (1 << 20) / 512, None, 512, 0);
        assert_eq!(r.status(s), S_IOERR, "past the end");
        let (s, _) = r.submit(T_OUT, 0, Some(&[1; 100]), 0, 0);
        assert_eq!(r.status(s), S_IOERR, "not whole sectors");
        let (s, _) = r.submit(99, 0, None, 0, 0);
        assert_eq!(r.status(s), S_UNSUPP);
        assert!(r.mmio.broken.is_none());
    }

    #[test]
    fn completions_wait_for_the_disk_latency() {
        let mut r = Rig::new("[disk]\nlatency = \"2ms\"");
        r.submit(T_FLUSH, 0, None, 0, 1_000);
        assert_eq!(r.blk.deadline(), Some(Vtime(2_001_000)));
        r.blk.complete(Vtime(2_000_999), &mut r.mmio, &r.ram).unwrap();
        assert!(r.ring.used(&r.ram).is_empty());
        r.blk.complete(Vtime(2_001_000), &mut r.mmio, &r.ram).unwrap();
        assert_eq!(r.ring.used(&r.ram).len(), 1);
        assert_eq!(r.blk.deadline(), None);
    }

    #[test]
    fn a_request_without_a_status_byte_breaks_the_device() {
        let mut r = Rig::new("");
        r.ring.desc(&r.ram, 0, 0x40_0000, 16, 0, 0);
        r.ring.offer(&r.ram, 0);
        let e = r.blk.notify(0, &mut r.mmio, &r.ram, Vtime(0)).unwrap_err();
        assert!(e.contains("no status byte"), "{e}");
    }
}
