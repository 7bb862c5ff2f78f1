//! A hostile driver: arbitrary register writes, descriptor tables, ring
//! indices, request headers and memory contents thrown at every virtio
//! device of a two-node machine (both NICs, both disks over a base image,
//! both read-only image disks, the entropy source) with every fault
//! switched on. The VMM must never panic, a broken device must say so in
//! its status register, nothing may stay due once its time has come, and
//! the whole device state must stay plain data: a serde round trip part
//! way (what a snapshot does) changes nothing that follows.
//!
//! The driver's operations are decoded from bytes ([`ops`]), so one
//! description serves both the proptest below (random bytes) and the
//! coverage-guided `virtio` fuzz target (`fuzz/`, built with this crate's
//! `fuzzing` feature; docs/fuzzing.md).

use std::collections::BTreeSet;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use sha2::{Digest, Sha256};

use super::driver::{driver_ok, Ring, F_WRITE, SIZE};
use super::{Kind, Virtio, VirtioSpec, MMIO_BASE, WINDOW};
use crate::clock::Vtime;
use crate::disk::Base;
use crate::faults::FaultPlan;
use crate::memory::GuestRam;

/// Every fault the devices know, often.
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

const SEED: u64 = 7;
const NODES: u8 = 2;
/// Per node a NIC, a disk and an image disk; then the entropy source.
const DEVICES: u8 = 3 * NODES + 1;
const RNG: u8 = DEVICES - 1;
/// Each node disk's size, and the base image under it and each image disk.
const DISK_BYTES: u64 = 64 * 512;
const BASE_BYTES: u64 = 16 * 512;

/// Guest RAM: queue `q` of device `d` at `RINGS + 0x8000 * d + 0x4000 * q`
/// (see [`Ring`]), data buffers from `DATA`: disk requests from `+0`
/// (`0x1_0000` per disk), frames sent from `+0x4_0000` and receive buffers
/// from `+0x6_0000` (`0x1_0000` per node), entropy from `+0x7_4000`.
const RAM: usize = 1 << 20;
const RINGS: u64 = 0;
const DATA: u64 = 0x8_0000;
/// Operations decoded from one input, at most.
pub const MAX_OPS: usize = 256;

/// What every bench starts from: the fault plan ([`PLAN`]), the base
/// images under the disks, and the RAM of the two benches a check runs.
/// Made once for many checks.
pub struct Setup {
    plan: FaultPlan,
    /// Under the node disks, then under each node's image disk.
    bases: Vec<Base>,
    /// Zero between checks: a check zeroes the pages it wrote. A fresh
    /// mapping per check would cost a page fault per page touched, most of
    /// a check's time.
    rams: [GuestRam; 2],
}

impl Setup {
    pub fn new() -> Setup {
        let base = |name: &str, fill: u8| {
            let bytes: Vec<u8> = (0..BASE_BYTES).map(|i| fill ^ (i as u8)).collect();
            Base { path: name.to_owned(), sha256: hex::encode(Sha256::digest(&bytes)), bytes: Arc::new(bytes) }
        };
        let ram = || GuestRam::new(RAM).expect("the bench's RAM");
        Setup {
            plan: FaultPlan::parse(PLAN, SEED, u16::from(NODES)).expect("the hostile driver's plan parses"),
            bases: vec![base("node-base", 0x5a), base("image0", 0x11), base("image1", 0x22)],
            rams: [ram(), ram()],
        }
    }
}

impl Default for Setup {
    fn default() -> Setup {
        Setup::new()
    }
}

fn ring(dev: u8, q: u16) -> Ring {
    Ring::at(RINGS + 0x8000 * u64::from(dev) + 0x4000 * u64::from(q))
}

fn register_addr(dev: u8, offset: u64) -> u64 {
    MMIO_BASE + u64::from(dev) * WINDOW + offset
}

/// One thing the driver does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
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
    /// A well-formed disk request (header, data, status) on a node disk
    /// (0, 1) or an image disk (2, 3).
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

