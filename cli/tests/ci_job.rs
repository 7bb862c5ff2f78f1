//! `hvsim explore` as a CI job runs it (issue: "Results a CI job can
//! trust"): the exit status says whether a bug was found; SIGINT and
//! SIGTERM end an exploration with everything it found on disk; a second
//! exploration into the same directory leaves the first intact; a bug has
//! the same id whichever seed found it. (The compose project whose client
//! exits after its failed assertion, and the replay from elsewhere, are in
//! compose.rs: they need the test image.)

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `hvsim explore` with `args` into `out`: its exit status.
fn status(args: &[&str], out: &Path) -> i32 {
    let o = common::hvsim().arg("explore").args(args).arg("--out").arg(out).output().unwrap();
    o.status.code().unwrap_or_else(|| panic!("killed: {}", String::from_utf8_lossy(&o.stderr)))
}

/// The demo's bug id, derived as docs/cli.md says: from what failed.
fn vault_bug_id() -> String {
    let digest = Sha256::digest(b"assertion:the vault stays closed");
    format!("BUG-{}", &hex::encode(digest)[..12])
}

/// The CI step of examples/ci/explore.sh, as a job would run it.
#[test]
fn the_example_ci_step_fails_on_a_bug_and_passes_without_one() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/ci/explore.sh");
    let step = |args: &[&str]| {
        let o = Command::new(script)
            .args(args)
            .current_dir(dir.path())
            .env("HVSIM", assert_cmd::cargo::cargo_bin("hvsim"))
            .env(SCHEMA_CHECK, "1")
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
    };
    // Seed 9 finds the demo's bug in 200 branches: the default budget is
    // not what this test is about.
    let (code, said) = step(&["--seed", "9", "--branches", "200"]);
    assert_eq!(code, Some(8), "{said}");
    assert!(said.contains("ci: bugs found:") && said.contains(&format!("{}.json", vault_bug_id())), "{said}");
    let (code, said) = step(&["--seed", "1", "--branches", "1"]);
    assert_eq!((code, said.trim()), (Some(0), "ci: no bug found"));
    // Two explorations, each in its own directory, beside `latest`.
    assert_eq!(std::fs::read_dir(dir.path().join("hvsim-out")).unwrap().count(), 3);
}

#[test]
fn the_exit_status_says_whether_a_bug_was_found() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // The demo's bug (seed 9 finds it in 200 branches): 8.
    assert_eq!(status(&["--seed", "9", "--branches", "200"], &out), 8);
    // One branch finds no bug: 0; but a `sometimes` was never satisfied,
    // which --fail-on-unmet counts: 10.
    assert_eq!(status(&["--seed", "1", "--branches", "1"], &out), 0);
    assert_eq!(status(&["--seed", "1", "--branches", "1", "--fail-on-unmet"], &out), 10);
    let report: Value = serde_json::from_str(&read(&latest(&out).join("report.json"))).unwrap();
    let unmet = report["assertions"].as_array().unwrap().iter().filter(|a| a["verdict"] == "never-reached").count();
    assert!(unmet > 0 && report["bugs"].as_array().unwrap().is_empty(), "{report}");
    // A target without a bug whose every property was met: 0 either way.
    let quiet = ["--guest", "sdk-garbage", "--branches", "3", "--slice", "200ms"];
    assert_eq!(status(&quiet, &out), 0);
    assert_eq!(status(&[&quiet[..], &["--fail-on-unmet"]].concat(), &out), 0);
}

/// Two explorations (seeds 1 and 2) into one directory: the demo's bug
/// keeps its id, derived from what failed, across seeds and explorations;
/// the second exploration leaves the first's files as they were, in a
/// directory of its own that `latest` names; both records replay.
#[test]
fn a_bug_keeps_its_id_across_explorations_into_one_directory_which_keep_their_files() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hvsim-out");
    let check_id = |r: &Value, seed: &str| {
        let bug = &r["bugs"][0];
        assert_eq!(bug["summary"], "assertion failed: the vault stays closed", "seed {seed}");
        assert_eq!(bug["id"].as_str(), Some(vault_bug_id().as_str()), "seed {seed}");
        assert!(bug["file"].as_str().unwrap().ends_with(&format!("bugs/{}.json", vault_bug_id())));
        let property = r["assertions"].as_array().unwrap().iter().find(|a| a["message"] == "the vault stays closed");
        assert_eq!(property.unwrap()["bug"], bug["id"], "the property links to its bug");
    };
    let first = explore_json(&["--seed", "1"], &out);
    check_id(&first, "1");
    let first_file = PathBuf::from(first["bugs"][0]["file"].as_str().unwrap());
    let first_dir = first_file.parent().unwrap().parent().unwrap().to_owned();
    let before: Vec<(PathBuf, Vec<u8>)> = files_under(&first_dir);
    assert!(before.len() >= 4, "reports and a bug record: {before:?}");
    let second = explore_json(&["--seed", "2"], &out);
    check_id(&second, "2");
    assert_eq!(files_under(&first_dir), before, "the first exploration's files are as it left them");
    let second_file = PathBuf::from(second["bugs"][0]["file"].as_str().unwrap());
    let second_dir = second_file.parent().unwrap().parent().unwrap();
    assert_ne!(second_dir, first_dir);
    assert_eq!(
        std::fs::canonicalize(latest(&out)).unwrap(),
        std::fs::canonicalize(second_dir).unwrap(),
        "latest is the newest"
    );
    // Both records still replay.
    for file in [&first_file, &second_file] {
        assert_eq!(output(&["replay", file.to_str().unwrap()]).status.code(), Some(0), "{}", file.display());
    }
}

