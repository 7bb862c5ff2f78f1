//! Containers: each node runs its image's command as Docker would.
//!
//! The VMM gives node `i` a read-only image disk (the image's root file
//! system, `hvsim-image<i>`) beside its own disk, and describes the
//! container in `CONTAINERS/<i>` (`hvsim_abi::container`). Node `i`'s
//! service is then its supervisor, `/init container <i>`, started in the
//! node's network and UTS namespaces when the run starts and again when a
//! crashed node restarts. The supervisor:
//!
//! 1. waits for the services it depends on (started, healthy, or exited
//!    with status 0), watching their state directories with inotify;
//! 2. clones the container's first process in new mount, PID and IPC
//!    namespaces, which builds the root: the image under an overlay whose
//!    writable upper layer is on the node's disk (so a crash loses exactly
//!    the unflushed writes), /proc, /sys, /dev (null, zero, full, random,
//!    urandom, tty, ptmx, pts, shm, mqueue), then pivot_root's into it,
//!    binds /etc/hosts, /etc/hostname, /etc/resolv.conf and the volumes,
//!    takes the image's user, and execs the command;
//! 3. relays the container's stdout and stderr to the console, each line
//!    prefixed with the service's name; runs the health check; restarts
//!    the container as its restart policy says;
//! 4. records the exit status in the node's state directory, where
//!    `/init compose-wait` (the run's command) collects them all.
//!
//! State directory `/run/hvsim/c/<i>`: `started`, `healthy` and `exit`
//! (`<status> <monotonic ns>`) markers, and the mount points the
//! container's mount namespace uses.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use hvsim_abi::container::{fields, key, SEP};

use crate::nodes;

/// The Antithesis SDKs' coverage library, where they look for it.
const VOIDSTAR: &str = "/usr/lib/libvoidstar.so";

/// Where each node's state directory is.
pub const STATE_DIR: &str = "/run/hvsim/c";

pub fn state_dir(node: u16) -> PathBuf {
    PathBuf::from(format!("{STATE_DIR}/{node}"))
}

fn spec_path(node: u16) -> PathBuf {
    PathBuf::from(format!("{}/{node}", hvsim_abi::linux::CONTAINERS))
}

/// The name of node `node`'s service (its number if it cannot be read).
pub fn name(node: u16) -> String {
    Spec::load(node).map_or_else(|_| node.to_string(), |s| s.name)
}

