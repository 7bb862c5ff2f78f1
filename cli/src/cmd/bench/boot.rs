//! `hvsim bench boot`: a cold boot of a Linux machine to init's ready point
//! against restoring the same machine from a boot cache file, in one run,
//! with the restore's cost split by phase.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use hvsim_guest_image::host::Host;
use hvsim_guest_image::linux::{self, boot_cache::Shape};
use hvsim_guest_image::target::{linux_boot, System};
use hvsim_snapshot::file;
use hvsim_vmm::Machine;

use super::median;
use super::print_report;

pub fn bench_boot(mem: usize, nodes: u16, repeat: usize, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let system = System { nodes, disk_bytes: 64 << 20, ..System::default() };
    let settings = host.settings(true, None);
    let config = linux_boot(mem, &system, false, &host, settings.clone())?;
    hvsim_guest_image::note!("hvsim: bench boot: one cold boot (half a minute or more here), then {repeat} restores");

    let t = Instant::now();
    let mut booted = linux::boot_to_ready(&config)?;
    let cold_ms = ms(t);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("booted.snap");
    let t = Instant::now();
    let saved = file::save(&path, &mut booted, "linux", config.seed, &Default::default())?;
    let save_ms = ms(t);
    let ready_hash = (booted.trace_state().hash_hex(), booted.ram().hash());
    drop(booted);

    // What a warm start does, phase by phase.
    let (mut key, mut load, mut create, mut memory, mut total) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..repeat {
        let t0 = Instant::now();
        Shape::of(&config)?.key();
        let t1 = Instant::now();
        let loaded = file::load(&path)?;
        let t2 = Instant::now();
        let machine = Machine::restore(&loaded.header.machine, &settings).context("restoring the machine")?;
        let t3 = Instant::now();
        loaded.for_each_page(|i, bytes| machine.ram().restore_page(i, bytes))?;
        let t4 = Instant::now();
        anyhow::ensure!(
            (machine.trace_state().hash_hex(), machine.ram().hash()) == ready_hash,
            "the restored machine differs from the booted one"
        );
        key.push((t1 - t0).as_secs_f64() * 1e3);
        load.push((t2 - t1).as_secs_f64() * 1e3);
        create.push((t3 - t2).as_secs_f64() * 1e3);
        memory.push((t4 - t3).as_secs_f64() * 1e3);
        total.push((t4 - t0).as_secs_f64() * 1e3);
    }
    let (key, load, create, memory, warm) = (median(key), median(load), median(create), median(memory), median(total));
    let ratio = cold_ms / warm;
    if json {
        print_report(serde_json::json!({
            "benchmark": "boot", "mem_bytes": mem, "nodes": nodes, "repeat": repeat,
            "cold_boot_ms": cold_ms, "warm_restore_ms": warm, "cold_vs_warm": ratio,
            "save_ms": save_ms, "file_bytes": saved.file_bytes, "pages": saved.pages,
            "restore_split_ms": {
                "shape_key": key, "file_read_and_verify": load,
                "vm_and_device_state": create, "memory_decompress_and_copy": memory,
            },
        }))?;
    } else {
        println!("boot to init's ready point, {} MiB RAM, {nodes} nodes (medians of {repeat} restores):", mem >> 20);
        println!("  cold boot            {cold_ms:>10.1} ms");
        println!("  warm restore         {warm:>10.1} ms   ({ratio:.0}x faster)");
        println!("    shape key (hash kernel and initramfs, CPUID)   {key:>8.1} ms");
        println!("    file read, checksum, header                     {load:>8.1} ms");
        println!("    VM, vCPU and device state                       {create:>8.1} ms");
        println!("    memory: decompress and copy {:>6} pages         {memory:>8.1} ms", saved.pages);
        println!(
            "  saving the entry     {save_ms:>10.1} ms   ({:.1} MiB file)",
            saved.file_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
