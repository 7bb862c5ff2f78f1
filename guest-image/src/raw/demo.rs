//! `demo`: the built-in target of `hvsim explore`. A guesser tries to open a
//! vault with a three-digit code, one random digit at a time (1 in 10 each,
//! so 1 in 1000 per attempt), one attempt per millisecond of virtual time.
//! It reports through the SDK protocol on the hypercall channel: progress
//! as sometimes-assertions, and the bug — the vault opening — as a failing
//! always-assertion; each digit is an SDK draw (announced, so the explorer
//! can choose it). An explorer that snapshots where a new digit came out
//! right needs tens of branches to open it; starting every timeline over
//! needs hundreds.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_abi::irq;
use hvsim_vmm::boot::raw::RawImage;

use super::rt::Program;

/// The vault's code.
pub const CODE: [u8; 3] = [7, 3, 9];
/// Virtual time between attempts.
const ATTEMPT_NS: i64 = 1_000_000;

pub const VAULT_CLOSED: &str = "the vault stays closed";
pub const FIRST_DIGIT: &str = "the first digit is right";
pub const TWO_DIGITS: &str = "the first two digits are right";
pub const STARTED: &str = "the guesser started";
pub const BAD_DIGIT: &str = "a digit above 9 came up";
/// The line above that declares the first property: each property's
/// location is its declaration's line, as an SDK reports its macro's.
const FIRST_PROPERTY_LINE: u32 = line!() - 7;

fn assertion(display: &str, assert_type: &str, message: &str, must_hit: bool, hit: bool, condition: bool) -> String {
    let order = [VAULT_CLOSED, FIRST_DIGIT, TWO_DIGITS, STARTED, BAD_DIGIT];
    let line = FIRST_PROPERTY_LINE + order.iter().position(|&m| m == message).expect("a demo property") as u32;
    format!(
        r#"{{"antithesis_assert":{{"id":"{message}","message":"{message}","condition":{condition},"hit":{hit},"must_hit":{must_hit},"assert_type":"{assert_type}","display_type":"{display}","location":{{"class":"","function":"demo","file":"guest-image/src/raw/demo.rs","begin_line":{line},"begin_column":11}},"details":null}}}}"#
    )
}

/// Emits code that sends `json` as one message.
fn send(p: &mut Program, json: &str) {
    let (l, n) = p.bytes(json.as_bytes());
    dynasm!(p.a ; lea rsi, [=>l] ; mov ecx, n as i32);
    p.send_rsi_rcx();
}

pub fn build() -> RawImage {
    let mut p = Program::new("demo");
    let woke = p.var();
    let digit = p.var();
    let alarm = p.on_irq(irq::ALARM);
    p.pic_init(!((1u16 << 2) | (1 << irq::ALARM)));

    // Register every assertion before any is reached, then report setup.
    for json in [
        assertion("Always", "always", VAULT_CLOSED, true, false, false),
        assertion("Sometimes", "sometimes", FIRST_DIGIT, true, false, false),
        assertion("Sometimes", "sometimes", TWO_DIGITS, true, false, false),
        assertion("Reachable", "reachability", STARTED, true, false, false),
        assertion("Unreachable", "reachability", BAD_DIGIT, false, false, false),
    ] {
        send(&mut p, &json);
    }
    send(&mut p, r#"{"antithesis_setup":{"status":"complete","details":{"guest":"demo"}}}"#);
    send(&mut p, &assertion("Reachable", "reachability", STARTED, true, true, true));

    dynasm!(p.a ; attempt:);
    // Sleep one attempt's worth of virtual time.
    p.clock_rax();
    dynasm!(p.a
        ; mov rdi, QWORD ATTEMPT_NS
        ; add rdi, rax
        ; mov QWORD [=>woke], 0
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
    // Each digit is an SDK draw, and each of the first two is a sometimes-
    // assertion evaluated every time (true or false), as a program on the
    // SDKs reports them.
    for (k, &want) in CODE.iter().enumerate() {
        p.draw(digit, 1, 10);
        let right = p.a.new_dynamic_label();
        dynasm!(p.a
            ; movzx eax, BYTE [=>digit]
            ; xor edx, edx
            ; mov ecx, 10
            ; div ecx
            ; cmp edx, want as i32
            ; je =>right
        );
        match k {
            0 => send(&mut p, &assertion("Sometimes", "sometimes", FIRST_DIGIT, true, true, false)),
            1 => send(&mut p, &assertion("Sometimes", "sometimes", TWO_DIGITS, true, true, false)),
            _ => {}
        }
        dynasm!(p.a ; jmp <attempt ; =>right);
        match k {
            0 => send(&mut p, &assertion("Sometimes", "sometimes", FIRST_DIGIT, true, true, true)),
            1 => send(&mut p, &assertion("Sometimes", "sometimes", TWO_DIGITS, true, true, true)),
            _ => send(&mut p, &assertion("Always", "always", VAULT_CLOSED, true, true, false)),
        }
    }
    dynasm!(p.a ; jmp <attempt);

    dynasm!(p.a ; =>alarm ; mov QWORD [=>woke], 1 ; ret);
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_property_points_at_its_declaration() {
        let source: Vec<&str> = include_str!("demo.rs").lines().collect();
        for (i, name) in ["VAULT_CLOSED", "FIRST_DIGIT", "TWO_DIGITS", "STARTED", "BAD_DIGIT"].iter().enumerate() {
            let line = source[(FIRST_PROPERTY_LINE as usize) + i - 1];
            assert!(
                line.starts_with(&format!("pub const {name}: &str")),
                "line {}: {line}",
                FIRST_PROPERTY_LINE as usize + i
            );
        }
    }
}
