//! `hvsim run`: one run of a guest.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use hvsim_guest_image::host::Host;
use hvsim_guest_image::raw;
use hvsim_guest_image::target::{StartOptions, Target};
use hvsim_guest_image::world::World;
use hvsim_vmm::Vtime;

use crate::linux_args::LinuxArgs;
use crate::session::{Output, Session};
use crate::util;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").args(["guest", "linux", "image", "compose", "k8s", "list_guests"]).required(true)))]
#[command(group(clap::ArgGroup::new("linux_target").args(["linux", "image", "compose", "k8s"])))]
pub struct Args {
    /// Built-in raw guest to run (see --list-guests).
    #[arg(long)]
    guest: Option<String>,
    /// Boot hvsim's Linux guest (building its kernel the first time; later
    /// runs of the same machine shape restore it from the boot cache).
    #[arg(long)]
    linux: bool,
    #[command(flatten)]
    linux_args: LinuxArgs,
    /// With --linux: keep the kernel's boot messages on the console.
    #[arg(long, requires = "linux")]
    verbose_boot: bool,
    /// Master seed (decimal or 0x hex): the run is a pure function of it.
    #[arg(long, default_value = "0", value_parser = util::parse_seed, allow_hyphen_values = true)]
    seed: u64,
    /// Save a snapshot when virtual time reaches this point (with
    /// --save-snapshot); the run then goes on as if nothing happened.
    #[arg(long, value_parser = util::parse_duration, requires = "save_snapshot")]
    snapshot_at: Option<Duration>,
    /// Where --snapshot-at saves the snapshot.
    #[arg(long, value_name = "FILE", requires = "snapshot_at")]
    save_snapshot: Option<PathBuf>,
    /// Run twice and compare: the summary says `replayable: verified` if
    /// both executions had the same trace, memory and console, `no` (with
    /// what differed) otherwise. The report is the second execution's.
    #[arg(long, conflicts_with = "snapshot_at")]
    verify: bool,
    #[command(flatten)]
    out: Output,
    /// List the built-in guests and exit.
    #[arg(long)]
    list_guests: bool,
}

pub fn main(mut args: Args, json: bool) -> Result<ExitCode> {
    args.out.json = json;
    if args.list_guests {
        for g in raw::GUESTS {
            let forever = if g.runs_forever { " (runs until stopped)" } else { "" };
            println!("{:<14} {}{forever}", g.name, g.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Bad input is reported before anything slow (kernel build, boot).
    let watchdog = args.out.watchdog.map(|w| w.0);
    let (target, mut start) = if args.linux || args.linux_args.implies_linux() {
        (args.linux_args.target(args.verbose_boot)?, args.linux_args.start_options(watchdog))
    } else {
        let guest = args.guest.clone().expect("clap requires a target");
        args.linux_args.refuse_for_raw_guest(&guest, &[("--verbose-boot", args.verbose_boot)])?;
        (Target::Raw { guest }, StartOptions { watchdog, ..StartOptions::default() })
    };
    if let Some(path) = args.save_snapshot.as_ref().filter(|p| p.is_dir()) {
        anyhow::bail!("--save-snapshot {}: it is a directory", path.display());
    }
    let host = Host::open()?;
    let host_limits = if target.is_linux() { host.probes.limits() } else { Vec::new() };
    let name = target.name();
    let first = if args.verify {
        let launch = target.start(args.seed, &host, &start).context("cannot start the guest")?;
        hvsim_guest_image::note!("hvsim: --verify: first execution");
        let summary = Session::start_silent(launch, &name, args.seed, host_limits.clone()).run_silently(&args.out)?;
        hvsim_guest_image::note!("hvsim: --verify: second execution");
        Some(summary)
    } else {
        None
    };
    let profiling = args.out.guest_profile.start(target.is_linux())?;
    start.profiler = profiling.as_ref().map(|p| p.config);
    let launch = target.start(args.seed, &host, &start).context("cannot start the guest")?;
    let mut session = Session::start(launch, &name, args.seed, &args.out, host_limits)?;
    session.containers = target.containers().to_vec();
    session.profiling = profiling;
    if let (Some(at), Some(path)) = (args.snapshot_at, &args.save_snapshot) {
        let at = Vtime(u64::try_from(at.as_nanos()).unwrap_or(u64::MAX));
        match session.run_to(at)? {
            None => {
                let world = World::of(&target, &host)?;
                let stats = hvsim_snapshot::file::save(path, &mut session.machine, &name, args.seed, &world.0)?;
                eprintln!(
                    "hvsim: snapshot at virtual time {at} saved to {} ({} pages, {} bytes)",
                    path.display(),
                    stats.pages,
                    stats.file_bytes
                );
            }
            Some(end) => {
                eprintln!("hvsim: warning: the run ended ({}) before --snapshot-at {at}; no snapshot saved", end.name())
            }
        }
    }
    session.finish(&args.out, first.as_ref())
}
