//! Virtio devices over MMIO: one NIC and one disk per node, optionally
//! read-only image disks (a container image's root file system each,
//! shared by the containers of that image), and an entropy source, all
//! served synchronously on the vCPU thread and completed on the virtual
//! clock.
//!
//! Layout: device `i` has the 4 KiB register window at
//! `MMIO_BASE + i * 0x1000` and IRQ line `IRQS[i % IRQS.len()]` (lines are
//! shared once there are more devices than lines; Linux's virtio-mmio
//! driver requests its interrupt shared). The guest learns the layout from
//! the kernel command line ([`Virtio::cmdline`]). The order is fixed: every
//! node's NIC, then every node's disk, then every image disk, then
//! the entropy source.
//!
//! Whatever the guest puts in a queue is untrusted: a malformed ring or
//! descriptor chain marks that one device broken (see [`mmio::Mmio::fail`])
//! and is reported in the run's summary; the machine carries on.

pub mod blk;
pub mod mmio;
pub mod net;
pub mod rng;

#[cfg(any(test, feature = "fuzzing"))]
pub mod driver;
#[cfg(any(test, feature = "fuzzing"))]
pub mod hostile;

use std::collections::BTreeMap;

use hvsim_abi::hc::event;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use virtio_queue::{Queue, QueueOwnedT, QueueT};

use crate::clock::Vtime;
use crate::disk::{Base, Disk, MAX_DISK_BYTES};
use crate::faults::clock::ClockFaults;
use crate::faults::network::{Cut, LinkEffect};
use crate::faults::node::{power_schedule, NodeAction, PowerChange};
use crate::faults::schedule::{Effect, Episode, Schedule, Step};
use crate::faults::{DiskFaults, FaultPlan, FaultReport, Landed};
use crate::memory::GuestRam;
use crate::switch::Switch;
use blk::{Blk, Role};
use mmio::{Mmio, Request, WINDOW};
use net::Net;
use rng::Rng;

/// Where the first device's registers are: right above the most RAM hvsim
/// allows, so that RAM is one range from address 0 whatever its size (a
/// hole below 4 GiB would have capped a machine with devices at 3.25 GiB,
/// twelve containers). Needs 37 physical address bits; every x86-64 CPU
/// that runs KVM has at least 39.
pub const MMIO_BASE: u64 = crate::memory::MAX_RAM as u64;
/// IRQ lines for virtio devices: those no legacy device of this machine
/// uses (0 PIT, 2 cascade, 4 COM1, 8 hvsim alarm) and not the 8259's
/// spurious lines 7 and 15.
pub const IRQS: [u8; 8] = [5, 6, 9, 10, 11, 12, 14, 3];
/// Nodes a run can have (each takes two or three devices' windows, and
/// their announcements on the kernel command line: docs/machine.md).
pub const MAX_NODES: u16 = 128;

/// The virtio hardware of a machine: part of what the guest sees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct VirtioSpec {
    /// Nodes of the simulated system: each gets a NIC on the switch and a disk.
    pub nodes: u16,
    /// Each node's disk size in bytes (a multiple of 512).
    pub disk_bytes: u64,
    /// Each image disk's size in bytes (a multiple of 512). What they hold
    /// comes with each run (`RunInputs::images`), so their size is fixed
    /// here: the guest reads them when it boots.
    #[serde(default)]
    pub image_bytes: u64,
    /// Read-only image disks (a container image's root file system each):
    /// one per image, whatever the containers that run it, so that they
    /// share its bytes and the guest's page cache of them.
    #[serde(default)]
    pub image_disks: u16,
    /// An entropy source (virtio-rng) fed from the run's seed.
    pub rng: bool,
}

impl VirtioSpec {
    pub fn devices(&self) -> usize {
        2 * usize::from(self.nodes) + usize::from(self.image_disks) + usize::from(self.rng)
    }

    pub fn check(&self) -> Result<(), String> {
        if self.nodes > MAX_NODES {
            return Err(format!("{} nodes requested; hvsim supports at most {MAX_NODES}", self.nodes));
        }
        if self.image_disks > self.nodes.max(1) {
            return Err(format!("{} image disks for {} nodes", self.image_disks, self.nodes));
        }
        if self.image_disks > 0 && self.image_bytes == 0 {
            return Err("image disks of 0 bytes".to_owned());
        }
        if self.nodes > 0 && (self.disk_bytes == 0 || !self.disk_bytes.is_multiple_of(crate::disk::SECTOR as u64)) {
            return Err(format!("disk size {} is not a positive multiple of 512 bytes", self.disk_bytes));
        }
        if !self.image_bytes.is_multiple_of(crate::disk::SECTOR as u64) {
            return Err(format!("image disk size {} is not a multiple of 512 bytes", self.image_bytes));
        }
        for (what, bytes) in [("disk", self.disk_bytes), ("image disk", self.image_bytes)] {
            if bytes > MAX_DISK_BYTES {
                return Err(format!("{what} size {bytes} bytes is over hvsim's limit of {} GiB", MAX_DISK_BYTES >> 30));
            }
        }
        Ok(())
    }
}

// A block device's request state is the largest; there are a handful of
// devices per machine, so their size does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Kind {
    Net(Net),
    Blk(Blk),
    Rng(Rng),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Device {
    /// "net0", "blk1", "rng".
    pub name: String,
    pub mmio: Mmio,
    pub irq: u8,
    pub kind: Kind,
}

