//! The built-in raw test guests.
//!
//! Each is a few dozen instructions assembled on the fly with the runtime in
//! [`rt`]. They are the fast test bed for the machine: on a nested host where
//! guest kernel mode is emulated ~1000x slower, they keep ring-0 work tiny
//! and do their computing in ring 3.

pub mod demo;
mod entropy;
mod faults;
mod idle;
pub mod probes;
mod ready;
pub mod rt;
mod sdk_garbage;
mod serial;
mod spin;
mod timer;

use hvsim_vmm::boot::raw::RawImage;

/// A built-in guest: name, one-line description, builder.
pub struct Guest {
    pub name: &'static str,
    pub about: &'static str,
    /// Whether its runs are expected to be exactly replayable.
    pub deterministic: bool,
    /// Runs until stopped (the explorer slices it): `hvsim run` then
    /// defaults to a short virtual-time limit.
    pub runs_forever: bool,
    build: fn() -> RawImage,
}

impl Guest {
    pub fn build(&self) -> RawImage {
        (self.build)()
    }
}

pub const GUESTS: &[Guest] = &[
    Guest {
        name: "demo",
        about: "guesses a vault's 3-digit code (the default target of `hvsim explore`)",
        deterministic: true,
        runs_forever: true,
        build: demo::build,
    },
    Guest {
        name: "timer",
        about: "computes in ring 3 while PIT interrupts arrive, then sleeps on a PIT one-shot",
        deterministic: true,
        runs_forever: false,
        build: timer::build,
    },
    Guest {
        name: "idle",
        about: "sleeps one hour of virtual time in HLT",
        deterministic: true,
        runs_forever: false,
        build: idle::build,
    },
    Guest {
        name: "entropy",
        about: "branches on random bytes from the seed and prints them",
        deterministic: true,
        runs_forever: false,
        build: entropy::build,
    },
    Guest {
        name: "spin",
        about: "spins in ring 3 with no exits until the watchdog forces one",
        deterministic: false,
        runs_forever: false,
        build: spin::build,
    },
    Guest {
        name: "ready",
        about: "says READY, prints its run's work and random bytes (the boot cache's test guest)",
        deterministic: true,
        runs_forever: false,
        build: ready::build,
    },
    Guest {
        name: "serial",
        about: "prints text on the serial console",
        deterministic: true,
        runs_forever: false,
        build: serial::build,
    },
    Guest {
        name: "sdk-garbage",
        about: "sends every kind of garbage on the SDK channel, and one valid assertion",
        deterministic: true,
        runs_forever: true,
        build: sdk_garbage::build,
    },
    Guest {
        name: "bad-port",
        about: "writes to a port no device claims (ends with guest-error)",
        deterministic: true,
        runs_forever: false,
        build: faults::bad_port,
    },
    Guest {
        name: "bad-hypercall",
        about: "sends an unknown hypercall command (ends with guest-error)",
        deterministic: true,
        runs_forever: false,
        build: faults::bad_hypercall,
    },
    Guest {
        name: "wild-memory",
        about: "writes to a physical address beyond RAM (ends with guest-error)",
        deterministic: true,
        runs_forever: false,
        build: faults::wild_memory,
    },
    Guest {
        name: "page-fault",
        about: "touches an unmapped address; its exception handler panics (ends with guest-panic)",
        deterministic: true,
        runs_forever: false,
        build: faults::page_fault,
    },
    Guest {
        name: "triple-fault",
        about: "faults with no usable IDT (ends with triple-fault)",
        deterministic: true,
        runs_forever: false,
        build: faults::triple_fault,
    },
];

pub fn find(name: &str) -> Option<&'static Guest> {
    GUESTS.iter().find(|g| g.name == name)
}

/// A guest for `hvsim bench exits`: `n` port reads of the virtual clock from
/// ring 0 in a tight loop, then exit 0.
pub fn exit_loop(n: u32) -> RawImage {
    use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
    let mut p = rt::Program::new("exit-loop");
    dynasm!(p.a
        ; mov ecx, n as i32
        ; mov dx, hvsim_abi::hc::CLOCK_LO as i16
        ; again:
        ; in eax, dx
        ; dec ecx
        ; jnz <again
    );
    p.exit(0);
    p.finish()
}

/// A guest for `hvsim bench snapshot`: writes one word to each of `pages`
/// consecutive pages from `base`, then exits 0.
pub fn page_writer(pages: u32, base: u64) -> RawImage {
    use dynasmrt::{dynasm, DynasmApi, DynasmLabelApi};
    let mut p = rt::Program::new("page-writer");
    dynasm!(p.a
        ; mov rdi, QWORD base as i64
        ; mov ecx, pages as i32
        ; test ecx, ecx
        ; jz >done
        ; next:
        ; mov [rdi], rcx
        ; add rdi, 4096
        ; dec ecx
        ; jnz <next
        ; done:
    );
    p.exit(0);
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_guest_assembles_and_fits() {
        for g in GUESTS {
            let img = g.build();
            assert_eq!(img.name, g.name);
            assert!(!img.code.is_empty() && img.code.len() < 256 * 1024, "{}", g.name);
        }
    }

    #[test]
    fn assembly_is_reproducible() {
        for g in GUESTS {
            assert_eq!(g.build().code, g.build().code, "{}", g.name);
        }
    }

    #[test]
    fn names_are_unique() {
        for (i, g) in GUESTS.iter().enumerate() {
            assert!(GUESTS[i + 1..].iter().all(|o| o.name != g.name));
        }
    }
}
