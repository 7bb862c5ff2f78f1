//! What a run brings to a booted machine, and re-keying the machine's
//! entropy.
//!
//! A Linux guest boots the same way for every run of a machine shape (under
//! the fixed boot seed), up to the point where its init sends `READY`. There
//! the run begins: [`Machine::begin_run`] hands the guest its work (the
//! inbox), installs the fault plan and the disks' base image, and re-keys
//! every stream from the run's seed. Whether the booted machine was just
//! booted or restored from the boot cache makes no difference: both are the
//! same machine state, and `begin_run` does the same to both.

use hvsim_abi::hc;
use sha2::{Digest, Sha256};

use crate::clock::ExitKind;
use crate::disk::Base;
use crate::error::{Error, Result};
use crate::faults::FaultPlan;

use super::Machine;

/// The run's inputs.
#[derive(Clone, Debug, Default)]
pub struct RunInputs {
    /// The run's seed: every stream is re-keyed from it.
    pub seed: u64,
    /// The work for the guest to read with `INBOX` (`hvsim_abi::inbox`).
    pub inbox: Vec<u8>,
    /// The fault plan, resolved under `seed`.
    pub faults: FaultPlan,
    /// The read-only image under every node's disk.
    pub disk_base: Option<Base>,
    /// Each image disk's contents (`VirtioSpec::image_disks`), in order.
    pub images: Vec<Option<Base>>,
    /// Tell the guest when it reports setup complete
    /// (`hc::event::SETUP`: init then runs Test Composer templates).
    pub announce_setup: bool,
}

impl Machine {
    /// Starts the run on a machine stopped at `READY` (`run_until_ready`).
    /// Recorded in the trace, so two runs with different inputs differ there.
    pub fn begin_run(&mut self, inputs: RunInputs) -> Result<()> {
        // A machine just restored from the boot cache has completed the
        // READY exit's I/O; do the same here, so both are in one state.
        self.complete_pending_io()?;
        let fingerprint = run_fingerprint(&inputs);
        let now = self.state.clock.now();
        let devices = &mut self.state.devices;
        devices
            .virtio
            .begin_run(&inputs.faults, inputs.disk_base, &inputs.images, inputs.seed, now)
            .map_err(Error::Config)?;
        devices.hc.set_inbox(inputs.inbox);
        devices.hc.set_announce_setup(inputs.announce_setup);
        self.scratch.clear();
        self.scratch.extend_from_slice(&fingerprint);
        self.record(ExitKind::RunStart, 0, None)?;
        self.reseed(inputs.seed)
    }

    /// Re-keys every entropy stream from `seed` for what happens from now on:
    /// the VMM's, and (through a `RESEED` event) those the guest keeps in its
    /// own memory, if it handles them. Call between runs of the vCPU.
    pub fn reseed(&mut self, seed: u64) -> Result<()> {
        // Whether the guest can take the interrupt now is read from KVM's
        // view of the vCPU: complete the last exit so that view is of this
        // state, however the machine got here (an exit, a reset, a restore).
        self.complete_pending_io()?;
        self.state.reseed(seed);
        let devices = &mut self.state.devices;
        if devices.hc.guest_handles(hc::caps::RESEED) {
            devices.hc.push_event(hc::event::word(hc::event::RESEED, 0));
            devices.pic.pulse_irq(hvsim_abi::irq::EVENT);
        }
        // Injected now if the guest can take it: it re-keys before it runs
        // another instruction of its own. A halted guest gets it when the
        // run loop wakes it.
        let inject = if self.state.halted { None } else { self.inject_if_ready()? };
        self.scratch.clear();
        self.scratch.extend_from_slice(&seed.to_le_bytes());
        self.record(ExitKind::Reseed, 0, inject)
    }
}

impl Machine {
    /// `hvsim debug`: asks the guest's init to run `command` with
    /// `/bin/sh -c` on `node` (`hc::event::DEBUG`): the command in the
    /// inbox, the event raised. The run is no longer the timeline's from
    /// here. Call between runs of the vCPU.
    pub fn debug_command(&mut self, node: u16, command: &str) -> Result<()> {
        self.complete_pending_io()?;
        let devices = &mut self.state.devices;
        devices.hc.set_inbox(command.as_bytes().to_vec());
        devices.hc.push_event(hc::event::word(hc::event::DEBUG, node));
        devices.pic.pulse_irq(hvsim_abi::irq::EVENT);
        if !self.state.halted {
            self.inject_if_ready()?;
        }
        Ok(())
    }

    /// Whether the guest announced an SDK draw and has not read it yet: a
    /// point where [`Machine::choose_draw`] can decide its value.
    pub fn draw_pending(&self) -> bool {
        self.state.devices.hc.draw_pending()
    }

    /// The value the pending SDK draw will read, chosen or not (see
    /// `Hypercall::pending_draw_value`): what an explorer keeps to give the
    /// same draw again later.
    pub fn pending_draw_value(&self) -> Option<u64> {
        self.state.devices.hc.pending_draw_value()
    }

    /// Makes the pending SDK draw return `value`; recorded in the trace, so
    /// that a timeline with another choice differs there. Call between runs
    /// of the vCPU, after any [`Machine::reseed`].
    pub fn choose_draw(&mut self, value: u64) -> Result<()> {
        if !self.state.devices.hc.choose_draw(value) {
            return Err(Error::Config(format!("no SDK draw is pending to take the value {value}")));
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&value.to_le_bytes());
        self.record(ExitKind::Choose, 0, None)
    }
}

/// What the trace records of a run's inputs: what the guest will read (the
/// seed is recorded by the reseed that follows). The fault plan shows in the
/// trace through what it does to the guest, and only so: a plan that never
/// touches it leaves the run as it was.
fn run_fingerprint(inputs: &RunInputs) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update((inputs.inbox.len() as u64).to_le_bytes());
    h.update(&inputs.inbox);
    if let Some(b) = &inputs.disk_base {
        h.update(b.sha256.as_bytes());
    }
    for (node, image) in inputs.images.iter().enumerate() {
        if let Some(b) = image {
            h.update((node as u64).to_le_bytes());
            h.update(b.sha256.as_bytes());
        }
    }
    h.finalize().to_vec()
}