impl Device {
    /// The guest broke this device: say why, once, and stop serving it.
    /// Work in flight (disk completions, received frames) is dropped: a
    /// broken device no longer touches guest memory, and nothing of it stays
    /// due (a halted guest would otherwise wait on it forever).
    fn fail(&mut self, reason: String) {
        if self.mmio.broken.is_none() {
            tracing::warn!(device = %self.name, "virtio device broken by the guest: {reason}");
        }
        self.mmio.fail(reason);
        self.kind.reset();
    }
}

/// One device's line in the run's summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceReport {
    pub name: String,
    /// Why the device stopped working, if the guest broke it.
    pub broken: Option<String>,
    pub counters: BTreeMap<String, u64>,
}

/// All virtio devices, the switch between the NICs, the plan's node power
/// schedule, and the timeline's schedule of drawn faults.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Virtio {
    pub devices: Vec<Device>,
    pub switch: Switch,
    pub plan: FaultPlan,
    /// The plan's power changes still to come, earliest first.
    power: Vec<PowerChange>,
    /// Drawn faults.
    #[serde(default = "no_schedule")]
    pub schedule: Schedule,
    /// Node crashes, written down or drawn (`node.crash`).
    #[serde(default)]
    landed: Landed,
    /// Machine events for the guest (`hc::event`), not yet taken.
    events: Vec<u32>,
    /// Drawn pause and kill faults in force: (episode, node, action).
    #[serde(default)]
    held: Vec<(u64, u16, NodeAction)>,
    /// Drawn clock faults in force.
    #[serde(default)]
    clock: ClockFaults,
}

fn no_schedule() -> Schedule {
    Schedule::new(Vec::new(), false, false, 0, 0)
}

fn schedule_of(plan: &FaultPlan, nodes: u16, seed: u64) -> Schedule {
    Schedule::new(plan.draw.rules.clone(), plan.draw.before_setup, plan.draw.swarm, nodes, seed)
}

impl Virtio {
    /// Bytes of the frames the switch and the NICs' receive backlogs hold,
    /// as a snapshot copies them.
    pub fn held_bytes(&self) -> usize {
        let backlogs: usize = self
            .devices
            .iter()
            .map(|d| match &d.kind {
                Kind::Net(n) => n.held_bytes(),
                _ => 0,
            })
            .sum();
        self.switch.held_bytes() + backlogs
    }

