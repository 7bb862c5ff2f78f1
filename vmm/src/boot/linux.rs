//! Boot for Linux: the 64-bit boot protocol (Documentation/x86/boot.rst).
//!
//! The kernel (an ELF `vmlinux`, or a `bzImage`) is loaded with linux-loader
//! and entered directly in 64-bit mode with `rsi` pointing at the zero page,
//! as a boot loader's 64-bit handoff would. The VMM supplies the e820 map, the
//! command line, the initramfs, an MP table, and a boot RNG seed
//! (`setup_data` of type `SETUP_RNG_SEED`) drawn from the run's seed, which is
//! the guest kernel's first entropy.

use std::io::Read;
use std::path::PathBuf;

use hvsim_abi::raw as layout;
use kvm_bindings::kvm_regs;
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params};
use linux_loader::loader::{BzImage, Elf, KernelLoader};
use vm_memory::{ByteValued, GuestAddress};

use crate::error::{Error, Result};
use crate::memory::{GuestRam, PAGE_SIZE};

use super::mptable;

/// Boot protocol constants.
const ZERO_PAGE: u64 = 0x7000;
const SETUP_DATA: u64 = 0x6000;
const BOOT_STACK_TOP: u64 = 0x8FF0;
const CMDLINE_ADDR: u64 = 0x2_0000;
/// `COMMAND_LINE_SIZE` of upstream x86 Linux: what a kernel that does not
/// say otherwise takes, the terminating NUL included. hvsim's own kernel
/// takes [`HVSIM_CMDLINE_SIZE`].
pub const LINUX_CMDLINE_SIZE: usize = 2048;
/// `COMMAND_LINE_SIZE` of hvsim's kernel (patch 0008): every device of
/// [`MAX_NODES`](crate::devices::virtio::MAX_NODES) nodes is announced on
/// it (docs/machine.md, "Devices").
pub const HVSIM_CMDLINE_SIZE: usize = 32 << 10;
const HIMEM_START: u64 = 0x10_0000;
const EBDA_START: u64 = mptable::MPTABLE_ADDR;
const E820_RAM: u32 = 1;
const SETUP_RNG_SEED: u32 = 9;
const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xAA55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448; // "HdrS"
const KERNEL_LOADER_OTHER: u8 = 0xFF;
const KERNEL_MIN_ALIGNMENT: u32 = 0x0100_0000;
/// Bytes of boot RNG seed handed to the kernel.
pub const RNG_SEED_LEN: usize = 32;

/// A Linux guest to boot.
#[derive(Clone, Debug)]
pub struct LinuxImage {
    /// ELF `vmlinux` or `bzImage`.
    pub kernel: PathBuf,
    /// An initramfs (cpio, optionally compressed).
    pub initrd: Vec<u8>,
    pub cmdline: String,
}

/// What the vCPU starts with.
pub struct Entry {
    pub regs: kvm_regs,
    /// Where the kernel publishes its running task, if its symbols say
    /// ([`crate::guest_task`]; an ELF vmlinux of hvsim's kernel).
    pub task_page: Option<u64>,
}

