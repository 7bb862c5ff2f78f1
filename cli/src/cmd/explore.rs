//! `hvsim explore`: search a target's timelines for bugs, as a CI job
//! would want it: each exploration in a directory of its own, bug records
//! written the moment bugs are found and again when confirmed, reports
//! refreshed while it runs, SIGINT and SIGTERM ending it cleanly, and an
//! exit status that says whether it found a bug (docs/cli.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use hvsim_explorer::assertions::Verdict;
use hvsim_explorer::bug::BugRecord;
use hvsim_explorer::claims::ClaimVerdict;
use hvsim_explorer::discovery::Saturation;
use hvsim_explorer::exploration::Policy;
use hvsim_explorer::live::Live;
use hvsim_explorer::manifest::Manifest;
use hvsim_explorer::report::{github, Baseline, Changes, Report, RunDir, Status};
use hvsim_explorer::services::ServiceExit;
use hvsim_explorer::shard::Shard;
use hvsim_explorer::watch::SetupProgress;
use hvsim_explorer::winddown::Winddown;
use hvsim_explorer::{
    explore, BranchProgress, Budget, Ending, Exploration, ExploreConfig, LikelihoodParams, Progress, Span,
    StartOptions, Target, Watch,
};
use hvsim_guest_image::host::Host;
use hvsim_guest_image::inputs;
use hvsim_guest_image::linux::boot_cache::BootKind;
use hvsim_vmm::Vtime;
use indicatif::{ProgressBar, ProgressStyle};