    /// The devices of `spec`, with the faults of `plan`, seeded from `seed`.
    /// Every disk of the machine, nodes' and images'.
    pub fn disks(&self) -> impl Iterator<Item = &crate::disk::Disk> + '_ {
        self.devices.iter().filter_map(|d| match &d.kind {
            Kind::Blk(b) => Some(&b.disk),
            _ => None,
        })
    }

    pub fn new(spec: &VirtioSpec, plan: &FaultPlan, seed: u64) -> Result<Virtio, String> {
        spec.check()?;
        let mut kinds = Vec::new();
        for node in 0..spec.nodes {
            kinds.push((format!("net{node}"), Kind::Net(Net::new(node))));
        }
        for node in 0..spec.nodes {
            let disk = Disk::new(node, spec.disk_bytes, None, plan.disk.clone(), seed);
            kinds.push((format!("blk{node}"), Kind::Blk(Blk::new(disk, Role::Node))));
        }
        for image in 0..spec.image_disks {
            let disk = Disk::new(image, spec.image_bytes, None, DiskFaults::default(), seed);
            kinds.push((format!("img{image}"), Kind::Blk(Blk::new(disk, Role::Image))));
        }
        if spec.rng {
            kinds.push(("rng".to_owned(), Kind::Rng(Rng::new(seed))));
        }
        let devices = kinds
            .into_iter()
            .enumerate()
            .map(|(i, (name, kind))| Device { name, mmio: kind.transport(), irq: IRQS[i % IRQS.len()], kind })
            .collect();
        Ok(Virtio {
            devices,
            switch: Switch::new(spec.nodes, plan.network.clone(), seed),
            plan: plan.clone(),
            power: power_schedule(&plan.crashes),
            schedule: schedule_of(plan, spec.nodes, seed),
            landed: Landed::default(),
            events: Vec::new(),
            held: Vec::new(),
            clock: ClockFaults::default(),
        })
    }

    /// Kernel command line parameters announcing the devices, in order.
    pub fn cmdline(&self) -> String {
        let mut p: Vec<String> = self
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| format!("virtio_mmio.device=4K@{:#x}:{}", MMIO_BASE + i as u64 * WINDOW, d.irq))
            .collect();
        if self.switch.nodes() > 0 {
            p.push(format!("hvsim_nodes={}", self.switch.nodes()));
        }
        p.join(" ")
    }

    /// Re-reads base images after a snapshot was deserialized (their bytes
    /// are not part of the snapshot, only their path and hash).
    /// Gives a booted machine its run's faults, the base image under every
    /// node's disk and each image disk's image (see `Machine::begin_run`): the
    /// guest must not have read the disks yet, or must drop what it cached
    /// of them.
    pub fn begin_run(
        &mut self,
        plan: &FaultPlan,
        base: Option<Base>,
        images: &[Option<Base>],
        seed: u64,
        now: Vtime,
    ) -> Result<(), String> {
        let image_disks =
            self.devices.iter().filter(|d| matches!(&d.kind, Kind::Blk(b) if b.role == Role::Image)).count();
        if images.len() > image_disks {
            return Err(format!("{} images for a machine with {image_disks} image disks", images.len()));
        }
        for d in &mut self.devices {
            let Kind::Blk(b) = &mut d.kind else { continue };
            let base = match b.role {
                Role::Node => {
                    b.disk.set_faults(plan.disk.clone());
                    base.clone()
                }
                Role::Image => images.get(usize::from(b.disk.node)).cloned().flatten(),
            };
            if let Some(base) = &base {
                if base.bytes.len() as u64 > b.disk.capacity {
                    return Err(format!(
                        "{} ({} bytes) is larger than the disk {} ({} bytes)",
                        base.path,
                        base.bytes.len(),
                        d.name,
                        b.disk.capacity
                    ));
                }
            }
            b.disk.base = base;
        }
        self.switch.set_faults(plan.network.clone());
        self.power = power_schedule(&plan.crashes);
        self.schedule = schedule_of(plan, self.switch.nodes(), seed);
        if self.schedule.before_setup {
            self.schedule.arm(now.0);
        }
        self.plan = plan.clone();
        Ok(())
    }

    pub fn attach_bases(&mut self) -> Result<(), String> {
        for d in &mut self.devices {
            if let Kind::Blk(b) = &mut d.kind {
                b.disk.attach_base()?;
            }
        }
        Ok(())
    }

    /// A branch at `now`: every stream re-seeded, drawn faults drawn anew.
    pub fn reseed(&mut self, seed: u64, now: Vtime) {
        self.schedule.reseed(seed, now.0);
        self.switch.reseed(seed);
        for d in &mut self.devices {
            match &mut d.kind {
                Kind::Net(_) => {}
                Kind::Blk(b) => b.disk.reseed(seed),
                Kind::Rng(r) => r.reseed(seed),
            }
        }
    }

    pub fn claims(&self, addr: u64) -> bool {
        addr.checked_sub(MMIO_BASE).is_some_and(|off| off / WINDOW < self.devices.len() as u64)
    }

    pub fn mmio_read(&mut self, addr: u64, data: &mut [u8]) {
        let Some(i) = self.index_of(addr) else { return };
        let (d, offset) = (&mut self.devices[i], addr % WINDOW);
        data.fill(0);
        if offset >= 0x100 {
            let config = d.kind.config();
            let start = (offset - 0x100) as usize;
            for (i, b) in data.iter_mut().enumerate() {
                *b = config.get(start + i).copied().unwrap_or(0);
            }
        } else if data.len() == 4 && offset % 4 == 0 {
            data.copy_from_slice(&d.mmio.read(offset).to_le_bytes());
        } else {
            d.fail(format!("{}-byte read of register {offset:#x} (registers are 32-bit)", data.len()));
        }
    }

    pub fn mmio_write(&mut self, addr: u64, data: &[u8], ram: &GuestRam, now: Vtime) {
        let Some(i) = self.index_of(addr) else { return };
        let offset = addr % WINDOW;
        let d = &mut self.devices[i];
        if offset >= 0x100 {
            // Every hvsim device's configuration space is read-only.
            return;
        }
        let value = match <[u8; 4]>::try_from(data) {
            Ok(bytes) if offset.is_multiple_of(4) => u32::from_le_bytes(bytes),
            _ => {
                d.fail(format!("{}-byte write to register {offset:#x} (registers are 32-bit)", data.len()));
                return;
            }
        };
        match d.mmio.write(offset, value) {
            Request::Notify(q) => self.notify(i, q, ram, now),
            Request::Reset => d.kind.reset(),
            Request::None => {}
        }
    }

    /// The device whose register window holds `addr`.
    fn index_of(&self, addr: u64) -> Option<usize> {
        self.claims(addr).then(|| ((addr - MMIO_BASE) / WINDOW) as usize)
    }

    /// The driver made buffers available in queue `q` of device `i`.
    fn notify(&mut self, i: usize, q: u16, ram: &GuestRam, now: Vtime) {
        let Device { mmio, kind, .. } = &mut self.devices[i];
        if !mmio.driver_ok() {
            return;
        }
        let r = match kind {
            Kind::Net(n) => n.notify(q, mmio, ram, &mut self.switch, now),
            Kind::Blk(b) => b.notify(q, mmio, ram, now),
            Kind::Rng(r) => r.notify(q, mmio, ram),
        };
        if let Err(reason) = r {
            self.devices[i].fail(reason);
        }
    }

    /// The earliest time something is due: a frame, a disk completion, a
    /// power change.
    pub fn deadline(&self) -> Option<Vtime> {
        let completions = self.devices.iter().filter_map(|d| match &d.kind {
            Kind::Blk(b) => b.deadline(),
            _ => None,
        });
        let power = self.power.first().map(|p| Vtime(p.at_ns));
        let drawn = self.schedule.deadline().map(Vtime);
        let strobe = self.clock.deadline().map(Vtime);
        completions.chain(self.switch.deadline()).chain(power).chain(drawn).chain(strobe).min()
    }

    /// Machine events raised since the last call (see `hc::event`).
    pub fn take_events(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.events)
    }

    /// Does everything due at `now`: power changes, drawn faults starting
    /// and ending, frame deliveries, disk completions.
    pub fn fire(&mut self, now: Vtime, ram: &GuestRam) {
        while self.power.first().is_some_and(|p| p.at_ns <= now.0) {
            let p = self.power.remove(0);
            // A paused machine skips the plan's crashes (its restarts are
            // no-ops then: the pause brought the node back).
            if p.on {
                self.set_power(p.node, true, false);
            } else if !self.schedule.paused() {
                self.crash(p.node, p.torn);
            }
        }
        let steps = self.schedule.due(now.0, self.switch.down());
        self.apply(steps);
        let flipped = self.clock.fire(now.0);
        self.clocks_changed(Some(&flipped));
        for (node, frame) in self.switch.due(now) {
            let d = &mut self.devices[usize::from(node)];
            let Kind::Net(n) = &mut d.kind else { unreachable!("device {node} ({}) is node {node}'s NIC", d.name) };
            if let Err(reason) = n.deliver(frame, &mut d.mmio, ram) {
                d.fail(reason);
            }
        }
        for d in &mut self.devices {
            if let Kind::Blk(b) = &mut d.kind {
                if d.mmio.broken.is_none() {
                    if let Err(reason) = b.complete(now, &mut d.mmio, ram) {
                        d.fail(reason);
                    }
                }
            }
        }
    }

    fn disk_index(&self, node: u16) -> usize {
        usize::from(self.switch.nodes()) + usize::from(node)
    }

    fn node_disk(&mut self, node: u16) -> &mut Disk {
        let i = self.disk_index(node);
        match self.devices.get_mut(i).map(|d| &mut d.kind) {
            Some(Kind::Blk(b)) => &mut b.disk,
            _ => unreachable!("device {i} is node {node}'s disk"),
        }
    }

    /// Cuts or restores a node's power, if it is not so already: its disk
    /// loses (or tears) its unflushed writes, its NIC goes dead or comes
    /// back, and the guest hears of it. Whether it changed anything.
    fn set_power(&mut self, node: u16, on: bool, torn: bool) -> bool {
        if self.switch.down().contains(&node) != on {
            return false;
        }
        let i = self.disk_index(node);
        let Some(Kind::Blk(b)) = self.devices.get_mut(i).map(|d| &mut d.kind) else {
            unreachable!("device {i} is node {node}'s disk")
        };
        b.set_power(on, torn);
        self.switch.set_power(node, on);
        let kind = if on { event::NODE_UP } else { event::NODE_DOWN };
        self.events.push(event::word(kind, node));
        true
    }

    /// A crash, written down or drawn.
    fn crash(&mut self, node: u16, torn: bool) {
        if self.set_power(node, false, torn) {
            self.landed.hit("node.crash");
        }
    }

    /// The guest hears that the realtime offsets of `nodes` changed, or
    /// (`None`) the machine's clock rate.
    fn clocks_changed(&mut self, nodes: Option<&[u16]>) {
        match nodes {
            Some(nodes) => self.events.extend(nodes.iter().map(|&n| event::word(event::CLOCK, n))),
            None => self.events.push(event::word(event::CLOCK, event::CLOCK_MACHINE)),
        }
    }

    /// What a clock should read (`faults/clock.rs`); asking is applying the
    /// clock faults in force there.
    pub fn clock_answer(&mut self, want: crate::control::ClockWant) -> i64 {
        use crate::control::ClockWant;
        let (node, value) = match want {
            ClockWant::Offset(node) => (Some(node), self.clock.offset_ns(node)),
            ClockWant::Rate => (None, self.clock.ppm()),
        };
        for kind in self.clock.applied(node) {
            self.landed.hit(kind);
        }
        value
    }

    /// Pauses, kills or stops node `node`'s processes for episode `id` (of
    /// fault kind `landing`): the guest hears of it unless another fault
    /// already holds the node so.
    fn hold(&mut self, id: u64, node: u16, action: NodeAction, landing: &str) {
        if !self.held.iter().any(|&(_, n, a)| n == node && a == action) {
            self.events.push(event::word(action.events().0, node));
        }
        self.held.push((id, node, action));
        self.landed.hit(landing);
    }

    /// Ends episode `id`'s holds; the guest hears of each node no fault
    /// holds so any more. Returns how many nodes it held.
    fn release(&mut self, id: u64) -> u64 {
        let (ended, kept): (Vec<_>, Vec<_>) = self.held.drain(..).partition(|&(e, ..)| e == id);
        self.held = kept;
        for &(_, node, action) in &ended {
            if !self.held.iter().any(|&(_, n, a)| n == node && a == action) {
                self.events.push(event::word(action.events().1, node));
            }
        }
        ended.len() as u64
    }

    /// Carries out what the drawn-fault schedule says.
    fn apply(&mut self, steps: Vec<Step>) {
        for step in steps {
            match step {
                Step::Start(e) => match e.effect {
                    Effect::Links(l) => self.switch.start(e.id, l, e.end_ns),
                    Effect::Disks { nodes, effect, probability } => {
                        for n in nodes {
                            self.node_disk(n).start(e.id, effect, probability);
                        }
                    }
                    Effect::Crash { nodes, torn } => {
                        for n in nodes {
                            self.crash(n, torn);
                        }
                    }
                    Effect::Wipe { nodes } => {
                        for n in nodes {
                            if self.set_power(n, false, false) {
                                self.node_disk(n).wipe();
                                self.landed.hit(e.kind.landing());
                            }
                        }
                    }
                    Effect::Clock { nodes, change } => {
                        self.clock.start(e.id, nodes, change, e.start_ns);
                        self.clocks_changed(self.clock.touches(e.id).as_deref());
                    }
                    Effect::Custom { nodes, command } => {
                        for n in nodes {
                            self.events.push(event::word(event::CUSTOM_BASE + u32::from(command), n));
                        }
                    }
                    Effect::Node { nodes, action } => {
                        for n in nodes {
                            self.hold(e.id, n, action, e.kind.landing());
                        }
                    }
                    Effect::Hang { nodes } => {
                        let rest: Vec<u16> = (0..self.switch.nodes()).filter(|n| !nodes.contains(n)).collect();
                        if !rest.is_empty() {
                            let cut = Cut::Groups(vec![nodes.clone(), rest]);
                            self.switch.start(e.id, LinkEffect::Clog(cut), e.end_ns);
                        }
                        for n in nodes {
                            self.hold(e.id, n, NodeAction::Pause, e.kind.landing());
                        }
                    }
                },
                Step::End(e) => {
                    let landed = match &e.effect {
                        Effect::Links(_) => self.switch.end(e.id),
                        Effect::Disks { nodes, .. } => nodes.iter().map(|&n| self.node_disk(n).end(e.id)).sum(),
                        Effect::Custom { nodes, .. } => nodes.len() as u64,
                        Effect::Crash { nodes, .. } | Effect::Wipe { nodes } => {
                            for &n in nodes {
                                self.set_power(n, true, false);
                            }
                            nodes.len() as u64
                        }
                        Effect::Clock { .. } => {
                            let touches = self.clock.touches(e.id);
                            let landed = self.clock.end(e.id);
                            self.clocks_changed(touches.as_deref());
                            landed
                        }
                        Effect::Node { .. } => self.release(e.id),
                        Effect::Hang { .. } => {
                            let frames = self.switch.episode_landed(e.id).map_or(0, |_| self.switch.end(e.id));
                            frames + self.release(e.id)
                        }
                    };
                    self.schedule.close(e, landed);
                }
                Step::Pause => {
                    self.set_paused(true);
                    // Every node comes back, drawn crash or written down.
                    let down: Vec<u16> = self.switch.down().iter().copied().collect();
                    for n in down {
                        self.set_power(n, true, false);
                    }
                }
                Step::Resume => self.set_paused(false),
            }
        }
    }

    fn set_paused(&mut self, paused: bool) {
        self.switch.set_paused(paused);
        for node in 0..self.switch.nodes() {
            self.node_disk(node).set_paused(paused);
        }
    }

    /// Acts on a control message the guest sent at `now` (`control.rs`).
    pub fn control(&mut self, control: &crate::control::Control, now: Vtime) {
        use crate::control::Control;
        let steps = match control {
            Control::SetupComplete => {
                self.schedule.arm(now.0);
                Vec::new()
            }
            Control::PauseFaults(d) => self.schedule.pause(now.0, d.map(|d| now.0.saturating_add(d))),
            Control::ResumeFaults => self.schedule.resume(now.0),
            Control::CustomDone => {
                self.landed.hit("node.custom");
                return;
            }
            Control::Draw
            | Control::Buggify { .. }
            | Control::Clock(_)
            | Control::ComposerRun(_)
            | Control::ComposerBudget
            | Control::ComposerTemplate(_)
            | Control::ComposerCommands(_) => return,
        };
        self.apply(steps);
    }

    /// Every drawn fault that struck in this timeline, with what each
    /// touched (so far, for those in force).
    pub fn struck(&self) -> Vec<Episode> {
        let mut all = self.schedule.struck();
        for e in all.iter_mut().filter(|e| e.ended_ns.is_none()) {
            e.landed = match &e.effect {
                Effect::Links(_) => self.switch.episode_landed(e.id).unwrap_or(0),
                Effect::Disks { nodes, .. } => nodes
                    .iter()
                    .map(|&n| match &self.devices[self.disk_index(n)].kind {
                        Kind::Blk(b) => b.disk.episode_landed(e.id),
                        _ => 0,
                    })
                    .sum(),
                Effect::Crash { nodes, .. }
                | Effect::Node { nodes, .. }
                | Effect::Wipe { nodes }
                | Effect::Custom { nodes, .. } => nodes.len() as u64,
                Effect::Hang { nodes } => self.switch.episode_landed(e.id).unwrap_or(0) + nodes.len() as u64,
                Effect::Clock { .. } => self.clock.episode_landed(e.id),
            };
        }
        all
    }

    /// The level of each IRQ line the devices use (a line is high while any
    /// device on it has an unacknowledged interrupt).
    pub fn irq_levels(&self) -> impl Iterator<Item = (u8, bool)> + '_ {
        IRQS.iter()
            .take(self.devices.len())
            .map(move |&line| (line, self.devices.iter().any(|d| d.irq == line && d.mmio.interrupt_status != 0)))
    }

    /// How many packets or requests each fault kind touched.
    pub fn landed(&self) -> Landed {
        let mut all = self.switch.landed.clone();
        all.merge(&self.landed);
        for d in &self.devices {
            if let Kind::Blk(b) = &d.kind {
                all.merge(&b.disk.landed);
            }
        }
        all
    }

    pub fn fault_report(&self) -> Vec<FaultReport> {
        crate::faults::report(&self.plan, &self.landed(), &self.struck())
    }

    /// Every device's counters, then the switch's.
    pub fn device_reports(&self) -> Vec<DeviceReport> {
        let devices = self.devices.iter().map(|d| DeviceReport {
            name: d.name.clone(),
            broken: d.mmio.broken.clone(),
            counters: d.kind.counters(),
        });
        let switch = (self.switch.nodes() > 0).then(|| DeviceReport {
            name: "switch".into(),
            broken: None,
            counters: self.switch.counters(),
        });
        devices.chain(switch).collect()
    }
}

