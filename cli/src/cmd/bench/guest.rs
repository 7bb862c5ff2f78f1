//! `hvsim bench guest`: what the guest pays for the operations real programs
//! are made of, against the same operations on the host, in one run. The
//! workloads are `/init bench` (guest-init/src/bench.rs): the same binary
//! runs inside a two-node Linux guest and directly on the host. In the
//! guest, hvsim takes wall time at the marks the tool sends around each
//! loop; on the host the tool times itself. Last, Debian's `redis-benchmark`
//! against Debian's `redis-server`: in the guest from hvsim's Debian Redis
//! image (`hvsim image debian --redis`, built if missing), on the host from
//! the same packages (installed if missing).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use hvsim_guest_image::hash::file_hash;
use hvsim_guest_image::host::Host;
use hvsim_guest_image::linux::{initramfs, packages, GuestFile};
use hvsim_guest_image::oci::debian;
use hvsim_guest_image::oci::load::load;
use hvsim_guest_image::oci::store::Store;
use hvsim_guest_image::target::{default_mem, StartOptions, System, Target};
use hvsim_vmm::{End, Machine, Stop, Vtime};

use super::print_report;
use crate::linux_args::image_system;

/// A dynamically linked program of the host, copied into the guest with
/// its loader and libraries at the same paths.
const DYNAMIC_PROGRAM: &str = "/usr/bin/true";
const SWITCH_PORT: u16 = 7072;

/// One measured operation.
struct Op {
    name: &'static str,
    about: &'static str,
    /// `/init bench` arguments in the guest and on the host.
    guest: Vec<String>,
    host: Vec<String>,
    /// Runs in the guest as `hvsim-node 0 ...` (else from init's shell).
    on_node: bool,
}

fn ops(scale: u64) -> Vec<Op> {
    let args = |op: &str, n: u64, extra: &[&str]| -> Vec<String> {
        let mut v = vec![op.to_owned(), n.to_string()];
        v.extend(extra.iter().map(|s| (*s).to_owned()));
        v
    };
    let switch_addr = format!("10.0.0.2:{SWITCH_PORT}");
    vec![
        Op {
            name: "syscall",
            about: "system call (getppid)",
            guest: args("syscall", 200 * scale, &[]),
            host: args("syscall", 100_000, &[]),
            on_node: false,
        },
        Op {
            name: "clock",
            about: "clock_gettime(CLOCK_MONOTONIC)",
            guest: args("clock", 200 * scale, &[]),
            host: args("clock", 1_000_000, &[]),
            on_node: false,
        },
        Op {
            name: "fault",
            about: "page fault, fresh anonymous page",
            guest: args("fault", 100 * scale, &[]),
            host: args("fault", 20_000, &[]),
            on_node: false,
        },
        Op {
            name: "fork",
            about: "fork + exit + wait",
            guest: args("fork", 5 * scale, &[]),
            host: args("fork", 500, &[]),
            on_node: false,
        },
        Op {
            name: "exec",
            about: "fork + exec dynamic program + wait",
            guest: args("exec", 2 * scale, &[DYNAMIC_PROGRAM]),
            host: args("exec", 200, &[DYNAMIC_PROGRAM]),
            on_node: false,
        },
        Op {
            name: "tcp-loopback",
            about: "TCP round trip, one node (loopback)",
            guest: args("tcp", 20 * scale, &[]),
            host: args("tcp", 5_000, &[]),
            on_node: true,
        },
        Op {
            name: "tcp-switch",
            about: "TCP round trip, two nodes (switch)",
            guest: args("tcp", 20 * scale, &[&switch_addr]),
            // The host has no switch: its baseline is loopback.
            host: args("tcp", 5_000, &[]),
            on_node: true,
        },
    ]
}

/// The guest's script: each op in turn; the switch op's server runs on node 1.
fn script(ops: &[Op]) -> String {
    let mut s = String::from("set -e\n");
    for op in ops {
        if op.name == "tcp-switch" {
            s.push_str(&format!("hvsim-node 1 /init bench tcp-serve {SWITCH_PORT} &\n"));
        }
        let prefix = if op.on_node { "hvsim-node 0 " } else { "" };
        s.push_str(&format!("{prefix}/init bench {}\n", op.guest.join(" ")));
    }
    s.push_str("wait\n");
    s
}

