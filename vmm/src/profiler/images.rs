//! Naming user addresses: which ELF image (program, shared library, vDSO) an
//! address in a guest process lies in, and where in that image. The VMM
//! knows nothing of the guest's files, but every image the dynamic linker
//! or the kernel maps starts with its ELF header in memory (the first
//! `PT_LOAD` segment covers file offset 0, and ld.so reads the program
//! headers from there). So from a user address the search walks down the
//! process's address space, page by page, skipping unmapped regions, to the
//! nearest ELF header, and accepts it only if that image's `PT_LOAD`
//! segments span the address. The image is named by its `DT_SONAME`
//! (`libc.so.6`, `linux-vdso.so.1`) or, for the program itself, which has
//! none, by the process name; the offset is the address in the image's own
//! link-time address space, what `addr2line -e` and `objdump` take.
//!
//! A process's page tables map only the pages it touched: a child that
//! forked, or a program whose first page no fault brought in, may run code
//! whose image's header is not mapped in its address space. Code pages
//! are shared, though (the page cache's), so every page of code an image
//! was found in is remembered by its guest-physical frame and its content;
//! an address whose search finds no header is named by its frame, where
//! the frame still holds the same bytes.
//!
//! All of it is guest data read at a sample: anything malformed just leaves
//! the address unnamed.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::walk::AddressSpace;

/// How far below an address its image's ELF header may be: the largest
/// program or library mapping the profiler names.
const MAX_IMAGE_SPAN: u64 = 512 << 20;
/// User space ends here on x86-64 (4-level paging; 5-level is larger, and
/// its extra space is rarely used for code).
pub const USER_END: u64 = 0x0000_8000_0000_0000;
/// The cache is emptied when it holds this many images (processes come and
/// go; their page-table roots are reused).
const MAX_CACHED: usize = 4096;
/// The frames of code remembered are forgotten when they are this many
/// (256 MiB of code: a whole system's programs and libraries).
const MAX_FRAMES: usize = 1 << 16;

const ELF_HEADER: usize = 64;
const PHDR_SIZE: u64 = 56;
const MAX_PHDRS: u64 = 64;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_STRTAB: u64 = 5;
const DT_SONAME: u64 = 14;
const MAX_DYN_ENTRIES: u64 = 512;
const MAX_NAME: usize = 128;

/// Where a user address lies.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageOffset {
    /// The image's `DT_SONAME`, or `None` for an image without one (the
    /// program itself), which the report names by the process.
    pub soname: Option<Arc<str>>,
    /// The address in the image's link-time address space.
    pub offset: u64,
}

/// An image found in one address space.
#[derive(Clone, Debug)]
struct Image {
    /// Where its ELF header is mapped.
    start: u64,
    /// One past its last `PT_LOAD` byte.
    end: u64,
    /// Load bias: run-time address minus link-time address.
    bias: u64,
    /// Its ELF header as read, to see whether `start` still holds it.
    header: [u8; ELF_HEADER],
    soname: Option<Arc<str>>,
}

/// The images found so far, by page-table root, and the code pages they
/// were found in, by frame.
#[derive(Debug, Default)]
pub struct Images {
    by_root: HashMap<u64, Vec<Image>>,
    by_frame: HashMap<u64, Page>,
}

/// A page of an image's code, as it was when the image was found there.
#[derive(Debug)]
struct Page {
    soname: Option<Arc<str>>,
    /// The page's link-time address in its image.
    offset: u64,
    /// A hash of its bytes: a frame reused for other data names nothing.
    content: u64,
}

impl Images {
    /// Images cached, in every address space.
    fn cached(&self) -> usize {
        self.by_root.values().map(Vec::len).sum()
    }

