//! Booting hvsim's Linux guest (issues: "Boot a real Linux kernel
//! deterministically", and the Linux part of "Whole-VM snapshots"). The
//! first run on a machine builds the guest kernel (a few minutes, then
//! cached); a boot takes ~25 s on the nested development host, once per
//! machine shape (the boot cache keeps it), so these tests boot only where
//! their assertions need it: once, to compare a boot with a cached one.

mod common;

use common::*;
use serde_json::Value;

/// Epoch of the guest's RTC (`hvsim_vmm::devices::rtc::DEFAULT_EPOCH`).
const EPOCH: u64 = 1_767_225_600;
const COMMAND: &str = "head -c 32 /dev/urandom | sha256sum; sleep 2; cat /proc/uptime; date -u +%s";

fn boot(seed: &str, command: &str) -> (Value, i32) {
    run_json(&["--linux", "--seed", seed, "--init-cmd", command])
}

#[test]
fn linux_boots_replays_and_follows_the_seed() {
    if !linux_available() {
        return;
    }
    let (a1, code) = boot("1", &format!("{COMMAND}; true"));
    assert_eq!(code, 0, "{a1}");
    assert_eq!((a1["end"].as_str(), a1["exit_status"].as_u64()), (Some("exit"), Some(0)));
    // Ran once: at most `expected`, and where the host lets user mode read
    // the TSC without a trap, the reasons say so.
    assert_eq!(a1["replayable"], "expected", "{}", a1["replayable_reasons"]);
    assert_eq!(
        a1["replayable_reasons"].to_string().contains("bypass hvsim"),
        user_rdtsc_leaks(&a1),
        "{}",
        a1["replayable_reasons"]
    );
    assert!(matches!(a1["boot"]["kind"].as_str(), Some("saved" | "cached")), "{}", a1["boot"]);
    // The second run of seed 1 boots instead of restoring the boot cache's
    // machine, and saves a snapshot in the middle of `sleep 2`: neither may
    // change anything, and a new process restoring the snapshot must finish
    // the run exactly as the uninterrupted one did.
    let dir = tempfile::tempdir().unwrap();
    let snap = dir.path().join("linux.snap");
    let (a2, _) = run_json(&[
        "--linux",
        "--seed",
        "1",
        "--init-cmd",
        &format!("{COMMAND}; true"),
        "--cold-boot",
        "--snapshot-at",
        "1s",
        "--save-snapshot",
        snap.to_str().unwrap(),
    ]);
    assert_eq!(a2["boot"]["kind"], "cold");
    let replayed = replay_snapshot(&snap, &[]);
    for field in ["trace_hash", "memory_hash", "console", "exits", "vtime_ns", "end"] {
        assert_eq!(a1[field], a2[field], "{field} differs between two runs of seed 1 (cached and cold boot)");
        assert_eq!(a1[field], replayed[field], "{field} differs after restoring the snapshot");
    }

    let (b, code) = boot("2", &format!("{COMMAND}; exit 7"));
    assert_eq!(code, 3, "a non-zero guest status gives exit code 3");
    assert_eq!(b["exit_status"], 7);

    let out_a = command_output(&a1);
    let out_b = command_output(&b);
    assert_eq!(out_a.len(), 3, "{out_a:?}");
    assert!(out_a[0].ends_with("  -") && out_a[0].len() == 67, "{out_a:?}");
    assert_ne!(out_a[0], out_b[0], "/dev/urandom must follow the seed");

    // `sleep 2` slept two virtual seconds: uptime and date show virtual time.
    let uptime: f64 = out_a[1].split_whitespace().next().unwrap().parse().unwrap();
    let vtime = a1["vtime_ns"].as_u64().unwrap() as f64 / 1e9;
    assert!((2.0..=vtime).contains(&uptime), "uptime {uptime} vs vtime {vtime}");
    let date: u64 = out_a[2].trim().parse().unwrap();
    assert!(date >= EPOCH + 2 && date <= EPOCH + vtime.ceil() as u64, "date {date}");
}

