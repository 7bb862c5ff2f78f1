//! `hvsim explore`: search a target's timelines for bugs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use hvsim_explorer::{explore, report, Budget, ExploreConfig, Progress, StartOptions, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;
use indicatif::{ProgressBar, ProgressStyle};

use crate::linux_args::LinuxArgs;
use crate::profile::ProfileArgs;
use crate::util;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").args(["guest", "linux", "image", "compose"])))]
#[command(group(clap::ArgGroup::new("linux_target").args(["linux", "image", "compose"])))]
pub struct Args {
    /// Built-in raw guest to explore (default: `demo`, which hides a bug
    /// behind three 1-in-10 random choices).
    #[arg(long)]
    guest: Option<String>,
    /// Explore hvsim's Linux guest running --init-cmd.
    #[arg(long)]
    linux: bool,
    #[command(flatten)]
    linux_args: LinuxArgs,
    /// Master seed: with a branch budget, the exploration is a function of it.
    #[arg(long, default_value = "0", value_parser = util::parse_seed, allow_hyphen_values = true)]
    seed: u64,
    /// Budget: number of branches (timelines).
    #[arg(long, default_value = "500")]
    branches: u64,
    /// Budget: wall time (makes the exploration depend on host speed).
    #[arg(long, value_parser = util::parse_duration)]
    time: Option<Duration>,
    /// Budget: total virtual time across branches.
    #[arg(long, value_parser = util::parse_duration)]
    vtime: Option<Duration>,
    /// Virtual time each branch runs (default 5ms; 2s for Linux).
    #[arg(long, value_parser = util::parse_duration)]
    slice: Option<Duration>,
    /// Virtual time to wait for setup complete before taking the root anyway
    /// (default 10s; 60s for Linux).
    #[arg(long, value_parser = util::parse_duration)]
    setup_limit: Option<Duration>,
    /// Where report.md, report.json and bugs/ go.
    #[arg(long, default_value = "hvsim-out")]
    out: PathBuf,
    /// Print the report's JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Start every branch from the root instead of from new snapshots (the
    /// baseline of `hvsim bench explore`).
    #[arg(long)]
    no_snapshots: bool,
    /// Execute each new bug's timeline again this many times (from the root
    /// snapshot, in this process) before reporting it: a bug that does not
    /// come back the same every time is reported as flaky. 0 skips the
    /// check (bug records then say `replayable: expected`).
    #[arg(long, default_value = "3", value_parser = clap::value_parser!(u32).range(0..=100))]
    reexecute: u32,
    /// Machines that run branches at once, a thread each (up to the host's
    /// cores is useful). Changes only how fast: the same seed and --batch
    /// explore the same timelines with any number of workers.
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Branches per round (default: --workers): each round's branches start
    /// from the snapshots taken before the round, and are merged in order.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    batch: Option<u16>,
    #[command(flatten)]
    guest_profile: ProfileArgs,
}

/// Wall time of waiting for setup complete before saying what is awaited.
const SETUP_HINT_AFTER: Duration = Duration::from_secs(5);

fn setup_hint(elapsed: Duration, vtime: Vtime, limit: Vtime) -> String {
    format!(
        "hvsim: explore: still waiting for setup complete after {:.0?} of wall time (virtual time {vtime}). \
         The root snapshot is taken when a program in the guest reports setup complete through the SDK \
         (e.g. `lifecycle.setup_complete()`, or the JSON line {{\"antithesis_setup\": {{\"status\": \"complete\"}}}} \
         written to $HVSIM_SDK_OUTPUT); without it the root is taken at --setup-limit ({limit} virtual). \
         A program whose SDK does not find hvsim's channel reports nothing: see docs/sdk-protocol.md.",
        elapsed
    )
}

