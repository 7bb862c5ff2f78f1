//! `hvsim bench checkers`: the linearizability checker on generated
//! histories of real registers (always linearizable: the search must
//! explore to the end), against the plain search in the same run: the
//! history as one object (not split by key) and no memo. Then the
//! transactional checker on list-append and rw-register histories of a
//! simulated serializable store (10k and 100k transactions), clean and with
//! one write skew injected, side by side with the register search on a
//! key-value history of as many operations.

use std::process::ExitCode;
use std::time::Instant;

use super::print_report;
use anyhow::Result;
use hvsim_checkers::generate::{history, Object};
use hvsim_checkers::history::parse;
use hvsim_checkers::linearizable::{check_costed, check_whole, Cost, Limits, Verdict};
use hvsim_checkers::model::operations;
use hvsim_checkers::txn::generate::{self as txn_generate, Injected, Shape, Store};
use hvsim_checkers::txn::{self, Consistency, TxnModel, TxnOptions, Validity};
use hvsim_checkers::{judge, ModelKind, Options};

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
    for object in [Object::Register, Object::Cas, Object::Map, Object::Lock] {
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
    let transactional = transactional()?;
    let ledgers = ledgers()?;
    if json {
        print_report(serde_json::json!({
            "benchmark": "checkers", "step_limit": steps, "rows": rows, "growth": growth,
            "transactional": transactional, "ledgers": ledgers,
        }))?;
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
    println!("transactional histories, each against the clean history of its size in the same run:");
    println!(
        "  clean: a serializable store (8 processes, 8 keys at a time, 32 writes a key); +anomaly: the same with one"
    );
    println!("  injected; read-committed: a store whose transactions commit when they complete (64 clients, 4 keys)");
    println!("  (search: the search for an execution, where reads leave the order of writes open, and its steps)");
    println!("  model       | history        |    txns | check ms | x clean | verdict   | largest component | search               | found");
    for r in &transactional {
        println!(
            "  {:<11} | {:<14} | {:>7} | {:>8.0} | {:>7.2} | {:<9} | {:>17} | {:<20} | {}",
            r["model"].as_str().unwrap_or_default(),
            r["history"].as_str().unwrap_or_default(),
            r["transactions"],
            r["check_ms"].as_f64().unwrap_or_default(),
            r["over_clean"].as_f64().unwrap_or_default(),
            r["verdict"].as_str().unwrap_or_default(),
            r["largest_component"],
            r["search"].as_str().unwrap_or_default(),
            r["found"].as_str().unwrap_or_default(),
        );
    }
    println!("ledgers (five accounts) and logs (five clients appending), operations taking effect in turn:");
    println!("  baseline: parsing the same history");
    for r in &ledgers {
        println!(
            "  {:<6} {:>7} operations: check {:>6.0} ms, parse {:>6.0} ms (check/parse {:.2}), {}",
            r["model"].as_str().unwrap_or_default(),
            r["operations"],
            r["check_ms"].as_f64().unwrap_or_default(),
            r["parse_ms"].as_f64().unwrap_or_default(),
            r["check_over_parse"].as_f64().unwrap_or_default(),
            r["verdict"].as_str().unwrap_or_default(),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The transactional checker's rows: per model, a clean history of 10k and
/// 100k transactions, and at 100k the same with each kind of anomaly
/// injected and a read-committed store's history, each timed against the
/// clean one of its size.
fn transactional() -> Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    for model in [TxnModel::ListAppend, TxnModel::RwRegister] {
        for n in [10_000, 100_000] {
            let clean = txn_generate::history(model, Store::Serializable, Shape::new(n), 1);
            let mut histories = vec![("clean", clean.clone())];
            if n == 100_000 {
                histories.extend([
                    ("+G2-item", txn_generate::inject(model, clean.clone(), Injected::WriteSkew)),
                    ("+G-single", txn_generate::inject(model, clean.clone(), Injected::ReadSkew)),
                    ("+G1c", txn_generate::inject(model, clean, Injected::CircularFlow)),
                    // Sixty-four clients read-modify-writing four keys at a
                    // time: lost updates overlapping in time tie the
                    // list-append graph into one component of tens of
                    // thousands (registers, whose writes' order reads do
                    // not show, into small ones).
                    ("read-committed", txn_generate::history(model, Store::ReadCommitted, read_committed(n), 1)),
                ]);
            }
            let mut clean_ms = None;
            for (history, events) in histories {
                let t = Instant::now();
                let v = txn::check(model, &events, TxnOptions::new(Consistency::Serializable))?;
                let check_ms = t.elapsed().as_secs_f64() * 1e3;
                let clean_ms = *clean_ms.get_or_insert(check_ms);
                let found: Vec<String> = v.found.iter().map(|(a, n)| format!("{a} ({n})")).collect();
                let verdict = match v.verdict {
                    Validity::Valid => "valid",
                    Validity::Invalid => "invalid",
                    Validity::Undecided => "undecided",
                };
                let search = v
                    .searches
                    .first()
                    .map_or_else(|| "-".to_owned(), |s| format!("{:?} in {}", s.search.outcome, s.search.steps));
                rows.push(serde_json::json!({
                    "model": model.name(), "history": history, "transactions": n, "check_ms": check_ms,
                    "over_clean": check_ms / clean_ms.max(1e-6), "verdict": verdict,
                    "largest_component": v.components.largest, "found": found.join(", "),
                    "search": search,
                }));
            }
        }
    }
    Ok(rows)
}

/// The read-committed store's workload: many clients, few keys.
fn read_committed(n: usize) -> Shape {
    Shape { processes: 64, keys: 4, writes_per_key: 100, ..Shape::new(n) }
}

/// A generated history of so many operations, from a seed.
type Generator = fn(usize, u64) -> String;

/// The ledger, lease and log checkers on generated histories of 10k and 100k
/// operations.
fn ledgers() -> Result<Vec<serde_json::Value>> {
    let mut rows = Vec::new();
    let generated: [(ModelKind, Generator); 3] = [
        (ModelKind::Ledger, hvsim_checkers::generate::ledger),
        (ModelKind::Lease, hvsim_checkers::generate::lease),
        (ModelKind::Log, hvsim_checkers::generate::log),
    ];
    for (model, generate) in generated {
        for n in [10_000, 100_000] {
            let text = generate(n, 1);
            let t = Instant::now();
            let events = parse(&text)?;
            let parse_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let verdict = judge(model, &events, Options::default())?;
            let check_ms = t.elapsed().as_secs_f64() * 1e3;
            rows.push(serde_json::json!({
                "model": model.name(), "operations": n, "parse_ms": parse_ms, "check_ms": check_ms,
                "verdict": format!("{:?}", verdict.status).to_lowercase(),
                "check_over_parse": check_ms / parse_ms.max(1e-6),
            }));
        }
    }
    Ok(rows)
}
