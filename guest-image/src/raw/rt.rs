//! A tiny runtime for raw guests, assembled with dynasm.
//!
//! [`Program`] starts every guest with `lidt` of an IDT it builds on the host
//! side: exceptions report `PANIC(vector)` on the hvsim port (so a fault ends
//! the run with a clear reason instead of a silent triple fault), and each of
//! the 16 legacy IRQ vectors (0x20..0x2F after [`Program::pic_init`]) calls a
//! handler the guest may define and then sends the EOI. The subroutines
//! (`rt_*`) follow the SysV calling convention and run in ring 0.
//!
//! Ring-3 code reaches the machine only through system calls made with
//! `ud2` (call number in `rax`, see [`sys`]): port I/O and software
//! interrupts from ring 3 are not usable on every host (nested `kvm_pvm`
//! raises #GP on ring-3 port I/O whatever IOPL says, and #UD for `int n`),
//! but every host delivers exceptions from ring 3 faithfully. The #UD handler
//! recognises `ud2` in ring 3, skips it, and enables interrupts before the
//! call's exit, so a due timer interrupt is injected there, in the middle of
//! the ring-3 program.

use dynasmrt::x64::X64Relocation;
use dynasmrt::{dynasm, DynamicLabel, DynasmApi, DynasmLabelApi, VecAssembler};
use hvsim_abi::{hc, port, raw};
use hvsim_vmm::boot::raw::RawImage;

pub type Asm = VecAssembler<X64Relocation>;

/// Vector of IRQ 0 once the PICs are initialised by [`Program::pic_init`].
pub const IRQ_BASE: u8 = 0x20;
/// Ring-3 stack top used by [`Program::enter_user`].
pub const USER_STACK_TOP: u64 = 0xF_0000;
/// Exceptions for which the CPU pushes an error code.
const HAS_ERROR_CODE: [u8; 9] = [8, 10, 11, 12, 13, 14, 17, 21, 30];
/// RFLAGS for ring-3 code: IF set.
const USER_RFLAGS: i32 = 0x0202;
/// System calls (`rax` at `ud2` in ring 3).
pub mod sys {
    /// Returns the virtual clock in `rax` (clobbers rcx, rdx).
    pub const CLOCK: i32 = 0;
    /// Leaves ring 3 for good: continues in ring 0 at the label from
    /// [`super::Program::user_return`], interrupts off, on the kernel stack.
    pub const LEAVE_USER: i32 = 1;
}

pub struct Program {
    pub a: Asm,
    name: String,
    irq_handlers: [Option<DynamicLabel>; 16],
    /// Where `sys::LEAVE_USER` continues in ring 0.
    user_return: Option<DynamicLabel>,
    data: Vec<(DynamicLabel, Vec<u8>)>,
}

impl Program {
    pub fn new(name: &str) -> Program {
        let mut a = Asm::new(raw::LOAD_ADDR as usize);
        dynasm!(a
            ; .arch x64
            ; lidt [->idtr]
        );
        Program { a, name: name.into(), irq_handlers: [None; 16], user_return: None, data: vec![] }
    }

    /// A label for read-only bytes placed after the code; returns (label, length).
    pub fn bytes(&mut self, bytes: &[u8]) -> (DynamicLabel, usize) {
        let l = self.a.new_dynamic_label();
        self.data.push((l, bytes.to_vec()));
        (l, bytes.len())
    }

    /// A label for a zeroed, writable 8-byte variable.
    pub fn var(&mut self) -> DynamicLabel {
        self.bytes(&[0; 8]).0
    }

    /// The label the guest must define for IRQ `irq`'s handler (a function
    /// called with interrupts off; it may clobber caller-saved registers).
    pub fn on_irq(&mut self, irq: u8) -> DynamicLabel {
        let l = self.a.new_dynamic_label();
        self.irq_handlers[usize::from(irq)] = Some(l);
        l
    }

    /// The label the guest must define where `sys::LEAVE_USER` continues.
    pub fn user_return(&mut self) -> DynamicLabel {
        let l = self.a.new_dynamic_label();
        self.user_return = Some(l);
        l
    }

    /// Makes system call `nr` from ring 3 (result in `rax`).
    pub fn syscall(&mut self, nr: i32) {
        dynasm!(self.a
            ; mov eax, nr
            ; ud2
        );
    }

