//! `serial`: prints on the console two ways, a string OUT (one exit for the
//! whole line) and byte by byte with the status-register polling of a classic
//! UART driver.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::port::COM1;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

pub fn build() -> RawImage {
    let mut p = Program::new("serial");
    p.print("serial: hello from a raw hvsim guest\n");
    let (line, len) = p.bytes(b"serial: this line went out one polled byte at a time\n");
    dynasm!(p.a
        ; lea rsi, [=>line]
        ; mov ecx, len as i32
        ; next:
        ; mov dx, (COM1 + 5) as i16
        ; wait:
        ; in al, dx
        ; test al, 0x20       // LSR.THRE
        ; jz <wait
        ; lodsb
        ; mov dx, COM1 as i16
        ; out dx, al
        ; dec ecx
        ; jnz <next
    );
    p.exit(0);
    p.finish()
}
