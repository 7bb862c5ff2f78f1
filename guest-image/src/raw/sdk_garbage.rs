//! `sdk-garbage`: reports setup complete, then sends every kind of garbage
//! on the SDK channel (not JSON, wrong shapes, unknown kinds, an over-long
//! line, bytes that are not UTF-8, the last taking ~70 ms of virtual time)
//! after one valid assertion, and idles. The explorer must count the garbage and carry on.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::irq;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

fn send(p: &mut Program, bytes: &[u8]) {
    let (l, n) = p.bytes(bytes);
    dynasm!(p.a ; lea rsi, [=>l] ; mov ecx, n as i32);
    p.send_rsi_rcx();
}

pub fn build() -> RawImage {
    let mut p = Program::new("sdk-garbage");
    let woke = p.var();
    let alarm = p.on_irq(irq::ALARM);
    p.pic_init(!((1u16 << 2) | (1 << irq::ALARM)));
    send(&mut p, br#"{"antithesis_setup":{"status":"complete","details":null}}"#);
    send(
        &mut p,
        br#"{"antithesis_assert":{"id":"garbage guest: still reporting","message":"garbage guest: still reporting","condition":true,"hit":true,"must_hit":true,"assert_type":"sometimes","display_type":"Sometimes","location":{},"details":null}}"#,
    );
    let long = vec![b'x'; 70 * 1024];
    for garbage in [
        &b"this is not JSON"[..],
        b"[1,2,3]",
        br#"{"two":1,"keys":2}"#,
        br#"{"antithesis_assert":{"id":"g","display_type":"Bogus","hit":true,"condition":true}}"#,
        br#"{"antithesis_assert":{"id":"g","display_type":"Always"}}"#,
        br#"{"antithesis_setup":{"status":"exploding"}}"#,
        &[0xff, 0xfe, 0x00, 0x80],
        &long,
    ] {
        send(&mut p, garbage);
    }
    dynasm!(p.a ; idle:);
    p.clock_rax();
    dynasm!(p.a ; mov rdi, QWORD 1_000_000 ; add rdi, rax ; mov QWORD [=>woke], 0);
    p.alarm_at_rdi();
    dynasm!(p.a
        ; sti
        ; sleep:
        ; hlt
        ; cmp QWORD [=>woke], 0
        ; je <sleep
        ; cli
        ; jmp <idle
        ; =>alarm
        ; mov QWORD [=>woke], 1
        ; ret
    );
    p.finish()
}
