//! Node power: what init does when hvsim crashes a simulated node and when
//! it restarts it (machine events from /dev/hvsim, see `hvsim_abi::hc::event`).
//!
//! hvsim itself has already made the node's disk lose (or tear) its
//! unflushed writes and cut its NIC and disk off. Init makes the rest of the
//! machine agree with that:
//! - power lost: kill every process in the node's network namespace,
//!   unmount what was mounted from its disk and drop the disk's page cache,
//!   so nothing the node wrote but never flushed can reach the disk later or
//!   be read back from memory;
//! - power back: drop the page cache again, mount again what was mounted,
//!   and start the node's service command (`--node-cmd`) again.
//!
//! Drawn `pause` and `kill` faults (`hvsim_vmm::faults::node`) touch only
//! the node's processes: paused, every one is stopped (`SIGSTOP`) until
//! resumed (`SIGCONT`); killed, every one gets `SIGKILL` and the service
//! starts again when the fault ends. The disk, its page cache and the NIC
//! are left as they are.
//!
//! The same events say when the machine's clock is to read otherwise
//! (`clock.rs`) and when to run a custom fault (`custom.rs`).

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use hvsim_abi::hc::event;

use crate::nodes;
use crate::sys;

/// `ioctl` on /dev/hvsim taking the oldest machine event
/// (`_IOR('h', 2, __u32)`, see the kernel patch "x86: hvsim guest support").
const HVSIM_IOC_EVENT: libc::c_ulong = 0x8004_6802;
/// `BLKFLSBUF`: write back and drop a block device's page cache.
const BLKFLSBUF: libc::c_ulong = 0x1261;

/// A file system mounted from a node's disk when the node lost power.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    target: String,
    fstype: String,
    read_only: bool,
}

/// A node's service.
#[derive(Clone, Debug)]
pub enum Service {
    /// A shell command (`--node-cmd`).
    Shell(String),
    /// The node's container (`container/`).
    Container,
}

pub struct Power {
    nodes: u16,
    /// What every node runs as its service, started at boot and again
    /// after each restart.
    service: Option<Service>,
    /// What to mount again on each node when it comes back.
    unmounted: Vec<Vec<Mount>>,
    /// /dev/hvsim, for events; `None` outside hvsim.
    dev: Option<File>,
    clock: crate::clock::Clock,
}

impl Power {
    /// Starts the service on every node.
    pub fn start(nodes: u16, service: Option<Service>) -> Power {
        let dev = std::fs::OpenOptions::new().read(true).open("/dev/hvsim").ok();
        let power =
            Power { nodes, service, unmounted: vec![Vec::new(); usize::from(nodes)], dev, clock: Default::default() };
        for node in 0..nodes {
            power.start_service(node);
        }
        power
    }

