//! Virtio network and disks with fault injection (issue: "Virtio network
//! and disks with deterministic fault injection, and proof that each fault
//! landed"). Every test runs the Linux guest with two nodes and the same
//! disks, one machine shape: booted once (~30 s on the nested development
//! host), restored from the boot cache for every other run. The workloads
//! are busybox `nc`/`dd` and a small C program, `guest/faultload.c`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

/// A partition between the two nodes from 3 s to 7 s, and both nodes
/// crashing at 11 s and restarting at 12 s: node 0 loses its unflushed
/// writes, node 1's are torn.
const PLAN: &str = r#"
[[network.partition]]
start = "3s"
heal = "7s"
groups = [[0], [1]]

[[crash]]
node = 0
at = "11s"
restart = "1s"

[[crash]]
node = 1
at = "11s"
restart = "1s"
torn = true
"#;

/// Shell functions for the scripts, which fork nothing: a fork costs about
/// 0.4 s of wall time where the guest kernel is emulated. `stamp` sets `$up`
/// to the virtual uptime; `pause S` waits S seconds on a FIFO nobody writes
/// (only where no child of the shell ends meanwhile: busybox restarts the
/// wait after a signal). A script starts with `LIB`; node shells then
/// source /tmp/lib.sh.
const LIB: &str = r#"printf '%s\n' 'stamp() { read up _ < /proc/uptime; }' 'pause() { read -t "$1" _ <> /tmp/pause; }' > /tmp/lib.sh
mkfifo /tmp/pause
. /tmp/lib.sh
"#;

/// Each node writes a flushed sector of 'F's at sector 0, then 8 unflushed
/// sectors of 'U's in one request at sectors 8-15. Node 1 then sends a
/// numbered line every second to node 0 over TCP; both sides log virtual
/// times (the crash at 11 s ends node 0's listener). After the restart,
/// each node reads its first 17 sectors back, bypassing the page cache, and
/// prints the first 4 bytes of each ('.' for zero). Sector 16 comes from the
/// base image, all 'B's.
const SCRIPT: &str = r#"
for n in 0 1; do
  hvsim-node $n sh -c 'head -c 512 /dev/zero | tr "\0" F | dd of=$HVSIM_DISK bs=512 count=1 oflag=direct conv=fsync 2>/dev/null
                       head -c 4096 /dev/zero | tr "\0" U | dd of=$HVSIM_DISK bs=4096 seek=1 count=1 oflag=direct 2>/dev/null'
done
hvsim-node 0 sh -c '. /tmp/lib.sh; pause 15 | nc -l -p 5000 | while read l; do stamp; echo "got $l at $up"; done' &
pause 0.1
hvsim-node 1 sh -c '. /tmp/lib.sh; for i in 1 2 3 4 5 6 7 8 9 10; do echo $i; stamp; echo "sent $i at $up" >&2; pause 1; done | nc 10.0.0.1 5000'
wait
pause 1.5
for n in 0 1; do
  echo "disk$n $(hvsim-node $n sh -c 'dd if=$HVSIM_DISK bs=512 count=17 iflag=direct 2>/dev/null' | tr "\0" . | fold -w 512 | cut -c1-4 | tr "\n" " ")"
done
"#;

fn lines(v: &Value) -> Vec<String> {
    v["console"].as_str().expect("console").lines().map(|l| l.trim_end_matches('\r').to_owned()).collect()
}

/// `(number, virtual seconds)` of every "WHAT N at T" line.
fn events(v: &Value, what: &str) -> Vec<(u32, f64)> {
    lines(v)
        .iter()
        .filter_map(|l| {
            let rest = l.strip_prefix(what)?.strip_prefix(' ')?;
            let (n, t) = rest.split_once(" at ")?;
            Some((n.parse().ok()?, t.trim().parse().ok()?))
        })
        .collect()
}

fn fault<'a>(v: &'a Value, kind: &str) -> &'a Value {
    v["faults"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {}", v["faults"]))
}

fn device<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["devices"].as_array().unwrap().iter().find(|d| d["name"] == name).unwrap_or_else(|| panic!("no device {name}"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn nodes_run(plan: Option<&Path>, extra: &[&str], script: &str) -> Value {
    let mut args = vec!["--linux", "--nodes", "2", "--seed", "5", "--init-cmd", script];
    if let Some(p) = plan {
        args.extend(["--fault-plan", p.to_str().unwrap()]);
    }
    args.extend_from_slice(extra);
    let (v, code) = run_json(&args);
    assert_eq!((code, v["end"].as_str()), (0, Some("exit")), "{}", v["console"]);
    for d in v["devices"].as_array().unwrap() {
        assert!(d["broken"].is_null(), "{d}");
    }
    v
}

/// What two runs that end the same agree on.
const FIELDS: [&str; 8] =
    ["trace_hash", "memory_hash", "console", "exits", "vtime_ns", "faults", "drawn_faults", "devices"];

/// [`nodes_run`], saving a snapshot at `at` (in the middle of a fault,
/// which `what` names) that a new process then restores: both must end the
/// same in every field of [`FIELDS`], so the fault's state is all in the
/// snapshot. Returns the run.
fn restored_the_same(plan: &Path, extra: &[&str], script: &str, at: &str, what: &str) -> Value {
    let snap = plan.with_extension("snap");
    let v = nodes_run(
        Some(plan),
        &[extra, &["--snapshot-at", at, "--save-snapshot", snap.to_str().unwrap()]].concat(),
        script,
    );
    let restored = replay_snapshot(&snap, &[]);
    for field in FIELDS {
        assert_eq!(v[field], restored[field], "{field} differs after restoring the snapshot taken {what}");
    }
    v
}

/// [`restored_the_same`], and a second run of the same seed without the
/// snapshot, which must end the same too: the whole run, faults and all,
/// is a function of the seed, and saving a snapshot changes nothing. Each
/// fault kind's test restores; this one, with partitions and crashes of
/// both kinds, runs twice as well.
fn same_twice_and_restored(plan: &Path, extra: &[&str], script: &str, at: &str, what: &str) -> Value {
    let v = restored_the_same(plan, extra, script, at, what);
    let again = nodes_run(Some(plan), extra, script);
    for field in FIELDS {
        assert_eq!(v[field], again[field], "{field} differs between two runs of seed 5");
    }
    v
}

#[test]
fn tcp_stalls_and_heals_with_a_partition_and_crashes_lose_unflushed_writes() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let base = dir.path().join("base.img");
    std::fs::write(&base, [vec![0u8; 16 * 512], vec![b'B'; 512]].concat()).unwrap();
    let image = ["--disk-image", base.to_str().unwrap()];
    // The snapshot is taken in the middle of the partition, with frames
    // being retransmitted and a crash behind it.
    let a = same_twice_and_restored(&plan, &image, &format!("{LIB}{SCRIPT}"), "5s", "in the partition");

    // TCP: lines sent before the partition arrive at once; none arrives
    // while it lasts; lines sent during it arrive after it heals; all arrive.
    let (sent, got) = (events(&a, "sent"), events(&a, "got"));
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>(), "{}", a["console"]);
    assert!(got.iter().all(|&(_, t)| !(3.0..7.0).contains(&t)), "a line arrived during the partition: {got:?}");
    let during: Vec<u32> = sent.iter().filter(|s| (3.0..7.0).contains(&s.1)).map(|s| s.0).collect();
    assert!(during.len() >= 3, "the partition caught too little traffic: {sent:?}");
    for &(n, t) in &sent {
        let arrived = got[n as usize - 1].1;
        if t < 2.9 {
            assert!(arrived - t < 0.05, "line {n} sent at {t} arrived late, at {arrived}");
        } else if during.contains(&n) {
            assert!(arrived >= 7.0, "line {n} sent during the partition arrived at {arrived}");
        }
    }
    assert!(fault(&a, "net.partition")["landed"].as_u64().unwrap() > 0);

    // Disks: the flushed sector survives the crash. Node 0 lost all 8
    // unflushed sectors; node 1 kept the prefix the seed chose, which is
    // what the disk reports it kept.
    let disk = |n: usize| -> Vec<String> {
        let l = lines(&a).into_iter().find(|l| l.starts_with(&format!("disk{n} "))).expect("disk line");
        l.split_whitespace().skip(1).map(str::to_owned).collect()
    };
    let (mut d0, mut d1) = (disk(0), disk(1));
    assert_eq!(
        (d0.pop().as_deref(), d1.pop().as_deref()),
        (Some("BBBB"), Some("BBBB")),
        "the base image shows through"
    );
    assert_eq!(d0.len(), 16, "{d0:?}");
    assert_eq!(d0[0], "FFFF", "node 0's flushed sector");
    assert!(d0[1..].iter().all(|s| s == "...."), "node 0 lost every unflushed sector: {d0:?}");
    assert_eq!(d1[0], "FFFF", "node 1's flushed sector");
    let kept = d1[8..].iter().take_while(|s| *s == "UUUU").count();
    assert!(d1[1..8].iter().chain(&d1[8 + kept..]).all(|s| s == "...."), "torn writes keep a prefix: {d1:?}");
    let reported = &device(&a, "blk1")["counters"];
    assert_eq!(
        (kept as u64, 8 - kept as u64),
        (reported["crash_kept_sectors"].as_u64().unwrap(), reported["crash_lost_sectors"].as_u64().unwrap())
    );
    assert_eq!(device(&a, "blk0")["counters"]["crash_lost_sectors"], 8);
    assert_eq!(fault(&a, "disk.crash_lost")["landed"], 8);
    assert_eq!(fault(&a, "disk.crash_torn")["landed"], 8);
}

