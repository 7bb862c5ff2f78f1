//! `ready`: boots the way hvsim's Linux guest does for the boot cache. It
//! says `READY`, reads its run's work from the inbox and prints it, then
//! prints random bytes drawn after that (from the run's seed, once a run
//! begins). Run on its own, nothing waits at `READY` and the inbox is empty.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::hc;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

/// The most of the inbox it reads.
const INBOX_MAX: u32 = 256;

pub fn build() -> RawImage {
    let mut p = Program::new("ready");
    let inbox = p.bytes(&[0; INBOX_MAX as usize]).0;
    let random = p.var();
    p.print("ready: booted\n");
    dynasm!(p.a
        ; mov eax, hc::cmd(hc::op::READY, 0) as i32
        ; mov dx, hc::CMD as i16
        ; out dx, eax
        ; mov eax, hc::cmd(hc::op::INBOX, INBOX_MAX) as i32
        ; out dx, eax
        ; in eax, dx
        ; mov ebx, eax
        ; mov ecx, eax
        ; lea rdi, [=>inbox]
        ; mov dx, hc::DATA as i16
        ; rep insb
    );
    p.print("ready: inbox [");
    dynasm!(p.a
        ; lea rsi, [=>inbox]
        ; mov ecx, ebx
        ; call ->rt_print
    );
    p.print("]\nready: random ");
    p.random(random, 8);
    dynasm!(p.a ; mov rdi, [=>random]);
    p.print_hex_rdi();
    p.print("\n");
    p.exit(0);
    p.finish()
}
