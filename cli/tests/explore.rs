//! The main job end to end (issue: "guest SDK, hvsim explore, bug records,
//! hvsim replay"): the demo's bug is found and replays; explorations are
//! reproducible; garbage on the SDK channel is counted, never fatal; and a
//! Linux program using the C SDK gets its assertions into the report.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn explore(args: &[&str], out: &Path) -> Value {
    explore_json(args, out)
}

/// Three explorations of the demo (seeds 1, 2 and 3) into one directory,
/// as a CI job that explores every merge makes them: each finds the
/// demo's bug (seed 1 within the default budget, the others within 100
/// branches: each finds it in under 30 here), under the same id (derived
/// from what failed, docs/cli.md), and re-executes it exactly; each leaves
/// the earlier explorations' files as they were, in a directory of its own
/// that `latest` names; every record still replays at the end.
#[test]
fn demo_bug_found_for_three_seeds_keeps_its_id_and_replays_every_time() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("hvsim-out");
    // Each exploration's directory with its files as it left them, and its
    // record of the demo's bug.
    let mut earlier: Vec<(PathBuf, Files, String)> = Vec::new();
    for seed in ["1", "2", "3"] {
        // One seed runs as a user's default run does: the default budget,
        // each bug's likelihood estimated. The others find the bug within
        // 30 branches (seeds 2 and 3, measured here).
        let default: &[&str] = if seed == "1" { &["--likelihood-runs", "8"] } else { &["--branches", "40"] };
        let r = explore(&[&["--seed", seed, "--reexecute", "3"][..], default].concat(), &out);
        let bugs = r["bugs"].as_array().unwrap();
        let vault = bugs.iter().find(|b| b["summary"] == "assertion failed: the vault stays closed");
        let vault = vault
            .unwrap_or_else(|| panic!("seed {seed}: the demo bug was not found within its budget: {}", r["summary"]));
        assert_eq!(vault["id"].as_str(), Some(vault_bug_id().as_str()), "seed {seed}");
        let file = vault["file"].as_str().unwrap();
        assert!(file.ends_with(&format!("bugs/{}.json", vault_bug_id())), "{file}");
        let property = r["assertions"].as_array().unwrap().iter().find(|a| a["message"] == "the vault stays closed");
        assert_eq!(property.unwrap()["bug"], vault["id"], "the property links to its bug");
        // This exploration has a directory of its own, the newest, and the
        // earlier ones' files are as they left them.
        let this = Path::new(file).parent().unwrap().parent().unwrap().to_owned();
        assert_eq!(std::fs::canonicalize(latest(&out)).unwrap(), std::fs::canonicalize(&this).unwrap());
        for (before, files, _) in &earlier {
            assert_ne!(before, &this, "seed {seed}");
            assert_eq!(&files_with_bytes(before), files, "seed {seed} changed {}", before.display());
        }
        // Re-executed from the root, exactly: whole timelines branch from
        // interval snapshots too, which may lie after a halted guest's last
        // exit, and a replay must wait there as the branch did.
        for b in bugs {
            assert_eq!(b["reproduction"], "reproduced 3/3", "seed {seed}: {b}");
        }
        // Report files landed, and the verdicts name what held and what failed.
        for f in ["report.md", "report.json", "report.html"] {
            assert!(latest(&out).join(f).exists(), "{f}");
        }
        let page = read(&latest(&out).join("report.html"));
        for b in bugs {
            let replay = b["replay_command"].as_str().unwrap();
            assert!(page.contains(replay) && page.contains(b["id"].as_str().unwrap()), "{page}");
        }
        let verdict = |msg: &str| {
            r["assertions"].as_array().unwrap().iter().find(|a| a["message"] == msg).unwrap()["verdict"].clone()
        };
        assert_eq!(verdict("the vault stays closed"), "failed");
        assert_eq!(verdict("the first digit is right"), "held");
        // Its digits are draws the explorer made decision points of, and
        // gave values inside timelines (the guesser retries its code).
        let draws = &r["summary"]["draws"];
        assert!(draws["points"].as_u64() > Some(0) && draws["chosen"].as_u64() > Some(0), "seed {seed}: {draws}");
        assert!(draws["steered"].as_u64() > Some(0), "seed {seed}: {draws}");
        assert_eq!(verdict("a digit above 9 came up"), "held");
        if seed == "1" {
            for b in bugs {
                // Likelihood: 8 fresh runs from each of 5 moments of the
                // timeline, in time order; from just before the failure
                // the same bug follows.
                let points = b["likelihood"]["points"].as_array().unwrap_or_else(|| panic!("no estimate: {b}"));
                assert_eq!(points.len(), 5, "{b}");
                let at = |p: &Value, k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k}: {p}"));
                assert!(points.windows(2).all(|w| at(&w[0], "vtime_ns") < at(&w[1], "vtime_ns")), "{points:?}");
                for p in points {
                    assert!(at(p, "runs") == 8 && at(p, "hits") <= 8, "{p}");
                    let (low, high) = (p["low"].as_f64().unwrap(), p["high"].as_f64().unwrap());
                    assert!(0.0 <= low && low <= high && high <= 1.0, "{p}");
                }
                assert!(at(points.last().unwrap(), "hits") > 0, "the bug follows from just before it: {points:?}");
                let file = b["file"].as_str().unwrap();
                for i in 0..10 {
                    let o = output(&["replay", file, "--json"]);
                    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
                    assert_eq!(v["reproduced"], true, "{} replay {i}: {v}", b["id"]);
                    assert_eq!(v["vtime_ns"], b["at"]["vtime_ns"], "{} replay {i}", b["id"]);
                    assert_eq!(o.status.code(), Some(0));
                }
            }
        }
        earlier.push((this.clone(), files_with_bytes(&this), file.to_owned()));
    }
    // Every record still replays, the first after two more explorations
    // wrote into its directory's parent.
    for (_, _, file) in &earlier {
        assert_eq!(output(&["replay", file]).status.code(), Some(0), "{file}");
    }
}

