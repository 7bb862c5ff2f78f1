//! `hvsim replay`: reproduce a bug from its record, or resume a snapshot.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use hvsim_explorer::bug::BugRecord;
use hvsim_explorer::document::Tag;
use hvsim_explorer::replay;
use hvsim_explorer::roots::RootId;
use hvsim_explorer::schema::ReplayReport;
use hvsim_explorer::story::{self, Narrator};
use hvsim_explorer::StartOptions;
use hvsim_guest_image::host::Host;
use hvsim_guest_image::linux::boot_cache::{BootKind, BootReport};
use hvsim_guest_image::target::Launch;
use hvsim_guest_image::world::World;
use hvsim_snapshot::file;
use hvsim_vmm::{Machine, Vtime};

use crate::session::{self, Output, Session};
use crate::util;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").args(["bug", "snapshot"]).required(true)))]
pub struct Args {
    /// A bug record written by `hvsim explore` (hvsim-out/latest/bugs/BUG-<id>.json):
    /// boots the target, follows the bug's timeline, and says whether the
    /// same failure happens at the same point.
    bug: Option<PathBuf>,
    /// Instead: a snapshot saved by `hvsim run --snapshot-at T --save-snapshot FILE`.
    #[arg(long, value_name = "FILE")]
    snapshot: Option<PathBuf>,
    /// With --snapshot: re-seed every entropy stream from N for everything
    /// after the snapshot. Without it, the streams continue exactly as
    /// saved, so the result equals the uninterrupted run.
    #[arg(long, value_parser = util::parse_seed, allow_hyphen_values = true, requires = "snapshot")]
    seed: Option<u64>,
    /// With a bug record of a Linux target: boot the guest even if the boot
    /// cache holds it.
    #[arg(long, requires = "bug")]
    cold_boot: bool,
    /// Replay even if the world the bug record or snapshot comes from
    /// (hvsim version, machine model, CPUID and MSR policy; for a bug also
    /// the guest kernel, initramfs and target) differs from this one; the
    /// differences are reported.
    #[arg(long)]
    force: bool,
    /// Start the bug's target and run it to its root even where the root
    /// was saved by the exploration (docs/snapshots.md#saved-roots).
    #[arg(long, conflicts_with = "snapshot")]
    fresh_root: bool,
    /// With a bug record: stop this much virtual time before the failure
    /// (e.g. 100ms) and save the machine there (--save-snapshot), for
    /// `hvsim replay --snapshot` or `hvsim debug`.
    #[arg(long, value_parser = util::parse_duration, requires_all = ["bug", "save_snapshot"], conflicts_with = "vtime_limit")]
    snapshot_before: Option<Duration>,
    /// Where --snapshot-before saves the snapshot.
    #[arg(long, value_name = "FILE", requires = "snapshot_before")]
    save_snapshot: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
}

pub fn main(mut args: Args, json: bool) -> Result<ExitCode> {
    args.out.json = json;
    let host = Host::open()?;
    if let Some(path) = &args.bug {
        return replay_bug(&args, path, &host);
    }
    let path = args.snapshot.as_ref().expect("clap requires a bug or a snapshot");
    let loaded = file::load(path)?;
    let machine_world = World::machine(&host)?;
    let recorded = World(loaded.header.world.clone()).restricted_to(&machine_world);
    check_world(path, &recorded, &machine_world, args.force)?;
    let guest = loaded.header.guest.clone();
    let started = std::time::Instant::now();
    let profiling = args.out.guest_profile.start(guest == "linux")?;
    let mut machine = loaded.restore(&host.settings(guest == "linux", args.out.watchdog.map(|w| w.0)))?;
    if let Some(seed) = args.seed {
        machine.reseed(seed)?;
    }
    if let Some(p) = &profiling {
        machine.enable_guest_profiler(p.config);
    }
    let host_limits = if guest == "linux" { host.probes.limits() } else { Vec::new() };
    let seed = args.seed.unwrap_or(loaded.header.seed);
    // The snapshot is the machine: nothing boots.
    let boot = BootReport { kind: BootKind::Direct, wall_ms: started.elapsed().as_millis() as u64, key: None };
    let mut session = Session::start(Launch { machine, boot }, &guest, seed, &args.out, host_limits)?;
    session.profiling = profiling;
    session.finish(&args.out, None)
}

