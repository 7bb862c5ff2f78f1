//! The driver's side of split virtqueues, laid out in guest RAM: what the
//! devices' tests, and the hostile driver (`hostile.rs`), play.
//!
//! A [`Ring`] is one queue's three parts, 4 KiB apart: the descriptor
//! table, the available ring and the used ring, each of [`SIZE`] entries.

use super::mmio::{Mmio, STATUS_ACKNOWLEDGE, STATUS_DRIVER, STATUS_DRIVER_OK, STATUS_FEATURES_OK};
use crate::memory::GuestRam;

pub const SIZE: u16 = 16;
pub const F_NEXT: u16 = 1;
pub const F_WRITE: u16 = 2;

/// One queue, at a guest address (it takes 12 KiB).
#[derive(Clone, Copy, Debug)]
pub struct Ring(u64);

impl Ring {
    /// The unit tests' layout: queue `q` of device `dev` at
    /// `0x10_0000 * (dev + 1) + 0x4000 * q`.
    pub fn new(dev: u64, q: u16) -> Ring {
        Ring::at(0x10_0000 * (dev + 1) + 0x4000 * u64::from(q))
    }

    pub fn at(addr: u64) -> Ring {
        Ring(addr)
    }

    fn desc_table(self) -> u64 {
        self.0
    }
    fn avail(self) -> u64 {
        self.0 + 0x1000
    }
    /// Where the device writes what it used.
    pub fn used_ring(self) -> u64 {
        self.0 + 0x2000
    }

    /// Writes descriptor `i`.
    pub fn desc(self, ram: &GuestRam, i: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&addr.to_le_bytes());
        b[8..12].copy_from_slice(&len.to_le_bytes());
        b[12..14].copy_from_slice(&flags.to_le_bytes());
        b[14..].copy_from_slice(&next.to_le_bytes());
        ram.write(self.desc_table() + 16 * u64::from(i % SIZE), &b).unwrap();
    }

    /// Makes the chain at `head` available.
    pub fn offer(self, ram: &GuestRam, head: u16) {
        let idx = self.avail_idx(ram);
        ram.write(self.avail() + 4 + 2 * u64::from(idx % SIZE), &head.to_le_bytes()).unwrap();
        self.set_avail_idx(ram, idx.wrapping_add(1));
    }

    pub fn avail_idx(self, ram: &GuestRam) -> u16 {
        let mut idx = [0u8; 2];
        ram.read(self.avail() + 2, &mut idx).unwrap();
        u16::from_le_bytes(idx)
    }

    pub fn set_avail_idx(self, ram: &GuestRam, idx: u16) {
        ram.write(self.avail() + 2, &idx.to_le_bytes()).unwrap();
    }

    /// Makes a block request available at descriptor `head`: its
    /// header (`kind`, `sector`) at `at`, then, if given, a data buffer
    /// of `len` bytes at `at + 0x100` (for the device to fill if
    /// `device_writes`), then the status byte at `at + 0x80`. Returns
    /// the next free descriptor and the status byte's address.
    pub fn blk_request(
        self,
        ram: &GuestRam,
        head: u16,
        at: u64,
        (kind, sector): (u32, u64),
        data: Option<(u32, bool)>,
    ) -> (u16, u64) {
        let mut hdr = [0u8; 16];
        hdr[..4].copy_from_slice(&kind.to_le_bytes());
        hdr[8..].copy_from_slice(&sector.to_le_bytes());
        ram.write(at, &hdr).unwrap();
        self.desc(ram, head, at, 16, F_NEXT, head + 1);
        let mut i = head + 1;
        if let Some((len, device_writes)) = data {
            let flags = if device_writes { F_WRITE } else { 0 };
            self.desc(ram, i, at + 0x100, len, flags | F_NEXT, i + 1);
            i += 1;
        }
        self.desc(ram, i, at + 0x80, 1, F_WRITE, 0);
        self.offer(ram, head);
        (i + 1, at + 0x80)
    }

    /// The used ring's entries: (head, len).
    pub fn used(self, ram: &GuestRam) -> Vec<(u32, u32)> {
        let mut idx = [0u8; 2];
        ram.read(self.used_ring() + 2, &mut idx).unwrap();
        (0..u16::from_le_bytes(idx))
            .map(|i| {
                let mut e = [0u8; 8];
                ram.read(self.used_ring() + 4 + 8 * u64::from(i % SIZE), &mut e).unwrap();
                (u32::from_le_bytes(e[..4].try_into().unwrap()), u32::from_le_bytes(e[4..].try_into().unwrap()))
            })
            .collect()
    }
}

/// A driver that negotiated VERSION_1 and set up one queue per ring (queue
/// `q` in `rings[q]`), then set DRIVER_OK. Resets the device first.
pub fn driver_ok(mmio: &mut Mmio, rings: &[Ring]) {
    mmio.write(0x070, 0);
    mmio.write(0x070, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    mmio.write(0x024, 1);
    mmio.write(0x020, 1);
    mmio.write(0x070, STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK);
    for (q, r) in rings.iter().enumerate() {
        mmio.write(0x030, q as u32);
        mmio.write(0x038, u32::from(SIZE));
        mmio.write(0x080, r.desc_table() as u32);
        mmio.write(0x090, r.avail() as u32);
        mmio.write(0x0a0, r.used_ring() as u32);
        mmio.write(0x044, 1);
    }
    mmio.write(0x070, STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK);
}