use crate::linux_args::LinuxArgs;
use crate::profile::ProfileArgs;
use crate::util;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").args(["guest", "linux", "image", "compose", "k8s"])))]
#[command(group(clap::ArgGroup::new("linux_target").args(["linux", "image", "compose", "k8s"])))]
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
    /// Stop rule: end once the upper 95% bound of the chance that the next
    /// timeline reaches anything new falls below P (0 < P < 1), after at
    /// least 20 timelines; --branches stays the cap (docs/exploration.md).
    #[arg(long, value_name = "P", value_parser = parse_chance)]
    until_saturated: Option<f64>,
    /// Virtual time a timeline may run, counted from the root (default
    /// 20ms; 60s for Linux, 120s for a project with Test Composer
    /// templates): each branch runs to its timeline's end, when the guest
    /// ends (every service exited, the program powered off) or this is
    /// reached.
    #[arg(long, value_parser = util::parse_duration, conflicts_with = "slice")]
    timeline_limit: Option<Duration>,
    /// When Test Composer winds down before each timeline's limit (stops
    /// its drivers and runs the template's last check): `auto` leaves time
    /// for the checks as long as they took in earlier timelines (a quarter
    /// of the limit at first), a duration before the limit, or `off`.
    #[arg(long, default_value = "auto", value_parser = parse_winddown)]
    composer_winddown: Winddown,
    /// Instead of whole timelines: each branch runs this much virtual time
    /// from its snapshot.
    #[arg(long, value_parser = util::parse_duration)]
    slice: Option<Duration>,
    /// Snapshot every timeline at each multiple of this much virtual time
    /// from the root, so that later branches run the rest of a timeline
    /// under other faults (default: a tenth of --timeline-limit; none with
    /// --slice). 0s: only where something is new.
    #[arg(long, value_parser = util::parse_duration)]
    snapshot_every: Option<Duration>,
    /// Memory for the snapshot tree's pages: beyond it, the snapshots with
    /// the least energy are evicted between rounds.
    #[arg(long, value_parser = util::parse_size, default_value = "4G")]
    snapshot_memory: usize,
    /// Virtual time to wait for setup complete before taking the root anyway
    /// (default 10s; 60s for Linux).
    #[arg(long, value_parser = util::parse_duration)]
    setup_limit: Option<Duration>,
    /// Where explorations go: each in a new directory OUT/<time>-<target>-
    /// seed<N>/ (report.html, report.md, report.json, bugs/, inputs/), and
    /// OUT/latest points at the newest. Nothing earlier is overwritten.
    #[arg(long, default_value = "hvsim-out")]
    out: PathBuf,
    /// Also fail (exit status 10) when a property was never satisfied (a
    /// `sometimes` that never held) or never reached (an `always`,
    /// `sometimes` or `reachable` no timeline hit), as Antithesis counts
    /// them, or a claim did not pass (inconclusive, a harness error, a
    /// checker that could not read its history); a bug still gives 8.
    #[arg(long)]
    fail_on_unmet: bool,
    /// An earlier exploration to compare with: its directory, its
    /// report.json, or an --out directory (its `latest`, read before this
    /// exploration replaces it). Each bug is then new, ongoing or resolved,
    /// and each changed verdict is listed (report.json, report.md and
    /// .html, findings.md, junit.xml).
    #[arg(long, value_name = "DIR|FILE")]
    baseline: Option<PathBuf>,
    /// Which bugs fail the exploration (exit status 8): `any`, or only
    /// `new` ones (not found by --baseline; without a baseline every bug
    /// is new).
    #[arg(long, value_enum, default_value = "any")]
    fail_on: FailOn,
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
    /// Each bug's likelihood over its timeline: this many fresh branches
    /// from each of --likelihood-points moments of it, counting those the
    /// same bug follows (0: no estimate; docs/triage.md).
    #[arg(long, default_value = "8", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    likelihood_runs: u32,
    /// Moments of each bug's timeline to estimate from: the root and
    /// evenly spaced points up to the failure.
    #[arg(long, default_value = "5", value_parser = clap::value_parser!(u32).range(1..=1_000))]
    likelihood_points: u32,
    /// The virtual time every estimate together may run, in percent of
    /// what the exploration's branches ran; a bug whose estimate would not
    /// fit is reported not estimated.
    #[arg(long, default_value = "10", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    likelihood_budget: u32,
    /// Machines that run branches at once, a thread each (up to the host's
    /// cores is useful). Changes only how fast: the same seed and --batch
    /// explore the same timelines with any number of workers.
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: u16,
    /// Branches per round: each round's branches start from the snapshots
    /// taken before the round, and are merged in order. A fixed number, so
    /// that --workers never changes what is explored; more workers than
    /// --batch wait.
    #[arg(long, default_value = "4", value_parser = clap::value_parser!(u16).range(1..=1024))]
    batch: u16,
    /// Run a Linux target to its root (setup complete) even where an
    /// earlier exploration of the same target, world and seed saved it, and
    /// save it again (docs/snapshots.md#saved-roots).
    #[arg(long)]
    fresh_root: bool,
    /// Run shard I (from 0) of N: the whole exploration's branches I+1,
    /// I+1+N, ... up to --branches, which stays the whole's budget. Each
    /// shard writes its own directory; `hvsim merge` combines them
    /// (docs/scale.md).
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    shard: Option<Shard>,
    /// Keep saved roots in DIR (e.g. a volume shards share) instead of
    /// hvsim's cache. With --shard, a Linux target's root must be there
    /// already, made once by `--branches 0 --roots DIR` with the same
    /// hvsim on the same world; the shard refuses anything else.
    #[arg(long, value_name = "DIR", conflicts_with = "fresh_root")]
    roots: Option<PathBuf>,
    /// How each branch picks its snapshot: `rarity` gives weight to rare
    /// signals, to places near a property not yet satisfied and to SDK
    /// draws with values not yet tried (draws are decision points, and a
    /// branch whose value led nowhere gives the draws that follow the
    /// point's next values inside its timeline); `rarity-one-value` is
    /// rarity with one value per branch, as before that, for comparison;
    /// `bandit` is rarity with each line of descent's fault rules chosen
    /// by a bandit over what their faults found, layered on swarm's coins,
    /// and its Test Composer template and drivers by bandits over what
    /// their timelines found;
    /// `energy` is the earlier policy, kept for comparison
    /// (docs/exploration.md).
    #[arg(long, value_enum, default_value_t = SchedulePolicy::Rarity)]
    schedule: SchedulePolicy,
    /// The project manifest: the checkers run on the history every
    /// timeline recorded, at its end, and the claims judged with evidence
    /// (default: `hvsim.toml` beside the --compose file, if there is one;
    /// docs/checkers.md, docs/claims.md).
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    #[command(flatten)]
    guest_profile: ProfileArgs,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SchedulePolicy {
    Rarity,
    RarityOneValue,
    Bandit,
    Energy,
}

