//! The deterministic machine, exercised through `hvsim run` on the built-in
//! raw guests (issue: "Deterministic single-vCPU machine on KVM"). That
//! every deterministic guest replays exactly is proved in snapshot.rs,
//! which runs each one's seed with and without snapshots.

mod common;

use common::*;

#[test]
fn entropy_depends_on_the_seed() {
    if !kvm_available() {
        return;
    }
    let (a, code) = run_json(&["--guest", "entropy", "--seed", "1"]);
    assert_eq!(code, 0);
    let (b, _) = run_json(&["--guest", "entropy", "--seed", "2"]);
    assert_ne!(a["trace_hash"], b["trace_hash"]);
    assert_ne!(a["console"], b["console"]);
    // The coin flips also arrive as a message on the hypercall channel.
    let msg = a["messages"][0].as_str().unwrap();
    assert!(msg.starts_with("flips: ") && msg.len() == 23, "{msg}");
    assert!(a["console"].as_str().unwrap().contains(&msg[7..]));
}

#[test]
fn idle_sleeps_an_hour_with_a_handful_of_exits() {
    if !kvm_available() {
        return;
    }
    let (v, code) = run_json(&["--guest", "idle", "--seed", "1"]);
    assert_eq!(code, 0);
    assert_eq!(v["end"], "exit");
    assert!(v["vtime_ns"].as_u64().unwrap() >= 3_600_000_000_000, "{v}");
    // Time compression: the hour is one jump, not a busy wait. (Wall time is
    // reported in the summary and by the README; not asserted here.)
    assert!(v["exits"].as_u64().unwrap() < 500, "{}", v["exits"]);
}

#[test]
fn timer_takes_interrupts_in_ring3_and_a_one_shot() {
    if !kvm_available() {
        return;
    }
    let (v, code) = run_json(&["--guest", "timer", "--seed", "1"]);
    assert_eq!(code, 0, "{v}");
    let console = v["console"].as_str().unwrap();
    let ticks: u64 = console
        .split("ticks ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no tick count in {console}"));
    assert!(ticks >= 10, "periodic PIT delivered only {ticks} interrupts");
    assert!(console.contains("one-shot fired"), "{console}");
    assert_eq!(v["counters"]["injected"].as_u64().unwrap(), ticks + 1);
}

#[test]
fn spin_is_rescued_by_the_watchdog_and_marked_not_replayable() {
    if !kvm_available() {
        return;
    }
    let (v, code) = run_json(&["--guest", "spin", "--seed", "1", "--watchdog", "300ms"]);
    assert_eq!(code, 0);
    assert_eq!(v["replayable"], "no");
    let reasons = v["replayable_reasons"].to_string();
    assert!(reasons.contains("watchdog"), "{reasons}");
    assert!(v["counters"]["watchdog_kicks"].as_u64().unwrap() >= 1);
    // Executing it twice cannot make it better.
    let (v, _) = run_json(&["--guest", "spin", "--seed", "1", "--watchdog", "300ms", "--verify"]);
    assert_eq!(v["replayable"], "no", "{}", v["replayable_reasons"]);
}

#[test]
fn verify_executes_twice_and_says_verified() {
    if !kvm_available() {
        return;
    }
    let (v, code) = run_json(&["--guest", "timer", "--seed", "3", "--verify"]);
    assert_eq!(code, 0);
    assert_eq!(v["replayable"], "verified", "{}", v["replayable_reasons"]);
    assert_eq!(v["replayable_reasons"], serde_json::json!([]));
    let (once, _) = run_json(&["--guest", "timer", "--seed", "3"]);
    assert_eq!(once["replayable"], "expected");
    assert_eq!(once["trace_hash"], v["trace_hash"], "--verify reports the same run");
}

#[test]
fn misbehaving_guests_end_with_a_clear_reason() {
    if !kvm_available() {
        return;
    }
    for (guest, end, detail) in [
        ("bad-port", "guest-error", "unclaimed port 0x1234"),
        ("bad-hypercall", "guest-error", "unknown hypercall command 0x7f"),
        ("wild-memory", "guest-error", "unclaimed address 0x30000000"),
        ("page-fault", "guest-panic", "code 0xe"),
        ("triple-fault", "triple-fault", "triple fault"),
    ] {
        let (v, code) = run_json(&["--guest", guest, "--seed", "3"]);
        assert_eq!(v["end"], end, "{guest}: {v}");
        assert!(v["end_detail"].as_str().unwrap().contains(detail), "{guest}: {}", v["end_detail"]);
        assert_eq!(code, 4, "{guest}: abnormal end exit code");
    }
}

