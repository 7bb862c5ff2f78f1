//! The hvsim guest ABI: everything a guest and the VMM must agree on.
//!
//! This crate has no dependencies so that every side of the contract (the VMM,
//! the built-in raw guests, the Linux guest's init and kernel patches, the SDKs)
//! can share one definition. Changing a value here is a breaking change of the
//! guest ABI and of every snapshot taken with the old value.
#![no_std]
#![forbid(unsafe_code)]

/// Legacy PC I/O ports that the VMM emulates.
pub mod port {
    /// 8259 master PIC command/data ports.
    pub const PIC_MASTER: u16 = 0x20;
    /// 8259 slave PIC command/data ports.
    pub const PIC_SLAVE: u16 = 0xA0;
    /// 8254 PIT: channel 0..2 data ports, then the mode/command port (0x43).
    pub const PIT_BASE: u16 = 0x40;
    /// Port B (NMI status and control): PIT channel 2 gate and output.
    pub const PORT_B: u16 = 0x61;
    /// 8259 edge/level control registers (master, slave).
    pub const ELCR: u16 = 0x4D0;
    /// COM1 8250 UART base.
    pub const COM1: u16 = 0x3F8;
    /// MC146818 CMOS/RTC index and data ports.
    pub const RTC: u16 = 0x70;
}

/// Legacy IRQ lines on the PIC pair.
pub mod irq {
    pub const PIT: u8 = 0;
    pub const COM1: u8 = 4;
    /// The hvsim alarm (see [`crate::hc::ALARM_HI`]); on the slave PIC.
    pub const ALARM: u8 = 8;
    /// Pulses when machine events wait to be read (see [`crate::hc::op::EVENT`]).
    /// Line 1 is the keyboard's on a PC; this machine has none.
    pub const EVENT: u8 = 1;
}

/// The hvsim paravirtual port block: hypercalls, the byte channel and the
/// virtual clock. Every access is a VM exit handled synchronously.
pub mod hc {
    /// First port of the block.
    pub const BASE: u16 = 0x0F00;
    /// 32-bit OUT: a command word (`op << 24 | arg`); 32-bit IN: [`STATUS`] word.
    pub const CMD: u16 = BASE;
    /// 8-bit stream port. OUT (usually `rep outsb`) appends to the transmit
    /// buffer; IN (usually `rep insb`) pops bytes that a command queued.
    pub const DATA: u16 = BASE + 4;
    /// 32-bit IN: latches the virtual clock (nanoseconds) and returns its low half.
    pub const CLOCK_LO: u16 = BASE + 8;
    /// 32-bit IN: high half of the value latched by the last [`CLOCK_LO`] read.
    pub const CLOCK_HI: u16 = BASE + 12;
    /// 32-bit OUT: low half of an alarm deadline (absolute virtual ns), held
    /// until [`ALARM_HI`] is written. IN reads the armed deadline's low half.
    pub const ALARM_LO: u16 = BASE + 16;
    /// 32-bit OUT: high half of the alarm deadline; arms the one-shot alarm
    /// (deadline 0 disarms it). When virtual time reaches the deadline,
    /// IRQ [`crate::irq::ALARM`] pulses. Unlike the 8254, whose longest period
    /// is 55 ms, one alarm can sleep for any length of virtual time.
    pub const ALARM_HI: u16 = BASE + 20;
    /// 8-bit OUT, value ignored: "I just enabled interrupts". An exit at a
    /// point of the guest's choosing where a waiting interrupt can be injected
    /// (see [`op::IRQ_FLAG`]).
    pub const POKE: u16 = BASE + 24;
    /// Number of ports in the block.
    pub const LEN: u16 = 28;

    /// Builds a command word.
    pub const fn cmd(op: u8, arg: u32) -> u32 {
        ((op as u32) << 24) | (arg & ARG_MASK)
    }
    /// Mask of the argument bits of a command word.
    pub const ARG_MASK: u32 = 0x00FF_FFFF;