/// The host files `DYNAMIC_PROGRAM` needs, each at its own path in the guest.
fn dynamic_program_files() -> Result<Vec<(GuestFile, String)>> {
    let out = Command::new("ldd").arg(DYNAMIC_PROGRAM).output().context("cannot run ldd")?;
    if !out.status.success() {
        bail!("ldd {DYNAMIC_PROGRAM} failed: is it a dynamically linked program?");
    }
    let mut paths = vec![DYNAMIC_PROGRAM.to_owned()];
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
        let path = line.split("=>").last().unwrap_or("").split_whitespace().next().unwrap_or("");
        if path.starts_with('/') {
            paths.push(path.to_owned());
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let host = PathBuf::from(&p);
            let hash = file_hash(&host)?;
            Ok((GuestFile { host, guest: p }, hash))
        })
        .collect()
}

/// Wall and virtual nanoseconds between each op's marks, in order.
fn run_guest(ops: &[Op], host: &Host) -> Result<Vec<(f64, u64)>> {
    let target = Target::Linux {
        command: script(ops),
        mem: 128 << 20,
        files: dynamic_program_files()?,
        system: System { nodes: 2, disk_bytes: 16 << 20, ..System::default() },
        verbose_boot: false,
    };
    let m = target.start(0, host, &StartOptions::default()).context("cannot start the guest")?.machine;
    let abouts: Vec<&str> = ops.iter().map(|op| op.about).collect();
    marked_spans(m, &abouts)
}

/// Runs `m` to its end and returns, per pair of `bench start`/`bench end`
/// marks the guest sends, the wall and virtual nanoseconds between them.
fn marked_spans(mut m: Machine, abouts: &[&str]) -> Result<Vec<(f64, u64)>> {
    m.set_stop_on_message(true);
    let mut marks: Vec<(String, Instant, u64)> = Vec::new();
    loop {
        match m.run_until(Vtime::MAX)? {
            Stop::Message => {
                for msg in m.take_messages() {
                    let text = String::from_utf8_lossy(&msg.bytes).trim().to_owned();
                    if let Some(rest) = text.strip_prefix("bench ") {
                        marks.push((rest.to_owned(), Instant::now(), msg.vtime.nanos()));
                        let done = marks.len() / 2;
                        if marks.len().is_multiple_of(2) && done <= abouts.len() {
                            hvsim_guest_image::note!("hvsim: bench guest: {} done in the guest", abouts[done - 1]);
                        }
                    }
                }
            }
            Stop::Ended(End::Exit { status: 0 }) => break,
            Stop::Ended(end) => bail!(
                "the benchmark guest ended with {}: {}",
                end.detail(),
                String::from_utf8_lossy(&m.console()).lines().rev().take(10).collect::<Vec<_>>().join(" | ")
            ),
            Stop::Deadline => unreachable!("no deadline was set"),
        }
    }
    if marks.len() != 2 * abouts.len() {
        bail!("the guest sent {} marks, expected {}: {marks:?}", marks.len(), 2 * abouts.len());
    }
    Ok(marks.chunks(2).map(|pair| ((pair[1].1 - pair[0].1).as_secs_f64() * 1e9, pair[1].2 - pair[0].2)).collect())
}

const REDIS_ABOUT: &str = "Redis SET/GET round trip (redis-benchmark)";

/// Requests of the short `redis-benchmark` run whose time is taken out of
/// the long one's: starting the program and connecting cost more than
/// hundreds of requests where the guest kernel is emulated.
const REDIS_SHORT: u64 = 2;

/// Two `redis-benchmark -c 1 -t set,get` runs, of `REDIS_SHORT` and of
/// `requests` requests (half SET, half GET), each between two marks,
/// against a `redis-server` started just before, without persistence.
fn redis_script(requests: u64, port: u16, mark: &str) -> String {
    let bench =
        |n: u64| format!("{mark}; redis-benchmark -p {port} -c 1 -n {} -t set,get -q > /dev/null; {mark}", n / 2);
    format!(
        "redis-server --port {port} --save '' --appendonly no --daemonize yes > /dev/null; \
         until redis-cli -p {port} ping > /dev/null 2>&1; do sleep 0.05; done; \
         {}; {}; redis-cli -p {port} shutdown nosave > /dev/null 2>&1; true",
        bench(REDIS_SHORT),
        bench(requests)
    )
}

/// Per request: (long run - short run) / (difference in requests).
fn marginal(short: f64, long: f64, requests: u64) -> f64 {
    (long - short) / (requests - REDIS_SHORT) as f64
}

