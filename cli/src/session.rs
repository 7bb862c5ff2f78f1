//! What `run` and `replay` share: checking the host, driving a machine to
//! its end, and reporting the run.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hvsim_explorer::document::Tag;
use hvsim_explorer::schema::RunReport;
use hvsim_guest_image::container::{service_states, Container};
use hvsim_guest_image::linux::boot_cache::{BootKind, BootReport};
use hvsim_guest_image::target::Launch;
use hvsim_vmm::summary::{Replayable, Summary};
use hvsim_vmm::{End, Machine, Stop, Vtime};

use crate::profile::{ProfileArgs, Profiling};
use crate::util::{self, AtomicFile};

/// The virtual-time limit when `--vtime-limit` is not given: 2h, or 1s for
/// built-in guests that never stop on their own (also when replaying their
/// snapshots).
pub fn default_vtime_limit(guest: &str) -> Duration {
    if hvsim_guest_image::raw::find(guest).is_some_and(|g| g.runs_forever) {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(2 * 3600)
    }
}

/// `--watchdog`: a timeout, or `off`.
#[derive(Clone, Copy, Debug)]
pub struct Watchdog(pub Option<Duration>);

fn parse_watchdog(s: &str) -> Result<Watchdog, String> {
    match s {
        "off" => Ok(Watchdog(None)),
        // A watchdog that fires at once would never let the guest run.
        _ => match util::parse_duration(s)? {
            d if d < Duration::from_millis(1) => Err("the watchdog needs at least 1ms (or `off`)".into()),
            d => Ok(Watchdog(Some(d))),
        },
    }
}

/// How a run is observed and reported (options of `run` and `replay`).
#[derive(clap::Args, Debug)]
pub struct Output {
    /// Stop the run at this much virtual time (counted from the start of
    /// the run, also when replaying a snapshot). Default: 2h, or 1s for
    /// built-in guests that never stop on their own (`hvsim run
    /// --list-guests`).
    #[arg(long, value_parser = util::parse_duration)]
    pub vtime_limit: Option<Duration>,
    /// Write the full determinism log (every exit) to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The global --json: print the run's summary as JSON on stdout.
    #[arg(skip)]
    pub json: bool,
    /// Wall time without a VM exit before the watchdog forces one ("off" to
    /// disable). Default: 2s for raw guests, 60s for Linux (whose kernel
    /// runs long stretches without exits on nested hosts).
    #[arg(long, value_parser = parse_watchdog)]
    pub watchdog: Option<Watchdog>,
    /// Report on stderr where wall time went: in the guest or the VMM, and
    /// the longest stretches without an exit (event indices match --log).
    #[arg(long)]
    pub profile: bool,
    #[command(flatten)]
    pub guest_profile: ProfileArgs,
}

/// Starts `--log PATH`: every exit from here on, written to a temporary
/// file that [`AtomicFile::commit`] puts in place.
pub fn start_log(machine: &mut Machine, path: &std::path::Path, guest: &str, seed: u64) -> Result<AtomicFile> {
    let f = AtomicFile::create(path)?;
    let header = format!(
        "hvsim determinism log v1\nhvsim {}\nguest {guest}\nseed {seed}\nfrom virtual time {}\nevents before {}",
        env!("CARGO_PKG_VERSION"),
        machine.now(),
        machine.trace_state().events,
    );
    machine.log_to(f.tmp_path(), &header)?;
    Ok(f)
}

/// `--profile`: where wall time went, on stderr.
pub fn print_wall_profile(machine: &Machine) {
    let Some(p) = machine.wall_profile() else { return };
    eprintln!(
        "hvsim: profile: {:.3?} in the guest (KVM_RUN), {:.3?} in the VMM; longest stretches without an exit:",
        p.in_guest,
        p.in_vmm()
    );
    for s in &p.longest {
        eprintln!(
            "  {:>10.3?}  ending at event {} ({}) at virtual time {}",
            s.wall,
            s.event,
            s.ended_by.name(),
            s.vtime
        );
    }
}

/// A machine being driven to the end of its run.
pub struct Session {
    pub machine: Machine,
    guest: String,
    seed: u64,
    log: Option<AtomicFile>,
    start: Instant,
    host_limits: Vec<String>,
    boot: BootReport,
    /// The containers the target's nodes run, reported on at the end.
    pub containers: Vec<Container>,
    /// `--profile-guest`: written at the end.
    pub profiling: Option<Profiling>,
    /// The console goes to stdout as the run goes (text output); `shown`:
    /// the bytes of it printed so far.
    live: bool,
    shown: usize,
}