    /// Command opcodes (the top byte of a command word).
    pub mod op {
        /// End the run: the guest powered off with exit status `arg & 0xFF`.
        pub const EXIT: u8 = 0x01;
        /// The transmit buffer holds one complete message: deliver it.
        pub const SEND: u8 = 0x02;
        /// Queue `arg` bytes (1..=[`super::MAX_RANDOM`]) from the guest's
        /// seeded entropy stream for reading from [`super::DATA`].
        pub const RANDOM: u8 = 0x03;
        /// The guest hit a fatal condition it detected itself; `arg` is a code
        /// (raw guests report an unexpected exception vector here).
        pub const PANIC: u8 = 0x04;
        /// Discard the transmit buffer and any unread receive bytes.
        pub const RESET: u8 = 0x05;
        /// End the run: the guest asked to reboot.
        pub const REBOOT: u8 = 0x06;
        /// `arg` is the page frame number of a page whose first `u32` hvsim
        /// sets to 1 while an interrupt waits for the guest to enable
        /// interrupts, and to 0 otherwise. A guest that then writes to
        /// [`super::POKE`] right after enabling interrupts receives every
        /// interrupt at an exact instruction, even on hosts whose
        /// interrupt-window exits are imprecise.
        pub const IRQ_FLAG: u8 = 0x07;
        /// Queue the oldest machine event not yet read (see [`super::event`])
        /// as 4 bytes (little endian) for reading from [`super::DATA`]; 0 if
        /// there is none. IRQ [`crate::irq::EVENT`] pulses when one arrives.
        pub const EVENT: u8 = 0x08;
        /// The guest is booted and waits for its run: the VMM stops the run
        /// here (the point the boot cache saves). Before the guest goes on,
        /// the VMM has re-keyed every entropy stream from the run's seed and
        /// put the run's work in the inbox ([`INBOX`]). Allowed once.
        pub const READY: u8 = 0x09;
        /// Queue the next `arg` bytes (1..=[`super::MAX_RANDOM`]) of the
        /// inbox for reading from [`super::DATA`]; fewer at its end, none
        /// once it is empty. The `CMD` status word says how many were queued.
        /// The inbox holds the run's work (see [`crate::inbox`]).
        pub const INBOX: u8 = 0x0A;
        /// `arg` is the set of [`super::caps`] the guest handles.
        pub const CAPS: u8 = 0x0B;
        /// `arg` is the page frame number of the guest's coverage map:
        /// [`super::COVERAGE_BYTES`] of contiguous memory, one bit per edge
        /// of instrumented programs (see [`super::coverage_bit`]), which
        /// hvsim reads between exits.
        pub const COVERAGE: u8 = 0x0C;
        /// `arg` is the page frame number of the guest's clock page: hvsim
        /// writes there, at the end of every exit, the exit's number and the
        /// virtual time (two little-endian `u64`s, see [`super::VCLOCK_BYTES`]),
        /// so that the guest's vDSO answers clock reads without exiting.
        pub const VCLOCK: u8 = 0x0D;
        /// Take the answer to the message just sent, if it asked hvsim a
        /// question (a draw, a buggify site, a clock value, see
        /// `hvsim_vmm::control`): 8 bytes (little endian) queued for reading
        /// from [`super::DATA`], the `CMD` status word 8; 0 when it asked
        /// nothing. An answer is offered only to the command right after
        /// its question's [`SEND`]: this one, or a [`RANDOM`] of at most 8
        /// bytes (what a guest that cannot be interrupted between the two
        /// may use); any other command drops it, so no other reader can
        /// take it.
        pub const ANSWER: u8 = 0x0E;
    }

    /// Size of the clock page's contents ([`op::VCLOCK`]).
    pub const VCLOCK_BYTES: usize = 16;

    /// Size of the coverage map ([`op::COVERAGE`]): 2^19 edges.
    pub const COVERAGE_BYTES: usize = 64 * 1024;

