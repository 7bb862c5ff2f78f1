//! Nothing a user or a file can do crashes, hangs or silently misleads
//! hvsim (issue: "Nothing a user or a file can do..."). Each test is a row
//! of the issue's table: damaged files and odd values, each of which must
//! end in one clear line (`hvsim: error: ...`, naming the flag or file) and
//! a non-zero exit, or in a correct result.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// Runs hvsim and returns its one-line error, checking the exit status,
/// the single line, the common prefix and that no OS error text repeats.
fn one_line_error(args: &[&str], status: i32) -> String {
    let out = output(args);
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
    assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.starts_with("hvsim: error: "), "{args:?}: {err}");
    assert!(err.matches("os error").count() <= 1, "{args:?}: the OS error twice: {err}");
    err
}

/// A snapshot file with its header JSON edited and its lengths and
/// checksum made consistent again (what a careful forger would do).
fn reheadered(bytes: &[u8], edit: impl Fn(&mut Value)) -> Vec<u8> {
    let header_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[24..24 + header_len]).unwrap();
    edit(&mut header);
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = bytes[..16].to_vec();
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes[24 + header_len..bytes.len() - 32]);
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&out);
    out.extend_from_slice(&digest);
    out
}

#[test]
fn a_snapshot_header_with_a_huge_ram_size_is_refused_before_anything_is_allocated() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.snap");
    let (_, code) = run_json(&["--guest", "timer", "--snapshot-at", "1ms", "--save-snapshot", good.to_str().unwrap()]);
    assert_eq!(code, 0);
    let bytes = std::fs::read(&good).unwrap();
    for (name, edit) in [
        (
            "ram",
            Box::new(|h: &mut Value| h["machine"]["spec"]["ram_size"] = Value::from(1u64 << 50))
                as Box<dyn Fn(&mut Value)>,
        ),
        ("nodes", Box::new(|h: &mut Value| h["machine"]["spec"]["virtio"]["nodes"] = Value::from(60000))),
    ] {
        let path = dir.path().join(format!("{name}.snap"));
        std::fs::write(&path, reheadered(&bytes, edit)).unwrap();
        for cmd in
            [vec!["replay", "--snapshot", path.to_str().unwrap()], vec!["snapshot", "info", path.to_str().unwrap()]]
        {
            let err = one_line_error(&cmd, 1);
            assert!(err.contains(path.to_str().unwrap()) && err.contains("header"), "{name}: {err}");
        }
    }
}

#[test]
fn limits_are_checked_up_front_with_the_flag_the_value_and_the_range() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--guest", "demo", "--vtime-limit", "584y"], "0s to 365d"),
        (&["run", "--guest", "demo", "--watchdog", "0s"], "at least 1ms"),
        (&["bench", "exits", "--exits", "0"], "1..=100000000"),
        (&["bench", "exits", "--repeat", "0"], "1 to 1000"),
        (&["bench", "explore", "--seeds", "0"], "1..=1000"),
        (&["run", "--guest", "timer", "--seed", "-1"], "seeds are 0 to 18446744073709551615"),
        (&["explore", "--reexecute", "1000"], "0..=100"),
    ];
    for (args, range) in cases {
        let err = one_line_error(args, 2);
        let (flag, value) = (args[args.len() - 2], args[args.len() - 1]);
        assert!(err.contains(flag) && err.contains(value) && err.contains(range), "{args:?}: {err}");
    }
    // Sizes: RAM and disks beyond what hvsim gives a machine.
    let err = one_line_error(&["run", "--linux", "--nodes", "1", "--disk-size", "1000G"], 1);
    assert!(err.contains("--disk-size") && err.contains("64 GiB"), "{err}");
    // Guest RAM this host cannot hold is refused before anything boots:
    // the most a machine may have, or 64 workers' machines of 8 GiB (a
    // host that could hold them would boot them, so it is not asked).
    let available = hvsim_vmm::host::available_memory().expect("MemAvailable");
    if available < 64 << 30 {
        let err = one_line_error(&["run", "--linux", "--mem", "64G", "--init-cmd", "true"], 1);
        assert!(err.contains("--mem") && err.contains("available"), "{err}");
    }
    if (8 << 30..64 * (8 << 30)).contains(&available) {
        let err = one_line_error(&["explore", "--linux", "--mem", "8G", "--workers", "64", "--branches", "1"], 1);
        assert!(err.contains("64 machines of 8.0 GiB") && err.contains("--workers"), "{err}");
    }
}

