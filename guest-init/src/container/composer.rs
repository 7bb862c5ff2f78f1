//! Test Composer (Antithesis's test templates), run by init in the guest:
//! `/init compose-wait` runs it instead of waiting for every service when
//! the host found templates in the containers (`hvsim_abi::linux::COMPOSER`),
//! and the run ends when it does: the template's last command has ended.
//!
//! Every choice is drawn from the run's seeded stream (`/dev/hvsim`), which
//! the explorer re-keys at every branch: the template (one per timeline,
//! unless the explorer chose it for the line of descent: `template`),
//! the first command, the drivers and how many copies run at once, which
//! container runs a command several hold, when anytime commands start,
//! and whether the timeline ends with an eventually command. Branches
//! therefore compose differently, and a timeline's composition replays.
//!
//! The schedule, as Antithesis's Test Composer reference gives it:
//! - faults are paused from the run's start; at setup complete (the
//!   `SETUP` machine event), one `first_` command runs, alone, faults
//!   still paused;
//! - faults resume, and drivers run: one `singleton_driver_` alone, or a
//!   sequence of `parallel_driver_` copies (several at once) and
//!   `serial_driver_` runs (each alone); `anytime_` commands start at
//!   chosen moments beside them;
//! - then, after at least one driver: either an `eventually_` command
//!   (drivers stopped, anytime commands left to end, faults paused), which
//!   ends the timeline; or, once every driver has finished and anytime
//!   commands have ended, with faults paused, a `finally_` command.
//! - hvsim's own rule, so that the check runs in every timeline: the
//!   composer asks once when it must wind down (the explorer decides,
//!   `explorer/src/record/winddown.rs`); then it starts no more drivers, stops
//!   the commands still running, pauses faults and runs the `finally_`
//!   command (else an `eventually_` one) before the timeline's limit.
//!
//! A command runs inside its service's running container, in all of its
//! namespaces (user, IPC, UTS, network, time, mount, PID), as its user, with its
//! environment and working directory; its output goes to the console,
//! each line prefixed with the service and the command. What ran is on the
//! SDK channel: `hvsim_composer` events (the template; each start and exit,
//! with the service, the status, and whether a fault took its node down
//! meanwhile), and for each command an always-assertion `Test Composer:
//! TEMPLATE/FILE exits 0`, registered up front, which a non-zero exit fails
//! unless a fault crashed the command's node while it ran, or the composer
//! stopped it (that is context, not a failure).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use hvsim_abi::composer::Kind;

use super::process::{become_user, container_env, exec};
use super::relay::Relay;
use super::root::chroot;
use super::spec::Spec;
use super::{monotonic, pipe, state_dir};
use crate::nodes;
use crate::sdk;

/// Where templates are, in a container.
const TEST_DIR: &str = "/opt/antithesis/test/v1";
/// Created by init when the guest reported setup complete.
pub const SETUP_MARKER: &str = "/run/hvsim/setup-complete";

#[derive(Clone, Debug)]
struct Command {
    template: String,
    file: String,
    kind: Kind,
    nodes: Vec<u16>,
}

impl Command {
    fn property(&self) -> String {
        format!("Test Composer: {} exits 0", self.name())
    }

    /// `template/file`, as the explorer names it.
    fn name(&self) -> String {
        format!("{}/{}", self.template, self.file)
    }
}

/// A command running.
struct Running {
    run: u64,
    command: Command,
    node: u16,
    pid: libc::pid_t,
    pidfd: OwnedFd,
    relays: [Option<Relay>; 2],
    /// The node's crashes when it started.
    crashes: u64,
    /// The composer stopped it (for an eventually command, or winding down).
    stopped: bool,
}

/// The node's crashes so far (init counts them, see `power.rs`).
pub fn crashes(node: u16) -> u64 {
    std::fs::metadata(nodes::crash_count_file(node)).map_or(0, |m| m.len())
}

