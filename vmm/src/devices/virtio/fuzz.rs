//! A hostile driver: arbitrary register writes, descriptor tables, ring
//! indices, request headers and memory contents thrown at every virtio
//! device of a two-node machine with every fault switched on. The VMM must
//! never panic, a broken device must say so in its status register, and
//! the whole device state must stay plain data: the same operations give
//! the same state and RAM, and a serde round trip in the middle (what a
//! snapshot does) changes nothing that follows.

use proptest::prelude::*;

use super::testing::{driver_ok, Ring, F_WRITE, SIZE};
use super::*;
use crate::faults::FaultPlan;

const PLAN: &str = r#"
    [network]
    latency = "50us"
    jitter = "20us"
    drop = 0.1
    duplicate = 0.1
    reorder = 0.2
    clog = { probability = 0.05, duration = "1ms" }
    cut = { probability = 0.05, duration = "1ms" }
    burst = { enter = 0.1, leave = 0.3, drop = 0.9 }
    [[network.partition]]
    start = "2ms"
    heal = "4ms"
    groups = [[0], [1]]
    [disk]
    latency = "30us"
    read_error = 0.1
    write_error = 0.1
    corrupt = 0.1
    misdirect = 0.1
    stall = 0.1
    stall_time = "1ms"
    lying_flush = 0.2
    quota = "8K"
    [[crash]]
    node = 1
    at = "3ms"
    torn = true
    restart = "2ms"
    [[crash]]
    node = 1
    at = "6ms"
    [[crash]]
    node = 0
    at = "7ms"
    restart = "1ms"
"#;

/// Guest RAM: data buffers from 512 KiB (disk requests from +0x2_0000,
/// frames sent from +0x4_0000, receive buffers from +0x6_0000, entropy from +0x7_0000), test device
/// `d`'s rings at `(d + 1)` MiB (see [`Ring`]).
const RAM: usize = 8 << 20;
const DATA: u64 = 0x8_0000;
const NODES: u8 = 2;
/// Both NICs, both disks, the entropy source.
const DEVICES: u8 = 2 * NODES + 1;

#[derive(Clone, Debug)]
enum Op {
    /// A well-behaved setup of device `dev`'s queues.
    Setup {
        dev: u8,
    },
    /// A 32-bit write to a register (or anywhere in the window).
    Reg {
        dev: u8,
        offset: u64,
        value: u32,
    },
    /// An access of the wrong width or alignment.
    OddWrite {
        dev: u8,
        offset: u64,
        len: usize,
    },
    Read {
        dev: u8,
        offset: u64,
        len: usize,
    },
    Desc {
        dev: u8,
        q: u16,
        i: u16,
        addr: u64,
        len: u32,
        flags: u16,
        next: u16,
    },
    Offer {
        dev: u8,
        q: u16,
        head: u16,
    },
    AvailIdx {
        dev: u8,
        q: u16,
        idx: u16,
    },
    /// A block request header (type, sector) in a data buffer.
    BlkHeader {
        at: u64,
        kind: u32,
        sector: u64,
    },
    Bytes {
        at: u64,
        bytes: Vec<u8>,
    },
    /// A well-formed disk request (header, data, status) on a disk.
    BlkRequest {
        disk: u8,
        slot: u16,
        kind: u32,
        sector: u64,
        sectors: u32,
    },
    /// A well-formed frame sent by a node (to the other, or broadcast).
    NetTx {
        node: u8,
        slot: u16,
        len: u32,
        broadcast: bool,
    },
    /// A receive buffer given to a node's NIC.
    NetRx {
        node: u8,
        slot: u16,
    },
    /// A buffer for the entropy source to fill.
    RngRequest {
        slot: u16,
        len: u32,
    },
    /// Virtual time passes and everything due fires.
    Tick {
        ns: u64,
    },
}

fn register() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => prop::sample::select(vec![
            0x14u64, 0x20, 0x24, 0x30, 0x38, 0x44, 0x50, 0x64, 0x70, 0x80, 0x84, 0x90, 0x94, 0xa0, 0xa4, 0x100
        ]),
        1 => 0u64..0x1000,
    ]
}