impl From<SchedulePolicy> for Policy {
    fn from(p: SchedulePolicy) -> Policy {
        match p {
            SchedulePolicy::Rarity => Policy::Rarity,
            SchedulePolicy::RarityOneValue => Policy::RarityOneValue,
            SchedulePolicy::Bandit => Policy::Bandit,
            SchedulePolicy::Energy => Policy::Energy,
        }
    }
}

/// Wall time of waiting for setup complete before saying what is awaited.
const SETUP_HINT_AFTER: Duration = Duration::from_secs(5);

/// What is awaited, and what may be wrong: the channel, if no program has
/// sent anything through it; otherwise the program that should report.
fn setup_hint(elapsed: Duration, vtime: Vtime, limit: Vtime, sdk_messages: u64) -> String {
    let cause = match sdk_messages {
        0 => "No program has sent anything through the SDK yet: one whose SDK does not find hvsim's channel \
              reports nothing (see docs/sdk-protocol.md)."
            .to_owned(),
        n => {
            format!("The guest's programs have sent {n} SDK message(s), so the channel works: none was setup complete.")
        }
    };
    format!(
        "hvsim: explore: still waiting for setup complete after {:.0?} of wall time (virtual time {vtime}). \
         The root snapshot is taken when a program in the guest reports setup complete through the SDK \
         (e.g. `lifecycle.setup_complete()`, or the JSON line {{\"antithesis_setup\": {{\"status\": \"complete\"}}}} \
         written to $HVSIM_SDK_OUTPUT); without it the root is taken at --setup-limit ({limit} virtual). {cause}",
        elapsed
    )
}

fn parse_chance(s: &str) -> std::result::Result<f64, String> {
    match s.parse::<f64>() {
        Ok(p) if p > 0.0 && p < 1.0 => Ok(p),
        _ => Err(format!("{s:?} is not a chance between 0 and 1 (exclusive)")),
    }
}

fn parse_shard(s: &str) -> std::result::Result<Shard, String> {
    s.parse()
}