/// The registers a driver uses, most of the time; anywhere in the window
/// otherwise.
fn register(u: &mut Unstructured) -> arbitrary::Result<u64> {
    const KNOWN: [u64; 16] =
        [0x14, 0x20, 0x24, 0x30, 0x38, 0x44, 0x50, 0x64, 0x70, 0x80, 0x84, 0x90, 0x94, 0xa0, 0xa4, 0x100];
    if u.ratio(4, 5)? {
        u.choose(&KNOWN).copied()
    } else {
        u.int_in_range(0..=0xfff)
    }
}

/// A data buffer's address, most of the time; anything otherwise.
fn data_addr(u: &mut Unstructured) -> arbitrary::Result<u64> {
    if u.ratio(8, 9)? {
        Ok(DATA + 0x100 * u.int_in_range(0..=0x7ff)?)
    } else {
        u.arbitrary()
    }
}

impl<'a> Arbitrary<'a> for Op {
    /// Weighted like a driver that mostly behaves: well-formed requests and
    /// descriptors more often than raw register pokes.
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Op> {
        let dev = |u: &mut Unstructured| u.int_in_range(0..=DEVICES - 1);
        let q = |u: &mut Unstructured| u.int_in_range(0..=1);
        Ok(match u.int_in_range(0u8..=44)? {
            0..=1 => Op::Setup { dev: dev(u)? },
            2..=4 => {
                let value = if u.arbitrary()? { u.arbitrary()? } else { u.int_in_range(0..=3)? };
                Op::Reg { dev: dev(u)?, offset: register(u)?, value }
            }
            5 => Op::OddWrite { dev: dev(u)?, offset: u.int_in_range(0..=0x1ff)?, len: u.int_in_range(1..=8)? },
            6 => Op::Read { dev: dev(u)?, offset: u.int_in_range(0..=0x13f)?, len: u.int_in_range(1..=8)? },
            7..=14 => {
                let len = match u.int_in_range(0..=4)? {
                    0 => 16,
                    1 => 512,
                    2 => 1,
                    3 => u.int_in_range(0..=70_000)?,
                    _ => u.arbitrary()?,
                };
                Op::Desc {
                    dev: dev(u)?,
                    q: q(u)?,
                    i: u.int_in_range(0..=SIZE - 1)?,
                    addr: data_addr(u)?,
                    len,
                    flags: u.int_in_range(0..=7)?,
                    next: u.int_in_range(0..=SIZE + 3)?,
                }
            }
            15..=19 => Op::Offer { dev: dev(u)?, q: q(u)?, head: u.int_in_range(0..=SIZE + 1)? },
            20 => Op::AvailIdx { dev: dev(u)?, q: q(u)?, idx: u.arbitrary()? },
            21..=23 => {
                let kind = *u.choose(&[0, 1, 4, 8, u32::MAX])?;
                let kind = if kind == u32::MAX { u.arbitrary()? } else { kind };
                let sector = if u.arbitrary()? { u.int_in_range(0..=39)? } else { u.arbitrary()? };
                Op::BlkHeader { at: data_addr(u)?, kind, sector }
            }
            24 => {
                let at = data_addr(u)?;
                let n = u.int_in_range(0..=63)?;
                Op::Bytes { at, bytes: u.bytes(n)?.to_vec() }
            }
            25..=30 => Op::BlkRequest {
                disk: u.int_in_range(0..=2 * NODES - 1)?,
                slot: u.int_in_range(0..=4)?,
                kind: *u.choose(&[0, 1, 4, 8, 2, 11])?,
                sector: u.int_in_range(0..=69)?,
                sectors: u.int_in_range(0..=3)?,
            },
            31..=34 => Op::NetTx {
                node: u.int_in_range(0..=NODES - 1)?,
                slot: u.int_in_range(0..=7)?,
                len: u.int_in_range(0..=1599)?,
                broadcast: u.arbitrary()?,
            },
            35..=38 => Op::NetRx { node: u.int_in_range(0..=NODES - 1)?, slot: u.int_in_range(0..=7)? },
            39..=40 => Op::RngRequest { slot: u.int_in_range(0..=SIZE - 1)?, len: u.int_in_range(0..=4999)? },
            _ => Op::Tick { ns: u.int_in_range(0..=2_000_000)? },
        })
    }
}

