//! `hvsim bench`: measurements printed as ratios against a baseline measured
//! side by side in the same run (absolute times on a nested host mean little).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hvsim_explorer::document::{Document, Tag};
use hvsim_explorer::Target;
use hvsim_guest_image::raw;
use hvsim_snapshot::SnapshotTree;
use hvsim_vmm::{End, Machine, MachineConfig, Stop, Vtime};
use schemars::JsonSchema;
use serde::Serialize;

use hvsim_guest_image::host::Host;

mod boot;
mod checkers;
mod explore;
mod family;
mod faults;
mod guest;
mod image;
mod memory;
mod net;
mod roots;
mod scale;
mod shards;
mod workers;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

// Parsed once per process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand)]
enum What {
    /// Cost of one exit round trip through hvsim's run loop vs a bare KVM_RUN loop.
    Exits {
        /// Exits per measurement.
        #[arg(long, default_value = "20000", value_parser = clap::value_parser!(u32).range(1..=100_000_000))]
        exits: u32,
        /// Measurements of each loop (medians are reported).
        #[arg(long, default_value = "5", value_parser = repeat_range)]
        repeat: usize,
    },
    /// Timelines and wall time to the first bug under the rarity policy
    /// (SDK draws as decision points, given values inside timelines too)
    /// against rarity with one value per branch, the energy policy before
    /// it (and, on the demo, every timeline from the root): medians over
    /// master seeds. On the demo, or (--linux) on the example built with
    /// the official Antithesis Rust SDK, whose bug sits behind five chained
    /// 1-in-8 draws (guest-sdk/examples/antithesis-rust). With --faults, or
    /// a project (--compose ...): swarm's coins and Test Composer's own
    /// template draws against the bandit (`--schedule bandit`).
    #[command(group(clap::ArgGroup::new("linux_target").args(["linux", "image", "compose", "k8s"])))]
    Explore {
        /// Master seeds to measure (1..=N).
        #[arg(long, default_value = "5", value_parser = clap::value_parser!(u64).range(1..=1000))]
        seeds: u64,
        /// Give up on a seed after this many timelines. Default: 1000, or
        /// 200 with --linux.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        max_branches: Option<u64>,
        /// Explore the Rust SDK vault instead of the demo.
        #[arg(long, conflicts_with_all = ["faults", "compose", "k8s", "image"])]
        linux: bool,
        /// Explore two Linux nodes under three drawn fault rules, only one
        /// of which leads to the bug: swarm's coins against the bandit
        /// (`--schedule bandit`).
        #[arg(long, conflicts_with_all = ["compose", "k8s", "image"])]
        faults: bool,
        /// Explore each program of a family on the official Rust SDK
        /// (eight bugs behind draws of different shapes), against the
        /// timelines trying each draw's values in order needs.
        #[arg(long, conflicts_with_all = ["linux", "faults", "compose", "k8s", "image"])]
        family: bool,
        /// With --family: only this program (repeatable; `antithesis-family
        /// list` names them).
        #[arg(long = "program", requires = "family")]
        programs: Vec<String>,
        /// With --family: only this policy (repeatable: rarity, one-value,
        /// energy; default all three).
        #[arg(long = "policy", requires = "family")]
        policies: Vec<String>,
        /// With --compose (or --image ...): explore that project, swarm's
        /// coins and Test Composer's own template draws against the bandit
        /// (e.g. examples/compose/redis-templates/compose.yaml: three
        /// templates, one of which finds the bug).
        #[command(flatten)]
        linux_args: crate::linux_args::LinuxArgs,
    },
    /// Branches per second of an exploration run by several workers (a
    /// machine and a thread each) against the same exploration run by one,
    /// checking that both explored the same timelines.
    Workers {
        /// Workers measured against one (default: this host's CPUs, at
        /// least 2); also the rounds' batch, for both runs.
        #[arg(long, value_parser = clap::value_parser!(u16).range(2..=256))]
        workers: Option<u16>,
        /// Branches each run explores.
        #[arg(long, default_value = "400", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        branches: u64,
        /// Explore the Linux vault instead of the demo.
        #[arg(long)]
        linux: bool,
    },
    /// An exploration as two one-worker shards run at once on this host
    /// against one two-worker exploration, in branches per second; and
    /// merging the shards (`hvsim merge`): time and bytes per 1,000
    /// branches and per bug (docs/scale.md).
    Shards {
        /// Branches of the whole exploration.
        #[arg(long, default_value = "400", value_parser = clap::value_parser!(u64).range(2..=10_000_000))]
        branches: u64,
        /// Explore the Linux vault instead of the demo.
        #[arg(long)]
        linux: bool,
    },
    /// Wall time to an exploration's root, run and saved against restored
    /// from the saved roots (docs/snapshots.md#saved-roots): on a compose
    /// project or image (--compose, --image, ...), else on a Linux program
    /// (guest-sdk/c/vault.c, built with gcc); checking both explored the same.
    #[command(group(clap::ArgGroup::new("linux_target").args(["linux", "image", "compose", "k8s"])))]
    Roots {
        /// Explore hvsim's Linux guest running --init-cmd instead.
        #[arg(long)]
        linux: bool,
        #[command(flatten)]
        linux_args: crate::linux_args::LinuxArgs,
        /// Branches each exploration runs after its root.
        #[arg(long, default_value = "4", value_parser = clap::value_parser!(u64).range(1..=10_000))]
        branches: u64,
    },
    /// The explorer's peak resident memory against --snapshot-memory, on a
    /// program that sends many SDK messages while it is snapshotted every
    /// 10 ms (guest-sdk/c/chatty.c, built with gcc), against one run of it;
    /// each in a process of its own.
    Memory {
        /// The --snapshot-memory budgets to measure.
        #[arg(long, value_delimiter = ',', default_value = "160M,4G")]
        budgets: Vec<String>,
        /// Branches each exploration runs (in rounds of 4: the tree is
        /// evicted to its budget between rounds).
        #[arg(long, default_value = "8", value_parser = clap::value_parser!(u64).range(1..=10_000))]
        branches: u64,
    },
    /// The linearizability checker on generated register, compare-and-set
    /// and key-value histories (1k and 10k operations, 5 and 20 clients)
    /// against the plain search (one object, no memo), time and memo size;
    /// the transactional checker on list-append and rw-register histories
    /// of 10k and 100k transactions.
    Checkers {
        /// Steps each search may take before it answers "undecided".
        #[arg(long, default_value = "2000000", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
        step_limit: u64,
    },
    /// Wall time of each node and clock fault (pause, kill, stop, hang,
    /// crash, wipe, bump, strobe, drift, custom) per injection and per
    /// recovery, against the same two-node Linux run without it.
    Faults {
        /// Runs of each variant (medians are reported).
        #[arg(long, default_value = "3", value_parser = repeat_range)]
        repeat: usize,
    },
    /// Packets per second between two Linux nodes through the simulated
    /// switch, against the same exchange over loopback inside one node.
    Net {
        /// Bytes each TCP exchange carries.
        #[arg(long, default_value = "1000000", value_parser = clap::value_parser!(u64).range(1..=1 << 34))]
        bytes: u64,
    },
    /// System calls, page faults, fork, exec of a dynamically linked
    /// program and TCP round trips (one node, two nodes) in a Linux guest
    /// against the same workloads on the host, per operation.
    Guest {
        /// Multiplies the guest's operation counts (the default keeps the
        /// run to a couple of minutes where the guest kernel is emulated).
        #[arg(long, default_value = "5", value_parser = clap::value_parser!(u64).range(1..=1000))]
        scale: u64,
    },
    /// Importing a docker-archive and building its root file system against
    /// `tar -x` of the same layers; with --compose, also the time from start
    /// to the first line a service of the Redis compose project prints.
    Image {
        /// Imports measured (the median is reported).
        #[arg(long, default_value = "3", value_parser = repeat_range)]
        repeat: usize,
        /// Also start the Redis compose project (boots Linux the first time).
        #[arg(long)]
        compose: bool,
    },
    /// A cold Linux boot to init's ready point against a warm restore of the
    /// same machine from the boot cache, with the restore's cost split.
    Boot {
        /// Guest RAM.
        #[arg(long, default_value = "128M", value_parser = crate::util::parse_size)]
        mem: usize,
        /// Simulated nodes (each adds a NIC and a disk).
        #[arg(long, default_value = "0",
              value_parser = clap::value_parser!(u16).range(0..=i64::from(hvsim_vmm::devices::virtio::MAX_NODES)))]
        nodes: u16,
        /// Restores measured (the median is reported).
        #[arg(long, default_value = "5", value_parser = repeat_range)]
        repeat: usize,
    },
    /// How a run's cost grows with its nodes: for each node count a cold
    /// boot to ready, the RAM it touched, its root's file, then a ring of
    /// pings (every node the next) in wall seconds per virtual second and
    /// the snapshot it leaves; each row against half its nodes.
    Scale {
        /// Node counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "8,16,32,64",
              value_parser = clap::value_parser!(u16).range(1..=i64::from(hvsim_vmm::devices::virtio::MAX_NODES)))]
        nodes: Vec<u16>,
    },
    /// Snapshot capture to a file, restore from a file, and in-process reset
    /// (snapshot tree) by number of dirty pages, against a full copy of RAM.
    Snapshot {
        /// Resets measured per dirty-page count (medians are reported).
        #[arg(long, default_value = "20", value_parser = repeat_range)]
        repeat: usize,
    },
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    match args.what {
        What::Exits { exits, repeat } => bench_exits(exits, repeat.max(1), json),
        What::Snapshot { repeat } => bench_snapshot(repeat.max(1), json),
        What::Explore { seeds, max_branches, family: true, programs, policies, .. } => {
            family::bench_family(seeds, max_branches.unwrap_or(200), &programs, &policies, json)
        }
        What::Explore { seeds, max_branches, linux, faults, linux_args, .. } => {
            let workload = if linux_args.implies_linux() {
                let name = linux_args
                    .compose
                    .as_ref()
                    .or(linux_args.k8s.first())
                    .map(|c| c.display().to_string())
                    .or(linux_args.image.clone());
                explore::Workload::Project(Box::new(linux_args.target(false)?), name.unwrap_or_default())
            } else if faults {
                explore::Workload::Faults
            } else if linux {
                explore::Workload::Vault
            } else {
                explore::Workload::Demo
            };
            let max_branches =
                max_branches.unwrap_or(if matches!(workload, explore::Workload::Demo) { 1000 } else { 200 });
            explore::bench_explore(seeds, max_branches, workload, json)
        }
        What::Shards { branches, linux } => shards::bench_shards(branches, linux, json),
        What::Workers { workers, branches, linux } => {
            let workers = workers.map_or(hvsim_vmm::host::allowed_cpus().len().max(2), usize::from);
            workers::bench_workers(workers, branches, linux, json)
        }
        What::Roots { linux, linux_args, branches } => {
            let target = if linux || linux_args.implies_linux() { Some(linux_args.target(false)?) } else { None };
            roots::bench_roots(target, branches, json)
        }
        What::Memory { budgets, branches } => memory::bench_memory(&budgets, branches, json),
        What::Net { bytes } => net::bench_net(bytes, json),
        What::Faults { repeat } => faults::bench_faults(repeat.max(1), json),
        What::Checkers { step_limit } => checkers::bench_checkers(step_limit, json),
        What::Guest { scale } => guest::bench_guest(scale, json),
        What::Boot { mem, nodes, repeat } => boot::bench_boot(mem, nodes, repeat.max(1), json),
        What::Image { repeat, compose } => image::bench_image(repeat.max(1), compose, json),
        What::Scale { nodes } => scale::bench_scale(&nodes, json),
    }
}

