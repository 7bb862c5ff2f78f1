//! Capturing and restoring everything about a machine except RAM contents
//! (which the `snapshot` crate stores and copies): vCPU state, devices,
//! clock, entropy streams, the trace hash.

use kvm_bindings::kvm_cpuid_entry2;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::trace::TraceState;
use crate::vcpu_state::VcpuState;

use super::{HostSettings, Machine, MachineSpec, MachineState};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MachineSnapshot {
    pub spec: MachineSpec,
    /// The CPUID the guest was given: a restore refuses a host whose differs.
    pub cpuid: Vec<kvm_cpuid_entry2>,
    pub vcpu: VcpuState,
    pub state: MachineState,
    pub trace: TraceState,
}

/// What a snapshot holds besides RAM, for a memory budget: the
/// allocations it may share with other snapshots of its line (chunks of
/// the console and message logs, disk sectors), each as (an identity
/// every holder shares, its bytes), and the bytes it holds alone.
pub struct Holdings {
    pub shared: Vec<(usize, usize)>,
    pub own: usize,
}

/// Device registers and queues, which are not counted one by one: a
/// generous estimate. Frames held (clogs, delays, receive backlogs: up to
/// thousands of frames of up to 64 KiB) are counted as they are.
const DEVICE_STATE_BYTES: usize = 16 << 10;

impl MachineSnapshot {
    pub fn holdings(&self) -> Holdings {
        let state = &self.state;
        let (console, lines) = state.devices.serial.logs();
        let mut shared: Vec<(usize, usize)> =
            state.messages.shared().chain(console.shared()).chain(lines.shared()).collect();
        let mut own = std::mem::size_of::<MachineSnapshot>()
            + DEVICE_STATE_BYTES
            + state.devices.virtio.held_bytes()
            + state.messages.unshared_weight()
            + console.unshared_weight()
            + lines.unshared_weight()
            + self.vcpu.xsave.as_ref().map_or(0, |x| x.len() * 4)
            + self.vcpu.msrs.len() * std::mem::size_of::<kvm_bindings::kvm_msr_entry>();
        for disk in state.devices.virtio.disks() {
            shared.extend(disk.shared_sectors());
            own += disk.map_bytes();
        }
        Holdings { shared, own }
    }
}

impl Machine {
    /// Completes an exit's pending port or MMIO input without running the
    /// guest (`KVM_RUN` with `immediate_exit`): until then part of that
    /// instruction's effect lives only inside KVM, invisible to a capture,
    /// and would be applied on top of a restored state.
    pub(super) fn complete_pending_io(&mut self) -> Result<()> {
        self.vcpu.set_immediate_exit(true);
        let r = self.vcpu.fd_mut().run().map(|_| ());
        self.vcpu.set_immediate_exit(false);
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.errno() == libc::EINTR => Ok(()),
            Err(e) => Err(Error::Kvm { op: "KVM_RUN (completing I/O)", err: e }),
        }
    }

    /// Everything but RAM, at the current point (between exits).
    pub fn capture(&mut self) -> Result<MachineSnapshot> {
        self.complete_pending_io()?;
        Ok(MachineSnapshot {
            spec: self.spec.clone(),
            cpuid: self.cpuid.clone(),
            vcpu: VcpuState::capture(self.vcpu.fd(), &self.saveable_msrs, self.has_xsave())?,
            state: self.state.clone(),
            trace: self.trace.state().clone(),
        })
    }

    /// A new machine in `snap`'s state, with RAM all zero for the caller to
    /// fill (before running it).
    pub fn restore(snap: &MachineSnapshot, host: &HostSettings) -> Result<Machine> {
        let mut m = Machine::create(&snap.spec, host, snap.state.clone())?;
        if m.cpuid != snap.cpuid {
            let leaf = m
                .cpuid
                .iter()
                .zip(&snap.cpuid)
                .find(|(a, b)| a != b)
                .map_or("the number of leaves".to_owned(), |(a, _)| format!("leaf {:#x}.{}", a.function, a.index));
            return Err(Error::Config(format!(
                "the snapshot was taken on a host with a different CPU (CPUID differs at {leaf}); \
                 it can only be restored where its CPUID can be given to the guest"
            )));
        }
        m.reset_to(snap)?;
        Ok(m)
    }

    /// Puts the vCPU, devices, clock, streams and trace back to `snap`
    /// (RAM is the caller's: see `take_dirty_pages`).
    pub fn reset_to(&mut self, snap: &MachineSnapshot) -> Result<()> {
        if snap.spec != self.spec {
            return Err(Error::Config(format!(
                "snapshot of a different machine ({:?}) than this one ({:?})",
                snap.spec, self.spec
            )));
        }
        self.complete_pending_io()?;
        snap.vcpu.restore(self.vcpu.fd())?;
        self.state = snap.state.clone();
        // A snapshot read from a file has disk base images by path only.
        self.state.devices.virtio.attach_bases().map_err(Error::Config)?;
        self.vcpu.request_interrupt_window(self.state.irq_window_requested);
        self.trace.set_state(snap.trace.clone());
        self.messages_taken = self.state.messages.len();
        Ok(())
    }

    fn has_xsave(&self) -> bool {
        self._kvm.check_extension(kvm_ioctls::Cap::Xsave)
    }
}
