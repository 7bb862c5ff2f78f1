//! Reading the guest's virtual memory from the VMM: a walk of its page
//! tables (4- or 5-level, with 1 GiB and 2 MiB pages) from CR3, and the
//! frame-pointer chain of a stack. Everything read is guest data: every
//! address is checked against RAM, and a walk that goes anywhere odd just
//! stops (a profile sample is best effort, never an error).

use crate::memory::GuestRam;

/// Bits 12..52 of a page-table entry: the next table's or the page's address.
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
const PRESENT: u64 = 1;
const PAGE_SIZE_BIT: u64 = 1 << 7;
/// CR4.LA57: 5-level paging.
const CR4_LA57: u64 = 1 << 12;
/// No stack is deeper than this in a profile.
pub const MAX_FRAMES: usize = 64;

/// The guest's address space at one instant.
#[derive(Clone, Copy)]
pub struct AddressSpace<'a> {
    ram: &'a GuestRam,
    cr3: u64,
    levels: u32,
}

impl<'a> AddressSpace<'a> {
    pub fn new(ram: &'a GuestRam, cr3: u64, cr4: u64) -> AddressSpace<'a> {
        let levels = if cr4 & CR4_LA57 != 0 { 5 } else { 4 };
        AddressSpace { ram, cr3: cr3 & ADDR_MASK, levels }
    }

    /// Another process's address space, in the same paging mode.
    pub fn with_root(&self, cr3: u64) -> AddressSpace<'a> {
        AddressSpace { cr3: cr3 & ADDR_MASK, ..*self }
    }

    fn entry(&self, table: u64, index: u64) -> Option<u64> {
        let mut bytes = [0u8; 8];
        self.ram.read(table + index * 8, &mut bytes).ok()?;
        Some(u64::from_le_bytes(bytes))
    }

    /// The guest-physical address of `va`, if it is mapped.
    pub fn translate(&self, va: u64) -> Option<u64> {
        self.lookup(va).ok()
    }

    /// The guest-physical address of `va`; if it is not mapped, the size of
    /// the aligned region around `va` that is not mapped either (a missing
    /// entry high in the tables leaves gigabytes unmapped), so that a
    /// search through address space can skip it. Unreadable tables count as
    /// one unmapped page.
    pub fn lookup(&self, va: u64) -> Result<u64, u64> {
        let mut table = self.cr3;
        for level in (0..self.levels).rev() {
            let shift = 12 + 9 * level;
            let size = 1u64 << shift;
            let entry = self.entry(table, (va >> shift) & 0x1ff).ok_or(0x1000u64)?;
            if entry & PRESENT == 0 {
                return Err(size);
            }
            // A large page at the PDPT (1 GiB) or page-directory (2 MiB) level.
            if (level == 1 || level == 2) && entry & PAGE_SIZE_BIT != 0 {
                return Ok((entry & ADDR_MASK & !(size - 1)) | (va & (size - 1)));
            }
            table = entry & ADDR_MASK;
        }
        Ok(table | (va & 0xfff))
    }

    /// The 8 bytes at `va` (which may not cross a page: callers read aligned).
    pub fn read_u64(&self, va: u64) -> Option<u64> {
        if !va.is_multiple_of(8) {
            return None;
        }
        let mut bytes = [0u8; 8];
        self.ram.read(self.translate(va)?, &mut bytes).ok()?;
        Some(u64::from_le_bytes(bytes))
    }

    /// `len` bytes at `va`, inside one page.
    pub fn read_bytes(&self, va: u64, buf: &mut [u8]) -> Option<()> {
        if (va & 0xfff) as usize + buf.len() > 0x1000 {
            return None;
        }
        self.ram.read(self.translate(va)?, buf).ok()
    }
}

