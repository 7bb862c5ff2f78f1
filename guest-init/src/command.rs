//! How init starts the commands it runs (the init command, services,
//! custom faults, debug shells): with the environment guest commands get.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::sdk::{SDK_PATH, STOP_FAULTS};

/// Starts `cmd` with the environment guest commands get (PATH, HOME, the
/// SDK path under both names, the stop-faults command, none of hvsim's
/// boot parameters) and SIGCHLD
/// unblocked (init blocks it to read it from a signalfd).
pub fn spawn(cmd: &mut Command) -> io::Result<std::process::Child> {
    cmd.env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .env("HOME", "/root")
        .env("HVSIM_SDK_OUTPUT", SDK_PATH)
        .env("ANTITHESIS_SDK_LOCAL_OUTPUT", SDK_PATH)
        .env("ANTITHESIS_STOP_FAULTS", STOP_FAULTS)
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
