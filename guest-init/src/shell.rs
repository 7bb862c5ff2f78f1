//! The init command (`hvsim run --init-cmd`): run by `/bin/sh -c` while
//! init reaps orphans and handles hvsim's machine events.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use crate::command::spawn;
use crate::power::Power;

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
