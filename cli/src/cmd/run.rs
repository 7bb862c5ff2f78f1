//! `hvsim run`: one run of a guest.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hvsim_guest_image::raw;
use hvsim_vmm::host::{open_kvm, HostProfile};
use hvsim_vmm::summary::Summary;
use hvsim_vmm::{End, Machine, MachineConfig, Stop, Vtime};

use crate::util::{self, AtomicFile};

#[derive(clap::Args)]
pub struct Args {
    /// Built-in guest to run (see --list-guests).
    #[arg(long, required_unless_present = "list_guests")]
    guest: Option<String>,
    /// Master seed (decimal or 0x hex): the run is a pure function of it.
    #[arg(long, default_value = "0", value_parser = util::parse_seed)]
    seed: u64,
    /// Stop the run at this much virtual time.
    #[arg(long, default_value = "2h", value_parser = util::parse_duration)]
    vtime_limit: Duration,
    /// Write the full determinism log (every exit) to FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Print the run summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Wall time without a VM exit before the watchdog forces one ("off" to disable).
    #[arg(long, default_value = "2s", value_parser = parse_watchdog)]
    watchdog: Watchdog,
    /// List the built-in guests and exit.
    #[arg(long)]
    list_guests: bool,
}

/// `--watchdog`: a timeout, or `off`.
#[derive(Clone, Copy)]
struct Watchdog(Option<Duration>);

fn parse_watchdog(s: &str) -> Result<Watchdog, String> {
    if s == "off" { Ok(Watchdog(None)) } else { util::parse_duration(s).map(|d| Watchdog(Some(d))) }
}

pub fn main(args: Args) -> Result<ExitCode> {
    if args.list_guests {
        for g in raw::GUESTS {
            println!("{:<14} {}", g.name, g.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = args.guest.as_deref().expect("clap requires --guest");
    let Some(guest) = raw::find(name) else {
        let names: Vec<_> = raw::GUESTS.iter().map(|g| g.name).collect();
        bail!("no built-in guest `{name}` (there are: {})", names.join(", "));
    };
    let kvm = open_kvm()?;
    let host = HostProfile::detect(&kvm);
    drop(kvm);
    let missing = host.missing();
    if !missing.is_empty() {
        bail!("this host's KVM lacks capabilities hvsim needs: {} (see `hvsim doctor`)", missing.join(", "));
    }
    let mut config = MachineConfig::raw(guest.build(), args.seed, &host);
    config.watchdog = args.watchdog.0;

    let start = Instant::now();
    let mut machine = Machine::new(&config).context("cannot create the virtual machine")?;
    let log = match &args.log {
        Some(path) => {
            let f = AtomicFile::create(path)?;
            let header = format!(
                "hvsim determinism log v1\nhvsim {}\nguest {name}\nseed {}",
                env!("CARGO_PKG_VERSION"),
                args.seed
            );
            machine.log_to(f.tmp_path(), &header)?;
            Some(f)
        }
        None => None,
    };
    let limit = Vtime(u64::try_from(args.vtime_limit.as_nanos()).unwrap_or(u64::MAX));
    let end = match machine.run_until(limit)? {
        Stop::Ended(end) => end,
        Stop::Deadline => {
            machine.end(End::VtimeLimit);
            End::VtimeLimit
        }
        Stop::Message => unreachable!("run does not ask to stop on messages"),
    };
    machine.flush_log()?;
    if let Some(f) = log {
        f.commit()?;
    }
    let messages: Vec<Vec<u8>> = machine.take_messages().into_iter().map(|m| m.bytes).collect();
    let wall_ms = start.elapsed().as_millis() as u64;
    let summary = Summary::of(&machine, name, args.seed, &end, &messages, wall_ms);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print!("{}", summary.console);
        eprintln!(
            "hvsim: {} ({}) at virtual time {} after {} exits; trace {}{}",
            summary.end,
            summary.end_detail,
            Vtime(summary.vtime_ns),
            summary.exits,
            &summary.trace_hash[..16],
            if summary.replayable { String::new() } else { format!("; NOT replayable: {}", summary.nonreplayable_reasons.join("; ")) }
        );
    }
    Ok(ExitCode::from(exit_code(&end)))
}

/// The process exit status for a run that ended with `end`.
pub fn exit_code(end: &End) -> u8 {
    match end {
        End::Exit { status: 0 } | End::VtimeLimit => util::EXIT_OK,
        End::Exit { .. } => util::EXIT_GUEST_STATUS,
        _ => util::EXIT_ABNORMAL,
    }
}