impl Kind {
    fn transport(&self) -> Mmio {
        match self {
            Kind::Net(_) => Mmio::new(net::DEVICE_ID, net::FEATURES, 2),
            Kind::Blk(b) => Mmio::new(blk::DEVICE_ID, b.features(), 1),
            Kind::Rng(_) => Mmio::new(rng::DEVICE_ID, 0, 1),
        }
    }

    fn config(&self) -> Vec<u8> {
        match self {
            Kind::Net(n) => n.config(),
            Kind::Blk(b) => b.config(),
            Kind::Rng(_) => Vec::new(),
        }
    }

    fn reset(&mut self) {
        match self {
            Kind::Net(n) => n.reset(),
            Kind::Blk(b) => b.reset(),
            Kind::Rng(_) => {}
        }
    }

    fn counters(&self) -> BTreeMap<String, u64> {
        match self {
            Kind::Net(n) => n.counters(),
            Kind::Blk(b) => b.counters(),
            Kind::Rng(r) => r.counters(),
        }
    }
}

/// A device's counters for its summary line.
pub fn counters(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
}

/// A descriptor chain, walked and checked: its buffers, readable ones first.
#[derive(Debug, Default)]
pub struct Chain {
    pub head: u16,
    pub readable: Vec<(u64, u32)>,
    pub writable: Vec<(u64, u32)>,
}