    /// Prints `text` on the serial console.
    pub fn print(&mut self, text: &str) {
        let (l, n) = self.bytes(text.as_bytes());
        dynasm!(self.a
            ; lea rsi, [=>l]
            ; mov ecx, n as i32
            ; call ->rt_print
        );
    }

    /// Prints `rdi` as 16 hex digits.
    pub fn print_hex_rdi(&mut self) {
        dynasm!(self.a ; call ->rt_print_hex);
    }

    /// Prints `rdi` in decimal.
    pub fn print_dec_rdi(&mut self) {
        dynasm!(self.a ; call ->rt_print_dec);
    }

    /// Ends the run with `status`.
    pub fn exit(&mut self, status: u8) {
        dynasm!(self.a
            ; mov eax, hc::cmd(hc::op::EXIT, u32::from(status)) as i32
            ; mov dx, hc::CMD as i16
            ; out dx, eax
            ; never:
            ; jmp <never
        );
    }

    /// Initialises both PICs (vectors 0x20 and 0x28) with IRQ mask `mask`
    /// (bit n masks IRQ n; IRQ 2 is the cascade).
    pub fn pic_init(&mut self, mask: u16) {
        let [lo, hi] = mask.to_le_bytes();
        for (port, val) in [
            (0x20, 0x11),
            (0xA0, 0x11), // ICW1: edge, cascade, ICW4 follows
            (0x21, IRQ_BASE),
            (0xA1, IRQ_BASE + 8), // ICW2: vector bases
            (0x21, 0x04),
            (0xA1, 0x02), // ICW3: slave on IRQ 2
            (0x21, 0x01),
            (0xA1, 0x01), // ICW4: 8086 mode
            (0x21, lo),
            (0xA1, hi), // OCW1: masks
        ] {
            self.outb(port, val);
        }
    }

    /// `OUT port, val` of one byte (clobbers dx, al).
    pub fn outb(&mut self, port: u16, val: u8) {
        dynasm!(self.a
            ; mov dx, port as i16
            ; mov al, val as i8
            ; out dx, al
        );
    }

    /// Programs PIT channel 0 in `mode` (0 = one-shot, 2 = periodic) with `count`.
    pub fn pit_start(&mut self, mode: u8, count: u16) {
        let [lo, hi] = count.to_le_bytes();
        self.outb(0x43, 0x30 | (mode << 1));
        self.outb(0x40, lo);
        self.outb(0x40, hi);
    }

    /// Reads the virtual clock into `rax` (clobbers rdx).
    pub fn clock_rax(&mut self) {
        dynasm!(self.a ; call ->rt_clock);
    }

    /// Arms the hvsim alarm at absolute virtual time `rdi`.
    pub fn alarm_at_rdi(&mut self) {
        dynasm!(self.a
            ; mov eax, edi
            ; mov dx, hc::ALARM_LO as i16
            ; out dx, eax
            ; mov rax, rdi
            ; shr rax, 32
            ; mov dx, hc::ALARM_HI as i16
            ; out dx, eax
        );
    }

    /// Fills `n` bytes at label `dest` from the guest's seeded entropy stream.
    pub fn random(&mut self, dest: DynamicLabel, n: u32) {
        dynasm!(self.a
            ; mov eax, hc::cmd(hc::op::RANDOM, n) as i32
            ; mov dx, hc::CMD as i16
            ; out dx, eax
            ; lea rdi, [=>dest]
            ; mov ecx, n as i32
            ; mov dx, hc::DATA as i16
            ; rep insb
        );
    }

