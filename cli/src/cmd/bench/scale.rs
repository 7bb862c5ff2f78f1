//! `hvsim bench scale`: how a run's cost grows with its nodes. For each
//! node count, one cold boot of the Linux guest to init's ready point, the
//! root it makes (RAM the guest touched, the saved file), then a fixed
//! workload (every node pings the next, in a ring) timed in wall seconds
//! per virtual second, and the snapshot that workload leaves (pages it
//! dirtied). Each row is set against the one with half the nodes: the
//! growth factor per doubling (docs/scale.md, "Many nodes").

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use hvsim_guest_image::host::Host;
use hvsim_guest_image::target::{default_mem, StartOptions, System, Target};
use hvsim_snapshot::{file, SnapshotTree};
use hvsim_vmm::{End, Stop, Vtime};
use serde::Serialize;

use super::print_report;

/// The workload: every node pings the next once, in a ring, between two
/// marks on the SDK channel; a ping without a reply is said on the console
/// and fails the run.
fn ring(nodes: u16) -> String {
    format!(
        r#"echo "bench start" > $HVSIM_SDK_OUTPUT
lost=0
i=0
while [ $i -lt {nodes} ]; do
  next=$(( (i + 1) % {nodes} + 1 ))
  hvsim-node $i ping -c 1 -W 5 10.0.0.$next > /dev/null || {{ echo "node $i: no reply from 10.0.0.$next"; lost=1; }}
  i=$((i + 1))
done
echo "bench end" > $HVSIM_SDK_OUTPUT
exit $lost
"#
    )
}