/// Node 1 crashes at 3 s and is back 1 s later.
const CRASH_RESTART: &str = r#"
[[crash]]
node = 1
at = "3s"
restart = "1s"
"#;

/// Every node's service: says when it started and what its file system
/// holds, then sleeps.
const SERVICE: &str = r#"read up _ < /proc/uptime; echo "node $HVSIM_NODE up at $up with: $(ls /mnt/d$HVSIM_NODE 2>/dev/null | tr '\n' ' ')"; exec sleep 1000"#;

/// Node 1 makes a file system on its disk and writes two files, syncing
/// only the first. A process of node 1 sleeps through the crash. While the
/// node is down, node 0 pings it; after the restart, again.
const CRASH_SCRIPT: &str = r#"
hvsim-node 1 sh -c 'mke2fs -q $HVSIM_DISK 4096 && mkdir -p /mnt/d1 && mount -t ext2 $HVSIM_DISK /mnt/d1 && echo kept > /mnt/d1/durable && sync && echo gone > /mnt/d1/volatile'
stamp; echo "before at $up: $(cat /mnt/d1/durable /mnt/d1/volatile | tr '\n' ' ')"
hvsim-node 1 sleep 100 &
sleeper=$!
sleep 3.2
wait $sleeper
echo "sleeper exited with $?"
echo "during: $(hvsim-node 1 true 2>&1)"
hvsim-node 0 ping -c 1 -W 1 10.0.0.2 > /dev/null && echo "ping while down: answered" || echo "ping while down: lost"
pause 1
stamp; echo "after at $up: $(cat /mnt/d1/durable) $(ls /mnt/d1 | tr '\n' ' ')"
hvsim-node 0 ping -c 1 -W 1 10.0.0.2 > /dev/null && echo "ping after restart: answered" || echo "ping after restart: lost"
"#;

#[test]
fn a_crashed_node_loses_its_processes_and_unsynced_files_and_restarts() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "crash.toml", CRASH_RESTART);
    let v = nodes_run(Some(&plan), &["--node-cmd", SERVICE], &format!("{LIB}{CRASH_SCRIPT}"));
    let lines = lines(&v);
    let line = |prefix: &str| -> String {
        let mut found = lines.iter().filter(|l| l.starts_with(prefix));
        found.next().unwrap_or_else(|| panic!("no line {prefix:?} in:\n{}", v["console"])).clone()
    };
    // Before the crash both files are there (the second only in memory).
    let before = line("before at ");
    assert!(before.ends_with(": kept gone "), "{before}");
    assert!(events_at(&before) < 3.0, "the setup must finish before the crash: {before}");
    // The crash killed node 1's processes and unmounted its disk; the node
    // refused commands and answered no ping while down.
    assert_eq!(line("sleeper exited with"), "sleeper exited with 137", "SIGKILL");
    assert_eq!(
        line("hvsim-init: node 1 lost power"),
        r#"hvsim-init: node 1 lost power: killed 2 processes, unmounted ["/mnt/d1"]"#
    );
    assert_eq!(line("during: "), "during: hvsim-node: node 1 is down (crashed, not restarted yet)");
    assert_eq!(line("ping while down: "), "ping while down: lost");
    // The restart mounted the disk again and started the service again: the
    // synced file survived, the other never reached the disk.
    assert_eq!(line("hvsim-init: node 1 restarted"), r#"hvsim-init: node 1 restarted: mounted ["/mnt/d1"]"#);
    let ups: Vec<&String> = lines.iter().filter(|l| l.starts_with("node 1 up at ")).collect();
    assert_eq!(ups.len(), 2, "started at boot and after the restart: {ups:?}");
    // Guest uptime runs a few ms behind virtual time (it starts at boot).
    assert!(events_at(ups[0]) < 1.0 && (3.9..4.5).contains(&events_at(ups[1])), "{ups:?}");
    assert!(ups[1].contains("durable") && !ups[1].contains("volatile"), "{}", ups[1]);
    let after = line("after at ");
    assert!(after.contains(": kept ") && after.contains("durable") && !after.contains("volatile"), "{after}");
    assert_eq!(line("ping after restart: "), "ping after restart: answered");
    assert_eq!(lines.iter().filter(|l| l.starts_with("node 0 up at ")).count(), 1, "node 0 never crashed");
    // The devices saw it too.
    assert!(device(&v, "blk1")["counters"]["refused_node_down"].as_u64() > Some(0), "{}", v["devices"]);
    assert!(device(&v, "switch")["counters"]["dropped_node_down"].as_u64() > Some(0), "{}", v["devices"]);
}

/// The virtual time in a "... at T ..." line.
fn events_at(line: &str) -> f64 {
    let t = line.split(" at ").nth(1).and_then(|r| r.split([' ', ':']).next()).unwrap_or_default();
    t.parse().unwrap_or_else(|_| panic!("no time in {line:?}"))
}

/// Builds `guest/faultload.c` statically for the guest, at /faultload.
fn faultload(dir: &Path) -> String {
    c_program(dir, "faultload", "/faultload")
}

/// Both nodes run faultload on their disks while node 1 sends node 0
/// `bytes` over TCP (the server counts until the client closes), connecting
/// again, as a real client would, if the faults defeat an attempt before
/// the connection is up (ARP gives up after three lost requests); then the
/// run idles `idle_s` seconds of virtual time (past any crashes in the plan;
/// idle virtual time costs little wall time).
fn chaos_script(rounds: u32, bytes: u32, idle_s: u32) -> String {
    format!(
        r#"
hvsim-node 0 nc -l -p 5000 -e sh -c 'wc -c > /tmp/received' &
hvsim-node 0 sh -c '/faultload $HVSIM_DISK {rounds}' &
hvsim-node 1 sh -c '/faultload $HVSIM_DISK {rounds}' &
sleep 0.05
for attempt in 1 2 3 4 5; do
  head -c {bytes} /dev/zero | hvsim-node 1 nc 10.0.0.1 5000 && break
  sleep 1
done
wait
echo "received $(cat /tmp/received)"
sleep {idle_s}
"#
    )
}

