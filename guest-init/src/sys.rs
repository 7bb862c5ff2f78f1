//! The system calls init needs, as thin safe wrappers.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;

use crate::power::Power;
use crate::sdk::SDK_PATH;

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

/// Starts `cmd` with the environment guest commands get (PATH, HOME, the
/// SDK path under both names, the stop-faults command, none of hvsim's
/// boot parameters) and SIGCHLD
/// unblocked (init blocks it to read it from a signalfd).
pub fn spawn(cmd: &mut Command) -> io::Result<std::process::Child> {
    cmd.env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", "/root")
        .env("HVSIM_SDK_OUTPUT", SDK_PATH)
        .env("ANTITHESIS_SDK_LOCAL_OUTPUT", SDK_PATH)
        .env("ANTITHESIS_STOP_FAULTS", crate::sdk::STOP_FAULTS)
        .env_remove("hvsim_nodes");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let mut mask: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut mask);
            libc::sigaddset(&mut mask, libc::SIGCHLD);
            libc::sigprocmask(libc::SIG_UNBLOCK, &mask, std::ptr::null_mut());
            Ok(())
        });
    }
    cmd.spawn()
}

/// Runs `/bin/sh -c command`, reaping every other child that exits
/// meanwhile (PID 1 inherits orphans). Returns the shell's exit status, or
/// 128 + signal number if it was killed.
///
/// One `poll` waits on a signalfd for SIGCHLD and, with simulated nodes,
/// /dev/hvsim for machine events: no timers, so waiting costs the guest no
/// virtual time.
pub fn run_shell(command: &str, mut power: Option<&mut Power>) -> io::Result<u8> {
    // SAFETY: plain signal-set manipulation on local data.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut mask);
        libc::sigaddset(&mut mask, libc::SIGCHLD);
        if libc::sigprocmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: signalfd with a valid mask; the fd is owned below.
    let sfd = unsafe { libc::signalfd(-1, &mask, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if sfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sfd was just created and is owned by nobody else.
    let sfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(sfd) };

    let child = spawn(Command::new("/bin/sh").arg("-c").arg(command))?;
    let pid = child.id() as libc::pid_t;
    let events = power.as_ref().and_then(|p| p.fd());
    loop {
        let mut fds = [
            libc::pollfd { fd: sfd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            // A negative descriptor is ignored.
            libc::pollfd { fd: events.unwrap_or(-1), events: libc::POLLPRI, revents: 0 },
        ];
        // SAFETY: fds is a valid array of two pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if fds[1].revents != 0 {
            if let Some(p) = power.as_deref_mut() {
                p.handle_events();
            }
        }
        if fds[0].revents != 0 {
            let mut info = [0u8; 128];
            // SAFETY: reading signalfd records into a local buffer.
            while unsafe { libc::read(sfd.as_raw_fd(), info.as_mut_ptr().cast(), info.len()) } > 0 {}
            loop {
                let mut status = 0;
                // SAFETY: waitpid writes the status into a local.
                let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
                if r <= 0 {
                    break;
                }
                if r == pid {
                    let s = std::process::ExitStatus::from_raw(status);
                    return Ok(match (s.code(), s.signal()) {
                        (Some(code), _) => code as u8,
                        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
                        (None, None) => 255,
                    });
                }
            }
        }
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
