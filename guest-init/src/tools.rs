//! Tools reached from a guest shell: `hvsim-node I CMD...` (a link to
//! /init) runs a command on a node; `/init container I` supervises node
//! I's container and `/init compose-wait` waits for them all (see
//! `container/`); `/init rdtsc N` and `/init emulate-tsc` are test tools,
//! `/init bench` the workloads of `hvsim bench guest` (see `bench.rs`).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use crate::nodes;

pub fn main(args: Vec<String>) -> ExitCode {
    match args.first().map(String::as_str) {
        Some("rdtsc") => rdtsc(args.get(1).and_then(|n| n.parse().ok()).unwrap_or(5)),
        Some("emulate-tsc") => emulate_tsc(),
        Some("container") => crate::container::supervise(&args[1..]),
        Some("compose-wait") => crate::container::wait_all(),
        Some("bench") => crate::bench::main(&args[1..]),
        Some("custom-fault") => crate::custom::run(&args[1..]),
        Some("debug") => crate::debug::run(&args[1..]),
        _ => {
            eprintln!(
                "usage: /init rdtsc [N] | emulate-tsc | container NODE | compose-wait | bench OP N | custom-fault I NODE | debug NODE CMD   (as PID 1: hvsim's init; as hvsim-node: run on a node)"
            );
            ExitCode::from(2)
        }
    }
}

/// `$ANTITHESIS_STOP_FAULTS SECONDS` (`/run/hvsim/stop-faults`): every
/// fault pauses for SECONDS of virtual time, as in Antithesis: the network
/// heals, crashed nodes come back, drawn faults resume after it. A message
/// the VMM acts on where it arrives (`hvsim_vmm::control`).
pub fn stop_faults(args: Vec<String>) -> ExitCode {
    let seconds = args.first().and_then(|s| s.parse::<f64>().ok()).filter(|s| s.is_finite() && *s >= 0.0);
    let (Some(seconds), 1) = (seconds, args.len()) else {
        eprintln!("usage: $ANTITHESIS_STOP_FAULTS SECONDS");
        return ExitCode::from(2);
    };
    match crate::sdk::send(&format!(r#"{{"hvsim_faults":{{"pause":{seconds}}}}}"#)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stop-faults: cannot reach hvsim's channel at {}: {e}", crate::sdk::SDK_PATH);
            ExitCode::from(1)
        }
    }
}

/// `hvsim-node I CMD [ARGS...]`: runs CMD (an applet, a program, or a shell
/// builtin) in node I's network, UTS and time namespaces, with `HVSIM_NODE` and
/// `HVSIM_DISK` (the node's disk) in its environment.
pub fn node(args: Vec<String>) -> ExitCode {
    let (Some(node), Some(_)) = (args.first().and_then(|n| n.parse::<u16>().ok()), args.get(1)) else {
        eprintln!("usage: hvsim-node NODE COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    if std::path::Path::new(&nodes::down_marker(node)).exists() {
        eprintln!("hvsim-node: node {node} is down (crashed, not restarted yet)");
        return ExitCode::from(1);
    }
    let enter = || -> std::io::Result<()> {
        let pid = std::fs::read_to_string(nodes::pid_file(node))?;
        let pid = pid.trim();
        nodes::setns(&File::open(format!("/proc/{pid}/ns/net"))?, libc::CLONE_NEWNET)?;
        nodes::setns(&File::open(format!("/proc/{pid}/ns/uts"))?, libc::CLONE_NEWUTS)?;
        nodes::setns(&File::open(format!("/proc/{pid}/ns/time_for_children"))?, nodes::CLONE_NEWTIME)
    };
    if let Err(e) = enter() {
        eprintln!("hvsim-node: cannot enter node {node}: {e} (is the guest running with --nodes?)");
        return ExitCode::from(1);
    }
    // A program is run directly; anything else (a busybox applet, a shell
    // builtin) by the shell, which runs applets itself. Every exec costs
    // a few hundred milliseconds where the guest kernel is emulated.
    let mut c = match program(&args[1]) {
        Some(path) => {
            let mut c = Command::new(path);
            c.arg0(&args[1]).args(&args[2..]);
            c
        }
        None => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg("exec \"$@\"").arg("hvsim-node").args(&args[1..]);
            c
        }
    };
    let e = c.env("HVSIM_NODE", node.to_string()).env("HVSIM_DISK", nodes::disk_link(node)).exec();
    eprintln!("hvsim-node: cannot run {}: {e}", args[1]);
    ExitCode::from(127)
}

/// The executable file `name` names: itself if it has a `/`, else the first
/// on `PATH`.
fn program(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_program =
        |p: &std::path::Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if name.contains('/') {
        let p = std::path::PathBuf::from(name);
        return is_program(&p).then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    path.split(':').map(|dir| std::path::Path::new(dir).join(name)).find(|p| is_program(p))
}

/// Prints `n` readings of the time-stamp counter, one per line.
fn rdtsc(n: usize) -> ExitCode {
    for _ in 0..n {
        // SAFETY: RDTSC has no memory effects.
        let t = unsafe { core::arch::x86_64::_rdtsc() };
        println!("{t}");
    }
    ExitCode::SUCCESS
}

/// `struct hvsim_tsc_emulation` of the guest kernel (patch 0001).
#[repr(C)]
#[derive(Default)]
struct TscEmulation {
    ip: u64,
    ax: u64,
    dx: u64,
    cx: u64,
}

/// `_IOWR('h', 5, struct hvsim_tsc_emulation)`.
const HVSIM_IOC_EMULATE_TSC: libc::c_ulong = 0xC020_6805;

/// Runs the kernel's user-mode RDTSC/RDTSCP emulation (what its #GP and #UD
/// handlers do where the hardware traps these instructions) on RDTSC,
/// RDTSCP and a NOP in a buffer, and prints what it answered: for hvsim's
/// tests on hosts that never trap them.
fn emulate_tsc() -> ExitCode {
    let dev = match std::fs::OpenOptions::new().read(true).write(true).open("/dev/hvsim") {
        Ok(f) => f,
        Err(e) => {
            eprintln!("emulate-tsc: cannot open /dev/hvsim: {e}");
            return ExitCode::from(1);
        }
    };
    let code: [u8; 6] = [0x0f, 0x31, 0x0f, 0x01, 0xf9, 0x90];
    for (name, offset) in [("rdtsc", 0usize), ("rdtscp", 2), ("nop", 5)] {
        let ip = code.as_ptr() as u64 + offset as u64;
        let mut t = TscEmulation { ip, cx: 0xdead, ..TscEmulation::default() };
        use std::os::fd::AsRawFd;
        // SAFETY: the ioctl reads and writes one TscEmulation, and reads the
        // instruction bytes at `ip`, inside `code`, which outlives the call.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), HVSIM_IOC_EMULATE_TSC, &mut t as *mut TscEmulation) };
        if r != 0 {
            println!("emulate-tsc: {name} refused ({})", std::io::Error::last_os_error());
            continue;
        }
        let tsc = (t.dx << 32) | (t.ax & 0xffff_ffff);
        println!("emulate-tsc: {name} tsc={tsc} length={} cx={:#x}", t.ip - ip, t.cx);
    }
    std::hint::black_box(&code);
    ExitCode::SUCCESS
}
