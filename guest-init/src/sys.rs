//! The system calls init needs, as thin safe wrappers.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};

/// `ioctl` on /dev/hvsim that ends the run with an exit status
/// (`_IOW('h', 1, int)`, see the kernel patch "x86: hvsim guest support").
const HVSIM_IOC_EXIT: libc::c_ulong = 0x4004_6801;

pub fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    mount_flags(source, target, fstype, 0)
}

/// A path from outside init (a mount point from mountinfo) as a C string.
fn c_path(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

pub fn mount_flags(source: &str, target: &str, fstype: &str, flags: libc::c_ulong) -> io::Result<()> {
    let (src, tgt, fs) = (c_path(source)?, c_path(target)?, c_path(fstype)?);
    // SAFETY: all pointers are NUL-terminated strings that outlive the call.
    let r = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), flags, std::ptr::null()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unmounts `target`; `detach`: lazily, even while in use.
pub fn umount(target: &str, detach: bool) -> io::Result<()> {
    let tgt = c_path(target)?;
    let flags = if detach { libc::MNT_DETACH } else { 0 };
    // SAFETY: tgt is a NUL-terminated path.
    if unsafe { libc::umount2(tgt.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits until every process of `pids` has exited, or `limit` has passed.
/// One `poll` on their pidfds wakes at each exit: scanning /proc again and
/// again instead costs hundreds of system calls a scan, which the guest's
/// kernel runs slowly here, and takes the CPU from the processes waited
/// for. A process already gone has no pidfd and is not waited for.
pub fn wait_exits(pids: &std::collections::BTreeSet<libc::pid_t>, limit: std::time::Duration) {
    use std::os::fd::{OwnedFd, RawFd};
    let mut fds: Vec<OwnedFd> = pids
        .iter()
        .filter_map(|&pid| {
            // SAFETY: pidfd_open takes a PID and flags and returns a new fd.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            // SAFETY: a non-negative result is an fd this process owns.
            (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        })
        .collect();
    let deadline = std::time::Instant::now() + limit;
    while !fds.is_empty() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        let mut polls: Vec<libc::pollfd> =
            fds.iter().map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        let timeout = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: polls is a valid array of polls.len() pollfds.
        let r = unsafe { libc::poll(polls.as_mut_ptr(), polls.len() as libc::nfds_t, timeout) };
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return;
        }
        // A pidfd polls readable once its process has exited.
        let mut exited = polls.iter().map(|p| p.revents != 0);
        fds.retain(|_| !exited.next().unwrap_or(false));
    }
}

pub fn sync() {
    // SAFETY: sync has no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Ends the run through hvsim with `status`. Returns only on failure.
pub fn hvsim_exit(status: u8) -> io::Result<()> {
    let dev = std::fs::OpenOptions::new().write(true).open("/dev/hvsim")?;
    use std::os::fd::AsRawFd;
    // SAFETY: the ioctl takes its argument by value.
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), HVSIM_IOC_EXIT, libc::c_int::from(status)) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub fn power_off() {
    // SAFETY: reboot with a valid command; only PID 1 (root) calls it.
    unsafe { libc::reboot(libc::RB_POWER_OFF) };
}