#[test]
fn fault_plan_mistakes_are_one_line_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, expect) in [
        ("type", "[network]\ndrop = \"lots\"\n", "line 2: expected a number, or a range"),
        ("duration", "[network]\nlatency = 5\n", "line 2: expected a duration"),
        ("syntax", "[network\ndrop = 0.1\n", "line 1: invalid table header"),
    ] {
        let plan = dir.path().join(format!("{name}.toml"));
        std::fs::write(&plan, text).unwrap();
        let err = one_line_error(&["run", "--linux", "--nodes", "2", "--fault-plan", plan.to_str().unwrap()], 1);
        assert!(err.contains(plan.to_str().unwrap()) && err.contains(expect), "{name}: {err}");
    }
}

#[test]
fn paths_of_the_wrong_kind_fail_before_the_run_with_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let f = file.to_str().unwrap();
    // A directory where a file goes, a file where a directory goes: refused
    // before anything runs (nothing on stdout), naming the path.
    for (args, expect) in [
        (vec!["run", "--guest", "timer", "--log", d], "is a directory"),
        (vec!["run", "--guest", "timer", "--snapshot-at", "1ms", "--save-snapshot", d], "is a directory"),
        (vec!["explore", "--out", f, "--branches", "1"], "is a file"),
        (vec!["replay", "--snapshot", d], "not a regular file but a directory"),
        (vec!["replay", d], "not a regular file but a directory"),
    ] {
        let out = output(&args);
        assert!(out.stdout.is_empty(), "{args:?} ran: {}", String::from_utf8_lossy(&out.stdout));
        let err = one_line_error(&args, 1);
        assert!(err.contains(expect) && (err.contains(d) || err.contains(f)), "{args:?}: {err}");
    }
}

/// Runs hvsim, killing it if it has not finished within `limit`.
fn output_within(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("hvsim"))
        .env(SCHEMA_CHECK, "1")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("hvsim starts");
    let started = Instant::now();
    while child.try_wait().expect("waiting for hvsim").is_none() {
        if started.elapsed() > limit {
            child.kill().expect("killing hvsim");
            panic!("hvsim {args:?} still ran after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("hvsim's output")
}

/// A device that never ends (`/dev/zero`) or a FIFO nobody writes to, where
/// a file goes: refused before it is opened, never read without end or
/// waited on. Files read whole are bounded too.
#[test]
fn devices_and_fifos_are_refused_without_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (p, kind) in [("/dev/zero", "a character device"), (fifo.to_str().unwrap(), "a FIFO")] {
        let guest_file = format!("{p}:/x");
        for args in [
            vec!["replay", p],
            vec!["replay", "--snapshot", p],
            vec!["snapshot", "info", p],
            vec!["diff-log", p, p],
            vec!["image", "load", p],
            vec!["run", "--compose", p],
            vec!["run", "--linux", "--init-cmd", "true", "--fault-plan", p],
            vec!["run", "--linux", "--init-cmd", "true", "--guest-file", &guest_file],
            vec!["run", "--linux", "--init-cmd", "true", "--nodes", "1", "--disk-image", p],
        ] {
            if args[0] == "run" && !kvm_available() {
                continue; // without KVM, `run` stops at that first
            }
            let out = output_within(&args, Duration::from_secs(30));
            let err = String::from_utf8_lossy(&out.stderr).trim_end().to_owned();
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.contains(&format!("{p}: not a regular file but {kind}"))
                    || err.contains(&format!("{p}): not a regular file but {kind}")),
                "{args:?}: {err}"
            );
        }
    }
    let big = dir.path().join("BUG-1.json");
    std::fs::write(&big, vec![b' '; 17 << 20]).unwrap();
    let err = one_line_error(&["replay", big.to_str().unwrap()], 1);
    assert!(err.contains("17825792 bytes, more than such a file can hold (16777216)"), "{err}");
}