/// What `hvsim bench NAME --json` prints: which benchmark, and what it
/// measured against the baseline taken in the same run. The fields besides
/// `benchmark` are each benchmark's own (docs/benchmarks.md).
#[derive(Serialize, JsonSchema)]
pub struct BenchReport {
    schema: Tag<BenchReport>,
    benchmark: String,
    #[serde(flatten)]
    measured: serde_json::Map<String, serde_json::Value>,
}

impl Document for BenchReport {
    const NAME: &'static str = "bench";
    const SCHEMA: &'static str = "hvsim-bench-v1";
    const ABOUT: &'static str = "a benchmark's measurements and their baseline: `hvsim bench NAME --json`";
}

/// Prints a benchmark's `--json`: `measured`, an object naming its
/// `benchmark`.
fn print_report(measured: serde_json::Value) -> Result<()> {
    let serde_json::Value::Object(mut measured) = measured else { unreachable!("benchmarks report objects") };
    let benchmark = match measured.remove("benchmark") {
        Some(serde_json::Value::String(name)) => name,
        other => unreachable!("a benchmark's report names it: {other:?}"),
    };
    crate::util::print_json(&BenchReport { schema: Tag::new(), benchmark, measured })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn bench_exits(n: u32, repeat: usize, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let mut config = MachineConfig::raw(raw::exit_loop(n), 0, &host.profile);
    config.host = host.settings(false, None);
    let mut hvsim_ns = Vec::new();
    let mut bare_ns = Vec::new();
    // Alternate the two loops so drift on a shared host hits both alike.
    for _ in 0..repeat {
        let mut m = Machine::new(&config)?;
        let start = Instant::now();
        let stop = m.run_until(Vtime::MAX)?;
        let t = start.elapsed();
        if !matches!(stop, Stop::Ended(hvsim_vmm::End::Exit { status: 0 })) {
            bail!("exit-loop guest did not finish under hvsim: {stop:?}");
        }
        hvsim_ns.push(per_exit(t, m.trace_state().events));

        let mut m = Machine::new(&config)?;
        let (exits, t) = m.run_bare()?;
        bare_ns.push(per_exit(t, exits));
    }
    let (h, b) = (median(hvsim_ns), median(bare_ns));
    let ratio = h / b;
    if json {
        print_report(serde_json::json!({
            "benchmark": "exits",
            "exits_per_measurement": n,
            "repeat": repeat,
            "hvsim_ns_per_exit": h,
            "bare_kvm_ns_per_exit": b,
            "ratio": ratio,
            "nested_host": host.profile.nested_pvm,
        }))?;
    } else {
        println!("exit round trip, median of {repeat} x {n} exits (ring-0 port reads):");
        println!("  bare KVM_RUN loop (baseline): {b:>10.0} ns/exit");
        println!("  hvsim run loop:               {h:>10.0} ns/exit");
        println!("  ratio hvsim / bare:           {ratio:>10.3}");
        if host.profile.nested_pvm {
            println!("  (host: nested kvm_pvm; absolute numbers are not representative)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

const BENCH_RAM: usize = 128 << 20;
const WRITE_BASE: u64 = 8 << 20;

fn bench_snapshot(repeat: usize, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("bench.snap");
    let mut rows = Vec::new();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for pages in [1u32, 64, 1024, 8192, 30_000] {
        let mut config = MachineConfig::raw(raw::page_writer(pages, WRITE_BASE), 0, &host.profile);
        config.spec.ram_size = BENCH_RAM;
        config.host = host.settings(false, None);
        let mut m = Machine::new(&config)?;
        let (tree, mut at) = SnapshotTree::new(&mut m)?;
        let mut reset = Vec::new();
        let mut copied = 0;
        for _ in 0..repeat {
            if !matches!(m.run_until(Vtime::MAX)?, Stop::Ended(End::Exit { status: 0 })) {
                bail!("page-writer guest did not finish");
            }
            let t = Instant::now();
            copied = tree.reset(&mut at, &mut m, tree.root())?.pages_copied;
            reset.push(ms(t.elapsed()));
        }
        m.run_until(Vtime::MAX)?;
        let t = Instant::now();
        let saved = hvsim_snapshot::file::save(&file, &mut m, "page-writer", 0, &Default::default())?;
        let capture = ms(t.elapsed());
        let t = Instant::now();
        drop(hvsim_snapshot::file::load(&file)?.restore(&config.host)?);
        let restore = ms(t.elapsed());
        // The naive baseline: copy all of RAM.
        let mut copy = Vec::new();
        let mut buf = vec![0u8; BENCH_RAM];
        for _ in 0..repeat.min(5) {
            let t = Instant::now();
            buf.copy_from_slice(m.ram().as_slice());
            copy.push(ms(t.elapsed()));
        }
        std::hint::black_box(&buf);
        let (reset, copy) = (median(reset), median(copy));
        rows.push(serde_json::json!({
            "dirty_pages": pages,
            "pages_copied_per_reset": copied,
            "reset_ms": reset,
            "full_copy_ms": copy,
            "reset_vs_full_copy": reset / copy,
            "capture_to_file_ms": capture,
            "restore_from_file_ms": restore,
            "file_bytes": saved.file_bytes,
        }));
    }
    if json {
        print_report(serde_json::json!({ "benchmark": "snapshot", "ram_bytes": BENCH_RAM, "rows": rows }))?;
    } else {
        println!("snapshot costs, {} MiB guest RAM (medians; baseline: copying all of RAM)", BENCH_RAM >> 20);
        println!("  dirty pages | reset ms | full copy ms | reset/copy | capture-to-file ms | restore-from-file ms | file bytes");
        for r in &rows {
            println!(
                "  {:>11} | {:>8.3} | {:>12.3} | {:>10.3} | {:>18.1} | {:>20.1} | {:>10}",
                r["dirty_pages"].as_u64().unwrap(),
                r["reset_ms"].as_f64().unwrap(),
                r["full_copy_ms"].as_f64().unwrap(),
                r["reset_vs_full_copy"].as_f64().unwrap(),
                r["capture_to_file_ms"].as_f64().unwrap(),
                r["restore_from_file_ms"].as_f64().unwrap(),
                r["file_bytes"].as_u64().unwrap()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The C vault (`guest-sdk/c/vault.c`, four 1-in-8 choices) of `bench
/// workers --linux` and `bench roots`, built for the guest.
fn linux_vault(dir: &std::path::Path) -> Result<Target> {
    vault_target(&c_sdk_program(dir, "vault", include_str!("../../../../guest-sdk/c/vault.c"))?)
}

/// A program of hvsim's C SDK (`source`, a file of guest-sdk/c/) built
/// statically with gcc in `dir`, for the guest; its path.
fn c_sdk_program(dir: &std::path::Path, name: &str, source: &str) -> Result<std::path::PathBuf> {
    const SDK: &str = include_str!("../../../../guest-sdk/c/hvsim_sdk.h");
    std::fs::write(dir.join("hvsim_sdk.h"), SDK)?;
    let (src, binary) = (dir.join(format!("{name}.c")), dir.join(name));
    std::fs::write(&src, source)?;
    let out = std::process::Command::new("gcc")
        .args(["-std=gnu11", "-O1", "-static", "-s", "-o"])
        .arg(&binary)
        .arg(&src)
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run gcc to build {name}.c: {e}"))?;
    if !out.status.success() {
        bail!("gcc could not build {name}.c: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(binary)
}

/// A vault program built for the guest, run as /bin/vault.
fn vault_target(binary: &std::path::Path) -> Result<Target> {
    program_target(binary, "/bin/vault", "")
}

/// A program built for the guest, copied in as `guest` and run there with
/// `args`.
fn program_target(binary: &std::path::Path, guest: &str, args: &str) -> Result<Target> {
    let file = hvsim_guest_image::linux::GuestFile { host: binary.to_owned(), guest: guest.into() };
    Ok(Target::Linux {
        command: if args.is_empty() { guest.to_owned() } else { format!("{guest} {args}") },
        mem: 128 << 20,
        files: vec![(file, hvsim_guest_image::hash::file_hash(binary)?)],
        system: Default::default(),
        verbose_boot: false,
    })
}

/// A program of the example on the official Antithesis Rust SDK
/// (`guest-sdk/examples/antithesis-rust`: `vault` or `family`), built by
/// its script; its path.
fn rust_sdk_example(which: &str) -> Result<std::path::PathBuf> {
    let script =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/examples/antithesis-rust/build.sh");
    if !script.exists() {
        bail!("{}: not found (the benchmark builds the example from hvsim's source tree)", script.display());
    }
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(which)
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn per_exit(t: Duration, exits: u64) -> f64 {
    t.as_nanos() as f64 / exits.max(1) as f64
}

/// `--repeat`: how many measurements (1 to 1000).
fn repeat_range(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        _ => Err("repeats are 1 to 1000".into()),
    }
}
