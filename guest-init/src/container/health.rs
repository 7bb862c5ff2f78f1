//! Health checks and probes: a command run in the container's root, mount
//! and IPC namespaces, as its user, or a TCP or HTTP connection from the
//! node, on Docker's schedule (kubelet's is a case of it). A passing
//! readiness check puts `healthy` in the node's state directory; a failing
//! liveness or startup probe has the supervisor stop the container.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Duration;

use super::process::{become_user, container_env, exec};
use super::root::chroot;
use super::spec::{Check, Health, Role, Spec};
use super::{atomic_write, ctx, status_code};
use crate::nodes;

/// Where a container's readiness goes: its own marker in the pod's state
/// directory and, when every container of the pod has its marker there
/// and one of them has a probe that decides it, the pod's `healthy`,
/// which dependencies and Services read. (A container without such a
/// probe is ready while it runs, as in Kubernetes; a pod without any is
/// never `healthy`, as a compose service without a healthcheck is not.)
/// The pod's containers are sibling processes: each change is made under
/// the state directory's lock.
pub(super) struct Ready {
    pub(super) dir: PathBuf,
    /// This container's marker (`ready`, `ready.c1`...).
    pub(super) own: String,
    /// Every container's marker.
    pub(super) gates: Vec<String>,
    /// Whether a probe decides when one of them is ready.
    pub(super) probed: bool,
}

impl Ready {
    pub(super) fn set(&self, ready: bool) {
        let r = (|| -> io::Result<()> {
            let lock = File::open(&self.dir)?;
            // SAFETY: flock on a descriptor we hold; released when it closes.
            if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let own = self.dir.join(&self.own);
            if ready {
                atomic_write(&own, b"")?;
            } else if own.exists() {
                std::fs::remove_file(&own)?;
            }
            let healthy = self.dir.join("healthy");
            if self.probed && self.gates.iter().all(|g| self.dir.join(g).exists()) {
                atomic_write(&healthy, b"")
            } else if healthy.exists() {
                std::fs::remove_file(&healthy)
            } else {
                Ok(())
            }
        })();
        if let Err(e) = r {
            eprintln!("hvsim-init: {}: cannot mark readiness: {e}", self.dir.display());
        }
    }
}

/// A container's probes on their schedules (see [`Role`]).
pub(super) struct Probes(Vec<HealthState>);

/// What a tick asks of the supervisor.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    Keep,
    /// A liveness or startup probe failed too often: stop the container.
    Stop,
}

impl Probes {
    pub(super) fn new(spec: &Spec) -> Probes {
        Probes(spec.probes.iter().map(|(role, h)| HealthState::new(*role, h.clone())).collect())
    }

    /// Whether a startup probe is still to pass (the others wait for it).
    fn starting(&self) -> bool {
        self.0.iter().any(|p| p.role == Role::Startup && !p.passed)
    }

    fn active(&self) -> impl Iterator<Item = &HealthState> {
        let starting = self.starting();
        self.0.iter().filter(move |p| if starting { p.role == Role::Startup } else { p.role != Role::Startup })
    }

    /// How long until a probe is due; `None` without probes.
    pub(super) fn next_wake(&self, elapsed: Duration) -> Option<Duration> {
        self.active().map(|p| p.next_wake(elapsed)).min()
    }

    /// Starts due checks and collects finished ones.
    pub(super) fn tick(&mut self, container: libc::pid_t, spec: &Spec, ready: &Ready, elapsed: Duration) -> Verdict {
        let starting = self.starting();
        let mut verdict = Verdict::Keep;
        for p in &mut self.0 {
            if starting == (p.role == Role::Startup) && p.tick(container, spec, ready, elapsed) == Verdict::Stop {
                verdict = Verdict::Stop;
            }
        }
        verdict
    }

    pub(super) fn stop(&mut self) {
        for p in &mut self.0 {
            p.stop();
        }
    }
}

/// One probe's schedule: Docker's for a healthcheck, which with
/// `start_interval` equal to the start period is kubelet's for a probe
/// (the first check after `initialDelaySeconds`, then every period).
struct HealthState {
    role: Role,
    health: Health,
    /// The check in flight: its PID and when it started.
    running: Option<(libc::pid_t, Duration)>,
    next: Duration,
    failures: u32,
    /// Readiness: passing now (healthy); startup: has passed.
    passed: bool,
}