#[test]
fn linux_only_flags_are_refused_for_a_raw_guest() {
    let err = one_line_error(
        &["run", "--guest", "timer", "--init-cmd", "X", "--nodes", "3", "--guest-file", "/etc/hosts:/x"],
        1,
    );
    assert!(err.contains("--init-cmd, --guest-file, --nodes apply only to Linux targets"), "{err}");
    assert!(err.contains("`timer`"), "{err}");
    let err = one_line_error(&["explore", "--guest", "demo", "--init-cmd", "true"], 1);
    assert!(err.contains("--init-cmd applies only to Linux targets"), "{err}");
    // Flags clap itself ties to a Linux target say which targets.
    let err = one_line_error(&["explore", "--guest", "demo", "--mem", "256M"], 2);
    assert!(err.contains("required arguments were not provided") && err.contains("--linux"), "{err}");
}

#[test]
fn command_line_errors_look_like_every_other_error() {
    for args in [&["run", "--bogus"][..], &["frobnicate"], &["run", "--guest", "timer", "--seed", "banana"]] {
        let err = one_line_error(args, 2);
        assert!(err.ends_with("(see --help)"), "{err}");
    }
}

#[test]
fn hvsim_log_debug_shows_explorer_snapshot_and_fault_decisions() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = common::hvsim()
        .args(["explore", "--seed", "4", "--branches", "40", "--out", dir.path().to_str().unwrap()])
        .env("HVSIM_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8), "seed 4 finds the demo's bug in 40 branches");
    let err = String::from_utf8_lossy(&out.stderr);
    for what in ["DEBUG branch", "snapshot restored", "snapshot taken", "something new", "bug=BUG-", "re-executed"] {
        assert!(err.contains(what), "no {what:?} at debug level: {}", &err[..err.len().min(2000)]);
    }
    assert!(!err.contains('\u{1b}'), "no terminal colours when stderr is not a terminal");
    // Quiet by default.
    let out = output(&["explore", "--seed", "4", "--branches", "40", "--out", dir.path().to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("DEBUG"));
    // Fault decisions, from a Linux run with a plan.
    let plan = dir.path().join("lat.toml");
    std::fs::write(&plan, "[network]\nlatency = \"1ms\"\n").unwrap();
    let out = common::hvsim()
        .args(["run", "--linux", "--nodes", "2", "--fault-plan", plan.to_str().unwrap()])
        .args(["--init-cmd", "hvsim-node 1 ping -c 1 10.0.0.1"])
        .env("HVSIM_LOG", "debug")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fault landed fault=\"net.latency\""));
}

#[test]
fn a_missing_file_names_itself() {
    let err = one_line_error(&["replay", "/nonexistent/BUG-1.json"], 1);
    assert!(err.contains("/nonexistent/BUG-1.json"), "{err}");
}

#[test]
fn diff_log_refuses_files_that_are_not_logs() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_log = dir.path().join("notes.txt");
    std::fs::write(&not_a_log, "1 1000 pio-out port=0x20\n").unwrap();
    let p = not_a_log.to_str().unwrap();
    let err = one_line_error(&["diff-log", p, p], 1);
    assert!(err.contains(p) && err.contains("not an hvsim determinism log"), "{err}");
    let err = one_line_error(&["diff-log", p, p, "--context", "5000"], 2);
    assert!(err.contains("--context"), "{err}");
}