    /// The image and offset of user address `addr` in the address space
    /// `space` (whose page-table root is `root`), if the address lies in one.
    pub fn find(&mut self, space: &AddressSpace<'_>, root: u64, addr: u64) -> Option<ImageOffset> {
        if addr >= USER_END {
            return None;
        }
        let images = self.by_root.entry(root).or_default();
        if let Some(i) = images.iter().position(|im| (im.start..im.end).contains(&addr)) {
            // The same root may now be another process's (a root page is
            // reused after exit or exec): the header must still be there.
            if header_at(space, images[i].start).is_some_and(|h| h == images[i].header) {
                let im = &images[i];
                let found = ImageOffset { soname: im.soname.clone(), offset: addr - im.bias };
                self.remember_page(space, addr, &found);
                return Some(found);
            }
            images.swap_remove(i);
        }
        let Some(image) = search(space, addr) else {
            return self.by_page(space, addr).or_else(|| self.in_another_process(space, root, addr));
        };
        let found = ImageOffset { soname: image.soname.clone(), offset: addr - image.bias };
        if self.cached() >= MAX_CACHED {
            self.by_root.clear();
        }
        // Every page of it this process has mapped now: a child it forks
        // may run them without the header (mapped pages only: the walk
        // skips unmapped regions whole).
        let mut page = image.start;
        while page < image.end {
            page = match space.lookup(page) {
                Ok(_) => {
                    let at = ImageOffset { soname: image.soname.clone(), offset: page - image.bias };
                    self.remember_page(space, page, &at);
                    page + 0x1000
                }
                Err(size) => (page & !(size - 1)).saturating_add(size),
            };
        }
        self.by_root.entry(root).or_default().push(image);
        Some(found)
    }

    /// Remembers the frame `addr` lies in as `found`'s page.
    fn remember_page(&mut self, space: &AddressSpace<'_>, addr: u64, found: &ImageOffset) {
        let Some(frame) = space.translate(addr & !0xfff) else { return };
        if self.by_frame.contains_key(&frame) {
            return;
        }
        let Some(content) = page_hash(space, addr) else { return };
        if self.by_frame.len() >= MAX_FRAMES {
            self.by_frame.clear();
        }
        let offset = found.offset - (addr & 0xfff);
        self.by_frame.insert(frame, Page { soname: found.soname.clone(), offset, content });
    }

    /// `addr` named by the frame it lies in, if an image was found in that
    /// frame and it holds the same bytes still.
    fn by_page(&self, space: &AddressSpace<'_>, addr: u64) -> Option<ImageOffset> {
        let page = self.by_frame.get(&space.translate(addr & !0xfff)?)?;
        (page_hash(space, addr)? == page.content)
            .then(|| ImageOffset { soname: page.soname.clone(), offset: page.offset + (addr & 0xfff) })
    }

    /// `addr` named through another process whose image maps the same
    /// frame at the same address (a parent, when a forked child runs a page
    /// the parent mapped after its image was found).
    fn in_another_process(&mut self, space: &AddressSpace<'_>, root: u64, addr: u64) -> Option<ImageOffset> {
        let frame = space.translate(addr & !0xfff)?;
        let found = self.by_root.iter().filter(|(other, _)| **other != root).find_map(|(other, images)| {
            let theirs = space.with_root(*other);
            images.iter().find_map(|im| {
                let same = (im.start..im.end).contains(&addr)
                    && theirs.translate(addr & !0xfff) == Some(frame)
                    && header_at(&theirs, im.start).is_some_and(|h| h == im.header);
                same.then(|| ImageOffset { soname: im.soname.clone(), offset: addr - im.bias })
            })
        })?;
        self.remember_page(space, addr, &found);
        Some(found)
    }
}

/// A hash of the page `addr` lies in (FNV-1a: the same on every host).
fn page_hash(space: &AddressSpace<'_>, addr: u64) -> Option<u64> {
    let mut page = [0u8; 0x1000];
    space.read_bytes(addr & !0xfff, &mut page)?;
    Some(page.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)))
}

/// Walks down from `addr` to the nearest ELF header and returns its image if
/// the image spans `addr`.
fn search(space: &AddressSpace<'_>, addr: u64) -> Option<Image> {
    let floor = addr.saturating_sub(MAX_IMAGE_SPAN);
    let mut page = addr & !0xfff;
    loop {
        match space.lookup(page) {
            Ok(_) => {
                if let Some(header) = header_at(space, page) {
                    let image = parse(space, page, header)?;
                    return (image.start..image.end).contains(&addr).then_some(image);
                }
                page = page.checked_sub(0x1000)?;
            }
            // Skip the whole unmapped region, to the last page below it.
            Err(size) => page = (page & !(size - 1)).checked_sub(0x1000)?,
        }
        if page < floor {
            return None;
        }
    }
}