/// How many nodes have a container (0 without containers).
pub fn count() -> u16 {
    let mut n = 0;
    while spec_path(n).exists() {
        n += 1;
    }
    n
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restart {
    No,
    Always,
    OnFailure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    Started,
    Healthy,
    CompletedSuccessfully,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum MountKind {
    /// A directory on the node's disk (a named volume).
    Volume,
    /// A file or directory the inbox delivered (a bind mount of the host's).
    File,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    kind: MountKind,
    source: String,
    target: String,
    read_only: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Health {
    args: Vec<String>,
    interval: Duration,
    timeout: Duration,
    start_period: Duration,
    retries: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Spec {
    name: String,
    hostname: String,
    args: Vec<String>,
    env: Vec<String>,
    workdir: String,
    user: String,
    restart: Restart,
    init: bool,
    mounts: Vec<Mount>,
    depends: Vec<(u16, Condition)>,
    health: Option<Health>,
    hosts: String,
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Spec {
    fn parse(bytes: &[u8]) -> io::Result<Spec> {
        let mut s = Spec {
            name: String::new(),
            hostname: String::new(),
            args: Vec::new(),
            env: Vec::new(),
            workdir: "/".into(),
            user: String::new(),
            restart: Restart::No,
            init: false,
            mounts: Vec::new(),
            depends: Vec::new(),
            health: None,
            hosts: String::new(),
        };
        let ms = |v: &str| v.parse::<u64>().map(Duration::from_millis).map_err(|_| bad(format!("{v:?} is not milliseconds")));
        for field in fields(bytes) {
            let (k, v) = field.map_err(|at| bad(format!("malformed field at byte {at}")))?;
            match k {
                key::NAME => s.name = v.into(),
                key::HOSTNAME => s.hostname = v.into(),
                key::ARG => s.args.push(v.into()),
                key::ENV => s.env.push(v.into()),
                key::WORKDIR => s.workdir = v.into(),
                key::USER => s.user = v.into(),
                key::RESTART => {
                    s.restart = match v {
                        "no" => Restart::No,
                        "always" | "unless-stopped" => Restart::Always,
                        "on-failure" => Restart::OnFailure,
                        _ => return Err(bad(format!("restart policy {v:?}"))),
                    }
                }
                key::INIT => s.init = v == "1",
                key::MOUNT => {
                    let p: Vec<&str> = v.split(SEP).collect();
                    let [kind, source, target, ro] = p[..] else { return Err(bad(format!("mount {v:?}"))) };
                    let kind = match kind {
                        "volume" => MountKind::Volume,
                        "file" => MountKind::File,
                        _ => return Err(bad(format!("mount kind {kind:?}"))),
                    };
                    s.mounts.push(Mount { kind, source: source.into(), target: target.into(), read_only: ro == "1" });
                }
                key::DEPENDS => {
                    let (node, cond) = v.split_once(SEP).ok_or_else(|| bad(format!("dependency {v:?}")))?;
                    let node = node.parse().map_err(|_| bad(format!("dependency node {node:?}")))?;
                    let cond = match cond {
                        "service_started" => Condition::Started,
                        "service_healthy" => Condition::Healthy,
                        "service_completed_successfully" => Condition::CompletedSuccessfully,
                        _ => return Err(bad(format!("dependency condition {cond:?}"))),
                    };
                    s.depends.push((node, cond));
                }
                key::HEALTH_ARG => s.health.get_or_insert_with(Health::default).args.push(v.into()),
                key::HEALTH_INTERVAL_MS => s.health.get_or_insert_with(Health::default).interval = ms(v)?,
                key::HEALTH_TIMEOUT_MS => s.health.get_or_insert_with(Health::default).timeout = ms(v)?,
                key::HEALTH_START_PERIOD_MS => s.health.get_or_insert_with(Health::default).start_period = ms(v)?,
                key::HEALTH_RETRIES => {
                    s.health.get_or_insert_with(Health::default).retries =
                        v.parse().map_err(|_| bad(format!("health retries {v:?}")))?
                }
                key::HOSTS => s.hosts = v.into(),
                _ => return Err(bad(format!("unknown field {k:?}"))),
            }
        }
        if s.name.is_empty() || s.args.is_empty() {
            return Err(bad("a container without a name or a command".into()));
        }
        if s.health.as_ref().is_some_and(|h| h.args.is_empty()) {
            return Err(bad("a health check without a command".into()));
        }
        Ok(s)
    }

    fn load(node: u16) -> io::Result<Spec> {
        Spec::parse(&std::fs::read(spec_path(node))?)
    }
}

/// `/init container <node>`: node's supervisor (see the module's doc).
pub fn supervise(args: &[String]) -> ExitCode {
    let Some(node) = args.first().and_then(|n| n.parse::<u16>().ok()) else {
        eprintln!("usage: /init container NODE");
        return ExitCode::from(2);
    };
    let spec = match Spec::load(node) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hvsim-init: node {node}: cannot read its container: {e}");
            return ExitCode::from(1);
        }
    };
    let status = match Supervisor::new(node, spec).and_then(|s| s.run()) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("hvsim-init: node {node}: container: {e}");
            let _ = record_exit(node, 125);
            125
        }
    };
    ExitCode::from(status)
}

struct Supervisor {
    node: u16,
    spec: Spec,
    dir: PathBuf,
}

impl Supervisor {
    fn new(node: u16, spec: Spec) -> io::Result<Supervisor> {
        let dir = state_dir(node);
        std::fs::create_dir_all(&dir)?;
        // A restarted node starts over: what it said before its crash is stale.
        for marker in ["started", "healthy", "exit"] {
            let _ = std::fs::remove_file(dir.join(marker));
        }
        Ok(Supervisor { node, spec, dir })
    }

    fn run(self) -> io::Result<u8> {
        if let Some(status) = self.wait_for_dependencies()? {
            record_exit(self.node, status)?;
            return Ok(status);
        }
        set_hostname(&self.spec.hostname)?;
        let mut restarts = 0u32;
        loop {
            let status = self.run_once()?;
            let again = match self.spec.restart {
                Restart::No => false,
                Restart::Always => true,
                Restart::OnFailure => status != 0,
            };
            if !again {
                println!("hvsim-init: service {} exited with status {status}", self.spec.name);
                record_exit(self.node, status)?;
                return Ok(status);
            }
            // Docker's back-off: 100 ms, doubling, at most a minute.
            let delay = Duration::from_millis(100u64 << restarts.min(9)).min(Duration::from_secs(60));
            restarts += 1;
            println!(
                "hvsim-init: service {} exited with status {status}; restarting it in {} ms (restart {restarts})",
                self.spec.name,
                delay.as_millis()
            );
            let _ = std::fs::remove_file(self.dir.join("healthy"));
            std::thread::sleep(delay);
        }
    }

    /// Waits until every dependency holds; `Some(status)` if one never can
    /// (a dependency that had to complete successfully failed).
    fn wait_for_dependencies(&self) -> io::Result<Option<u8>> {
        for &(dep, cond) in &self.spec.depends {
            let dir = state_dir(dep);
            std::fs::create_dir_all(&dir)?;
            let marker = match cond {
                Condition::Started => "started",
                Condition::Healthy => "healthy",
                Condition::CompletedSuccessfully => "exit",
            };
            wait_for_file(&dir, marker)?;
            if cond == Condition::CompletedSuccessfully {
                let status = read_exit(dep).unwrap_or(255);
                if status != 0 {
                    println!(
                        "hvsim-init: service {} not started: the service on node {dep} it depends on exited with status {status}",
                        self.spec.name
                    );
                    return Ok(Some(1));
                }
            }
        }
        Ok(None)
    }

    /// Runs the container once; returns its exit status.
    fn run_once(&self) -> io::Result<u8> {
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC;
        // SAFETY: clone without CLONE_VM is fork with new namespaces; the
        // supervisor is single-threaded, so the child may run any code.
        let pid = unsafe { libc::syscall(libc::SYS_clone, (flags | libc::SIGCHLD) as libc::c_ulong, 0, 0, 0, 0) };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(out_r);
            drop(err_r);
            // SAFETY: dup2 onto the standard descriptors of this process.
            unsafe {
                libc::dup2(out_w.as_raw_fd(), 1);
                libc::dup2(err_w.as_raw_fd(), 2);
            }
            drop(out_w);
            drop(err_w);
            let e = enter(self.node, &self.spec);
            eprintln!("hvsim-init: cannot start the container: {e}");
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(127) };
        }
        drop(out_w);
        drop(err_w);
        let pid = pid as libc::pid_t;
        atomic_write(&self.dir.join("started"), b"")?;
        println!("hvsim-init: service {} started", self.spec.name);
        self.relay_and_wait(pid, out_r, err_r)
    }

    /// Relays the container's output line by line and runs its health
    /// check until it exits; returns its status.
    fn relay_and_wait(&self, pid: libc::pid_t, out: OwnedFd, err: OwnedFd) -> io::Result<u8> {
        // SAFETY: pidfd_open on our own child.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned here.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        let mut streams = [Some(Relay::new(out, &self.spec.name)), Some(Relay::new(err, &self.spec.name))];
        let mut health = self.spec.health.as_ref().map(|h| HealthState::new(h.clone()));
        let started = monotonic();
        let mut exited = false;
        while !exited || streams.iter().any(Option::is_some) {
            let mut fds: Vec<libc::pollfd> = streams
                .iter()
                .map(|s| libc::pollfd { fd: s.as_ref().map_or(-1, |r| r.fd.as_raw_fd()), events: libc::POLLIN, revents: 0 })
                .collect();
            fds.push(libc::pollfd { fd: if exited { -1 } else { pidfd.as_raw_fd() }, events: libc::POLLIN, revents: 0 });
            let timeout = match &health {
                Some(h) if !exited => {
                    h.next_wake(monotonic().saturating_sub(started)).as_millis().min(i32::MAX as u128) as i32
                }
                _ => -1,
            };
            // SAFETY: fds is a valid array.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            for (i, s) in streams.iter_mut().enumerate() {
                if fds[i].revents != 0 {
                    if let Some(relay) = s {
                        if !relay.pump() {
                            *s = None;
                        }
                    }
                }
            }
            if fds[2].revents != 0 {
                exited = true;
            }
            if let Some(h) = &mut health {
                if !exited {
                    h.tick(pid, &self.spec, &self.dir, monotonic().saturating_sub(started));
                }
            }
        }
        if let Some(h) = &mut health {
            h.stop();
        }
        Ok(wait_status(pid))
    }
}