    /// The descriptor to poll for `POLLPRI` (events waiting).
    pub fn fd(&self) -> Option<RawFd> {
        self.dev.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Handles every event waiting.
    pub fn handle_events(&mut self) {
        while let Some(word) = self.next_event() {
            match event::split(word) {
                (event::NODE_DOWN, node) if node < self.nodes => self.down(node),
                (event::NODE_UP, node) if node < self.nodes => self.up(node),
                (event::NODE_PAUSE, node) if node < self.nodes => self.pause(node, true),
                (event::NODE_RESUME, node) if node < self.nodes => self.pause(node, false),
                (event::NODE_KILL, node) if node < self.nodes => self.kill(node),
                (event::NODE_STOP, node) if node < self.nodes => self.stop(node),
                (event::NODE_START, node) if node < self.nodes => self.start_again(node),
                (event::CLOCK, event::CLOCK_MACHINE) => self.clock.apply_rate(),
                (event::CLOCK, node) if node < self.nodes => self.clock.apply_node(node),
                (event::DEBUG, node) => crate::debug::start(node, node < self.nodes),
                (kind, node) if kind >= event::CUSTOM_BASE && node < self.nodes => {
                    crate::custom::start(kind - event::CUSTOM_BASE, node)
                }
                (event::SETUP, _) => {
                    if let Err(e) = std::fs::write(crate::container::composer::SETUP_MARKER, "") {
                        eprintln!("hvsim-init: cannot mark setup complete: {e}");
                    }
                }
                _ => eprintln!("hvsim-init: unknown machine event {word:#x}"),
            }
        }
    }

    fn next_event(&self) -> Option<u32> {
        let dev = self.dev.as_ref()?;
        let mut word: u32 = 0;
        // SAFETY: the ioctl writes one u32 into `word`.
        let r = unsafe { libc::ioctl(dev.as_raw_fd(), HVSIM_IOC_EVENT, &mut word as *mut u32) };
        (r == 0).then_some(word)
    }

    fn down(&mut self, node: u16) {
        if let Err(e) = std::fs::write(nodes::down_marker(node), "") {
            eprintln!("hvsim-init: node {node}: cannot mark it down: {e}");
        }
        let counted = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(nodes::crash_count_file(node))
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"));
        if let Err(e) = counted {
            eprintln!("hvsim-init: node {node}: cannot count its crash: {e}");
        }
        // Its container is gone: Test Composer must not enter what is left
        // of it (a restart writes the new one's).
        let _ = std::fs::remove_file(crate::container::state_dir(node).join("pid"));
        let killed = signal_node(node, libc::SIGKILL, true).map(|p| p.len()).unwrap_or_else(|e| {
            eprintln!("hvsim-init: node {node}: cannot list its processes: {e}");
            0
        });
        let mounts = unmount_disk(node);
        flush_page_cache(node);
        let targets: Vec<&str> = mounts.iter().map(|m| m.target.as_str()).collect();
        println!("hvsim-init: {} lost power: killed {killed} processes, unmounted {targets:?}", self.label(node));
        self.unmounted[usize::from(node)] = mounts;
    }

    fn up(&mut self, node: u16) {
        flush_page_cache(node);
        let disk = nodes::disk_link(node);
        let mut mounted = Vec::new();
        for m in std::mem::take(&mut self.unmounted[usize::from(node)]) {
            let flags = if m.read_only { libc::MS_RDONLY } else { 0 };
            match sys::mount_flags(&disk, &m.target, &m.fstype, flags) {
                Ok(()) => mounted.push(m.target),
                Err(e) => eprintln!("hvsim-init: node {node}: cannot mount {disk} on {} again: {e}", m.target),
            }
        }
        let _ = std::fs::remove_file(nodes::down_marker(node));
        println!("hvsim-init: {} restarted: mounted {mounted:?}", self.label(node));
        self.start_service(node);
    }

    /// Stops (or continues) every process of the node.
    fn pause(&mut self, node: u16, stop: bool) {
        let (signal, what) =
            if stop { (libc::SIGSTOP, "paused: stopped") } else { (libc::SIGCONT, "resumed: continued") };
        match signal_node(node, signal, false).map(|p| p.len()) {
            Ok(n) => println!("hvsim-init: {} {what} {n} processes", self.label(node)),
            Err(e) => eprintln!("hvsim-init: node {node}: cannot list its processes: {e}"),
        }
    }

    /// Kills every process of the node; its disk and page cache stay.
    fn kill(&mut self, node: u16) {
        let _ = std::fs::remove_file(crate::container::state_dir(node).join("pid"));
        match signal_node(node, libc::SIGKILL, true).map(|p| p.len()) {
            Ok(n) => println!("hvsim-init: {} killed: {n} processes", self.label(node)),
            Err(e) => eprintln!("hvsim-init: node {node}: cannot list its processes: {e}"),
        }
    }

    /// Stops the node gracefully: `SIGTERM`, then `SIGKILL` for what is
    /// left after the grace period.
    fn stop(&mut self, node: u16) {
        let _ = std::fs::remove_file(crate::container::state_dir(node).join("pid"));
        let grace = std::time::Duration::from_millis(event::STOP_GRACE_MS);
        let stopped = signal_node(node, libc::SIGTERM, false).and_then(|terminated| {
            sys::wait_exits(&terminated, grace);
            Ok((terminated.len(), signal_node(node, libc::SIGKILL, true)?.len()))
        });
        match stopped {
            Ok((n, killed)) => println!(
                "hvsim-init: {} stopped: {n} processes, {killed} killed after the grace period",
                self.label(node)
            ),
            Err(e) => eprintln!("hvsim-init: node {node}: cannot list its processes: {e}"),
        }
    }

    /// Starts the service of a stopped or killed node again, unless the node has lost
    /// power meanwhile (power coming back starts it).
    fn start_again(&mut self, node: u16) {
        if std::fs::metadata(nodes::down_marker(node)).is_ok() {
            return;
        }
        println!("hvsim-init: {} started again", self.label(node));
        self.start_service(node);
    }

    /// How messages name a node: by its service's name if it runs one.
    fn label(&self, node: u16) -> String {
        match &self.service {
            Some(Service::Container) => format!("node {node} ({})", crate::container::name(node)),
            _ => format!("node {node}"),
        }
    }

    fn start_service(&self, node: u16) {
        let mut c = std::process::Command::new("/bin/hvsim-node");
        c.arg(node.to_string());
        match &self.service {
            None => return,
            Some(Service::Shell(cmd)) => c.args(["sh", "-c", cmd]),
            Some(Service::Container) => c.args(["/init", "container", &node.to_string()]),
        };
        // Reaped with every other orphan by init's loop.
        if let Err(e) = crate::command::spawn(&mut c) {
            eprintln!("hvsim-init: node {node}: cannot start its service: {e}");
        }
    }
}

/// Sends `signal` to every process in node `node`'s network namespace but
/// the one holding it; with `until_gone` (SIGKILL), again until they are
/// gone (so none still holds a file on the node's disk). Returns those it
/// signalled.
fn signal_node(node: u16, signal: libc::c_int, until_gone: bool) -> io::Result<BTreeSet<libc::pid_t>> {
    let holder = std::fs::read_to_string(nodes::pid_file(node))?.trim().to_owned();
    let ns = std::fs::read_link(format!("/proc/{holder}/ns/net"))?;
    let mut killed = BTreeSet::new();
    // Dying takes the victims a little CPU; 5 s of virtual time at most.
    for _ in 0..5000 {
        let mut alive = 0;
        for entry in std::fs::read_dir("/proc")? {
            let name = entry?.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<libc::pid_t>().ok()) else { continue };
            // An exited process (even a zombie) has no namespace link.
            if pid == 1
                || name.to_str() == Some(holder.as_str())
                || !std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|n| n == ns)
            {
                continue;
            }
            alive += 1;
            // SAFETY: sending a signal has no memory effects.
            if killed.insert(pid) && unsafe { libc::kill(pid, signal) } != 0 {
                killed.remove(&pid);
            }
        }
        if alive == 0 || !until_gone {
            return Ok(killed);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    eprintln!("hvsim-init: node {node}: some processes outlived SIGKILL");
    Ok(killed)
}

/// Unmounts everything mounted from node `node`'s disk (last mounted first);
/// returns the mounts to restore, in mount order.
fn unmount_disk(node: u16) -> Vec<Mount> {
    let Ok(meta) = std::fs::metadata(nodes::disk_link(node)) else { return Vec::new() };
    if !meta.file_type().is_block_device() {
        return Vec::new();
    }
    let dev = format!("{}:{}", libc::major(meta.rdev()), libc::minor(meta.rdev()));
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mounts: Vec<Mount> = info.lines().filter_map(|l| parse_mountinfo(l, &dev)).collect();
    for m in mounts.iter().rev() {
        if let Err(e) = sys::umount(&m.target, false) {
            // Someone outside the node still uses it: detach it at least.
            eprintln!("hvsim-init: node {node}: {} is busy ({e}); detaching it", m.target);
            let _ = sys::umount(&m.target, true);
        }
    }
    mounts
}

/// The mount on line `line` of /proc/self/mountinfo if it is of device
/// `dev` ("major:minor") and mounts the whole file system.
fn parse_mountinfo(line: &str, dev: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let f: Vec<&str> = left.split(' ').collect();
    let (device, root, target, options) = (*f.get(2)?, *f.get(3)?, *f.get(4)?, *f.get(5)?);
    if device != dev || root != "/" {
        return None;
    }
    Some(Mount {
        target: unescape(target),
        fstype: right.split(' ').next()?.to_owned(),
        read_only: options.split(',').any(|o| o == "ro"),
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok());
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Drops node `node`'s disk's page cache. With the disk dead, dirty pages
/// fail to write back and are dropped too.
pub fn flush_page_cache(node: u16) {
    let Ok(disk) = File::open(nodes::disk_link(node)) else { return };
    // SAFETY: BLKFLSBUF takes no argument.
    unsafe { libc::ioctl(disk.as_raw_fd(), BLKFLSBUF, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines() {
        let line = "36 25 254:16 / /mnt/my\\040data rw,relatime shared:1 - ext4 /dev/vdb rw";
        let m = parse_mountinfo(line, "254:16").unwrap();
        assert_eq!(m, Mount { target: "/mnt/my data".into(), fstype: "ext4".into(), read_only: false });
        assert_eq!(parse_mountinfo(line, "254:0"), None, "another device");
        let bind = "37 25 254:16 /sub /srv ro,relatime - ext4 /dev/vdb rw";
        assert_eq!(parse_mountinfo(bind, "254:16"), None, "a bind mount of a subdirectory");
        let ro = "38 25 254:16 / /ro ro,relatime - ext2 /dev/vdb ro";
        assert!(parse_mountinfo(ro, "254:16").unwrap().read_only);
    }
}