#[test]
fn vtime_limit_ends_a_run() {
    if !kvm_available() {
        return;
    }
    let (v, code) = run_json(&["--guest", "idle", "--seed", "1", "--vtime-limit", "10m"]);
    assert_eq!(code, 0);
    assert_eq!(v["end"], "vtime-limit");
    assert_eq!(v["vtime_ns"].as_u64().unwrap(), 600_000_000_000);
}

#[test]
fn log_records_every_exit_and_diff_log_finds_divergence() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str, seed: &str| {
        let path = dir.path().join(name);
        let (v, _) = run_json(&["--guest", "entropy", "--seed", seed, "--log", path.to_str().unwrap()]);
        (path, v)
    };
    let (a, va) = log("a.log", "1");
    let (a2, _) = log("a2.log", "1");
    let (b, _) = log("b.log", "2");
    // Every event after the log began (its header says how many came
    // before: the machine's start, which records the seed).
    let text = read(&a);
    let events = text.lines().filter(|l| !l.starts_with('#')).count() as u64;
    let before: u64 = text.lines().find_map(|l| l.strip_prefix("# events before ")).expect("header").parse().unwrap();
    assert_eq!(before, 1, "{text:.300}");
    assert_eq!(before + events, va["exits"].as_u64().unwrap());

    let same = output(&["diff-log", a.to_str().unwrap(), a2.to_str().unwrap()]);
    assert!(same.status.success());
    assert!(String::from_utf8_lossy(&same.stdout).contains("identical"));

    let diff = output(&["diff-log", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(diff.status.code(), Some(1));
    let text = String::from_utf8_lossy(&diff.stdout);
    // The seeds first differ in the random bytes the guest reads.
    assert!(text.contains("logs diverge at event"), "{text}");
    assert!(text.contains(&format!("port={:#x}", hvsim_abi::hc::DATA)), "{text}");
}

#[test]
fn without_kvm_run_fails_with_one_line() {
    let out = hvsim().env("HVSIM_KVM_PATH", "/nonexistent/kvm").args(["run", "--guest", "idle"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("cannot open /nonexistent/kvm"), "{err}");
}

#[test]
fn bad_fault_plans_fail_with_one_line_before_anything_boots() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml");
    for (text, needle) in [
        (Some("[network]\nbogus = 1\n"), "line 2: unknown field `bogus`"),
        (Some("[network]\ndrop = 2.0\n"), "network.drop: probability 2 is not between 0 and 1"),
        (Some("[[crash]]\nnode = 5\nat = \"1s\"\n"), "node 5 does not exist (the run has 2)"),
        (None, "cannot read fault plan"),
    ] {
        let plan = match text {
            Some(t) => {
                let p = dir.path().join("plan.toml");
                std::fs::write(&p, t).unwrap();
                p
            }
            None => missing.clone(),
        };
        // No KVM needed: the plan is checked before the host is touched.
        let out = hvsim()
            .env("HVSIM_KVM_PATH", "/nonexistent/kvm")
            .args(["run", "--linux", "--nodes", "2", "--fault-plan", plan.to_str().unwrap()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(needle) && err.contains(plan.to_str().unwrap()), "{needle}: {err}");
    }
    let out = output(&["run", "--linux", "--nodes", "129"]);
    assert_eq!(out.status.code(), Some(2), "more nodes than hvsim supports is a usage error");
}

#[test]
fn unknown_guest_and_list_guests() {
    let out = output(&["run", "--guest", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no built-in guest `nope`"));
    let out = output(&["run", "--list-guests"]);
    assert!(out.status.success());
    let list = String::from_utf8_lossy(&out.stdout);
    for name in ["timer", "idle", "entropy", "spin", "serial"] {
        assert!(list.lines().any(|l| l.starts_with(name)), "{name} missing from {list}");
    }
}
