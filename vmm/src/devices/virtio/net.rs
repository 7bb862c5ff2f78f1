//! virtio-net: a node's NIC, plugged into the simulated switch.
//!
//! Queue 0 receives, queue 1 transmits. No offloads are offered, so every
//! frame is a plain Ethernet frame behind the 12-byte `virtio_net_hdr_v1`.
//! Frames that arrive while the guest has no receive buffers wait in a
//! bounded backlog (a NIC's ring); beyond it they are dropped and counted.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::mmio::Mmio;
use super::{add_used, open_queue, pop};
use crate::clock::Vtime;
use crate::memory::GuestRam;
use crate::switch::{mac, Switch};

pub const DEVICE_ID: u32 = 1;
/// VIRTIO_NET_F_MAC: the device has a fixed MAC address.
pub const FEATURES: u64 = 1 << 5;
const RX: u16 = 0;
const TX: u16 = 1;
/// `struct virtio_net_hdr_v1`.
pub const HDR: usize = 12;
/// The largest frame accepted from the guest (no GSO is offered, so a
/// well-behaved driver sends at most an MTU's worth).
pub const MAX_FRAME: usize = 65_535;
/// Frames held for a guest that has no receive buffers posted.
const BACKLOG: usize = 256;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Stats {
    tx_frames: u64,
    rx_frames: u64,
    rx_dropped_backlog_full: u64,
    rx_dropped_link_down: u64,
    rx_dropped_buffer_too_small: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Net {
    pub node: u16,
    backlog: VecDeque<Vec<u8>>,
    stats: Stats,
}

impl Net {
    pub fn new(node: u16) -> Net {
        Net { node, backlog: VecDeque::new(), stats: Stats::default() }
    }

    /// Bytes of the frames waiting in its receive backlog.
    pub fn held_bytes(&self) -> usize {
        self.backlog.iter().map(|f| f.len() + std::mem::size_of::<Vec<u8>>()).sum()
    }

    /// Configuration space: the MAC address.
    pub fn config(&self) -> Vec<u8> {
        mac(self.node).to_vec()
    }

    pub fn reset(&mut self) {
        self.backlog.clear();
    }

    pub fn notify(
        &mut self,
        q: u16,
        mmio: &mut Mmio,
        ram: &GuestRam,
        switch: &mut Switch,
        now: Vtime,
    ) -> Result<(), String> {
        match q {
            RX => self.drain(mmio, ram),
            TX => {
                let mut queue = open_queue(mmio, TX, ram)?;
                let r = (|| {
                    while let Some(chain) = pop(&mut queue, ram)? {
                        let bytes = chain.read_all(ram, (HDR + MAX_FRAME) as u64)?;
                        if bytes.len() < HDR {
                            return Err(format!("transmitted chain at head {} is shorter than its header", chain.head));
                        }
                        switch.send(self.node, &bytes[HDR..], now);
                        self.stats.tx_frames += 1;
                        add_used(&mut queue, mmio, ram, chain.head, 0)?;
                    }
                    Ok(())
                })();
                mmio.queues[usize::from(TX)].update(&queue);
                r
            }
            _ => Err(format!("notify of queue {q}; a NIC has two")),
        }
    }

    /// A frame from the switch arrives.
    pub fn deliver(&mut self, frame: Vec<u8>, mmio: &mut Mmio, ram: &GuestRam) -> Result<(), String> {
        if !mmio.driver_ok() {
            self.stats.rx_dropped_link_down += 1;
            return Ok(());
        }
        if self.backlog.len() >= BACKLOG {
            self.stats.rx_dropped_backlog_full += 1;
            return Ok(());
        }
        self.backlog.push_back(frame);
        self.drain(mmio, ram)
    }

    /// Moves backlogged frames into the guest's receive buffers.
    fn drain(&mut self, mmio: &mut Mmio, ram: &GuestRam) -> Result<(), String> {
        if self.backlog.is_empty() {
            return Ok(());
        }
        let mut queue = open_queue(mmio, RX, ram)?;
        let r = (|| {
            while !self.backlog.is_empty() {
                let Some(chain) = pop(&mut queue, ram)? else { break };
                let frame = self.backlog.pop_front().expect("front exists");
                if chain.writable_len() < (HDR + frame.len()) as u64 {
                    // The buffer is returned empty; the frame is lost.
                    self.stats.rx_dropped_buffer_too_small += 1;
                    add_used(&mut queue, mmio, ram, chain.head, 0)?;
                    continue;
                }
                let mut hdr = [0u8; HDR];
                hdr[10] = 1; // num_buffers
                chain.write_at(ram, 0, &hdr)?;
                chain.write_at(ram, HDR as u64, &frame)?;
                self.stats.rx_frames += 1;
                add_used(&mut queue, mmio, ram, chain.head, (HDR + frame.len()) as u32)?;
            }
            Ok(())
        })();
        mmio.queues[usize::from(RX)].update(&queue);
        r
    }

    pub fn counters(&self) -> BTreeMap<String, u64> {
        let s = &self.stats;
        super::counters(&[
            ("tx_frames", s.tx_frames),
            ("rx_frames", s.rx_frames),
            ("rx_dropped_backlog_full", s.rx_dropped_backlog_full),
            ("rx_dropped_link_down", s.rx_dropped_link_down),
            ("rx_dropped_buffer_too_small", s.rx_dropped_buffer_too_small),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::super::driver::*;
    use super::super::{Kind, Virtio, VirtioSpec, MMIO_BASE};
    use super::*;
    use crate::devices::virtio::mmio::WINDOW;
    use crate::faults::FaultPlan;

    fn frame(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = mac(dst).to_vec();
        f.extend_from_slice(&mac(src));
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_frame_goes_from_one_node_to_the_other() {
        let spec = VirtioSpec { nodes: 2, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: false };
        let mut v = Virtio::new(&spec, &FaultPlan::default(), 1).unwrap();
        let ram = GuestRam::new(8 << 20).unwrap();
        for d in 0..2 {
            driver_ok(&mut v.devices[d].mmio, &[Ring::new(d as u64, 0), Ring::new(d as u64, 1)]);
        }
        let (tx0, rx1) = (Ring::new(0, TX), Ring::new(1, RX));
        // Node 1 posts a receive buffer.
        rx1.desc(&ram, 0, 0x30_000, 2048, F_WRITE, 0);
        rx1.offer(&ram, 0);
        v.mmio_write(MMIO_BASE + WINDOW + 0x050, &u32::from(RX).to_le_bytes(), &ram, Vtime(0));
        // Node 0 transmits header + frame in two descriptors.
        let f = frame(0, 1, b"hello over the switch");
        ram.write(0x40_000, &[0; HDR]).unwrap();
        ram.write(0x41_000, &f).unwrap();
        tx0.desc(&ram, 0, 0x40_000, HDR as u32, F_NEXT, 1);
        tx0.desc(&ram, 1, 0x41_000, f.len() as u32, 0, 0);
        tx0.offer(&ram, 0);
        v.mmio_write(MMIO_BASE + 0x050, &u32::from(TX).to_le_bytes(), &ram, Vtime(5));
        assert_eq!(tx0.used(&ram), [(0, 0)]);
        assert_eq!(v.devices[0].mmio.interrupt_status, 1);
        // The switch (no faults) delivers at once.
        assert_eq!(v.deadline(), Some(Vtime(5)));
        v.fire(Vtime(5), &ram);
        assert_eq!(rx1.used(&ram), [(0, (HDR + f.len()) as u32)]);
        let mut got = vec![0u8; HDR + f.len()];
        ram.read(0x30_000, &mut got).unwrap();
        assert_eq!(&got[HDR..], &f[..]);
        assert_eq!(got[10], 1, "num_buffers");
        assert_eq!(v.devices[1].mmio.interrupt_status, 1);
        let Kind::Net(n) = &v.devices[1].kind else { panic!("device 1 is a NIC") };
        assert_eq!(n.stats.rx_frames, 1);
        assert!(v.devices.iter().all(|d| d.mmio.broken.is_none()));
    }

    #[test]
    fn state_in_flight_survives_a_json_round_trip() {
        // Snapshot headers are JSON: tuple-keyed maps must serialize.
        let plan = FaultPlan::parse("[network]\nlatency = \"1ms\"\n[disk]\nlatency = \"1ms\"", 1, 2).unwrap();
        let spec = VirtioSpec { nodes: 2, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: true };
        let mut v = Virtio::new(&spec, &plan, 1).unwrap();
        v.switch.send(0, &frame(0, 1, b"in flight"), Vtime(0));
        let json = serde_json::to_string(&v).unwrap();
        let back: Virtio = serde_json::from_str(&json).unwrap();
        assert_eq!(back.deadline(), Some(Vtime(1_000_000)));
        assert_eq!(serde_json::to_string(&back).unwrap(), json);
    }

    #[test]
    fn frames_wait_for_buffers_then_overflow() {
        let ram = GuestRam::new(4 << 20).unwrap();
        let mut mmio = Mmio::new(DEVICE_ID, FEATURES, 2);
        let mut n = Net::new(0);
        n.deliver(frame(1, 0, b"x"), &mut mmio, &ram).unwrap();
        assert_eq!(n.stats.rx_dropped_link_down, 1, "no driver yet: the link is down");
        driver_ok(&mut mmio, &[Ring::new(0, 0), Ring::new(0, 1)]);
        for i in 0..(BACKLOG + 3) {
            n.deliver(frame(1, 0, &[i as u8]), &mut mmio, &ram).unwrap();
        }
        assert_eq!((n.backlog.len(), n.stats.rx_dropped_backlog_full), (BACKLOG, 3));
        let rx = Ring::new(0, RX);
        rx.desc(&ram, 0, 0x30_000, 2048, F_WRITE, 0);
        rx.offer(&ram, 0);
        let mut sw = Switch::new(2, Default::default(), 1);
        n.notify(RX, &mut mmio, &ram, &mut sw, Vtime(0)).unwrap();
        assert_eq!((n.backlog.len(), n.stats.rx_frames), (BACKLOG - 1, 1));
        let mut first = [0u8; 1];
        ram.read(0x30_000 + HDR as u64 + 14, &mut first).unwrap();
        assert_eq!(first, [0], "oldest frame first");
    }
}