    /// The bit of the coverage map that stands for an edge (a module base,
    /// `k << 32`, plus the edge's number): a multiplicative hash, so the
    /// edges of every module spread over the whole map.
    pub const fn coverage_bit(edge: u64) -> usize {
        (edge.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - 19)) as usize
    }

    /// What a guest tells the VMM it handles ([`op::CAPS`]).
    pub mod caps {
        /// [`super::event::RESEED`] events: the guest re-keys its own
        /// random number generators from [`super::op::RANDOM`] when one
        /// arrives.
        pub const RESEED: u32 = 1 << 0;
    }

    /// Machine events: `kind << 16 | node`.
    pub mod event {
        /// The node lost power: its NIC and disk are dead, its unflushed
        /// writes gone. The guest's init kills the node's processes.
        pub const NODE_DOWN: u32 = 1;
        /// The node has power again: init remounts its disk and restarts it.
        pub const NODE_UP: u32 = 2;
        /// Every entropy stream was re-keyed (a run starts, a branch of an
        /// exploration begins): a guest with [`super::caps::RESEED`] re-keys
        /// the generators it keeps in its own memory from `RANDOM` at once.
        /// `node` is 0.
        pub const RESEED: u32 = 3;
        /// The guest reported setup complete (the SDKs' message); sent
        /// only in runs that asked for it (a Test Composer template to
        /// run, see [`crate::linux::COMPOSER`]). `node` is 0.
        pub const SETUP: u32 = 4;
        /// Stop every process of the node (`SIGSTOP`) until
        /// [`NODE_RESUME`]: a drawn `pause` fault.
        pub const NODE_PAUSE: u32 = 5;
        /// Continue the node's stopped processes (`SIGCONT`).
        pub const NODE_RESUME: u32 = 6;
        /// Kill every process of the node (`SIGKILL`), without touching
        /// its disk or page cache: a drawn `kill` fault.
        pub const NODE_KILL: u32 = 7;
        /// Start the node's service again after [`NODE_KILL`] or
        /// [`NODE_STOP`].
        pub const NODE_START: u32 = 8;
        /// Stop the node gracefully: `SIGTERM` to every process, `SIGKILL`
        /// to those alive [`STOP_GRACE_MS`] later: a drawn `stop` fault.
        pub const NODE_STOP: u32 = 9;
        /// Node `node`'s realtime clock is to read otherwise (a clock fault
        /// started, flipped or ended), or with `node` [`CLOCK_MACHINE`] the
        /// machine's clock rate: init asks what it should be and sets it
        /// (`hvsim_vmm::faults::clock`).
        pub const CLOCK: u32 = 10;
        /// The `node` of a [`CLOCK`] event about the machine's rate.
        pub const CLOCK_MACHINE: u16 = 0xFFFF;
        /// `hvsim debug`: a person's shell command waits in the inbox
        /// ([`super::op::INBOX`], its bytes to the inbox's end); init runs
        /// it with `/bin/sh -c` on the node, its output on the console
        /// (each line prefixed [`crate::linux::DEBUG_PREFIX`] and the node),
        /// then sends `{"hvsim_debug": {"node": N, "status": S}}`.
        pub const DEBUG: u32 = 11;
        /// Event kinds from here up are custom faults: kind
        /// `CUSTOM_BASE + i` runs the plan's custom command `i`
        /// ([`crate::linux::CUSTOM_FAULTS`]) on the node.
        pub const CUSTOM_BASE: u32 = 0x100;
        /// How long (virtual milliseconds) a stopped node's processes have
        /// to exit after `SIGTERM`.
        pub const STOP_GRACE_MS: u64 = 2000;

        pub const fn word(kind: u32, node: u16) -> u32 {
            assert!(kind <= 0xFFFF, "an event kind is 16 bits");
            (kind << 16) | node as u32
        }

        /// `(kind, node)` of an event word.
        pub const fn split(word: u32) -> (u32, u16) {
            (word >> 16, word as u16)
        }
    }

    /// Largest `RANDOM` request. (A message may be as long as the guest's
    /// RAM; longer ones, which the guest cannot have had in memory at once,
    /// are dropped and counted at `SEND`.)
    pub const MAX_RANDOM: u32 = 64 * 1024;
}