/// Every kind, at rates that land on a small workload.
const EVERY_KIND: &str = r#"
[network]
latency = "100us"
jitter = "50us"
drop = 0.05
duplicate = 0.05
reorder = 0.05
reorder_delay = "1ms"
[network.clog]
probability = 0.05
duration = "20ms"
[network.cut]
probability = 0.03
duration = "20ms"
[network.burst]
enter = 0.05
leave = 0.3
drop = 0.8
[[network.partition]]
start = "0s"
heal = "200ms"
groups = [[0], [1]]
[disk]
latency = "100us"
read_error = 0.02
write_error = 0.02
corrupt = 0.02
misdirect = 0.02
stall = 0.02
stall_time = "5ms"
lying_flush = 0.1
quota = "48K"
[[crash]]
node = 0
at = "600s"
[[crash]]
node = 1
at = "600s"
torn = true
"#;

// Under every fault at once TCP backs off for long: the 100 kB transfer
// ends at 17.8 s to more than 120 s of virtual time depending on seed,
// kernel and init (with TCP's retransmission timeout doubling up to two
// minutes), so the crashes come at 600 s, after it (at 20 s they cut it
// short and network kinds that land only late, like clog, could miss).
// Waiting costs little: an idle guest's virtual time passes at once.
#[test]
fn every_fault_kind_lands_on_guest_traffic() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "every.toml", EVERY_KIND);
    let file = faultload(dir.path());
    let v = nodes_run(Some(&plan), &["--guest-file", &file], &chaos_script(202, 100_000, 605));
    let kinds: Vec<&str> = v["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 19, "every kind is configured (crashes: node.crash too): {kinds:?}");
    for f in v["faults"].as_array().unwrap() {
        assert!(
            f["landed"].as_u64().unwrap() > 0 && f["status"] == "landed",
            "{f}\nall: {}\n{}",
            v["faults"],
            v["console"]
        );
    }
    // TCP delivered everything despite the faults; the disks returned errors
    // and wrong data to the guest.
    assert!(lines(&v).iter().any(|l| l == "received 100000"), "{}", v["console"]);
    let loads: Vec<String> = lines(&v).into_iter().filter(|l| l.starts_with("faultload:")).collect();
    assert_eq!(loads.len(), 2, "{}", v["console"]);
    for l in &loads {
        assert!(!l.contains("write_errors=0 ") && !l.contains("mismatches=0"), "{l}");
    }
}

/// Every section present, every rate zero.
const ZERO_RATES: &str = r#"
[network]
drop = 0.0
duplicate = 0.0
reorder = 0.0
[network.clog]
probability = 0.0
duration = "1s"
[network.cut]
probability = 0.0
duration = "1s"
[network.burst]
enter = 0.0
leave = 0.5
drop = 0.0
[disk]
read_error = 0.0
write_error = 0.0
corrupt = 0.0
misdirect = 0.0
stall = 0.0
lying_flush = 0.0
"#;

#[test]
fn a_zero_rate_plan_leaves_the_guest_untouched() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "zero.toml", ZERO_RATES);
    let file = faultload(dir.path());
    let script = chaos_script(40, 30_000, 0);
    let with = nodes_run(Some(&plan), &["--guest-file", &file], &script);
    let without = nodes_run(None, &["--guest-file", &file], &script);
    assert_eq!(with["faults"], serde_json::json!([]), "a zero-rate plan configures nothing");
    for field in ["trace_hash", "memory_hash", "console", "devices"] {
        assert_eq!(with[field], without[field], "{field}: the zero-rate plan changed the run");
    }
    assert!(lines(&with).iter().any(|l| l == "received 30000"), "{}", with["console"]);
    let clean = "faultload: writes=40 write_errors=0 flushes=10 flush_errors=0 reads=40 read_errors=0 mismatches=0";
    assert_eq!(lines(&with).iter().filter(|l| *l == clean).count(), 2, "{}", with["console"]);
}

/// A "system" whose only bug is that it does not survive packet loss: node 1
/// pings node 0 once per timeline and asserts the answer always comes.
const PING: &str = r#"
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
if hvsim-node 1 ping -c 1 -W 1 10.0.0.1 > /dev/null; then ok=true; else ok=false; fi
echo "{\"antithesis_assert\":{\"id\":\"ping answers\",\"message\":\"ping answers\",\"condition\":$ok,\"hit\":true,\"must_hit\":true,\"assert_type\":\"always\",\"display_type\":\"Always\",\"location\":{},\"details\":null}}" > $HVSIM_SDK_OUTPUT
"#;

/// `hvsim explore --json` of two nodes, one pinging the other, under the
/// fault plan `plan`, into `out`; the report.
fn explore_ping(plan: &Path, out: &Path, more: &[&str]) -> Value {
    let plan = plan.to_str().unwrap();
    let mut args = vec!["--linux", "--nodes", "2", "--fault-plan", plan, "--init-cmd", PING];
    args.extend_from_slice(more);
    explore_json(&args, out)
}

/// Packet loss breaks a ping, which exploration finds: the report carries
/// the loss's landing evidence summed over every timeline, and the bug
/// record carries the plan, so it replays without the plan's file. Two
/// workers explore exactly as one.
#[test]
fn linux_branches_run_on_two_machines_as_on_one() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "lossy.toml", "[network]\ndrop = 0.3\n");
    let run = |workers: &str| {
        let args = ["--branches", "4", "--batch", "2", "--workers", workers, "--reexecute", "3"];
        explore_ping(&plan, &dir.path().join(workers), &args)
    };
    let (one, two) = (run("1"), run("2"));
    assert_eq!(two["summary"]["workers"], 2);
    // Where Linux programs can read host values, memory at the failure
    // may differ between executions of the same trace (docs/determinism.md).
    let memory = !linux_memory_may_differ();
    let difference = first_difference(&exploration_digest(&two, memory), &exploration_digest(&one, memory));
    assert!(difference.is_none(), "two workers explored otherwise than one, at {difference:?}");
    assert!(two["faults"][0]["landed"].as_u64() > Some(0), "the plan's loss landed: {}", two["faults"]);
    // The loss breaks the ping (seed 0 finds it in branch 2). The bug's
    // re-executions, by either machine, from the root snapshot, reach it
    // every time (where KVM shadows page tables, only since a reset makes
    // KVM drop its shadows: every other one crashed before); and it
    // replays in a fresh process.
    let bugs = two["bugs"].as_array().unwrap();
    assert!(!bugs.is_empty(), "the loss never broke the ping in 4 branches: {}", two["summary"]);
    assert!(bugs.iter().any(|b| b["summary"] == "assertion failed: ping answers"), "{bugs:?}");
    assert_eq!(one["faults"].as_array().map(Vec::len), Some(1), "{}", one["faults"]);
    assert_eq!(one["faults"][0]["kind"], "net.drop");
    let md = read(&latest(&dir.path().join("1")).join("report.md"));
    assert!(md.contains("| net.drop |"), "{md}");
    // The record carries the plan: it replays without the plan's file.
    std::fs::remove_file(&plan).unwrap();
    for bug in bugs {
        assert_eq!(bug["reproduction"], "reproduced 3/3", "{bug}");
        let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("replay printed no JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
        assert_eq!(v["vtime_ns"], bug["at"]["vtime_ns"]);
    }
}

/// A ping from node 1 to node 0, then the virtual time, on one line.
const PING_ONCE: &str = r#"ping_once() { if hvsim-node 1 ping -c 1 -W 1 10.0.0.1 >/dev/null 2>&1; then r=ok; else r=lost; fi; stamp; echo "ping $r at $up"; }
"#;