/// A measurement's name and how to read it from a row.
type Metric = (&'static str, fn(&Row) -> f64);

/// One node count's measurements.
#[derive(Clone, Debug, Serialize)]
struct Row {
    nodes: u16,
    mem_bytes: usize,
    /// Cold boot to init's ready point (every node set up).
    boot_ms: u64,
    /// RAM the guest had touched when ready (the root's pages).
    touched_bytes: u64,
    /// The root saved to a file (compressed).
    root_file_bytes: u64,
    /// What the ring's snapshot adds to the tree (pages it dirtied).
    snapshot_bytes: usize,
    /// The ring's wall time per second of virtual time.
    wall_per_virtual_s: f64,
    ring_wall_s: f64,
    ring_virtual_ms: f64,
}

pub fn bench_scale(counts: &[u16], json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let dir = tempfile::tempdir()?;
    let mut rows: Vec<Row> = Vec::new();
    for &nodes in counts {
        hvsim_guest_image::note!("hvsim: bench scale: {nodes} nodes: a cold boot, then a ring of {nodes} pings");
        let row = measure(nodes, &host, dir.path()).with_context(|| format!("{nodes} nodes"))?;
        // Each row as it lands: a larger count that fails (or is stopped)
        // does not take the smaller ones' figures with it.
        hvsim_guest_image::note!(
            "hvsim: bench scale: {nodes} nodes: boot {:.1} s, touched {:.1} MiB, ring {:.1} s",
            row.boot_ms as f64 / 1e3,
            row.touched_bytes as f64 / f64::from(1 << 20),
            row.ring_wall_s
        );
        rows.push(row);
    }
    // Each row against the one with half its nodes, where there is one.
    let growth = |row: &Row, f: fn(&Row) -> f64| -> Option<f64> {
        let half = rows.iter().find(|r| u32::from(r.nodes) * 2 == u32::from(row.nodes))?;
        Some(f(row) / f(half).max(1e-9))
    };
    let metrics: [Metric; 5] = [
        ("boot", |r| r.boot_ms as f64),
        ("touched", |r| r.touched_bytes as f64),
        ("root_file", |r| r.root_file_bytes as f64),
        ("snapshot", |r| r.snapshot_bytes as f64),
        ("wall_per_virtual_s", |r| r.wall_per_virtual_s),
    ];
    if json {
        let doubling: Vec<_> = rows
            .iter()
            .map(|r| {
                let g: serde_json::Map<_, _> =
                    metrics.iter().filter_map(|(name, f)| Some(((*name).to_owned(), growth(r, *f)?.into()))).collect();
                serde_json::json!({ "nodes": r.nodes, "growth": g })
            })
            .collect();
        print_report(serde_json::json!({
            "benchmark": "scale",
            "rows": rows,
            "growth_per_doubling": doubling,
            "nested_host": host.profile.nested_pvm,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mib = |b: f64| b / f64::from(1 << 20);
    println!("a Linux guest of N nodes: cold boot to ready, its root, then every node pinging the next");
    println!(
        "  nodes |  RAM MiB | boot s | touched MiB | root file MiB | ring snapshot MiB | wall s per virtual s | ring wall s"
    );
    for r in &rows {
        println!(
            "  {:>5} | {:>8.0} | {:>6.1} | {:>11.1} | {:>13.1} | {:>17.2} | {:>20.1} | {:>11.1}",
            r.nodes,
            mib(r.mem_bytes as f64),
            r.boot_ms as f64 / 1e3,
            mib(r.touched_bytes as f64),
            mib(r.root_file_bytes as f64),
            mib(r.snapshot_bytes as f64),
            r.wall_per_virtual_s,
            r.ring_wall_s
        );
    }
    println!("growth per doubling of the nodes (each row against the one with half its nodes):");
    println!("  nodes | boot | touched | root file | snapshot | wall per virtual s");
    for r in &rows {
        let g: Vec<String> =
            metrics.iter().map(|(_, f)| growth(r, *f).map_or_else(|| "-".to_owned(), |g| format!("{g:.2}x"))).collect();
        if g.iter().all(|s| s == "-") {
            continue;
        }
        println!("  {:>5} | {:>4} | {:>7} | {:>9} | {:>8} | {:>18}", r.nodes, g[0], g[1], g[2], g[3], g[4]);
    }
    if host.profile.nested_pvm {
        println!("  (host: nested kvm_pvm; the guest kernel runs emulated, so absolute times are slow)");
    }
    Ok(ExitCode::SUCCESS)
}

fn measure(nodes: u16, host: &Host, dir: &std::path::Path) -> Result<Row> {
    let system = System { nodes, disk_bytes: 16 << 20, ..System::default() };
    let mem = default_mem(&system);
    let target = Target::Linux { command: ring(nodes), mem, files: Vec::new(), system, verbose_boot: false };
    let launch = target.start(0, host, &StartOptions { cold_boot: true, ..StartOptions::default() })?;
    let mut m = launch.machine;
    let root = dir.join(format!("root-{nodes}.snap"));
    let saved = file::save(&root, &mut m, "scale", 0, &Default::default())?;
    std::fs::remove_file(&root)?;
    let (mut tree, mut cursor) = SnapshotTree::new(&mut m)?;
    let before = tree.memory_bytes();
    m.set_stop_on_message(true);
    let mut start: Option<(Instant, Vtime)> = None;
    let mut end: Option<(Instant, Vtime)> = None;
    loop {
        match m.run_until(Vtime::MAX)? {
            Stop::Message => {
                for msg in m.take_messages() {
                    match String::from_utf8_lossy(&msg.bytes).trim() {
                        "bench start" => start = Some((Instant::now(), msg.vtime)),
                        "bench end" => end = Some((Instant::now(), msg.vtime)),
                        _ => {}
                    }
                }
            }
            Stop::Ended(End::Exit { status: 0 }) => break,
            Stop::Ended(e) => bail!(
                "the ring ended with {}: {}",
                e.detail(),
                String::from_utf8_lossy(&m.console_last_lines(10)).lines().collect::<Vec<_>>().join(" | ")
            ),
            Stop::Deadline => unreachable!("no deadline was set"),
        }
    }
    let ((t0, v0), (t1, v1)) = (start.context("no start mark")?, end.context("no end mark")?);
    tree.snapshot(&mut cursor, &mut m)?;
    let wall = (t1 - t0).as_secs_f64();
    let virtual_s = (v1.nanos() - v0.nanos()) as f64 / 1e9;
    Ok(Row {
        nodes,
        mem_bytes: mem,
        boot_ms: launch.boot.wall_ms,
        touched_bytes: saved.pages as u64 * hvsim_vmm::memory::PAGE_SIZE as u64,
        root_file_bytes: saved.file_bytes as u64,
        snapshot_bytes: tree.memory_bytes() - before,
        wall_per_virtual_s: wall / virtual_s.max(1e-9),
        ring_wall_s: wall,
        ring_virtual_ms: virtual_s * 1e3,
    })
}
