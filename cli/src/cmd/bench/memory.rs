//! `hvsim bench memory`: the explorer's peak resident memory against its
//! `--snapshot-memory`, on a program that sends many SDK messages and logs
//! while an exploration snapshots it every 10 ms of virtual time
//! (guest-sdk/c/chatty.c, built with gcc), measured against one run of the
//! same program. Each measurement is a child `hvsim` process, so that its
//! peak resident set is its own.

use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::print_report;

/// One child's JSON output and its peak resident set, in bytes.
fn measured(args: &[&str]) -> Result<(Value, u64)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start hvsim")?;
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut out).map(|_| out)
    });
    let mut status = 0;
    // SAFETY: wait4 fills the rusage it is given, for this child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) } < 0 {
        bail!("waiting for hvsim {}: {}", args[0], std::io::Error::last_os_error());
    }
    let out = reader.join().expect("the reader does not panic")?;
    // 0 (no bug) or 8 (a bug): both measured a whole exploration.
    if !libc::WIFEXITED(status) || ![0, 8].contains(&libc::WEXITSTATUS(status)) {
        bail!("hvsim {} failed (wait status {status:#x})", args.join(" "));
    }
    let json = serde_json::from_slice(&out).with_context(|| format!("hvsim {} printed no JSON", args[0]))?;
    Ok((json, usage.ru_maxrss as u64 * 1024))
}

const MIB: f64 = (1 << 20) as f64;

pub fn bench_memory(budgets: &[String], branches: u64, json: bool) -> Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let binary = super::c_sdk_program(dir.path(), "chatty", include_str!("../../../../guest-sdk/c/chatty.c"))?;
    let program = format!("{}:/bin/chatty", binary.display());
    let target = ["--linux", "--guest-file", &program, "--init-cmd", "/bin/chatty"];
    hvsim_guest_image::note!(
        "hvsim: bench memory: one run, then {} explorations of {branches} branches (minutes each here)",
        budgets.len()
    );
    let (run, one_run) = measured(&[&["run", "--json"][..], &target].concat())?;
    let messages: usize =
        run["messages"].as_array().map_or(0, |m| m.iter().filter_map(Value::as_str).map(str::len).sum());
    let mut rows = Vec::new();
    for budget in budgets {
        let out = dir.path().join(format!("out-{budget}"));
        let branches = branches.to_string();
        let args = [
            "explore",
            "--json",
            "--out",
            out.to_str().context("a temporary path in UTF-8")?,
            "--branches",
            &branches,
            "--snapshot-every",
            "10ms",
            "--snapshot-memory",
            budget,
            "--reexecute",
            "0",
            "--likelihood-runs",
            "0",
        ];
        let (report, resident) = measured(&[&args[..], &target].concat())?;
        let tree = &report["summary"]["tree"];
        let field = |k: &str| tree[k].as_u64().unwrap_or(0);
        rows.push(serde_json::json!({
            "snapshot_memory": budget,
            "budget_bytes": field("budget_bytes"),
            "snapshots": report["summary"]["snapshots"],
            "evicted": field("evicted"),
            "tree_peak_bytes": field("peak_bytes"),
            "tree_state_bytes": field("state_bytes"),
            "peak_resident_bytes": resident,
            // 1.0: everything the exploration holds beyond one run is the
            // tree it counts.
            "resident_beyond_run_per_tree_peak": resident.saturating_sub(one_run) as f64 / field("peak_bytes").max(1) as f64,
        }));
    }
    if json {
        print_report(serde_json::json!({
            "benchmark": "memory",
            "program": "guest-sdk/c/chatty.c",
            "message_bytes": messages,
            "branches": branches,
            "one_run_peak_resident_bytes": one_run,
            "explorations": rows,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "peak resident memory exploring guest-sdk/c/chatty.c ({:.1} MiB of SDK messages), {branches} branches, a snapshot every 10 ms:",
        messages as f64 / MIB
    );
    println!("  one run of it: {:.0} MiB", one_run as f64 / MIB);
    println!(
        "  {:>16} {:>10} {:>8} {:>14} {:>16} {:>14} {:>22}",
        "--snapshot-memory",
        "snapshots",
        "evicted",
        "tree peak MiB",
        "of it state MiB",
        "resident MiB",
        "(resident-run)/tree"
    );
    for r in &rows {
        let mib = |k: &str| r[k].as_u64().unwrap_or(0) as f64 / MIB;
        println!(
            "  {:>16} {:>10} {:>8} {:>14.0} {:>16.1} {:>14.0} {:>22.2}",
            r["snapshot_memory"].as_str().unwrap_or("?"),
            r["snapshots"].as_u64().unwrap_or(0),
            r["evicted"].as_u64().unwrap_or(0),
            mib("tree_peak_bytes"),
            mib("tree_state_bytes"),
            mib("peak_resident_bytes"),
            r["resident_beyond_run_per_tree_peak"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(ExitCode::SUCCESS)
}