/// Partitions of one node from the other, drawn every 50 ms and lasting
/// 10 s: once drawing starts, the nodes are always cut off.
const ALWAYS_PARTITIONED: &str = r#"
[[draw.fault]]
kind = "partition"
every = "50ms"
duration = "10s"
targets = ["one"]
"#;

const SETUP: &str = r#"echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
stamp; echo "setup at $up"
"#;

/// The pings' results, in order.
fn pings(v: &Value) -> Vec<String> {
    lines(v).iter().filter_map(|l| l.strip_prefix("ping ")?.split(" at ").next().map(str::to_owned)).collect()
}

/// Drawn faults start at setup complete (or at the run's start where the
/// plan opts in), a stop-faults request heals the network at once for its
/// virtual time, and drawn faults resume after it by themselves; every
/// one that struck is in the summary, and one the pause cut short says so.
#[test]
fn drawn_faults_start_at_setup_complete_and_stop_faults_heals_for_its_time() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "drawn.toml", ALWAYS_PARTITIONED);
    let script = format!(
        "{LIB}{PING_ONCE}ping_once\n{SETUP}pause 0.2\nping_once\n$ANTITHESIS_STOP_FAULTS 3\nstamp; echo \"paused at $up\"\nping_once\npause 3.5\nping_once\n"
    );
    let v = nodes_run(Some(&plan), &[], &script);
    assert_eq!(pings(&v), ["ok", "lost", "ok", "lost"], "{:#?}", lines(&v));
    let at = |what: &str| -> f64 {
        lines(&v).iter().find_map(|l| l.strip_prefix(&format!("{what} at "))?.trim().parse().ok()).unwrap()
    };
    let (setup_s, paused_s) = (at("setup"), at("paused"));
    let drawn = v["drawn_faults"].as_array().unwrap();
    let seconds = |f: &Value, k: &str| f[k].as_u64().unwrap() as f64 / 1e9;
    assert!(drawn.len() >= 3, "{drawn:#?}");
    for f in drawn {
        assert_eq!(f["kind"], "partition");
        let start = seconds(f, "start_ns");
        assert!(start >= setup_s - 0.01, "a drawn fault before setup complete: {f}");
        assert!(!(paused_s + 0.01..paused_s + 2.99).contains(&start), "a drawn fault during the pause: {f}");
    }
    let cut_short: Vec<&Value> =
        drawn.iter().filter(|f| f["ended_ns"].as_u64().is_some_and(|e| e < f["end_ns"].as_u64().unwrap())).collect();
    assert!(!cut_short.is_empty() && cut_short.iter().all(|f| (seconds(f, "ended_ns") - paused_s).abs() < 0.05));
    assert!(drawn.iter().any(|f| seconds(f, "start_ns") >= paused_s + 3.0), "drawing resumed: {drawn:#?}");
    assert!(drawn.iter().map(|f| f["landed"].as_u64().unwrap()).sum::<u64>() > 0);
    let partition = fault(&v, "net.partition");
    assert!(partition["drawn"].as_u64() >= Some(3) && partition["status"] == "landed", "{partition}");

    // Opted in, they strike from the run's start.
    let early = write(dir.path(), "early.toml", &format!("[draw]\nbefore_setup = true\n{ALWAYS_PARTITIONED}"));
    let v = nodes_run(Some(&early), &[], &format!("{LIB}{PING_ONCE}pause 0.2\nping_once\n"));
    assert_eq!(pings(&v), ["lost"]);
}

/// A plan's faults written down run exactly as they did without drawn
/// ones: drawn rules that never arm (the guest never reports setup
/// complete) leave the run the same, every exit and memory.
#[test]
fn drawn_rules_that_never_draw_leave_an_explicit_plan_as_it_was() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let explicit =
        "[[network.partition]]\nstart = \"1s\"\nheal = \"60s\"\ngroups = [[0], [1]]\n[network]\ndrop = 0.1\n";
    let plain = write(dir.path(), "plain.toml", explicit);
    let with_rules = write(dir.path(), "rules.toml", &format!("{explicit}{ALWAYS_PARTITIONED}"));
    let script = format!("{LIB}{PING_ONCE}ping_once\npause 1.5\nping_once\n");
    let (a, b) = (nodes_run(Some(&plain), &[], &script), nodes_run(Some(&with_rules), &[], &script));
    assert_eq!(pings(&a), ["ok", "lost"]);
    for field in ["trace_hash", "memory_hash", "exits", "vtime_ns", "console"] {
        assert_eq!(a[field], b[field], "{field}");
    }
    assert_eq!(b["drawn_faults"], Value::Array(vec![]));
}

/// Branches of one snapshot (a replay of it with a new seed) draw their
/// own faults from their seeds: the same seed the same schedule, another
/// seed another; a fault in force at the snapshot goes on in both to its
/// drawn end.
#[test]
fn branches_of_one_snapshot_draw_their_own_faults_and_inherit_those_in_force() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "drawn.toml",
        "[[draw.fault]]\nkind = \"partition\"\nevery = [\"100ms\", \"1s\"]\nduration = [\"300ms\", \"2s\"]\n\
         targets = [\"one\"]\n\n[[draw.fault]]\nkind = \"drop\"\nevery = [\"200ms\", \"1s\"]\nduration = \"500ms\"\n\
         probability = [0.2, 0.8]\n",
    );
    let snap = dir.path().join("drawn.snap");
    let script = format!("{LIB}{SETUP}pause 6\ntrue\n");
    let at = 3_000_000_000u64;
    nodes_run(Some(&plan), &["--snapshot-at", "3s", "--save-snapshot", snap.to_str().unwrap()], &script);
    let branch = |seed: &str| -> Vec<Value> {
        let v = replay_snapshot(&snap, &["--seed", seed]);
        v["drawn_faults"].as_array().unwrap().clone()
    };
    let (a, again, b) = (branch("1"), branch("1"), branch("2"));
    assert_eq!(a, again, "the same branch seed draws the same schedule");
    let after =
        |s: &[Value]| -> Vec<Value> { s.iter().filter(|f| f["start_ns"].as_u64().unwrap() >= at).cloned().collect() };
    assert!(!after(&a).is_empty() && !after(&b).is_empty());
    assert_ne!(after(&a), after(&b), "another seed draws another schedule");
    let before = |s: &[Value]| -> Vec<Value> {
        s.iter().filter(|f| f["start_ns"].as_u64().unwrap() < at).map(|f| f["end_ns"].clone()).collect()
    };
    assert!(!before(&a).is_empty(), "faults struck before the snapshot: {a:#?}");
    assert_eq!(before(&a), before(&b), "what was drawn before the snapshot ends when it was drawn to, in both");
}