/// Where hvsim's Linux guest init finds the run's work (files it writes
/// from the inbox before it starts anything).
pub mod linux {
    /// The shell command init runs; its exit status ends the run.
    pub const COMMAND: &str = "/etc/hvsim/command";
    /// With simulated nodes: the shell command init runs on every node when
    /// the run starts and again when a crashed node restarts.
    pub const NODE_COMMAND: &str = "/etc/hvsim/node-command";
    /// With containers: node `i`'s container is described by the file
    /// `CONTAINERS/<i>` (see [`crate::container`]); the node command and
    /// the run's command are then init's own.
    pub const CONTAINERS: &str = "/etc/hvsim/containers";
    /// With containers whose images hold Test Composer templates: the
    /// commands, one per line, `template TAB file name TAB node,node,...`
    /// (the nodes whose containers hold it). Init composes them once
    /// setup is complete instead of waiting for every service to exit.
    pub const COMPOSER: &str = "/etc/hvsim/composer";
    /// With Kubernetes ClusterIP Services: the virtual addresses every
    /// node's init proxies, one line per Service port, `ADDR:PORT` and then,
    /// space-separated, each pod behind it as `NODE:PORT:WHEN`: it takes
    /// connections while its container runs and, WHEN `healthy`, passes its
    /// readiness check (`started`: runs); and `!NODE` for each node whose
    /// pod serves that port number itself, where the proxy does not listen.
    pub const SERVICES: &str = "/etc/hvsim/services";
    /// With custom faults in the fault plan: their commands, in plan order,
    /// each ended by a NUL byte (`hc::event::CUSTOM_BASE`).
    pub const CUSTOM_FAULTS: &str = "/etc/hvsim/custom-faults";
    /// What prefixes the console lines of an `hvsim debug` command's
    /// output: `debug[NODE]: `.
    pub const DEBUG_PREFIX: &str = "debug[";
}

/// Test Composer (Antithesis's test templates): what a command's file name
/// says about when and how it runs. The host finds the commands
/// (`guest-image/src/composer.rs`), init runs them (`guest-init/src/container/composer.rs`).
pub mod composer {
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Kind {
        First,
        ParallelDriver,
        SerialDriver,
        SingletonDriver,
        Anytime,
        Eventually,
        Finally,
    }

    const PREFIXES: [(&str, Kind); 7] = [
        ("first_", Kind::First),
        ("parallel_driver_", Kind::ParallelDriver),
        ("serial_driver_", Kind::SerialDriver),
        ("singleton_driver_", Kind::SingletonDriver),
        ("anytime_", Kind::Anytime),
        ("eventually_", Kind::Eventually),
        ("finally_", Kind::Finally),
    ];

    impl Kind {
        /// The kind of a command file's name; `None` for helpers
        /// (`helper_`) and files without a known prefix: never run.
        pub fn of(file: &str) -> Option<Kind> {
            PREFIXES
                .iter()
                .find_map(|&(prefix, kind)| file.strip_prefix(prefix).filter(|rest| !rest.is_empty()).map(|_| kind))
        }

        pub fn is_driver(self) -> bool {
            matches!(self, Kind::ParallelDriver | Kind::SerialDriver | Kind::SingletonDriver)
        }

        /// Whether a line of descent may switch it off (`--schedule
        /// bandit`): drivers and anytime commands, which the composer picks
        /// among again and again; not the commands that set up or check.
        pub fn switchable(self) -> bool {
            self.is_driver() || self == Kind::Anytime
        }
    }
}

/// A node's container, as the VMM describes it to init: a list of fields,
/// each `key NUL value NUL`, in order (repeated keys make lists). Values
/// are UTF-8; the parts of a compound value are separated by
/// [`container::SEP`].
pub mod container {
    /// Separates the parts of a compound value (mounts, dependencies).
    pub const SEP: char = '\u{1f}';