impl Chain {
    pub fn readable_len(&self) -> u64 {
        self.readable.iter().map(|&(_, l)| u64::from(l)).sum()
    }

    pub fn writable_len(&self) -> u64 {
        self.writable.iter().map(|&(_, l)| u64::from(l)).sum()
    }

    /// All readable bytes, if there are at most `max`.
    pub fn read_all(&self, ram: &GuestRam, max: u64) -> Result<Vec<u8>, String> {
        let len = self.readable_len();
        if len > max {
            return Err(format!("chain at head {} offers {len} bytes to read; the limit is {max}", self.head));
        }
        let mut out = vec![0u8; len as usize];
        let mut at = 0;
        for &(addr, l) in &self.readable {
            let end = at + l as usize;
            ram.read(addr, &mut out[at..end]).map_err(|e| e.to_string())?;
            at = end;
        }
        Ok(out)
    }

    /// Scatters `data` into the writable buffers from byte `offset` on.
    /// Returns how many bytes fit.
    pub fn write_at(&self, ram: &GuestRam, offset: u64, data: &[u8]) -> Result<usize, String> {
        let mut skip = offset;
        let mut done = 0;
        for &(addr, l) in &self.writable {
            let l = u64::from(l);
            if skip >= l {
                skip -= l;
                continue;
            }
            let n = ((l - skip) as usize).min(data.len() - done);
            ram.write(addr + skip, &data[done..done + n]).map_err(|e| e.to_string())?;
            done += n;
            skip = 0;
            if done == data.len() {
                break;
            }
        }
        Ok(done)
    }
}