/// A bug that only a drawn partition reveals, which no plan names: found by
/// exploring, its record lists the drawn faults that struck before it, and
/// it replays.
#[test]
fn explore_finds_a_bug_under_a_drawn_partition_and_its_record_lists_it() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Partitions come and go; the ping, 50 ms after setup complete, is lost
    // in the timelines where one is in force then.
    let plan = write(
        dir.path(),
        "drawn.toml",
        "[[draw.fault]]\nkind = \"partition\"\nevery = [\"10ms\", \"80ms\"]\nduration = [\"20ms\", \"60ms\"]\n\
         targets = [\"one\", \"majority\"]\n",
    );
    let out = dir.path().join("out");
    let script = format!("{LIB}{}", PING.replacen("\nif ", "\npause 0.05\nif ", 1));
    let plan = plan.to_str().unwrap();
    let args = ["--linux", "--nodes", "2", "--fault-plan", plan, "--init-cmd", &script, "--branches", "6"];
    let r = explore_json(&args, &out);
    let bug = r["bugs"].as_array().unwrap().iter().find(|b| b["summary"] == "assertion failed: ping answers").cloned();
    let bug = bug.unwrap_or_else(|| panic!("no drawn partition broke the ping in 6 branches: {}", r["summary"]));
    let partition = r["faults"].as_array().unwrap().iter().find(|f| f["kind"] == "net.partition").unwrap().clone();
    assert!(partition["drawn"].as_u64() > Some(0) && partition["landed"].as_u64() > Some(0), "{partition}");
    let record: Value = serde_json::from_str(&read(Path::new(bug["file"].as_str().unwrap()))).unwrap();
    let struck = record["faults"].as_array().unwrap();
    let failed_at = record["at"]["vtime_ns"].as_u64().unwrap();
    assert!(
        struck.iter().any(|f| f["kind"] == "partition" && f["start_ns"].as_u64().unwrap() <= failed_at),
        "{struck:#?}"
    );
    assert!(bug["faults"].as_array().unwrap().iter().any(|f| f.as_str().unwrap().starts_with("partition ")), "{bug}");
    let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
}

/// `--schedule bandit`: the plan draws partitions (which lose the ping),
/// latencies and duplicates (which do not), each line of descent's rules
/// chosen by the bandit over swarm's coins. The exploration finds the ping
/// lost and is the same with one worker and with two; the report shows
/// each rule's tally; the bug's record keeps its line's rules, with the
/// partition on, and replays.
#[test]
fn the_fault_rule_bandit_explores_the_same_with_1_and_2_workers_and_its_bug_replays() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "rules.toml",
        "[[draw.fault]]\nkind = \"partition\"\nevery = [\"10ms\", \"80ms\"]\nduration = [\"20ms\", \"60ms\"]\n\
         targets = [\"one\"]\n\n[[draw.fault]]\nkind = \"latency\"\nevery = [\"10ms\", \"80ms\"]\n\
         duration = [\"20ms\", \"60ms\"]\ndelay = \"1ms\"\n\n[[draw.fault]]\nkind = \"duplicate\"\n\
         every = [\"10ms\", \"80ms\"]\nduration = [\"20ms\", \"60ms\"]\nprobability = 0.2\n",
    );
    let script = format!("{LIB}{}", PING.replacen("\nif ", "\npause 0.05\nif ", 1));
    let plan = plan.to_str().unwrap();
    let run = |workers: &str| {
        let args = ["--linux", "--nodes", "2", "--fault-plan", plan, "--init-cmd", &script, "--branches", "6"];
        let more = ["--schedule", "bandit", "--workers", workers, "--batch", "2", "--reexecute", "0"];
        explore_json(&[&args[..], &more].concat(), &dir.path().join(format!("w{workers}")))
    };
    let one = run("1");
    let rules = one["summary"]["rules"].as_array().unwrap();
    let kinds: Vec<&str> = rules.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["partition", "latency", "duplicate"]);
    let chosen: u64 = rules.iter().map(|r| r["chosen"].as_u64().unwrap()).sum();
    assert!(chosen >= 1, "the bandit chose the rules of every line leaving the root: {rules:?}");
    let bug =
        one["bugs"].as_array().unwrap().iter().find(|b| b["summary"] == "assertion failed: ping answers").cloned();
    let bug = bug.unwrap_or_else(|| panic!("no partition broke the ping in 6 branches: {}", one["summary"]));
    let record: Value = serde_json::from_str(&read(Path::new(bug["file"].as_str().unwrap()))).unwrap();
    let on = record["timeline"]["rules_on"].as_array().unwrap_or_else(|| panic!("{}", record["timeline"]));
    assert_eq!(on[0], true, "the partition rule is on in the bug's line: {on:?}");
    let two = run("2");
    let difference = first_difference(&exploration_digest(&two, true), &exploration_digest(&one, true));
    assert!(difference.is_none(), "two workers explored otherwise than one, at {difference:?}");
    assert_eq!(two["summary"]["rules"], one["summary"]["rules"]);
    let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["reproduced"].as_bool(), v["trace_matches"].as_bool()), (Some(true), Some(true)), "{v}");
}

/// A drawn fault on node 1 from the run's start, every `every`, lasting
/// `duration`.
fn node_fault_plan(kind: &str, every: &str, duration: &str) -> String {
    format!(
        "[draw]\nbefore_setup = true\n\n[[draw.fault]]\nkind = \"{kind}\"\nevery = \"{every}\"\nduration = \"{duration}\"\ntargets = [[1]]\n"
    )
}

/// Node 1 answers each line over TCP with the time it answered; node 0
/// sends a line every 0.4 s over one connection and logs each answer with
/// the time it arrived. Each node's service logs a heartbeat every 0.1 s.
const PAUSE_SCRIPT: &str = r#"
hvsim-node 1 nc -l -p 5000 -e sh -c 'while read l; do read up _ < /proc/uptime; echo "$l answered at $up"; done' &
(pause 2.3; hvsim-node 0 ping -c 1 -W 1 10.0.0.2 > /dev/null && echo "ping in the pause: answered" || echo "ping in the pause: lost") &
pause 0.3
hvsim-node 0 sh -c '. /tmp/lib.sh; for i in 1 2 3 4 5 6 7 8 9 10; do echo "req$i"; pause 0.4; done | nc 10.0.0.2 5000 | while read l; do stamp; echo "$l received at $up"; done'
echo "beats: $(tr '\n' ' ' < /tmp/beats1)"
"#;

/// Each node's heartbeat. It waits with the shell's own `read -t`, not
/// `sleep`: a process started every 0.1 s costs the guest's kernel far more
/// than the test needs.
const HEARTBEAT: &str = r#"read up _ < /proc/uptime; echo "node $HVSIM_NODE up at $up"; mkfifo /tmp/hb$HVSIM_NODE; while true; do read up _ < /proc/uptime; echo $up >> /tmp/beats$HVSIM_NODE; read -t 0.1 _ <> /tmp/hb$HVSIM_NODE; done"#;

/// A paused node's peer sees its requests stall while TCP stays up, and the
/// node resumes where it stopped (the same from a snapshot taken during
/// the pause).
#[test]
fn a_paused_node_stalls_its_peer_and_resumes_where_it_stopped() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "pause.toml", &node_fault_plan("pause", "2s", "1s"));
    let script = format!("{LIB}{PAUSE_SCRIPT}");
    let v = restored_the_same(&plan, &["--node-cmd", HEARTBEAT], &script, "2500ms", "in the pause");
    let out = lines(&v);
    let first = &v["drawn_faults"][0];
    assert_eq!(first["kind"], "pause", "{}", v["drawn_faults"]);
    let drawn_s = (first["end_ns"].as_u64().unwrap() - first["start_ns"].as_u64().unwrap()) as f64 / 1e9;
    // The heartbeat stopped for the pause and went on: the same process,
    // never restarted. Its first long gap is the first pause, in the
    // guest's time.
    let beats: Vec<f64> = line_with(&out, "beats: ").split_whitespace().skip(1).map(|b| b.parse().unwrap()).collect();
    let (start, end) = beats.windows(2).map(|w| (w[0], w[1])).find(|(a, b)| b - a > 0.5).expect("a gap in the beats");
    assert!((end - start - drawn_s).abs() < 0.15, "the first gap between heartbeats is the pause: {start}..{end}");
    // Every request was answered over the one connection; those sent while
    // node 1 was paused were answered only once it continued.
    let answers: Vec<(f64, f64)> = out
        .iter()
        .filter(|l| l.starts_with("req"))
        .map(|l| (events_at(l), l.rsplit(" at ").next().unwrap().trim().parse().unwrap()))
        .collect();
    assert_eq!(answers.len(), 10, "{out:#?}");
    assert!(answers.iter().all(|&(answered, _)| !(start + 0.05..end - 0.05).contains(&answered)), "{answers:?}");
    let stalled: Vec<_> =
        answers.iter().filter(|&&(answered, _)| (end - 0.05..end + 0.2).contains(&answered)).collect();
    assert!(stalled.len() >= 2, "requests of the pause answered together at its end ({start}..{end}): {answers:?}");
    assert_eq!(out.iter().filter(|l| l.starts_with("node 1 up at ")).count(), 1);
    assert!(line_with(&out, "hvsim-init: node 1 paused: stopped ").ends_with(" processes"));
    // Its kernel still answers: only its processes stopped.
    line_with(&out, "ping in the pause: answered");
    assert!(line_with(&out, "hvsim-init: node 1 resumed: continued ").ends_with(" processes"));
    assert!(fault(&v, "node.pause")["landed"].as_u64() >= Some(1), "{}", v["faults"]);
}