impl Session {
    pub fn start(launch: Launch, guest: &str, seed: u64, out: &Output, host_limits: Vec<String>) -> Result<Session> {
        let mut session = Session::start_silent(launch, guest, seed, host_limits);
        session.live = !out.json;
        if out.profile {
            session.machine.enable_wall_profile(10);
        }
        if let Some(path) = &out.log {
            session.log = Some(start_log(&mut session.machine, path, guest, seed)?);
        }
        Ok(session)
    }

    /// A session that writes no log and measures nothing: the first
    /// execution of `run --verify`, whose only output is its summary.
    pub fn start_silent(launch: Launch, guest: &str, seed: u64, host_limits: Vec<String>) -> Session {
        let Launch { machine, boot } = launch;
        Session {
            machine,
            guest: guest.to_owned(),
            seed,
            log: None,
            start: Instant::now(),
            host_limits,
            boot,
            containers: Vec::new(),
            profiling: None,
            live: false,
            shown: 0,
        }
    }

    /// Prints what the console gained since the last call: its complete
    /// lines, or with `all` everything. A reader that went away (a closed
    /// pipe) stops the printing, not the run.
    fn show_console(&mut self, all: bool) -> Result<()> {
        use std::io::Write;
        if !self.live {
            return Ok(());
        }
        // Only what is new: the console is a chunked log, and a copy of all
        // of it at every call would cost the whole console each time.
        let new = self.machine.console_from(self.shown);
        let take = if all { new.len() } else { new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) };
        if take == 0 {
            return Ok(());
        }
        let mut out = std::io::stdout().lock();
        match out.write_all(&new[..take]).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => self.live = false,
            r => r.context("cannot print the console")?,
        }
        self.shown += take;
        Ok(())
    }

    /// Runs until virtual time `t`; returns the end if the run ended first.
    pub fn run_to(&mut self, t: Vtime) -> Result<Option<End>> {
        Ok(match self.machine.run_until(t)? {
            Stop::Ended(end) => Some(end),
            Stop::Deadline => None,
            Stop::Message => unreachable!("sessions do not stop on messages"),
        })
    }

    /// Runs until `limit`, showing virtual time against it and the
    /// machine's activity (exits per second, SDK messages) at least every
    /// second of wall time, and the console as it comes (in steps, and
    /// paused on the wall clock: neither changes the run).
    fn run_with_progress(&mut self, limit: Vtime) -> Result<Option<End>> {
        const STEP: Vtime = Vtime(100_000_000);
        const EVERY: Duration = Duration::from_secs(1);
        let spinner = hvsim_guest_image::progress::spinner();
        if spinner.is_hidden() && !self.live {
            return self.run_to(limit);
        }
        spinner.set_style(
            indicatif::ProgressStyle::with_template("hvsim: run [{elapsed}] {spinner} virtual time {msg}")
                .expect("valid template"),
        );
        spinner.enable_steady_tick(Duration::from_millis(250));
        let mut rate = crate::util::ExitRate::default();
        rate.update(self.machine.trace_state().events);
        let mut shown = std::time::Instant::now();
        let mut step = Vtime(0);
        let end = loop {
            if self.machine.now() >= step {
                step = Vtime(self.machine.now().nanos().saturating_add(STEP.nanos()).min(limit.nanos()));
            }
            let stop = self.machine.run_until_or_wall(step, shown + EVERY)?;
            spinner.suspend(|| self.show_console(false))?;
            match stop {
                Some(Stop::Ended(end)) => break Some(end),
                Some(Stop::Deadline) if step >= limit => break None,
                Some(Stop::Message) => unreachable!("sessions do not stop on messages"),
                Some(Stop::Deadline) | None => {
                    let rate = rate.update(self.machine.trace_state().events).unwrap_or(0.0);
                    shown = std::time::Instant::now();
                    spinner.set_message(format!(
                        "{} of {limit}, {rate:.0} exits/s, {} SDK message(s)",
                        self.machine.now(),
                        self.machine.messages().len()
                    ));
                }
            }
        };
        spinner.finish_and_clear();
        Ok(end)
    }

    /// Runs to the end (or `out.vtime_limit`) and sums the run up.
    fn conclude(&mut self, out: &Output) -> Result<(End, Summary)> {
        let limit = out.vtime_limit.unwrap_or_else(|| default_vtime_limit(&self.guest));
        let limit = Vtime(u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX));
        let end = match self.run_with_progress(limit)? {
            Some(end) => end,
            None => {
                self.machine.end(End::VtimeLimit);
                End::VtimeLimit
            }
        };
        self.machine.flush_log()?;
        if let Some(f) = self.log.take() {
            f.commit()?;
        }
        let wall_ms = self.start.elapsed().as_millis() as u64;
        let mut summary = Summary::of(&self.machine, &self.guest, self.seed, &end, wall_ms);
        summary.set_host_limits(std::mem::take(&mut self.host_limits));
        Ok((end, summary))
    }

    /// Runs to the end without reporting anything: the first execution of
    /// `run --verify`.
    pub fn run_silently(mut self, out: &Output) -> Result<Summary> {
        Ok(self.conclude(out)?.1)
    }

    /// Runs to the end (or `out.vtime_limit`), then reports. `first` is the
    /// summary of an earlier execution of the same seed (`--verify`) to
    /// compare this one with.
    pub fn finish(mut self, out: &Output, first: Option<&Summary>) -> Result<ExitCode> {
        let (end, mut summary) = self.conclude(out)?;
        if let Some(first) = first {
            summary.verify_against(first);
        }
        print_wall_profile(&self.machine);
        if let (Some(p), Some(profile)) = (&self.profiling, self.machine.take_guest_profile()) {
            p.finish(&profile, &format!("hvsim run: {} (seed {})", self.guest, self.seed))?;
        }
        let services = service_states(&self.containers, &summary.console);
        if out.json {
            let report = RunReport { schema: Tag::new(), summary, boot: self.boot, services };
            crate::util::print_json(&report)?;
        } else {
            // The rest of the console: an unfinished last line, or all of
            // it when the run did not go in steps.
            self.show_console(true)?;
            if !services.is_empty() {
                let states: Vec<String> = services
                    .iter()
                    .map(|s| match s.exit_status {
                        Some(status) => format!("{} exited ({status})", s.name),
                        None => format!("{} still running", s.name),
                    })
                    .collect();
                eprintln!("hvsim: services: {}", states.join(", "));
            }
            if self.boot.kind != BootKind::Direct {
                hvsim_guest_image::note!("hvsim: boot: {} in {} ms", boot_words(self.boot.kind), self.boot.wall_ms);
            }
            eprintln!(
                "hvsim: {} ({}) at virtual time {} after {} exits; trace {}{}",
                summary.end,
                summary.end_detail,
                Vtime(summary.vtime_ns),
                summary.exits,
                &summary.trace_hash[..16],
                match summary.replayable {
                    Replayable::Verified => "; replayable: verified (executed twice, the same)".to_owned(),
                    Replayable::Expected => String::new(),
                    Replayable::No => format!("; NOT replayable: {}", summary.replayable_reasons.join("; ")),
                }
            );
            for f in &summary.faults {
                let drawn = if f.drawn > 0 { format!(", {} drawn faults", f.drawn) } else { String::new() };
                eprintln!("hvsim: fault {:<18} {:<11} ({} touched{drawn})", f.kind, f.status, f.landed);
            }
            for d in &summary.devices {
                if let Some(reason) = &d.broken {
                    eprintln!("hvsim: device {} was broken by the guest: {reason}", d.name);
                }
            }
        }
        Ok(ExitCode::from(exit_code(&end)))
    }
}

fn boot_words(kind: BootKind) -> &'static str {
    match kind {
        BootKind::Direct => "none (raw guest)",
        BootKind::Cold => "booted (not cached)",
        BootKind::Saved => "booted, saved to the boot cache",
        BootKind::Cached => "restored from the boot cache",
    }
}

/// The process exit status for a run that ended with `end`.
pub fn exit_code(end: &End) -> u8 {
    match end {
        End::Exit { status: 0 } | End::VtimeLimit => util::EXIT_OK,
        End::Exit { .. } => util::EXIT_GUEST_STATUS,
        _ => util::EXIT_ABNORMAL,
    }
}