    /// An SDK draw of `n` (at most 8) bytes into `dest`, announced first as
    /// the SDKs do (`{"hvsim_draw": {"options": options}}`): the explorer
    /// may snapshot at it and choose its value.
    pub fn draw(&mut self, dest: DynamicLabel, n: u32, options: u32) {
        assert!((1..=8).contains(&n), "a draw reads at most 8 bytes");
        let (l, len) = self.bytes(format!(r#"{{"hvsim_draw":{{"options":{options}}}}}"#).as_bytes());
        dynasm!(self.a ; lea rsi, [=>l] ; mov ecx, len as i32);
        self.send_rsi_rcx();
        self.random(dest, n);
    }

    /// Sends `rcx` bytes at `rsi` as one message on the hvsim channel.
    pub fn send_rsi_rcx(&mut self) {
        dynasm!(self.a
            ; mov dx, hc::DATA as i16
            ; rep outsb
            ; mov eax, hc::cmd(hc::op::SEND, 0) as i32
            ; mov dx, hc::CMD as i16
            ; out dx, eax
        );
    }

    /// Drops to ring 3 at `entry` with interrupts on.
    pub fn enter_user(&mut self, entry: DynamicLabel) {
        let user_ss = i32::from(raw::selector::USER_DATA);
        let user_cs = i32::from(raw::selector::USER_CODE);
        dynasm!(self.a
            ; push DWORD user_ss
            ; mov rax, QWORD USER_STACK_TOP as i64
            ; push rax
            ; push DWORD USER_RFLAGS
            ; push DWORD user_cs
            ; lea rax, [=>entry]
            ; push rax
            ; iretq
        );
    }

    /// Appends the runtime, the stubs, the data and the IDT; returns the image.
    pub fn finish(mut self) -> RawImage {
        self.emit_subroutines();
        // Exceptions: make the frame uniform (push 0 where the CPU pushes no
        // error code), then report vector, RIP, CS and error code on the
        // console and end the run with PANIC(vector).
        let mut exception_stubs = Vec::with_capacity(32);
        for v in 0u8..32 {
            let l = self.a.new_dynamic_label();
            exception_stubs.push(l);
            dynasm!(self.a ; =>l);
            if v == 6 {
                dynasm!(self.a ; jmp ->rt_invalid_opcode);
                continue;
            }
            if !HAS_ERROR_CODE.contains(&v) {
                dynasm!(self.a ; push 0);
            }
            dynasm!(self.a
                ; push i32::from(v)
                ; jmp ->rt_exception
            );
        }
        // #UD: a `ud2` in ring 3 is a system call; anything else a fault.
        dynasm!(self.a
            ; ->rt_invalid_opcode:
            ; test BYTE [rsp + 8], 3            // CS.RPL of the interrupted code
            ; jz >fault
            ; mov rdx, [rsp]                    // its RIP
            ; cmp WORD [rdx], 0x0B0F            // ud2
            ; jne >fault
            ; add QWORD [rsp], 2
            ; cmp eax, sys::LEAVE_USER
            ; je >leave
            ; sti
            ; call ->rt_clock
            ; iretq
            ; leave:
            ; mov rsp, QWORD raw::KERNEL_STACK_TOP as i64
        );
        match self.user_return {
            Some(target) => dynasm!(self.a ; jmp =>target),
            None => dynasm!(self.a ; jmp >fault),
        }
        dynasm!(self.a
            ; fault:
            ; push 0
            ; push 6
            ; jmp ->rt_exception
        );
        let (what, what_len) = self.bytes(b"\nraw guest: exception, vector/rip/cs/error: ");
        dynasm!(self.a
            ; ->rt_exception:
            ; lea rsi, [=>what]
            ; mov ecx, what_len as i32
            ; call ->rt_print
            ; mov rdi, [rsp] ; call ->rt_print_hex
            ; mov rdi, [rsp + 16] ; call ->rt_print_hex
            ; mov rdi, [rsp + 24] ; call ->rt_print_hex
            ; mov rdi, [rsp + 8] ; call ->rt_print_hex
            ; mov eax, [rsp]
            ; or eax, hc::cmd(hc::op::PANIC, 0) as i32
            ; mov dx, hc::CMD as i16
            ; out dx, eax
            ; spin:
            ; jmp <spin
        );
        let mut irq_stubs = Vec::with_capacity(16);
        for irq in 0u8..16 {
            let l = self.a.new_dynamic_label();
            irq_stubs.push(l);
            dynasm!(self.a
                ; =>l
                ; push rax ; push rcx ; push rdx ; push rsi ; push rdi
                ; push r8 ; push r9 ; push r10 ; push r11
            );
            if let Some(h) = self.irq_handlers[usize::from(irq)] {
                dynasm!(self.a ; call =>h);
            }
            if irq >= 8 {
                self.outb(0xA0, 0x20);
            }
            self.outb(0x20, 0x20);
            dynasm!(self.a
                ; pop r11 ; pop r10 ; pop r9 ; pop r8
                ; pop rdi ; pop rsi ; pop rdx ; pop rcx ; pop rax
                ; iretq
            );
        }
        for (label, bytes) in std::mem::take(&mut self.data) {
            dynasm!(self.a
                ; .align 8
                ; =>label
                ; .bytes bytes
            );
        }
        dynasm!(self.a
            ; .align 16
            ; ->idtr:
            ; .bytes [0u8; 16]
            ; ->idt:
            ; .bytes [0u8; 4096]
        );
        self.a.commit().expect("runtime labels resolve");
        let labels = self.a.labels();
        let addr = |l: DynamicLabel| raw::LOAD_ADDR + labels.resolve_dynamic(l).expect("defined").0 as u64;
        let idtr_off = labels.resolve_static(&dynasmrt::components::StaticLabel::global("idtr")).expect("defined").0;
        let idt_off = idtr_off + 16;
        let mut gates: Vec<(u8, u64)> = Vec::new();
        for (v, l) in exception_stubs.iter().enumerate() {
            gates.push((v as u8, addr(*l)));
        }
        for (irq, l) in irq_stubs.iter().enumerate() {
            gates.push((IRQ_BASE + irq as u8, addr(*l)));
        }
        let mut code = self.a.finalize().expect("assembles");
        let idt_base = raw::LOAD_ADDR + idt_off as u64;
        code[idtr_off..idtr_off + 2].copy_from_slice(&4095u16.to_le_bytes());
        code[idtr_off + 2..idtr_off + 10].copy_from_slice(&idt_base.to_le_bytes());
        for (vector, target) in gates {
            let e = idt_off + usize::from(vector) * 16;
            code[e..e + 16].copy_from_slice(&interrupt_gate(target));
        }
        RawImage { name: self.name, code }
    }

    fn emit_subroutines(&mut self) {
        let com1 = port::COM1 as i16;
        dynasm!(self.a
            // rt_print(rsi = bytes, ecx = length): one string OUT, one exit.
            ; ->rt_print:
            ; mov dx, com1
            ; rep outsb
            ; ret

            // rt_print_hex(rdi): 16 hex digits.
            ; ->rt_print_hex:
            ; sub rsp, 24
            ; mov rcx, 16
            ; ->hex_loop:
            ; mov rax, rdi
            ; and eax, 0xF
            ; cmp al, 10
            ; jb ->hex_digit
            ; add al, 39          // 'a' - '0' - 10
            ; ->hex_digit:
            ; add al, 48          // '0'
            ; mov [rsp + rcx - 1], al
            ; shr rdi, 4
            ; dec rcx
            ; jnz ->hex_loop
            ; mov rsi, rsp
            ; mov ecx, 16
            ; call ->rt_print
            ; add rsp, 24
            ; ret

            // rt_print_dec(rdi): unsigned decimal.
            ; ->rt_print_dec:
            ; sub rsp, 40
            ; mov rax, rdi
            ; lea rsi, [rsp + 32]
            ; mov r8, 10
            ; ->dec_loop:
            ; xor edx, edx
            ; div r8
            ; add dl, 48
            ; dec rsi
            ; mov [rsi], dl
            ; test rax, rax
            ; jnz ->dec_loop
            ; lea rcx, [rsp + 32]
            ; sub rcx, rsi
            ; call ->rt_print
            ; add rsp, 40
            ; ret

            // rt_clock() -> rax: virtual nanoseconds (two port reads).
            ; ->rt_clock:
            ; mov dx, hc::CLOCK_LO as i16
            ; in eax, dx
            ; mov ecx, eax
            ; mov dx, hc::CLOCK_HI as i16
            ; in eax, dx
            ; shl rax, 32
            ; or rax, rcx
            ; ret
        );
    }
}

/// A 64-bit interrupt gate (present, DPL 0) to `target` in the kernel code segment.
fn interrupt_gate(target: u64) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[0..2].copy_from_slice(&(target as u16).to_le_bytes());
    g[2..4].copy_from_slice(&raw::selector::KERNEL_CODE.to_le_bytes());
    g[5] = 0x8E;
    g[6..8].copy_from_slice(&((target >> 16) as u16).to_le_bytes());
    g[8..12].copy_from_slice(&((target >> 32) as u32).to_le_bytes());
    g
}
