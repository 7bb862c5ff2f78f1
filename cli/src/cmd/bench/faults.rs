//! `hvsim bench faults`: the wall time each node and clock fault costs, per
//! injection and per recovery, against the same run without it.
//!
//! Two Linux nodes each run a service (a shell that sleeps); the run's
//! command waits 4 s of virtual time. Each kind is drawn once, at 2.5 s,
//! in two runs: one where the fault lasts past the end (the injection
//! alone) and one where it ends at 2.8 s (injection and recovery). Every
//! run restores the same booted machine from the boot cache, so the
//! baseline (no fault) carries the same restore; medians of `--repeat`
//! runs, the three alternated so drift on a shared host hits all alike.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use hvsim_guest_image::host::Host;
use hvsim_guest_image::target::{StartOptions, System, Target};
use hvsim_vmm::{End, Stop, Vtime};

use super::median;
use super::print_report;

/// Each kind measured, and the extra keys of its rule.
const KINDS: [(&str, &str); 10] = [
    ("pause", ""),
    ("kill", ""),
    ("stop", ""),
    ("hang", ""),
    ("crash", ""),
    ("wipe", ""),
    ("bump", "offset = \"30s\"\n"),
    ("strobe", "offset = \"30s\"\nperiod = \"100ms\"\n"),
    ("drift", "rate = [50000, 50000]\n"),
    ("custom", "command = \"echo custom fault\"\n"),
];

/// One drawn fault of `kind` on node 1 at 2.5 s, lasting `duration`.
fn plan(kind: &str, extra: &str, duration: &str) -> String {
    let targets = if matches!(kind, "bump" | "strobe" | "drift") { "" } else { "targets = [[1]]\n" };
    format!(
        "[draw]\nbefore_setup = true\n\n[[draw.fault]]\nkind = \"{kind}\"\nevery = \"2500ms\"\nduration = \"{duration}\"\n{targets}{extra}"
    )
}

/// Wall seconds of one run with `plan`, and the drawn faults that struck.
fn run(host: &Host, plan: Option<String>) -> Result<(f64, u64)> {
    let target = Target::Linux {
        command: "mkfifo /tmp/wait && read -t 4 _ <> /tmp/wait; true".into(),
        mem: 128 << 20,
        files: Vec::new(),
        system: System {
            nodes: 2,
            disk_bytes: 16 << 20,
            fault_plan: plan,
            node_cmd: Some("exec sleep 1000".into()),
            ..System::default()
        },
        verbose_boot: false,
    };
    let started = Instant::now();
    let mut m = target.start(0, host, &StartOptions::default()).context("cannot start the guest")?.machine;
    match m.run_until(Vtime::MAX)? {
        Stop::Ended(End::Exit { status: 0 }) => {}
        other => bail!(
            "the benchmark guest stopped with {other:?}: {}",
            String::from_utf8_lossy(&m.console()).lines().rev().take(10).collect::<Vec<_>>().join(" | ")
        ),
    }
    Ok((started.elapsed().as_secs_f64(), m.state().devices.virtio.struck().len() as u64))
}

pub fn bench_faults(repeat: usize, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    hvsim_guest_image::note!(
        "hvsim: bench faults: {} kinds, {repeat} x 2 runs each and a baseline (a few minutes here)",
        KINDS.len()
    );
    let mut rows = Vec::new();
    let mut baseline = Vec::new();
    for (kind, extra) in KINDS {
        let (mut held, mut ended) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            baseline.push(run(&host, None)?.0);
            let (wall, struck) = run(&host, Some(plan(kind, extra, "100s")))?;
            if struck != 1 {
                bail!("{kind}: {struck} faults struck where one was drawn");
            }
            held.push(wall);
            ended.push(run(&host, Some(plan(kind, extra, "300ms")))?.0);
        }
        hvsim_guest_image::note!("hvsim: bench faults: {kind} measured");
        rows.push((kind, median(held), median(ended)));
    }
    let base = median(baseline);
    let report: Vec<serde_json::Value> = rows
        .iter()
        .map(|&(kind, held, ended)| {
            serde_json::json!({
                "kind": kind,
                "injection_ms": (held - base) * 1e3,
                "recovery_ms": (ended - held) * 1e3,
                "run_s": ended,
                "ratio_vs_baseline": ended / base,
            })
        })
        .collect();
    if json {
        print_report(serde_json::json!({
            "benchmark": "faults",
            "repeat": repeat,
            "baseline_run_s": base,
            "kinds": report,
            "nested_host": host.profile.nested_pvm,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("wall cost of one fault on a two-node Linux run of 4 virtual seconds (medians of {repeat}):");
    println!("  baseline run (no fault): {base:.3} s");
    println!("  kind    | injection ms | recovery ms | run s | run / baseline");
    for r in &report {
        println!(
            "  {:<7} | {:>12.1} | {:>11.1} | {:>5.2} | {:>8.3}",
            r["kind"].as_str().unwrap_or_default(),
            r["injection_ms"].as_f64().unwrap_or_default(),
            r["recovery_ms"].as_f64().unwrap_or_default(),
            r["run_s"].as_f64().unwrap_or_default(),
            r["ratio_vs_baseline"].as_f64().unwrap_or_default(),
        );
    }
    println!("  (a strobe flips every 100 ms while it lasts; a custom fault's command runs to its end either way)");
    if host.profile.nested_pvm {
        println!("  (host: nested kvm_pvm; the guest kernel runs emulated, so process work dominates)");
    }
    Ok(ExitCode::SUCCESS)
}
