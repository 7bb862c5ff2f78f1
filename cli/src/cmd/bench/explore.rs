//! `hvsim bench explore`: timelines and wall time to the first bug under the
//! explorer's scheduling policy (`rarity`, with SDK draws as decision
//! points) against the policy before it (`energy`) and, on the demo,
//! against starting every timeline from the root; medians over master
//! seeds, all measured in the same run. On the demo, or (`--linux`) on the
//! example built with the official Antithesis Rust SDK, whose bug sits
//! behind five chained 1-in-8 draws.

use std::path::PathBuf;
use std::process::ExitCode;

use super::print_report;
use anyhow::{bail, Context, Result};
use hvsim_explorer::exploration::Policy;
use hvsim_explorer::{explore, Budget, ExploreConfig, Span, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;
use serde_json::{json, Value};

/// A way to explore, measured against the others.
struct Mode {
    name: &'static str,
    policy: Policy,
    from_snapshots: bool,
}

const RARITY: Mode = Mode { name: "rarity", policy: Policy::Rarity, from_snapshots: true };
const ENERGY: Mode = Mode { name: "energy", policy: Policy::Energy, from_snapshots: true };
const FROM_ROOT: Mode = Mode { name: "from-root", policy: Policy::Energy, from_snapshots: false };

pub fn bench_explore(seeds: u64, max_branches: u64, linux: bool, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let (target, span, every, modes) = if linux {
        hvsim_guest_image::note!(
            "hvsim: bench explore --linux: exploring the Rust SDK vault to its bug (minutes here)"
        );
        (rust_vault()?, Span::Slice(Vtime(500_000_000)), None, vec![RARITY, ENERGY])
    } else {
        let limit = Vtime(20_000_000);
        (
            Target::Raw { guest: "demo".into() },
            Span::Whole { limit },
            Some(Vtime(limit.nanos() / 10)),
            vec![RARITY, ENERGY, FROM_ROOT],
        )
    };
    let mut rows = Vec::new();
    // How branches ran, as the explorations say it.
    let mut span_words = String::new();
    for seed in 1..=seeds {
        for mode in &modes {
            let config = ExploreConfig {
                target: target.clone(),
                seed,
                budget: Budget { branches: Some(max_branches), ..Budget::default() },
                span,
                snapshot_every: every,
                snapshot_memory: u64::MAX,
                setup_limit: ExploreConfig::default_setup_limit(linux),
                branch_from_snapshots: mode.from_snapshots,
                stop_at_first_bug: true,
                until_saturated: None,
                reexecutions: 0,
                start: Default::default(),
                batch: 1,
                workers: 1,
                // Every exploration starts the same way, restored.
                saved_roots: true,
                fresh_root: false,
                roots_dir: None,
                require_root: false,
                shard: Default::default(),
                policy: mode.policy,
                checkers: Vec::new(),
                claims: Vec::new(),
                likelihood: hvsim_explorer::LikelihoodParams::default(),
                winddown: hvsim_explorer::winddown::Winddown::Auto,
            };
            let e = explore(&config, &host, &mut ())?;
            span_words = e.describe_span();
            let run_ms = e.wall_ms.saturating_sub(e.phases.to_root_ms());
            let (timelines, ms) =
                e.first_bug.map_or((None, None), |(b, ms)| (Some(b), Some(ms.saturating_sub(e.phases.to_root_ms()))));
            if !json {
                eprintln!(
                    "  seed {seed} {:<9} {}",
                    mode.name,
                    timelines.map_or(format!("not found in {max_branches} timelines"), |t| format!(
                        "bug after {t} timelines, {} ms",
                        ms.unwrap_or(0)
                    ))
                );
            }
            rows.push(json!({
                "seed": seed,
                "mode": mode.name,
                "timelines_to_bug": timelines,
                "ms_to_bug": ms,
                "timelines": e.branches,
                "run_ms": run_ms,
                "draw_points": e.draws.points,
                "chosen_draws": e.draws.chosen,
                // Explaining bugs: their stories (within the branches) and
                // their likelihood estimates (after), in wall ms.
                "story_ms": e.phases.story_ms,
                "likelihood_ms": e.phases.likelihood_ms,
            }));
        }
    }
    // Not found counts as more than any found: the median is then a bound.
    let median = |mode: &str, key: &str| -> Option<u64> {
        let mut v: Vec<u64> =
            rows.iter().filter(|r| r["mode"] == mode).map(|r| r[key].as_u64().unwrap_or(u64::MAX)).collect();
        v.sort_unstable();
        v.get(v.len() / 2).copied().filter(|&m| m != u64::MAX)
    };
    let medians: Value = modes
        .iter()
        .map(|m| {
            let found = rows.iter().filter(|r| r["mode"] == m.name && !r["timelines_to_bug"].is_null()).count();
            (
                m.name.to_owned(),
                json!({
                    "timelines_to_bug": median(m.name, "timelines_to_bug"),
                    "ms_to_bug": median(m.name, "ms_to_bug"),
                    "found": found,
                }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into();
    let ratio = |key: &str, base: &str| -> Option<f64> {
        Some(median(base, key)? as f64 / median("rarity", key)?.max(1) as f64)
    };
    // What explaining costs, as a share of the explorations' wall time
    // after their roots (summed over every run of every policy).
    let total = |key: &str| rows.iter().map(|r| r[key].as_f64().unwrap_or(0.0)).sum::<f64>();
    let explained = json!({
        "story_share": total("story_ms") / total("run_ms").max(1.0),
        "likelihood_share": total("likelihood_ms") / total("run_ms").max(1.0),
    });
    let target_name = if linux { "the Rust SDK vault (five chained 1-in-8 draws)" } else { "the demo" };
    if json {
        print_report(json!({
            "benchmark": "explore",
            "target": target_name,
            "seeds": seeds,
            "max_timelines": max_branches,
            "span": span_words,
            "rows": rows,
            "medians": medians,
            "energy_over_rarity": { "timelines": ratio("timelines_to_bug", "energy"), "ms": ratio("ms_to_bug", "energy") },
            "explaining": explained,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("explore {target_name} to its first bug, {} (medians over seeds 1..={seeds}):", span_words);
    println!("  policy    | timelines to bug | ms to bug | found");
    for m in &modes {
        let t = median(m.name, "timelines_to_bug").map_or(format!("> {max_branches}"), |v| v.to_string());
        let ms = median(m.name, "ms_to_bug").map_or("-".into(), |v| v.to_string());
        let found = medians[m.name]["found"].as_u64().unwrap_or(0);
        println!("  {:<9} | {t:>16} | {ms:>9} | {found}/{seeds}", m.name);
    }
    match (ratio("timelines_to_bug", "energy"), ratio("ms_to_bug", "energy")) {
        (Some(t), Some(ms)) => {
            println!("  energy / rarity: {t:.2}x the timelines, {ms:.2}x the wall time (baseline: energy)")
        }
        _ => println!("  energy / rarity: energy's median is not a number within {max_branches} timelines"),
    }
    println!(
        "  explaining bugs: stories {:.2}% and likelihood estimates {:.1}% of the explorations' wall time after their roots",
        100.0 * explained["story_share"].as_f64().unwrap_or(0.0),
        100.0 * explained["likelihood_share"].as_f64().unwrap_or(0.0)
    );
    Ok(ExitCode::SUCCESS)
}

/// The example on the official Antithesis Rust SDK
/// (`guest-sdk/examples/antithesis-rust`), built by its script.
fn rust_vault() -> Result<Target> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/examples/antithesis-rust/build.sh");
    if !script.exists() {
        bail!("{}: not found (bench explore --linux builds the example from hvsim's source tree)", script.display());
    }
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", script.display(), String::from_utf8_lossy(&out.stderr).trim());
    }
    super::vault_target(&PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}
