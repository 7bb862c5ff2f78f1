//! `hvsim bench shards`: an exploration split in two one-worker shards run
//! side by side on this host against the same exploration run by one
//! process with two workers, in branches per second; and what merging the
//! shards costs, in time and bytes, per 1,000 branches and per bug.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use hvsim_explorer::merge;
use hvsim_explorer::report::RunDir;
use hvsim_explorer::shard::Shard;
use hvsim_explorer::{explore, Exploration, Target};

use super::print_report;
use super::workers::{branch_secs, config};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;

fn dir_bytes(dir: &Path) -> u64 {
    walk(dir).iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum()
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { walk(&e.path()) } else { vec![e.path()] }).collect()
}

pub fn bench_shards(branches: u64, linux: bool, json: bool) -> Result<ExitCode> {
    let dir = tempfile::tempdir()?;
    let (target, slice) = if linux {
        hvsim_guest_image::note!("hvsim: bench shards --linux: exploring a Linux program twice (minutes here)");
        (super::linux_vault(dir.path())?, Vtime(500_000_000))
    } else {
        (Target::Raw { guest: "demo".into() }, Vtime(100_000_000))
    };
    // Two one-worker shards at once, each its own exploration.
    let started = Instant::now();
    let shards: Vec<Exploration> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|i| {
                let config = config(&target, branches, slice, linux, 2, 1, Shard::new(i, 2).expect("a shard of 2"));
                s.spawn(move || -> Result<Exploration> {
                    // Each on a CPU of its own, as `explore --shard` pins.
                    let mut host = Host::open()?;
                    host.cpu_offset = i as usize;
                    Ok(explore(&config, &host, &mut ())?)
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("a shard's thread")).collect::<Result<_>>()
    })?;
    let sharded_wall = started.elapsed().as_secs_f64();
    let whole = explore(&config(&target, branches, slice, linux, 2, 2, Shard::default()), &Host::open()?, &mut ())?;

    // Merging: the shards as `hvsim explore` leaves them, read back,
    // merged, and written as `hvsim merge` writes it.
    let mut dirs = Vec::new();
    for (i, e) in shards.iter().enumerate() {
        let run = RunDir::create(&dir.path().join(format!("shard{i}")), "bench")?;
        run.write(e)?;
        dirs.push(run.path().to_owned());
    }
    let shard_bytes: u64 = dirs.iter().map(|d| dir_bytes(d)).sum();
    let merging = Instant::now();
    let inputs = dirs.iter().map(|d| merge::load(d)).collect::<hvsim_explorer::Result<Vec<_>>>()?;
    let merged = merge::merge(inputs)?;
    let out = dir.path().join("merged");
    RunDir::staged(&out, &out)?.write(&merged).context("writing the merge")?;
    let merge_secs = merging.elapsed().as_secs_f64();
    let merged_bytes = dir_bytes(&out);

    let sharded_branches: u64 = shards.iter().map(|e| e.branches).sum();
    // Both shards ran at once: their branch time is the longer one's.
    let sharded_rate = sharded_branches as f64 / shards.iter().map(branch_secs).fold(0.0, f64::max);
    let whole_rate = whole.branches as f64 / branch_secs(&whole);
    let per_k = |x: f64| x * 1000.0 / merged.branches.max(1) as f64;
    let bugs = merged.bugs.len();
    let per_bug = |x: f64| if bugs == 0 { None } else { Some(x / bugs as f64) };
    if json {
        print_report(serde_json::json!({
            "benchmark": "shards",
            "target": target.name(),
            "branches": branches,
            "cpus": hvsim_vmm::host::allowed_cpus().len(),
            "two_shards_branches_per_sec": sharded_rate,
            "two_shards_wall_s": sharded_wall,
            "two_workers_branches_per_sec": whole_rate,
            "ratio": sharded_rate / whole_rate,
            "shard_output_bytes": shard_bytes,
            "merge_s": merge_secs,
            "merged_bytes": merged_bytes,
            "merge_ms_per_1000_branches": per_k(merge_secs * 1000.0),
            "merged_bytes_per_1000_branches": per_k(merged_bytes as f64),
            "bugs": bugs,
            "merge_ms_per_bug": per_bug(merge_secs * 1000.0),
            "merged_bytes_per_bug": per_bug(merged_bytes as f64),
        }))?;
    } else {
        println!(
            "explore {} ({branches} branches, rounds of 2) as two 1-worker shards at once vs one 2-worker exploration:",
            target.name()
        );
        println!("  2 shards x 1 worker: {sharded_rate:>8.1} branches/s");
        println!("  1 x 2 workers:       {whole_rate:>8.1} branches/s");
        println!("  ratio: {:.2}x", sharded_rate / whole_rate);
        println!(
            "merge of the 2 shards ({} branches, {bugs} bug(s); shard outputs {} KiB): {:.0} ms, {} KiB written",
            merged.branches,
            shard_bytes >> 10,
            merge_secs * 1000.0,
            merged_bytes >> 10
        );
        println!(
            "  per 1,000 branches: {:.0} ms, {:.0} KiB",
            per_k(merge_secs * 1000.0),
            per_k(merged_bytes as f64) / 1024.0
        );
        match (per_bug(merge_secs * 1000.0), per_bug(merged_bytes as f64)) {
            (Some(ms), Some(b)) => println!("  per bug: {ms:.0} ms, {:.0} KiB", b / 1024.0),
            _ => println!("  per bug: no bug found"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