    pub mod key {
        /// The service's name (its node's name), shown on its output lines.
        pub const NAME: &str = "name";
        pub const HOSTNAME: &str = "hostname";
        /// Which image disk holds the container's image (`hvsim-image<k>`):
        /// containers of one image share one.
        pub const IMAGE_DISK: &str = "image_disk";
        /// One argument of the command (entrypoint and cmd, resolved).
        pub const ARG: &str = "arg";
        /// One `NAME=VALUE` of the environment.
        pub const ENV: &str = "env";
        pub const WORKDIR: &str = "workdir";
        /// `user`, `uid`, `user:group` or `uid:gid`, resolved in the
        /// container's /etc/passwd and /etc/group.
        pub const USER: &str = "user";
        /// `no`, `always`, `on-failure` or `unless-stopped`.
        pub const RESTART: &str = "restart";
        /// `1`: a minimal init is PID 1 and runs the command as its child.
        pub const INIT: &str = "init";
        /// `kind SEP source SEP target SEP ro`: kind `volume` (source is
        /// the volume's name, a directory on the node's disk) or `file` (a
        /// path the inbox delivered); ro `1` or `0`.
        pub const MOUNT: &str = "mount";
        /// `node SEP condition`: start after node's service has started
        /// (`service_started`), is healthy (`service_healthy`) or exited
        /// with status 0 (`service_completed_successfully`).
        pub const DEPENDS: &str = "depends";
        /// One argument of the health check command.
        pub const HEALTH_ARG: &str = "health_arg";
        /// Health check timing in milliseconds, and retries.
        pub const HEALTH_INTERVAL_MS: &str = "health_interval_ms";
        pub const HEALTH_TIMEOUT_MS: &str = "health_timeout_ms";
        pub const HEALTH_START_PERIOD_MS: &str = "health_start_period_ms";
        /// Between checks while the start period lasts and none has passed
        /// yet (Docker's `start_interval`).
        pub const HEALTH_START_INTERVAL_MS: &str = "health_start_interval_ms";
        pub const HEALTH_RETRIES: &str = "health_retries";
        /// Instead of a command: a TCP connection to `ADDR:PORT` that
        /// opens (Kubernetes' `tcpSocket`).
        pub const HEALTH_TCP: &str = "health_tcp";
        /// Instead of a command: `ADDR:PORT SEP PATH`, an HTTP GET whose
        /// status is 200 to 399 (Kubernetes' `httpGet`); each
        /// `HEALTH_HTTP_HEADER` (`Name: value`) is sent with it.
        pub const HEALTH_HTTP: &str = "health_http";
        pub const HEALTH_HTTP_HEADER: &str = "health_http_header";
        /// `readiness`, `liveness` or `startup`: the `health_*` fields after
        /// it describe that probe (Kubernetes'). Before any, they describe
        /// readiness (a compose healthcheck). A liveness or startup probe
        /// that fails `retries` times in a row has the container stopped.
        pub const PROBE: &str = "probe";
        /// How long a stopped container has between SIGTERM and SIGKILL.
        pub const STOP_GRACE_MS: &str = "stop_grace_ms";
        /// The name of an init container, run to completion, in order,
        /// before the container starts (Kubernetes' `initContainers`): its
        /// own description is `CONTAINERS/<node>.init<k>`.
        pub const INIT_CONTAINER: &str = "init_container";
        /// The name of another container of the pod, run beside this one
        /// (Kubernetes' second and later `containers`): its description is
        /// `CONTAINERS/<node>.c<k>`, `k` from 1.
        pub const SIDECAR: &str = "sidecar";
        /// The contents of the container's /etc/hosts.
        pub const HOSTS: &str = "hosts";
    }

    /// The fields of a description; an error (the byte offset) at the first
    /// malformed one.
    pub fn fields(bytes: &[u8]) -> impl Iterator<Item = Result<(&str, &str), usize>> {
        let mut at = 0;
        core::iter::from_fn(move || {
            if at >= bytes.len() {
                return None;
            }
            let start = at;
            let mut part = || {
                let rest = &bytes[at..];
                let end = rest.iter().position(|&b| b == 0)?;
                at += end + 1;
                core::str::from_utf8(&rest[..end]).ok()
            };
            match (part(), part()) {
                (Some(k), Some(v)) => Some(Ok((k, v))),
                _ => {
                    at = bytes.len();
                    Some(Err(start))
                }
            }
        })
    }
}