/// A container's output stream, relayed line by line to the console.
struct Relay {
    fd: File,
    prefix: String,
    partial: Vec<u8>,
}

impl Relay {
    fn new(fd: OwnedFd, name: &str) -> Relay {
        Relay { fd: File::from(fd), prefix: format!("{name} | "), partial: Vec::new() }
    }

    /// Reads what is there; false at the end of the stream.
    fn pump(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        let (n, end) = match self.fd.read(&mut buf) {
            Ok(0) => (0, true),
            Ok(n) => (n, false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => (0, true),
        };
        let out = self.lines(&buf[..n], end);
        // One write per batch of lines, so lines of services do not mix.
        let _ = io::stdout().write_all(&out);
        !end
    }

    /// Takes `data`; returns the complete lines so far, each prefixed (at
    /// the end, the unfinished last line too). Lines longer than 4 KiB
    /// are cut, so the console sees them as they come.
    fn lines(&mut self, data: &[u8], end: bool) -> Vec<u8> {
        self.partial.extend_from_slice(data);
        if (end && !self.partial.is_empty() && !self.partial.ends_with(b"\n"))
            || (self.partial.len() >= 4096 && !self.partial.contains(&b'\n'))
        {
            self.partial.push(b'\n');
        }
        let Some(last) = self.partial.iter().rposition(|&b| b == b'\n') else { return Vec::new() };
        let mut out = Vec::with_capacity(last + 64);
        for line in self.partial[..=last].split_inclusive(|&b| b == b'\n') {
            out.extend_from_slice(self.prefix.as_bytes());
            out.extend_from_slice(line);
        }
        self.partial.drain(..=last);
        out
    }
}

/// A running health check schedule.
struct HealthState {
    health: Health,
    /// The check in flight: its PID and when it started.
    running: Option<(libc::pid_t, Duration)>,
    next: Duration,
    failures: u32,
    healthy: bool,
}

impl HealthState {
    fn new(health: Health) -> HealthState {
        HealthState { next: health.start_period.min(health.interval), health, running: None, failures: 0, healthy: false }
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
    fn tick(&mut self, container: libc::pid_t, spec: &Spec, dir: &Path, elapsed: Duration) {
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
                if self.failures == 1 || self.failures % self.health.retries.max(1) == 0 {
                    let why = if timed_out { "timed out".to_owned() } else { format!("status {}", status_code(status)) };
                    println!("hvsim-init: service {}: health check failed ({why}; {} in a row)", spec.name, self.failures);
                }
                if self.failures >= self.health.retries.max(1) && self.healthy {
                    self.healthy = false;
                    println!("hvsim-init: service {} is unhealthy", spec.name);
                    let _ = std::fs::remove_file(dir.join("healthy"));
                }
            }
            self.next = elapsed + self.health.interval;
            return;
        }
        if elapsed >= self.next {
            match health_check(container, spec, &self.health.args) {
                Ok(pid) => self.running = Some((pid, elapsed)),
                Err(e) => {
                    eprintln!("hvsim-init: service {}: cannot run its health check: {e}", spec.name);
                    self.next = elapsed + self.health.interval;
                }
            }
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

/// Starts the health check command inside the container's namespaces
/// (mount, IPC; PID not: the check is not one of its processes), as its
/// user; returns its PID.
fn health_check(container: libc::pid_t, spec: &Spec, args: &[String]) -> io::Result<libc::pid_t> {
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

/// In the container's first process (new mount, PID and IPC namespaces):
/// builds the root, enters it, and execs the command. Returns only on
/// failure.
fn enter(node: u16, spec: &Spec) -> io::Error {
    match build_root(node, spec).and_then(|()| {
        let home = become_user(&spec.user)?;
        let env = container_env(spec, &home);
        std::env::set_current_dir(&spec.workdir)
            .map_err(|e| io::Error::new(e.kind(), format!("working directory {}: {e}", spec.workdir)))?;
        if spec.init {
            return Err(run_as_init(&spec.args, &env));
        }
        Err(exec(&spec.args, &env))
    }) {
        Ok(()) => unreachable!("enter returns only errors"),
        Err(e) => e,
    }
}

fn ctx(what: &str) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Mounts the container's root and moves into it.
fn build_root(node: u16, spec: &Spec) -> io::Result<()> {
    let dir = state_dir(node);
    let p = |s: &str| dir.join(s).display().to_string();
    // Nothing mounted here may reach the node's other processes.
    mount_raw(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None).map_err(ctx("making mounts private"))?;
    // pivot_root cannot move the initramfs (it has no parent mount): work
    // from a bind mount of it instead.
    let host = p("host");
    std::fs::create_dir_all(&host)?;
    mount_raw(Some("/"), &host, None, libc::MS_BIND | libc::MS_REC, None).map_err(ctx("binding /"))?;
    chroot(&host)?;
    let (lower, disk, root) = (p("lower"), p("disk"), p("root"));
    for d in [&lower, &disk, &root] {
        std::fs::create_dir_all(d)?;
    }
    mount_raw(Some(&nodes::image_link(node)), &lower, Some("ext4"), libc::MS_RDONLY, None)
        .map_err(ctx("mounting the image"))?;
    mount_raw(Some(&nodes::disk_link(node)), &disk, Some("ext4"), 0, Some("noinit_itable")).map_err(ctx("mounting the node's disk"))?;
    for d in ["upper", "work", "volumes"] {
        std::fs::create_dir_all(format!("{disk}/{d}"))?;
    }
    let opts = format!("lowerdir={lower},upperdir={disk}/upper,workdir={disk}/work");
    mount_raw(Some("overlay"), &root, Some("overlay"), 0, Some(&opts)).map_err(ctx("mounting the overlay"))?;
    // Files the container sees at fixed places, and the volumes: opened
    // now, bound after pivot_root so their targets resolve inside the
    // container (a symbolic link in the image cannot send them out of it).
    let etc = p("etc");
    std::fs::create_dir_all(&etc)?;
    std::fs::write(format!("{etc}/hosts"), &spec.hosts)?;
    std::fs::write(format!("{etc}/hostname"), format!("{}\n", spec.hostname))?;
    std::fs::write(format!("{etc}/resolv.conf"), "# hvsim: services resolve through /etc/hosts\n")?;
    let mut binds: Vec<(File, String, bool, bool)> = Vec::new();
    for f in ["hosts", "hostname", "resolv.conf"] {
        binds.push((open_path(&format!("{etc}/{f}"))?, format!("/etc/{f}"), false, false));
    }
    for m in &spec.mounts {
        let source = match m.kind {
            MountKind::Volume => {
                let v = format!("{disk}/volumes/{}", m.source);
                std::fs::create_dir_all(&v)?;
                v
            }
            MountKind::File => m.source.clone(),
        };
        let is_dir = std::fs::metadata(&source).map_err(ctx(&format!("volume source {source}")))?.is_dir();
        binds.push((open_path(&source)?, m.target.clone(), m.read_only, is_dir));
    }
    // The kernel's file systems.
    let mk = |rel: &str| -> io::Result<String> {
        let t = format!("{root}{rel}");
        std::fs::create_dir_all(&t)?;
        Ok(t)
    };
    mount_raw(Some("proc"), &mk("/proc")?, Some("proc"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)
        .map_err(ctx("mounting /proc"))?;
    mount_raw(Some("sysfs"), &mk("/sys")?, Some("sysfs"), libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)
        .map_err(ctx("mounting /sys"))?;
    let dev = mk("/dev")?;
    mount_raw(Some("tmpfs"), &dev, Some("tmpfs"), libc::MS_NOSUID, Some("mode=755,size=65536k")).map_err(ctx("mounting /dev"))?;
    for (name, major, minor) in [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)] {
        let path = CString::new(format!("{dev}/{name}")).expect("no NUL");
        // SAFETY: mknod with a valid path.
        if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(major, minor)) } != 0 {
            return Err(ctx(&format!("creating /dev/{name}"))(io::Error::last_os_error()));
        }
        // The umask took bits of the mode.
        // SAFETY: chmod with a valid path.
        unsafe { libc::chmod(path.as_ptr(), 0o666) };
    }
    mount_raw(Some("devpts"), &mk("/dev/pts")?, Some("devpts"), libc::MS_NOSUID | libc::MS_NOEXEC, Some("newinstance,ptmxmode=0666,mode=0620,gid=5"))
        .map_err(ctx("mounting /dev/pts"))?;
    mount_raw(Some("shm"), &mk("/dev/shm")?, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, Some("mode=1777,size=65536k"))
        .map_err(ctx("mounting /dev/shm"))?;
    mount_raw(Some("mqueue"), &mk("/dev/mqueue")?, Some("mqueue"), libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, None)
        .map_err(ctx("mounting /dev/mqueue"))?;
    // hvsim's device (SDK coverage maps), as the guest's init has it.
    if let Ok(m) = std::fs::metadata("/dev/hvsim") {
        use std::os::unix::fs::MetadataExt;
        let path = CString::new(format!("{dev}/hvsim")).expect("no NUL");
        // SAFETY: mknod with a valid path.
        if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o666, m.rdev()) } != 0 {
            return Err(ctx("creating /dev/hvsim")(io::Error::last_os_error()));
        }
        // SAFETY: chmod with a valid path.
        unsafe { libc::chmod(path.as_ptr(), 0o666) };
    }
    // The SDK channel, where the guest's own commands have it.
    let run_hvsim = mk("/run/hvsim")?;
    mount_raw(Some("tmpfs"), &run_hvsim, Some("tmpfs"), libc::MS_NOSUID | libc::MS_NODEV, Some("mode=755,size=64k"))
        .map_err(ctx("mounting /run/hvsim"))?;
    mount_raw(Some("hvsim"), &mk("/run/hvsim/channel")?, Some("hvsim"), 0, None).map_err(ctx("mounting the SDK channel"))?;
    std::os::unix::fs::symlink("channel/sdk", format!("{run_hvsim}/sdk"))?;
    if Path::new(VOIDSTAR).exists() {
        binds.push((open_path(VOIDSTAR)?, VOIDSTAR.to_owned(), true, false));
    }
    for (link, target) in [("ptmx", "pts/ptmx"), ("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")] {
        std::os::unix::fs::symlink(target, format!("{dev}/{link}"))?;
    }
    // Into the root. The old root goes under the new /dev (a tmpfs, so
    // nothing of this reaches the image or the disk) until the binds are
    // made: their sources must still be in this mount namespace.
    let old = format!("{dev}/.hvsim-old-root");
    std::fs::create_dir(&old)?;
    pivot_root(&root, &old).map_err(ctx("pivot_root"))?;
    std::env::set_current_dir("/")?;
    let tmp = Path::new("/tmp");
    if !tmp.exists() {
        std::fs::create_dir_all(tmp)?;
        std::fs::set_permissions(tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
    }
    for (fd, target, read_only, is_dir) in binds {
        let t = Path::new(&target);
        if is_dir {
            std::fs::create_dir_all(t).map_err(ctx(&format!("volume target {target}")))?;
        } else if !t.exists() {
            if let Some(parent) = t.parent() {
                std::fs::create_dir_all(parent)?;
            }
            File::create(t).map_err(ctx(&format!("mount target {target}")))?;
        }
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount_raw(Some(&source), &target, None, libc::MS_BIND, None).map_err(ctx(&format!("binding {target}")))?;
        if read_only {
            mount_raw(None, &target, None, libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY, None)
                .map_err(ctx(&format!("making {target} read-only")))?;
        }
    }
    crate::sys::umount("/dev/.hvsim-old-root", true).map_err(ctx("detaching the old root"))?;
    std::fs::remove_dir("/dev/.hvsim-old-root")?;
    Ok(())
}

/// Resolves `spec` (`user`, `uid`, `user:group`, `uid:gid`; empty is root)
/// in the container's /etc/passwd and /etc/group, and becomes that user,
/// with the supplementary groups /etc/group gives it. Returns its home.
fn become_user(spec: &str) -> io::Result<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let (u, g) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let u = if u.is_empty() { "0" } else { u };
    let entry = passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| {
        f.len() >= 7 && (f[0] == u || f[2] == u)
    });
    let (uid, mut gid, name, home) = match (&entry, u.parse::<u32>()) {
        (Some(f), _) => (
            f[2].parse().map_err(|_| bad(format!("/etc/passwd: bad uid for {u}")))?,
            f[3].parse().map_err(|_| bad(format!("/etc/passwd: bad gid for {u}")))?,
            f[0].to_owned(),
            f[5].to_owned(),
        ),
        (None, Ok(uid)) => (uid, 0, String::new(), "/".to_owned()),
        (None, Err(_)) => return Err(bad(format!("user {u:?} is not in the image's /etc/passwd"))),
    };
    if let Some(g) = g {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => group
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == g)
                .and_then(|f| f[2].parse().ok())
                .ok_or_else(|| bad(format!("group {g:?} is not in the image's /etc/group")))?,
        };
    }
    let mut groups: Vec<libc::gid_t> = vec![gid];
    if !name.is_empty() {
        for f in group.lines().map(|l| l.split(':').collect::<Vec<_>>()) {
            if f.len() >= 4 && f[3].split(',').any(|m| m == name) {
                if let Ok(n) = f[2].parse() {
                    if !groups.contains(&n) {
                        groups.push(n);
                    }
                }
            }
        }
    }
    // SAFETY: plain credential system calls with valid arguments.
    unsafe {
        if libc::setgroups(groups.len(), groups.as_ptr()) != 0
            || libc::setgid(gid) != 0
            || libc::setuid(uid) != 0
        {
            return Err(ctx(&format!("becoming user {spec:?}"))(io::Error::last_os_error()));
        }
    }
    Ok(home)
}

