//! `idle`: arms the hvsim alarm one hour of virtual time ahead and halts.
//! The VMM jumps the clock straight to the deadline, so the hour costs no
//! wall time.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::irq;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

const HOUR_NS: i64 = 3_600_000_000_000;

pub fn build() -> RawImage {
    let mut p = Program::new("idle");
    let woke = p.var();
    let handler = p.on_irq(irq::ALARM);
    // Everything masked but the cascade and the alarm.
    p.pic_init(!((1u16 << 2) | (1 << irq::ALARM)));
    p.print("idle: sleeping for one hour of virtual time\n");
    p.clock_rax();
    dynasm!(p.a
        ; mov rdi, QWORD HOUR_NS
        ; add rdi, rax
    );
    p.alarm_at_rdi();
    dynasm!(p.a
        ; sti
        ; sleep:
        ; hlt
        ; cmp QWORD [=>woke], 0
        ; je <sleep
        ; cli
    );
    p.print("idle: woke at virtual ns ");
    p.clock_rax();
    dynasm!(p.a ; mov rdi, rax);
    p.print_dec_rdi();
    p.print("\n");
    p.exit(0);
    dynasm!(p.a
        ; =>handler
        ; mov QWORD [=>woke], 1
        ; ret
    );
    p.finish()
}