/// `hvsim replay BUG.json`: follows the record's timeline, telling its
/// story, to the failure (or to `--snapshot-before`).
fn replay_bug(args: &Args, path: &Path, host: &Host) -> Result<ExitCode> {
    let Opened { record, world, differences, root, .. } = open(path, host, args.force, args.fresh_root)?;
    let profiling = args.out.guest_profile.start(record.target.is_linux())?;
    let start = StartOptions {
        cold_boot: args.cold_boot,
        watchdog: args.out.watchdog.map(|w| w.0),
        profiler: profiling.as_ref().map(|p| p.config),
        ..StartOptions::default()
    };
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let moment = args.snapshot_before.map(|d| Vtime(record.at.vtime_ns.saturating_sub(nanos(d))));
    let limit = moment.or(args.out.vtime_limit.map(|d| Vtime(nanos(d))));
    if let Some(path) = args.save_snapshot.as_ref().filter(|p| p.is_dir()) {
        bail!("--save-snapshot {}: it is a directory", path.display());
    }
    let mut observer = Replayer {
        out: &args.out,
        record: &record,
        nodes: story::nodes(&record.target),
        narrator: Narrator::default(),
        told: Vec::new(),
        print: !args.out.json && !hvsim_guest_image::progress::quiet(),
        log: None,
        snapshot: args.save_snapshot.as_deref().zip(moment),
        saved: None,
        world: &world,
    };
    let (outcome, _) = replay::replay(&record, host, &start, limit, root.as_ref(), &mut observer)?;
    let (told, saved) = (std::mem::take(&mut observer.told), observer.saved.take());
    if let (Some(path), Some(moment)) = (&args.save_snapshot, moment) {
        // The snapshot is what was asked for: the verdict on the
        // failure cannot be had from a replay stopped short of it.
        let Some(stats) = saved else {
            bail!(
                "the replay of {} stopped at virtual time {} ns, short of {moment} (the timeline {}); no snapshot saved",
                record.id,
                outcome.vtime_ns,
                outcome.observed.as_deref().map_or("went elsewhere".to_owned(), |o| format!("ended: {o}"))
            );
        };
        if args.out.json {
            println!(
                "{}",
                serde_json::json!({"bug": record.id, "snapshot": path, "vtime_ns": moment.nanos(),
                    "before_failure_ns": record.at.vtime_ns - moment.nanos(), "pages": stats.pages, "bytes": stats.file_bytes})
            );
        } else {
            println!(
                "{}: snapshot at virtual time {moment}, {:?} before the failure, saved to {} ({} pages, {} bytes); \
                 `hvsim replay --snapshot {}` resumes it{}",
                record.id,
                Duration::from_nanos(record.at.vtime_ns - moment.nanos()),
                path.display(),
                stats.pages,
                stats.file_bytes,
                path.display(),
                match later_reseeds(&record, moment) {
                    0 => " as the bug's timeline went on".to_owned(),
                    n => format!(
                        " without the {n} re-seeding{} the timeline made after it, so it may not reach the failure",
                        if n == 1 { "" } else { "s" }
                    ),
                }
            );
        }
        return Ok(ExitCode::from(util::EXIT_OK));
    }
    if let (Some(p), Some(profile)) = (&profiling, &outcome.profile) {
        p.finish(profile, &format!("hvsim replay: {}", record.id))?;
    }
    if args.out.json {
        let report = ReplayReport {
            schema: Tag::new(),
            bug: record.id.clone(),
            reproduced: outcome.reproduced,
            trace_matches: outcome.trace_matches,
            memory_matches: outcome.memory_matches,
            trace_hash: outcome.fingerprint.trace_hash.clone(),
            world_differences: differences,
            assertion: outcome.observed.clone(),
            expected: outcome.expected.clone(),
            vtime_ns: outcome.vtime_ns,
            events: outcome.at.events,
            from_saved_root: outcome.from_saved_root,
            story: told,
        };
        crate::util::print_json(&report)?;
    } else {
        if outcome.from_saved_root {
            hvsim_guest_image::note!(
                "hvsim: replay: started from the saved root of its timeline (--fresh-root runs it again)"
            );
        }
        println!(
            "{}: {} — {} at virtual time {} ns (event {}); {}",
            record.id,
            if outcome.reproduced { "reproduced" } else { "NOT reproduced" },
            outcome.observed.as_deref().unwrap_or("no failure observed"),
            outcome.vtime_ns,
            outcome.at.events,
            match (outcome.trace_matches, outcome.memory_matches) {
                (true, true) => "the same trace and memory",
                (true, false) if outcome.reproduced => {
                    "the same trace; guest memory differs, as it may where guest user mode reads the TSC \
                     (see host_limits)"
                }
                (true, false) => "the same trace, but guest memory differs",
                (false, _) if record.failure.is_none() => "the record holds no trace hash to compare",
                (false, _) => "a different trace",
            }
        );
    }
    Ok(ExitCode::from(if outcome.reproduced { util::EXIT_OK } else { util::EXIT_NOT_REPRODUCED }))
}