/// The 64 bytes at page `va` if they begin like a 64-bit little-endian ELF
/// header.
fn header_at(space: &AddressSpace<'_>, va: u64) -> Option<[u8; ELF_HEADER]> {
    let mut h = [0u8; ELF_HEADER];
    space.read_bytes(va, &mut h)?;
    (h[..4] == *b"\x7fELF" && h[4] == 2 && h[5] == 1).then_some(h)
}

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes")))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The image whose header is at `start`: its span from the `PT_LOAD`
/// segments and its name from `PT_DYNAMIC`.
fn parse(space: &AddressSpace<'_>, start: u64, header: [u8; ELF_HEADER]) -> Option<Image> {
    const ET_EXEC: u64 = 2;
    const ET_DYN: u64 = 3;
    const EM_X86_64: u64 = 62;
    let kind = u16_at(&header, 16);
    if !(kind == ET_EXEC || kind == ET_DYN) || u16_at(&header, 18) != EM_X86_64 {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(&header, 32), u16_at(&header, 54), u16_at(&header, 56));
    // The program headers must lie in the header's page, where ld.so and
    // the kernel read them in a mapped image.
    if phentsize != PHDR_SIZE || phnum == 0 || phnum > MAX_PHDRS || phoff.checked_add(phnum * PHDR_SIZE)? > 0x1000 {
        return None;
    }
    let mut low = u64::MAX;
    let mut high = 0u64;
    let mut dynamic = None;
    for i in 0..phnum {
        let mut ph = [0u8; PHDR_SIZE as usize];
        space.read_bytes(start + phoff + i * PHDR_SIZE, &mut ph)?;
        let (vaddr, memsz) = (u64_at(&ph, 16), u64_at(&ph, 40));
        match u32_at(&ph, 0) {
            PT_LOAD => {
                low = low.min(vaddr);
                high = high.max(vaddr.checked_add(memsz)?);
            }
            PT_DYNAMIC => dynamic = Some((vaddr, memsz)),
            _ => {}
        }
    }
    if low >= high || high - low > MAX_IMAGE_SPAN {
        return None;
    }
    // The first segment maps the header: its page is `start`.
    let bias = start.wrapping_sub(low & !0xfff);
    if kind == ET_EXEC && bias != 0 {
        return None;
    }
    let end = bias.wrapping_add(high);
    if end <= start || end > USER_END {
        return None;
    }
    let soname = dynamic.and_then(|(vaddr, memsz)| soname(space, start..end, bias, bias.wrapping_add(vaddr), memsz));
    Some(Image { start, end, bias, header, soname })
}

/// `DT_SONAME` from the dynamic section at `at`. `DT_STRTAB` is a link-time
/// address in the file, which ld.so relocates in place in most images:
/// either form is accepted.
fn soname(space: &AddressSpace<'_>, span: Range<u64>, bias: u64, at: u64, memsz: u64) -> Option<Arc<str>> {
    let (mut strtab, mut name) = (None, None);
    for i in 0..(memsz / 16).min(MAX_DYN_ENTRIES) {
        let entry = at.checked_add(i * 16)?;
        let tag = space.read_u64(entry)?;
        let value = space.read_u64(entry + 8)?;
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(value),
            DT_SONAME => name = Some(value),
            _ => {}
        }
    }
    let (strtab, name) = (strtab?, name?);
    let table = if span.contains(&strtab) { strtab } else { bias.wrapping_add(strtab) };
    read_string(space, table.checked_add(name)?)
}

