//! Checkers on a real system: the histories a guest program records
//! through the SDK, checked at the end of every timeline by the checkers
//! the project manifest names (docs/checkers.md). KVM, the guest kernel and
//! Debian's Redis image are needed.

mod common;

use common::{explore_json, kvm_available, output, redis_image};
use serde_json::Value;

/// `examples/compose/redis-set`: Debian's Redis, keeping its data only in
/// memory, and a client adding five elements to a set through
/// `redis-cli`, recording each operation as an `hvsim_history` event, and
/// reading the set back with faults stopped. Its fault plan lets each
/// timeline draw kills of the store; its manifest names the set checker.
/// A kill after acknowledged adds loses them: the exploration finds it as
/// a checker's bug whose record names the lost elements and keeps the
/// violating history stamped with virtual time, the record's sub-history is
/// what `hvsim check` finds invalid, and `hvsim replay` reproduces the bug
/// (from the saved root) with the same trace. ~4 minutes here.
#[test]
fn the_set_checker_finds_redis_losing_acknowledged_adds_to_a_kill_and_the_bug_replays() {
    if !kvm_available() {
        return;
    }
    redis_image();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-set");
    let (compose, plan) = (format!("{dir}/compose.yaml"), format!("{dir}/faults.toml"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let args = ["--compose", &compose, "--fault-plan", &plan, "--branches", "3", "--timeline-limit", "8s"];
    let r = explore_json(&[&args[..], &["--reexecute", "0"]].concat(), &out);
    // The manifest beside the compose file named the checker; every
    // timeline recorded a history and was checked.
    let checkers = r["checkers"].as_array().unwrap();
    assert_eq!(checkers.len(), 1, "{checkers:?}");
    let set = &checkers[0];
    assert_eq!((set["name"].as_str(), set["model"].as_str()), (Some("set"), Some("set")));
    assert_eq!(set["timelines"], 3, "{set}");
    assert_eq!(set["operations"].as_u64(), Some(3 * 6), "five adds and a read per timeline: {set}");
    assert!(set["invalid"].as_u64().unwrap() >= 1, "no timeline lost an add: {set}\n{}", r["faults"]);
    let bug = r["bugs"].as_array().unwrap().iter().find(|b| Some(&b["id"]) == Some(&set["bug"]));
    let bug = bug.unwrap_or_else(|| panic!("the checker's bug is not in the report: {}", r["bugs"]));
    let summary = bug["summary"].as_str().unwrap();
    assert!(summary.starts_with("checker set (set) found the history INVALID: s: "), "{summary}");

    let record: Value = serde_json::from_str(&std::fs::read_to_string(bug["file"].as_str().unwrap()).unwrap()).unwrap();
    let history = &record["history"];
    // What was lost: acknowledged adds, each named.
    let lost: Vec<u64> =
        history["verdict"]["keys"][0]["lost"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert!(!lost.is_empty() && summary.contains(&format!("{} lost", lost.len())), "{summary}: {lost:?}");
    // The timeline's kill struck before the final read.
    let kills: Vec<&Value> = record["faults"].as_array().unwrap().iter().filter(|f| f["kind"] == "kill").collect();
    assert!(!kills.is_empty() && kills[0]["landed"].as_u64() > Some(0), "{}", record["faults"]);
    // The sub-history: each lost add acknowledged, then the final read,
    // in virtual-time order.
    let sub = history["sub_history"].as_array().unwrap();
    let times: Vec<u64> = sub.iter().map(|e| e["time"].as_u64().expect("stamped with virtual time")).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let acked: Vec<u64> =
        sub.iter().filter(|e| e["type"] == "ok" && e["f"] == "add").filter_map(|e| e["value"].as_u64()).collect();
    assert_eq!(acked, lost, "{sub:?}");
    assert_eq!(sub.last().unwrap()["f"], "read");
    assert!(kills[0]["start_ns"].as_u64().unwrap() < times[times.len() - 1], "the kill came before the read");
    assert_eq!(history["shrink"]["minimal"], true, "{}", history["shrink"]);
    // ... which hvsim check, given it as a file, finds invalid too.
    let lines: Vec<String> = sub.iter().map(Value::to_string).collect();
    let file = tmp.path().join("sub.jsonl");
    std::fs::write(&file, lines.join("\n")).unwrap();
    let o = output(&["check", "--model", "set", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(6), "{}", String::from_utf8_lossy(&o.stdout));

    // A replay from the saved root judges the replayed history the same.
    let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
    assert_eq!((v["trace_matches"].as_bool(), v["from_saved_root"].as_bool()), (Some(true), Some(true)), "{v}");
    assert_eq!(v["assertion"].as_str(), Some(summary));
}