/// Files with their bytes.
type Files = Vec<(PathBuf, Vec<u8>)>;

/// Every file under `dir`, with its bytes, in name order.
fn files_with_bytes(dir: &Path) -> Files {
    files_under(dir).into_iter().map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect()
}

/// A named edit of a bug record.
type Edit<'a> = (&'a str, &'a dyn Fn(&mut Value));

/// A bug record pins its world and the trace at the failure: editing any
/// field a replay depends on makes it refuse (a different world) or say
/// NOT reproduced (another failure or timeline), never a false
/// "reproduced". (The id, branch, counts, console tail and replay command
/// only describe the bug.)
#[test]
fn an_edited_bug_record_is_refused_or_not_reproduced() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Seed 9 finds the demo's bug in 200 branches.
    let r = explore(&["--seed", "9", "--branches", "200", "--reexecute", "3"], &dir.path().join("out"));
    let bug = &r["bugs"][0];
    // Re-executed from the root before it was reported, every time the same.
    assert_eq!((bug["reproduction"].as_str(), bug["replayable"].as_str()), (Some("reproduced 3/3"), Some("verified")));
    let record: Value = serde_json::from_str(&read(Path::new(bug["file"].as_str().unwrap()))).unwrap();
    let replay = |name: &str, edit: &dyn Fn(&mut Value), extra: &[&str]| {
        let mut edited = record.clone();
        edit(&mut edited);
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, edited.to_string()).unwrap();
        let mut args = vec!["replay", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        let o = output(&args);
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        (o.status.code(), text)
    };
    let (code, text) = replay("same", &|_| {}, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("reproduced") && text.contains("the same trace and memory"), "{text}");
    let bump = |v: &mut Value| *v = Value::from(v.as_u64().unwrap() + 1);
    let timeline_edits: [Edit; 7] = [
        ("summary", &|r| r["summary"] = Value::from("assertion failed: something else")),
        ("assertion", &|r| r["bug"]["id"] = Value::from("another assertion")),
        ("master-seed", &|r| bump(&mut r["master_seed"])),
        ("segment-seed", &|r| bump(&mut r["timeline"]["segments"][0]["seed"])),
        ("events", &|r| bump(&mut r["at"]["events"])),
        ("trace-hash", &|r| r["failure"]["trace_hash"] = Value::from("0".repeat(64))),
        ("memory-hash", &|r| r["failure"]["memory_hash"] = Value::from("0".repeat(64))),
    ];
    // The demo's digits are SDK draws: its bug is found through values the
    // explorer chose, which the timeline carries; another value is another
    // timeline.
    let segments = record["timeline"]["segments"].as_array().unwrap();
    let drawn = segments.iter().rposition(|s| s["draw"].is_u64()).expect("a segment starts at a chosen draw");
    let draw_edit: Edit = ("draw-value", &|r| bump(&mut r["timeline"]["segments"][drawn]["draw"]));
    for (name, edit) in timeline_edits.into_iter().chain([draw_edit]) {
        let (code, text) = replay(name, edit, &[]);
        assert_eq!(code, Some(5), "{name}: {text}");
        assert!(text.contains("NOT reproduced"), "{name}: {text}");
    }
    let world_edits: [Edit; 4] = [
        ("hvsim-version", &|r| r["world"]["hvsim"] = Value::from("0.0.1")),
        ("cpuid", &|r| r["world"]["cpuid"] = Value::from("1".repeat(64))),
        ("guest-code", &|r| r["world"]["guest"] = Value::from("2".repeat(64))),
        ("target", &|r| r["target"]["guest"] = Value::from("timer")),
    ];
    for (name, edit) in world_edits {
        let (code, text) = replay(name, edit, &[]);
        assert_eq!(code, Some(1), "{name}: {text}");
        assert!(text.contains("found in another world") && text.contains("--force"), "{name}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{name}: one line: {text}");
    }
    // --force replays anyway and says what differs.
    let (code, text) = replay("forced", world_edits[1].1, &["--force"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("replaying in another world") && text.contains("cpuid 111111111111 vs"), "{text}");

    // A failure point no timeline reaches ends the replay, NOT reproduced,
    // instead of running forever; --vtime-limit bounds a replay too.
    let far = |r: &mut Value| r["at"]["events"] = Value::from(1_000_000_000_000_000u64);
    let started = std::time::Instant::now();
    let (code, text) = replay("far", &far, &[]);
    assert_eq!(code, Some(5), "{text}");
    assert!(text.contains("NOT reproduced"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the replay ran {:?}", started.elapsed());
    let far_file = dir.path().join("far.json");
    let o = output(&["replay", far_file.to_str().unwrap(), "--vtime-limit", "1ms", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert!(v["vtime_ns"].as_u64().unwrap() <= 1_000_000 + 100_000, "{v}");
    // A timeline out of order is a damaged record: one line, status 1.
    let (code, text) = replay("out-of-order", &|r| r["timeline"]["root"]["events"] = Value::from(u64::MAX), &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("damaged bug record") && text.trim().lines().count() == 1, "{text}");
    // So is a root edited to before the saved root the replay starts from.
    let (code, text) = replay("root-at-0", &|r| r["timeline"]["root"]["events"] = Value::from(0u64), &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("damaged bug record") && text.trim().lines().count() == 1, "{text}");
}

/// An exploration is a function of its master seed: seed 9 explored four
/// times, by 1, 2 and 3 workers at batch 4 and by 2 at the default batch (a
/// fixed number, so more workers alone change nothing), finds the same
/// bugs, records, assertions, snapshots and signals, with the same trace
/// and memory hashes; seed 10 explores otherwise.
#[test]
fn an_exploration_is_a_function_of_its_master_seed_whatever_the_workers() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |workers: &str, batch: &str| {
        let out = dir.path().join(format!("w{workers}-b{batch}"));
        let r = explore(&["--seed", "9", "--branches", "100", "--workers", workers, "--batch", batch], &out);
        assert_eq!(r["summary"]["workers"].as_u64(), workers.parse().ok());
        exploration_digest(&r, true)
    };
    let one = run("1", "4");
    assert!(one["records"].as_array().is_some_and(|b| !b.is_empty()), "seed 9 finds the demo's bug: {one}");
    for workers in ["2", "3"] {
        let difference = first_difference(&run(workers, "4"), &one);
        assert!(difference.is_none(), "{workers} workers explored otherwise than one, at {difference:?}");
    }
    let out = dir.path().join("w2-default");
    let r = explore(&["--seed", "9", "--branches", "100", "--workers", "2"], &out);
    let difference = first_difference(&exploration_digest(&r, true), &one);
    assert!(difference.is_none(), "two workers at the default batch explored otherwise than one, at {difference:?}");
    let other = explore(&["--seed", "10", "--branches", "100"], &dir.path().join("seed-10"));
    assert_ne!(other["assertions"], r["assertions"], "another master seed explores differently");
}

#[test]
fn garbage_on_the_sdk_channel_is_counted_never_fatal() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = explore(&["--guest", "sdk-garbage", "--branches", "3", "--slice", "200ms"], &dir.path().join("g"));
    let g = &r["summary"]["garbage"];
    // Eight kinds of garbage in each of three branches, the over-long line included.
    assert_eq!(g["count"].as_u64().unwrap(), 24, "{g}");
    assert!(g["examples"].to_string().contains("not JSON"), "{g}");
    assert_eq!(r["summary"]["setup_complete"], true);
    // The one valid assertion among the garbage made it into the report.
    let a = r["assertions"].as_array().unwrap();
    assert!(a.iter().any(|a| a["message"] == "garbage guest: still reporting" && a["verdict"] == "held"), "{a:?}");
}

#[test]
fn a_target_that_never_reports_setup_complete_is_rooted_at_the_limit_and_phases_are_reported() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // `idle` sleeps an hour: it never says setup complete.
    let r = explore(&["--guest", "idle", "--setup-limit", "50ms", "--branches", "3"], &dir.path().join("t"));
    let s = &r["summary"];
    assert_eq!(s["setup_complete"], false);
    let phases = &s["phases"];
    for k in ["start_ms", "setup_ms", "branches_ms", "restore_ms", "snapshot_ms"] {
        assert!(phases[k].is_f64(), "phase {k} missing: {phases}");
    }
    let md = read(&latest(&dir.path().join("t")).join("report.md"));
    assert!(md.contains("- wall time: start "), "{md}");
    assert!(md.contains("setup never reported"), "{md}");
}

/// Within its memory budget the snapshot tree takes fewer snapshots during
/// a round and evicts the least promising between rounds, decided from
/// the tree's contents and the nodes' energy: the exploration stays the
/// same with any number of workers, and the report says what the tree
/// held.
#[test]
fn a_snapshot_memory_budget_evicts_and_never_depends_on_the_workers() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The demo's RAM, 32 MiB, is the root's copy: 1 MiB more for the rest.
    let args = ["--seed", "9", "--branches", "200", "--snapshot-memory", "33M"];
    let run = |workers: &str| {
        let r = explore(&[&args[..], &["--workers", workers]].concat(), &dir.path().join(workers));
        let tree = r["summary"]["tree"].clone();
        (exploration_digest(&r, true), tree)
    };
    let ((one, tree), (two, tree2)) = (run("1"), run("2"));
    assert!(first_difference(&one, &two).is_none());
    assert_eq!(tree, tree2);
    // Held within it: snapshots not taken during rounds, or evicted after.
    let (evicted, skipped) = (tree["evicted"].as_u64().unwrap(), tree["snapshots_skipped"].as_u64().unwrap());
    assert!(evicted + skipped > 0, "{tree}");
    let bytes = tree["bytes"].as_u64().expect("bytes");
    assert!(bytes <= 33 << 20 && tree["budget_bytes"] == 33 << 20, "{tree}");
}

