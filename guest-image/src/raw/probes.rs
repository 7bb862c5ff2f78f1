//! Probes of what this host really does, run as tiny raw guests.
//!
//! Some guarantees depend on the host honouring KVM's contract, and nested
//! hypervisors do not always: `kvm_pvm` runs guest code natively in ring 3,
//! so CPUID shows the host's CPU whatever `KVM_SET_CPUID2` said, and CR4.TSD
//! does not make user-mode RDTSC fault. hvsim checks rather than assumes,
//! works around what it can, and reports the rest. Probes run once per
//! process.

use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
use hvsim_vmm::host::HostProfile;
use hvsim_vmm::machine::HostSettings;
use hvsim_vmm::{cpuid, End, Machine, MachineConfig, Stop, Vtime};
use serde::Serialize;

use super::rt::{self, Program};

#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct HostProbes {
    /// The guest sees the CPUID hvsim configured (not the host's).
    pub cpuid_virtualized: bool,
    /// RDTSC in guest user mode faults when the guest sets CR4.TSD.
    pub user_rdtsc_traps: bool,
    /// What RDTSCP does in guest user mode with its CPUID bit hidden and
    /// CR4.TSD clear: `#UD` where KVM honours the CPUID policy, `runs`
    /// (host TSC) where it does not.
    pub user_rdtscp_hidden: Trap,
    /// An interrupt-window exit lands right after the guest enables
    /// interrupts (not wherever the host next happens to stop the guest).
    pub precise_irq_window: bool,
}

impl HostProbes {
    /// Runs the probes (once per process; later calls return the first result).
    pub fn run(host: &HostProfile) -> hvsim_vmm::Result<HostProbes> {
        static PROBES: std::sync::OnceLock<HostProbes> = std::sync::OnceLock::new();
        if let Some(p) = PROBES.get() {
            return Ok(p.clone());
        }
        let p = HostProbes {
            cpuid_virtualized: cpuid_virtualized(host)?,
            user_rdtsc_traps: user_rdtsc_traps(host)?,
            user_rdtscp_hidden: user_rdtscp_hidden(host)?,
            precise_irq_window: precise_irq_window(host)?,
        };
        Ok(PROBES.get_or_init(|| p).clone())
    }

    /// Adapts host settings to what this host really does.
    pub fn configure(&self, host: &mut HostSettings) {
        host.precise_irq_window = self.precise_irq_window;
        host.pin_cpu = (!self.cpuid_virtualized).then(hvsim_vmm::host::first_allowed_cpu);
    }

    /// What guests cannot be kept from on this host, in words.
    pub fn limits(&self) -> Vec<String> {
        let mut l = Vec::new();
        if !self.cpuid_virtualized {
            l.push(
                "CPUID is not virtualized: guests see the host's CPU, so user programs may use \
                 RDRAND/RDSEED (host entropy); hvsim's Linux kernel is told to ignore those features"
                    .to_owned(),
            );
        }
        if !self.user_rdtsc_traps {
            l.push(
                "user-mode RDTSC does not trap (CR4.TSD is ignored): guest programs that read the \
                 TSC directly (RDTSC, RDTSCP) see host time and are not deterministic"
                    .to_owned(),
            );
        }
        if !self.precise_irq_window {
            l.push(
                "interrupt-window exits are not exact: hvsim injects only at other exits, so \
                 guests without hvsim's interrupt-pending flag (hvsim's Linux has it) may see \
                 interrupts late"
                    .to_owned(),
            );
        }
        l
    }
}

fn run_probe(host: &HostProfile, image: hvsim_vmm::boot::raw::RawImage) -> hvsim_vmm::Result<(End, Vec<Vec<u8>>)> {
    let mut config = MachineConfig::raw(image, 0, host);
    config.host.watchdog = Some(std::time::Duration::from_millis(500));
    config.host.precise_irq_window = true;
    let mut m = Machine::new(&config)?;
    let end = match m.run_until(Vtime::from_secs(1))? {
        Stop::Ended(end) => end,
        other => End::GuestError { reason: format!("probe did not finish: {other:?}") },
    };
    Ok((end, m.take_messages().into_iter().map(|m| m.bytes).collect()))
}

/// Compares what CPUID leaf 1 returns inside the guest with what hvsim set.
fn cpuid_virtualized(host: &HostProfile) -> hvsim_vmm::Result<bool> {
    let mut p = Program::new("probe-cpuid");
    let regs = p.bytes(&[0; 16]).0;
    dynasm!(p.a
        ; mov eax, 1
        ; xor ecx, ecx
        ; cpuid
        ; lea rsi, [=>regs]
        ; mov [rsi], eax
        ; mov [rsi + 4], ebx
        ; mov [rsi + 8], ecx
        ; mov [rsi + 12], edx
        ; mov ecx, 16
    );
    p.send_rsi_rcx();
    p.exit(0);
    let (_, messages) = run_probe(host, p.finish())?;
    let expected = cpuid::guest_cpuid(&hvsim_vmm::host::open_kvm()?, host.nested_pvm)?;
    let leaf1 = expected.as_slice().iter().find(|e| e.function == 1 && e.index == 0);
    let seen = messages.first().filter(|m| m.len() == 16);
    Ok(match (leaf1, seen) {
        (Some(e), Some(m)) => {
            let word = |i: usize| u32::from_le_bytes(m[i..i + 4].try_into().expect("4 bytes"));
            // EBX bits 24..31 (APIC ID) may legitimately differ; compare ECX, EDX.
            word(8) == e.ecx && word(12) == e.edx
        }
        _ => false,
    })
}

