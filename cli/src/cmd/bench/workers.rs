//! `hvsim bench workers`: branches per second of one exploration run by N
//! workers against the same exploration (same seed, same batch) run by
//! one, in the same process; and whether the two explored the same.

use std::process::ExitCode;

use super::print_report;
use anyhow::{bail, Result};
use hvsim_explorer::shard::Shard;
use hvsim_explorer::{explore, Budget, Exploration, ExploreConfig, Span, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;

/// What must agree between the two runs: every bug's timeline and failure
/// point (with its trace and memory hashes), and what was learned.
pub(super) fn explored(e: &Exploration) -> serde_json::Value {
    let bugs: Vec<_> = e.bugs.iter().map(|b| serde_json::json!([b.summary, b.timeline, b.failure])).collect();
    serde_json::json!({
        "bugs": bugs,
        "snapshots": e.snapshots,
        "signals": e.signals,
        "edges": e.coverage_edges,
        "vtime_ns": e.vtime_ns,
        "faults": e.faults,
    })
}

/// The exploration the throughput benchmarks run: `branches` of slices
/// from seed 1 in rounds of `batch`, nothing re-executed or estimated.
pub(super) fn config(
    target: &Target,
    branches: u64,
    slice: Vtime,
    linux: bool,
    batch: usize,
    workers: usize,
    shard: Shard,
) -> ExploreConfig {
    ExploreConfig {
        target: target.clone(),
        seed: 1,
        budget: Budget { branches: Some(branches), ..Budget::default() },
        span: Span::Slice(slice),
        snapshot_every: None,
        snapshot_memory: u64::MAX,
        setup_limit: ExploreConfig::default_setup_limit(linux),
        branch_from_snapshots: true,
        stop_at_first_bug: false,
        until_saturated: None,
        reexecutions: 0,
        start: Default::default(),
        batch,
        workers,
        saved_roots: false,
        fresh_root: false,
        roots_dir: None,
        require_root: false,
        shard,
        policy: Default::default(),
        checkers: Vec::new(),
        claims: Vec::new(),
        likelihood: hvsim_explorer::LikelihoodParams::off(),
        winddown: hvsim_explorer::winddown::Winddown::Auto,
    }
}

/// Wall seconds of branches: start and setup are the same work either way.
pub(super) fn branch_secs(e: &Exploration) -> f64 {
    e.wall_ms.saturating_sub(e.phases.to_root_ms()).max(1) as f64 / 1000.0
}

pub fn bench_workers(workers: usize, branches: u64, linux: bool, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let dir = tempfile::tempdir()?;
    let (target, slice) = if linux {
        hvsim_guest_image::note!("hvsim: bench workers --linux: exploring a Linux program twice (minutes here)");
        (super::linux_vault(dir.path())?, Vtime(500_000_000))
    } else {
        // Long slices: each branch costs far more than merging it.
        (Target::Raw { guest: "demo".into() }, Vtime(100_000_000))
    };
    let mut runs = Vec::new();
    for w in [1, workers] {
        let config = config(&target, branches, slice, linux, workers, w, Shard::default());
        runs.push(explore(&config, &host, &mut ())?);
    }
    let rate = |e: &Exploration| e.branches as f64 / branch_secs(e);
    let (one, many) = (&runs[0], &runs[1]);
    let same = explored(one) == explored(many);
    let cpus = host.cpus.len();
    if json {
        print_report(serde_json::json!({
            "benchmark": "workers",
            "target": target.name(),
            "branches": branches,
            "batch": workers,
            "cpus": cpus,
            "one_worker_branches_per_sec": rate(one),
            "workers": workers,
            "workers_branches_per_sec": rate(many),
            "speedup": rate(many) / rate(one),
            "same_exploration": same,
        }))?;
    } else {
        println!(
            "explore {} ({branches} branches, rounds of {workers}) with {workers} workers vs 1, on {cpus} CPUs:",
            target.name()
        );
        println!("  1 worker:  {:>8.1} branches/s", rate(one));
        println!("  {workers} workers: {:>8.1} branches/s", rate(many));
        println!("  speedup: {:.2}x; same exploration: {}", rate(many) / rate(one), if same { "yes" } else { "NO" });
    }
    if !same {
        bail!("{workers} workers explored otherwise than one: {} vs {}", explored(many), explored(one));
    }
    Ok(ExitCode::SUCCESS)
}