/// Every file under `dir`, with its bytes, in name order.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    files.sort();
    files
}

/// `hvsim explore ARGS --out OUT` in the background.
fn spawn_explore(args: &[&str], out: &Path) -> Child {
    Command::new(assert_cmd::cargo::cargo_bin("hvsim"))
        .env(SCHEMA_CHECK, "1")
        .arg("explore")
        .args(args)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits (at most two minutes) until `ready` holds.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(120), "{what} never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(child: &Child, name: &str) {
    let sent = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
}

/// The bug records in an exploration's `bugs/`, parsed.
fn records(run: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(run.join("bugs")) else { return Vec::new() };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| serde_json::from_str(&read(&p)).unwrap())
        .collect()
}

fn confirmed(record: &Value) -> bool {
    let r = &record["reproduction"];
    r["wanted"].as_u64().is_some() && r["attempts"] == r["wanted"]
}

/// Interrupted by `name` once a bug is confirmed, the exploration still
/// exits 8 and says it was interrupted; every record it wrote is on disk,
/// and each confirmed one replays.
fn interrupted_after_a_bug(name: &str, number: u64) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = spawn_explore(&["--seed", "1", "--branches", "1000000"], &out);
    let run = latest(&out);
    wait_for("a confirmed bug record", || records(&run).iter().any(confirmed));
    signal(&child, name);
    let o = wait_with_deadline(&mut child);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains(&format!("interrupted (SIG{name})")), "{stderr}");
    let report: Value = serde_json::from_str(&read(&run.join("report.json"))).unwrap();
    assert_eq!(report["summary"]["ending"], serde_json::json!({"how": "interrupted", "reason": number}));
    let on_disk = records(&run);
    assert_eq!(on_disk.len(), report["bugs"].as_array().unwrap().len(), "every bug found has its record");
    for record in on_disk.iter().filter(|r| confirmed(r)) {
        let file = run.join("bugs").join(format!("{}.json", record["id"].as_str().unwrap()));
        let o = output(&["replay", file.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    }
}

/// The child's output, once it exits (within a minute).
fn wait_with_deadline(child: &mut Child) -> std::process::Output {
    wait_for("the exploration's end", || child.try_wait().unwrap().is_some());
    let mut stderr = Vec::new();
    std::io::Read::read_to_end(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    std::process::Output { status: child.wait().unwrap(), stdout: Vec::new(), stderr }
}

#[test]
fn sigint_after_a_bug_leaves_every_bug_on_disk_and_replayable() {
    if !kvm_available() {
        return;
    }
    interrupted_after_a_bug("INT", 2);
}

#[test]
fn sigterm_after_a_bug_leaves_every_bug_on_disk_and_replayable() {
    if !kvm_available() {
        return;
    }
    interrupted_after_a_bug("TERM", 15);
}

#[test]
fn interrupted_without_a_bug_is_status_9_with_a_report() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut child = spawn_explore(&["--guest", "sdk-garbage", "--branches", "1000000", "--slice", "1ms"], &out);
    // The first checkpoint's report: the exploration is under way.
    let report = latest(&out).join("report.json");
    wait_for("a checkpoint's report", || report.exists());
    let running: Value = serde_json::from_str(&read(&report)).unwrap();
    assert_eq!(running["summary"]["ending"]["how"], "running");
    signal(&child, "TERM");
    let o = wait_with_deadline(&mut child);
    assert_eq!(o.status.code(), Some(9), "{}", String::from_utf8_lossy(&o.stderr));
    let ended: Value = serde_json::from_str(&read(&report)).unwrap();
    assert_eq!(ended["summary"]["ending"], serde_json::json!({"how": "interrupted", "reason": 15}));
    let branches = |v: &Value| v["summary"]["branches"].as_u64().expect("summary.branches");
    assert!(branches(&ended) >= branches(&running), "{}", ended["summary"]);
}

#[test]
fn a_bug_found_but_not_yet_confirmed_is_written_as_unconfirmed() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // A hundred confirming re-executions take seconds; the signal comes
    // as soon as the bug's first record is on disk.
    let mut child = spawn_explore(&["--seed", "1", "--branches", "1000000", "--reexecute", "100"], &out);
    let run = latest(&out);
    wait_for("a bug record", || !records(&run).is_empty());
    signal(&child, "INT");
    let o = wait_with_deadline(&mut child);
    assert_eq!(o.status.code(), Some(8), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_str(&read(&run.join("report.json"))).unwrap();
    let bug = &report["bugs"][0];
    assert_eq!(bug["confirmed"], false, "{bug}");
    assert!(bug["reproduction"].as_str().unwrap().starts_with("UNCONFIRMED: re-executed "), "{bug}");
    assert!(bug["reproduction"].as_str().unwrap().ends_with(" of 100 times"), "{bug}");
    assert!(bug["replayable_reasons"][0].as_str().unwrap().starts_with("unconfirmed: "), "{bug}");
    let record: Value = serde_json::from_str(&read(Path::new(bug["file"].as_str().unwrap()))).unwrap();
    assert!(!confirmed(&record) && record["reproduction"]["wanted"] == 100, "{record}");
    // The record is whole: it replays.
    assert_eq!(output(&["replay", bug["file"].as_str().unwrap()]).status.code(), Some(0));
}