fn vtime(d: Duration) -> Vtime {
    Vtime(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The name of an exploration's directory: the target as its reports are
/// titled (a compose project's name, an image's, the program's) and the
/// seed.
fn label(args: &Args, target: &Target) -> String {
    let name: String =
        target.name().chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect();
    match args.shard {
        Some(s) => format!("{name}-seed{}-shard{}of{}", args.seed, s.index, s.count),
        None => format!("{name}-seed{}", args.seed),
    }
}

/// What the exploration hands out as it goes: progress on the bar, bug
/// records and checkpoints into the exploration's directory.
struct Watcher<'a> {
    bar: &'a ProgressBar,
    run: &'a RunDir,
    hinted: bool,
    /// How far each timeline runs, for the warning below.
    span: Span,
    /// The target is a built-in guest that runs until stopped.
    runs_forever: bool,
    /// Warned that the first timelines all ran into their limit with
    /// checks still unevaluated.
    warned: bool,
    /// The last branch's progress, for the next round's line.
    last: Option<BranchProgress>,
    /// The machine's activity while the root's setup runs.
    activity: util::ExitRate,
    /// The target is Linux: what its root cost is worth saying.
    linux: bool,
}

/// What the root just cost, and what that says of the exploration's cost
/// here: a Linux target's timelines cost what their guest's work costs
/// (process starts, kernel code the host may emulate) far more than their
/// virtual time, and the setup has just measured that work.
fn first_root(start_ms: f64, setup_ms: f64, setup_vtime: Vtime, saved: bool, branches: Option<u64>) -> String {
    let (start, setup) = (start_ms / 1e3, setup_ms / 1e3);
    let again = if saved {
        "saved: the next exploration or replay of this project restores it in about a second (hvsim cache ls)"
    } else {
        "not saved (a bug came first, or roots are not kept)"
    };
    let all = branches.map_or(String::new(), |n| {
        format!(", {n} of them about {}", humantime::format_duration(Duration::from_secs((n as f64 * setup) as u64)))
    });
    format!(
        "hvsim: explore: the root took {:.0} s here: {start:.0} s to start the machine, {setup:.0} s of setup for \
         {:.3} s of virtual time; {again}. A timeline that does as much as this setup (starting services, health \
         checks) takes about as long here{all}, spread over the workers; idle virtual time costs far less \
         (docs/compose.md, \"The first hour\")",
        start + setup,
        setup_vtime.nanos() as f64 / 1e9,
    )
}

/// The progress display: `live` is the branches running now (`Watch::live`).
const BAR_TEMPLATE: &str = "hvsim: explore [{elapsed_precise}] {bar:30} {pos}/{len} branches {msg}{live}";

/// Services shown on the progress display; more are counted.
const SERVICES_SHOWN: usize = 12;

/// The setup's progress: how far in virtual time, how busy the machine
/// is (`rate`: exits per second of wall time), what came through the
/// SDK, and a line per service with its state and last output.
fn setup_message(p: &SetupProgress, rate: Option<f64>) -> String {
    let rate = rate.map(|r| format!(", {r:.0} exits/s")).unwrap_or_default();
    let mut out = format!(
        "| setup: waiting for setup complete, virtual time {} of {}{rate}, {} SDK message(s)",
        p.vtime, p.limit, p.sdk_messages
    );
    let width = p.services.iter().map(|v| v.name.len()).max().unwrap_or(0).min(24);
    for v in p.services.iter().take(SERVICES_SHOWN) {
        let last = v.last_line.as_deref().map(|l| format!(": {}", cut(l, 100))).unwrap_or_default();
        out.push_str(&format!("\n  {:width$}  {}{last}", v.name, v.state));
    }
    if p.services.len() > SERVICES_SHOWN {
        out.push_str(&format!("\n  and {} more services", p.services.len() - SERVICES_SHOWN));
    }
    out
}

/// `s` cut to `n` characters.
fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// Timelines that all ran into their limit before the warning that the
/// checks may never be reached: the first few, not the whole budget.
const LIMIT_WARNING_AFTER: u64 = 2;

impl Watch for Watcher<'_> {
    fn progress(&mut self, p: Progress) {
        match p {
            Progress::Starting => self.bar.set_message(
                "| starting the target (a machine shape new to the boot cache boots cold once: minutes on a nested host)",
            ),
            Progress::Started { boot: BootKind::Saved | BootKind::Cold, wall_ms } => self.bar.suspend(|| {
                eprintln!(
                    "hvsim: explore: booted a machine of a new shape cold in {:.0} s (kept in the boot cache: the next \
                     run restores it)",
                    wall_ms as f64 / 1000.0
                )
            }),
            Progress::Started { .. } => {}
            Progress::Confirming { bugs } => {
                self.bar.set_message(format!("| branches done; re-executing {bugs} bug(s) to confirm them"))
            }
            Progress::Estimating { bugs } => {
                self.bar.set_message(format!("| estimating the likelihood of {bugs} bug(s) (--likelihood-runs)"))
            }
            Progress::Setup(p) => {
                if !p.lines.is_empty() {
                    self.bar.suspend(|| p.lines.iter().for_each(|l| eprintln!("{l}")));
                }
                let rate = self.activity.update(p.exits);
                self.bar.set_message(setup_message(&p, rate));
                if !self.hinted && p.elapsed >= SETUP_HINT_AFTER {
                    self.hinted = true;
                    self.bar.suspend(|| eprintln!("{}", setup_hint(p.elapsed, p.vtime, p.limit, p.sdk_messages)));
                }
            }
            Progress::RootMade { start_ms, setup_ms, setup_vtime, saved } if self.linux => {
                let line = first_root(start_ms, setup_ms, setup_vtime, saved, self.bar.length());
                self.bar.suspend(|| eprintln!("{line}"))
            }
            Progress::RootMade { .. } => {}
            Progress::RootRestored { made_ms } => self.bar.suspend(|| {
                eprintln!(
                    "hvsim: explore: the root restored from a saved root (it took {:.0} s to make; --fresh-root makes it again)",
                    made_ms as f64 / 1000.0
                )
            }),
            Progress::Round { first, last, of } => {
                let which = if first == last { format!("branch {first}") } else { format!("branches {first}-{last}") };
                let of = of.map(|n| format!(" of {n}")).unwrap_or_default();
                let so_far = self.last.map_or(String::new(), |p| {
                    format!(" ({} snapshots, {} signals, {} bugs so far)", p.snapshots, p.signals, p.bugs)
                });
                self.bar.set_message(format!("| running {which}{of}{so_far}"));
            }
            Progress::Branch(p) => {
                self.last = Some(p);
                self.bar.set_position(p.branches);
                let t = p.timelines;
                // A check waits for the end of a timeline: a Test Composer
                // finally_ or eventually_ command, or an always-assertion
                // of a guest that ends (one that runs until stopped, the
                // demo, has no end to wait for: its limit is its end).
                let waiting = if self.runs_forever { p.unevaluated_composer } else { p.unevaluated };
                if !self.warned && waiting > 0 && t.ended == 0 && t.at_limit >= LIMIT_WARNING_AFTER {
                    self.warned = true;
                    let limit = self.span.option();
                    self.bar.suspend(|| {
                        eprintln!(
                            "hvsim: warning: the first {} timelines all ran into {limit} before they ended, and \
                             {waiting} check(s) are still unevaluated: if the checks come at the end (a finally_ \
                             command, a final read), raise it",
                            t.at_limit
                        )
                    });
                }
                let ph = p.phases;
                self.bar.set_message(format!(
                    "| {} snapshots | {} signals | {} bugs | next new {:.1}% | wall: run {:.0}s, restore {:.0}s, snapshot {:.0}s, bug checks {:.0}s",
                    p.snapshots,
                    p.signals,
                    p.bugs,
                    100.0 * p.incidence.next_new().value,
                    ph.branches_ms / 1e3,
                    ph.restore_ms / 1e3,
                    ph.snapshot_ms / 1e3,
                    ph.reexecution_ms / 1e3
                ));
            }
        }
    }

    fn live(&mut self, live: &Arc<Live>) {
        // Read at every redraw (each second, at least): the branches
        // running now, a line each.
        let live = live.clone();
        let style = ProgressStyle::with_template(BAR_TEMPLATE).expect("valid template").with_key(
            "live",
            move |_: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                for b in live.now() {
                    let last = b.last_line.map(|l| format!(": {}", cut(&l, 100))).unwrap_or_default();
                    let _ = write!(w, "\n  branch {} at {} of virtual time{last}", b.branch, b.vtime);
                }
            },
        );
        self.bar.set_style(style);
    }

    fn bug(&mut self, record: &BugRecord) -> hvsim_explorer::Result<()> {
        self.run.write_bug(record)?;
        let r = &record.reproduction;
        let state = if r.attempts == 0 && r.wanted > 0 { "confirming".to_owned() } else { record.reproduction_words() };
        self.bar.suspend(|| eprintln!("hvsim: {}: {} ({state})", record.id, record.summary));
        Ok(())
    }

    fn checkpoint(&mut self, exploration: &Exploration) -> hvsim_explorer::Result<()> {
        self.run.write(exploration).map(drop)
    }
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let (mut target, mut start) = if args.linux || args.linux_args.implies_linux() {
        (args.linux_args.target(false)?, args.linux_args.start_options(None))
    } else {
        let guest = args.guest.clone().unwrap_or_else(|| "demo".into());
        args.linux_args.refuse_for_raw_guest(&guest, &[])?;
        (Target::Raw { guest }, StartOptions::default())
    };
    // hvsim.toml beside the compose file, or in the manifests' folder.
    let project_file = args.linux_args.compose.clone().or_else(|| {
        let first = args.linux_args.k8s.first()?;
        Some(if first.is_dir() { first.join("manifests") } else { first.clone() })
    });
    let manifest = match args.manifest.clone().or_else(|| project_file.as_deref().and_then(Manifest::beside)) {
        Some(path) => {
            let m = Manifest::load(&path).map_err(|e| anyhow::anyhow!("project manifest {e}"))?;
            let names: Vec<&str> = m.checkers.iter().map(|c| c.name.as_str()).collect();
            let claims: Vec<&str> = m.claims.iter().map(|c| c.id.as_str()).collect();
            hvsim_guest_image::note!(
                "hvsim: explore: from {}: checkers {}; claims {}",
                path.display(),
                if names.is_empty() { "none".to_owned() } else { names.join(", ") },
                if claims.is_empty() { "none".to_owned() } else { claims.join(", ") }
            );
            m
        }
        None => Manifest::default(),
    };
    if args.out.exists() && !args.out.is_dir() {
        anyhow::bail!("--out {}: it is a file, not a directory", args.out.display());
    }
    // Records name the files from anywhere, and carry copies of them.
    inputs::absolutize(&mut target)?;
    let linux = target.is_linux();
    let profiling = args.guest_profile.start(linux)?;
    start.profiler = profiling.as_ref().map(|p| p.config);
    start.interrupt = Some(crate::signals::interrupt_on_signals()?);
    if let Target::Linux { mem, .. } = &target {
        // Every worker has a machine of its own.
        hvsim_vmm::host::ensure_memory_for(*mem, usize::from(args.workers), args.linux_args.mem_said())
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    let mut host = Host::open()?;
    // Shards that share a host pin their vCPUs to CPUs of their own.
    host.cpu_offset = args.shard.map_or(0, |s| s.index as usize * usize::from(args.workers));
    let baseline = args.baseline.as_deref().map(Baseline::read).transpose()?;
    let run = RunDir::create(&args.out, &label(&args, &target))?.with_baseline(baseline);
    inputs::save(&target, &run.inputs()).context("cannot keep the run's files with its records")?;
    // A project with templates gets time for a whole composition: drivers,
    // then its checks.
    let limit = args.timeline_limit.unwrap_or(match (linux, target.has_composer()) {
        (true, true) => Duration::from_secs(120),
        (true, false) => Duration::from_secs(60),
        (false, _) => Duration::from_millis(20),
    });
    let (span, snapshot_every) = match args.slice {
        Some(slice) => (Span::Slice(vtime(slice)), args.snapshot_every),
        None => (Span::Whole { limit: vtime(limit) }, Some(args.snapshot_every.unwrap_or(limit / 10))),
    };
    let snapshot_every = snapshot_every.filter(|d| !d.is_zero()).map(vtime);
    let config = ExploreConfig {
        target,
        seed: args.seed,
        budget: Budget { branches: Some(args.branches), wall: args.time, vtime: args.vtime.map(vtime) },
        span,
        snapshot_every,
        snapshot_memory: args.snapshot_memory as u64,
        setup_limit: args.setup_limit.map_or(ExploreConfig::default_setup_limit(linux), vtime),
        branch_from_snapshots: !args.no_snapshots,
        stop_at_first_bug: false,
        until_saturated: args.until_saturated.map(|below| Saturation { below }),
        reexecutions: args.reexecute,
        start,
        batch: usize::from(args.batch),
        workers: usize::from(args.workers),
        saved_roots: true,
        fresh_root: args.fresh_root,
        roots_dir: args.roots.clone(),
        require_root: args.shard.is_some() && args.roots.is_some(),
        shard: args.shard.unwrap_or_default(),
        policy: args.schedule.into(),
        checkers: manifest.checkers,
        claims: manifest.claims,
        likelihood: LikelihoodParams {
            runs: args.likelihood_runs,
            points: args.likelihood_points,
            budget: f64::from(args.likelihood_budget) / 100.0,
        },
        winddown: args.composer_winddown,
    };
    let bar = hvsim_guest_image::progress::bar(args.shard.map_or(args.branches, |s| s.share(args.branches)));
    bar.set_style(ProgressStyle::with_template(BAR_TEMPLATE).expect("valid template"));
    // Redrawn each second: a terminal's clock moves, and a log gets its
    // status line on time even while one long timeline runs.
    bar.enable_steady_tick(std::time::Duration::from_secs(1));
    let runs_forever = matches!(&config.target, Target::Raw { guest } if hvsim_guest_image::raw::find(guest).is_some_and(|g| g.runs_forever));
    let mut watcher = Watcher {
        bar: &bar,
        run: &run,
        hinted: false,
        span: config.span,
        runs_forever,
        warned: false,
        last: None,
        activity: util::ExitRate::default(),
        linux,
    };
    let explored = explore(&config, &host, &mut watcher);
    bar.finish_and_clear();
    let exploration = match explored {
        Ok(e) => e,
        Err(e) => {
            // The directory says why it holds no report.
            let why = format!("hvsim explore: exploration failed: {e}\n");
            let _ = hvsim_vmm::files::publish(&run.path().join("error.txt"), why.as_bytes());
            return Err(anyhow::Error::new(e).context("exploration failed"));
        }
    };
    if let (Some(p), Some(profile)) = (&profiling, &exploration.guest_profile) {
        p.finish(profile, &format!("hvsim explore: {} (seed {})", exploration.target.name(), args.seed))?;
    }
    let report = run.write(&exploration).context("cannot write the report")?;
    if json {
        crate::util::print_json(&report)?;
    }
    print_summary(&report, run.path());
    if github::active() {
        for line in github::annotations(&report) {
            eprintln!("{line}");
        }
        let findings = std::fs::read_to_string(run.path().join("findings.md")).unwrap_or_default();
        github::append_summary(&findings).context("cannot append the findings to $GITHUB_STEP_SUMMARY")?;
    }
    Ok(ExitCode::from(exit_status(&report, args.fail_on_unmet, args.fail_on)))
}