/// The inbox: a run's work, as the VMM hands it to a booted guest
/// ([`hc::op::INBOX`]). A list of files:
///
/// ```text
/// magic "HVSIMWK1"
/// per file: path length (u32 LE), path (UTF-8, absolute), mode (u32 LE,
///           permission bits), data length (u64 LE), data
/// ```
///
/// Guests must treat it as untrusted input: [`Files`] stops at the first
/// malformed entry, and a reader checks paths itself.
pub mod inbox {
    pub const MAGIC: &[u8; 8] = b"HVSIMWK1";

    /// One file of the inbox.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct File<'a> {
        pub path: &'a str,
        pub mode: u32,
        pub data: &'a [u8],
    }

    /// Writes the inbox's header to `out`.
    pub fn encode_header(out: &mut impl FnMut(&[u8])) {
        out(MAGIC);
    }

    /// Writes one file of the inbox to `out`.
    pub fn encode_file(file: &File<'_>, out: &mut impl FnMut(&[u8])) {
        out(&(file.path.len() as u32).to_le_bytes());
        out(file.path.as_bytes());
        out(&file.mode.to_le_bytes());
        out(&(file.data.len() as u64).to_le_bytes());
        out(file.data);
    }

    /// Why an inbox could not be read to its end.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Malformed {
        BadMagic,
        /// The entry at this byte offset is cut short or not UTF-8.
        Entry {
            offset: usize,
        },
    }

    /// The files of an inbox, in order.
    pub struct Files<'a> {
        rest: &'a [u8],
        offset: usize,
        failed: bool,
    }

    /// Reads `bytes` as an inbox.
    pub fn files(bytes: &[u8]) -> Result<Files<'_>, Malformed> {
        match bytes.strip_prefix(MAGIC) {
            Some(rest) => Ok(Files { rest, offset: MAGIC.len(), failed: false }),
            None => Err(Malformed::BadMagic),
        }
    }

    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if rest.len() < n {
            return None;
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Some(head)
    }

    impl<'a> Files<'a> {
        fn next_file(&mut self) -> Option<File<'a>> {
            let mut r = self.rest;
            let path_len = u32::from_le_bytes(take(&mut r, 4)?.try_into().ok()?) as usize;
            let path = core::str::from_utf8(take(&mut r, path_len)?).ok()?;
            let mode = u32::from_le_bytes(take(&mut r, 4)?.try_into().ok()?);
            let data_len = usize::try_from(u64::from_le_bytes(take(&mut r, 8)?.try_into().ok()?)).ok()?;
            let data = take(&mut r, data_len)?;
            self.offset += self.rest.len() - r.len();
            self.rest = r;
            Some(File { path, mode, data })
        }
    }

    impl<'a> Iterator for Files<'a> {
        type Item = Result<File<'a>, Malformed>;

        fn next(&mut self) -> Option<Self::Item> {
            if self.failed || self.rest.is_empty() {
                return None;
            }
            match self.next_file() {
                Some(f) => Some(Ok(f)),
                None => {
                    self.failed = true;
                    Some(Err(Malformed::Entry { offset: self.offset }))
                }
            }
        }
    }
}

/// Memory layout that the VMM sets up for raw (non-Linux) guests, which start
/// in 64-bit long mode at [`raw::LOAD_ADDR`] with paging identity-mapping
/// the first GiB (2 MiB pages, user-accessible).
pub mod raw {
    /// Global descriptor table (see [`selector`]).
    pub const GDT_ADDR: u64 = 0x1000;
    /// 64-bit task state segment; `rsp0` = [`KERNEL_STACK_TOP`].
    pub const TSS_ADDR: u64 = 0x2000;
    /// PML4, then one PDPT, then one page directory of 2 MiB pages.
    pub const PAGE_TABLES_ADDR: u64 = 0x10000;
    /// Initial ring-0 stack pointer; also where interrupts from ring 3 land.
    pub const KERNEL_STACK_TOP: u64 = 0x80000;
    /// Where the program image is loaded and entered.
    pub const LOAD_ADDR: u64 = 0x10_0000;
    /// Bytes identity-mapped by the initial page tables.
    pub const IDENTITY_MAPPED: u64 = 1 << 30;