impl HealthState {
    fn new(role: Role, health: Health) -> HealthState {
        HealthState {
            // The first check at once, unless a start period gives the
            // service time to come up.
            next: health.start_period.min(health.start_interval),
            role,
            health,
            running: None,
            failures: 0,
            passed: false,
        }
    }

    /// Docker's pause after a check: `start_interval` during the start
    /// period until a check has passed, `interval` after.
    fn interval_at(&self, elapsed: Duration) -> Duration {
        if elapsed < self.health.start_period && !self.passed {
            self.health.start_interval
        } else {
            self.health.interval
        }
    }

    /// How long until something is due (the next check, or a timeout),
    /// `elapsed` since the container started.
    fn next_wake(&self, elapsed: Duration) -> Duration {
        let due = match self.running {
            Some((_, started)) => started + self.health.timeout,
            None => self.next,
        };
        due.saturating_sub(elapsed).max(Duration::from_millis(1))
    }

    /// Starts a due check, or collects a finished or timed-out one.
    fn tick(&mut self, container: libc::pid_t, spec: &Spec, ready: &Ready, elapsed: Duration) -> Verdict {
        let Some((pid, started)) = self.running else {
            if elapsed >= self.next {
                match start_check(container, spec, &self.health.check) {
                    Ok(pid) => self.running = Some((pid, elapsed)),
                    Err(e) => {
                        eprintln!("hvsim-init: service {}: cannot run its {}: {e}", spec.name, self.what());
                        self.next = elapsed + self.interval_at(elapsed);
                    }
                }
            }
            return Verdict::Keep;
        };
        let mut status = 0;
        // SAFETY: waitpid on our own child, status into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        let timed_out = r == 0 && elapsed >= started + self.health.timeout;
        if r == 0 && !timed_out {
            return Verdict::Keep;
        }
        if timed_out {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
        }
        self.running = None;
        self.next = elapsed + self.interval_at(elapsed);
        let ok = !timed_out && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        if ok {
            self.failures = 0;
            if !self.passed && self.role != Role::Liveness {
                self.passed = true;
                if self.role == Role::Readiness {
                    println!("hvsim-init: service {} is healthy", spec.name);
                    ready.set(true);
                } else {
                    println!("hvsim-init: service {} passed its startup probe", spec.name);
                    // Without a readiness probe, started is ready (kubelet).
                    if !spec.probes.iter().any(|(r, _)| *r == Role::Readiness) {
                        println!("hvsim-init: service {} is healthy", spec.name);
                        ready.set(true);
                    }
                }
            }
            return Verdict::Keep;
        }
        if elapsed < self.health.start_period {
            return Verdict::Keep;
        }
        self.failures += 1;
        let retries = self.health.retries.max(1);
        // Said once, and again when the failures would make a healthy
        // service unhealthy: why a dependency waits.
        if self.failures == 1 || self.failures.is_multiple_of(retries) {
            let why = if timed_out { "timed out".to_owned() } else { format!("status {}", status_code(status)) };
            println!("hvsim-init: service {}: {} failed ({why}; {} in a row)", spec.name, self.what(), self.failures);
        }
        if self.failures < retries {
            return Verdict::Keep;
        }
        match self.role {
            Role::Readiness => {
                if self.passed {
                    self.passed = false;
                    println!("hvsim-init: service {} is unhealthy", spec.name);
                    ready.set(false);
                }
                Verdict::Keep
            }
            Role::Liveness | Role::Startup => {
                println!("hvsim-init: service {}: stopping it, its {} failed {retries} times", spec.name, self.what());
                Verdict::Stop
            }
        }
    }