/// `--fail-on`: which bugs give exit status 8.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FailOn {
    Any,
    New,
}

/// What the exploration (in `dir`) found, on stderr.
pub(crate) fn print_summary(report: &Report, dir: &Path) {
    let s = &report.summary;
    let ending = match &s.ending {
        Ending::Finished => String::new(),
        e => format!(" ({})", e.describe()),
    };
    eprintln!(
        "hvsim: explored {} branches from {} snapshots in {:.1}s{ending}: {} signals, {} bug(s); report: {}",
        s.branches,
        s.snapshots,
        s.wall_ms as f64 / 1000.0,
        s.signals,
        s.bugs,
        dir.join("report.html").display()
    );
    if s.discovery.incidence.timelines > 0 {
        eprintln!("hvsim: discovery: {}", s.discovery.describe());
    }
    let last_output = |exit: &ServiceExit| {
        for line in &exit.last_output {
            eprintln!("  {} | {line}", exit.service);
        }
    };
    if let Some(exit) = &s.setup_failed {
        eprintln!("hvsim: error: the {}; what it wrote last:", exit.describe());
        last_output(exit);
    }
    if let Some(exit) = &report.harness.service_exit {
        eprintln!(
            "hvsim: warning: the harness failed in {} timeline(s), first: the {}; what it wrote last:",
            report.harness.timelines,
            exit.describe_in_timeline()
        );
        last_output(exit);
    }
    if let Some(c) = &report.changes {
        eprintln!("hvsim: {}", c.describe());
    }
    if let Some(u) = &report.unevaluated {
        eprintln!("hvsim: warning: {} check(s) were never evaluated in any timeline:", u.properties.len());
        for p in &u.properties {
            eprintln!("  {p}");
        }
        eprintln!("  why: {}", u.why);
    }
    let status = |id: &str| {
        let found = report.changes.as_ref().and_then(|c| c.status_of(id));
        found.map(|s| format!("{}, ", s.name())).unwrap_or_default()
    };
    for b in &report.bugs {
        eprintln!(
            "  {}: {} ({}{}; blame: {})\n    replay: {}",
            b.id,
            b.summary,
            status(&b.id),
            b.reproduction,
            b.blame.name(),
            b.replay_command
        );
    }
    for b in report.changes.iter().flat_map(Changes::resolved) {
        eprintln!("  {}: {} (resolved: the baseline found it, this exploration did not)", b.id, b.summary);
    }
    for c in &report.claims {
        eprintln!("hvsim: claim {} {}: {}", c.id, c.verdict.name(), c.reason);
    }
    if !report.claims.is_empty() {
        eprintln!("hvsim: findings: {}", dir.join("findings.md").display());
    }
    for f in &report.faults {
        let drawn = if f.drawn > 0 { format!(", {} drawn faults", f.drawn) } else { String::new() };
        eprintln!("hvsim: fault {:<18} {:<11} ({} touched over all timelines{drawn})", f.kind, f.status, f.landed);
    }
    if let Ending::Failed { .. } = &s.ending {
        eprintln!("hvsim: error: exploration {}", s.ending.describe());
    }
}