#[test]
fn user_rdtsc_is_virtual_time_where_the_host_traps_it() {
    if !linux_available() {
        return;
    }
    let out = output(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_slice(&out.stdout).expect("doctor prints JSON");
    if doctor["probes"]["user_rdtsc_traps"] != true {
        // Nothing can make RDTSC deterministic here; what matters is that
        // hvsim says so instead of pretending.
        let limits = doctor["guarantees"].to_string();
        assert!(limits.contains("RDTSC does not trap"), "{limits}");
        skipping("the RDTSC replay check: this host does not trap user-mode RDTSC (a host limit, reported)", true);
        return;
    }
    let (r1, code) = boot("5", "/init rdtsc 5");
    assert_eq!(code, 0);
    let (r2, _) = boot("5", "/init rdtsc 5");
    let values = command_output(&r1);
    assert_eq!(values.len(), 5);
    assert_eq!(values, command_output(&r2), "RDTSC values differ between runs of one seed");
    let vtime = r1["vtime_ns"].as_u64().unwrap();
    for v in &values {
        let t: u64 = v.parse().unwrap();
        assert!(t <= vtime, "RDTSC {t} is not virtual time (run ended at {vtime} ns)");
    }
}

/// The kernel's RDTSC/RDTSCP emulation (its #GP and #UD handlers' answer
/// where the hardware traps these instructions), run on real instruction
/// bytes through the kernel's test ioctl, so it is checked on every host,
/// this one included: virtual time, the right length, TSC_AUX 0 for
/// RDTSCP, anything else refused, and the same values for the same seed.
#[test]
fn the_rdtsc_emulation_answers_with_virtual_time_on_every_host() {
    if !linux_available() {
        return;
    }
    let command = "/init emulate-tsc; sleep 0.5; /init emulate-tsc";
    let (a, code) = boot("5", command);
    assert_eq!(code, 0, "{}", a["console"]);
    let (b, _) = boot("5", command);
    let lines = command_output(&a);
    assert_eq!(lines, command_output(&b), "the emulation answered differently for the same seed");
    assert_eq!((&a["trace_hash"], &a["memory_hash"]), (&b["trace_hash"], &b["memory_hash"]));
    let field = |line: &str, name: &str| -> u64 {
        let v = line.split_whitespace().find_map(|w| w.strip_prefix(&format!("{name}="))).expect(name);
        match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => v.parse().unwrap(),
        }
    };
    let of = |name: &str| -> Vec<&String> {
        lines.iter().filter(|l| l.starts_with(&format!("emulate-tsc: {name} "))).collect()
    };
    let (rdtsc, rdtscp, nop) = (of("rdtsc"), of("rdtscp"), of("nop"));
    assert_eq!((rdtsc.len(), rdtscp.len(), nop.len()), (2, 2, 2), "{lines:?}");
    assert!(nop.iter().all(|l| l.contains("refused")), "a NOP is not emulated: {lines:?}");
    let vtime = a["vtime_ns"].as_u64().unwrap();
    for l in &rdtsc {
        assert_eq!((field(l, "length"), field(l, "cx")), (2, 0xdead), "RDTSC: 2 bytes, RCX untouched: {l}");
    }
    for l in &rdtscp {
        assert_eq!((field(l, "length"), field(l, "cx")), (3, 0), "RDTSCP: 3 bytes, TSC_AUX 0: {l}");
    }
    // Virtual nanoseconds: in order, within the run, 0.5 s apart across the sleep.
    let t: Vec<u64> = [rdtsc[0], rdtscp[0], rdtsc[1], rdtscp[1]].iter().map(|l| field(l, "tsc")).collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]) && t[3] <= vtime, "{t:?} (run ended at {vtime} ns)");
    let across = t[2] - t[1];
    assert!((500_000_000..600_000_000).contains(&across), "0.5 s of sleep read as {across} ns");
}

#[test]
fn a_linux_program_using_the_c_sdk_reports_into_the_explorer() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk/c");
    let binary = dir.path().join("sdk-example");
    let cc = std::process::Command::new("gcc")
        .args(["-std=gnu11", "-O1", "-static", "-s", "-I", sdk, "-o"])
        .arg(&binary)
        .arg(format!("{sdk}/example.c"))
        .status()
        .expect("gcc runs");
    assert!(cc.success(), "building the SDK example failed");
    // Any language can speak the protocol: here, the shell.
    let shell_line = r#"{"antithesis_assert":{"id":"shell: any language can report","message":"shell: any language can report","condition":true,"hit":true,"must_hit":true,"assert_type":"always","display_type":"Always","location":{},"details":null}}"#;
    let command = format!("/bin/sdk-example && echo '{shell_line}' > $HVSIM_SDK_OUTPUT");
    let out = dir.path().join("out");
    let guest_file = format!("{}:/bin/sdk-example", binary.display());
    let args = ["--linux", "--init-cmd", &command, "--guest-file", &guest_file, "--branches", "4"];
    let r = explore_json(&args, &out);
    assert_eq!(r["summary"]["setup_complete"], true, "{}", r["summary"]);
    let find = |msg: &str| -> Value {
        r["assertions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["message"] == msg)
            .cloned()
            .unwrap_or_else(|| panic!("{msg} missing from the report: {}", r["assertions"]))
    };
    // Later branches may start from snapshots taken after an assertion, so
    // hits count at least once, not once per branch.
    assert_eq!(find("example: arithmetic works")["verdict"], "held");
    assert!(find("example: the random value is sometimes even")["hits"].as_u64().unwrap() >= 1);
    assert_eq!(find("example: r mod 100 stays below 100")["verdict"], "held");
    // Registered by hvsim_init() though never reached.
    let never = find("example: the impossible branch");
    assert_eq!((never["registered"].as_bool(), never["hits"].as_u64()), (Some(true), Some(0)));
    assert_eq!(find("shell: any language can report")["verdict"], "held");
    assert!(r["events"]["example_finished"].as_u64().unwrap() >= 1);
    assert!(latest(&out).join("report.md").exists());
}

