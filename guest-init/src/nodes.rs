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
///
/// Every step is a system call of init's own (no `ip` process per node,
/// and /sys read once, not once per node): on nested hosts the guest
/// kernel is emulated, so a process costs ~0.7 s and a 64-node machine
/// would otherwise spend minutes on set-up before its first snapshot.
pub fn setup(count: u16) -> io::Result<()> {
    std::fs::create_dir_all(RUN_DIR)?;
    let own_net = File::open("/proc/self/ns/net")?;
    let nics = read_sys("/sys/class/net", "address")?;
    let disks = read_sys("/sys/block", "serial")?;
    let rtnl = Rtnl::open()?;
    let mut hosts = String::from("127.0.0.1 localhost\n");
    for node in 0..count {
        let want = mac(node);
        let iface = find(&nics, &want).ok_or_else(|| err(format!("no NIC with MAC {want} for node {node}")))?;
        let pid = spawn_holder(node)?;
        std::fs::write(pid_file(node), format!("{pid}\n"))?;
        rtnl.move_to_namespace(iface, pid)
            .map_err(|e| err(format!("moving {iface} into node {node}'s namespace: {e}")))?;
        let node_net = File::open(format!("/proc/{pid}/ns/net"))?;
        setns(&node_net, libc::CLONE_NEWNET)?;
        let configured = configure(iface, address(node));
        setns(&own_net, libc::CLONE_NEWNET)?;
        configured?;
        let disk = link_disk(&disks, &format!("hvsim-node{node}"), &disk_link(node))
            .ok_or_else(|| err(format!("no disk with serial hvsim-node{node}")))??;
        // Image disks exist only on machines made for containers, at most
        // one per node.
        if let Some(linked) = link_disk(&disks, &format!("hvsim-image{node}"), &image_link(node)) {
            linked?;
        }
        let [a, b, c, d] = address(node);
        hosts.push_str(&format!("{a}.{b}.{c}.{d} node{node}\n"));
        println!("hvsim-init: node {node}: eth0 {a}.{b}.{c}.{d} (was {iface}), disk {disk}");
    }
    std::fs::write("/etc/hosts", hosts)
}

/// Each entry of `dir` (a /sys class) with the contents of its attribute
/// file `attr`, trimmed (entries without it are left out).
fn read_sys(dir: &str, attr: &str) -> io::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Ok(value) = std::fs::read_to_string(entry.path().join(attr)) {
            let value = value.trim_end_matches(['\0', '\n']).to_owned();
            out.push((entry.file_name().to_string_lossy().into_owned(), value));
        }
    }
    Ok(out)
}

/// The entry whose attribute is `value`.
fn find<'a>(entries: &'a [(String, String)], value: &str) -> Option<&'a str> {
    entries.iter().find(|(_, v)| v == value).map(|(name, _)| name.as_str())
}

/// Links the disk whose virtio serial is `serial` as `link`; `None` if no
/// disk has that serial.
fn link_disk(disks: &[(String, String)], serial: &str, link: &str) -> Option<io::Result<String>> {
    let dev = format!("/dev/{}", find(disks, serial)?);
    Some(std::os::unix::fs::symlink(&dev, link).map(|()| dev))
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

/// A route netlink socket, for the one request `ioctl` has no form of:
/// moving a NIC into another network namespace (what `ip link set dev X
/// netns PID` sends). Made by hand, like the ioctls here: init depends on
/// libc alone, and the message is four fixed fields.
struct Rtnl(OwnedFd);

impl Rtnl {
    fn open() -> io::Result<Rtnl> {
        // SAFETY: a plain netlink socket, owned below.
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just created.
        Ok(Rtnl(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// RTM_SETLINK { index of `iface`, IFLA_NET_NS_PID = `pid` }, acknowledged.
    fn move_to_namespace(&self, iface: &str, pid: libc::pid_t) -> io::Result<()> {
        let name = std::ffi::CString::new(iface).map_err(|_| err(format!("bad interface name {iface:?}")))?;
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        const LEN: usize = 16 + 16 + 8; // nlmsghdr, ifinfomsg, one u32 attribute
        const NLMSG_ERROR: u16 = 2;
        const IFLA_NET_NS_PID: u16 = 19;
        let mut msg = [0u8; LEN];
        msg[0..4].copy_from_slice(&(LEN as u32).to_ne_bytes());
        msg[4..6].copy_from_slice(&libc::RTM_SETLINK.to_ne_bytes());
        msg[6..8].copy_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
        // Sequence number 1; then the ifinfomsg: family AF_UNSPEC and type
        // 0, the index, flags and change 0.
        msg[8..12].copy_from_slice(&1u32.to_ne_bytes());
        msg[20..24].copy_from_slice(&index.to_ne_bytes());
        msg[32..34].copy_from_slice(&8u16.to_ne_bytes());
        msg[34..36].copy_from_slice(&IFLA_NET_NS_PID.to_ne_bytes());
        msg[36..40].copy_from_slice(&pid.to_ne_bytes());
        // SAFETY: msg is LEN valid bytes; the kernel is a netlink socket's default peer.
        if unsafe { libc::send(self.0.as_raw_fd(), msg.as_ptr().cast(), LEN, 0) } != LEN as isize {
            return Err(io::Error::last_os_error());
        }
        // The answer is an NLMSG_ERROR whose error is 0 (the acknowledgement
        // asked for) or a negative errno.
        let mut reply = [0u8; 256];
        // SAFETY: reply is a writable buffer of its length.
        let n = unsafe { libc::recv(self.0.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
        if n < 20 {
            return Err(if n < 0 {
                io::Error::last_os_error()
            } else {
                err(format!("short netlink reply ({n} bytes)"))
            });
        }
        let kind = u16::from_ne_bytes([reply[4], reply[5]]);
        let code = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
        match kind {
            NLMSG_ERROR if code == 0 => Ok(()),
            NLMSG_ERROR => Err(io::Error::from_raw_os_error(-code)),
            _ => Err(err(format!("unexpected netlink reply of type {kind}"))),
        }
    }
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