/// The stack at a sample, innermost first: `ip`, then the return address of
/// each frame found by following saved frame pointers from `bp`. A frame
/// must lie above the previous one and within `span` bytes of `sp` (the
/// stack's extent: a kernel stack, or a bound for user stacks), which stops
/// the walk where code without frame pointers uses `bp` for data. The
/// x86 entry code marks pt_regs frames with bit 0 of the saved pointer, and
/// misaligned values stop the walk, so it ends at the kernel's entry.
pub fn frame_pointer_stack(space: &AddressSpace<'_>, ip: u64, sp: u64, bp: u64, span: u64) -> Vec<u64> {
    let mut stack = vec![ip];
    let mut frame = bp;
    let limit = sp.saturating_add(span);
    while stack.len() < MAX_FRAMES {
        if !frame.is_multiple_of(8) || frame < sp || frame >= limit {
            break;
        }
        let (Some(next), Some(ret)) = (space.read_u64(frame), space.read_u64(frame + 8)) else {
            break;
        };
        if ret == 0 {
            break;
        }
        stack.push(ret);
        if next <= frame {
            break;
        }
        frame = next;
    }
    stack
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds 4-level tables at 0x1000.. mapping `va` (4 KiB page) to `pa`,
    /// and `big` (a 2 MiB page) to `big_pa`.
    fn tables(ram: &GuestRam, va: u64, pa: u64, big: u64, big_pa: u64) {
        let w = |addr: u64, v: u64| ram.write(addr, &v.to_le_bytes()).unwrap();
        let (pml4, pdpt, pd, pt) = (0x1000, 0x2000, 0x3000, 0x4000);
        let idx = |va: u64, level: u32| (va >> (12 + 9 * level)) & 0x1ff;
        w(pml4 + idx(va, 3) * 8, pdpt | 3);
        w(pdpt + idx(va, 2) * 8, pd | 3);
        w(pd + idx(va, 1) * 8, pt | 3);
        w(pt + idx(va, 0) * 8, pa | 3);
        assert_eq!(idx(big, 3), idx(va, 3));
        assert_eq!(idx(big, 2), idx(va, 2));
        w(pd + idx(big, 1) * 8, big_pa | 3 | PAGE_SIZE_BIT);
    }

    #[test]
    fn translates_small_and_large_pages_and_refuses_the_rest() {
        let ram = GuestRam::new(8 << 20).unwrap();
        let va = 0xffff_c900_0000_5000;
        let big = 0xffff_c900_0020_0000;
        tables(&ram, va, 0x7000, big, 0x40_0000);
        let space = AddressSpace::new(&ram, 0x1000, 0);
        assert_eq!(space.translate(va + 0x123), Some(0x7123));
        assert_eq!(space.translate(big + 0x1_2345), Some(0x41_2345));
        assert_eq!(space.translate(va + 0x1000), None, "not mapped");
        // A table pointing outside RAM ends the walk instead of reading there.
        ram.write(0x4000 + ((va >> 12) & 0x1ff) * 8, &(0xff_0000_0000u64 | 3).to_le_bytes()).unwrap();
        assert_eq!(space.translate(va).map(|pa| space.ram.contains(pa, 1)), Some(false));
        assert_eq!(space.read_u64(va), None);
    }

    #[test]
    fn follows_frame_pointers_and_stops_at_garbage() {
        let ram = GuestRam::new(8 << 20).unwrap();
        let stack_va = 0xffff_c900_0000_5000;
        tables(&ram, stack_va, 0x7000, 0xffff_c900_0020_0000, 0x40_0000);
        let space = AddressSpace::new(&ram, 0x1000, 0);
        let w = |off: u64, v: u64| ram.write(0x7000 + off, &v.to_le_bytes()).unwrap();
        // Three frames at 0x100, 0x200, 0x300; the last one's saved bp is a
        // pt_regs mark (odd), which ends the chain.
        w(0x100, stack_va + 0x200);
        w(0x108, 0xffff_ffff_8100_1111);
        w(0x200, stack_va + 0x300);
        w(0x208, 0xffff_ffff_8100_2222);
        w(0x300, stack_va + 0x401);
        w(0x308, 0xffff_ffff_8100_3333);
        let stack = frame_pointer_stack(&space, 0xffff_ffff_8100_0000, stack_va, stack_va + 0x100, 0x1000);
        assert_eq!(
            stack,
            vec![0xffff_ffff_8100_0000, 0xffff_ffff_8100_1111, 0xffff_ffff_8100_2222, 0xffff_ffff_8100_3333]
        );
        // A loop (a frame pointing at itself) stops after one frame.
        w(0x100, stack_va + 0x100);
        let stack = frame_pointer_stack(&space, 1, stack_va, stack_va + 0x100, 0x1000);
        assert_eq!(stack, vec![1, 0xffff_ffff_8100_1111]);
        // bp below sp, or outside the span, gives the ip alone.
        assert_eq!(frame_pointer_stack(&space, 1, stack_va + 0x200, stack_va + 0x100, 0x1000), vec![1]);
        assert_eq!(frame_pointer_stack(&space, 1, stack_va, stack_va + 0x100, 0x80), vec![1]);
    }
}