/// The container's environment as Docker sets it: the image's and the
/// service's (already merged), HOSTNAME, and HOME and PATH if unset.
fn container_env(spec: &Spec, home: &str) -> Vec<String> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut order = Vec::new();
    let mut set = |k: &str, v: &str, replace: bool| {
        if !env.contains_key(k) {
            order.push(k.to_owned());
        } else if !replace {
            return;
        }
        env.insert(k.to_owned(), v.to_owned());
    };
    set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", true);
    set("HOSTNAME", &spec.hostname, true);
    // The SDK channel, under both names SDKs look for (a service may say
    // otherwise).
    set("HVSIM_SDK_OUTPUT", crate::sdk::SDK_PATH, true);
    set("ANTITHESIS_SDK_LOCAL_OUTPUT", crate::sdk::SDK_PATH, true);
    for e in &spec.env {
        let (k, v) = e.split_once('=').unwrap_or((e, ""));
        set(k, v, true);
    }
    set("HOME", if home.is_empty() { "/" } else { home }, false);
    order.iter().map(|k| format!("{k}={}", env[k])).collect()
}

/// Execs `args` with `env`, finding the program on the environment's PATH.
fn exec(args: &[String], env: &[String]) -> io::Error {
    let path = env.iter().find_map(|e| e.strip_prefix("PATH=")).unwrap_or("/usr/bin:/bin");
    let program = if args[0].contains('/') {
        PathBuf::from(&args[0])
    } else {
        match path.split(':').map(|d| Path::new(d).join(&args[0])).find(|p| is_executable(p)) {
            Some(p) => p,
            None => return io::Error::new(io::ErrorKind::NotFound, format!("{}: not found on PATH {path}", args[0])),
        }
    };
    let c = |s: &str| CString::new(s).unwrap_or_default();
    let argv: Vec<CString> = args.iter().map(|a| c(a)).collect();
    let envp: Vec<CString> = env.iter().map(|e| c(e)).collect();
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let prog = CString::new(program.as_os_str().as_bytes()).unwrap_or_default();
    // SAFETY: NUL-terminated arrays of NUL-terminated strings that outlive the call.
    unsafe { libc::execve(prog.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("cannot run {}: {e}", program.display()))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `init: true`: stays PID 1, runs the command as its child, forwards
/// termination signals to it, reaps every orphan, and exits with its
/// status (as Docker's tini does).
fn run_as_init(args: &[String], env: &[String]) -> io::Error {
    // SAFETY: this process is single-threaded.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return io::Error::last_os_error();
    }
    if child == 0 {
        let e = exec(args, env);
        eprintln!("hvsim-init: {e}");
        // SAFETY: the child ends here if it could not exec.
        unsafe { libc::_exit(127) };
    }
    FORWARD_TO.store(child, std::sync::atomic::Ordering::SeqCst);
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: installing a handler that only calls kill.
        unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid into a local.
        let r = unsafe { libc::waitpid(-1, &mut status, 0) };
        if r == child {
            // SAFETY: ending PID 1 of the container with the child's status.
            unsafe { libc::_exit(i32::from(status_code(status))) };
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return io::Error::last_os_error();
        }
    }
}