/// The exit status of an exploration that produced `report` (docs/cli.md):
/// a bug wins over everything, then an error, an interruption, and with
/// `fail_on_unmet` a property never satisfied or reached, a check no
/// timeline evaluated, or a claim that did not pass.
pub(crate) fn exit_status(report: &Report, fail_on_unmet: bool, fail_on: FailOn) -> u8 {
    let failing = match (fail_on, &report.changes) {
        (FailOn::New, Some(c)) => c.count(Status::New),
        _ => report.bugs.len(),
    };
    let unmet =
        report.assertions.iter().any(|a| matches!(a.verdict, Verdict::NeverReached | Verdict::SometimesNeverSatisfied))
            || report.unevaluated.is_some()
            || report.claims.iter().any(|c| c.verdict != ClaimVerdict::Pass);
    match &report.summary.ending {
        _ if failing > 0 => util::EXIT_BUGS,
        Ending::Failed { .. } => util::EXIT_ERROR,
        // The target never got going: a service failed before setup complete.
        _ if report.summary.setup_failed.is_some() => util::EXIT_ERROR,
        Ending::Interrupted { .. } => util::EXIT_INTERRUPTED,
        _ if fail_on_unmet && unmet => util::EXIT_UNMET,
        _ => util::EXIT_OK,
    }
}

