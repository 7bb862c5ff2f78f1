//! `hvsim bench explore --family`: the explorer's search on a family of
//! programs on the official Antithesis Rust SDK
//! (`guest-sdk/examples/antithesis-rust/src/bin/antithesis-family.rs`),
//! each hiding one bug behind random draws in a different way. For each
//! program: timelines to its bug under the rarity policy (values given
//! inside timelines too), one value per branch, and the energy policy,
//! medians over master seeds, all in the same run; against the timelines a
//! search that tries each draw's values in order, one per timeline, needs
//! at least (the program's own `list` says).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use hvsim_explorer::{explore, Span, Target};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;
use serde_json::{json, Value};

use super::explore::{config, Mode, ENERGY, ONE_VALUE, RARITY};
use super::print_report;

/// Where the family lives in the guest.
const GUEST_PATH: &str = "/bin/family";

/// One program of the family, as its `list` describes it.
#[derive(Clone, Debug)]
pub struct Member {
    pub name: String,
    /// The bug's chance per attempt is one in this.
    pub one_in: f64,
    /// Timelines a search trying each draw's values in order, one per
    /// timeline, needs at least.
    pub in_order: u64,
    /// Virtual time each timeline runs from its snapshot (`--slice`).
    pub slice: Vtime,
}

/// The programs, as the binary lists them (it runs on the host too).
pub fn members(binary: &Path) -> Result<Vec<Member>> {
    let out = std::process::Command::new(binary)
        .arg("list")
        .output()
        .with_context(|| format!("cannot run {} list", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let parse = |line: &str| -> Option<Member> {
        let mut w = line.split_whitespace();
        Some(Member {
            name: w.next()?.to_owned(),
            one_in: w.next()?.parse().ok()?,
            in_order: w.next()?.parse().ok()?,
            slice: Vtime(w.next()?.parse::<u64>().ok()?.checked_mul(1_000_000)?),
        })
    };
    let members: Vec<Member> = text
        .lines()
        .map(|l| parse(l).with_context(|| format!("{}: {l:?}", binary.display())))
        .collect::<Result<_>>()?;
    if !out.status.success() || members.len() < 8 {
        bail!("{} list: {} programs, status {}", binary.display(), members.len(), out.status);
    }
    Ok(members)
}

/// One program as a Linux target: the family's binary, run with its name.
pub fn target(binary: &Path, member: &Member) -> Result<Target> {
    super::program_target(binary, GUEST_PATH, &member.name)
}

pub fn bench_family(
    seeds: u64,
    max_branches: u64,
    only: &[String],
    policies: &[String],
    json: bool,
) -> Result<ExitCode> {
    let host = Host::open()?;
    let binary = super::rust_sdk_example("family")?;
    let mut members = members(&binary)?;
    if let Some(unknown) = only.iter().find(|p| !members.iter().any(|m| &m.name == *p)) {
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        bail!("--program {unknown}: the family has {}", names.join(", "));
    }
    if !only.is_empty() {
        members.retain(|m| only.contains(&m.name));
    }
    let mut modes: Vec<Mode> = vec![RARITY, ONE_VALUE, ENERGY];
    if let Some(unknown) = policies.iter().find(|p| !modes.iter().any(|m| m.name == p.as_str())) {
        bail!("--policy {unknown}: one of rarity, one-value, energy");
    }
    if !policies.is_empty() {
        modes.retain(|m| policies.iter().any(|p| p == m.name));
    }
    hvsim_guest_image::note!(
        "hvsim: bench explore --family: {} programs on the official Rust SDK, {} policies, seeds 1..={seeds} \
         (minutes to hours here)",
        members.len(),
        modes.len()
    );
    let mut programs = Vec::new();
    for member in &members {
        let target = target(&binary, member)?;
        let mut rows = Vec::new();
        for seed in 1..=seeds {
            for mode in &modes {
                let e = explore(
                    &config(&target, Span::Slice(member.slice), None, seed, mode, true, max_branches),
                    &host,
                    &mut (),
                )?;
                let timelines = e.first_bug.map(|(b, _)| b);
                if !json {
                    eprintln!(
                        "  {:<17} seed {seed} {:<9} {} ({} draw points, {} revisits)",
                        member.name,
                        mode.name,
                        timelines
                            .map_or(format!("not found in {max_branches}"), |t| format!("bug after {t} timelines")),
                        e.draws.points,
                        e.draws.revisits,
                    );
                }
                rows.push(json!({
                    "seed": seed,
                    "mode": mode.name,
                    "timelines_to_bug": timelines,
                    "draw_points": e.draws.points,
                    "revisits": e.draws.revisits,
                }));
            }
        }
        let medians: serde_json::Map<String, Value> =
            modes.iter().map(|m| (m.name.to_owned(), json!(median(&rows, m.name)))).collect();
        let found = |mode: &str| rows.iter().filter(|r| r["mode"] == mode && !r["timelines_to_bug"].is_null()).count();
        let measured = |mode: &str| modes.iter().any(|m| m.name == mode);
        let rarity = median(&rows, RARITY.name);
        let one_value = median(&rows, ONE_VALUE.name);
        // Not found counts as slower than any found; null where either
        // policy was not measured.
        let no_slower = (measured(RARITY.name) && measured(ONE_VALUE.name)).then_some(match (rarity, one_value) {
            (Some(r), Some(o)) => r <= o,
            (_, None) => true,
            (None, Some(_)) => false,
        });
        programs.push(json!({
            "program": member.name,
            "one_in": member.one_in,
            "in_order": member.in_order,
            "slice_ms": member.slice.nanos() / 1_000_000,
            "rows": rows,
            "medians": medians,
            "found": modes.iter().map(|m| (m.name.to_owned(), json!(found(m.name)))).collect::<serde_json::Map<_, _>>(),
            // The goal, as measured: within twice the in-order
            // bound, and no slower than one value per branch.
            "within_twice_in_order": rarity.is_some_and(|r| r <= 2 * member.in_order),
            "no_slower_than_one_value": no_slower,
        }));
    }
    if json {
        print_report(json!({
            "benchmark": "explore-family",
            "seeds": seeds,
            "max_timelines": max_branches,
            "programs": programs,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("explore the family to each bug, medians over seeds 1..={seeds} (> {max_branches}: not found):");
    println!(
        "  program           |   1 in | in order | slice ms |     rarity |  one-value |     energy | rarity within 2x in order, no slower than one-value"
    );
    for p in &programs {
        let cell = |mode: &str| {
            if !modes.iter().any(|m| m.name == mode) {
                return "-".to_owned();
            }
            let found = p["found"][mode].as_u64().unwrap_or(0);
            p["medians"][mode].as_u64().map_or(format!("> {max_branches}"), |m| m.to_string())
                + &format!(" ({found}/{seeds})")
        };
        println!(
            "  {:<17} | {:>6.0} | {:>8} | {:>8} | {:>10} | {:>10} | {:>10} | {}, {}",
            p["program"].as_str().unwrap_or(""),
            p["one_in"].as_f64().unwrap_or(0.0),
            p["in_order"],
            p["slice_ms"],
            cell(RARITY.name),
            cell(ONE_VALUE.name),
            cell(ENERGY.name),
            if p["within_twice_in_order"] == true { "yes" } else { "no" },
            p["no_slower_than_one_value"].as_bool().map_or("-", |b| if b { "yes" } else { "no" }),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A mode's median timelines to the bug; not found counts as more than any
/// found, so the median is `None` when half or more were not found.
fn median(rows: &[Value], mode: &str) -> Option<u64> {
    let mut v: Vec<u64> =
        rows.iter().filter(|r| r["mode"] == mode).map(|r| r["timelines_to_bug"].as_u64().unwrap_or(u64::MAX)).collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().filter(|&m| m != u64::MAX)
}