static FORWARD_TO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    // SAFETY: kill is async-signal-safe.
    unsafe { libc::kill(FORWARD_TO.load(std::sync::atomic::Ordering::SeqCst), sig) };
}

/// `/init compose-wait`: the run's command with containers. Waits until
/// every node's service has exited, lists them, and exits with the status
/// of the first that failed (by time), else 0.
pub fn wait_all() -> ExitCode {
    let n = count();
    let mut exits = Vec::new();
    for node in 0..n {
        let dir = state_dir(node);
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| wait_for_file(&dir, "exit")) {
            eprintln!("hvsim-init: cannot wait for node {node}'s service: {e}");
            return ExitCode::from(1);
        }
        let text = std::fs::read_to_string(dir.join("exit")).unwrap_or_default();
        let mut parts = text.split_whitespace();
        let status: u8 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(255);
        let at: u64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
        exits.push((at, node, status));
    }
    exits.sort();
    let first_failure = exits.iter().find(|e| e.2 != 0).map_or(0, |e| e.2);
    println!("hvsim-init: every service exited; the first failure's status is {first_failure}");
    ExitCode::from(first_failure)
}

fn record_exit(node: u16, status: u8) -> io::Result<()> {
    let dir = state_dir(node);
    std::fs::create_dir_all(&dir)?;
    atomic_write(&dir.join("exit"), format!("{status} {}\n", monotonic().as_nanos()).as_bytes())
}