/// A killed node's service loses its processes, not its writes, and starts
/// again (the same from a snapshot taken while the node is killed).
#[test]
fn a_killed_node_restarts_with_its_writes() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "kill.toml", &node_fault_plan("kill", "2s", "0.5s"));
    let v = restored_the_same(&plan, &["--node-cmd", SERVICE], &format!("{LIB}{KILL_SCRIPT}"), "2200ms", "in the kill");
    let out = lines(&v);
    assert_eq!(line_with(&out, "sleeper exited with"), "sleeper exited with 137", "SIGKILL");
    assert!(line_with(&out, "hvsim-init: node 1 killed: ").ends_with(" processes"));
    line_with(&out, "hvsim-init: node 1 started again");
    // Started at boot and again after the kill, with the unsynced file
    // there: the page cache survived.
    let ups: Vec<&String> = out.iter().filter(|l| l.starts_with("node 1 up at ")).collect();
    assert_eq!(ups.len(), 2, "{out:#?}");
    assert!(ups[1].contains("unsynced"), "{}", ups[1]);
    assert_eq!(line_with(&out, "after: "), "after: written");
    assert!(fault(&v, "node.kill")["landed"].as_u64() >= Some(1), "{}", v["faults"]);
    // No power was lost: the disk never refused a request.
    assert_eq!(device(&v, "blk1")["counters"]["refused_node_down"].as_u64().unwrap_or(0), 0, "{}", v["devices"]);
}

/// A graceful stop: the process that handles SIGTERM exits its own way,
/// the one that ignores it is killed after the grace period (the same
/// from a snapshot taken in the grace period).
#[test]
fn a_stopped_node_gets_sigterm_then_sigkill_after_its_grace() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "stop.toml", &node_fault_plan("stop", "3s", "1s"));
    let v = restored_the_same(
        &plan,
        &["--node-cmd", SERVICE],
        &format!("{LIB}{STOP_SCRIPT}"),
        "3500ms",
        "in the grace period",
    );
    let out = lines(&v);
    assert_eq!(line_with(&out, "graceful exited with"), "graceful exited with 3", "its TERM trap ran");
    assert_eq!(line_with(&out, "stubborn exited with"), "stubborn exited with 137", "killed after the grace");
    let stopped = line_with(&out, "hvsim-init: node 1 stopped: ");
    // The stubborn shell and its sleep (which inherited the ignored TERM).
    assert!(stopped.ends_with(" 2 killed after the grace period"), "{stopped}");
    assert_eq!(out.iter().filter(|l| l.starts_with("node 1 up at ")).count(), 2, "{out:#?}");
    assert!(fault(&v, "node.stop")["landed"].as_u64() >= Some(1), "{}", v["faults"]);
}

/// A hung node answers nothing, not even a ping, until the hang ends (the
/// same from a snapshot taken in the hang).
#[test]
fn a_hung_node_answers_nothing_until_the_hang_ends() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "hang.toml", &node_fault_plan("hang", "5s", "1500ms"));
    let v = restored_the_same(&plan, &["--node-cmd", SERVICE], &format!("{LIB}{HANG_SCRIPT}"), "5500ms", "in the hang");
    let out = lines(&v);
    line_with(&out, "ping in the hang: lost");
    line_with(&out, "ping after the hang: answered");
    assert!(line_with(&out, "hvsim-init: node 1 paused: stopped ").ends_with(" processes"));
    assert!(fault(&v, "node.hang")["landed"].as_u64() >= Some(1), "{}", v["faults"]);
}

/// Node 0 pings node 1 during its hang (5 s to 6.5 s) and after it.
const HANG_SCRIPT: &str = r#"
pause 5.3
hvsim-node 0 ping -c 1 -W 1 10.0.0.2 > /dev/null && echo "ping in the hang: answered" || echo "ping in the hang: lost"
pause 1.5
hvsim-node 0 ping -c 1 -W 1 10.0.0.2 > /dev/null && echo "ping after the hang: answered" || echo "ping after the hang: lost"
"#;

/// Two processes of node 1 live through the stop at 3 s: one exits 3 on
/// SIGTERM, the other ignores it and is killed at 5 s, when the service
/// starts again (the stop ended at 4 s, while init waited out the grace).
const STOP_SCRIPT: &str = r#"
hvsim-node 1 sh -c 'trap "exit 3" TERM; sleep 100 & wait' &
graceful=$!
hvsim-node 1 sh -c 'trap "" TERM; sleep 100 & wait; sleep 100' &
stubborn=$!
wait $graceful
echo "graceful exited with $?"
wait $stubborn
echo "stubborn exited with $?"
pause 0.5
true
"#;

/// Node 1 writes a file without syncing it; a process of node 1 sleeps
/// through the kill at 2 s; after the restart the file is read back.
const KILL_SCRIPT: &str = r#"
hvsim-node 1 sh -c 'mke2fs -q $HVSIM_DISK 4096 && mkdir -p /mnt/d1 && mount -t ext2 $HVSIM_DISK /mnt/d1 && echo written > /mnt/d1/unsynced'
hvsim-node 1 sleep 100 &
sleeper=$!
wait $sleeper
echo "sleeper exited with $?"
pause 1
echo "after: $(cat /mnt/d1/unsynced)"
"#;

/// The first line starting with `prefix`.
fn line_with<'a>(lines: &'a [String], prefix: &str) -> &'a str {
    lines.iter().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no line {prefix:?} in {lines:#?}"))
}

/// Every kind of clock fault at once, drawn from the run's start: bumps
/// of node 1 (Jepsen's range), strobes of node 0, drifts of the machine.
const CLOCK_PLAN: &str = r#"
[draw]
before_setup = true
swarm = false

[[draw.fault]]
kind = "bump"
every = "1s"
duration = "400ms"
offset = ["4ms", "262s"]
targets = [[1]]

[[draw.fault]]
kind = "strobe"
every = "1500ms"
duration = "700ms"
offset = ["1s", "10s"]
period = "200ms"
targets = [[0]]

[[draw.fault]]
kind = "drift"
every = "1200ms"
duration = "500ms"
rate = [20000, 80000]
"#;

/// One line of `guest/clockwatch.c`: realtime, monotonic and raw
/// monotonic nanoseconds, gettimeofday microseconds, time() seconds.
#[derive(Debug, Clone, Copy)]
struct Reading {
    real: i128,
    mono: i128,
    raw: i128,
    tod_us: i128,
    time_s: i128,
    /// What realtime less true time should be: the node's offset, plus
    /// what the machine's clock gained at its rate since init last set it
    /// to true time (at the rate's change; taken as the first reading
    /// after it, one period late at most).
    expected: i128,
}

