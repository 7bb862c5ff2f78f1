//! `hvsim bench image`: importing a docker-archive and building its root
//! file system, against `tar -x` of the same layers in the same run; and
//! the time from start to the first line a service of the Redis compose
//! project prints.

use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use hvsim_guest_image::compose;
use hvsim_guest_image::host::Host;
use hvsim_guest_image::oci::store::Store;
use hvsim_guest_image::oci::{debian, load::load, rootfs};
use hvsim_guest_image::target::{default_mem, StartOptions, System, Target};
use hvsim_vmm::{Stop, Vtime};

use super::median;
use super::print_report;

pub fn bench_image(repeat: usize, compose_run: bool, json: bool) -> Result<ExitCode> {
    let built = debian::redis().build()?;
    let archive = &built.archive;
    let archive_bytes = std::fs::metadata(archive)?.len();
    let (mut imports, mut builds, mut untars) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeat {
        let dir = tempfile::tempdir()?;
        let store = Store::at(dir.path().join("store"))?;
        let t = Instant::now();
        let record = load(&store, archive, None)?.remove(0).record;
        imports.push(ms(t));
        let t = Instant::now();
        rootfs::build(&store, &record)?;
        builds.push(ms(t));
        // The baseline: the same layers, extracted by tar.
        let out = dir.path().join("untar");
        std::fs::create_dir(&out)?;
        let t = Instant::now();
        for layer in &record.layers {
            untar(&store.blob_path(&layer.blob), &out)?;
        }
        untars.push(ms(t));
    }
    let (import, build, untar_ms) = (median(imports), median(builds), median(untars));
    let ratio = (import + build) / untar_ms;
    let first_output = if compose_run { Some(first_service_output()?) } else { None };
    if json {
        print_report(serde_json::json!({
            "benchmark": "image", "repeat": repeat, "archive_bytes": archive_bytes,
            "import_ms": import, "rootfs_build_ms": build, "tar_x_ms": untar_ms,
            "import_and_build_vs_tar_x": ratio,
            "compose_first_service_output": first_output.map(|(wall, vt)| serde_json::json!({
                "wall_ms": wall, "vtime_ns": vt.0,
            })),
        }))?;
    } else {
        println!(
            "image {} ({:.1} MiB docker-archive), medians of {repeat}:",
            debian::redis().name,
            archive_bytes as f64 / (1 << 20) as f64
        );
        println!("  import (verify digests, store)   {import:>9.1} ms");
        println!("  root file system (layers, ext4)  {build:>9.1} ms");
        println!("  tar -x of the same layers        {untar_ms:>9.1} ms   (import + build = {ratio:.1}x tar -x)");
        match first_output {
            Some((wall, vt)) => println!(
                "  redis compose project: start to the first line a service prints: {wall:.0} ms of wall time ({vt} virtual)"
            ),
            None => println!("  (--compose also times the Redis compose project's start)"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn untar(layer: &Path, into: &Path) -> Result<()> {
    let status = Command::new("tar").arg("-xf").arg(layer).arg("-C").arg(into).status().context("running tar")?;
    // Device nodes need privileges tar may lack: what it extracted counts.
    ensure!(status.code().is_some(), "tar was killed");
    Ok(())
}

/// Starts the Redis compose project (from the boot cache, after a first
/// boot) and runs it until a service prints its first line.
fn first_service_output() -> Result<(f64, Vtime)> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/compose/redis/compose.yaml");
    let (project, _) = compose::load(&file, &[])?;
    let system = System::with_containers(project.containers(&Store::open()?)?, 64 << 20, None)?;
    let mem = default_mem(&system);
    let target = Target::Linux { command: "true".into(), mem, files: vec![], system, verbose_boot: false };
    let host = Host::open()?;
    // A first start boots and fills the cache; the measured one restores.
    drop(target.start(0, &host, &StartOptions::default())?);
    let t = Instant::now();
    let mut machine = target.start(0, &host, &StartOptions::default())?.machine;
    let step = Duration::from_millis(10);
    loop {
        let now = machine.now();
        let until = Vtime(now.0 + step.as_nanos() as u64);
        let stop = machine.run_until(until)?;
        let console = String::from_utf8_lossy(&machine.console()).into_owned();
        if console.lines().any(|l| l.starts_with("primary | ")) {
            return Ok((ms(t), machine.now()));
        }
        ensure!(matches!(stop, Stop::Deadline), "the run ended before any service printed: {console}");
        ensure!(machine.now().0 < 60_000_000_000, "no service printed in 60 s of virtual time");
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
