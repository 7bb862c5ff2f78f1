//! The virtio-mmio transport (virtio 1.2, section 4.2, version 2 registers):
//! feature negotiation, device status, queue configuration, notifications
//! and the interrupt status a driver acknowledges.
//!
//! The guest drives every register; nothing it writes is trusted. A queue
//! configuration that does not fit guest RAM, or a malformed descriptor
//! chain found later, marks the device broken: `DEVICE_NEEDS_RESET` in its
//! status, a configuration-change interrupt, and the reason kept for the
//! run's summary. The VMM carries on.

use serde::{Deserialize, Serialize};
use virtio_queue::{Queue, QueueState};
use vm_memory::GuestAddress;

use crate::memory::GuestRam;

pub const MAGIC: u32 = 0x7472_6976; // "virt"
pub const VERSION: u32 = 2;
pub const VENDOR: u32 = 0x4856_534d; // "HVSM"
/// Each device's register window.
pub const WINDOW: u64 = 0x1000;
/// VIRTIO_F_VERSION_1: every hvsim device is a modern device.
pub const F_VERSION_1: u64 = 1 << 32;
pub const QUEUE_MAX: u16 = 256;

pub const STATUS_ACKNOWLEDGE: u32 = 1;
pub const STATUS_DRIVER: u32 = 2;
pub const STATUS_DRIVER_OK: u32 = 4;
pub const STATUS_FEATURES_OK: u32 = 8;
pub const STATUS_NEEDS_RESET: u32 = 0x40;
pub const STATUS_FAILED: u32 = 0x80;

/// Interrupt status bits.
pub const INT_USED: u32 = 1;
pub const INT_CONFIG: u32 = 2;

/// One virtqueue's registers, as plain data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRegs {
    pub size: u16,
    pub ready: bool,
    pub desc: u64,
    pub avail: u64,
    pub used: u64,
    pub next_avail: u16,
    pub next_used: u16,
}

impl QueueRegs {
    /// A validated queue to process, or why the guest's setup is unusable.
    pub fn queue(&self, ram: &GuestRam) -> Result<Queue, String> {
        let state = QueueState {
            max_size: QUEUE_MAX,
            next_avail: self.next_avail,
            next_used: self.next_used,
            event_idx_enabled: false,
            size: self.size,
            ready: self.ready,
            desc_table: self.desc,
            avail_ring: self.avail,
            used_ring: self.used,
        };
        let q = Queue::try_from(state).map_err(|e| format!("queue setup rejected: {e}"))?;
        let n = u64::from(self.size);
        let fits = |addr: u64, len: u64| ram.contains(addr, len);
        if !(fits(self.desc, 16 * n) && fits(self.avail, 6 + 2 * n) && fits(self.used, 6 + 8 * n)) {
            return Err(format!(
                "queue rings (desc {:#x}, avail {:#x}, used {:#x}, size {n}) lie outside guest RAM",
                self.desc, self.avail, self.used
            ));
        }
        Ok(q)
    }

    pub fn update(&mut self, q: &Queue) {
        use virtio_queue::QueueT;
        self.next_avail = q.next_avail();
        self.next_used = q.next_used();
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mmio {
    pub device_id: u32,
    pub device_features: u64,
    pub driver_features: u64,
    device_features_sel: u32,
    driver_features_sel: u32,
    queue_sel: u32,
    pub status: u32,
    pub interrupt_status: u32,
    pub queues: Vec<QueueRegs>,
    /// Why the device stopped working, if it did.
    pub broken: Option<String>,
}

/// What a register write asks of the device behind the transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    None,
    /// The driver notified queue N.
    Notify(u16),
    /// The driver reset the device.
    Reset,
}

impl Mmio {
    pub fn new(device_id: u32, device_features: u64, queues: usize) -> Mmio {
        Mmio {
            device_id,
            device_features: device_features | F_VERSION_1,
            queues: vec![QueueRegs::default(); queues],
            ..Mmio::default()
        }
    }

    pub fn driver_ok(&self) -> bool {
        self.status & STATUS_DRIVER_OK != 0 && self.broken.is_none()
    }

    /// Marks the device broken (once) with `reason`.
    pub fn fail(&mut self, reason: String) {
        if self.broken.is_none() {
            self.broken = Some(reason);
            self.status |= STATUS_NEEDS_RESET;
            self.interrupt_status |= INT_CONFIG;
        }
    }

    fn reset(&mut self) {
        *self = Mmio::new(self.device_id, self.device_features, self.queues.len());
    }

    fn selected(&mut self) -> Option<&mut QueueRegs> {
        self.queues.get_mut(self.queue_sel as usize)
    }

    /// A 32-bit register read (configuration space, at 0x100 and up, is the
    /// device's).
    pub fn read(&self, offset: u64) -> u32 {
        let q = self.queues.get(self.queue_sel as usize);
        match offset {
            0x000 => MAGIC,
            0x004 => VERSION,
            0x008 => self.device_id,
            0x00c => VENDOR,
            0x010 => match self.device_features_sel {
                0 => self.device_features as u32,
                1 => (self.device_features >> 32) as u32,
                _ => 0,
            },
            0x034 => q.map_or(0, |_| u32::from(QUEUE_MAX)),
            0x044 => q.map_or(0, |q| u32::from(q.ready)),
            0x060 => self.interrupt_status,
            0x070 => self.status,
            // ConfigGeneration: configuration spaces never change.
            0x0fc => 0,
            _ => 0,
        }
    }