/// What one node's clocks should read for a while: its realtime offset and
/// the machine's rate as init last applied them, and the readings taken.
#[derive(Debug)]
struct Regime {
    offset: i64,
    rate: i64,
    /// The other node's offset at its start.
    neighbour: i64,
    readings: Vec<Reading>,
}

/// Each node's regimes, from the console in order: init's "node N clock:
/// realtime O ns" and "clock: running R ppm" lines start them, the
/// watchers' readings fall in them.
fn regimes(v: &Value) -> ([Vec<Regime>; 2], usize) {
    let mut offset = [0i64; 2];
    let mut rate = 0i64;
    let mut rate_since: Option<i128> = None;
    let mut all: [Vec<Regime>; 2] = Default::default();
    for (n, r) in all.iter_mut().enumerate() {
        r.push(Regime { offset: 0, rate: 0, neighbour: offset[1 - n], readings: Vec::new() });
    }
    let mut cancelled = 0;
    for l in lines(v) {
        let mut changed: Vec<usize> = Vec::new();
        if let Some(rest) = l.strip_prefix("hvsim-init: node ") {
            if let Some((node, o)) = rest.split_once(" clock: realtime ") {
                let node: usize = node.parse().unwrap();
                offset[node] = o.split_whitespace().next().unwrap().parse().unwrap();
                changed.push(node);
            }
        } else if let Some(r) = l.strip_prefix("hvsim-init: clock: running ") {
            rate = r.split_whitespace().next().unwrap().parse().unwrap();
            rate_since = None;
            changed.extend([0, 1]);
        } else if let Some(rest) = l.strip_prefix("clock ") {
            let n: Vec<i128> = rest.split_whitespace().map(|x| x.parse().unwrap()).collect();
            let node = n[0] as usize;
            let since = *rate_since.get_or_insert(n[4]);
            let expected = i128::from(offset[node]) + i128::from(rate) * (n[4] - since) / 1_000_000;
            let r = Reading { real: n[2], mono: n[3], raw: n[4], tod_us: n[5], time_s: n[6], expected };
            all[node].last_mut().unwrap().readings.push(r);
        } else if l.starts_with("cancelled ") {
            cancelled += 1;
        }
        for node in changed {
            all[node].push(Regime { offset: offset[node], rate, neighbour: offset[1 - node], readings: Vec::new() });
        }
    }
    (all, cancelled)
}

/// Each node's realtime is true time plus the offset init last applied to
/// it, running at the machine's rate since; a bumped node's neighbour does
/// not move; monotonic never steps; gettimeofday and time() follow
/// realtime; a realtime timerfd hears every step; a snapshot taken with
/// clock faults in force restores them, and the run ends the same.
#[test]
fn clock_faults_step_one_nodes_realtime_and_skew_the_machines() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "clock.toml", CLOCK_PLAN);
    let watch = c_program(dir.path(), "clockwatch", "/clockwatch");
    let script = "hvsim-node 0 /clockwatch 80 50 &\nhvsim-node 1 /clockwatch 80 50\nwait\n";
    let v = restored_the_same(&plan, &["--guest-file", &watch], script, "2300ms", "with clocks off");
    let (nodes, cancelled) = regimes(&v);
    let (mut stepped, mut skewed, mut still_neighbour, mut resets) = (0, 0, 0, 0);
    for (node, regimes) in nodes.iter().enumerate() {
        let all: Vec<Reading> = regimes.iter().flat_map(|r| r.readings.clone()).collect();
        assert_eq!(all.len(), 80, "node {node}: {}", v["console"]);
        let first = regimes[0].readings.first().expect("readings before the first clock fault");
        let true_base = first.real - first.raw;
        let mono_base = first.mono - first.raw;
        for (i, regime) in regimes.iter().enumerate() {
            let (offset, rate) = (i128::from(regime.offset), regime.rate);
            for r in &regime.readings {
                assert!((r.tod_us * 1000 - r.real).abs() < 1_000_000, "gettimeofday follows realtime: {r:?}");
                assert!((r.time_s - r.real / 1_000_000_000).abs() <= 1, "time() follows realtime: {r:?}");
            }
            // Realtime is where it should be: exactly (give or take the
            // step's own microseconds) at rate 0.
            let slack = 2_000_000 + (i128::from(rate).abs() * 60_000_000) / 1_000_000;
            for r in &regime.readings {
                let off = r.real - r.raw - true_base;
                assert!((off - r.expected).abs() < slack, "node {node}, {regime:?}: {off} ns off at {r:?}");
            }
            let Some(r0) = regime.readings.first() else { continue };
            stepped += usize::from(offset != 0);
            still_neighbour += usize::from(offset == 0 && rate == 0 && regime.neighbour != 0);
            resets += usize::from(i > 0 && (offset, rate) == (0, 0) && regimes[i - 1].offset != 0);
            if let (true, Some(rn)) = (regime.readings.len() >= 3 && rate != 0, regime.readings.last()) {
                // Realtime and the monotonic clock run at the rate.
                let span = (rn.raw - r0.raw) as f64;
                for skew in
                    [((rn.real - r0.real) as f64 - span) / span * 1e6, ((rn.mono - r0.mono) as f64 - span) / span * 1e6]
                {
                    assert!(
                        (skew - rate as f64).abs() < 0.1 * (rate as f64).abs() + 500.0,
                        "{rate} ppm ran {skew} ppm"
                    );
                }
                skewed += 1;
            }
            for r in regime.readings.iter().filter(|_| rate == 0) {
                assert!(r.mono - r.raw >= mono_base - 1_000, "monotonic never steps back: {r:?}");
            }
        }
        assert!(all.windows(2).all(|w| w[1].mono >= w[0].mono && w[1].raw > w[0].raw), "node {node}");
    }
    // Node 1's bumps and node 0's strobes each moved that node's clock
    // alone: the neighbour read true time meanwhile.
    assert!(stepped >= 4 && skewed >= 1 && still_neighbour >= 2 && resets >= 2, "{nodes:#?}");
    assert!(cancelled >= 3, "a TFD_TIMER_CANCEL_ON_SET timerfd hears the steps ({cancelled})");
    for kind in ["clock.bump", "clock.strobe", "clock.drift"] {
        assert!(fault(&v, kind)["landed"].as_u64() >= Some(1), "{}", v["faults"]);
    }
}

/// A wiped node loses power and every write, synced or not, and comes back
/// with its disk as the run began it (here: no file system at all).
#[test]
fn a_wiped_node_comes_back_with_an_empty_disk() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "wipe.toml", &node_fault_plan("wipe", "2s", "500ms"));
    let script = format!("{LIB}{WIPE_SCRIPT}");
    let v = restored_the_same(&plan, &["--node-cmd", SERVICE], &script, "2200ms", "while wiped and down");
    let out = lines(&v);
    assert_eq!(line_with(&out, "before: "), "before: kept");
    assert_eq!(line_with(&out, "sleeper exited with"), "sleeper exited with 137");
    assert!(line_with(&out, "hvsim-init: node 1 lost power: ").contains("/mnt/d1"), "{out:#?}");
    assert_eq!(line_with(&out, "non-zero bytes after: "), "non-zero bytes after: 0", "{out:#?}");
    assert_eq!(out.iter().filter(|l| l.starts_with("node 1 up at ")).count(), 2, "{out:#?}");
    let wipe = fault(&v, "node.wipe");
    assert!(wipe["landed"].as_u64() >= Some(1), "{}", v["faults"]);
    assert_eq!(v["drawn_faults"][0]["kind"], "wipe", "{}", v["drawn_faults"]);
}