/// A value below `n` from the run's seeded stream. Without it the
/// composer cannot choose as its seed says: it stops, saying why.
fn below(n: u64) -> u64 {
    assert!(n > 0, "a choice among none");
    let mut b = [0u8; 8];
    if let Err(e) = File::open("/dev/hvsim").and_then(|mut f| f.read_exact(&mut b)) {
        eprintln!("hvsim-init: composer: cannot read the run's random stream from /dev/hvsim: {e}");
        std::process::exit(1);
    }
    u64::from_le_bytes(b) % n
}

/// Whether command run `run` may start: hvsim says, for a timeline that
/// takes some of its commands back (`hvsim minimize`); yes, said aloud,
/// if it cannot be asked.
fn may_start(run: u64) -> bool {
    match sdk::ask(&format!(r#"{{"hvsim_composer_run":{{"run":{run}}}}}"#)) {
        Ok(answer) => u64::from_le_bytes(answer) != 0,
        Err(e) => {
            eprintln!("hvsim-init: composer: run {run} starts: {e}");
            true
        }
    }
}

/// The template to run among `templates`: the one hvsim chose for this
/// line of descent (`--schedule bandit`), else one drawn from the stream.
fn template(templates: &[String]) -> String {
    let names = templates.iter().map(|t| json(t)).collect::<Vec<_>>().join(",");
    match sdk::ask(&format!(r#"{{"hvsim_composer_template":{{"templates":[{names}]}}}}"#)) {
        Ok(answer) => {
            if let Some(chosen) = usize::try_from(u64::from_le_bytes(answer)).ok().and_then(|i| templates.get(i)) {
                return chosen.clone();
            }
        }
        Err(e) => eprintln!("hvsim-init: composer: drawing the template: {e}"),
    }
    pick(templates)
}

/// Of the template's drivers and anytime commands, those this line of
/// descent switches on: hvsim says (`--schedule bandit`); every one if it
/// chose none, or cannot be asked.
fn switched_on(commands: &[Command]) -> Vec<Command> {
    let names = commands.iter().map(|c| json(&c.name())).collect::<Vec<_>>().join(",");
    let mask = match sdk::ask(&format!(r#"{{"hvsim_composer_commands":{{"commands":[{names}]}}}}"#)) {
        Ok(answer) => u64::from_le_bytes(answer),
        Err(e) => {
            eprintln!("hvsim-init: composer: every command on: {e}");
            u64::MAX
        }
    };
    commands.iter().enumerate().filter(|&(i, _)| i >= 64 || mask & 1 << i != 0).map(|(_, c)| c.clone()).collect()
}

/// When the composer must wind down (monotonic time, which is virtual
/// time), if hvsim set a time for this timeline.
fn winddown_at() -> Option<Duration> {
    let left = match sdk::ask(r#"{"hvsim_composer_budget":{}}"#) {
        Ok(answer) => u64::from_le_bytes(answer),
        Err(e) => {
            eprintln!("hvsim-init: composer: no time to wind down by: {e}");
            return None;
        }
    };
    (left != u64::MAX).then(|| monotonic() + Duration::from_nanos(left))
}

fn pick<T: Clone>(items: &[T]) -> T {
    items[below(items.len() as u64) as usize].clone()
}

/// `s` as a JSON string.
fn json(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn send(message: String) {
    if let Err(e) = sdk::send(&message) {
        eprintln!("hvsim-init: composer: cannot reach the SDK channel: {e}");
    }
}

fn event(fields: &str) {
    send(format!(r#"{{"hvsim_composer":{{{fields}}}}}"#));
}

fn assertion(c: &Command, hit: bool, ok: bool, details: &str) {
    let id = json(&c.property());
    let file = json(&format!("{TEST_DIR}/{}/{}", c.template, c.file));
    send(format!(
        r#"{{"antithesis_assert":{{"id":{id},"message":{id},"condition":{ok},"hit":{hit},"must_hit":false,"assert_type":"always","display_type":"AlwaysOrUnreachable","location":{{"file":{file},"function":"","class":"","begin_line":0,"begin_column":0}},"details":{details}}}}}"#
    ));
}

fn faults(pause: bool) {
    send(if pause { r#"{"hvsim_faults":{"pause":null}}"# } else { r#"{"hvsim_faults":{"resume":true}}"# }.into());
}

/// The commands the host found (see the module's doc).
fn load() -> io::Result<Vec<Command>> {
    let text = std::fs::read_to_string(hvsim_abi::linux::COMPOSER)?;
    let mut commands = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [template, file, nodes] = f[..] else {
            return Err(super::bad(format!("composer: bad line {line:?}")));
        };
        let Some(kind) = Kind::of(file) else { continue };
        let nodes = nodes.split(',').filter_map(|n| n.parse().ok()).collect();
        commands.push(Command { template: template.into(), file: file.into(), kind, nodes });
    }
    Ok(commands)
}

/// `/init compose-wait` with templates: composes them; 0 when done.
pub fn run() -> ExitCode {
    let commands = match load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hvsim-init: composer: {e}");
            return ExitCode::from(1);
        }
    };
    // Nothing strikes before the first command has run.
    faults(true);
    for c in &commands {
        assertion(c, false, false, "null");
    }
    if let Err(e) = wait_for_setup() {
        eprintln!("hvsim-init: composer: cannot wait for setup complete: {e}");
        return ExitCode::from(1);
    }
    let mut templates: Vec<String> = commands.iter().map(|c| c.template.clone()).collect();
    templates.dedup();
    let template = template(&templates);
    // Drivers and anytime commands: those switched on for the line.
    let on = switched_on(
        &commands.iter().filter(|c| c.template == template && c.kind.switchable()).cloned().collect::<Vec<_>>(),
    );
    let of = |kind: Kind| -> Vec<Command> {
        let from = if kind.switchable() { &on } else { &commands };
        from.iter().filter(|c| c.template == template && c.kind == kind).cloned().collect()
    };
    println!("hvsim-init: composer: template {template}");
    event(&format!(r#""event":"template","template":{}"#, json(&template)));
    let mut c = Composer { running: Vec::new(), runs: 0, winddown: winddown_at() };
    let first = of(Kind::First);
    if !first.is_empty() {
        c.start(&pick(&first));
        c.wait_all();
    }
    faults(false);
    let eventually = of(Kind::Eventually);
    let (parallel, serial, singleton) = (of(Kind::ParallelDriver), of(Kind::SerialDriver), of(Kind::SingletonDriver));
    let anytime = of(Kind::Anytime);
    let mut drivers_run = 0;
    if !singleton.is_empty() && (parallel.is_empty() && serial.is_empty() || below(2) == 0) {
        c.start(&pick(&singleton));
        drivers_run += 1;
        c.drive(&anytime, |c| c.drivers() == 0);
    } else if !parallel.is_empty() || !serial.is_empty() {
        let steps = 1 + below(8);
        let most = 1 + below(4) as usize;
        for _ in 0..steps {
            if c.winding_down() {
                break;
            }
            if drivers_run > 0 && !eventually.is_empty() && below(4) == 0 {
                return c.eventually(&pick(&eventually));
            }
            if !serial.is_empty() && (parallel.is_empty() || below(3) == 0) {
                // Alone: every other driver first ends.
                c.drive(&anytime, |c| c.drivers() == 0);
                c.start(&pick(&serial));
                c.drive(&anytime, |c| c.drivers() == 0);
            } else {
                c.drive(&anytime, |c| c.drivers() < most);
                c.start(&pick(&parallel));
                c.pause(Duration::from_millis(below(300)));
            }
            drivers_run += 1;
        }
        c.drive(&anytime, |c| c.drivers() == 0);
    } else if !anytime.is_empty() {
        // No driver: anytime commands alone.
        c.start(&pick(&anytime));
    }
    let finally = of(Kind::Finally);
    if c.winding_down() {
        let last = [&finally, &eventually].into_iter().find(|c| !c.is_empty()).map(|c| pick(c));
        return c.wind_down(last.as_ref());
    }
    if drivers_run > 0 && !eventually.is_empty() && below(4) == 0 {
        return c.eventually(&pick(&eventually));
    }
    c.wait_all();
    faults(true);
    if !finally.is_empty() {
        c.start(&pick(&finally));
        c.wait_all();
    }
    println!("hvsim-init: composer: template {template} done");
    ExitCode::SUCCESS
}

/// Waits until init has heard the guest report setup complete.
fn wait_for_setup() -> io::Result<()> {
    let marker = Path::new(SETUP_MARKER);
    super::wait_for_file(marker.parent().expect("an absolute path"), "setup-complete")
}

struct Composer {
    running: Vec<Running>,
    runs: u64,
    /// When to wind down, if ever (`winddown_at`).
    winddown: Option<Duration>,
}

impl Composer {
    fn winding_down(&self) -> bool {
        self.winddown.is_some_and(|at| monotonic() >= at)
    }

    /// At most `d`, and not past the wind-down.
    fn until_winddown(&self, d: Duration) -> Duration {
        self.winddown.map_or(d, |at| d.min(at.saturating_sub(monotonic())))
    }

    fn drivers(&self) -> usize {
        self.running.iter().filter(|r| r.command.kind.is_driver()).count()
    }

    /// Starts `command` in one of the containers that hold it whose node
    /// is up (none up: it does not run).
    fn start(&mut self, command: &Command) {
        // A check runs with faults paused, which brings every node back: it
        // waits for one (at most a minute) instead of not running.
        let check = matches!(command.kind, Kind::Finally | Kind::Eventually);
        let until = monotonic() + Duration::from_secs(60);
        let up = loop {
            let up: Vec<u16> = command.nodes.iter().copied().filter(|&n| !nodes::is_down(n)).collect();
            if !up.is_empty() || !check || monotonic() >= until {
                break up;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if up.is_empty() {
            println!("hvsim-init: composer: {}/{} not run: its nodes are down", command.template, command.file);
            return;
        }
        let node = pick(&up);
        let service = super::name(node);
        if let Err(e) = wait_running(node) {
            println!("hvsim-init: composer: {}/{} not run in {service}: {e}", command.template, command.file);
            return;
        }
        self.runs += 1;
        let run = self.runs;
        if !may_start(run) {
            println!(
                "hvsim-init: composer: {}/{} (run {run}) not run: the timeline takes it back",
                command.template, command.file
            );
            return;
        }
        let crashes = crashes(node);
        let path = format!("{TEST_DIR}/{}/{}", command.template, command.file);
        match spawn(node, &[path]) {
            Ok((pid, pidfd, out, err)) => {
                let label = format!("{service} {}", command.name());
                event(&format!(
                    r#""event":"start","run":{run},"template":{},"command":{},"service":{}"#,
                    json(&command.template),
                    json(&command.file),
                    json(&service)
                ));
                self.running.push(Running {
                    run,
                    command: command.clone(),
                    node,
                    pid,
                    pidfd,
                    relays: [Some(Relay::new(out, &label)), Some(Relay::new(err, &label))],
                    crashes,
                    stopped: false,
                });
            }
            Err(e) => {
                eprintln!("hvsim-init: composer: cannot start {}/{} in {service}: {e}", command.template, command.file)
            }
        }
    }

    /// Relays output and collects exits until `done` holds, starting an
    /// anytime command now and then (drivers are running).
    fn drive(&mut self, anytime: &[Command], done: impl Fn(&Composer) -> bool) {
        while !done(self) && !self.winding_down() {
            if !anytime.is_empty() && below(4) == 0 {
                self.start(&pick(anytime));
            }
            let d = Duration::from_millis(50 + below(450));
            self.step(Some(self.until_winddown(d)));
        }
    }

    /// Relays output and collects exits for `d`.
    fn pause(&mut self, d: Duration) {
        let until = monotonic() + self.until_winddown(d);
        while monotonic() < until {
            self.step(Some(until.saturating_sub(monotonic())));
        }
    }

    fn wait_all(&mut self) {
        while !self.running.is_empty() {
            self.step(None);
        }
    }

    /// Stops the running commands that `which` picks (the shim passes
    /// SIGTERM on), and waits for every command to end.
    fn stop(&mut self, which: impl Fn(&Running) -> bool) {
        for r in self.running.iter_mut().filter(|r| which(r)) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(r.pid, libc::SIGTERM) };
            r.stopped = true;
        }
        self.wait_all();
    }

    /// Time is up for drivers: every running command stopped, faults
    /// paused, then the template's last check, `check`, if it has one.
    fn wind_down(mut self, check: Option<&Command>) -> ExitCode {
        event(r#""event":"winddown""#);
        println!("hvsim-init: composer: winding down before the timeline's limit");
        self.stop(|_| true);
        faults(true);
        if let Some(command) = check {
            self.start(command);
            self.wait_all();
        }
        ExitCode::SUCCESS
    }

    /// Drivers stopped, anytime commands left to end, faults paused: one
    /// eventually command, which ends the timeline.
    fn eventually(mut self, command: &Command) -> ExitCode {
        self.stop(|r| r.command.kind.is_driver());
        faults(true);
        self.start(command);
        self.wait_all();
        println!("hvsim-init: composer: ended with {}/{}", command.template, command.file);
        ExitCode::SUCCESS
    }

    /// Waits for output or an exit, at most `timeout`.
    fn step(&mut self, timeout: Option<Duration>) {
        let mut fds = Vec::new();
        for r in &self.running {
            fds.push(libc::pollfd { fd: r.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            for relay in &r.relays {
                let fd = relay.as_ref().map_or(-1, |x| x.fd.as_raw_fd());
                fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            }
        }
        // Rounded up: a poll of 0 ms would spin, and a spinning guest barely
        // moves its virtual clock (it counts what the guest waits for).
        let ms = timeout.map_or(-1, |t| t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32);
        // SAFETY: fds is a valid array (an empty one just sleeps).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return;
        }
        let mut exited = Vec::new();
        for (i, r) in self.running.iter_mut().enumerate() {
            // The shim has exited: what its command wrote is relayed, and
            // processes it left holding the output are not waited for.
            let ended = fds[i * 3].revents != 0;
            for (k, relay) in r.relays.iter_mut().enumerate() {
                let Some(x) = relay else { continue };
                if ended {
                    x.drain();
                    *relay = None;
                } else if fds[i * 3 + 1 + k].revents != 0 && !x.pump() {
                    *relay = None;
                }
            }
            if ended {
                exited.push(i);
            }
        }
        for i in exited.into_iter().rev() {
            let r = self.running.remove(i);
            self.collect(r);
        }
    }

    /// Reports a command that ended.
    fn collect(&mut self, r: Running) {
        let status = super::wait_status(r.pid);
        let fault = crashes(r.node) != r.crashes;
        event(&format!(
            r#""event":"exit","run":{},"template":{},"command":{},"service":{},"status":{status},"fault":{fault},"stopped":{}"#,
            r.run,
            json(&r.command.template),
            json(&r.command.file),
            json(&super::name(r.node)),
            r.stopped
        ));
        // A command the composer stopped, or whose node a fault took down,
        // did not fail: its status is context.
        if !fault && !r.stopped {
            let details = format!(r#"{{"status":{status},"service":{},"run":{}}}"#, json(&super::name(r.node)), r.run);
            assertion(&r.command, true, status == 0, &details);
        }
        println!(
            "hvsim-init: composer: {}/{} exited with status {status}{}",
            r.command.template,
            r.command.file,
            if fault {
                " (its node crashed meanwhile)"
            } else if r.stopped {
                " (stopped by the composer)"
            } else {
                ""
            }
        );
    }
}

/// Waits until node `node`'s container runs: a node that just got its
/// power back (faults paused for a finally or eventually command) starts
/// it again. At most a minute, and not while the node is down.
fn wait_running(node: u16) -> io::Result<()> {
    let pid = state_dir(node).join("pid");
    let until = monotonic() + Duration::from_secs(60);
    while !pid.exists() {
        if nodes::is_down(node) || monotonic() >= until {
            return Err(super::bad("its container is not running".into()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Starts `argv` in node `node`'s container: a shim that joins the
/// container's namespaces and starts the command in its PID namespace,
/// waits for it, and exits with its status (SIGTERM passed on). Returns
/// the shim's PID and pidfd, and the command's output. (Custom faults run
/// their commands this way too, `crate::custom`.)
pub fn spawn(node: u16, argv: &[String]) -> io::Result<(libc::pid_t, OwnedFd, OwnedFd, OwnedFd)> {
    let spec = Spec::load(node)?;
    let container: libc::pid_t = std::fs::read_to_string(state_dir(node).join("pid"))?
        .trim()
        .parse()
        .map_err(|_| super::bad(format!("node {node}: no running container")))?;
    let ns = |name: &str| File::open(format!("/proc/{container}/ns/{name}"));
    let namespaces = [
        (ns("ipc")?, libc::CLONE_NEWIPC),
        (ns("uts")?, libc::CLONE_NEWUTS),
        (ns("net")?, libc::CLONE_NEWNET),
        (ns("pid")?, libc::CLONE_NEWPID),
        (ns("mnt")?, libc::CLONE_NEWNS),
    ];
    let same_user =
        std::fs::read_link(format!("/proc/{container}/ns/user"))? == std::fs::read_link("/proc/self/ns/user")?;
    let user = if same_user { None } else { Some(ns("user")?) };
    // The node's time namespace belongs to init's user namespace: joined
    // first, while the shim may.
    let time = ns("time")?;
    let root = File::open(format!("/proc/{container}/root"))?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // SAFETY: the composer is single-threaded; the child joins namespaces
    // and forks again.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: dup2 onto the standard descriptors of this process.
        unsafe {
            libc::dup2(out_w.as_raw_fd(), 1);
            libc::dup2(err_w.as_raw_fd(), 2);
        }
        let r = (|| -> io::Result<libc::pid_t> {
            nodes::setns(&time, nodes::CLONE_NEWTIME)?;
            if let Some(u) = &user {
                nodes::setns(u, libc::CLONE_NEWUSER)?;
            }
            for (f, kind) in &namespaces {
                nodes::setns(f, *kind)?;
            }
            // SAFETY: fchdir to a directory held open.
            if unsafe { libc::fchdir(root.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            chroot(".")?;
            // SAFETY: the shim is single-threaded; the grandchild execs.
            let child = unsafe { libc::fork() };
            if child == 0 {
                // A process group of its own, so that stopping it reaches
                // what it started too (`shim_wait`).
                // SAFETY: setpgid on this process.
                unsafe { libc::setpgid(0, 0) };
                let e = (|| {
                    let env = container_env(&spec, &become_user(&spec.user)?);
                    std::env::set_current_dir(&spec.workdir).or_else(|_| std::env::set_current_dir("/"))?;
                    Err::<(), io::Error>(exec(argv, &env))
                })();
                eprintln!("hvsim-init: cannot run {argv:?} in node {node}'s container: {e:?}");
                // SAFETY: leaving the grandchild without the parent's destructors.
                unsafe { libc::_exit(127) }
            }
            if child > 0 {
                // Here too, so that a SIGTERM arriving first finds the group.
                // SAFETY: setpgid on our own child.
                unsafe { libc::setpgid(child, child) };
            }
            Ok(child)
        })();
        let status = match r {
            Ok(child) if child > 0 => shim_wait(child),
            Ok(_) => 127,
            Err(e) => {
                eprintln!("hvsim-init: cannot enter node {node}'s container: {e}");
                127
            }
        };
        // SAFETY: the shim ends here.
        unsafe { libc::_exit(i32::from(status)) }
    }
    drop(out_w);
    drop(err_w);
    // SAFETY: pidfd_open on our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned here.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    Ok((pid, pidfd, out_r, err_r))
}

/// The shim: waits for the command, passing SIGTERM on to its process
/// group (the command and what it started); its status.
fn shim_wait(child: libc::pid_t) -> u8 {
    static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
    extern "C" fn pass_on(sig: libc::c_int) {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(-CHILD.load(std::sync::atomic::Ordering::Relaxed), sig) };
    }
    CHILD.store(child, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: installing a handler that only calls kill.
    unsafe { libc::signal(libc::SIGTERM, pass_on as *const () as libc::sighandler_t) };
    super::wait_status(child)
}
