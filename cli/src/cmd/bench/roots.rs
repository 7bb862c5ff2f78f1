//! `hvsim bench roots`: the wall time to an exploration's root when the
//! root is run (and saved) against when it is restored from the saved
//! roots, in the same process; and whether the two explored the same.

use std::process::ExitCode;

use anyhow::{bail, Result};
use hvsim_explorer::{explore, Budget, Exploration, ExploreConfig, Span, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;

use super::print_report;
use super::workers::explored;

pub fn bench_roots(target: Option<Target>, branches: u64, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let dir = tempfile::tempdir()?;
    let target = match target {
        Some(t) => t,
        None => super::linux_vault(dir.path())?,
    };
    hvsim_guest_image::note!(
        "hvsim: bench roots: exploring a Linux target twice, its root run then restored (minutes here)"
    );
    let config = |fresh_root| ExploreConfig {
        target: target.clone(),
        seed: 1,
        budget: Budget { branches: Some(branches), ..Budget::default() },
        span: Span::Whole { limit: Vtime::from_secs(60) },
        snapshot_every: None,
        snapshot_memory: u64::MAX,
        setup_limit: ExploreConfig::default_setup_limit(true),
        branch_from_snapshots: true,
        stop_at_first_bug: false,
        until_saturated: None,
        reexecutions: 0,
        start: Default::default(),
        batch: 4,
        workers: 1,
        saved_roots: true,
        fresh_root,
        roots_dir: None,
        require_root: false,
        shard: Default::default(),
        policy: Default::default(),
        checkers: Vec::new(),
        claims: Vec::new(),
        likelihood: hvsim_explorer::LikelihoodParams::off(),
        winddown: hvsim_explorer::winddown::Winddown::Auto,
    };
    let made = explore(&config(true), &host, &mut ())?;
    let restored = explore(&config(false), &host, &mut ())?;
    if !made.root.setup_complete || made.root.restored {
        bail!("the target never reported setup complete: there is no root to save");
    }
    if !restored.root.restored {
        bail!("the second exploration did not restore the root the first saved (see HVSIM_LOG=debug)");
    }
    let same = explored(&made) == explored(&restored);
    let to_root = |e: &Exploration| e.phases.to_root_ms();
    let (run_ms, restore_ms) = (to_root(&made), to_root(&restored));
    let ratio = run_ms as f64 / restore_ms.max(1) as f64;
    if json {
        print_report(serde_json::json!({
            "benchmark": "roots",
            "branches": branches,
            "root_run_ms": run_ms,
            "root_restored_ms": restore_ms,
            "speedup": ratio,
            "same_exploration": same,
        }))?;
    } else {
        println!("time to the root of an exploration of {branches} branches:");
        println!("  run to setup complete  {:>9.1} s", run_ms as f64 / 1000.0);
        println!("  restored (saved root)  {:>9.1} s   {ratio:.0}x faster", restore_ms as f64 / 1000.0);
        println!("  the same exploration: {}", if same { "yes" } else { "NO" });
    }
    if !same {
        bail!("the exploration from the saved root differs from the one that ran its root");
    }
    Ok(ExitCode::SUCCESS)
}