/// Patch 0005: clock reads come from hvsim's clock page through the vDSO,
/// without a system call or an exit, and a program that spins on the clock
/// still sees time move (every 256 reads within one exit, a read falls back
/// to the system call, whose exits move time): the same reads every run.
#[test]
fn clock_reads_come_from_the_clock_page_and_a_spinning_reader_sees_time_move() {
    if !linux_available() {
        return;
    }
    let exits = |reads: u32| {
        let (v, code) = boot("4", &format!("/init bench clock {reads}"));
        assert_eq!(code, 0, "{v}");
        v["exits"].as_u64().unwrap()
    };
    // Through the system call, each read would cost two port exits.
    let extra = exits(3200) - exits(0);
    assert!(extra < 3200 / 10, "3200 clock reads cost {extra} exits");

    let spin = || {
        let (v, code) = boot("4", "/init bench clock-spin 2");
        assert_eq!(code, 0, "{v}");
        v
    };
    let (a, b) = (spin(), spin());
    assert_eq!(a["trace_hash"], b["trace_hash"], "the same seed, the same clock reads");
    if !user_rdtsc_leaks(&a) {
        assert_eq!(a["memory_hash"], b["memory_hash"]);
    }
    let line = command_output(&a).into_iter().find(|l| l.starts_with("clock-spin")).expect("the spin's report");
    let reads: u64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    // 2 ms at 2 µs of virtual time per fallback: ~1000 fallbacks, 256 reads
    // from the page for each.
    assert!(reads > 10_000, "{line}: most reads should come from the clock page");
}

/// A workload that runs for seconds and checks at its end (the shape of a
/// Jepsen test) is checked in every timeline: branches run to the end of
/// their timeline (the guest's end here), where `--slice` stops them
/// first and the check is never reached.
#[test]
fn whole_timelines_reach_a_check_at_the_end_of_a_long_workload() {
    if !linux_available() {
        return;
    }
    let script = r#"mkfifo /tmp/p
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
i=0; while [ $i -lt 30 ]; do read -t 0.1 _ <> /tmp/p; i=$((i + 1)); done
echo '{"antithesis_assert":{"id":"the final check passes","message":"the final check passes","condition":false,"hit":true,"must_hit":true,"assert_type":"always","display_type":"Always","location":{},"details":null}}' > $HVSIM_SDK_OUTPUT
"#;
    let dir = tempfile::tempdir().unwrap();
    let whole = explore_json(&["--linux", "--init-cmd", script, "--branches", "2"], &dir.path().join("whole"));
    let s = &whole["summary"];
    assert_eq!(s["bugs"], 1, "{s}");
    assert_eq!((s["timelines"]["ended"].as_u64(), s["timelines"]["at_limit"].as_u64()), (Some(2), Some(0)), "{s}");
    let sliced = explore_json(
        &["--linux", "--init-cmd", script, "--branches", "2", "--slice", "500ms"],
        &dir.path().join("sliced"),
    );
    let s = &sliced["summary"];
    assert_eq!(s["bugs"], 0, "{s}");
    assert_eq!(s["timelines"]["at_limit"], 2, "{s}");
}