/// Sets CR4.TSD, drops to ring 3 and executes RDTSC: a #GP (guest panic 13)
/// means it trapped; reaching the next instruction means it did not.
fn user_rdtsc_traps(host: &HostProfile) -> hvsim_vmm::Result<bool> {
    let mut p = Program::new("probe-rdtsc");
    let user = p.a.new_dynamic_label();
    let back = p.user_return();
    dynasm!(p.a
        ; mov rax, cr4
        ; or rax, 1 << 2     // CR4.TSD
        ; mov cr4, rax
    );
    p.enter_user(user);
    dynasm!(p.a ; =>user ; rdtsc);
    p.syscall(rt::sys::LEAVE_USER);
    dynasm!(p.a ; =>back);
    p.exit(1);
    let (end, _) = run_probe(host, p.finish())?;
    Ok(end == End::GuestPanic { code: 13 })
}

/// How an instruction ended in a probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub enum Trap {
    /// Invalid opcode.
    #[serde(rename = "#UD")]
    InvalidOpcode,
    /// General protection.
    #[serde(rename = "#GP")]
    GeneralProtection,
    /// It executed.
    #[serde(rename = "runs")]
    Runs,
}

impl Trap {
    pub fn name(self) -> &'static str {
        match self {
            Trap::InvalidOpcode => "#UD",
            Trap::GeneralProtection => "#GP",
            Trap::Runs => "runs (reads the host TSC)",
        }
    }
}

/// Drops to ring 3 (CR4.TSD clear) and executes RDTSCP, whose CPUID bit
/// hvsim hides: the guest kernel's emulation handles #UD and #GP alike.
fn user_rdtscp_hidden(host: &HostProfile) -> hvsim_vmm::Result<Trap> {
    let mut p = Program::new("probe-rdtscp");
    let user = p.a.new_dynamic_label();
    let back = p.user_return();
    p.enter_user(user);
    dynasm!(p.a ; =>user ; rdtscp);
    p.syscall(rt::sys::LEAVE_USER);
    dynasm!(p.a ; =>back);
    p.exit(1);
    let (end, _) = run_probe(host, p.finish())?;
    Ok(match end {
        End::GuestPanic { code: 6 } => Trap::InvalidOpcode,
        End::GuestPanic { code: 13 } => Trap::GeneralProtection,
        _ => Trap::Runs,
    })
}

/// Arms the alarm in the past with interrupts disabled (so it is pending at
/// the next exit), enables them and counts loop iterations until the
/// handler runs. An exact window exit interrupts the loop at once; an
/// inexact one after however many instructions the host ran in between.
fn precise_irq_window(host: &HostProfile) -> hvsim_vmm::Result<bool> {
    const ROUNDS: usize = 5;
    let mut p = Program::new("probe-irq-window");
    let seen = p.var();
    let counts = p.bytes(&[0; 8 * ROUNDS]).0;
    let handler = p.on_irq(hvsim_abi::irq::ALARM);
    p.pic_init(!((1u16 << 2) | (1 << hvsim_abi::irq::ALARM)));
    for round in 0..ROUNDS {
        dynasm!(p.a ; mov rdi, 1);
        p.alarm_at_rdi();
        dynasm!(p.a
            ; mov QWORD [=>seen], -1
            ; xor ebx, ebx
            ; sti
            ; count:
            ; inc rbx
            ; cmp QWORD [=>seen], -1
            ; je <count
            ; cli
            ; mov rax, [=>seen]
            ; lea rdi, [=>counts]
            ; mov [rdi + 8 * round as i32], rax
        );
    }
    dynasm!(p.a ; lea rsi, [=>counts] ; mov ecx, 8 * ROUNDS as i32);
    p.send_rsi_rcx();
    p.exit(0);
    dynasm!(p.a ; =>handler ; mov [=>seen], rbx ; ret);
    let (end, messages) = run_probe(host, p.finish())?;
    let Some(m) = messages.first().filter(|m| m.len() == 8 * ROUNDS && end == End::Exit { status: 0 }) else {
        return Ok(false);
    };
    // The interrupt may only land after the STI shadow: one iteration at most.
    Ok(m.chunks(8).all(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) <= 1))
}
