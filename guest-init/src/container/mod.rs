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
//! With Kubernetes Services, the supervisor first starts the node's proxy
//! of their virtual addresses (`proxy.rs`).
//!
//! State directory `/run/hvsim/c/<i>`: `started` (it started once),
//! `pid` (it runs: its first process), `healthy` (it runs and its
//! readiness check passes) and `exit` (`<status> <monotonic ns>`)
//! markers, and the mount points the container's mount namespace uses.

pub mod composer;
mod health;
mod process;
mod proxy;
mod relay;
mod root;
mod spec;

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use health::{Probes, Ready, Verdict};
use process::enter;
use relay::Relay;
use root::set_hostname;
use spec::{Condition, Restart, Spec};

/// Where each node's state directory is.
pub const STATE_DIR: &str = "/run/hvsim/c";

pub fn state_dir(node: u16) -> PathBuf {
    PathBuf::from(format!("{STATE_DIR}/{node}"))
}

pub(super) fn spec_path(node: u16) -> PathBuf {
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

pub(super) fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
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
    /// The pod's other containers, run beside `spec`'s.
    sidecars: Vec<Spec>,
}

/// Which of a pod's containers one is: messages and markers differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// The node's container (a pod's first): its markers are the node's.
    Service,
    Init,
    Sidecar,
}

impl Part {
    fn label(self) -> &'static str {
        match self {
            Part::Service => "service",
            Part::Init => "init container",
            Part::Sidecar => "container",
        }
    }
}

impl Supervisor {
    fn new(node: u16, spec: Spec) -> io::Result<Supervisor> {
        let dir = state_dir(node);
        std::fs::create_dir_all(&dir)?;
        // A restarted node starts over: what it said before its crash is stale.
        for entry in std::fs::read_dir(&dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if ["started", "healthy", "exit", "pid"].contains(&name.as_ref()) || name.starts_with("ready") {
                let _ = std::fs::remove_file(dir.join(name.as_ref()));
            }
        }
        let sidecars =
            (1..=spec.sidecars.len()).map(|k| Spec::load_part(node, &format!("c{k}"))).collect::<io::Result<_>>()?;
        Ok(Supervisor { node, spec, dir, sidecars })
    }

    fn run(self) -> io::Result<u8> {
        // Services' addresses answer on the node from its start, whatever
        // its own container does.
        proxy::start(self.node);
        if let Some(status) = self.wait_for_dependencies()? {
            record_exit(self.node, status)?;
            return Ok(status);
        }
        set_hostname(&self.spec.hostname)?;
        for k in 0..self.spec.init_containers.len() {
            let init = Spec::load_part(self.node, &format!("init{k}"))?;
            if let Some(status) = self.run_init_container(&init)? {
                record_exit(self.node, status)?;
                return Ok(status);
            }
        }
        // The pod's other containers each under a supervisor of its own,
        // a child of this one; the pod ends when they all have, with the
        // first's status, or the first failure of the others.
        let mut beside = Vec::new();
        for spec in &self.sidecars {
            // SAFETY: the supervisor is single-threaded: the child may run any code.
            match unsafe { libc::fork() } {
                0 => {
                    let status = self.keep_running(spec, Part::Sidecar).unwrap_or_else(|e| {
                        eprintln!("hvsim-init: container {}: {e}", spec.name);
                        125
                    });
                    // SAFETY: the child ends here, without the parent's destructors.
                    unsafe { libc::_exit(i32::from(status)) }
                }
                pid if pid < 0 => return Err(io::Error::last_os_error()),
                pid => beside.push(pid),
            }
        }
        let mut status = self.keep_running(&self.spec, Part::Service)?;
        for pid in beside {
            let other = wait_status(pid);
            if status == 0 {
                status = other;
            }
        }
        record_exit(self.node, status)?;
        Ok(status)
    }

    /// Runs a container of the pod as its restart policy says, until it
    /// has exited for good; its last status.
    fn keep_running(&self, spec: &Spec, part: Part) -> io::Result<u8> {
        let label = part.label();
        let mut restarts = 0u32;
        loop {
            let status = self.run_once(spec, part)?;
            // A container that exited is neither ready nor to be entered.
            self.ready(spec).set(false);
            if part == Part::Service {
                let _ = std::fs::remove_file(self.dir.join("pid"));
            }
            let again = match spec.restart {
                Restart::No => false,
                Restart::Always => true,
                Restart::OnFailure => status != 0,
            };
            if !again {
                println!("hvsim-init: {label} {} exited with status {status}", spec.name);
                return Ok(status);
            }
            let delay = back_off(restarts);
            restarts += 1;
            println!(
                "hvsim-init: {label} {} exited with status {status}; restarting it in {} ms (restart {restarts})",
                spec.name,
                delay.as_millis()
            );
            std::thread::sleep(delay);
        }
    }

    /// Where `spec`'s readiness goes (`health::Ready`).
    fn ready(&self, spec: &Spec) -> Ready {
        let all = || std::iter::once(&self.spec).chain(&self.sidecars);
        Ready {
            dir: self.dir.clone(),
            own: spec.ready_marker(),
            gates: all().map(Spec::ready_marker).collect(),
            probed: all().any(Spec::probed),
        }
    }

