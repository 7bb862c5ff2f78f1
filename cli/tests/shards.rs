//! Shards and merge (docs/scale.md), with the real hvsim:
//! - one shard of one, merged, is the unsharded exploration, wall times
//!   aside;
//! - two shards run by examples/scale's scripts as separate processes at
//!   once, merged in either order, hold exactly what the shards found: bugs
//!   (each once, the first kept, every shard that saw it listed), property
//!   verdicts, claims and their evidence, and each merged record replays;
//! - shards of different explorations or worlds, a shard named twice and
//!   broken shard directories are refused with one line;
//! - (KVM and the guest kernel) Linux shards start from one root made once
//!   on a shared directory, their fault evidence sums, and a root of
//!   another world is refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{hvsim, kvm_available, latest, linux_available, output, replay_reproduces, SCHEMA_CHECK};
use serde_json::Value;

const SCALE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/scale");
const DEMO_MANIFEST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agents/demo/hvsim.toml");

fn json(path: &Path) -> Value {
    serde_json::from_str(&common::read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A report or findings document without what wall time and paths decide.
fn comparable(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| {
                    !(k.ends_with("_ms") || ["invocation", "file", "replay_command", "command"].contains(&k.as_str()))
                })
                .map(|(k, v)| match k.as_str() {
                    // [branch, wall ms]: the branch is the exploration's.
                    "first_bug" => (k.clone(), v.get(0).cloned().unwrap_or(Value::Null)),
                    _ => (k.clone(), comparable(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(comparable).collect()),
        v => v.clone(),
    }
}

fn same(a: &Value, b: &Value, what: &str) {
    let (a, b) = (comparable(a), comparable(b));
    assert!(common::first_difference(&a, &b).is_none(), "{what} differ at {:?}", common::first_difference(&a, &b));
}

fn merge(dirs: &[&Path], out: &Path) -> std::process::Output {
    let mut c = hvsim();
    c.arg("merge").args(dirs).arg("--out").arg(out);
    c.output().expect("hvsim merge runs")
}

#[test]
fn one_shard_merged_is_the_unsharded_exploration() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let explore = |name: &str, more: &[&str]| {
        let out = dir.path().join(name);
        let args = [
            &["explore", "--seed", "1", "--branches", "150", "--manifest", DEMO_MANIFEST, "--out"][..],
            &[out.to_str().unwrap()],
            more,
        ]
        .concat();
        let o = output(&args);
        assert_eq!(o.status.code(), Some(8), "{}", String::from_utf8_lossy(&o.stderr));
        latest(&out)
    };
    let whole = explore("whole", &[]);
    let shard = explore("shard", &["--shard", "0/1"]);
    let merged = dir.path().join("merged");
    let o = merge(&[&shard], &merged);
    assert_eq!(
        o.status.code(),
        Some(8),
        "the merge exits as the exploration did: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for doc in ["report.json", "findings.json"] {
        same(&json(&whole.join(doc)), &json(&merged.join(doc)), doc);
    }
    let report = json(&merged.join("report.json"));
    assert_eq!(report["summary"]["shards"], serde_json::json!({"count": 1, "indices": [0]}));
    assert!(report["bugs"][0].get("shards").is_none(), "one shard lists none: {}", report["bugs"][0]);
}

/// Runs an examples/scale script with the real hvsim on the demo.
fn script(name: &str, args: &[&str], results: &Path) -> Command {
    let mut c = Command::new("sh");
    c.arg(Path::new(SCALE).join(name)).args(args);
    c.env("HVSIM", assert_cmd::cargo::cargo_bin("hvsim"))
        .env(SCHEMA_CHECK, "1")
        .env("HVSIM_SHARDS", "2")
        .env("HVSIM_SEED", "1")
        .env("HVSIM_BRANCHES", "200")
        .env("HVSIM_RESULTS", results)
        .env("HVSIM_EXTRA_ARGS", format!("--manifest {DEMO_MANIFEST}"))
        .env_remove("JOB_COMPLETION_INDEX")
        .env_remove("SLURM_ARRAY_TASK_ID");
    c
}

fn ran(mut c: Command) -> std::process::Output {
    let o = c.output().expect("the script runs");
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    o
}

#[test]
fn two_shards_run_as_processes_merge_to_exactly_what_they_found_in_any_order() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    assert_eq!(ran(script("root.sh", &[], &results)).status.code(), Some(0));
    // Two processes at once, the shard index from the engines' variables.
    let mut k8s = script("shard.sh", &[], &results);
    k8s.env("JOB_COMPLETION_INDEX", "0");
    let mut slurm = script("shard.sh", &[], &results);
    slurm.env("SLURM_ARRAY_TASK_ID", "1");
    let (a, b) = (k8s.spawn().unwrap(), slurm.spawn().unwrap());
    for child in [a, b] {
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "a shard that found a bug has done its job");
    }
    let o = ran(script("merge.sh", &[], &results));
    assert_eq!(o.status.code(), Some(8), "the merge reports the bug");
    let merged = results.join("merged");
    let shards: Vec<PathBuf> = (0..2).map(|i| latest(&results.join(format!("shard-{i}")))).collect();
    let reversed = dir.path().join("reversed");
    assert_eq!(merge(&[&shards[1], &shards[0]], &reversed).status.code(), Some(8));
    for doc in ["report.json", "findings.json"] {
        same(&json(&merged.join(doc)), &json(&reversed.join(doc)), doc);
    }

    let report = json(&merged.join("report.json"));
    let parts: Vec<Value> = shards.iter().map(|d| json(&d.join("report.json"))).collect();
    let s = &report["summary"];
    assert_eq!(s["shards"], serde_json::json!({"count": 2, "indices": [0, 1]}));
    let sum = |f: &dyn Fn(&Value) -> u64| parts.iter().map(f).sum::<u64>();
    assert_eq!(s["branches"], 200);
    assert_eq!(s["branches"].as_u64(), Some(sum(&|r| r["summary"]["branches"].as_u64().unwrap())));
    assert_eq!(
        s["timelines"]["at_limit"].as_u64(),
        Some(sum(&|r| r["summary"]["timelines"]["at_limit"].as_u64().unwrap()))
    );

    // Bugs: each id once, with every shard that saw it; the record kept
    // is the first by virtual time, then shard.
    let ids = |r: &Value| -> Vec<String> {
        let mut v: Vec<String> =
            r["bugs"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().into()).collect();
        v.sort();
        v
    };
    let mut union: Vec<String> = parts.iter().flat_map(ids).collect();
    union.sort();
    union.dedup();
    assert!(!union.is_empty(), "the demo's bug was found");
    assert_eq!(ids(&report), union);
    for bug in report["bugs"].as_array().unwrap() {
        let id = &bug["id"];
        let seen: Vec<(usize, &Value)> = parts
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r["bugs"].as_array().unwrap().iter().find(|b| &b["id"] == id).map(|b| (i, b)))
            .collect();
        let shards_seen: Vec<u64> = seen.iter().map(|(i, _)| *i as u64).collect();
        assert_eq!(bug["shards"], serde_json::json!(shards_seen), "{id}");
        let occurrences: u64 = seen.iter().map(|(_, b)| b["occurrences"].as_u64().unwrap()).sum();
        assert_eq!(bug["occurrences"].as_u64(), Some(occurrences), "{id}");
        let first = seen.iter().min_by_key(|(i, b)| (b["at"]["vtime_ns"].as_u64().unwrap(), *i)).unwrap().1;
        assert_eq!(bug["at"], first["at"], "{id}: the first is kept");
        // The record stands on its own.
        let record = merged.join("bugs").join(format!("{}.json", id.as_str().unwrap()));
        assert_eq!(json(&record)["shards"], bug["shards"]);
        replay_reproduces(record.to_str().unwrap(), &[]);
    }

    // Properties: counts summed, so a `sometimes` satisfied in any shard
    // is satisfied, and an `always` failed in any shard is failed.
    for a in report["assertions"].as_array().unwrap() {
        let theirs: Vec<&Value> = parts
            .iter()
            .filter_map(|r| r["assertions"].as_array().unwrap().iter().find(|b| b["id"] == a["id"]))
            .collect();
        for count in ["hits", "passes", "failures"] {
            let total: u64 = theirs.iter().map(|b| b[count].as_u64().unwrap()).sum();
            assert_eq!(a[count].as_u64(), Some(total), "{}: {count}", a["id"]);
        }
        let verdicts: Vec<&str> = theirs.iter().map(|b| b["verdict"].as_str().unwrap()).collect();
        let v = a["verdict"].as_str().unwrap();
        if verdicts.contains(&"failed") {
            assert_eq!(v, "failed", "{}: failed in a shard", a["id"]);
        } else if verdicts.contains(&"held") {
            assert_eq!(v, "held", "{}: held in a shard, failed in none", a["id"]);
        }
    }
    // Claims: judged again from the summed tallies, with summed evidence.
    let claim = &report["claims"][0];
    assert_eq!(
        (claim["id"].as_str(), claim["verdict"].as_str()),
        (Some("vault-stays-closed"), Some("fail-reproducible"))
    );
    let exercised = |c: &Value| c["evidence"]["exercised"].as_u64().unwrap();
    assert_eq!(exercised(claim), parts.iter().map(|r| exercised(&r["claims"][0])).sum::<u64>());
    let findings = common::read(&merged.join("findings.md"));
    assert!(findings.contains("do-not-ship"), "{findings}");
    let md = common::read(&merged.join("report.md"));
    assert!(md.contains("shards 0, 1 of 2"), "{md}");
}