/// The operations `bytes` describe (at most [`MAX_OPS`]).
pub fn ops(bytes: &[u8]) -> Vec<Op> {
    let mut u = Unstructured::new(bytes);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        match Op::arbitrary(&mut u) {
            Ok(op) => ops.push(op),
            Err(_) => break,
        }
    }
    ops
}

/// The devices, their RAM and the virtual clock.
pub struct Bench<'a> {
    setup: &'a Setup,
    virtio: Virtio,
    ram: &'a GuestRam,
    now: Vtime,
}

impl Bench<'_> {
    /// A bench on the setup's RAM number `ram` (0 or 1), which is zero.
    pub fn new(setup: &Setup, ram: usize) -> Bench<'_> {
        let spec = VirtioSpec {
            nodes: u16::from(NODES),
            disk_bytes: DISK_BYTES,
            image_bytes: BASE_BYTES,
            image_disks: u16::from(NODES),
            rng: true,
        };
        let (plan, bases) = (&setup.plan, &setup.bases);
        let mut virtio = Virtio::new(&spec, plan, SEED).expect("the bench's devices");
        let images = [Some(bases[1].clone()), Some(bases[2].clone())];
        virtio.begin_run(plan, Some(bases[0].clone()), &images, SEED, Vtime(0)).expect("the bench's disks");
        Bench { setup, virtio, ram: &setup.rams[ram], now: Vtime(0) }
    }

    /// Does `op` and checks the invariants that must hold after anything a
    /// driver does.
    pub fn apply(&mut self, op: &Op) {
        let (v, ram) = (&mut self.virtio, self.ram);
        // Writes to RAM may fail for wild addresses; so would the guest's.
        match *op {
            Op::Setup { dev } => {
                let queues = match v.devices[usize::from(dev)].kind {
                    Kind::Net(_) => 2,
                    _ => 1,
                };
                let rings: Vec<Ring> = (0..queues).map(|q| ring(dev, q)).collect();
                driver_ok(&mut v.devices[usize::from(dev)].mmio, &rings);
            }
            Op::Reg { dev, offset, value } => {
                v.mmio_write(register_addr(dev, offset), &value.to_le_bytes(), ram, self.now)
            }
            Op::OddWrite { dev, offset, len } => {
                v.mmio_write(register_addr(dev, offset), &vec![0xa5; len], ram, self.now)
            }
            Op::Read { dev, offset, len } => v.mmio_read(register_addr(dev, offset), &mut vec![0; len]),
            Op::Desc { dev, q, i, addr, len, flags, next } => ring(dev, q).desc(ram, i, addr, len, flags, next),
            Op::Offer { dev, q, head } => ring(dev, q).offer(ram, head),
            Op::AvailIdx { dev, q, idx } => ring(dev, q).set_avail_idx(ram, idx),
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
                let at = DATA + u64::from(disk) * 0x1_0000 + u64::from(slot) * 0x2000;
                let data = Some((512 * sectors.max(1), kind == 0));
                ring(dev, 0).blk_request(ram, 3 * slot, at, (kind, sector), data);
                v.mmio_write(register_addr(dev, 0x50), &0u32.to_le_bytes(), ram, self.now);
            }
            Op::NetTx { node, slot, len, broadcast } => {
                let at = DATA + 0x4_0000 + u64::from(node) * 0x1_0000 + u64::from(slot) * 0x800;
                let mut frame = vec![0u8; 12 + 14 + len as usize % 1500];
                let dst = if broadcast { [0xff; 6] } else { [0x52, 0x54, 0, 0, 0, 2 - node] };
                frame[12..18].copy_from_slice(&dst);
                frame[18..24].copy_from_slice(&[0x52, 0x54, 0, 0, 0, 1 + node]);
                frame[24..26].copy_from_slice(&[0x08, 0x00]);
                ram.write(at, &frame).expect("frames are laid out in RAM");
                let r = ring(node, 1);
                r.desc(ram, slot, at, frame.len() as u32, 0, 0);
                r.offer(ram, slot);
                v.mmio_write(register_addr(node, 0x50), &1u32.to_le_bytes(), ram, self.now);
            }
            Op::NetRx { node, slot } => {
                let at = DATA + 0x6_0000 + u64::from(node) * 0x1_0000 + u64::from(slot) * 0x800;
                let r = ring(node, 0);
                r.desc(ram, slot, at, 0x800, F_WRITE, 0);
                r.offer(ram, slot);
                v.mmio_write(register_addr(node, 0x50), &0u32.to_le_bytes(), ram, self.now);
            }
            Op::RngRequest { slot, len } => {
                let r = ring(RNG, 0);
                r.desc(ram, slot, DATA + 0x7_4000 + u64::from(slot) * 0x800, len, F_WRITE, 0);
                r.offer(ram, slot);
                v.mmio_write(register_addr(RNG, 0x50), &0u32.to_le_bytes(), ram, self.now);
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
                    d.mmio.status & super::mmio::STATUS_NEEDS_RESET,
                    0,
                    "{} is broken ({reason}) without NEEDS_RESET",
                    d.name
                );
            }
        }
    }

    /// What a snapshot and restore do to the devices: a serde round trip,
    /// then the disks' bases attached again.
    fn round_trip(&mut self) {
        let json = serde_json::to_string(&self.virtio).expect("device state serializes");
        self.virtio = serde_json::from_str(&json).expect("device state deserializes");
        assert_eq!(serde_json::to_string(&self.virtio).expect("device state serializes"), json);
        for d in &mut self.virtio.devices {
            let Kind::Blk(b) = &mut d.kind else { continue };
            let Some(base) = &mut b.disk.base else { continue };
            let kept = self.setup.bases.iter().find(|k| k.path == base.path).expect("a base the bench attached");
            assert!(
                base.bytes.is_empty() && base.sha256 == kept.sha256,
                "a snapshot keeps a base's hash, not its bytes"
            );
            base.bytes = kept.bytes.clone();
        }
    }

    fn state(&self) -> String {
        serde_json::to_string(&self.virtio).expect("device state serializes")
    }

    /// The pages written (by the devices or the driver) since the last call.
    fn written_pages(&self) -> BTreeSet<usize> {
        let words = self.ram.take_vmm_written();
        (0..words.len() * 64).filter(|&p| words[p / 64] & (1 << (p % 64)) != 0).collect()
    }
}

