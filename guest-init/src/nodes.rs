//! One network namespace per simulated node.
//!
//! hvsim gives node `i` a NIC with MAC 52:54:00:00:hi:lo (`i + 1` in the last
//! two bytes) and a disk whose virtio serial is `hvsim-node<i>`. For each
//! node init starts a holder process in new network and UTS namespaces,
//! moves the node's NIC into it as `eth0` with address 10.0.0.<i+1>/24,
//! and links the disk as /dev/hvsim-disk<i>. `hvsim-node I CMD...` (this
//! binary under another name) runs a command inside node I's namespaces.
//! Processes of different nodes can then reach each other only through
//! hvsim's simulated switch.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;

/// Where init records each node's holder PID (`node<i>.pid`).
pub const RUN_DIR: &str = "/run/hvsim";

pub fn pid_file(node: u16) -> String {
    format!("{RUN_DIR}/node{node}.pid")
}

/// Exists while node `node` has no power (see `power.rs`).
pub fn down_marker(node: u16) -> String {
    format!("{RUN_DIR}/node{node}.down")
}

/// Whether node `node` is without power (crashed, not restarted yet).
pub fn is_down(node: u16) -> bool {
    std::path::Path::new(&down_marker(node)).exists()
}

/// One byte per crash of node `node` so far.
pub fn crash_count_file(node: u16) -> String {
    format!("{RUN_DIR}/node{node}.crashes")
}

pub fn disk_link(node: u16) -> String {
    format!("/dev/hvsim-disk{node}")
}

/// Image disk `k` (a container image's root file system), if the machine
/// has image disks.
pub fn image_link(k: u16) -> String {
    format!("/dev/hvsim-image{k}")
}

/// Node `node`'s address (hvsim supports at most 128 nodes).
pub fn address(node: u16) -> [u8; 4] {
    [10, 0, 0, u8::try_from(node + 1).expect("at most 254 nodes")]
}

fn mac(node: u16) -> String {
    let [hi, lo] = (node + 1).to_be_bytes();
    format!("52:54:00:00:{hi:02x}:{lo:02x}")
}

fn err(what: String) -> io::Error {
    io::Error::other(what)
}

/// Sets up `count` nodes.
pub fn setup(count: u16) -> io::Result<()> {
    std::fs::create_dir_all(RUN_DIR)?;
    let own_net = File::open("/proc/self/ns/net")?;
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for node in 0..count {
        let iface = find_nic(node)?;
        let pid = spawn_holder(node)?;
        std::fs::write(pid_file(node), format!("{pid}\n"))?;
        let status = Command::new("/bin/busybox")
            .args(["ip", "link", "set", "dev", &iface, "netns", &pid.to_string()])
            .status()?;
        if !status.success() {
            return Err(err(format!("moving {iface} into node {node}'s namespace failed ({status})")));
        }
        let node_net = File::open(format!("/proc/{pid}/ns/net"))?;
        setns(&node_net, libc::CLONE_NEWNET)?;
        let configured = configure(&iface, address(node));
        setns(&own_net, libc::CLONE_NEWNET)?;
        configured?;
        let disk = link_disk(&format!("hvsim-node{node}"), &disk_link(node))?;
        // Image disks exist only on machines made for containers, at most
        // one per node.
        let _ = link_disk(&format!("hvsim-image{node}"), &image_link(node));
        let [a, b, c, d] = address(node);
        hosts.push_str(&format!("{a}.{b}.{c}.{d} node{node}\n"));
        println!("hvsim-init: node {node}: eth0 {a}.{b}.{c}.{d} (was {iface}), disk {disk}");
    }
    std::fs::write("/etc/hosts", hosts)
}

/// The interface whose MAC address is node `node`'s.
fn find_nic(node: u16) -> io::Result<String> {
    let want = mac(node);
    for entry in std::fs::read_dir("/sys/class/net")? {
        let entry = entry?;
        let addr = std::fs::read_to_string(entry.path().join("address")).unwrap_or_default();
        if addr.trim() == want {
            return Ok(entry.file_name().to_string_lossy().into_owned());
        }
    }
    Err(err(format!("no NIC with MAC {want} for node {node}")))
}