/// A NUL-terminated printable name at `va`.
fn read_string(space: &AddressSpace<'_>, va: u64) -> Option<Arc<str>> {
    let mut out = Vec::new();
    let mut at = va;
    while out.len() < MAX_NAME {
        let mut b = [0u8];
        space.read_bytes(at, &mut b)?;
        if b[0] == 0 {
            break;
        }
        if !b[0].is_ascii_graphic() {
            return None;
        }
        out.push(b[0]);
        at += 1;
    }
    (!out.is_empty() && out.len() < MAX_NAME).then(|| String::from_utf8(out).expect("ASCII").into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::GuestRam;

    /// 4-level page tables at `root`, the tables below it allocated after
    /// `next`, built on demand.
    struct Tables<'a> {
        ram: &'a GuestRam,
        next: u64,
        root: u64,
    }

    impl Tables<'_> {
        fn map(&mut self, va: u64, pa: u64) {
            let mut table = self.root;
            for level in (1..4).rev() {
                let slot = table + ((va >> (12 + 9 * level)) & 0x1ff) * 8;
                let mut e = [0u8; 8];
                self.ram.read(slot, &mut e).unwrap();
                let mut entry = u64::from_le_bytes(e);
                if entry & 1 == 0 {
                    self.next += 0x1000;
                    entry = self.next | 7;
                    self.ram.write(slot, &entry.to_le_bytes()).unwrap();
                }
                table = entry & !0xfff;
            }
            self.ram.write(table + ((va >> 12) & 0x1ff) * 8, &(pa | 7).to_le_bytes()).unwrap();
        }
    }

    /// A shared library as ld.so maps it at `base`, pages at physical
    /// 0x100000..: header and program headers in page 0, text in pages 1-2,
    /// a gap, then data with the dynamic section and string table in page 4
    /// (segments span 5 pages). Its DT_STRTAB holds `strtab` (relocated in
    /// place, or link-time).
    fn library(ram: &GuestRam, tables: &mut Tables<'_>, base: u64, relocated: bool) {
        for page in [0u64, 1, 2, 4] {
            tables.map(base + page * 0x1000, 0x10_0000 + page * 0x1000);
        }
        let w = |off: u64, bytes: &[u8]| ram.write(0x10_0000 + off, bytes).unwrap();
        let mut h = [0u8; 64];
        h[..6].copy_from_slice(b"\x7fELF\x02\x01");
        h[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
        h[18..20].copy_from_slice(&62u16.to_le_bytes());
        h[32..40].copy_from_slice(&64u64.to_le_bytes());
        h[54..56].copy_from_slice(&56u16.to_le_bytes());
        h[56..58].copy_from_slice(&3u16.to_le_bytes());
        w(0, &h);
        let phdr = |kind: u32, vaddr: u64, memsz: u64| {
            let mut p = [0u8; 56];
            p[0..4].copy_from_slice(&kind.to_le_bytes());
            p[16..24].copy_from_slice(&vaddr.to_le_bytes());
            p[40..48].copy_from_slice(&memsz.to_le_bytes());
            p
        };
        w(64, &phdr(PT_LOAD, 0, 0x3000));
        w(120, &phdr(PT_LOAD, 0x4000, 0x1000));
        w(176, &phdr(PT_DYNAMIC, 0x4000, 48));
        let strtab = if relocated { base + 0x4100 } else { 0x4100 };
        for (i, v) in [DT_STRTAB, strtab, DT_SONAME, 1, DT_NULL, 0].iter().enumerate() {
            w(0x4000 + i as u64 * 8, &v.to_le_bytes());
        }
        w(0x4100, b"\0libfoo.so.1\0");
    }

    #[test]
    fn names_addresses_by_soname_and_link_time_offset() {
        for relocated in [true, false] {
            let ram = GuestRam::new(4 << 20).unwrap();
            let mut tables = Tables { ram: &ram, next: 0x1000, root: 0x1000 };
            let base = 0x7f12_3400_0000;
            library(&ram, &mut tables, base, relocated);
            let space = AddressSpace::new(&ram, 0x1000, 0);
            let mut images = Images::default();
            let found = images.find(&space, 0x1000, base + 0x2abc).expect("in the text");
            assert_eq!(found, ImageOffset { soname: Some("libfoo.so.1".into()), offset: 0x2abc });
            // The gap page and the data page belong to it too; past the
            // last segment does not.
            assert_eq!(images.find(&space, 0x1000, base + 0x3010).map(|f| f.offset), Some(0x3010));
            assert_eq!(images.find(&space, 0x1000, base + 0x5000), None);
            assert_eq!(images.find(&space, 0x1000, base - 8), None, "below the image");
            assert_eq!(images.find(&space, 0x1000, 0xffff_ffff_8100_0000), None, "a kernel address");
        }
    }

    #[test]
    fn skips_unmapped_regions_and_forgets_images_that_moved() {
        let ram = GuestRam::new(4 << 20).unwrap();
        let mut tables = Tables { ram: &ram, next: 0x1000, root: 0x1000 };
        let base = 0x5555_5555_4000;
        library(&ram, &mut tables, base, true);
        // A page of code far above, with nothing mapped in between: the
        // search reaches the library's header, which does not span it.
        tables.map(base + (300 << 20), 0x20_0000);
        let space = AddressSpace::new(&ram, 0x1000, 0);
        let mut images = Images::default();
        assert_eq!(images.find(&space, 0x1000, base + (300 << 20) + 8), None);
        assert!(images.find(&space, 0x1000, base + 0x1000).is_some());
        // Another process reuses the root: its page holds no ELF header, and
        // the cached image is not trusted; the code page, the same frame
        // with the same bytes, is still that image's, until it changes too.
        ram.write(0x10_0000, b"\x7fELG").unwrap();
        assert_eq!(images.find(&space, 0x1000, base + 0x1000).map(|f| f.offset), Some(0x1000));
        assert_eq!(images.cached(), 0);
        ram.write(0x10_1000, b"other code").unwrap();
        assert_eq!(images.find(&space, 0x1000, base + 0x1000), None);
    }

    /// A forked child whose tables map a code page but not its image's
    /// header: named by the frame, as long as the frame holds the same code.
    #[test]
    fn a_code_page_without_its_header_is_named_by_its_frame() {
        let ram = GuestRam::new(4 << 20).unwrap();
        let mut tables = Tables { ram: &ram, next: 0x1000, root: 0x1000 };
        let base = 0x40_0000;
        library(&ram, &mut tables, base, true);
        let parent = AddressSpace::new(&ram, 0x1000, 0);
        let mut child_tables = Tables { ram: &ram, next: 0x30_0000, root: 0x30_0000 };
        child_tables.map(base + 0x1000, 0x10_1000);
        child_tables.map(base + 0x2000, 0x10_2000);
        let child = AddressSpace::new(&ram, 0x30_0000, 0);
        let mut images = Images::default();
        assert_eq!(images.find(&child, 0x30_0000, base + 0x2010), None, "no header, and no page seen yet");
        let found = images.find(&parent, 0x1000, base + 0x2abc).unwrap();
        assert_eq!(
            images.find(&child, 0x30_0000, base + 0x2010),
            Some(ImageOffset { offset: 0x2010, ..found.clone() })
        );
        // A page the parent has mapped but no sample landed in: remembered
        // when the image was found.
        assert_eq!(
            images.find(&child, 0x30_0000, base + 0x1010),
            Some(ImageOffset { offset: 0x1010, ..found.clone() })
        );
        // A page the parent mapped after its image was found, and the child
        // maps too: named through the parent's tables.
        tables.map(base + 0x3000, 0x10_3000);
        child_tables.map(base + 0x3000, 0x10_3000);
        assert_eq!(images.find(&child, 0x30_0000, base + 0x3010), Some(ImageOffset { offset: 0x3010, ..found }));
        // The parent's image is gone (its header page reused) and the frame
        // holds other bytes: nothing names it.
        ram.write(0x10_0000, b"\x7fELG").unwrap();
        ram.write(0x10_2000, b"other data").unwrap();
        assert_eq!(images.find(&child, 0x30_0000, base + 0x2010), None);
    }

    #[test]
    fn garbage_headers_name_nothing() {
        let ram = GuestRam::new(4 << 20).unwrap();
        let mut tables = Tables { ram: &ram, next: 0x1000, root: 0x1000 };
        let base = 0x7f00_0000_0000;
        library(&ram, &mut tables, base, true);
        let space = AddressSpace::new(&ram, 0x1000, 0);
        let cases: [(u64, &[u8]); 4] = [
            (56, &200u16.to_le_bytes()),        // too many program headers
            (32, &4090u64.to_le_bytes()),       // program headers off the page
            (64 + 40, &u64::MAX.to_le_bytes()), // a segment that wraps
            (18, &3u16.to_le_bytes()),          // not x86-64
        ];
        for (off, bytes) in cases {
            let mut saved = vec![0u8; bytes.len()];
            ram.read(0x10_0000 + off, &mut saved).unwrap();
            ram.write(0x10_0000 + off, bytes).unwrap();
            assert_eq!(Images::default().find(&space, 0x1000, base + 0x1000), None, "offset {off}");
            ram.write(0x10_0000 + off, &saved).unwrap();
        }
        // An unterminated or unprintable soname leaves the image unnamed.
        ram.write(0x10_4101, b"lib\x01").unwrap();
        let found = Images::default().find(&space, 0x1000, base + 0x1000).unwrap();
        assert_eq!(found.soname, None);
    }
}