/// A bug record, ready to follow.
pub(crate) struct Opened {
    pub record: BugRecord,
    /// This host's world for its target.
    pub world: World,
    /// How it differs from the record's (with `force`).
    pub differences: String,
    /// Its timeline's saved root, unless asked to run it afresh.
    pub root: Option<RootId>,
    /// Its target as explored, before its files were relocated: what a
    /// record derived from it (`hvsim minimize`) keeps.
    pub explored: hvsim_explorer::Target,
}

/// Loads the bug record at `path`: refused if found in another world
/// unless `force`; the target's files relocated to the copies the
/// exploration kept beside its records.
pub(crate) fn open(path: &Path, host: &Host, force: bool, fresh_root: bool) -> Result<Opened> {
    let mut record = BugRecord::load(path)?;
    let world = World::of(&record.target, host)?;
    let differences = check_world(path, &record.world, &world, force)?;
    // The saved root is keyed by the target as explored: before its files
    // are relocated below.
    let root = if fresh_root { None } else { Some(RootId::new(&record.target, &world, record.master_seed)?) };
    let explored = record.target.clone();
    // The exploration kept copies of the files the target reads beside its
    // records: those serve, wherever this runs and whatever became of the
    // originals.
    if let Some(store) = hvsim_explorer::report::inputs_of_record(path) {
        hvsim_guest_image::inputs::relocate(&mut record.target, &store);
    }
    Ok(Opened { record, world, differences, root, explored })
}

/// How many of the record's segments start after `moment`.
fn later_reseeds(record: &BugRecord, moment: Vtime) -> usize {
    let starts = std::iter::once(record.timeline.root).chain(record.timeline.segments.iter().map(|s| s.until));
    starts.take(record.timeline.segments.len()).filter(|p| p.vtime_ns > moment.nanos()).count()
}

/// What `hvsim replay BUG.json` does as the timeline re-executes: tells
/// its story, writes `--log`, measures `--profile`, saves the snapshot of
/// `--snapshot-before`.
struct Replayer<'a> {
    out: &'a Output,
    record: &'a BugRecord,
    nodes: Vec<String>,
    narrator: Narrator,
    /// Everything told, for `--json`.
    told: Vec<story::Entry>,
    print: bool,
    log: Option<util::AtomicFile>,
    /// Where and when to save a snapshot.
    snapshot: Option<(&'a Path, Vtime)>,
    saved: Option<file::SaveStats>,
    world: &'a World,
}

impl Replayer<'_> {
    fn tell(&mut self, m: &Machine) {
        let first = self.told.is_empty();
        let mut entries = self.narrator.next(m, &|n| story::name(&self.nodes, n));
        if first {
            // What came before the replay's start: only the last of it.
            entries = story::keep_last(entries);
        }
        if self.print {
            for e in &entries {
                println!("{}", e.line());
            }
        }
        self.told.extend(entries);
    }
}

impl replay::Observer for Replayer<'_> {
    fn prepare(&mut self, m: &mut Machine) -> hvsim_explorer::Result<()> {
        if self.out.profile {
            m.enable_wall_profile(10);
        }
        if let Some(path) = &self.out.log {
            let log = session::start_log(m, path, &self.record.target.name(), self.record.master_seed)
                .map_err(|e| hvsim_explorer::ExploreError::Observer(format!("--log {}: {e:#}", path.display())))?;
            self.log = Some(log);
        }
        self.tell(m);
        Ok(())
    }

    fn stopped(&mut self, m: &Machine) {
        self.tell(m);
    }

    fn finish(&mut self, m: &mut Machine) -> hvsim_explorer::Result<()> {
        self.tell(m);
        let other = |e: anyhow::Error| hvsim_explorer::ExploreError::Observer(format!("{e:#}"));
        m.flush_log()?;
        if let Some(log) = self.log.take() {
            log.commit().map_err(other)?;
        }
        session::print_wall_profile(m);
        if let Some((path, moment)) = self.snapshot {
            if m.now() >= moment && m.state().ended.is_none() {
                let stats = file::save(path, m, &self.record.target.name(), self.record.master_seed, &self.world.0)
                    .map_err(|e| other(e.into()))?;
                self.saved = Some(stats);
            }
        }
        Ok(())
    }
}

/// Compares the world a record or snapshot comes from with this one:
/// refuses if they differ, unless `force` (then warns). Returns the
/// differences as one line (empty if none).
fn check_world(path: &Path, recorded: &World, here: &World, force: bool) -> Result<String> {
    let differences = if recorded.0.is_empty() {
        "it pins no world (written by an older hvsim)".to_owned()
    } else {
        recorded.diff(here)
    };
    if !differences.is_empty() {
        if !force {
            bail!(
                "{}: found in another world than this one (recorded vs here): {differences}; --force replays anyway",
                path.display()
            );
        }
        eprintln!("hvsim: warning: replaying in another world (recorded vs here): {differences}");
    }
    Ok(differences)
}