/// Node 1 makes a file system and writes a file, synced: a crash would
/// keep it. A process of node 1 sleeps through the wipe at 2 s; after the
/// node is back, its disk's first sectors read back as zeroes.
const WIPE_SCRIPT: &str = r#"
hvsim-node 1 sh -c 'mke2fs -q $HVSIM_DISK 4096 && mkdir -p /mnt/d1 && mount -t ext2 $HVSIM_DISK /mnt/d1 && echo kept > /mnt/d1/synced && sync'
echo "before: $(cat /mnt/d1/synced)"
hvsim-node 1 sleep 100 &
sleeper=$!
wait $sleeper
echo "sleeper exited with $?"
pause 1
echo "non-zero bytes after: $(hvsim-node 1 sh -c 'dd if=$HVSIM_DISK bs=512 count=8 iflag=direct 2>/dev/null | tr -d "\0" | wc -c')"
"#;

/// A plan's own command, run on node 1 at a drawn moment: its output and
/// status are in the console, and init reports it to hvsim (landing
/// evidence); a run restored from after it ran ends the same.
#[test]
fn a_custom_fault_runs_the_plans_command_on_its_node() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "custom.toml",
        "[draw]\nbefore_setup = true\n\n[[draw.fault]]\nkind = \"custom\"\nevery = [\"500ms\", \"1s\"]\ntargets = [[1]]\n\
         command = \"echo reloading on node $HVSIM_NODE; touch /tmp/reloaded-$HVSIM_NODE; exit 3\"\n",
    );
    let script = format!("{LIB}pause 1.2\necho \"marks: $(ls /tmp | grep reloaded)\"\n");
    let v = restored_the_same(&plan, &[], &script, "1100ms", "after a custom fault ran");
    let out = lines(&v);
    assert_eq!(line_with(&out, "custom[0] node 1: reloading"), "custom[0] node 1: reloading on node 1");
    assert_eq!(
        line_with(&out, "hvsim-init: custom[0] node 1: exited"),
        "hvsim-init: custom[0] node 1: exited with status 3"
    );
    assert_eq!(line_with(&out, "marks: "), "marks: reloaded-1");
    let drawn = v["drawn_faults"].as_array().unwrap();
    assert!(!drawn.is_empty() && drawn.iter().all(|d| d["kind"] == "custom"), "{}", v["drawn_faults"]);
    let ran = out.iter().filter(|l| l.starts_with("hvsim-init: custom[0] node 1: exited")).count() as u64;
    assert_eq!(
        fault(&v, "node.custom")["landed"].as_u64(),
        Some(ran),
        "every command that ended reported: {}",
        v["faults"]
    );
}

/// Node 0 pings node 1 every 0.2 s for 4 s; each reply is logged with the
/// virtual time it arrived.
const PING_SCRIPT: &str = r#"
hvsim-node 0 ping -c 20 -i 0.2 -W 5 10.0.0.2 | while read l; do stamp; echo "at $up: $l"; done
"#;

/// `(arrival, sequence number, round trip ms)` of every ping reply.
fn replies(v: &Value) -> Vec<(f64, u32, f64)> {
    lines(v)
        .iter()
        .filter_map(|l| {
            let (at, rest) = l.strip_prefix("at ")?.split_once(": 64 bytes from ")?;
            let seq = rest.split("seq=").nth(1)?.split(' ').next()?.parse().ok()?;
            let ms = rest.split("time=").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((at.parse().ok()?, seq, ms))
        })
        .collect()
}

/// A slowed link delays what crosses it and loses nothing; a jammed one
/// (a clog) holds what crosses it and delivers it all together when it
/// heals.
#[test]
fn a_slowed_link_delays_frames_and_a_jammed_link_bunches_them() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rule = |kind: &str, more: &str| {
        format!(
            "[draw]\nbefore_setup = true\n\n[[draw.fault]]\nkind = \"{kind}\"\nevery = \"2s\"\nduration = \"1s\"\ntargets = [[1]]\n{more}"
        )
    };
    let slow = write(dir.path(), "slow.toml", &rule("slow", "delay = \"300ms\"\n"));
    let v = restored_the_same(&slow, &[], &format!("{LIB}{PING_SCRIPT}"), "2500ms", "with frames slowed");
    let got = replies(&v);
    assert_eq!(got.len(), 20, "nothing lost: {}", v["console"]);
    let slowed: Vec<_> = got.iter().filter(|r| r.2 >= 600.0).collect();
    assert!(slowed.len() >= 3, "pings across the slowed link take 2 x 300 ms or more: {got:?}");
    assert!(got.iter().filter(|r| r.2 < 100.0).count() >= 5, "the others do not: {got:?}");
    assert!(fault(&v, "net.slow")["landed"].as_u64() >= Some(6), "{}", v["faults"]);

    let jam = write(dir.path(), "jam.toml", &rule("clog", ""));
    let v = restored_the_same(&jam, &[], &format!("{LIB}{PING_SCRIPT}"), "2500ms", "with frames jammed");
    let got = replies(&v);
    assert_eq!(got.len(), 20, "nothing lost: {}", v["console"]);
    // The pings sent while the link was jammed come back together when it
    // heals, the earliest having waited longest.
    let held: Vec<_> = got.iter().filter(|r| r.2 >= 150.0).collect();
    assert!(held.len() >= 3, "{got:?}");
    let first = held[0];
    let bunch: Vec<_> = held.iter().filter(|r| (r.0 - first.0).abs() < 0.05).collect();
    assert!(bunch.len() >= 3, "replies of the jam arrive together: {got:?}");
    assert!(bunch.windows(2).all(|w| w[0].2 > w[1].2), "the earliest waited longest: {bunch:?}");
    assert!(fault(&v, "net.clog")["landed"].as_u64() >= Some(3), "{}", v["faults"]);
}

/// `--snapshot-memory` holds within a round while a clog holds thousands
/// of frames: node 0 pings node 1 with 60,000-byte packets (41 frames
/// each) a hundred times a second while drawn clogs jam the link to
/// node 1 from 50 ms into each timeline, and the explorer snapshots every
/// millisecond. Each snapshot counts the frames the switch holds (up to
/// 6 MiB here), so the branches stop taking interval snapshots before the
/// tree passes its budget, and say so; without the bound the two
/// timelines' 4,000 snapshots would hold gigabytes.
#[test]
fn a_clog_of_thousands_of_frames_snapshotted_every_millisecond_stays_within_the_budget() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "clog.toml",
        "[[draw.fault]]\nkind = \"clog\"\nevery = \"50ms\"\nduration = \"30s\"\ntargets = [[1]]\n",
    );
    let script = r#"echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
hvsim-node 0 ping -s 60000 -c 100 -i 0.01 -w 3 10.0.0.2 | tail -2"#;
    let out = dir.path().join("out");
    let v = explore_json(
        &[
            "--linux",
            "--nodes",
            "2",
            "--seed",
            "5",
            "--fault-plan",
            plan.to_str().unwrap(),
            "--init-cmd",
            script,
            "--branches",
            "2",
            "--snapshot-every",
            "1ms",
            "--snapshot-memory",
            "160M",
        ],
        &out,
    );
    assert!(fault(&v, "net.clog")["landed"].as_u64().unwrap() > 4096, "{}", v["faults"]);
    let tree = &v["summary"]["tree"];
    let (peak, budget, root) = (
        tree["peak_bytes"].as_u64().unwrap(),
        tree["budget_bytes"].as_u64().unwrap(),
        tree["root_bytes"].as_u64().unwrap(),
    );
    assert_eq!(budget, 160 << 20);
    assert!(peak <= budget, "the snapshots went past the budget: {tree}");
    assert!(tree["bytes"].as_u64().unwrap() > root, "snapshots were taken while there was room: {tree}");
    assert!(tree["snapshots_skipped"].as_u64().unwrap() > 1000, "and not once there was none: {tree}");
    let md = read(&latest(&out).join("report.md"));
    assert!(md.contains("interval and draw snapshots not taken, to stay within it"), "{md}");
}