/// `--time` holds within a branch: the machines stop when it is spent,
/// whatever they are in the middle of (here the first round's branches,
/// each of which would run for minutes), and the ending says the time was
/// spent.
#[test]
fn a_wall_time_budget_holds_within_a_branch() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let r = explore(&["--time", "2s", "--timeline-limit", "1000s", "--snapshot-every", "0s"], &dir.path().join("t"));
    let took = started.elapsed();
    assert!(took < std::time::Duration::from_secs(60), "a round of 1000 s timelines ran: {took:?}");
    let s = &r["summary"];
    assert_eq!((s["ending"]["how"].as_str(), s["branches"].as_u64()), (Some("time-spent"), Some(0)), "{s}");
    assert_eq!(s["ending"]["branches"].as_u64(), Some(0), "{s}");
}

/// `--until-saturated P`: the demo explored from seed 15 with a budget of
/// 500 branches stops once the upper 95% bound of the chance that the next
/// timeline reaches anything new falls below 5%: after its bug (the vault
/// opens at branch 44 here, the first new feature since branch 7) and well
/// before the budget; the report says the rule ended it and shows the
/// estimates. (The rule once went by the point estimate, 0 while no
/// feature was reached by one timeline only, and stopped this exploration
/// at branch 20, before the bug.) The same exploration again, with two
/// workers, stops at the same branch with the same digest: the rule is
/// decided from merged knowledge only.
#[test]
fn until_saturated_ends_the_demo_after_its_bug_and_before_its_budget_the_same_way_twice() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, workers: &str| {
        let args = ["--seed", "15", "--branches", "500", "--until-saturated", "0.05", "--workers", workers];
        explore(&args, &dir.path().join(name))
    };
    let r = run("one", "1");
    let s = &r["summary"];
    let (branches, first_bug) = (s["branches"].as_u64().unwrap(), s["first_bug"][0].as_u64().unwrap());
    assert!(first_bug < branches && branches < 500, "bug at {first_bug}, stopped at {branches}: {s}");
    let d = &s["discovery"];
    assert_eq!(
        (d["saturated_at"].as_u64(), d["until_saturated"]["below"].as_f64()),
        (Some(branches), Some(0.05)),
        "{d}"
    );
    assert!(first_bug >= 44, "the vault opened at branch {first_bug}: {s}");
    assert!(d["next_new"]["high"].as_f64().unwrap() < 0.05, "{d}");
    assert_eq!(d["incidence"]["timelines"].as_u64(), Some(branches), "{d}");
    let md = read(&latest(&dir.path().join("one")).join("report.md"));
    assert!(md.contains(&format!("ended by --until-saturated 0.05 at branch {branches}")), "{md}");
    let again = run("two", "2");
    assert_eq!(again["summary"]["discovery"], *d);
    let difference = first_difference(&exploration_digest(&again, true), &exploration_digest(&r, true));
    assert!(difference.is_none(), "two workers stopped otherwise than one, at {difference:?}");
}

