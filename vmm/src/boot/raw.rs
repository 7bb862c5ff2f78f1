//! Boot for raw guests: a flat program entered directly in 64-bit long mode.
//!
//! The VMM builds what a bootloader would: a GDT with kernel and user
//! segments and a TSS, identity page tables for the first GiB (2 MiB pages,
//! user-accessible so ring-3 test code needs no page table work of its own),
//! and the control registers of long mode. The guest starts at
//! `hvsim_abi::raw::LOAD_ADDR` in ring 0 with interrupts off and no IDT: an
//! exception before it installs one is a triple fault, which ends the run.

use hvsim_abi::raw::{self, selector};
use kvm_bindings::{kvm_fpu, kvm_regs, kvm_segment, kvm_sregs};

use crate::error::{Error, Result};
use crate::memory::GuestRam;

const CR0_PE: u64 = 1;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const CR4_OSFXSR: u64 = 1 << 9;
const CR4_OSXMMEXCPT: u64 = 1 << 10;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

const PTE_PRESENT: u64 = 1;
const PTE_WRITE: u64 = 1 << 1;
const PTE_USER: u64 = 1 << 2;
const PTE_HUGE: u64 = 1 << 7;

/// A program to run as a raw guest.
#[derive(Clone, Debug)]
pub struct RawImage {
    pub name: String,
    /// Machine code loaded at `LOAD_ADDR`; execution starts at its first byte.
    pub code: Vec<u8>,
}

/// GDT descriptors, in Linux's layout (see `hvsim_abi::raw::selector`).
const GDT: [u64; 8] = [
    0,
    0x00CF_9B00_0000_FFFF, // 0x08 kernel code, 32-bit
    0x00AF_9B00_0000_FFFF, // 0x10 kernel code, 64-bit
    0x00CF_9300_0000_FFFF, // 0x18 kernel data
    0x00CF_FB00_0000_FFFF, // 0x20 user code, 32-bit, DPL 3
    0x00CF_F300_0000_FFFF, // 0x28 user data, DPL 3
    0x00AF_FB00_0000_FFFF, // 0x30 user code, 64-bit, DPL 3
    0,                     // 0x38 unused (Linux: per-CPU/TLS)
];
const TSS_LIMIT: u64 = 103;

fn tss_descriptor(base: u64) -> [u64; 2] {
    // Type 0xB: 64-bit TSS, busy (TR is loaded directly, as `ltr` would).
    let low = (TSS_LIMIT & 0xFFFF)
        | ((base & 0xFF_FFFF) << 16)
        | (0x8B << 40)
        | (((TSS_LIMIT >> 16) & 0xF) << 48)
        | (((base >> 24) & 0xFF) << 56);
    [low, base >> 32]
}

fn segment(selector: u16, descriptor: u64) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xFFFF_FFFF,
        selector,
        type_: ((descriptor >> 40) & 0xF) as u8,
        present: 1,
        dpl: ((descriptor >> 45) & 3) as u8,
        db: ((descriptor >> 54) & 1) as u8,
        s: ((descriptor >> 44) & 1) as u8,
        l: ((descriptor >> 53) & 1) as u8,
        g: 1,
        ..Default::default()
    }
}

/// Writes the boot structures and the program into `ram`.
pub fn load(ram: &GuestRam, image: &RawImage) -> Result<()> {
    let end = raw::LOAD_ADDR + image.code.len() as u64;
    if image.code.is_empty() || end > ram.size() as u64 {
        return Err(Error::Config(format!(
            "raw guest `{}` ({} bytes at {:#x}) does not fit in {} bytes of RAM",
            image.name,
            image.code.len(),
            raw::LOAD_ADDR,
            ram.size()
        )));
    }
    write_long_mode_structures(ram)?;
    ram.write(raw::LOAD_ADDR, &image.code)
}