fn read_exit(node: u16) -> Option<u8> {
    std::fs::read_to_string(state_dir(node).join("exit")).ok()?.split_whitespace().next()?.parse().ok()
}

/// Writes a marker by rename, so a watcher sees it whole (`IN_MOVED_TO`).
fn atomic_write(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// Blocks until `dir/name` exists, without polling (inotify).
fn wait_for_file(dir: &Path, name: &str) -> io::Result<()> {
    // SAFETY: inotify_init1 returns a new descriptor, owned below.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created.
    let mut ino = unsafe { File::from_raw_fd(fd) };
    let d = CString::new(dir.as_os_str().as_bytes()).map_err(|_| bad("a NUL in a path".into()))?;
    // SAFETY: a valid descriptor and path.
    if unsafe { libc::inotify_add_watch(fd, d.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    // Checked after the watch exists, so a file made in between is seen.
    while !dir.join(name).exists() {
        match ino.read(&mut buf) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn monotonic() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn wait_status(pid: libc::pid_t) -> u8 {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child into a local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return status_code(status);
        }
        if r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 255;
        }
    }
}

/// A wait status as a shell reports it: the exit code, or 128 + signal.
fn status_code(status: libc::c_int) -> u8 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else if libc::WIFSIGNALED(status) {
        128u8.wrapping_add(libc::WTERMSIG(status) as u8)
    } else {
        255
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn open_path(path: &str) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    File::options().read(true).custom_flags(libc::O_PATH).open(path).map_err(ctx(path))
}

fn mount_raw(source: Option<&str>, target: &str, fstype: Option<&str>, flags: libc::c_ulong, data: Option<&str>) -> io::Result<()> {
    let c = |s: Option<&str>| s.map(|s| CString::new(s).map_err(|_| bad("a NUL in a mount argument".into()))).transpose();
    let (src, tgt, fs, dat) = (c(source)?, c(Some(target))?.expect("some"), c(fstype)?, c(data)?);
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: NUL-terminated strings (or null) that outlive the call.
    let r = unsafe { libc::mount(ptr(&src), tgt.as_ptr(), ptr(&fs), flags, ptr(&dat).cast()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn chroot(path: &str) -> io::Result<()> {
    let p = CString::new(path).map_err(|_| bad("a NUL in a path".into()))?;
    // SAFETY: chroot with a valid path.
    if unsafe { libc::chroot(p.as_ptr()) } != 0 {
        return Err(ctx("chroot")(io::Error::last_os_error()));
    }
    std::env::set_current_dir("/")
}

fn pivot_root(new: &str, old: &str) -> io::Result<()> {
    let (n, o) = (CString::new(new).expect("no NUL"), CString::new(old).expect("no NUL"));
    // SAFETY: pivot_root with valid paths.
    if unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_hostname(name: &str) -> io::Result<()> {
    if name.is_empty() {
        return Ok(());
    }
    // SAFETY: a buffer and its length.
    if unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } != 0 {
        return Err(ctx("sethostname")(io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(out: &mut Vec<u8>, k: &str, v: &str) {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }

    #[test]
    fn specs_parse() {
        let mut b = Vec::new();
        field(&mut b, key::NAME, "db");
        field(&mut b, key::ARG, "redis-server");
        field(&mut b, key::ARG, "--appendonly yes");
        field(&mut b, key::RESTART, "on-failure");
        field(&mut b, key::MOUNT, &format!("volume{SEP}data{SEP}/data{SEP}0"));
        field(&mut b, key::DEPENDS, &format!("2{SEP}service_healthy"));
        field(&mut b, key::HEALTH_ARG, "redis-cli");
        field(&mut b, key::HEALTH_INTERVAL_MS, "500");
        let s = Spec::parse(&b).unwrap();
        assert_eq!(s.args, ["redis-server", "--appendonly yes"]);
        assert_eq!(s.restart, Restart::OnFailure);
        assert_eq!(s.mounts[0], Mount { kind: MountKind::Volume, source: "data".into(), target: "/data".into(), read_only: false });
        assert_eq!(s.depends, [(2, Condition::Healthy)]);
        assert_eq!(s.health.unwrap().interval, Duration::from_millis(500));
        let mut unknown = b.clone();
        field(&mut unknown, "colour", "red");
        assert!(Spec::parse(&unknown).unwrap_err().to_string().contains("colour"));
        let mut no_cmd = Vec::new();
        field(&mut no_cmd, key::NAME, "x");
        assert!(Spec::parse(&no_cmd).is_err());
    }

    #[test]
    fn relayed_lines_get_the_service_name() {
        let (r, _w) = pipe().unwrap();
        let mut relay = Relay::new(r, "db");
        assert_eq!(relay.lines(b"one\ntw", false), b"db | one\n");
        assert_eq!(relay.lines(b"o\nthr", false), b"db | two\n");
        assert_eq!(relay.lines(b"ee", true), b"db | three\n", "the last line, unfinished");
        let long = vec![b'x'; 5000];
        assert_eq!(relay.lines(&long, false).len(), 5 + 5000 + 1, "a long line is cut");
    }

    #[test]
    fn the_environment_is_dockers() {
        let mut b = Vec::new();
        field(&mut b, key::NAME, "db");
        field(&mut b, key::HOSTNAME, "db1");
        field(&mut b, key::ARG, "x");
        field(&mut b, key::ENV, "PATH=/opt/bin");
        field(&mut b, key::ENV, "HOME=/srv");
        field(&mut b, key::ENV, "EMPTY");
        let env = container_env(&Spec::parse(&b).unwrap(), "/root");
        let sdk = crate::sdk::SDK_PATH;
        let want = [
            "PATH=/opt/bin".to_owned(),
            "HOSTNAME=db1".into(),
            format!("HVSIM_SDK_OUTPUT={sdk}"),
            format!("ANTITHESIS_SDK_LOCAL_OUTPUT={sdk}"),
            "HOME=/srv".into(),
            "EMPTY=".into(),
        ];
        assert_eq!(env, want);
    }
}