/// The README's main job warns of nothing: the demo runs until stopped, so
/// its timelines are meant to end at their limit, and no check waits for
/// an end that never comes (it once warned that its first timelines "all
/// ran into --timeline-limit (0.0 s)" and to raise it).
#[test]
fn the_demo_explores_without_a_warning() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = output(&["explore", "--seed", "1", "--branches", "60", "--reexecute", "1", "--out", out.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "the vault opens at branch 55: {stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// `--snapshot-memory` holds within a round too: the demo snapshotted
/// every 10 µs (2,000 interval snapshots a timeline, about 40 KiB each:
/// every branch of a round once held them all, 300 MiB a round) stays
/// within 40 MiB but for the snapshots of what was new, which are always
/// taken; the branches say how many they did not take, and the
/// exploration is the same with one worker and two.
#[test]
fn a_snapshot_memory_budget_holds_within_a_round() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["--seed", "9", "--branches", "40", "--snapshot-every", "10us", "--snapshot-memory", "40M"];
    let run = |workers: &str| explore(&[&args[..], &["--workers", workers]].concat(), &dir.path().join(workers));
    let (one, two) = (run("1"), run("2"));
    let tree = &one["summary"]["tree"];
    assert_eq!(*tree, two["summary"]["tree"]);
    assert!(first_difference(&exploration_digest(&one, true), &exploration_digest(&two, true)).is_none());
    assert!(tree["snapshots_skipped"].as_u64().unwrap() > 10_000, "{tree}");
    assert!(tree["evicted"].as_u64().unwrap() > 0, "what was new went past it, and was evicted: {tree}");
    let (peak, budget) = (tree["peak_bytes"].as_u64().unwrap(), tree["budget_bytes"].as_u64().unwrap());
    assert!(peak <= budget + (1 << 20), "the new snapshots went past it by more than 1 MiB: {tree}");
    let md = read(&latest(&dir.path().join("1")).join("report.md"));
    assert!(md.contains("interval and draw snapshots not taken, to stay within it"), "{md}");
}
