//! The complete architectural state of the vCPU, as plain data: what a
//! snapshot saves and a restore puts back.
//!
//! Saved: general registers, segment and control registers, x87/SSE state
//! and the XSAVE area, XCR0, every MSR KVM lets userspace read and write,
//! debug registers, pending events (exceptions, interrupts, NMI, interrupt
//! shadow) and the MP state. Restore order follows KVM's dependencies:
//! special registers before MSRs (EFER), XCRs before the XSAVE area,
//! pending events last.

use kvm_bindings::{
    kvm_debugregs, kvm_fpu, kvm_mp_state, kvm_msr_entry, kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs, kvm_xsave,
    Msrs,
};
use kvm_ioctls::{Kvm, VcpuFd};
use serde::{Deserialize, Serialize};

use crate::error::{Error, KvmResultExt, Result};

/// `kvm_fpu`, which kvm-bindings does not make serializable.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FpuState {
    pub fpr: Vec<[u8; 16]>,
    pub fcw: u16,
    pub fsw: u16,
    pub ftwx: u8,
    pub last_opcode: u16,
    pub last_ip: u64,
    pub last_dp: u64,
    pub xmm: Vec<[u8; 16]>,
    pub mxcsr: u32,
}

impl From<&kvm_fpu> for FpuState {
    fn from(f: &kvm_fpu) -> Self {
        FpuState {
            fpr: f.fpr.to_vec(),
            fcw: f.fcw,
            fsw: f.fsw,
            ftwx: f.ftwx,
            last_opcode: f.last_opcode,
            last_ip: f.last_ip,
            last_dp: f.last_dp,
            xmm: f.xmm.to_vec(),
            mxcsr: f.mxcsr,
        }
    }
}

impl FpuState {
    fn to_kvm(&self) -> Result<kvm_fpu> {
        let mut f = kvm_fpu {
            fcw: self.fcw,
            fsw: self.fsw,
            ftwx: self.ftwx,
            last_opcode: self.last_opcode,
            last_ip: self.last_ip,
            last_dp: self.last_dp,
            mxcsr: self.mxcsr,
            ..Default::default()
        };
        if self.fpr.len() != f.fpr.len() || self.xmm.len() != f.xmm.len() {
            return Err(Error::Config("FPU state has the wrong number of registers".into()));
        }
        f.fpr.copy_from_slice(&self.fpr);
        f.xmm.copy_from_slice(&self.xmm);
        Ok(f)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VcpuState {
    pub regs: kvm_regs,
    pub sregs: kvm_sregs,
    pub fpu: FpuState,
    /// The 4 KiB legacy XSAVE area, as words (None where KVM lacks XSAVE).
    pub xsave: Option<Vec<u32>>,
    pub xcrs: Option<kvm_xcrs>,
    pub msrs: Vec<kvm_msr_entry>,
    pub debug_regs: kvm_debugregs,
    pub events: kvm_vcpu_events,
    pub mp_state: kvm_mp_state,
}

/// The MSRs of this host's KVM that can be both read and written back:
/// KVM's list of MSRs to save, each probed once.
pub fn saveable_msrs(kvm: &Kvm, vcpu: &VcpuFd) -> Result<Vec<u32>> {
    let list = kvm.get_msr_index_list().kvm("KVM_GET_MSR_INDEX_LIST")?;
    let mut ok = Vec::new();
    for &index in list.as_slice() {
        let entry = [kvm_msr_entry { index, ..Default::default() }];
        let mut msrs = Msrs::from_entries(&entry).map_err(|e| Error::Config(format!("MSR list: {e:?}")))?;
        if vcpu.get_msrs(&mut msrs).is_ok_and(|n| n == 1) && vcpu.set_msrs(&msrs).is_ok_and(|n| n == 1) {
            ok.push(index);
        }
    }
    Ok(ok)
}

impl VcpuState {
    /// Reads the whole state. Pending port or MMIO input must have been
    /// completed first (see `Machine::complete_pending_io`).
    pub fn capture(vcpu: &VcpuFd, msr_indices: &[u32], xsave: bool) -> Result<VcpuState> {
        let entries: Vec<kvm_msr_entry> =
            msr_indices.iter().map(|&index| kvm_msr_entry { index, ..Default::default() }).collect();
        let mut msrs = Msrs::from_entries(&entries).map_err(|e| Error::Config(format!("MSR list: {e:?}")))?;
        let n = vcpu.get_msrs(&mut msrs).kvm("KVM_GET_MSRS")?;
        if n != entries.len() {
            return Err(Error::Config(format!(
                "KVM read only {n} of {} MSRs (first refused: {:#x})",
                entries.len(),
                entries[n].index
            )));
        }
        Ok(VcpuState {
            regs: vcpu.get_regs().kvm("KVM_GET_REGS")?,
            sregs: vcpu.get_sregs().kvm("KVM_GET_SREGS")?,
            fpu: FpuState::from(&vcpu.get_fpu().kvm("KVM_GET_FPU")?),
            xsave: if xsave { Some(vcpu.get_xsave().kvm("KVM_GET_XSAVE")?.region.to_vec()) } else { None },
            xcrs: if xsave { Some(vcpu.get_xcrs().kvm("KVM_GET_XCRS")?) } else { None },
            msrs: msrs.as_slice().to_vec(),
            debug_regs: vcpu.get_debug_regs().kvm("KVM_GET_DEBUGREGS")?,
            events: vcpu.get_vcpu_events().kvm("KVM_GET_VCPU_EVENTS")?,
            mp_state: vcpu.get_mp_state().kvm("KVM_GET_MP_STATE")?,
        })
    }

    pub fn restore(&self, vcpu: &VcpuFd) -> Result<()> {
        vcpu.set_mp_state(self.mp_state).kvm("KVM_SET_MP_STATE")?;
        vcpu.set_regs(&self.regs).kvm("KVM_SET_REGS")?;
        vcpu.set_sregs(&self.sregs).kvm("KVM_SET_SREGS")?;
        if let Some(xcrs) = &self.xcrs {
            vcpu.set_xcrs(xcrs).kvm("KVM_SET_XCRS")?;
        }
        vcpu.set_fpu(&self.fpu.to_kvm()?).kvm("KVM_SET_FPU")?;
        if let Some(region) = &self.xsave {
            let mut x = kvm_xsave::default();
            if region.len() != x.region.len() {
                return Err(Error::Config("XSAVE area has the wrong size".into()));
            }
            x.region.copy_from_slice(region);
            // SAFETY: `x` is a complete legacy-size kvm_xsave; KVM reads
            // exactly that much for KVM_SET_XSAVE without XSAVE2.
            unsafe { vcpu.set_xsave(&x) }.kvm("KVM_SET_XSAVE")?;
        }
        let msrs = Msrs::from_entries(&self.msrs).map_err(|e| Error::Config(format!("MSR list: {e:?}")))?;
        let n = vcpu.set_msrs(&msrs).kvm("KVM_SET_MSRS")?;
        if n != self.msrs.len() {
            return Err(Error::Config(format!(
                "KVM accepted only {n} of {} MSRs (first refused: {:#x})",
                self.msrs.len(),
                self.msrs[n].index
            )));
        }
        vcpu.set_debug_regs(&self.debug_regs).kvm("KVM_SET_DEBUGREGS")?;
        vcpu.set_vcpu_events(&self.events).kvm("KVM_SET_VCPU_EVENTS")?;
        Ok(())
    }
}