/// Links the disk whose virtio serial is `serial` as `link`.
fn link_disk(serial: &str, link: &str) -> io::Result<String> {
    for entry in std::fs::read_dir("/sys/block")? {
        let entry = entry?;
        let s = std::fs::read_to_string(entry.path().join("serial")).unwrap_or_default();
        if s.trim_end_matches(['\0', '\n']) == serial {
            let dev = format!("/dev/{}", entry.file_name().to_string_lossy());
            std::os::unix::fs::symlink(&dev, link)?;
            return Ok(dev);
        }
    }
    Err(err(format!("no disk with serial {serial}")))
}

/// Forks a process that holds new network and UTS namespaces for `node`
/// (hostname `node<i>`), and a time namespace for its children (the
/// node's realtime offset, `clock.rs`), and sleeps forever. Returns its PID
/// once the namespaces exist.
fn spawn_holder(node: u16) -> io::Result<libc::pid_t> {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let hostname = format!("node{node}");
    // SAFETY: init is single-threaded; the child only makes system calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: system calls with valid arguments; the child never returns.
        unsafe {
            let ok = libc::unshare(libc::CLONE_NEWNET | libc::CLONE_NEWUTS | CLONE_NEWTIME) == 0
                && libc::sethostname(hostname.as_ptr().cast(), hostname.len()) == 0;
            libc::write(write_end.as_raw_fd(), [u8::from(ok)].as_ptr().cast(), 1);
            if !ok {
                libc::_exit(1);
            }
            loop {
                libc::pause();
            }
        }
    }
    drop(write_end);
    let mut ok = [0u8];
    File::from(read_end).read_exact(&mut ok)?;
    if ok[0] != 1 {
        return Err(err(format!("node {node}: cannot create its namespaces")));
    }
    Ok(pid)
}

/// `CLONE_NEWTIME` (linux/sched.h; not in the libc crate for this target).
pub const CLONE_NEWTIME: libc::c_int = 0x80;

pub fn setns(ns: &File, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: ns is an open namespace file.
    if unsafe { libc::setns(ns.as_raw_fd(), kind) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// In the current network namespace: renames `iface` to eth0, gives it
/// `addr`/24, and brings it and the loopback up.
fn configure(iface: &str, addr: [u8; 4]) -> io::Result<()> {
    // SAFETY: a plain datagram socket, owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just created.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq::new(iface);
    req.data[..16].copy_from_slice(&pad("eth0"));
    ioctl(&sock, libc::SIOCSIFNAME, &mut req, "rename")?;
    let mut req = IfReq::new("eth0");
    req.set_inet(addr);
    ioctl(&sock, libc::SIOCSIFADDR, &mut req, "set address")?;
    let mut req = IfReq::new("eth0");
    req.set_inet([255, 255, 255, 0]);
    ioctl(&sock, libc::SIOCSIFNETMASK, &mut req, "set netmask")?;
    for name in ["eth0", "lo"] {
        let mut req = IfReq::new(name);
        ioctl(&sock, libc::SIOCGIFFLAGS, &mut req, "get flags")?;
        let flags = i16::from_ne_bytes([req.data[0], req.data[1]]) | libc::IFF_UP as i16;
        req.data[..2].copy_from_slice(&flags.to_ne_bytes());
        ioctl(&sock, libc::SIOCSIFFLAGS, &mut req, "bring up")?;
    }
    Ok(())
}

/// `struct ifreq`: a name, then a 24-byte union.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: [u8; 24],
}

fn pad(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    let n = name.len().min(15);
    out[..n].copy_from_slice(&name.as_bytes()[..n]);
    out
}

impl IfReq {
    fn new(name: &str) -> IfReq {
        IfReq { name: pad(name), data: [0; 24] }
    }

    /// The union as a `sockaddr_in`.
    fn set_inet(&mut self, addr: [u8; 4]) {
        self.data = [0; 24];
        self.data[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        self.data[4..8].copy_from_slice(&addr);
    }
}

fn ioctl(sock: &OwnedFd, request: libc::c_ulong, req: &mut IfReq, what: &str) -> io::Result<()> {
    // SAFETY: req is a properly sized ifreq for these socket ioctls.
    if unsafe { libc::ioctl(sock.as_raw_fd(), request, req as *mut IfReq) } == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(err(format!("{what} on {}: {e}", String::from_utf8_lossy(&req.name).trim_end_matches('\0'))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_identities() {
        assert_eq!(address(0), [10, 0, 0, 1]);
        assert_eq!(address(2), [10, 0, 0, 3]);
        assert_eq!(mac(0), "52:54:00:00:00:01");
        assert_eq!(pid_file(1), "/run/hvsim/node1.pid");
    }
}