/// The GDT, TSS and identity page tables that [`initial_sregs`] points at
/// (also used to enter a Linux kernel in 64-bit mode).
pub fn write_long_mode_structures(ram: &GuestRam) -> Result<()> {
    let mut gdt: Vec<u8> = GDT.iter().flat_map(|d| d.to_le_bytes()).collect();
    gdt.extend(tss_descriptor(raw::TSS_ADDR).iter().flat_map(|d| d.to_le_bytes()));
    ram.write(raw::GDT_ADDR, &gdt)?;

    let mut tss = [0u8; TSS_LIMIT as usize + 1];
    tss[4..12].copy_from_slice(&raw::KERNEL_STACK_TOP.to_le_bytes()); // rsp0
                                                                      // I/O map base beyond the limit: no bitmap, RFLAGS.IOPL alone decides.
    tss[102..104].copy_from_slice(&(TSS_LIMIT as u16 + 1).to_le_bytes());
    ram.write(raw::TSS_ADDR, &tss)?;

    let pml4 = raw::PAGE_TABLES_ADDR;
    let pdpt = pml4 + 0x1000;
    let pd = pdpt + 0x1000;
    let table_flags = PTE_PRESENT | PTE_WRITE | PTE_USER;
    ram.write(pml4, &(pdpt | table_flags).to_le_bytes())?;
    ram.write(pdpt, &(pd | table_flags).to_le_bytes())?;
    let pdes: Vec<u8> =
        (0..raw::IDENTITY_MAPPED >> 21).flat_map(|i| ((i << 21) | table_flags | PTE_HUGE).to_le_bytes()).collect();
    ram.write(pd, &pdes)
}

/// Register state at the first instruction.
pub fn initial_sregs(mut sregs: kvm_sregs) -> kvm_sregs {
    sregs.gdt.base = raw::GDT_ADDR;
    sregs.gdt.limit = (GDT.len() * 8 + 16 - 1) as u16;
    debug_assert_eq!(usize::from(selector::TSS), GDT.len() * 8);
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cs = segment(selector::KERNEL_CODE, GDT[2]);
    let data = segment(selector::KERNEL_DATA, GDT[3]);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = kvm_segment {
        base: raw::TSS_ADDR,
        limit: TSS_LIMIT as u32,
        selector: selector::TSS,
        type_: 0xB,
        present: 1,
        ..Default::default()
    };
    sregs.ldt = kvm_segment { type_: 0x2, present: 1, unusable: 1, ..Default::default() };
    sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    sregs.cr3 = raw::PAGE_TABLES_ADDR;
    sregs.cr4 = CR4_PAE | CR4_OSFXSR | CR4_OSXMMEXCPT;
    sregs.efer = EFER_LME | EFER_LMA;
    sregs
}

pub fn initial_regs(ram_size: u64) -> kvm_regs {
    kvm_regs {
        rip: raw::LOAD_ADDR,
        rsp: raw::KERNEL_STACK_TOP,
        rflags: 0x2,
        // The program learns how much RAM it has.
        rdi: ram_size,
        ..Default::default()
    }
}

pub fn initial_fpu() -> kvm_fpu {
    kvm_fpu { fcw: 0x37F, mxcsr: 0x1F80, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_decode_to_the_segments_kvm_expects() {
        let cs = segment(selector::KERNEL_CODE, GDT[2]);
        assert_eq!((cs.type_, cs.s, cs.l, cs.db, cs.dpl), (0xB, 1, 1, 0, 0));
        let uc = segment(selector::USER_CODE, GDT[usize::from(selector::USER_CODE >> 3)]);
        assert_eq!((uc.l, uc.dpl), (1, 3));
        let ud = segment(selector::USER_DATA, GDT[usize::from(selector::USER_DATA >> 3)]);
        assert_eq!((ud.type_, ud.db, ud.dpl), (0x3, 1, 3));
        let [lo, hi] = tss_descriptor(0x1234_5678_9ABC_DEF0);
        assert_eq!(lo & 0xFFFF, TSS_LIMIT);
        assert_eq!((lo >> 40) & 0xFF, 0x8B);
        assert_eq!(hi, 0x1234_5678);
        assert_eq!(((lo >> 16) & 0xFF_FFFF) | (((lo >> 56) & 0xFF) << 24), 0x9ABC_DEF0);
    }

    #[test]
    fn image_must_fit() {
        let ram = GuestRam::new(2 << 20).unwrap();
        let big = RawImage { name: "big".into(), code: vec![0x90; 2 << 20] };
        assert!(load(&ram, &big).is_err());
        let empty = RawImage { name: "empty".into(), code: vec![] };
        assert!(load(&ram, &empty).is_err());
    }
}
