//! Saved roots (docs/snapshots.md#saved-roots): an exploration of a Linux
//! target keeps its root, the next exploration of the same target, world
//! and seed starts from it and explores exactly the same, replays of its
//! bugs start from it too, and a corrupt saved root is made again. KVM and
//! the guest kernel are needed.

mod common;

use std::path::{Path, PathBuf};

use common::{
    exploration_digest, explore_json, first_difference, linux_available, linux_memory_may_differ, output,
    replay_reproduces,
};
use serde_json::Value;

/// Two nodes, one pinging the other under 30% packet loss: setup complete,
/// then an always-assertion that the ping answers.
const PING: &str = r#"
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
if hvsim-node 1 ping -c 1 -W 1 10.0.0.1 > /dev/null; then ok=true; else ok=false; fi
echo "{\"antithesis_assert\":{\"id\":\"ping answers\",\"message\":\"ping answers\",\"condition\":$ok,\"hit\":true,\"must_hit\":true,\"assert_type\":\"always\",\"display_type\":\"Always\",\"location\":{},\"details\":null}}" > $HVSIM_SDK_OUTPUT
"#;

/// The plan's comment makes the target this test's own: no other test
/// saves or uses its root.
const PLAN: &str = "# cli/tests/roots.rs\n[network]\ndrop = 0.3\n";

fn explore(dir: &Path, name: &str, more: &[&str]) -> Value {
    let plan = dir.join("lossy.toml");
    std::fs::write(&plan, PLAN).unwrap();
    let mut args = vec!["--linux", "--nodes", "2", "--fault-plan", plan.to_str().unwrap(), "--init-cmd", PING];
    args.extend_from_slice(&["--seed", "3", "--branches", "4", "--reexecute", "1"]);
    args.extend_from_slice(more);
    explore_json(&args, &dir.join(name))
}

/// The saved root of this test's target, from `hvsim cache ls --json`.
fn saved_root_file() -> PathBuf {
    let o = output(&["cache", "ls", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("hvsim cache ls --json prints JSON");
    let roots = &v["roots"];
    let entry = roots["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            let id = &e["description"]["id"];
            id["seed"] == 3 && id["target"]["system"]["fault_plan"] == PLAN
        })
        .unwrap_or_else(|| panic!("no saved root of this test's target: {roots}"));
    Path::new(roots["dir"].as_str().unwrap()).join(format!("{}.snap", entry["key"].as_str().unwrap()))
}

#[test]
fn a_saved_root_explores_and_replays_as_the_root_it_saved() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let memory = !linux_memory_may_differ();
    // Made afresh whatever an earlier run of this test left.
    let made = explore(dir.path(), "made", &["--fresh-root"]);
    assert_eq!(made["summary"]["root_restored"], false, "{}", made["summary"]);
    assert!(!made["bugs"].as_array().unwrap().is_empty(), "the loss broke no ping: {}", made["summary"]);
    let digest = exploration_digest(&made, memory);

    let restored = explore(dir.path(), "restored", &[]);
    assert_eq!(restored["summary"]["root_restored"], true, "{}", restored["summary"]);
    let difference = first_difference(&exploration_digest(&restored, memory), &digest);
    assert!(difference.is_none(), "from the saved root it explored otherwise, at {difference:?}");
    let md = common::read(&common::latest(&dir.path().join("restored")).join("report.md"));
    assert!(md.contains("restored from a saved root"), "{md}");

    // A replay starts from the saved root, or with --fresh-root runs the
    // root again; the same failure either way.
    let bug = restored["bugs"][0]["file"].as_str().unwrap();
    let from_root = replay_reproduces(bug, &[]);
    assert_eq!(from_root["from_saved_root"], true, "{from_root}");
    let fresh = replay_reproduces(bug, &["--fresh-root"]);
    assert_eq!(fresh["from_saved_root"], false, "{fresh}");
    assert_eq!(from_root["trace_hash"], fresh["trace_hash"]);

    // A corrupt saved root is not used: the root is made again, and saved.
    let file = saved_root_file();
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let again = explore(dir.path(), "again", &[]);
    assert_eq!(again["summary"]["root_restored"], false, "{}", again["summary"]);
    let difference = first_difference(&exploration_digest(&again, memory), &digest);
    assert!(difference.is_none(), "after a corrupt saved root it explored otherwise, at {difference:?}");
    assert!(std::fs::metadata(&file).is_ok(), "the root is saved again");
}
