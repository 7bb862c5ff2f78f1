//! Health checks: run in the container's root, mount and IPC namespaces,
//! as its user, on Docker's schedule; `healthy` in the node's state
//! directory while they pass.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use super::process::{become_user, container_env, exec};
use super::root::chroot;
use super::spec::{Health, Spec};
use super::{atomic_write, ctx, status_code};
use crate::nodes;

/// A running health check schedule.
pub(super) struct HealthState {
    health: Health,
    /// The check in flight: its PID and when it started.
    running: Option<(libc::pid_t, Duration)>,
    next: Duration,
    failures: u32,
    healthy: bool,
}

impl HealthState {
    pub(super) fn new(health: Health) -> HealthState {
        HealthState {
            // The first check at once, unless a start period gives the
            // service time to come up.
            next: health.start_period.min(health.start_interval),
            health,
            running: None,
            failures: 0,
            healthy: false,
        }
    }

    /// Docker's pause after a check: `start_interval` during the start
    /// period until a check has passed, `interval` after.
    fn interval_at(&self, elapsed: Duration) -> Duration {
        if elapsed < self.health.start_period && !self.healthy {
            self.health.start_interval
        } else {
            self.health.interval
        }
    }

    /// How long until something is due (the next check, or a timeout),
    /// `elapsed` since the container started.
    pub(super) fn next_wake(&self, elapsed: Duration) -> Duration {
        let due = match self.running {
            Some((_, started)) => started + self.health.timeout,
            None => self.next,
        };
        due.saturating_sub(elapsed).max(Duration::from_millis(1))
    }

    /// Starts a due check, or collects a finished or timed-out one.
    pub(super) fn tick(&mut self, container: libc::pid_t, spec: &Spec, dir: &Path, elapsed: Duration) {
        if let Some((pid, started)) = self.running {
            let mut status = 0;
            // SAFETY: waitpid on our own child, status into a local.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            let timed_out = r == 0 && elapsed >= started + self.health.timeout;
            if r == 0 && !timed_out {
                return;
            }
            if timed_out {
                // SAFETY: killing and reaping our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
            }
            self.running = None;
            let ok = !timed_out && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
            if ok {
                self.failures = 0;
                if !self.healthy {
                    self.healthy = true;
                    println!("hvsim-init: service {} is healthy", spec.name);
                    let _ = atomic_write(&dir.join("healthy"), b"");
                }
            } else if elapsed >= self.health.start_period {
                self.failures += 1;
                // Said once, and again when the failures would make a
                // healthy service unhealthy: why a dependency waits.
                if self.failures == 1 || self.failures.is_multiple_of(self.health.retries.max(1)) {
                    let why =
                        if timed_out { "timed out".to_owned() } else { format!("status {}", status_code(status)) };
                    println!(
                        "hvsim-init: service {}: health check failed ({why}; {} in a row)",
                        spec.name, self.failures
                    );
                }
                if self.failures >= self.health.retries.max(1) && self.healthy {
                    self.healthy = false;
                    println!("hvsim-init: service {} is unhealthy", spec.name);
                    let _ = std::fs::remove_file(dir.join("healthy"));
                }
            }
            self.next = elapsed + self.interval_at(elapsed);
            return;
        }
        if elapsed >= self.next {
            match health_check(container, spec, &self.health.args) {
                Ok(pid) => self.running = Some((pid, elapsed)),
                Err(e) => {
                    eprintln!("hvsim-init: service {}: cannot run its health check: {e}", spec.name);
                    self.next = elapsed + self.interval_at(elapsed);
                }
            }
        }
    }

    pub(super) fn stop(&mut self) {
        if let Some((pid, _)) = self.running.take() {
            let mut status = 0;
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
    }
}

/// Starts the health check command inside the container's namespaces
/// (mount, IPC; PID not: the check is not one of its processes), as its
/// user; returns its PID.
pub(super) fn health_check(container: libc::pid_t, spec: &Spec, args: &[String]) -> io::Result<libc::pid_t> {
    let mnt = File::open(format!("/proc/{container}/ns/mnt"))?;
    let ipc = File::open(format!("/proc/{container}/ns/ipc"))?;
    // The namespace's root is not the container's (that is a chroot under
    // it, see `build_root`): the container's is entered through its process.
    let root = File::open(format!("/proc/{container}/root"))?;
    // SAFETY: the supervisor is single-threaded; the child only execs.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    let r = (|| -> io::Result<()> {
        nodes::setns(&ipc, libc::CLONE_NEWIPC).map_err(ctx("joining its IPC namespace"))?;
        nodes::setns(&mnt, libc::CLONE_NEWNS).map_err(ctx("joining its mount namespace"))?;
        // SAFETY: fchdir to a directory we hold open.
        if unsafe { libc::fchdir(root.as_raw_fd()) } != 0 {
            return Err(ctx("entering its root")(io::Error::last_os_error()));
        }
        chroot(".")?;
        let env = container_env(spec, &become_user(&spec.user)?);
        std::env::set_current_dir(&spec.workdir).or_else(|_| std::env::set_current_dir("/"))?;
        // Its output is not the service's: only its status counts.
        let null = File::options().read(true).write(true).open("/dev/null")?;
        // SAFETY: redirecting this process's standard descriptors.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
        Err(exec(args, &env))
    })();
    if let Err(e) = r {
        eprintln!("hvsim-init: service {}: health check: {e}", spec.name);
    }
    // SAFETY: the child ends here if it could not exec.
    unsafe { libc::_exit(127) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_interval_paces_checks_until_one_passes_in_the_start_period() {
        let s = Duration::from_secs;
        let health = Health { interval: s(60), start_period: s(30), start_interval: s(1), ..Health::default() };
        let mut h = HealthState::new(health.clone());
        assert_eq!(h.next, s(1));
        assert_eq!(h.interval_at(s(5)), s(1));
        assert_eq!(h.interval_at(s(30)), s(60), "the start period is over");
        h.healthy = true;
        assert_eq!(h.interval_at(s(5)), s(60), "a check has passed");
        // Without a start period: the first check at once, then `interval`.
        let h = HealthState::new(Health { start_period: s(0), ..health });
        assert_eq!(h.next, s(0));
        assert_eq!(h.interval_at(s(0)), s(60));
    }
}
