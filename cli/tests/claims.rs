//! Claims judged with evidence (docs/claims.md), on real programs in the
//! Linux guest: busybox `ping` between two nodes on hvsim's switch, under
//! partitions the explorer draws per timeline. The verdict and blame rules
//! themselves are unit-tested in `explorer/src/record/claims.rs`; here they meet
//! real timelines, real landings and real re-executions.

mod common;

use std::path::Path;

use common::*;
use serde_json::Value;

/// Shell helpers (forking costs seconds where guest kernel code is
/// emulated): `pause S` waits S seconds of virtual time; `assert ID OK`
/// sends an always-assertion.
const LIB: &str = r#"mkfifo /tmp/pause
pause() { read -t "$1" _ <> /tmp/pause; }
assert() {
  echo "{\"antithesis_assert\":{\"id\":\"$1\",\"message\":\"$1\",\"condition\":$2,\"hit\":true,\"must_hit\":true,\"assert_type\":\"always\",\"display_type\":\"Always\",\"location\":{},\"details\":null}}" > $HVSIM_SDK_OUTPUT
}
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
"#;

/// Two rounds: node 1 pings node 0 until it answers (at most 4 tries of
/// 1 s each), asserting that the first try answered and that some try did.
/// A partition lasts at most 60 ms, so retries always get through; a
/// first try during one does not.
const PINGS: &str = r#"
for round in 1 2; do
  first=false; ok=false
  for try in 1 2 3 4; do
    if hvsim-node 1 ping -c 1 -W 1 10.0.0.1 > /dev/null; then
      ok=true; [ $try = 1 ] && first=true; break
    fi
  done
  assert "node 0 answers at the first try" $first
  assert "node 0 answers within four tries" $ok
  pause 0.03
done
# `read -t` timing out is a failure; the workload is not.
exit 0
"#;

/// One claim the retries keep, one the first try breaks under a
/// partition; both must survive partitions.
const MANIFEST: &str = r#"
[[claim]]
id = "answers-after-retries"
statement = "Node 0 answers within four tries, partitions or not."
assertions = ["node 0 answers within four tries"]
faults = ["partition"]

[[claim]]
id = "answers-at-once"
statement = "Node 0 answers the first ping, partitions or not."
assertions = ["node 0 answers at the first try"]
faults = ["partition"]
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn claim<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["claims"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("no claim {id}: {r}"))
}

/// `hvsim explore` of `script` on two nodes under `plan`, judged by
/// MANIFEST: the report and the findings.
fn explore(dir: &Path, plan: &str, script: &str, branches: &str) -> (Value, Value, String) {
    let plan = write(dir, "plan.toml", plan);
    let manifest = write(dir, "hvsim.toml", MANIFEST);
    let out = dir.join("out");
    let script = format!("{LIB}{script}");
    let args = [
        "--linux",
        "--nodes",
        "2",
        "--fault-plan",
        &plan,
        "--manifest",
        &manifest,
        "--init-cmd",
        &script,
        "--branches",
        branches,
        "--reexecute",
        "1",
        "--likelihood-runs",
        "0",
    ];
    let r = explore_json(&args, &out);
    let findings: Value = serde_json::from_str(&read(&latest(&out).join("findings.json"))).unwrap();
    let md = read(&latest(&out).join("findings.md"));
    // Every report shows the claims, with their verdicts.
    let verdict = claim(&r, "answers-after-retries")["verdict"].as_str().unwrap().to_owned();
    let report_md = read(&latest(&out).join("report.md"));
    assert!(report_md.contains(&format!("| answers-after-retries | {verdict} |")), "{report_md}");
    let html = read(&latest(&out).join("report.html"));
    assert!(html.contains("Claims (2)") && html.contains(&verdict), "no claims table in report.html");
    (r, findings, md)
}

