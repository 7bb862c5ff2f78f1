//! Guest RAM: one anonymous memfd mapped into the VMM and registered with KVM.
//!
//! A memfd (rather than anonymous memory) keeps the door open for mapping the
//! same RAM elsewhere (snapshots, a future multi-process explorer) and gives
//! the kernel a single object to account. The mapping carries vm-memory's
//! atomic dirty bitmap, so every write the VMM itself makes through
//! [`GuestRam::mem`] is tracked alongside KVM's dirty log of guest writes.

use std::fs::File;
use std::os::fd::FromRawFd;

use sha2::{Digest, Sha256};
use vm_memory::bitmap::AtomicBitmap;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

use crate::error::{Error, Result};

/// Guest pages are tracked (dirty logging, snapshots) at this granularity.
pub const PAGE_SIZE: usize = 4096;

pub type Mem = GuestMemoryMmap<AtomicBitmap>;

/// The most guest RAM hvsim gives a machine (and accepts in a snapshot).
pub const MAX_RAM: usize = 64 << 30;

/// Whether `size` bytes can be a machine's RAM: whole pages, 1 to [`MAX_RAM`].
pub fn check_size(size: usize) -> std::result::Result<(), String> {
    if size == 0 || !size.is_multiple_of(PAGE_SIZE) || size > MAX_RAM {
        return Err(format!(
            "guest RAM size {size} bytes is not a whole number of {PAGE_SIZE}-byte pages from 4 KiB to {} GiB",
            MAX_RAM >> 30
        ));
    }
    Ok(())
}

pub struct GuestRam {
    mem: Mem,
    size: usize,
    _memfd: File,
}

impl GuestRam {
    /// Allocates `size` bytes of zeroed RAM at guest-physical address 0.
    pub fn new(size: usize) -> Result<Self> {
        check_size(size).map_err(Error::Config)?;
        // SAFETY: memfd_create takes a NUL-terminated name and flags; the
        // result is checked before use.
        let fd = unsafe { libc::memfd_create(c"hvsim-ram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::Host("memfd_create", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a freshly created descriptor that nothing else owns.
        let memfd = unsafe { File::from_raw_fd(fd) };
        memfd.set_len(size as u64).map_err(|e| Error::Host("sizing the guest RAM memfd", e))?;
        let file = memfd.try_clone().map_err(|e| Error::Host("duplicating the guest RAM memfd", e))?;
        let mem = Mem::from_ranges_with_files([(GuestAddress(0), size, Some(FileOffset::new(file, 0)))])
            .map_err(|e| Error::Config(format!("mapping {size} bytes of guest RAM: {e}")))?;
        Ok(Self { mem, size, _memfd: memfd })
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn mem(&self) -> &Mem {
        &self.mem
    }

    /// Host address of guest-physical address 0 (for KVM's memory slot).
    pub fn host_base(&self) -> u64 {
        let region = self.mem.iter().next().expect("guest RAM has one region");
        region.as_ptr() as u64
    }

    /// Whether `[addr, addr + len)` lies entirely inside guest RAM.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr.checked_add(len).is_some_and(|end| end <= self.size as u64)
    }

    /// Writes `data` at `addr`, failing (never panicking) if it falls outside RAM.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<()> {
        self.mem.write_slice(data, GuestAddress(addr)).map_err(|e| Error::GuestMemory {
            addr,
            len: data.len(),
            detail: e.to_string(),
        })
    }

    /// Reads into `buf` from `addr`, failing (never panicking) if it falls outside RAM.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<()> {
        self.mem.read_slice(buf, GuestAddress(addr)).map_err(|e| Error::GuestMemory {
            addr,
            len: buf.len(),
            detail: e.to_string(),
        })
    }

    /// The whole of guest RAM as a byte slice.
    ///
    /// The vCPU must not be running (it is not: the VMM is single-threaded and
    /// only calls this between `KVM_RUN`s).
    pub fn as_slice(&self) -> &[u8] {
        let region = self.mem.iter().next().expect("guest RAM has one region");
        // SAFETY: the region maps `size` bytes for the lifetime of `self`, and
        // no vCPU runs while the VMM holds this borrow.
        unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len() as usize) }
    }

    /// The bytes of page `index`.
    pub fn page(&self, index: usize) -> &[u8] {
        &self.as_slice()[index * PAGE_SIZE..(index + 1) * PAGE_SIZE]
    }

    pub fn pages(&self) -> usize {
        self.size / PAGE_SIZE
    }

    /// Overwrites page `index` without marking it dirty: for putting back a
    /// snapshot's contents, which is not a change to track. The vCPU must
    /// not be running (it is not: only the vCPU thread calls this).
    pub fn restore_page(&self, index: usize, data: &[u8]) {
        assert!(index < self.pages() && data.len() == PAGE_SIZE, "page {index} of {}", self.pages());
        let region = self.mem.iter().next().expect("guest RAM has one region");
        // SAFETY: the destination lies inside the mapping (checked above),
        // and no vCPU runs while the VMM restores memory.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), region.as_ptr().add(index * PAGE_SIZE), PAGE_SIZE);
        }
    }

    /// The pages the VMM wrote through [`GuestRam::mem`] since the last
    /// call, as bitmap words (bit `b` of word `w` is page `64 * w + b`);
    /// clears the record.
    pub fn take_vmm_written(&self) -> Vec<u64> {
        let region = self.mem.iter().next().expect("guest RAM has one region");
        let mapping: &vm_memory::MmapRegion<AtomicBitmap> = region;
        mapping.bitmap().get_and_reset()
    }

    /// SHA-256 of all of guest RAM.
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(self.as_slice()).into()
    }
}
