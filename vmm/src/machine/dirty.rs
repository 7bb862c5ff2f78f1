//! Which guest pages changed since a point in time: KVM's dirty log for the
//! guest's own writes, and vm-memory's bitmap for what the VMM wrote (boot
//! loading, the interrupt-pending flag, later virtio). Used to reset a
//! machine to a snapshot by copying back only what changed.
//!
//! With `KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2`, reading the log does not re-arm
//! write protection for the whole slot; hvsim re-arms exactly the pages it
//! consumed (`KVM_CLEAR_DIRTY_LOG`), so cost follows the pages dirtied.

use kvm_bindings::{
    kvm_clear_dirty_log, kvm_enable_cap, kvm_userspace_memory_region, KVMIO, KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2,
    KVM_DIRTY_LOG_INITIALLY_SET, KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE, KVM_MEM_LOG_DIRTY_PAGES,
};
use kvm_ioctls::VmFd;

use vmm_sys_util::ioctl::ioctl_with_ref;
use vmm_sys_util::{errno, ioctl_iowr_nr};

use crate::error::{KvmResultExt, Result};
use crate::memory::{GuestRam, PAGE_SIZE};

use super::Machine;

ioctl_iowr_nr!(KVM_CLEAR_DIRTY_LOG, KVMIO, 0xc0, kvm_clear_dirty_log);

/// Asks for manual dirty-log protection; returns whether KVM agreed.
pub(super) fn enable_manual_protect(vm: &VmFd) -> bool {
    let cap = kvm_enable_cap {
        cap: KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2,
        args: [u64::from(KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE | KVM_DIRTY_LOG_INITIALLY_SET), 0, 0, 0],
        ..Default::default()
    };
    vm.enable_cap(&cap).is_ok()
}

/// (Re)registers guest RAM as KVM memory slot 0.
pub(super) fn register_ram(vm: &VmFd, ram: &GuestRam, log_dirty: bool) -> Result<()> {
    let region = kvm_userspace_memory_region {
        slot: 0,
        flags: if log_dirty { KVM_MEM_LOG_DIRTY_PAGES } else { 0 },
        guest_phys_addr: 0,
        memory_size: ram.size() as u64,
        userspace_addr: ram.host_base(),
    };
    // SAFETY: the region maps exactly `ram.size()` bytes owned by `ram`,
    // which the Machine keeps alive as long as the VM.
    unsafe { vm.set_user_memory_region(region) }.kvm("KVM_SET_USER_MEMORY_REGION")
}

impl Machine {
    /// Starts tracking dirty pages; the record starts empty.
    pub fn enable_dirty_log(&mut self) -> Result<()> {
        if !self.dirty_log {
            register_ram(&self.vm, &self.ram, true)?;
            self.dirty_log = true;
        }
        self.take_dirty_pages()?;
        Ok(())
    }

    /// Tells the machine that the VMM put guest pages back (a snapshot
    /// reset) behind KVM's back. Where KVM shadows the guest's page tables,
    /// it trusts its shadows of page-table pages it write-protected from the
    /// guest, and a page put back from a snapshot changed behind that
    /// protection: a stale shadow would map the snapshot's page tables to
    /// another run's pages (a Linux guest then crashes on every other reset).
    /// So there KVM's RAM slot is taken away and given back, which drops
    /// every shadow. The dirty record starts empty again.
    pub fn pages_restored(&mut self) -> Result<()> {
        if !self.host.shadow_paging {
            return Ok(());
        }
        let gone = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: 0,
            userspace_addr: self.ram.host_base(),
        };
        // SAFETY: a zero size deletes the slot; no vCPU runs meanwhile.
        unsafe { self.vm.set_user_memory_region(gone) }.kvm("KVM_SET_USER_MEMORY_REGION (delete)")?;
        register_ram(&self.vm, &self.ram, self.dirty_log)?;
        if self.dirty_log {
            // A new slot's log starts with every page set.
            self.take_dirty_pages()?;
        }
        Ok(())
    }

    /// Indices of the pages written, by the guest or by the VMM, since the
    /// last call (or since tracking started); clears the record.
    ///
    /// An exit's pending input is completed first: completing it can write
    /// guest memory (an emulated instruction's memory operand, a string
    /// input's buffer), and a write after the pages were taken would be in
    /// neither this record nor the snapshot or reset it is taken for.
    pub fn take_dirty_pages(&mut self) -> Result<Vec<usize>> {
        assert!(self.dirty_log, "take_dirty_pages without enable_dirty_log");
        self.complete_pending_io()?;
        let size = self.ram.size();
        let mut bitmap = self.vm.get_dirty_log(0, size).kvm("KVM_GET_DIRTY_LOG")?;
        // Re-arm protection for exactly these pages (a no-op error-wise where
        // KVM cleared them itself because manual protection is off).
        let clear = kvm_clear_dirty_log {
            slot: 0,
            num_pages: (size / PAGE_SIZE) as u32,
            first_page: 0,
            __bindgen_anon_1: kvm_bindings::kvm_clear_dirty_log__bindgen_ty_1 {
                dirty_bitmap: bitmap.as_mut_ptr().cast(),
            },
        };
        // SAFETY: the bitmap covers every page of slot 0 and outlives the call.
        let r = unsafe { ioctl_with_ref(&self.vm, KVM_CLEAR_DIRTY_LOG(), &clear) };
        if r != 0 {
            let e = errno::Error::last();
            // EINVAL: manual protection is not enabled; GET already cleared.
            if e.errno() != libc::EINVAL {
                return Err(e).kvm("KVM_CLEAR_DIRTY_LOG");
            }
        }
        let vmm_written = self.ram.take_vmm_written();
        let mut pages = Vec::new();
        for (i, (&kvm, &vmm)) in bitmap.iter().zip(vmm_written.iter()).enumerate() {
            let mut word = kvm | vmm;
            while word != 0 {
                let bit = word.trailing_zeros() as usize;
                pages.push(i * 64 + bit);
                word &= word - 1;
            }
        }
        Ok(pages)
    }
}