/// `--composer-winddown`: `auto`, `off`, or a duration before the limit.
fn parse_winddown(s: &str) -> Result<Winddown, String> {
    match s {
        "auto" => Ok(Winddown::Auto),
        "off" => Ok(Winddown::Off),
        d => util::parse_duration(d)
            .map(|d| Winddown::Before(vtime(d)))
            .map_err(|e| format!("{e} (or `auto`, or `off`)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setup_hint_says_what_to_send_and_the_limit() {
        let hint = setup_hint(Duration::from_secs(5), Vtime(1_000_000), Vtime::from_secs(60), 0);
        assert!(hint.contains(r#"{"antithesis_setup": {"status": "complete"}}"#), "{hint}");
        assert!(hint.contains("--setup-limit (60.000000000s virtual)"), "{hint}");
        assert!(hint.contains("(virtual time 0.001000000s)"), "{hint}");
        assert!(hint.contains("does not find hvsim's channel") && hint.contains("docs/sdk-protocol.md"), "{hint}");
        // Once messages came, the channel is not the suspect.
        let hint = setup_hint(Duration::from_secs(5), Vtime(1_000_000), Vtime::from_secs(60), 3);
        assert!(hint.contains("sent 3 SDK message(s), so the channel works"), "{hint}");
        assert!(!hint.contains("does not find hvsim's channel"), "{hint}");
    }
}
