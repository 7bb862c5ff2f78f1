//! PID 1 of hvsim's Linux guest.
//!
//! As init: mounts /proc, /sys, /dev, /tmp and /run, the SDK channel at
//! /run/hvsim/sdk (see `sdk.rs`), and with `hvsim_nodes=N` on the command line sets up
//! N simulated nodes, one network namespace each (see `nodes.rs`). That is
//! the boot, the same for every run of a machine shape: init then tells
//! hvsim it is ready and receives the run's work (see `work.rs`). It prints
//! a readiness line, starts the node service command
//! (`hvsim_abi::linux::NODE_COMMAND`) on each node, runs the run's command
//! (`hvsim_abi::linux::COMMAND`) with `/bin/sh -c`, follows hvsim's node
//! crashes and restarts (see `power.rs`), reaps every orphan meanwhile, then powers the
//! machine off with the command's exit status through `/dev/hvsim`
//! (falling back to an ordinary power-off outside hvsim).
//!
//! Run as any other PID it is a small tool box: as `hvsim-node I CMD...` it
//! runs a command on node I; as `stop-faults SECONDS`
//! (`$ANTITHESIS_STOP_FAULTS`) it pauses every fault; as `/init rdtsc N` it
//! prints N readings of the time-stamp counter.

mod bench;
mod clock;
mod command;
mod container;
mod custom;
mod debug;
mod nodes;
mod power;
mod sdk;
mod shell;
mod sys;
mod tools;
mod work;

use std::process::ExitCode;

fn main() -> ExitCode {
    if std::process::id() != 1 {
        let mut args = std::env::args();
        let argv0 = args.next().unwrap_or_default();
        match argv0.rsplit('/').next() {
            Some("hvsim-node") => return tools::node(args.collect()),
            Some("stop-faults") => return tools::stop_faults(args.collect()),
            _ => {}
        }
        return tools::main(args.collect());
    }
    let status = init();
    power_off(status)
}

/// Everything PID 1 does before powering off; returns the exit status.
fn init() -> u8 {
    for (source, target, fstype) in [
        ("proc", "/proc", "proc"),
        ("sysfs", "/sys", "sysfs"),
        ("devtmpfs", "/dev", "devtmpfs"),
        ("tmpfs", "/tmp", "tmpfs"),
        ("tmpfs", "/run", "tmpfs"),
    ] {
        if let Err(e) = sys::mount(source, target, fstype) {
            eprintln!("hvsim-init: cannot mount {fstype} on {target}: {e}");
            return 1;
        }
    }
    if let Err(e) = sdk::setup() {
        eprintln!("hvsim-init: cannot set up the SDK channel at {}: {e}", sdk::SDK_PATH);
        return 1;
    }
    let mut nodes = 0;
    if let Ok(n) = std::env::var("hvsim_nodes") {
        let Ok(n) = n.parse::<u16>() else {
            eprintln!("hvsim-init: hvsim_nodes={n} is not a node count");
            return 1;
        };
        if let Err(e) = nodes::setup(n) {
            eprintln!("hvsim-init: cannot set up the nodes: {e}");
            return 1;
        }
        nodes = n;
    }
    // The boot ends here; what follows is the run's.
    if let Err(e) = work::receive() {
        eprintln!("hvsim-init: cannot receive the run's work: {e}");
        return 1;
    }
    // With containers, every node runs its container and the run waits
    // for them all.
    let containers = container::count();
    let (command, service) = if containers > 0 {
        ("exec /init compose-wait".to_owned(), Some(power::Service::Container))
    } else {
        let command = std::fs::read_to_string(hvsim_abi::linux::COMMAND).unwrap_or_else(|_| "true".to_owned());
        (command, std::fs::read_to_string(hvsim_abi::linux::NODE_COMMAND).ok().map(power::Service::Shell))
    };
    if containers > nodes {
        eprintln!("hvsim-init: {containers} containers for {nodes} nodes");
        return 1;
    }
    let mut power = None;
    if nodes > 0 {
        // The disks' base images came with the run: forget what the boot
        // cached of the disks.
        for node in 0..nodes {
            power::flush_page_cache(node);
        }
        power = Some(power::Power::start(nodes, service));
    }
    println!("hvsim-init: ready");
    let status = match shell::run_shell(&command, power.as_mut()) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("hvsim-init: cannot run /bin/sh: {e}");
            127
        }
    };
    println!("hvsim-init: command exited with status {status}");
    status
}

fn power_off(status: u8) -> ExitCode {
    sys::sync();
    if let Err(e) = sys::hvsim_exit(status) {
        eprintln!("hvsim-init: /dev/hvsim: {e}; powering off instead");
    }
    sys::power_off();
    // PID 1 must not return: the kernel would panic.
    loop {
        std::thread::park();
    }
}