#[test]
fn shards_of_different_explorations_or_worlds_and_broken_shards_are_refused() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shard = |name: &str, seed: &str, shard: &str| {
        let out = dir.path().join(name);
        let o =
            output(&["explore", "--seed", seed, "--branches", "80", "--shard", shard, "--out", out.to_str().unwrap()]);
        assert!(matches!(o.status.code(), Some(0 | 8)), "{}", String::from_utf8_lossy(&o.stderr));
        latest(&out)
    };
    let a = shard("a", "1", "0/2");
    let b = shard("b", "2", "1/2");
    let a_again = shard("a-again", "1", "0/2");
    let refused = |dirs: &[&Path], why: &str| {
        let out = dir.path().join("never");
        let o = merge(dirs, &out);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(why), "expected {why:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!out.exists(), "nothing is left behind");
    };
    // A shard is a function of (seed, shard): run twice, the same
    // timelines, the same bugs with the same trace and memory hashes.
    let (e1, e2) = (json(&a.join("exploration.json")), json(&a_again.join("exploration.json")));
    assert!(!e1["exploration"]["bugs"].as_array().unwrap().is_empty(), "the shard found the demo's bug");
    assert!(e1["exploration"]["bugs"][0]["failure"]["memory_hash"].is_string());
    same(&e1, &e2, "the same shard's explorations");
    // One shard of two merged alone: what it found, and the other missing.
    let alone = dir.path().join("alone");
    let o = merge(&[&a], &alone);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(8), "{err}");
    assert!(err.contains("warning: shard 0 of 2 (missing 1): the missing shards' branches are not in it"), "{err}");
    assert!(common::read(&alone.join("report.md")).contains("shard 0 of 2 (missing 1)"));
    refused(&[&a, &b], "are not shards of one exploration: their master seed differs (1 and 2)");
    refused(&[&a, &a_again], "shard 0 of 2 is named twice");
    refused(&[dir.path()], "no exploration.json there or in its `latest`");

    // Another world: the same shard's result as if run on another kernel.
    let c = dir.path().join("other-world");
    copy_dir(&shard("c", "1", "1/2"), &c);
    let file = c.join("exploration.json");
    let mut v = json(&file);
    v["exploration"]["world"]["cpuid"] = "0123456789abcdef0123".into();
    std::fs::write(&file, v.to_string()).unwrap();
    refused(&[&a, &c], "ran on different worlds (cpuid: ");
    std::fs::write(&file, "{ not json").unwrap();
    refused(&[&a, &c], "not an exploration hvsim can merge");

    // An output that is there already is kept, not overwritten.
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("keep"), "").unwrap();
    let o = merge(&[&a], &taken);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not an empty directory"));
    let o = output(&["explore", "--shard", "2/2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("shards are numbered from 0 to 1"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.path().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Two nodes, one pinging the other under 30% packet loss: setup complete,
/// then an always-assertion that the ping answers (as cli/tests/roots.rs).
const PING: &str = r#"
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
if hvsim-node 1 ping -c 1 -W 1 10.0.0.1 > /dev/null; then ok=true; else ok=false; fi
echo "{\"antithesis_assert\":{\"id\":\"ping answers\",\"message\":\"ping answers\",\"condition\":$ok,\"hit\":true,\"must_hit\":true,\"assert_type\":\"always\",\"display_type\":\"Always\",\"location\":{},\"details\":null}}" > $HVSIM_SDK_OUTPUT
"#;

#[test]
fn linux_shards_start_from_one_shared_root_and_refuse_another_worlds() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("lossy.toml");
    std::fs::write(&plan, "# cli/tests/shards.rs\n[network]\ndrop = 0.3\n").unwrap();
    let roots = dir.path().join("roots");
    let explore = |name: &str, more: &[&str]| {
        // A process of its own, to run two at once.
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("hvsim"));
        c.env(SCHEMA_CHECK, "1");
        c.args(["explore", "--linux", "--nodes", "2", "--fault-plan", plan.to_str().unwrap(), "--init-cmd", PING]);
        c.args(["--seed", "3", "--reexecute", "1", "--roots", roots.to_str().unwrap(), "--out"]);
        c.arg(dir.path().join(name)).args(more);
        c
    };
    // A shard before the root step: refused, not made on its own.
    let o = explore("early", &["--branches", "4", "--shard", "0/2"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("none for this target and seed 3: take the root once first"), "{err}");

    let o = explore("root", &["--branches", "0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let shards: Vec<_> = (0..2)
        .map(|i| explore(&format!("shard-{i}"), &["--branches", "4", "--shard", &format!("{i}/2")]).spawn().unwrap())
        .collect();
    for s in shards {
        let o = s.wait_with_output().unwrap();
        assert!(matches!(o.status.code(), Some(0 | 8)), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let dirs: Vec<PathBuf> = (0..2).map(|i| latest(&dir.path().join(format!("shard-{i}")))).collect();
    let parts: Vec<Value> = dirs.iter().map(|d| json(&d.join("report.json"))).collect();
    for p in &parts {
        assert_eq!(p["summary"]["root_restored"], true, "each shard starts from the saved root: {}", p["summary"]);
    }
    let merged = dir.path().join("merged");
    let o = merge(&[&dirs[0], &dirs[1]], &merged);
    assert!(matches!(o.status.code(), Some(0 | 8)), "{}", String::from_utf8_lossy(&o.stderr));
    let report = json(&merged.join("report.json"));
    // Fault evidence: what landed in each shard, summed.
    let landed = |r: &Value| -> u64 {
        r["faults"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "net.drop")
            .map(|f| f["landed"].as_u64().unwrap())
            .sum()
    };
    assert!(landed(&report) > 0, "the loss landed: {}", report["faults"]);
    assert_eq!(landed(&report), landed(&parts[0]) + landed(&parts[1]));
    assert_eq!(report["summary"]["root_restored"], true);
    for bug in report["bugs"].as_array().unwrap() {
        replay_reproduces(bug["file"].as_str().unwrap(), &[]);
    }

    // The root as if another kernel had made it: a shard refuses it.
    let description = std::fs::read_dir(&roots)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .expect("the root's description");
    let mut v = json(&description);
    v["id"]["world"]["kernel"] = "0000deadbeef".into();
    std::fs::write(&description, v.to_string()).unwrap();
    let o = explore("other-world", &["--branches", "4", "--shard", "1/2"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("the root was made on another world (kernel: `0000deadbeef` there"), "{err}");
}
