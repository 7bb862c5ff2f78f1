//! `hvsim bench checkers`: the linearizability checker on generated
//! histories of real registers (always linearizable: the search must
//! explore to the end), against the plain search in the same run: the
//! history as one object (not split by key) and no memo.

use std::process::ExitCode;
use std::time::Instant;

use super::print_report;
use anyhow::Result;
use hvsim_checkers::generate::{history, Object};
use hvsim_checkers::history::{operations, parse};
use hvsim_checkers::linearizable::{check_costed, check_whole, Cost, Limits, Verdict};

/// One search's result: wall milliseconds, its cost, its verdict's name.
fn measure(f: impl FnOnce() -> hvsim_checkers::Result<(Verdict, Cost)>) -> Result<(f64, Cost, &'static str)> {
    let t = Instant::now();
    let (verdict, cost) = f()?;
    let name = match verdict {
        Verdict::Linearizable { .. } => "linearizable",
        Verdict::NotLinearizable { .. } => "NOT linearizable",
        Verdict::Unknown { .. } => "undecided",
    };
    Ok((t.elapsed().as_secs_f64() * 1e3, cost, name))
}

pub fn bench_checkers(steps: u64, json: bool) -> Result<ExitCode> {
    let mut rows = Vec::new();
    for object in [Object::Register, Object::Cas, Object::Map] {
        for ops in [1_000, 10_000] {
            for clients in [5, 20] {
                let text = history(object, ops, clients, 1);
                let ops_parsed = operations(&parse(&text)?)?;
                let limits = Limits { steps, ..Limits::default() };
                let (ms, cost, verdict) = measure(|| check_costed(&ops_parsed, limits))?;
                let plain = Limits { memo: false, steps, ..Limits::default() };
                let (plain_ms, plain_cost, plain_verdict) = measure(|| check_whole(&ops_parsed, plain))?;
                rows.push(serde_json::json!({
                    "object": object.name(), "operations": ops, "clients": clients,
                    "ms": ms, "steps": cost.steps, "memo_bytes": cost.memo_bytes, "verdict": verdict,
                    "plain_ms": plain_ms, "plain_steps": plain_cost.steps, "plain_verdict": plain_verdict,
                    "plain_vs_checker_ms": plain_ms / ms.max(1e-6),
                }));
            }
        }
    }
    // Growth: 10x the operations, how much more time (per object and
    // clients).
    let growth: Vec<serde_json::Value> = rows
        .chunks(4)
        .flat_map(|r| {
            (0..2).map(move |c| {
                serde_json::json!({
                    "object": r[c]["object"], "clients": r[c]["clients"],
                    "ms_10k_over_1k": r[c + 2]["ms"].as_f64().unwrap_or(0.0) / r[c]["ms"].as_f64().unwrap_or(1.0).max(1e-6),
                })
            })
        })
        .collect();
    if json {
        print_report(
            serde_json::json!({"benchmark": "checkers", "step_limit": steps, "rows": rows, "growth": growth}),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("linearizability of generated histories (real registers: all linearizable), step limit {steps}:");
    println!("  baseline: the plain search, the history as one object, no memo");
    println!("  object       |    ops | clients | checker ms | steps      | memo KiB | plain ms  | plain steps | plain verdict | plain/checker");
    for r in &rows {
        println!(
            "  {:<12} | {:>6} | {:>7} | {:>10.1} | {:>10} | {:>8.0} | {:>9.1} | {:>11} | {:<13} | {:>8.1}",
            r["object"].as_str().unwrap_or_default(),
            r["operations"],
            r["clients"],
            r["ms"].as_f64().unwrap_or_default(),
            r["steps"],
            r["memo_bytes"].as_f64().unwrap_or_default() / 1024.0,
            r["plain_ms"].as_f64().unwrap_or_default(),
            r["plain_steps"],
            r["plain_verdict"].as_str().unwrap_or_default(),
            r["plain_vs_checker_ms"].as_f64().unwrap_or_default(),
        );
    }
    println!("  growth, 1k -> 10k operations (checker time):");
    for g in &growth {
        println!(
            "    {:<12} {:>2} clients: x{:.1}",
            g["object"].as_str().unwrap_or_default(),
            g["clients"],
            g["ms_10k_over_1k"].as_f64().unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}
