//! `hvsim bench explore`: timelines and wall time to the first bug under the
//! explorer's scheduling policy (`rarity`, with SDK draws as decision
//! points) against the policy before it (`energy`) and, on the demo,
//! against starting every timeline from the root; medians over master
//! seeds, all measured in the same run. On the demo, or (`--linux`) on the
//! example built with the official Antithesis Rust SDK, whose bug sits
//! behind five chained 1-in-8 draws; or, where the bandit chooses, swarm's
//! coins and Test Composer's own draws (`rarity`) against the bandit
//! (`bandit`): (`--faults`) on two Linux nodes under a plan of three drawn
//! rules of which only partitions lose the ping, or on a compose project
//! (`--compose`: `examples/compose/redis-templates`, three templates of
//! which one finds the bug).

use std::process::ExitCode;

use super::print_report;
use anyhow::Result;
use hvsim_explorer::exploration::Policy;
use hvsim_explorer::{explore, Budget, ExploreConfig, Span, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;
use serde_json::{json, Value};

/// A way to explore, measured against the others.
pub(super) struct Mode {
    pub name: &'static str,
    pub policy: Policy,
    pub from_snapshots: bool,
}

pub(super) const RARITY: Mode = Mode { name: "rarity", policy: Policy::Rarity, from_snapshots: true };
pub(super) const ONE_VALUE: Mode = Mode { name: "one-value", policy: Policy::RarityOneValue, from_snapshots: true };
pub(super) const ENERGY: Mode = Mode { name: "energy", policy: Policy::Energy, from_snapshots: true };
const FROM_ROOT: Mode = Mode { name: "from-root", policy: Policy::Energy, from_snapshots: false };
const BANDIT: Mode = Mode { name: "bandit", policy: Policy::Bandit, from_snapshots: true };

/// Three drawn rules; only a partition loses node 1's ping of node 0,
/// 50 ms after setup complete. The partition rule comes last, so that the
/// bandit's first (untried) picks are the rules that find nothing.
const PARTITION_PLAN: &str = r#"
[[draw.fault]]
kind = "latency"
every = ["10ms", "80ms"]
duration = ["20ms", "60ms"]
delay = "1ms"

[[draw.fault]]
kind = "duplicate"
every = ["10ms", "80ms"]
duration = ["20ms", "60ms"]
probability = 0.2

[[draw.fault]]
kind = "partition"
every = ["10ms", "80ms"]
duration = ["20ms", "60ms"]
targets = ["one"]
"#;

const PING: &str = r#"mkfifo /tmp/pause
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
read -t 0.05 _ <> /tmp/pause
if hvsim-node 1 ping -c 1 -W 1 10.0.0.1 > /dev/null; then ok=true; else ok=false; fi
echo "{\"antithesis_assert\":{\"id\":\"ping answers\",\"message\":\"ping answers\",\"condition\":$ok,\"hit\":true,\"must_hit\":true,\"assert_type\":\"always\",\"display_type\":\"Always\",\"location\":{},\"details\":null}}" > $HVSIM_SDK_OUTPUT
"#;

/// Two nodes, one pinging the other, under [`PARTITION_PLAN`].
fn partition_ping() -> Target {
    Target::Linux {
        command: PING.into(),
        mem: 128 << 20,
        files: Vec::new(),
        system: hvsim_guest_image::target::System {
            nodes: 2,
            disk_bytes: 1 << 30,
            fault_plan: Some(PARTITION_PLAN.into()),
            ..Default::default()
        },
        verbose_boot: false,
    }
}

/// What `hvsim bench explore` explores.
pub enum Workload {
    Demo,
    /// The Rust SDK vault (`--linux`).
    Vault,
    /// Two Linux nodes under three drawn rules (`--faults`).
    Faults,
    /// A Linux target the options describe (`--compose`, `--image`, ...),
    /// and what to call it.
    Project(Box<Target>, String),
}

impl Workload {
    /// Whether it measures the bandit against swarm's coins and Test
    /// Composer's draws (rather than the draw policies).
    fn bandit(&self) -> bool {
        matches!(self, Workload::Faults | Workload::Project(..))
    }

    fn linux(&self) -> bool {
        !matches!(self, Workload::Demo)
    }
}

pub fn bench_explore(seeds: u64, max_branches: u64, workload: Workload, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let (linux, bandit) = (workload.linux(), workload.bandit());
    let target_name = match &workload {
        Workload::Demo => "the demo".to_owned(),
        Workload::Vault => "the Rust SDK vault (five chained 1-in-8 draws)".to_owned(),
        Workload::Faults => {
            "two Linux nodes under latency, duplicate and partition rules (only partitions lose the ping)".to_owned()
        }
        Workload::Project(_, name) => name.clone(),
    };
    let (target, span, every, modes) = if let Workload::Project(target, _) = workload {
        hvsim_guest_image::note!("hvsim: bench explore: {target_name} (minutes here)");
        // As `hvsim explore` runs a project with templates: whole timelines.
        let limit = Vtime::from_secs(if target.has_composer() { 120 } else { 60 });
        (*target, Span::Whole { limit }, Some(Vtime(limit.nanos() / 10)), vec![RARITY, BANDIT])
    } else if let Workload::Faults = workload {
        hvsim_guest_image::note!(
            "hvsim: bench explore --faults: two Linux nodes under three drawn rules (minutes here)"
        );
        (partition_ping(), Span::Whole { limit: Vtime(2_000_000_000) }, None, vec![RARITY, BANDIT])
    } else if linux {
        hvsim_guest_image::note!(
            "hvsim: bench explore --linux: exploring the Rust SDK vault to its bug (minutes here)"
        );
        (
            super::vault_target(&super::rust_sdk_example("vault")?)?,
            Span::Slice(Vtime(500_000_000)),
            None,
            vec![RARITY, ONE_VALUE, ENERGY],
        )
    } else {
        let limit = Vtime(20_000_000);
        (
            Target::Raw { guest: "demo".into() },
            Span::Whole { limit },
            Some(Vtime(limit.nanos() / 10)),
            vec![RARITY, ONE_VALUE, ENERGY, FROM_ROOT],
        )
    };
    let config = |seed: u64, mode: &Mode, to_first_bug: bool, branches: u64| {
        config(&target, span, every, seed, mode, to_first_bug, branches)
    };
    let mut rows = Vec::new();
    // How branches ran, as the explorations say it.
    let mut span_words = String::new();
    for seed in 1..=seeds {
        for mode in &modes {
            let e = explore(&config(seed, mode, true, max_branches), &host, &mut ())?;
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
    // The baseline against the policy measured: energy against rarity, or
    // swarm's coins (rarity) against the bandit.
    let (base, policy) = if bandit { ("rarity", "bandit") } else { ("energy", "rarity") };
    let ratio_of = |base: &str, policy: &str, key: &str| -> Option<f64> {
        Some(median(base, key)? as f64 / median(policy, key)?.max(1) as f64)
    };
    let ratio = |key: &str| ratio_of(base, policy, key);
    // Draws inside timelines (`steer.rs`): one value per branch against
    // rarity's several.
    let steering = (!bandit).then(|| {
        json!({
            "baseline": ONE_VALUE.name, "policy": RARITY.name,
            "timelines": ratio_of(ONE_VALUE.name, RARITY.name, "timelines_to_bug"),
            "ms": ratio_of(ONE_VALUE.name, RARITY.name, "ms_to_bug"),
        })
    });
    // Calibration on the demo and the Rust SDK vault (two Linux nodes under
    // faults and projects are measured for the bandit only: minutes a seed).
    let calibrated = CALIBRATION_BRANCHES.min(max_branches);
    let calibration = if bandit {
        Value::Null
    } else {
        calibration(seeds, &|seed| explore(&config(seed, &modes[0], false, calibrated), &host, &mut ()))?
    };
    // What explaining costs, as a share of the explorations' wall time
    // after their roots (summed over every run of every policy).
    let total = |key: &str| rows.iter().map(|r| r[key].as_f64().unwrap_or(0.0)).sum::<f64>();
    let explained = json!({
        "story_share": total("story_ms") / total("run_ms").max(1.0),
        "likelihood_share": total("likelihood_ms") / total("run_ms").max(1.0),
    });
    if json {
        print_report(json!({
            "benchmark": "explore",
            "target": target_name,
            "seeds": seeds,
            "max_timelines": max_branches,
            "span": span_words,
            "rows": rows,
            "medians": medians,
            "baseline_over_policy": {
                "baseline": base, "policy": policy,
                "timelines": ratio("timelines_to_bug"), "ms": ratio("ms_to_bug"),
            },
            "one_value_over_rarity": steering,
            "explaining": explained,
            "calibration": calibration,
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
    match (ratio("timelines_to_bug"), ratio("ms_to_bug")) {
        (Some(t), Some(ms)) => {
            println!("  {base} / {policy}: {t:.2}x the timelines, {ms:.2}x the wall time (baseline: {base})")
        }
        _ => println!("  {base} / {policy}: a median is not a number within {max_branches} timelines"),
    }
    if let Some(s) = &steering {
        match (s["timelines"].as_f64(), s["ms"].as_f64()) {
            (Some(t), Some(ms)) => println!(
                "  one-value / rarity: {t:.2}x the timelines, {ms:.2}x the wall time (one value per branch at a draw \
                 point, against values given inside timelines too)"
            ),
            _ => println!("  one-value / rarity: a median is not a number within {max_branches} timelines"),
        }
    }
    if !bandit {
        println!(
            "  discovery estimates ({}, {calibrated} branches a seed, no stop at the bug): chance one of the next \
             {WINDOW} timelines finds something new, estimated at branch k, against how often the next {WINDOW} did",
            modes[0].name
        );
    }
    for bin in calibration.as_array().into_iter().flatten() {
        println!(
            "    estimated {:>4} to {:>4}: {:>3} points, estimated {:.2} on average, found {:.2}",
            bin["from"],
            bin["to"],
            bin["points"],
            bin["estimated"].as_f64().unwrap_or(0.0),
            bin["found"].as_f64().unwrap_or(0.0)
        );
    }
    println!(
        "  explaining bugs: stories {:.2}% and likelihood estimates {:.1}% of the explorations' wall time after their roots",
        100.0 * explained["story_share"].as_f64().unwrap_or(0.0),
        100.0 * explained["likelihood_share"].as_f64().unwrap_or(0.0)
    );
    Ok(ExitCode::SUCCESS)
}

/// How the benchmarks explore: one worker, batch 1, no re-executions,
/// every exploration starting from the same saved root.
pub(super) fn config(
    target: &Target,
    span: Span,
    every: Option<Vtime>,
    seed: u64,
    mode: &Mode,
    to_first_bug: bool,
    branches: u64,
) -> ExploreConfig {
    let linux = !matches!(target, Target::Raw { .. });
    ExploreConfig {
        target: target.clone(),
        seed,
        budget: Budget { branches: Some(branches), ..Budget::default() },
        span,
        snapshot_every: every,
        snapshot_memory: u64::MAX,
        setup_limit: ExploreConfig::default_setup_limit(linux),
        branch_from_snapshots: mode.from_snapshots,
        stop_at_first_bug: to_first_bug,
        until_saturated: None,
        reexecutions: 0,
        start: Default::default(),
        batch: 1,
        workers: 1,
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
    }
}

/// Branches each seed's calibration exploration runs (at most the budget).
const CALIBRATION_BRANCHES: u64 = 200;

/// Timelines ahead the calibration looks: the stop rule's window.
const WINDOW: u64 = hvsim_explorer::discovery::SATURATION_WINDOW;

/// How well the discovery estimates predict: each seed explored for its
/// whole budget (no stop at the bug), and at every 10th branch k from 20
/// on, the estimated chance that one of the next [`WINDOW`] timelines
/// reaches a feature none had, against whether one of them did. Points
/// binned by the estimate; a calibrated estimate finds about what it says.
fn calibration(
    seeds: u64,
    explore: &dyn Fn(u64) -> hvsim_explorer::Result<hvsim_explorer::Exploration>,
) -> Result<Value> {
    const BINS: [(f64, f64); 4] = [(0.0, 0.1), (0.1, 0.3), (0.3, 0.6), (0.6, 1.01)];
    let mut points: Vec<(f64, bool)> = Vec::new();
    for seed in 1..=seeds {
        let e = explore(seed)?;
        let s = &e.series;
        let mut k = 2 * WINDOW as usize;
        while k + WINDOW as usize <= s.len() {
            let now = &s[k - 1].incidence;
            let later = &s[k - 1 + WINDOW as usize].incidence;
            points.push((now.new_within(WINDOW).value, later.observed > now.observed));
            k += WINDOW as usize;
        }
    }
    Ok(BINS
        .iter()
        .map(|&(from, to)| {
            let bin: Vec<&(f64, bool)> = points.iter().filter(|(p, _)| *p >= from && *p < to).collect();
            let n = bin.len().max(1) as f64;
            json!({
                "from": from, "to": to.min(1.0), "points": bin.len(),
                "estimated": bin.iter().map(|(p, _)| p).sum::<f64>() / n,
                "found": bin.iter().filter(|(_, f)| *f).count() as f64 / n,
            })
        })
        .collect())
}