    /// GDT selectors. The layout is Linux's (x86-64 `__KERNEL_CS` etc.), and
    /// must be: nested hypervisors such as `kvm_pvm` derive the kernel and
    /// user segments from `MSR_STAR` and only accept Linux's user selectors.
    pub mod selector {
        pub const KERNEL32_CODE: u16 = 0x08;
        pub const KERNEL_CODE: u16 = 0x10;
        pub const KERNEL_DATA: u16 = 0x18;
        /// Ring-3 32-bit code (RPL 3 included).
        pub const USER32_CODE: u16 = 0x23;
        /// Ring-3 data (RPL 3 included).
        pub const USER_DATA: u16 = 0x2B;
        /// Ring-3 64-bit code (RPL 3 included).
        pub const USER_CODE: u16 = 0x33;
        pub const TSS: u16 = 0x40;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::container;
    use super::inbox::{self, File, Malformed};

    #[test]
    fn container_fields_parse_in_order_and_stop_at_garbage() {
        let ok = b"name\0db\0arg\0redis-server\0arg\0--port 1\0";
        let got: Vec<_> = container::fields(ok).collect();
        assert_eq!(got, [Ok(("name", "db")), Ok(("arg", "redis-server")), Ok(("arg", "--port 1"))]);
        let cut: Vec<_> = container::fields(b"name\0db\0arg\0no-end").collect();
        assert_eq!(cut, [Ok(("name", "db")), Err(8)]);
        let bad: Vec<_> = container::fields(b"\xff\0x\0").collect();
        assert_eq!(bad, [Err(0)]);
    }

    fn encode(files: &[File<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut sink = |b: &[u8]| out.extend_from_slice(b);
        inbox::encode_header(&mut sink);
        for f in files {
            inbox::encode_file(f, &mut sink);
        }
        out
    }

    #[test]
    fn inbox_round_trip() {
        let files = [
            File { path: "/etc/hvsim/command", mode: 0o644, data: b"echo hi" },
            File { path: "/bin/tool", mode: 0o755, data: &[0, 1, 2, 255] },
            File { path: "/empty", mode: 0o600, data: b"" },
        ];
        let bytes = encode(&files);
        let back: Vec<File<'_>> = inbox::files(&bytes).unwrap().map(Result::unwrap).collect();
        assert_eq!(back, files);
        assert_eq!(inbox::files(&encode(&[])).unwrap().count(), 0);
    }

    #[test]
    fn malformed_inboxes_stop_at_the_bad_entry() {
        assert!(matches!(inbox::files(b"nonsense"), Err(Malformed::BadMagic)));
        let bytes = encode(&[File { path: "/a", mode: 0o644, data: b"x" }, File { path: "/b", mode: 0, data: b"yy" }]);
        let first_end = inbox::MAGIC.len() + 4 + 2 + 4 + 8 + 1;
        for cut in (inbox::MAGIC.len() + 1..bytes.len()).filter(|&c| c != first_end) {
            let got: Vec<_> = inbox::files(&bytes[..cut]).unwrap().collect();
            let last = got.last().unwrap();
            assert!(matches!(last, Err(Malformed::Entry { .. })), "cut at {cut}: {got:?}");
            assert!(got[..got.len() - 1].iter().all(Result::is_ok));
        }
        // A declared length far beyond the data.
        let mut huge = encode(&[]);
        huge.extend_from_slice(&1u32.to_le_bytes());
        huge.extend_from_slice(b"/");
        huge.extend_from_slice(&0u32.to_le_bytes());
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        let got: Vec<_> = inbox::files(&huge).unwrap().collect();
        assert_eq!(got, [Err(Malformed::Entry { offset: 8 })]);
    }
}
