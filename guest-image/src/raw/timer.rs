//! `timer`: the PIT in periodic mode (~10 kHz) interrupts ring-3 code that
//! computes a checksum and asks for the virtual clock between chunks of work
//! (`int 0x80`; its port read is the exit at which a due interrupt is
//! injected). Then, back in ring 0, it sleeps on a 10 ms PIT one-shot.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::irq;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::{sys, Program};

/// Chunks of ring-3 work, each ended by one clock read.
const ROUNDS: i32 = 2000;
/// xorshift64 steps per chunk.
const STEPS: i32 = 5000;
/// PIT counts: ~100 µs periodic, ~10 ms one-shot.
const PERIODIC: u16 = 119;
const ONE_SHOT: u16 = 11932;

pub fn build() -> RawImage {
    let mut p = Program::new("timer");
    let ticks = p.var();
    let tick = p.on_irq(irq::PIT);
    let user = p.a.new_dynamic_label();
    let back_in_ring0 = p.user_return();

    p.pic_init(!(1u16 << irq::PIT));
    p.pit_start(2, PERIODIC);
    p.print("timer: computing in ring 3 under a periodic PIT\n");
    p.enter_user(user);

    dynasm!(p.a
        ; =>user
        ; mov r12, QWORD 0x9E37_79B9_7F4A_7C15u64 as i64
        ; mov r13d, ROUNDS
        ; round:
        ; mov r14d, STEPS
        ; step:
        ; mov rax, r12 ; shl rax, 13 ; xor r12, rax
        ; mov rax, r12 ; shr rax, 7 ; xor r12, rax
        ; mov rax, r12 ; shl rax, 17 ; xor r12, rax
        ; dec r14d
        ; jnz <step
    );
    p.syscall(sys::CLOCK);
    dynasm!(p.a
        ; xor r12, rax
        ; dec r13d
        ; jnz <round
    );
    p.syscall(sys::LEAVE_USER);

    dynasm!(p.a ; =>back_in_ring0);
    p.print("timer: ring 3 done, checksum ");
    dynasm!(p.a ; mov rdi, r12);
    p.print_hex_rdi();
    p.print(", ticks ");
    dynasm!(p.a ; mov rdi, [=>ticks]);
    p.print_dec_rdi();
    p.print("\n");
    dynasm!(p.a ; mov QWORD [=>ticks], 0);
    p.pit_start(0, ONE_SHOT);
    dynasm!(p.a
        ; sti
        ; sleep:
        ; hlt
        ; cmp QWORD [=>ticks], 0
        ; je <sleep
        ; cli
    );
    p.print("timer: one-shot fired at virtual ns ");
    p.clock_rax();
    dynasm!(p.a ; mov rdi, rax);
    p.print_dec_rdi();
    p.print("\n");
    p.exit(0);

    dynasm!(p.a
        ; =>tick
        ; inc QWORD [=>ticks]
        ; ret
    );
    p.finish()
}
