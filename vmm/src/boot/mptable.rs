//! A minimal Intel MultiProcessor Specification (1.4) table: one processor
//! (the boot CPU) and an ISA bus, in PIC mode (IMCR present). Linux without
//! ACPI discovers its CPU through it. The machine has no I/O APIC, so there
//! are no interrupt entries: legacy IRQs go through the 8259 pair.

use crate::error::Result;
use crate::memory::GuestRam;

/// Where the floating pointer structure goes: the start of the EBDA, one of
/// the places Linux scans.
pub const MPTABLE_ADDR: u64 = 0x9_FC00;

fn checksum(bytes: &[u8]) -> u8 {
    0u8.wrapping_sub(bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)))
}

/// The table's bytes, to be placed at `addr`: floating pointer, then the
/// configuration table it points to.
pub fn build(addr: u64) -> Vec<u8> {
    const FPS_LEN: usize = 16;
    const HEADER_LEN: usize = 44;
    let table_addr = addr + FPS_LEN as u64;

    let mut processor = [0u8; 20];
    processor[0] = 0; // entry type: processor
    processor[1] = 0; // local APIC ID
    processor[2] = 0x14; // local APIC version
    processor[3] = 0x03; // enabled, bootstrap processor
    processor[4..8].copy_from_slice(&0x600u32.to_le_bytes()); // CPU signature (family 6)
    processor[8..12].copy_from_slice(&0x201u32.to_le_bytes()); // features: FPU, APIC

    let mut bus = [0u8; 8];
    bus[0] = 1; // entry type: bus
    bus[1] = 0; // bus ID
    bus[2..8].copy_from_slice(b"ISA   ");

    let entries: Vec<u8> = processor.iter().chain(bus.iter()).copied().collect();
    let mut table = vec![0u8; HEADER_LEN];
    table[0..4].copy_from_slice(b"PCMP");
    let length = (HEADER_LEN + entries.len()) as u16;
    table[4..6].copy_from_slice(&length.to_le_bytes());
    table[6] = 4; // spec revision 1.4
    table[8..16].copy_from_slice(b"HVSIM   ");
    table[16..28].copy_from_slice(b"HVSIM       ");
    table[34..36].copy_from_slice(&2u16.to_le_bytes()); // entry count
    table[36..40].copy_from_slice(&0xFEE0_0000u32.to_le_bytes()); // local APIC address
    table.extend_from_slice(&entries);
    table[7] = checksum(&table);

    let mut fps = [0u8; FPS_LEN];
    fps[0..4].copy_from_slice(b"_MP_");
    fps[4..8].copy_from_slice(&(table_addr as u32).to_le_bytes());
    fps[8] = 1; // length in 16-byte units
    fps[9] = 4; // spec revision 1.4
    fps[12] = 0x80; // IMCR present: PIC mode
    fps[10] = checksum(&fps);

    let mut out = fps.to_vec();
    out.extend_from_slice(&table);
    out
}

pub fn write(ram: &GuestRam) -> Result<()> {
    ram.write(MPTABLE_ADDR, &build(MPTABLE_ADDR))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_and_pointers_are_consistent() {
        let t = build(MPTABLE_ADDR);
        let sum = |b: &[u8]| b.iter().fold(0u8, |a, x| a.wrapping_add(*x));
        assert_eq!(&t[0..4], b"_MP_");
        assert_eq!(sum(&t[0..16]), 0);
        let ptr = u32::from_le_bytes(t[4..8].try_into().unwrap()) as u64;
        assert_eq!(ptr, MPTABLE_ADDR + 16);
        let table = &t[16..];
        assert_eq!(&table[0..4], b"PCMP");
        let len = u16::from_le_bytes([table[4], table[5]]) as usize;
        assert_eq!(len, table.len());
        assert_eq!(sum(table), 0);
        // The whole table stays below the BIOS area.
        assert!(MPTABLE_ADDR + t.len() as u64 <= 0xA_0000);
    }
}