/// Partitions drawn every 10-80 ms: the retried claim passes with the
/// partitions that landed while it was exercised as its evidence; the
/// first-try claim fails, reproduced, and is the system's even on this
/// host, whose limits (user-mode RDTSC) could let memory differ.
#[test]
fn a_claim_passes_with_the_partitions_that_landed_and_a_reproduced_failure_is_the_systems() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = "[[draw.fault]]\nkind = \"partition\"\nevery = [\"10ms\", \"80ms\"]\nduration = [\"20ms\", \"60ms\"]\n\
                targets = [\"one\"]\n";
    let (r, findings, md) = explore(dir.path(), plan, PINGS, "5");
    let pass = claim(&r, "answers-after-retries");
    assert_eq!(pass["verdict"], "pass", "{pass}");
    let landed = &pass["evidence"]["faults_landed"]["partition"];
    assert!(landed["timelines"].as_u64() >= Some(1) && landed["touches"].as_u64() >= Some(1), "{pass}");
    assert!(pass["reason"].as_str().unwrap().contains("partition: "), "{pass}");
    assert!(pass["evidence"]["exercised"].as_u64() >= Some(1), "{pass}");
    let fail = claim(&r, "answers-at-once");
    assert_eq!((&fail["verdict"], &fail["blame"]), (&"fail-reproducible".into(), &"system".into()), "{fail}");
    let bug = &r["bugs"].as_array().unwrap().iter().find(|b| fail["bugs"][0] == b["id"]).expect("its bug").clone();
    assert_eq!((&bug["blame"], &bug["verdict"]), (&"system".into(), &"fail-reproducible".into()), "{bug}");
    // This host has limits, and the failure is still the system's.
    assert!(!r["host_limits"].as_array().unwrap().is_empty(), "this host has limits: {}", r["host_limits"]);
    assert_eq!(findings["decision"], "do-not-ship", "{findings}");
    for text in
        ["**Decision: do-not-ship**", "| answers-after-retries | pass |", "landed while it was exercised: partition"]
    {
        assert!(md.contains(text), "{text:?} not in:\n{md}");
    }
}

/// The same claims where no partition ever strikes (the plan draws only
/// latency, which lands): the claim that held is inconclusive, not a pass,
/// and says what never landed.
#[test]
fn a_claim_whose_partition_never_landed_is_inconclusive() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = "[[draw.fault]]\nkind = \"latency\"\nevery = [\"10ms\", \"40ms\"]\nduration = [\"20ms\", \"60ms\"]\n\
                delay = [\"1ms\", \"2ms\"]\ntargets = [\"one\"]\n";
    // The first try always answers here: one ping a round is enough.
    let (r, findings, _) = explore(dir.path(), plan, PINGS, "2");
    for id in ["answers-after-retries", "answers-at-once"] {
        let c = claim(&r, id);
        assert_eq!(c["verdict"], "inconclusive-faults-not-landed", "{c}");
        assert!(c["reason"].as_str().unwrap().contains("no partition landed"), "{c}");
        assert!(c["evidence"]["faults_landed"].get("partition").is_none(), "{c}");
    }
    assert!(r["faults"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "net.latency" && f["landed"].as_u64() > Some(0)));
    assert_eq!(findings["decision"], "not-proven", "{findings}");
}

/// The workload ends with an error after the claim's assertions held:
/// the crash is the harness's, and the claim reads harness-error.
#[test]
fn a_workload_crash_is_a_harness_error() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script =
        "assert \"node 0 answers within four tries\" true\nassert \"node 0 answers at the first try\" true\nexit 3\n";
    let out = dir.path().join("out");
    let manifest = write(dir.path(), "hvsim.toml", MANIFEST);
    let script = format!("{LIB}{script}");
    let args = ["--linux", "--manifest", &manifest, "--init-cmd", &script, "--branches", "1", "--reexecute", "1"];
    let r = explore_json(&args, &out);
    for id in ["answers-after-retries", "answers-at-once"] {
        let c = claim(&r, id);
        assert_eq!((&c["verdict"], &c["blame"]), (&"harness-error".into(), &"harness".into()), "{c}");
        assert!(c["reason"].as_str().unwrap().contains("status 3"), "{c}");
    }
    let crash = &r["bugs"][0];
    assert_eq!(crash["blame"], "harness", "{crash}");
    let findings: Value = serde_json::from_str(&read(&latest(&out).join("findings.json"))).unwrap();
    assert_eq!(findings["decision"], "not-proven", "{findings}");
}