/// Runs `ops` twice: straight, and with a round trip of the device state
/// after `cut` of them. Both must end in the same device state and RAM.
pub fn check(setup: &Setup, ops: &[Op], cut: usize) {
    let mut a = Bench::new(setup, 0);
    for op in ops {
        a.apply(op);
    }
    let mut b = Bench::new(setup, 1);
    let cut = cut.min(ops.len());
    for op in &ops[..cut] {
        b.apply(op);
    }
    b.round_trip();
    for op in &ops[cut..] {
        b.apply(op);
    }
    assert!(a.state() == b.state(), "a round trip after {cut} operations changed the devices' state");
    // Pages neither wrote are zero in both: compare the others (reading a
    // page of RAM that was never touched would cost a page fault).
    let written: BTreeSet<usize> = a.written_pages().union(&b.written_pages()).copied().collect();
    for &p in &written {
        assert!(a.ram.page(p) == b.ram.page(p), "a round trip after {cut} operations changed guest page {p}");
    }
    let zero = [0; crate::memory::PAGE_SIZE];
    for &p in &written {
        a.ram.restore_page(p, &zero);
        b.ram.restore_page(p, &zero);
    }
}

/// The fuzz target's input: byte 0 says where the round trip falls (as a
/// fraction of the operations), the rest are the operations.
pub fn check_bytes(setup: &Setup, data: &[u8]) {
    let [cut, rest @ ..] = data else { return };
    let ops = ops(rest);
    check(setup, &ops, usize::from(*cut) * ops.len() / 255);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn a_hostile_driver_never_panics_and_state_stays_plain_data(
            bytes in prop::collection::vec(any::<u8>(), 1..2048),
        ) {
            let setup = Setup::new();
            check_bytes(&setup, &bytes);
            // What the next check relies on: the pages it wrote are zero
            // again, so RAM is as new.
            for ram in &setup.rams {
                prop_assert!(ram.as_slice().iter().all(|&b| b == 0), "a check left RAM written");
            }
        }
    }

    #[test]
    fn bytes_decode_to_every_kind_of_operation() {
        // A byte ramp reaches every weight bucket: the decoder can say
        // everything the fuzzer needs it to.
        let ramp: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
        let mut seen = std::collections::HashSet::new();
        for start in 0..45u8 {
            for op in ops(&[&[start][..], &ramp].concat()) {
                seen.insert(std::mem::discriminant(&op));
            }
        }
        assert_eq!(seen.len(), 14, "operation kinds decoded");
        assert!(ops(&ramp).len() <= MAX_OPS);
        assert!(ops(&[]).is_empty());
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// The `virtio` fuzz target's seeds and regressions, as the harness
    /// runs them; the seeds do real work (a seed that decoded to nothing
    /// would fuzz nothing).
    #[test]
    fn fuzz_corpus_and_regressions_pass_the_hostile_driver_checks() {
        let inputs = fuzz_inputs("virtio");
        assert!(!inputs.is_empty());
        let setup = Setup::new();
        for (f, data) in inputs {
            assert!(data.len() < 2 || !ops(&data[1..]).is_empty(), "{}", f.display());
            check_bytes(&setup, &data);
        }
    }

    /// The `well-behaved` seed drives every device through its normal
    /// work, and through the plan's partition and crashes, without breaking
    /// any: the fuzzer starts from the paths a real driver takes.
    #[test]
    fn the_well_behaved_seed_does_every_devices_work() {
        let data = fuzz_inputs("virtio").into_iter().find(|(f, _)| f.ends_with("well-behaved")).expect("the seed").1;
        let setup = Setup::new();
        let mut bench = Bench::new(&setup, 0);
        for op in ops(&data[1..]) {
            bench.apply(&op);
        }
        let reports = bench.virtio.device_reports();
        let count = |name: &str, counter: &str| {
            let r = reports.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no device {name}"));
            assert_eq!(r.broken, None, "{name} broke");
            r.counters[counter]
        };
        for node in 0..NODES {
            assert!(count(&format!("net{node}"), "tx_frames") > 0 && count(&format!("net{node}"), "rx_frames") > 0);
            let blk = format!("blk{node}");
            assert!(count(&blk, "reads") > 0 && count(&blk, "writes") > 0 && count(&blk, "flushes") > 0, "{blk}");
            let img = format!("img{node}");
            assert!(count(&img, "reads") > 0 && count(&img, "errors") > 0 && count(&img, "writes") == 0, "{img}");
        }
        assert_eq!(count("rng", "bytes"), 256);
        assert_eq!(count("switch", "frames_delivered"), 2);
        // The devices' writes are in the record the RAM comparison trusts:
        // used rings, received frames, entropy.
        let written = bench.written_pages();
        for addr in [ring(0, 0).used_ring(), DATA + 0x6_0000, ring(RNG, 0).used_ring(), DATA + 0x7_4000] {
            assert!(written.contains(&((addr as usize) / crate::memory::PAGE_SIZE)), "{addr:#x} written");
        }
        let crashed: u64 =
            ["crash_lost_sectors", "crash_kept_sectors", "refused_node_down"].iter().map(|c| count("blk1", c)).sum();
        assert!(crashed > 0, "node 1's crash landed");
    }
}