/// Opens the queue the driver configured, or says why it is unusable.
pub fn open_queue(mmio: &Mmio, q: u16, ram: &GuestRam) -> Result<Queue, String> {
    let regs = mmio.queues.get(usize::from(q)).ok_or_else(|| format!("notify of queue {q}, which does not exist"))?;
    if !regs.ready {
        return Err(format!("notify of queue {q} before it was made ready"));
    }
    regs.queue(ram)
}

/// Pops the next available chain of `q`, walked and checked.
pub fn pop(q: &mut Queue, ram: &GuestRam) -> Result<Option<Chain>, String> {
    let mut iter = q.iter(ram.mem()).map_err(|e| format!("available ring unusable: {e}"))?;
    let Some(dc) = iter.next() else { return Ok(None) };
    let mut chain = Chain { head: dc.head_index(), ..Chain::default() };
    let mut cut_short = false;
    let mut count = 0;
    for d in dc {
        count += 1;
        if !ram.contains(d.addr().0, u64::from(d.len())) {
            return Err(format!(
                "descriptor {:#x}+{} of the chain at head {} lies outside guest RAM",
                d.addr().0,
                d.len(),
                chain.head
            ));
        }
        if d.is_write_only() {
            chain.writable.push((d.addr().0, d.len()));
        } else if chain.writable.is_empty() {
            chain.readable.push((d.addr().0, d.len()));
        } else {
            return Err(format!("chain at head {} has a readable buffer after a writable one", chain.head));
        }
        cut_short = d.has_next();
    }
    if count == 0 {
        return Err(format!("chain at head {} has no readable descriptor (bad index or indirect table)", chain.head));
    }
    if cut_short {
        return Err(format!(
            "chain at head {} is cut short: it loops, points past its table, or exceeds 4 GiB",
            chain.head
        ));
    }
    Ok(Some(chain))
}