/// Loads kernel, initramfs, command line and boot structures into `ram`.
/// `devices` (the machine's device announcements) is appended to the
/// image's command line.
pub fn load(ram: &GuestRam, image: &LinuxImage, devices: &str, rng_seed: &[u8; RNG_SEED_LEN]) -> Result<Entry> {
    let kernel_err = |what: &str, e: &dyn std::fmt::Display| {
        Error::Config(format!("kernel {}: {what}: {e}", image.kernel.display()))
    };
    // Read once: the loaders and the symbol lookup below all need it.
    let mut bytes = Vec::new();
    crate::files::open_regular(&image.kernel)
        .map_err(|e| kernel_err("cannot open", &e))?
        .read_to_end(&mut bytes)
        .map_err(|e| kernel_err("cannot read", &e))?;
    let mut file = std::io::Cursor::new(&bytes[..]);
    let mem = ram.mem();
    let (entry, kernel_end, mut params, cmdline_size, task) = if bytes.starts_with(b"\x7fELF") {
        let r = Elf::load(mem, None, &mut file, Some(GuestAddress(HIMEM_START)))
            .map_err(|e| kernel_err("not a loadable ELF vmlinux", &e))?;
        (
            r.kernel_load.0,
            r.kernel_end,
            boot_params::default(),
            elf_cmdline_size(&bytes),
            elf_symbol(&bytes, crate::guest_task::SYMBOL),
        )
    } else {
        let r = BzImage::load(mem, None, &mut file, Some(GuestAddress(HIMEM_START)))
            .map_err(|e| kernel_err("neither an ELF vmlinux nor a bzImage", &e))?;
        let hdr = r.setup_header.ok_or_else(|| kernel_err("bzImage", &"no setup header"))?;
        // Boot protocol 2.06 and later say the most they take (without the
        // NUL); earlier ones took 255 bytes.
        let cmdline_size = match hdr.cmdline_size {
            0 => 256,
            n => n as usize + 1,
        };
        let params = boot_params { hdr, ..boot_params::default() };
        // The 64-bit entry point sits 0x200 bytes into the protected-mode code.
        (r.kernel_load.0 + 0x200, r.kernel_end, params, cmdline_size, None)
    };

    // Initramfs at the top of RAM, below where the kernel may address it.
    let ram_end = ram.size() as u64;
    let initrd_max = match params.hdr.initrd_addr_max {
        0 => 0x37FF_FFFF,
        m => u64::from(m),
    };
    let initrd_len = image.initrd.len() as u64;
    let initrd_addr = (ram_end.min(initrd_max + 1).saturating_sub(initrd_len)) & !(PAGE_SIZE as u64 - 1);
    if initrd_len > 0 && initrd_addr < kernel_end {
        return Err(Error::Config(format!(
            "initramfs of {initrd_len} bytes does not fit in {ram_end} bytes of RAM above the kernel \
             (which ends at {kernel_end:#x}): give the guest more memory"
        )));
    }
    ram.write(initrd_addr, &image.initrd)?;

    let mut cmdline = image.cmdline.as_bytes().to_vec();
    if !devices.is_empty() {
        cmdline.push(b' ');
        cmdline.extend_from_slice(devices.as_bytes());
    }
    // A longer line would be cut short where the kernel copies it, and
    // the devices announced last would be missing without a word.
    let cmdline_size = cmdline_size.min(CMDLINE_ROOM);
    if cmdline.len() >= cmdline_size {
        return Err(Error::Config(format!(
            "kernel command line is {} bytes (each node's devices are announced on it); kernel {} takes \
             at most {}: boot hvsim's own kernel (`hvsim kernel build`), or give fewer nodes",
            cmdline.len(),
            image.kernel.display(),
            cmdline_size - 1
        )));
    }
    let cmdline_len = cmdline.len() as u32;
    cmdline.push(0);
    ram.write(CMDLINE_ADDR, &cmdline)?;

    // setup_data: next (u64), type (u32), len (u32), data.
    let mut seed = Vec::with_capacity(16 + RNG_SEED_LEN);
    seed.extend_from_slice(&0u64.to_le_bytes());
    seed.extend_from_slice(&SETUP_RNG_SEED.to_le_bytes());
    seed.extend_from_slice(&(RNG_SEED_LEN as u32).to_le_bytes());
    seed.extend_from_slice(rng_seed);
    ram.write(SETUP_DATA, &seed)?;

    mptable::write(ram)?;
    super::raw::write_long_mode_structures(ram)?;

    let hdr = &mut params.hdr;
    hdr.type_of_loader = KERNEL_LOADER_OTHER;
    hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
    hdr.header = KERNEL_HDR_MAGIC;
    hdr.kernel_alignment = KERNEL_MIN_ALIGNMENT;
    hdr.cmd_line_ptr = CMDLINE_ADDR as u32;
    hdr.cmdline_size = cmdline_len;
    hdr.setup_data = SETUP_DATA;
    if initrd_len > 0 {
        hdr.ramdisk_image = initrd_addr as u32;
        hdr.ramdisk_size = initrd_len as u32;
    }
    let e820 = [(0, EBDA_START), (HIMEM_START, ram_end - HIMEM_START)];
    for (i, &(addr, size)) in e820.iter().enumerate() {
        params.e820_table[i] = boot_e820_entry { addr, size, r#type: E820_RAM };
    }
    params.e820_entries = e820.len() as u8;
    ram.write(ZERO_PAGE, params.as_slice())?;

    let regs = kvm_regs { rip: entry, rsi: ZERO_PAGE, rsp: BOOT_STACK_TOP, rflags: 0x2, ..Default::default() };
    Ok(Entry { regs, task_page: task.map(|(address, _)| address) })
}

/// Where the command line may reach: up to the MP table.
const CMDLINE_ROOM: usize = (EBDA_START - CMDLINE_ADDR) as usize;

/// The most command line an ELF kernel takes, its NUL included: the size
/// of its `boot_command_line` (`COMMAND_LINE_SIZE`), if its symbol table
/// says; else upstream's.
fn elf_cmdline_size(elf: &[u8]) -> usize {
    elf_symbol(elf, "boot_command_line")
        .and_then(|(_, size)| usize::try_from(size).ok())
        .filter(|&size| size > 0)
        .unwrap_or(LINUX_CMDLINE_SIZE)
}

/// The address and size of the ELF's symbol `name`, if it has one.
fn elf_symbol(elf: &[u8], name: &str) -> Option<(u64, u64)> {
    use object::{Object, ObjectSymbol};
    let file = object::File::parse(elf).ok()?;
    let symbol = file.symbols().find(|s| s.name() == Ok(name))?;
    Some((symbol.address(), symbol.size()))
}

// The boot structures must not overlap each other or the long-mode tables.
const _: () = {
    assert!(SETUP_DATA + 0x1000 <= ZERO_PAGE);
    assert!(ZERO_PAGE + 0x1000 <= BOOT_STACK_TOP);
    assert!(BOOT_STACK_TOP < layout::PAGE_TABLES_ADDR);
    assert!(layout::PAGE_TABLES_ADDR + 3 * 0x1000 <= CMDLINE_ADDR);
    assert!(CMDLINE_ADDR + HVSIM_CMDLINE_SIZE as u64 <= EBDA_START);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// What this test program's ELF says, as a kernel's would.
    #[allow(non_upper_case_globals)]
    #[used]
    #[no_mangle]
    static boot_command_line: [u8; 12288] = [0; 12288];

    #[test]
    fn the_command_line_limit_is_the_kernels_own() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_cmdline_size(&me), 12288, "the size of the ELF's boot_command_line");
        assert_eq!(elf_cmdline_size(b"not an ELF"), LINUX_CMDLINE_SIZE);
    }
}
