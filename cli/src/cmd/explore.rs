//! `hvsim explore`: search a target's timelines for bugs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use hvsim_explorer::{explore, report, Budget, ExploreConfig, StartOptions, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;
use indicatif::{ProgressBar, ProgressStyle};

use crate::linux_args::LinuxArgs;
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
    #[arg(long, default_value = "0", value_parser = util::parse_seed)]
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
    /// (default 10s; 10m for Linux).
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
}

fn vtime(d: Duration) -> Vtime {
    Vtime(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

pub fn main(args: Args) -> Result<ExitCode> {
    let (target, start) = if args.linux || args.linux_args.implies_linux() {
        (args.linux_args.target(false)?, args.linux_args.start_options(None))
    } else {
        (Target::Raw { guest: args.guest.clone().unwrap_or_else(|| "demo".into()) }, StartOptions::default())
    };
    let linux = target.is_linux();
    let config = ExploreConfig {
        target,
        seed: args.seed,
        budget: Budget { branches: Some(args.branches), wall: args.time, vtime: args.vtime.map(vtime) },
        slice: vtime(args.slice.unwrap_or(if linux { Duration::from_secs(2) } else { Duration::from_millis(5) })),
        setup_limit: vtime(args.setup_limit.unwrap_or(Duration::from_secs(if linux { 600 } else { 10 }))),
        branch_from_snapshots: !args.no_snapshots,
        stop_at_first_bug: false,
        start,
    };
    let host = Host::open()?;
    let bar = ProgressBar::new(args.branches);
    bar.set_style(
        ProgressStyle::with_template("hvsim: explore [{elapsed_precise}] {bar:30} {pos}/{len} branches {msg}")
            .expect("valid template"),
    );
    let mut exploration = explore(&config, &host, &mut |p| {
        bar.set_position(p.branches);
        bar.set_message(format!("| {} snapshots | {} signals | {} bugs", p.snapshots, p.signals, p.bugs));
    })
    .context("exploration failed")?;
    bar.finish_and_clear();
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
        eprintln!("  {}: {}\n    replay: {}", b.id, b.summary, b.replay_command);
    }
    for f in &report.faults {
        eprintln!("hvsim: fault {:<18} {:<11} ({} touched over all timelines)", f.kind, f.status, f.landed);
    }
    Ok(ExitCode::SUCCESS)
}