/// Returns a chain to the driver; raises the used-buffer interrupt unless
/// the driver asked not to be notified.
pub fn add_used(q: &mut Queue, mmio: &mut Mmio, ram: &GuestRam, head: u16, len: u32) -> Result<(), String> {
    q.add_used(ram.mem(), head, len).map_err(|e| format!("cannot return chain {head}: {e}"))?;
    if q.needs_notification(ram.mem()).map_err(|e| format!("reading the ring flags: {e}"))? {
        mmio.interrupt_status |= mmio::INT_USED;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::driver::*;
    use super::*;

    fn machine(nodes: u16) -> (Virtio, GuestRam) {
        let spec = VirtioSpec { nodes, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: true };
        (Virtio::new(&spec, &FaultPlan::default(), 1).unwrap(), GuestRam::new(4 << 20).unwrap())
    }

    fn reg(v: &mut Virtio, dev: u64, off: u64) -> u32 {
        let mut b = [0u8; 4];
        v.mmio_read(MMIO_BASE + dev * WINDOW + off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn layout_and_command_line() {
        let (mut v, _) = machine(2);
        assert_eq!(
            v.devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["net0", "net1", "blk0", "blk1", "rng"]
        );
        assert_eq!(
            v.cmdline(),
            "virtio_mmio.device=4K@0x1000000000:5 virtio_mmio.device=4K@0x1000001000:6 \
             virtio_mmio.device=4K@0x1000002000:9 virtio_mmio.device=4K@0x1000003000:10 \
             virtio_mmio.device=4K@0x1000004000:11 hvsim_nodes=2"
        );
        assert_eq!([reg(&mut v, 0, 8), reg(&mut v, 2, 8), reg(&mut v, 4, 8)], [1, 2, 4]);
        assert!(v.claims(MMIO_BASE + 4 * WINDOW) && !v.claims(MMIO_BASE + 5 * WINDOW) && !v.claims(0));
    }

    /// The most devices hvsim makes fit hvsim's kernel's command line with
    /// room to spare for the boot's own parameters (about 200 bytes) and a
    /// user's.
    #[test]
    fn the_most_nodes_announce_their_devices_within_hvsim_kernels_command_line() {
        let spec = VirtioSpec {
            nodes: MAX_NODES,
            disk_bytes: 1 << 20,
            image_bytes: 1 << 20,
            image_disks: MAX_NODES,
            rng: true,
        };
        let v = Virtio::new(&spec, &FaultPlan::default(), 1).unwrap();
        assert_eq!(v.devices.len(), 3 * usize::from(MAX_NODES) + 1);
        let line = v.cmdline();
        assert!(line.len() + 4096 < crate::boot::linux::HVSIM_CMDLINE_SIZE, "{} bytes", line.len());
        assert!(
            line.len() > crate::boot::linux::LINUX_CMDLINE_SIZE,
            "upstream's limit no longer binds: say so in docs/machine.md"
        );
        let last = v.devices.len() - 1;
        assert!(line.contains(&format!("4K@{:#x}:", MMIO_BASE + last as u64 * WINDOW)));
        assert!(VirtioSpec { nodes: MAX_NODES + 1, ..spec }.check().is_err());
    }

    #[test]
    fn malformed_chains_break_only_their_device() {
        let (mut v, ram) = machine(1);
        let notify = |v: &mut Virtio| v.mmio_write(MMIO_BASE + 2 * WINDOW + 0x050, &0u32.to_le_bytes(), &ram, Vtime(0));
        let r = Ring::new(2, 0);
        for (setup, needle) in [
            (&[(0u16, 0x7fff_f000u64, 0x2000u32, F_WRITE, 0u16)][..], "outside guest RAM"),
            (&[(0, 0x20_000, 64, F_WRITE | F_NEXT, 1), (1, 0x20_100, 64, F_WRITE | F_NEXT, 0)], "cut short"),
            (&[(0, 0x20_000, 64, F_WRITE | F_NEXT, 40)], "cut short"),
            (&[(0, 0x20_000, 64, F_WRITE | F_NEXT, 1), (1, 0x20_100, 64, 0, 0)], "readable buffer after"),
        ] {
            driver_ok(&mut v.devices[2].mmio, &[r]);
            for &(i, addr, len, flags, next) in setup {
                r.desc(&ram, i, addr, len, flags, next);
            }
            r.offer(&ram, 0);
            notify(&mut v);
            let broken = v.devices[2].mmio.broken.clone().unwrap_or_default();
            assert!(broken.contains(needle), "{needle}: {broken}");
            assert_ne!(reg(&mut v, 2, 0x070) & mmio::STATUS_NEEDS_RESET, 0);
            assert!(v.devices[..2].iter().all(|d| d.mmio.broken.is_none()), "only the rng broke");
        }
        // An available index that runs ahead of the ring by more than its size.
        driver_ok(&mut v.devices[2].mmio, &[r]);
        r.set_avail_idx(&ram, r.avail_idx(&ram).wrapping_add(200));
        notify(&mut v);
        assert!(v.devices[2].mmio.broken.as_deref().unwrap().contains("available ring"));
    }

    #[test]
    fn breaking_a_disk_with_a_request_in_flight_leaves_nothing_due() {
        // Regression: the completion stayed due forever, and a halted guest
        // waiting for it hung the VMM.
        let spec = VirtioSpec { nodes: 1, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: false };
        let plan = FaultPlan::parse("[disk]\nlatency = \"1ms\"", 1, 1).unwrap();
        let (mut v, ram) = (Virtio::new(&spec, &plan, 1).unwrap(), GuestRam::new(4 << 20).unwrap());
        let (r, disk) = (Ring::new(1, 0), MMIO_BASE + WINDOW);
        driver_ok(&mut v.devices[1].mmio, &[Ring::new(1, 0)]);
        r.blk_request(&ram, 0, 0x20_000, (0, 0), Some((512, true))); // read sector 0
        v.mmio_write(disk + 0x050, &0u32.to_le_bytes(), &ram, Vtime(0));
        assert_eq!(v.deadline(), Some(Vtime(1_000_000)));
        v.mmio_write(disk + 0x070, &[0xff], &ram, Vtime(10));
        assert!(v.devices[1].mmio.broken.is_some());
        assert_eq!(v.deadline(), None);
    }

    #[test]
    fn a_crash_cuts_power_until_the_restart_and_tells_the_guest() {
        let spec = VirtioSpec { nodes: 1, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: false };
        let plan = FaultPlan::parse("[[crash]]\nnode = 0\nat = \"1ms\"\nrestart = \"1ms\"", 1, 1).unwrap();
        let (mut v, ram) = (Virtio::new(&spec, &plan, 1).unwrap(), GuestRam::new(4 << 20).unwrap());
        let read = |v: &mut Virtio, now: u64| {
            let (_, status_at) = Ring::new(1, 0).blk_request(&ram, 0, 0x20_000, (0, 0), Some((512, true)));
            v.mmio_write(MMIO_BASE + WINDOW + 0x050, &0u32.to_le_bytes(), &ram, Vtime(now));
            let mut status = [9];
            ram.read(status_at, &mut status).unwrap();
            status[0]
        };
        driver_ok(&mut v.devices[1].mmio, &[Ring::new(1, 0)]);
        assert_eq!(read(&mut v, 0), 0, "powered: the read succeeds");
        assert_eq!(v.deadline(), Some(Vtime(0)), "its completion is due at once");
        v.fire(Vtime(0), &ram);
        assert_eq!(v.deadline(), Some(Vtime(1_000_000)), "then the crash");
        v.fire(Vtime(1_000_000), &ram);
        assert_eq!(v.take_events(), [event::word(event::NODE_DOWN, 0)]);
        assert_eq!(read(&mut v, 1_500_000), 1, "no power: I/O error");
        v.fire(Vtime(2_000_000), &ram);
        assert_eq!(v.take_events(), [event::word(event::NODE_UP, 0)]);
        assert_eq!(read(&mut v, 2_000_000), 0, "power back");
        assert_eq!(v.device_reports()[1].counters["refused_node_down"], 1);
        assert_eq!(v.deadline(), Some(Vtime(2_000_000)));
        v.fire(Vtime(2_000_000), &ram);
        assert_eq!((v.deadline(), v.take_events()), (None, vec![]));
    }

    #[test]
    fn drawn_pauses_and_kills_tell_the_guest_once_per_node_and_leave_power_alone() {
        let spec = VirtioSpec { nodes: 2, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: false };
        let plan = "[draw]\nbefore_setup = true\n[[draw.fault]]\nkind = \"pause\"\nevery = \"1ms\"\nduration = \"1500us\"\ntargets = [[1]]\n\
                    [[draw.fault]]\nkind = \"kill\"\nevery = \"10ms\"\nduration = \"1ms\"\ntargets = [[0]]\n";
        let plan = FaultPlan::parse(plan, 1, 2).unwrap();
        let (mut v, ram) = (Virtio::new(&spec, &plan, 1).unwrap(), GuestRam::new(4 << 20).unwrap());
        v.control(&crate::control::Control::SetupComplete, Vtime(0));
        let mut events = Vec::new();
        for ms in 1..=12 {
            v.fire(Vtime(ms * 1_000_000), &ram);
            events.extend(v.take_events().into_iter().map(|e| (ms, e)));
        }
        let w = event::word;
        // Pauses of node 1 overlap (one every 1 ms, each 1.5 ms): it is
        // paused once and stays so; node 0 is killed at 10 ms, started at 11.
        assert_eq!(events, [(1, w(event::NODE_PAUSE, 1)), (10, w(event::NODE_KILL, 0)), (11, w(event::NODE_START, 0))]);
        assert!(v.switch.down().is_empty(), "no node lost power");
        let landed = v.landed();
        assert!(landed.0["node.pause"] >= 10 && landed.0["node.kill"] == 1, "{landed:?}");
        // Pausing every fault continues the paused node.
        v.control(&crate::control::Control::PauseFaults(None), Vtime(12_500_000));
        assert_eq!(v.take_events(), [w(event::NODE_RESUME, 1)]);
    }

    #[test]
    fn a_hung_node_is_paused_and_its_frames_are_held_until_the_end() {
        let spec = VirtioSpec { nodes: 3, disk_bytes: 1 << 20, image_bytes: 0, image_disks: 0, rng: false };
        let plan = "[draw]\nbefore_setup = true\n[[draw.fault]]\nkind = \"hang\"\nevery = \"1ms\"\nduration = \"500us\"\ntargets = [[2]]\n";
        let plan = FaultPlan::parse(plan, 1, 3).unwrap();
        let (mut v, ram) = (Virtio::new(&spec, &plan, 1).unwrap(), GuestRam::new(4 << 20).unwrap());
        v.control(&crate::control::Control::SetupComplete, Vtime(0));
        v.fire(Vtime(1_000_000), &ram);
        assert_eq!(v.take_events(), [event::word(event::NODE_PAUSE, 2)]);
        let hung = &v.schedule.active()[0];
        assert!(matches!(&hung.effect, Effect::Hang { nodes } if nodes == &[2]));
        // Node 2 is clogged off from 0 and 1, not 0 from 1.
        let (cut, ends) = (v.switch.clogs(), hung.end_ns);
        assert!(cut.iter().any(|c| c.blocks(2, 0) && c.blocks(1, 2) && !c.blocks(0, 1)), "{cut:?}");
        v.fire(Vtime(ends), &ram);
        assert_eq!(v.take_events(), [event::word(event::NODE_RESUME, 2)]);
        assert!(v.switch.clogs().is_empty() && v.landed().0["node.hang"] == 1);
    }

    #[test]
    fn odd_register_accesses_break_the_device() {
        let (mut v, ram) = machine(0);
        v.mmio_write(MMIO_BASE + 0x070, &[1, 0], &ram, Vtime(0));
        assert!(v.devices[0].mmio.broken.as_deref().unwrap().contains("32-bit"));
        assert_ne!(v.irq_levels().next(), Some((5, false)), "the config interrupt is raised");
    }
}