    fn what(&self) -> &'static str {
        match self.role {
            Role::Readiness => "health check",
            Role::Liveness => "liveness probe",
            Role::Startup => "startup probe",
        }
    }

    fn stop(&mut self) {
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

/// Starts a check; returns its PID. A command runs in the container
/// (`exec_check`); a connection is made from the supervisor's own network
/// namespace, which is the node's, as kubelet probes a pod's IP.
fn start_check(container: libc::pid_t, spec: &Spec, check: &Check) -> io::Result<libc::pid_t> {
    if let Check::Exec(args) = check {
        return exec_check(container, spec, args);
    }
    // SAFETY: the supervisor is single-threaded; the child only connects
    // and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    let ok = match check {
        Check::Tcp(addr) => TcpStream::connect(addr.as_str()).is_ok(),
        Check::Http { addr, path, headers } => http_ok(addr, path, headers).unwrap_or(false),
        Check::Exec(_) => false,
    };
    // SAFETY: the child ends here.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// kubelet's HTTP probe: `GET path` with its headers; 200 to 399 passes.
fn http_ok(addr: &str, path: &str, headers: &[String]) -> io::Result<bool> {
    let mut s = TcpStream::connect(addr)?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/hvsim\r\nAccept: */*\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("Connection: close\r\n\r\n");
    s.write_all(request.as_bytes())?;
    let mut line = String::new();
    BufReader::new(s).take(1024).read_line(&mut line)?;
    Ok(status_passes(&line))
}

/// Whether an HTTP status line (`HTTP/1.1 204 No Content`) says 200 to 399.
fn status_passes(line: &str) -> bool {
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or("");
    let code: u16 = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
    version.starts_with("HTTP/") && (200..400).contains(&code)
}

/// Starts the health check command inside the container's namespaces
/// (mount, IPC; PID not: the check is not one of its processes), as its
/// user; returns its PID.
fn exec_check(container: libc::pid_t, spec: &Spec, args: &[String]) -> io::Result<libc::pid_t> {
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
        let mut h = HealthState::new(Role::Readiness, health.clone());
        assert_eq!(h.next, s(1));
        assert_eq!(h.interval_at(s(5)), s(1));
        assert_eq!(h.interval_at(s(30)), s(60), "the start period is over");
        h.passed = true;
        assert_eq!(h.interval_at(s(5)), s(60), "a check has passed");
        // Without a start period: the first check at once, then `interval`.
        let h = HealthState::new(Role::Readiness, Health { start_period: s(0), ..health });
        assert_eq!(h.next, s(0));
        assert_eq!(h.interval_at(s(0)), s(60));
    }

    #[test]
    fn kubelets_schedule_is_a_start_period_paced_by_itself() {
        // initialDelaySeconds 5, periodSeconds 10: the first check at 5 s.
        let s = Duration::from_secs;
        let h = Health { interval: s(10), start_period: s(5), start_interval: s(5), ..Health::default() };
        let h = HealthState::new(Role::Liveness, h);
        assert_eq!((h.next, h.interval_at(s(5))), (s(5), s(10)));
    }

    #[test]
    fn http_status_lines_pass_from_200_to_399() {
        for (line, passes) in [
            ("HTTP/1.1 200 OK\r\n", true),
            ("HTTP/1.0 302 Found\r\n", true),
            ("HTTP/1.1 399 x\r\n", true),
            ("HTTP/1.1 400 Bad Request\r\n", false),
            ("HTTP/1.1 503 Service Unavailable\r\n", false),
            ("HTTP/1.1 199 x\r\n", false),
            ("-ERR unknown command\r\n", false),
            ("", false),
        ] {
            assert_eq!(status_passes(line), passes, "{line:?}");
        }
    }

    #[test]
    fn only_the_startup_probe_runs_until_it_passes() {
        let probes =
            |roles: &[Role]| Probes(roles.iter().map(|r| HealthState::new(*r, Health::default())).collect::<Vec<_>>());
        let mut p = probes(&[Role::Readiness, Role::Startup, Role::Liveness]);
        assert_eq!(p.active().map(|h| h.role).collect::<Vec<_>>(), [Role::Startup]);
        p.0[1].passed = true;
        assert_eq!(p.active().map(|h| h.role).collect::<Vec<_>>(), [Role::Readiness, Role::Liveness]);
        assert_eq!(probes(&[]).next_wake(Duration::ZERO), None);
    }

    /// The pod is healthy when every container is ready and a probe
    /// decides for one of them; never without such a probe.
    #[test]
    fn a_pod_is_healthy_when_every_container_is_ready() {
        let dir = std::env::temp_dir().join(format!("hvsim-ready-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gates = vec!["ready".to_owned(), "ready.c1".to_owned()];
        let of = |own: &str, probed| Ready { dir: dir.clone(), own: own.into(), gates: gates.clone(), probed };
        let healthy = || dir.join("healthy").exists();
        let (main, side) = (of("ready", true), of("ready.c1", true));
        side.set(true); // the sidecar runs, and has no probe
        assert!(!healthy(), "the main container's probe has not passed");
        main.set(true);
        assert!(healthy());
        side.set(false); // the sidecar exited
        assert!(!healthy());
        side.set(true);
        assert!(healthy());
        main.set(false);
        assert!(!healthy());
        // No probe anywhere: running is not healthy (compose's meaning).
        let unprobed = Ready { gates: vec!["ready".into()], ..of("ready", false) };
        unprobed.set(true);
        assert!(!healthy());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
