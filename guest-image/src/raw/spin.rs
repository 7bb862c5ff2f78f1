//! `spin`: waits in ring 3 for a timer tick with a loop that never exits.
//! Without a PMU nothing can preempt it at a deterministic point: only the
//! VMM's wall-clock watchdog gets it going, and the run is then marked
//! non-replayable.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::irq;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::{sys, Program};

pub fn build() -> RawImage {
    let mut p = Program::new("spin");
    let ticks = p.var();
    let tick = p.on_irq(irq::PIT);
    let user = p.a.new_dynamic_label();
    let back_in_ring0 = p.user_return();
    p.pic_init(!(1u16 << irq::PIT));
    p.pit_start(2, 11932); // 100 Hz
    p.print("spin: waiting for a timer tick in a loop with no exits\n");
    p.enter_user(user);
    dynasm!(p.a
        ; =>user
        ; wait:
        ; cmp QWORD [=>ticks], 0
        ; je <wait
    );
    p.syscall(sys::LEAVE_USER);
    dynasm!(p.a ; =>back_in_ring0);
    p.print("spin: a tick arrived\n");
    p.exit(0);
    dynasm!(p.a
        ; =>tick
        ; inc QWORD [=>ticks]
        ; ret
    );
    p.finish()
}
