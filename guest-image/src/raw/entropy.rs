//! `entropy`: draws 16 bytes from its seeded stream, prints them, and takes a
//! branch per byte (so the seed changes the path, not only the data), then
//! sends the coin flips as a message on the hypercall channel.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

pub fn build() -> RawImage {
    let mut p = Program::new("entropy");
    let buf = p.bytes(&[0; 16]).0;
    let (flips, _) = p.bytes(b"flips: ................");
    let (heads, _) = p.bytes(b"H");
    let (tails, _) = p.bytes(b"T");
    p.random(buf, 16);
    p.print("entropy: bytes ");
    dynasm!(p.a ; mov rdi, [=>buf] ; bswap rdi);
    p.print_hex_rdi();
    dynasm!(p.a ; lea rax, [=>buf] ; mov rdi, [rax + 8] ; bswap rdi);
    p.print_hex_rdi();
    p.print("\nentropy: coins ");
    dynasm!(p.a
        ; xor ebx, ebx
        ; next:
        ; lea rax, [=>buf]
        ; test BYTE [rax + rbx], 1
        ; jz >tail
        ; lea rsi, [=>heads]
        ; mov al, 72            // 'H'
        ; jmp >flip
        ; tail:
        ; lea rsi, [=>tails]
        ; mov al, 84            // 'T'
        ; flip:
        ; lea rdx, [=>flips]
        ; mov [rdx + rbx + 7], al
        ; mov ecx, 1
        ; call ->rt_print
        ; inc ebx
        ; cmp ebx, 16
        ; jb <next
    );
    p.print("\n");
    dynasm!(p.a ; lea rsi, [=>flips] ; mov ecx, 23);
    p.send_rsi_rcx();
    p.exit(0);
    p.finish()
}