    /// A 32-bit register write.
    pub fn write(&mut self, offset: u64, value: u32) -> Request {
        match offset {
            0x014 => self.device_features_sel = value,
            0x020 => {
                let shift = match self.driver_features_sel {
                    0 => 0,
                    1 => 32,
                    _ => return Request::None,
                };
                let mask = 0xFFFF_FFFFu64 << shift;
                self.driver_features = (self.driver_features & !mask) | ((u64::from(value) << shift) & mask);
            }
            0x024 => self.driver_features_sel = value,
            0x030 => self.queue_sel = value,
            0x038 => {
                if let Some(q) = self.selected() {
                    q.size = value.min(u32::from(u16::MAX)) as u16;
                }
            }
            0x044 => {
                if let Some(q) = self.selected() {
                    q.ready = value & 1 != 0;
                }
            }
            0x050 => return Request::Notify(value.min(u32::from(u16::MAX)) as u16),
            0x064 => self.interrupt_status &= !value,
            0x070 => {
                if value == 0 {
                    self.reset();
                    return Request::Reset;
                }
                let mut v = value;
                // FEATURES_OK only if the driver accepted a subset of what we
                // offer, including VERSION_1; otherwise the bit stays clear.
                if v & STATUS_FEATURES_OK != 0
                    && (self.driver_features & !self.device_features != 0 || self.driver_features & F_VERSION_1 == 0)
                {
                    v &= !STATUS_FEATURES_OK;
                }
                self.status = v | (self.status & STATUS_NEEDS_RESET);
            }
            0x080 | 0x084 | 0x090 | 0x094 | 0x0a0 | 0x0a4 => {
                let high = offset & 4 != 0;
                if let Some(q) = self.selected() {
                    let field = match offset & !4 {
                        0x080 => &mut q.desc,
                        0x090 => &mut q.avail,
                        _ => &mut q.used,
                    };
                    *field = if high {
                        (*field & 0xFFFF_FFFF) | (u64::from(value) << 32)
                    } else {
                        (*field & !0xFFFF_FFFF) | u64::from(value)
                    };
                }
            }
            _ => {}
        }
        Request::None
    }
}

/// The guest address of a descriptor, checked against RAM.
pub fn checked(ram: &GuestRam, addr: GuestAddress, len: u32) -> Result<u64, String> {
    if ram.contains(addr.0, u64::from(len)) {
        Ok(addr.0)
    } else {
        Err(format!("descriptor {:#x}+{len} lies outside guest RAM", addr.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identification_and_feature_negotiation() {
        let mut m = Mmio::new(4, 0, 1);
        assert_eq!((m.read(0), m.read(4), m.read(8)), (MAGIC, 2, 4));
        m.write(0x014, 1);
        assert_eq!(m.read(0x010), 1, "VERSION_1 is bit 32");
        // A driver that does not accept VERSION_1 does not get FEATURES_OK.
        m.write(0x070, STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK);
        assert_eq!(m.read(0x070) & STATUS_FEATURES_OK, 0);
        m.write(0x024, 1);
        m.write(0x020, 1);
        m.write(0x070, STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK);
        assert_ne!(m.read(0x070) & STATUS_FEATURES_OK, 0);
        // Features the device does not offer are refused too.
        m.write(0x024, 0);
        m.write(0x020, 1 << 7);
        m.write(0x070, STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK);
        assert_eq!(m.read(0x070) & STATUS_FEATURES_OK, 0);
    }

    #[test]
    fn queue_registers_and_reset() {
        let mut m = Mmio::new(2, 0, 1);
        m.write(0x030, 0);
        m.write(0x038, 128);
        m.write(0x080, 0x1000);
        m.write(0x084, 0x2);
        assert_eq!(m.queues[0].desc, 0x2_0000_1000);
        assert_eq!(m.write(0x050, 0), Request::Notify(0));
        m.write(0x030, 7); // no such queue: ignored, never a panic
        m.write(0x038, 64);
        assert_eq!(m.write(0x070, 0), Request::Reset);
        assert_eq!(m.queues[0], QueueRegs::default());
    }

    #[test]
    fn failing_sets_needs_reset_and_a_config_interrupt() {
        let mut m = Mmio::new(1, 0, 2);
        m.fail("bad chain".into());
        assert_ne!(m.read(0x070) & STATUS_NEEDS_RESET, 0);
        assert_eq!(m.read(0x060), INT_CONFIG);
        assert!(!m.driver_ok());
        m.write(0x064, INT_CONFIG);
        assert_eq!(m.read(0x060), 0);
    }

    #[test]
    fn bad_queue_setups_are_refused() {
        let ram = GuestRam::new(1 << 20).unwrap();
        let q = QueueRegs { size: 16, ready: true, desc: 0x10_0000, avail: 0, used: 0x1000, ..Default::default() };
        assert!(q.queue(&ram).unwrap_err().contains("outside guest RAM"));
        let q = QueueRegs { size: 3, ready: true, ..Default::default() };
        assert!(q.queue(&ram).is_err(), "size must be a power of two");
    }
}