fn vtime(d: Duration) -> Vtime {
    Vtime(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

pub fn main(args: Args) -> Result<ExitCode> {
    let (target, mut start) = if args.linux || args.linux_args.implies_linux() {
        (args.linux_args.target(false)?, args.linux_args.start_options(None))
    } else {
        let guest = args.guest.clone().unwrap_or_else(|| "demo".into());
        args.linux_args.refuse_for_raw_guest(&guest, &[])?;
        (Target::Raw { guest }, StartOptions::default())
    };
    if args.out.exists() && !args.out.is_dir() {
        anyhow::bail!("--out {}: it is a file, not a directory", args.out.display());
    }
    let linux = target.is_linux();
    let profiling = args.guest_profile.start(linux)?;
    start.profiler = profiling.as_ref().map(|p| p.config);
    let config = ExploreConfig {
        target,
        seed: args.seed,
        budget: Budget { branches: Some(args.branches), wall: args.time, vtime: args.vtime.map(vtime) },
        slice: vtime(args.slice.unwrap_or(if linux { Duration::from_secs(2) } else { Duration::from_millis(5) })),
        setup_limit: args.setup_limit.map_or(ExploreConfig::default_setup_limit(linux), vtime),
        branch_from_snapshots: !args.no_snapshots,
        stop_at_first_bug: false,
        reexecutions: args.reexecute,
        start,
        batch: usize::from(args.batch.unwrap_or(args.workers)),
        workers: usize::from(args.workers),
    };
    let host = Host::open()?;
    let bar = ProgressBar::new(args.branches);
    bar.set_style(
        ProgressStyle::with_template("hvsim: explore [{elapsed_precise}] {bar:30} {pos}/{len} branches {msg}")
            .expect("valid template"),
    );
    let mut hinted = false;
    let mut exploration = explore(&config, &host, &mut |p| match p {
        Progress::Setup { vtime, limit, elapsed } => {
            bar.set_message(format!("| waiting for setup complete: virtual time {vtime} of {limit}"));
            if !hinted && elapsed >= SETUP_HINT_AFTER {
                hinted = true;
                bar.suspend(|| eprintln!("{}", setup_hint(elapsed, vtime, limit)));
            }
        }
        Progress::Branch(p) => {
            bar.set_position(p.branches);
            let ph = p.phases;
            bar.set_message(format!(
                "| {} snapshots | {} signals | {} bugs | wall: run {:.0}s, restore {:.0}s, snapshot {:.0}s, bug checks {:.0}s",
                p.snapshots,
                p.signals,
                p.bugs,
                ph.branches_ms as f64 / 1e3,
                ph.restore_ms as f64 / 1e3,
                ph.snapshot_ms as f64 / 1e3,
                ph.reexecution_ms as f64 / 1e3
            ));
        }
    })
    .context("exploration failed")?;
    bar.finish_and_clear();
    if let (Some(p), Some(profile)) = (&profiling, &exploration.guest_profile) {
        p.finish(profile, &format!("hvsim explore: {} (seed {})", exploration.target.name(), args.seed))?;
    }
    let report = report::write(&args.out, &mut exploration).context("cannot write the report")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    let s = &report.summary;
    eprintln!(
        "hvsim: explored {} branches from {} snapshots in {:.1}s: {} signals, {} bug(s); report in {}",
        s.branches,
        s.snapshots,
        s.wall_ms as f64 / 1000.0,
        s.signals,
        s.bugs,
        args.out.join("report.md").display()
    );
    for b in &report.bugs {
        eprintln!("  {}: {} ({})\n    replay: {}", b.id, b.summary, b.reproduction, b.replay_command);
    }
    for f in &report.faults {
        eprintln!("hvsim: fault {:<18} {:<11} ({} touched over all timelines)", f.kind, f.status, f.landed);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_hint_says_what_to_send_and_the_limit() {
        let hint = setup_hint(Duration::from_secs(5), Vtime(1_000_000), Vtime::from_secs(60));
        assert!(hint.contains(r#"{"antithesis_setup": {"status": "complete"}}"#), "{hint}");
        assert!(hint.contains("--setup-limit (60.000000000s virtual)"), "{hint}");
        assert!(hint.contains("(virtual time 0.001000000s)"), "{hint}");
        assert!(hint.contains("docs/sdk-protocol.md"), "{hint}");
    }
}