fn data_addr() -> impl Strategy<Value = u64> {
    prop_oneof![8 => (0u64..512).prop_map(|i| DATA + i * 0x100), 1 => any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    let dev = 0..DEVICES;
    prop_oneof![
        2 => dev.clone().prop_map(|dev| Op::Setup { dev }),
        3 => (dev.clone(), register(), prop_oneof![any::<u32>(), 0u32..4]).prop_map(|(dev, offset, value)| Op::Reg { dev, offset, value }),
        1 => (dev.clone(), 0u64..0x200, 1usize..9).prop_map(|(dev, offset, len)| Op::OddWrite { dev, offset, len }),
        1 => (dev.clone(), 0u64..0x140, 1usize..9).prop_map(|(dev, offset, len)| Op::Read { dev, offset, len }),
        8 => (dev.clone(), 0u16..2, 0..SIZE, data_addr(), prop_oneof![Just(16u32), Just(512), Just(1), 0u32..70_000, any::<u32>()], 0u16..8, 0..SIZE + 4)
            .prop_map(|(dev, q, i, addr, len, flags, next)| Op::Desc { dev, q, i, addr, len, flags, next }),
        5 => (dev.clone(), 0u16..2, 0..SIZE + 2).prop_map(|(dev, q, head)| Op::Offer { dev, q, head }),
        1 => (dev, 0u16..2, any::<u16>()).prop_map(|(dev, q, idx)| Op::AvailIdx { dev, q, idx }),
        3 => (data_addr(), prop_oneof![Just(0u32), Just(1), Just(4), Just(8), any::<u32>()], prop_oneof![0u64..40, any::<u64>()])
            .prop_map(|(at, kind, sector)| Op::BlkHeader { at, kind, sector }),
        1 => (data_addr(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(at, bytes)| Op::Bytes { at, bytes }),
        6 => (0u8..2, 0u16..5, prop_oneof![Just(0u32), Just(1), Just(4), Just(8), 0u32..12], 0u64..70, 0u32..4)
            .prop_map(|(disk, slot, kind, sector, sectors)| Op::BlkRequest { disk, slot, kind, sector, sectors }),
        4 => (0u8..2, 0u16..8, 0u32..1600, any::<bool>()).prop_map(|(node, slot, len, broadcast)| Op::NetTx { node, slot, len, broadcast }),
        4 => (0u8..2, 0u16..8).prop_map(|(node, slot)| Op::NetRx { node, slot }),
        2 => (0..SIZE, 0u32..5000).prop_map(|(slot, len)| Op::RngRequest { slot, len }),
        4 => (0u64..2_000_000).prop_map(|ns| Op::Tick { ns }),
    ]
}

struct Bench {
    virtio: Virtio,
    ram: GuestRam,
    now: Vtime,
}

impl Bench {
    fn new() -> Bench {
        let spec = VirtioSpec { nodes: u16::from(NODES), disk_bytes: 64 * 512, image_bytes: 0, rng: true };
        let plan = FaultPlan::parse(PLAN, 7, u16::from(NODES)).expect("the fuzz plan parses");
        Bench { virtio: Virtio::new(&spec, &plan, 7).unwrap(), ram: GuestRam::new(RAM).unwrap(), now: Vtime(0) }
    }

    fn addr(dev: u8, offset: u64) -> u64 {
        MMIO_BASE + u64::from(dev) * WINDOW + offset
    }

    fn apply(&mut self, op: &Op) {
        let (v, ram) = (&mut self.virtio, &self.ram);
        // Writes to RAM may fail for wild addresses; so would the guest's.
        match *op {
            Op::Setup { dev } => driver_ok(&mut v.devices[usize::from(dev)].mmio, u64::from(dev), 2),
            Op::Reg { dev, offset, value } => {
                v.mmio_write(Self::addr(dev, offset), &value.to_le_bytes(), ram, self.now)
            }
            Op::OddWrite { dev, offset, len } => v.mmio_write(Self::addr(dev, offset), &vec![0xa5; len], ram, self.now),
            Op::Read { dev, offset, len } => v.mmio_read(Self::addr(dev, offset), &mut vec![0; len]),
            Op::Desc { dev, q, i, addr, len, flags, next } => {
                Ring::new(u64::from(dev), q).desc(ram, i, addr, len, flags, next)
            }
            Op::Offer { dev, q, head } => Ring::new(u64::from(dev), q).offer(ram, head),
            Op::AvailIdx { dev, q, idx } => Ring::new(u64::from(dev), q).set_avail_idx(ram, idx),
            Op::BlkHeader { at, kind, sector } => {
                let mut h = [0u8; 16];
                h[..4].copy_from_slice(&kind.to_le_bytes());
                h[8..].copy_from_slice(&sector.to_le_bytes());
                let _ = ram.write(at, &h);
            }
            Op::Bytes { at, ref bytes } => {
                let _ = ram.write(at, bytes);
            }
            Op::BlkRequest { disk, slot, kind, sector, sectors } => {
                let dev = NODES + disk;
                let at = DATA + u64::from(dev) * 0x1_0000 + u64::from(slot) * 0x2000;
                let data = Some((512 * sectors.max(1), kind == 0));
                Ring::new(u64::from(dev), 0).blk_request(ram, 3 * slot, at, (kind, sector), data);
                v.mmio_write(Self::addr(dev, 0x50), &0u32.to_le_bytes(), ram, self.now);
            }
            Op::NetTx { node, slot, len, broadcast } => {
                let (r, at) = (
                    Ring::new(u64::from(node), 1),
                    DATA + 0x4_0000 + u64::from(node) * 0x1_0000 + u64::from(slot) * 0x800,
                );
                let mut frame = vec![0u8; 12 + 14 + len as usize % 1500];
                let dst = if broadcast { [0xff; 6] } else { [0x52, 0x54, 0, 0, 0, 2 - node] };
                frame[12..18].copy_from_slice(&dst);
                frame[18..24].copy_from_slice(&[0x52, 0x54, 0, 0, 0, 1 + node]);
                frame[24..26].copy_from_slice(&[0x08, 0x00]);
                ram.write(at, &frame).unwrap();
                r.desc(ram, slot, at, frame.len() as u32, 0, 0);
                r.offer(ram, slot);
                v.mmio_write(Self::addr(node, 0x50), &1u32.to_le_bytes(), ram, self.now);
            }
            Op::NetRx { node, slot } => {
                let (r, at) = (
                    Ring::new(u64::from(node), 0),
                    DATA + 0x6_0000 + u64::from(node) * 0x1_0000 + u64::from(slot) * 0x800,
                );
                r.desc(ram, slot, at, 0x800, F_WRITE, 0);
                r.offer(ram, slot);
                v.mmio_write(Self::addr(node, 0x50), &0u32.to_le_bytes(), ram, self.now);
            }
            Op::RngRequest { slot, len } => {
                let r = Ring::new(u64::from(DEVICES - 1), 0);
                r.desc(ram, slot, DATA + 0x7_0000 + u64::from(slot) * 0x1000, len, F_WRITE, 0);
                r.offer(ram, slot);
                v.mmio_write(Self::addr(DEVICES - 1, 0x50), &0u32.to_le_bytes(), ram, self.now);
            }
            Op::Tick { ns } => {
                self.now = Vtime(self.now.0 + ns);
                v.fire(self.now, ram);
                // Everything due has been done: a halted guest waiting for
                // the next deadline would otherwise spin in place.
                assert!(v.deadline().is_none_or(|t| t > self.now), "{:?} is still due at {:?}", v.deadline(), self.now);
            }
        }
        for d in &v.devices {
            if let Some(reason) = &d.mmio.broken {
                assert_ne!(
                    d.mmio.status & mmio::STATUS_NEEDS_RESET,
                    0,
                    "{} is broken ({reason}) without NEEDS_RESET",
                    d.name
                );
            }
        }
    }

    fn state(&self) -> (String, [u8; 32]) {
        (serde_json::to_string(&self.virtio).expect("device state serializes"), self.ram.hash())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn a_hostile_driver_never_panics_and_state_stays_plain_data(
        ops in prop::collection::vec(op(), 1..120),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut a = Bench::new();
        for op in &ops {
            a.apply(op);
        }

        // Same operations, with a serde round trip of the device state part
        // way: what a snapshot and restore do.
        let cut = cut.index(ops.len());
        let mut b = Bench::new();
        for op in &ops[..cut] {
            b.apply(op);
        }
        let json = serde_json::to_string(&b.virtio).unwrap();
        b.virtio = serde_json::from_str(&json).expect("device state deserializes");
        prop_assert_eq!(serde_json::to_string(&b.virtio).unwrap(), json);
        for op in &ops[cut..] {
            b.apply(op);
        }
        prop_assert!(a.state() == b.state(), "a mid-way round trip changed the outcome");
    }
}
