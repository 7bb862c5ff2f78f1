//! Guests that break the machine's rules, one way each. Every one must end
//! its run with a clear reason and leave the VMM unharmed.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::hc;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

pub fn bad_port() -> RawImage {
    let mut p = Program::new("bad-port");
    p.print("bad-port: writing to port 0x1234\n");
    dynasm!(p.a ; mov dx, 0x1234 ; mov al, 1 ; out dx, al);
    p.exit(0);
    p.finish()
}

pub fn bad_hypercall() -> RawImage {
    let mut p = Program::new("bad-hypercall");
    p.print("bad-hypercall: sending command 0x7f\n");
    dynasm!(p.a
        ; mov eax, hc::cmd(0x7F, 0) as i32
        ; mov dx, hc::CMD as i16
        ; out dx, eax
    );
    p.exit(0);
    p.finish()
}

pub fn wild_memory() -> RawImage {
    let mut p = Program::new("wild-memory");
    p.print("wild-memory: writing beyond the end of RAM\n");
    // Identity-mapped but backed by no RAM: an MMIO exit nobody claims.
    dynasm!(p.a ; mov rax, QWORD 0x3000_0000 ; mov QWORD [rax], 1);
    p.exit(0);
    p.finish()
}

pub fn page_fault() -> RawImage {
    let mut p = Program::new("page-fault");
    p.print("page-fault: reading an unmapped address\n");
    dynasm!(p.a ; mov rax, QWORD 0x10_0000_0000 ; mov rax, [rax]);
    p.exit(0);
    p.finish()
}

pub fn triple_fault() -> RawImage {
    let mut p = Program::new("triple-fault");
    let empty_idtr = p.bytes(&[0; 10]).0;
    p.print("triple-fault: dropping the IDT and faulting\n");
    dynasm!(p.a ; lidt [=>empty_idtr] ; ud2);
    p.exit(0);
    p.finish()
}
