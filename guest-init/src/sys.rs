//! The system calls init needs, as thin safe wrappers.

use std::ffi::CString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// `ioctl` on /dev/hvsim that ends the run with an exit status
/// (`_IOW('h', 1, int)`, see the kernel patch "x86: hvsim guest support").
const HVSIM_IOC_EXIT: libc::c_ulong = 0x4004_6801;

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in a constant path")
}

pub fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    std::fs::create_dir_all(target)?;
    let (src, tgt, fs) = (cstr(source), cstr(target), cstr(fstype));
    // SAFETY: all pointers are NUL-terminated strings that outlive the call.
    let r = unsafe { libc::mount(src.as_ptr(), tgt.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Runs `/bin/sh -c command`, reaping every other child that exits in the
/// meantime (PID 1 inherits orphans). Returns the shell's exit status, or
/// 128 + signal number if it was killed.
pub fn run_shell(command: &str) -> io::Result<u8> {
    let child = Command::new("/bin/sh")
        .arg("-c")
        .arg(command)
        .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", "/root")
        .env_remove("hvsim_cmd")
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
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
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

pub fn power_off() {
    // SAFETY: reboot with a valid command; only PID 1 (root) calls it.
    unsafe { libc::reboot(libc::RB_POWER_OFF) };
}