    /// Runs an init container to completion, again (as the pod's restart
    /// policy allows) until it succeeds; `Some(status)` if it failed for
    /// good, and the pod with it.
    fn run_init_container(&self, init: &Spec) -> io::Result<Option<u8>> {
        let mut restarts = 0u32;
        loop {
            let status = self.run_once(init, Part::Init)?;
            if status == 0 {
                println!("hvsim-init: init container {} completed", init.name);
                return Ok(None);
            }
            if self.spec.restart == Restart::No {
                println!(
                    "hvsim-init: service {} not started: its init container {} exited with status {status}",
                    self.spec.name, init.name
                );
                return Ok(Some(status));
            }
            let delay = back_off(restarts);
            restarts += 1;
            println!(
                "hvsim-init: init container {} exited with status {status}; running it again in {} ms",
                init.name,
                delay.as_millis()
            );
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

    /// Runs a container of the pod once; returns its exit status.
    fn run_once(&self, spec: &Spec, part: Part) -> io::Result<u8> {
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
            let e = enter(self.node, spec);
            eprintln!("hvsim-init: cannot start the container: {e}");
            // SAFETY: leaving the child without running the parent's destructors.
            unsafe { libc::_exit(127) };
        }
        drop(out_w);
        drop(err_w);
        let pid = pid as libc::pid_t;
        if part == Part::Service {
            // Where Test Composer commands enter the container.
            atomic_write(&self.dir.join("pid"), pid.to_string().as_bytes())?;
            atomic_write(&self.dir.join("started"), b"")?;
        }
        if part != Part::Init && !spec.probed() {
            // Without a probe that decides it, running is ready.
            self.ready(spec).set(true);
        }
        println!("hvsim-init: {} {} started", part.label(), spec.name);
        self.relay_and_wait(spec, pid, out_r, err_r)
    }

    /// Relays the container's output line by line and runs its probes
    /// until it exits; returns its status.
    fn relay_and_wait(&self, spec: &Spec, pid: libc::pid_t, out: OwnedFd, err: OwnedFd) -> io::Result<u8> {
        // SAFETY: pidfd_open on our own child.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just opened, owned here.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        let mut streams = [Some(Relay::new(out, &spec.name)), Some(Relay::new(err, &spec.name))];
        let mut probes = Probes::new(spec);
        let ready = self.ready(spec);
        let started = monotonic();
        let elapsed = || monotonic().saturating_sub(started);
        let mut stop = Stop::No;
        let mut exited = false;
        while !exited || streams.iter().any(Option::is_some) {
            let mut fds: Vec<libc::pollfd> = streams
                .iter()
                .map(|s| libc::pollfd {
                    fd: s.as_ref().map_or(-1, |r| r.fd.as_raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            fds.push(libc::pollfd {
                fd: if exited { -1 } else { pidfd.as_raw_fd() },
                events: libc::POLLIN,
                revents: 0,
            });
            let wake = match stop {
                _ if exited => None,
                Stop::No => probes.next_wake(elapsed()),
                Stop::Terminated(at) => {
                    Some((at + spec.stop_grace).saturating_sub(elapsed()).max(Duration::from_millis(1)))
                }
                Stop::Killed => None,
            };
            let timeout = wake.map_or(-1, |w| w.as_millis().min(i32::MAX as u128) as i32);
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
            if exited {
                continue;
            }
            match stop {
                Stop::No if probes.tick(pid, spec, &ready, elapsed()) == Verdict::Stop => {
                    probes.stop();
                    stop = Stop::Terminated(elapsed());
                    // SAFETY: signalling our own child, not yet reaped.
                    unsafe { libc::kill(pid, libc::SIGTERM) };
                }
                Stop::Terminated(at) if elapsed() >= at + spec.stop_grace => {
                    stop = Stop::Killed;
                    // SAFETY: signalling our own child, not yet reaped.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                _ => {}
            }
        }
        probes.stop();
        Ok(wait_status(pid))
    }
}

/// Where stopping a container a probe failed is.
#[derive(Clone, Copy)]
enum Stop {
    No,
    /// SIGTERM was sent at this time; SIGKILL follows the grace period.
    Terminated(Duration),
    Killed,
}

/// Docker's back-off between restarts (kubelet's starts at 10 s; see
/// docs/kubernetes.md): 100 ms, doubling,
/// at most a minute.
fn back_off(restarts: u32) -> Duration {
    Duration::from_millis(100u64 << restarts.min(9)).min(Duration::from_secs(60))
}

pub(super) fn ctx(what: &str) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// `/init compose-wait`: the run's command with containers. With Test
/// Composer templates, composes them (`composer.rs`); otherwise waits until
/// every node's service has exited, lists them, and exits with the status
/// of the first that failed (by time), else 0.
pub fn wait_all() -> ExitCode {
    if Path::new(hvsim_abi::linux::COMPOSER).exists() {
        return composer::run();
    }
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
pub(super) fn atomic_write(path: &Path, data: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// Blocks until `dir/name` exists, without polling (inotify).
pub(super) fn wait_for_file(dir: &Path, name: &str) -> io::Result<()> {
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

pub(crate) fn wait_status(pid: libc::pid_t) -> u8 {
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
pub(super) fn status_code(status: libc::c_int) -> u8 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status) as u8
    } else if libc::WIFSIGNALED(status) {
        128u8.wrapping_add(libc::WTERMSIG(status) as u8)
    } else {
        255
    }
}

pub(super) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned here only.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