/// `--time` spent while a branch that has already failed runs on: its bug
/// is kept (the record written, exit status 8, and it replays), as an
/// interruption keeps it; the ending says the time budget was spent after
/// the branch, and the budget holds though the guest spins without exits.
/// (Before, the merge stopped at the round's first branch once the clock
/// had passed the budget, and the exploration ended clean, exit 0.)
#[test]
fn a_branch_that_failed_keeps_its_bug_when_the_time_budget_runs_out() {
    if !linux_available() {
        return;
    }
    let script = r#"echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
echo '{"antithesis_assert":{"id":"never false","message":"never false","condition":false,"hit":true,"must_hit":true,"assert_type":"always","display_type":"Always","location":{},"details":null}}' > $HVSIM_SDK_OUTPUT
while :; do :; done
"#;
    let dir = tempfile::tempdir().unwrap();
    // The root first: saved, then restored in a moment below, so that the
    // budget is spent in the branch rather than the boot.
    let root = explore_json(&["--linux", "--init-cmd", script, "--branches", "0"], &dir.path().join("root"));
    assert_eq!(root["summary"]["setup_complete"], true, "{}", root["summary"]);
    let args = ["--linux", "--init-cmd", script, "--time", "20s", "--timeline-limit", "1000s", "--batch", "1"];
    let r = explore_json(&args, &dir.path().join("timed"));
    let s = &r["summary"];
    assert_eq!(s["root_restored"], true, "{s}");
    assert_eq!(s["bugs"], 1, "{s}");
    assert_eq!(s["ending"], serde_json::json!({"how": "time-spent", "branches": 1}), "{s}");
    // The shell spins in user mode, where the guest exits only at the
    // watchdog (a minute): the raised interrupt kicks it out at once.
    assert!(s["wall_ms"].as_u64().unwrap() < 50_000, "--time 20s held only at the watchdog: {s}");
    let run = latest(&dir.path().join("timed"));
    let md = read(&run.join("report.md"));
    assert!(md.contains("the time budget was spent after 1 branch(es)"), "{md}");
    let records: Vec<_> = std::fs::read_dir(run.join("bugs")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(records.len(), 1, "the bug's record is written: {records:?}");
    replay_reproduces(records[0].to_str().unwrap(), &[]);
}

/// `hvsim run` prints the guest's console as the run goes, not when it
/// ends: the guest's first line arrives while the guest still sleeps
/// through a day of virtual time (hours of wall time here, at the nested
/// host's rate for an idle kernel), and the run is then stopped.
#[test]
fn hvsim_run_shows_the_console_as_it_runs() {
    use std::io::BufRead;
    if !linux_available() {
        return;
    }
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("hvsim"))
        .args(["run", "--linux", "--vtime-limit", "1d", "--init-cmd", "echo first line; sleep 86400; echo too late"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let seen = std::thread::spawn(move || {
        std::io::BufReader::new(stdout).lines().map_while(Result::ok).find(|l| l.contains("first line"))
    });
    // The line comes within a boot (restored from the boot cache, or made).
    let waited = std::time::Instant::now();
    while !seen.is_finished() && waited.elapsed() < std::time::Duration::from_secs(300) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.is_finished(), "no console line on stdout within 5 minutes");
    let line = seen.join().unwrap().unwrap_or_default();
    assert!(line.trim_end().ends_with("first line"), "{line:?}");
    assert!(running, "the run had ended before its first line was read");
}

/// Every node pings the next, in a ring: a line for each ping that got no
/// reply, and one at the end. One ping per node, not per pair: a process
/// costs most of a second of emulated kernel here, and each frame an
/// interrupt that the eight lines' other devices check too (16 each at 64
/// nodes): a ping per pair would take hours, broadcast pings answered by
/// every node (ARP requests from each replier to every node) over ten
/// minutes.
fn ring(nodes: u16) -> String {
    format!(
        r#"i=0
while [ $i -lt {nodes} ]; do
  next=$(( (i + 1) % {nodes} + 1 ))
  hvsim-node $i ping -c 1 -W 5 10.0.0.$next > /dev/null || echo "node $i: no reply from 10.0.0.$next"
  i=$((i + 1))
done
echo "ring of {nodes} done""#
    )
}

/// The most nodes a run of cheap nodes (no containers) is asked for in the
/// default suite: every device announced on the kernel command line (far
/// past x86's 2 KiB), every node's NIC sending, receiving and answering
/// through the switch (and every ARP request reaching every node). That
/// the run is a function of its seed at this size, boot included, is the
/// slow suite's (below): each run costs minutes here.
#[test]
fn sixty_four_nodes_boot_and_every_node_answers_its_neighbour() {
    if !linux_available() {
        return;
    }
    let (a, code) = run_json(&["--linux", "--nodes", "64", "--seed", "3", "--init-cmd", &ring(64)]);
    assert_eq!(code, 0, "{}", a["console"]);
    assert_eq!(command_output(&a), ["ring of 64 done"], "every ping answered");
}

/// Two cold boots of 64 nodes, then the ring: the same trace, memory,
/// console and exits, to the nanosecond of virtual time.
#[test]
#[ignore = "slow: two cold boots of 64 nodes and their rings take about 10 minutes here (ci/test.sh --slow)"]
fn sixty_four_nodes_boot_and_ping_the_same_twice() {
    if !linux_available() {
        return;
    }
    let script = ring(64);
    let args = ["--linux", "--nodes", "64", "--seed", "3", "--cold-boot", "--init-cmd", &script];
    let (a, code) = run_json(&args);
    assert_eq!(code, 0, "{}", a["console"]);
    assert_eq!(command_output(&a), ["ring of 64 done"], "every ping answered");
    let (b, _) = run_json(&args);
    assert_eq!(a["boot"]["kind"], "cold");
    for field in ["trace_hash", "memory_hash", "console", "exits", "vtime_ns", "end"] {
        assert_eq!(a[field], b[field], "{field} differs between two runs of 64 nodes");
    }
}