#[test]
fn damaged_image_archives_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.tar");
    std::fs::write(&garbage, "not a tar archive at all").unwrap();
    let d = dir.path().to_str().unwrap();
    for (path, expect) in [
        (garbage.to_str().unwrap(), "broken tar stream"),
        (d, "not a docker-archive or OCI image layout"),
        ("/nonexistent/image.tar", "No such file or directory"),
    ] {
        let err = one_line_error(&["image", "load", path], 1);
        assert!(err.contains(path) && err.contains(expect), "{path}: {err}");
    }
}

/// `hvsim check --model set|queue`: a lost add and a duplicated dequeue
/// are named with exit 6, a valid history exits 0, one never read is
/// undecided (7), and a history that breaks the model is one line naming
/// the file and line.
#[test]
fn set_and_queue_histories_are_checked_with_what_went_missing() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, lines: &[&str]| {
        let p = dir.path().join(name);
        std::fs::write(&p, lines.join("\n")).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let adds = [
        r#"{"process":0,"type":"invoke","f":"add","value":1}"#,
        r#"{"process":0,"type":"ok","f":"add","value":1}"#,
        r#"{"process":1,"type":"invoke","f":"add","value":2}"#,
        r#"{"process":1,"type":"ok","f":"add","value":2}"#,
        r#"{"process":2,"type":"invoke","f":"read"}"#,
    ];
    let lost = file("lost.jsonl", &[&adds[..], &[r#"{"process":2,"type":"ok","f":"read","value":[2]}"#]].concat());
    let o = output(&["check", &lost, "--model", "set"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(6), "{said}");
    assert!(said.contains("INVALID: 2 acknowledged of 2 added: 1 lost [1]"), "{said}");
    let kept = file("kept.jsonl", &[&adds[..], &[r#"{"process":2,"type":"ok","f":"read","value":[1,2]}"#]].concat());
    assert_eq!(output(&["check", &kept, "--model", "set"]).status.code(), Some(0));
    let unread = file("unread.jsonl", &adds);
    assert_eq!(output(&["check", &unread, "--model", "set"]).status.code(), Some(7));
    let queue = file(
        "queue.jsonl",
        &[
            r#"{"process":0,"type":"invoke","f":"enqueue","value":"a"}"#,
            r#"{"process":0,"type":"ok","f":"enqueue","value":"a"}"#,
            r#"{"process":1,"type":"invoke","f":"dequeue"}"#,
            r#"{"process":1,"type":"ok","f":"dequeue","value":"a"}"#,
            r#"{"process":1,"type":"invoke","f":"drain"}"#,
            r#"{"process":1,"type":"ok","f":"drain","value":["a"]}"#,
        ],
    );
    let o = output(&["check", &queue, "--model", "queue", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((o.status.code(), v["verdict"].as_str()), (Some(6), Some("invalid")), "{v}");
    assert_eq!(v["keys"][0]["duplicated"], serde_json::json!(["a"]));
    let e = one_line_error(&["check", &lost, "--model", "queue"], 1);
    assert!(e.contains("lost.jsonl") && e.contains("line 1") && e.contains("not `add`"), "{e}");
}

/// `hvsim check --model list-append|rw-register --consistency MODEL`: a
/// write skew is not serializable (exit 6, the cycle in the JSON) and is
/// snapshot isolation (exit 0); `--consistency` on a model without
/// transactions, or a model hvsim does not know, is one line.
#[test]
fn transactional_histories_are_checked_against_the_isolation_level_asked() {
    let dir = tempfile::tempdir().unwrap();
    let skew = dir.path().join("skew.jsonl");
    std::fs::write(
        &skew,
        [
            r#"{"process":0,"type":"invoke","f":"txn","value":[["r","x",null],["r","y",null],["append","x",1]]}"#,
            r#"{"process":1,"type":"invoke","f":"txn","value":[["r","x",null],["r","y",null],["append","y",2]]}"#,
            r#"{"process":0,"type":"ok","f":"txn","value":[["r","x",[]],["r","y",[]],["append","x",1]]}"#,
            r#"{"process":1,"type":"ok","f":"txn","value":[["r","x",[]],["r","y",[]],["append","y",2]]}"#,
            r#"{"process":2,"type":"invoke","f":"txn","value":[["r","x",null],["r","y",null]]}"#,
            r#"{"process":2,"type":"ok","f":"txn","value":[["r","x",[1]],["r","y",[2]]]}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let skew = skew.to_str().unwrap();
    let o = output(&["check", skew, "--model", "list-append"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(6), "{said}");
    assert!(said.contains("NOT serializable: 3 transactions (3 ok, 0 info, 0 failed); G2-item (1)"), "{said}");
    assert!(said.contains("consistent with snapshot-isolation"), "{said}");
    let o = output(&["check", skew, "--model", "list-append", "--consistency", "snapshot-isolation", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((o.status.code(), v["verdict"].as_str()), (Some(0), Some("valid")), "{v}");
    assert_eq!(v["anomalies"][0]["what"], "T0 -rw-> T1 -rw-> T0");
    let e = one_line_error(&["check", skew, "--model", "set", "--consistency", "snapshot-isolation"], 1);
    assert!(e.contains("--consistency is for transactional models"), "{e}");
    let o = output(&["check", skew, "--model", "rw-register"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(e.contains("skew.jsonl: line 3: micro-operation [\"r\",\"x\",[]]: a value is"), "{e}");
    let o = output(&["check", skew, "--model", "list-append", "--consistency", "linearizable"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown consistency model \"linearizable\""));
}

/// `hvsim check --model lease`: two holders at once are named with both
/// acquires' lines and whose fault it looks like (exit 6), a hand-over is
/// valid, and a history without virtual times is one line naming the line.
#[test]
fn lease_histories_are_checked_in_virtual_time() {
    let dir = tempfile::tempdir().unwrap();
    let event = |p: u64, kind: &str, f: &str, ms: u64| {
        let value = if f == "acquire" { "1000" } else { "null" };
        format!(r#"{{"process":{p},"type":"{kind}","f":"{f}","key":"l","value":{value},"time":{}}}"#, ms * 1_000_000)
    };
    // Process 2 is granted the lease at `grant` ms; process 1 holds it
    // from 10 ms and asks to release it at 700.
    let file = |name: &str, grant: u64| {
        let mut lines = vec![
            (0, event(1, "invoke", "acquire", 0)),
            (10, event(1, "ok", "acquire", 10)),
            (grant - 5, event(2, "invoke", "acquire", grant - 5)),
            (grant, event(2, "ok", "acquire", grant)),
            (700, event(1, "invoke", "release", 700)),
            (701, event(1, "ok", "release", 701)),
        ];
        lines.sort_by_key(|(t, _)| *t);
        let p = dir.path().join(name);
        std::fs::write(&p, lines.into_iter().map(|(_, l)| l + "\n").collect::<String>()).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let early = file("early.jsonl", 400);
    let o = output(&["check", &early, "--model", "lease"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(6), "{said}");
    assert!(
        said.contains(
            "l: processes 1 (line 2) and 2 (line 4) both held it for 300.0 ms: \
             it was granted to process 2 600.0 ms before process 1's term ran out"
        ),
        "{said}"
    );
    assert_eq!(output(&["check", &file("handover.jsonl", 750), "--model", "lease"]).status.code(), Some(0));
    let untimed = dir.path().join("untimed.jsonl");
    std::fs::write(&untimed, r#"{"process":1,"type":"invoke","f":"acquire","value":1000}"#).unwrap();
    let e = one_line_error(&["check", untimed.to_str().unwrap(), "--model", "lease"], 1);
    assert!(e.contains("untimed.jsonl") && e.contains("line 1") && e.contains("virtual time"), "{e}");
}