/// Wall nanoseconds per Redis request in the guest: the Redis image's
/// container, marks on the SDK channel.
fn redis_guest(requests: u64, host: &Host) -> Result<(f64, f64)> {
    let image = debian::redis();
    let store = Store::open()?;
    if store.resolve(&image.name).is_err() {
        hvsim_guest_image::note!("hvsim: bench guest: building the Debian Redis image (once)");
        load(&store, &image.build()?.archive, None)?;
    }
    let mark = "echo bench mark > $HVSIM_SDK_OUTPUT";
    let command = vec!["sh".to_owned(), "-c".to_owned(), redis_script(requests, 6379, mark)];
    let system = image_system(&image.name, Some(command), 64 << 20, None)?;
    let mem = default_mem(&system);
    let target = Target::Linux { command: "true".into(), mem, files: Vec::new(), system, verbose_boot: false };
    let m = target.start(0, host, &StartOptions::default()).context("cannot start the Redis guest")?.machine;
    let spans = marked_spans(m, &["a short redis-benchmark", REDIS_ABOUT])?;
    let ((w0, v0), (w1, v1)) = (spans[0], spans[1]);
    Ok((marginal(w0, w1, requests), marginal(v0 as f64, v1 as f64, requests)))
}

/// Wall nanoseconds per Redis request on the host.
fn redis_host(requests: u64) -> Result<f64> {
    packages::ensure(&["redis-server", "redis-tools"])?;
    let out = Command::new("sh")
        .arg("-c")
        .arg(redis_script(requests, 16_379, "date +%s%N"))
        .output()
        .context("cannot run redis on the host")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let stamps: Vec<f64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
    match stamps.as_slice() {
        [a, b, c, d] => Ok(marginal(b - a, d - c, requests)),
        _ => bail!("redis-benchmark on the host failed: {text} {}", String::from_utf8_lossy(&out.stderr)),
    }
}

/// Nanoseconds per op on the host, by the tool's own clock.
fn run_host(ops: &[Op]) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let tool = dir.path().join("hvsim-init");
    std::fs::write(&tool, initramfs::INIT)?;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))?;
    ops.iter()
        .map(|op| {
            let out = Command::new(&tool).arg("bench").args(&op.host).output()?;
            let text = String::from_utf8_lossy(&out.stdout);
            let words: Vec<&str> = text.split_whitespace().collect();
            match words.as_slice() {
                ["bench", _, n, ns] if out.status.success() => Ok(ns.parse::<f64>()? / n.parse::<f64>()?),
                _ => bail!("bench {} on the host failed: {text} {}", op.name, String::from_utf8_lossy(&out.stderr)),
            }
        })
        .collect()
}

pub fn bench_guest(scale: u64, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let ops = ops(scale.max(1));
    hvsim_guest_image::note!(
        "hvsim: bench guest: the workloads on the host, then in a two-node Linux guest (minutes here)"
    );
    let host_ns = run_host(&ops)?;
    let guest = run_guest(&ops, &host)?;
    let redis_requests = 40 * scale.max(1) + REDIS_SHORT;
    let redis_host_ns = redis_host(redis_requests)?;
    let (redis_guest_ns, redis_virtual_ns) = redis_guest(redis_requests, &host)?;
    let mut rows = BTreeMap::new();
    let mut table = Vec::new();
    for ((op, host_ns), (wall_ns, vtime_ns)) in ops.iter().zip(&host_ns).zip(&guest) {
        let n: f64 = op.guest[1].parse()?;
        let (guest_ns, virtual_ns) = (wall_ns / n, *vtime_ns as f64 / n);
        rows.insert(
            op.name,
            serde_json::json!({
                "about": op.about, "count": n, "host_ns": host_ns, "guest_wall_ns": guest_ns,
                "guest_virtual_ns": virtual_ns, "ratio_guest_vs_host": guest_ns / host_ns.max(1e-9),
            }),
        );
        table.push((op.about, *host_ns, guest_ns, virtual_ns));
    }
    rows.insert(
        "redis",
        serde_json::json!({
            "about": REDIS_ABOUT, "count": redis_requests, "host_ns": redis_host_ns,
            "guest_wall_ns": redis_guest_ns, "guest_virtual_ns": redis_virtual_ns,
            "ratio_guest_vs_host": redis_guest_ns / redis_host_ns.max(1e-9),
        }),
    );
    table.push((REDIS_ABOUT, redis_host_ns, redis_guest_ns, redis_virtual_ns));
    if json {
        let report = serde_json::json!({
            "benchmark": "guest", "ops": rows, "nested_host": host.profile.nested_pvm,
        });
        print_report(report)?;
    } else {
        println!("The same operations in the guest (wall time) and on the host, per operation:");
        println!(
            "  operation                                  |    host µs |   guest µs | guest/host | guest virtual µs"
        );
        for (about, h, g, v) in table {
            println!("  {about:<42} | {:>10.2} | {:>10.1} | {:>9.0}x | {:>10.2}", h / 1e3, g / 1e3, g / h, v / 1e3);
        }
        if host.profile.nested_pvm {
            println!("  (nested host: guest kernel code is emulated; see docs/nested-host.md)");
        }
    }
    Ok(ExitCode::SUCCESS)
}
