//! Checkers on a real system: the histories a guest program records
//! through the SDK, checked at the end of every timeline by the checkers
//! the project manifest names (docs/checkers.md). KVM, the guest kernel and
//! Debian's Redis image are needed.

mod common;

use common::{debian_image, explore_json, linux_available, output, redis_image, test_image};
use std::path::Path;

use serde_json::Value;

/// `examples/compose/redis-set`: Debian's Redis, keeping its data only in
/// memory, and a client adding five elements to a set, recording each
/// operation as an `hvsim_history` event, and
/// reading the set back with faults stopped. Its fault plan lets each
/// timeline draw kills of the store; its manifest names the set checker.
/// A kill after acknowledged adds loses them: the exploration finds it as
/// a checker's bug whose record names the lost elements and keeps the
/// violating history stamped with virtual time, the record's sub-history is
/// what `hvsim check` finds invalid, and `hvsim replay` reproduces the bug
/// (from the saved root) with the same trace. About 2 minutes alone here,
/// the root made; half as long again beside the raw-guest tests.
#[test]
fn the_set_checker_finds_redis_losing_acknowledged_adds_to_a_kill_and_the_bug_replays() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-set");
    let (compose, plan) = (format!("{dir}/compose.yaml"), format!("{dir}/faults.toml"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // One branch: seed 0's kill strikes it and loses adds (docs/checkers.md).
    let args =
        ["--compose", &compose, "--fault-plan", &plan, "--seed", "0", "--branches", "1", "--timeline-limit", "8s"];
    let r = explore_json(&[&args[..], &["--reexecute", "0"]].concat(), &out);
    // The manifest beside the compose file named the checker; every
    // timeline recorded a history and was checked.
    let checkers = r["checkers"].as_array().unwrap();
    assert_eq!(checkers.len(), 1, "{checkers:?}");
    let set = &checkers[0];
    assert_eq!((set["name"].as_str(), set["model"].as_str()), (Some("set"), Some("set")));
    assert_eq!(set["timelines"], 1, "{set}");
    assert_eq!(set["operations"].as_u64(), Some(6), "five adds and a read: {set}");
    assert!(set["invalid"].as_u64().unwrap() >= 1, "no timeline lost an add: {set}\n{}", r["faults"]);
    let bug = r["bugs"].as_array().unwrap().iter().find(|b| Some(&b["id"]) == Some(&set["bug"]));
    let bug = bug.unwrap_or_else(|| panic!("the checker's bug is not in the report: {}", r["bugs"]));
    let summary = bug["summary"].as_str().unwrap();
    assert!(summary.starts_with("checker set (set) found the history INVALID: s: "), "{summary}");
    // The report names the target in a few lines, the plan's rule in one;
    // the whole description is folded below them.
    let report = std::fs::read_to_string(common::latest(&out).join("report.md")).unwrap();
    for line in [
        "  - service store: image hvsim-test/redis:bookworm",
        "  - fault plan: draw.fault: duration [2ms, 10ms], every [500us, 3ms], kind kill, targets [[store]]",
        "<details><summary>The target's whole description</summary>",
    ] {
        assert!(report.lines().any(|l| l == line), "{line:?} not in report.md:\n{report}");
    }

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
    // The record tells the story on one line of virtual time: Redis's own
    // output under its service's name, init's words on the services, the
    // recorded operations, the kill as it struck, then the failure.
    let story = record["story"].as_array().unwrap();
    let times: Vec<u64> = story.iter().map(|e| e["vtime_ns"].as_u64().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "the story is in time order: {times:?}");
    let told = |what: &str, source: &str, text: &str| {
        story.iter().any(|e| e["what"] == what && e["source"] == source && e["text"].as_str().unwrap().contains(text))
    };
    assert!(told("output", "store", "Ready to accept connections"), "{story:#?}");
    assert!(told("init", "init", "service store is healthy"), "{story:#?}");
    assert!(told("sdk", "sdk", " ok add s "), "{story:#?}");
    assert!(told("fault", "faults", "kill store: strikes"), "{story:#?}");
    assert_eq!(story.last().unwrap()["what"], "failure", "{story:#?}");
    assert_eq!(story.last().unwrap()["text"].as_str(), Some(summary));
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
    // It told the same story as it re-executed: from the root on, the
    // record's entries again, the kill among them.
    let retold: Vec<&Value> = v["story"].as_array().unwrap().iter().collect();
    let kill = story.iter().find(|e| e["what"] == "fault").unwrap();
    assert!(retold.contains(&kill), "the replay did not tell {kill}: {retold:#?}");
}

/// Redis Sentinel's image: Debian's packages, built by hvsim's own tooling.
const SENTINEL_IMAGE: &str = "hvsim-test/redis-sentinel:bookworm";
const SENTINEL_PACKAGES: &str = "redis-server,redis-sentinel,redis-tools";
const SENTINEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-sentinel");

/// A short run of `examples/compose/redis-sentinel` (three Redis nodes,
/// three Sentinels, a client running the project's Test Composer
/// template), without faults: the drivers add through the primary the
/// Sentinels name, the final read runs once they agree, and the set
/// checker, named by the manifest, finds every acknowledged add read back.
/// The exploration that finds lost adds is in the slow suite.
#[test]
#[ignore = "slow: seven containers run for minutes here (ci/test.sh --slow)"]
fn redis_sentinel_without_faults_reads_back_every_acknowledged_add() {
    if !linux_available() {
        return;
    }
    debian_image(SENTINEL_IMAGE, SENTINEL_PACKAGES);
    let tmp = tempfile::tempdir().unwrap();
    let compose = format!("{SENTINEL}/compose.yaml");
    let args = ["--compose", &compose, "--branches", "1", "--timeline-limit", "40s", "--reexecute", "0"];
    let r = explore_json(&args, &tmp.path().join("out"));
    let commands = &r["composer"]["commands"];
    assert!(commands["sentinel/parallel_driver_add.pl"]["succeeded"].as_u64() >= Some(1), "{commands}");
    assert_eq!(commands["sentinel/finally_read.pl"]["succeeded"], 1, "{commands}");
    let set = &r["checkers"][0];
    assert_eq!((set["timelines"].as_u64(), set["valid"].as_u64()), (Some(1), Some(1)), "{set}");
    // Each driver adds 6 elements; the final read is one more operation.
    assert!(set["operations"].as_u64() >= Some(7), "{set}");
    assert_eq!(r["bugs"].as_array().map(Vec::len), Some(0), "{}", r["bugs"]);
}

/// The budget every exploration in docs/checkers.md states: seed 1, 10
/// branches, 2 workers, timelines of up to 60 s; its report.
fn explore_stated_budget(compose: &str, plan: &str, more: &[&str], out: &Path) -> Value {
    let args = ["--compose", compose, "--fault-plan", plan, "--timeline-limit", "60s"];
    explore_json(&[&args[..], &["--seed", "1", "--branches", "10", "--workers", "2"], more].concat(), out)
}

/// The record of the first checker's bug, if it found one.
fn checker_bug_record(r: &Value) -> Option<(String, Value)> {
    let bug = r["bugs"].as_array()?.iter().find(|b| b["id"] == r["checkers"][0]["bug"])?;
    let file = bug["file"].as_str()?.to_owned();
    Some((file.clone(), serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()))
}

/// The exploration of docs/checkers.md#redis-sentinel-losing-acknowledged-adds-found-by-search:
/// partitions of any shape drawn per timeline (seed 1, 10 branches, 2
/// workers) find Sentinel failing over while the old primary, cut off
/// with the client, acknowledges adds that the failover then throws away.
/// The set checker names them; the record holds a partition that struck
/// before the read and the lost adds in the sub-history; a replay from the
/// saved root reproduces it. About 16 minutes here, and a replay.
#[test]
#[ignore = "slow: an exploration of seven containers takes a quarter of an hour here (ci/test.sh --slow)"]
fn redis_sentinel_loses_acknowledged_adds_to_a_partition_found_by_search_and_the_bug_replays() {
    if !linux_available() {
        return;
    }
    debian_image(SENTINEL_IMAGE, SENTINEL_PACKAGES);
    let tmp = tempfile::tempdir().unwrap();
    let (compose, plan) = (format!("{SENTINEL}/compose.yaml"), format!("{SENTINEL}/partitions.toml"));
    let r = explore_stated_budget(&compose, &plan, &[], &tmp.path().join("out"));
    let set = &r["checkers"][0];
    assert!(set["invalid"].as_u64() >= Some(1), "no timeline lost an add: {set}\n{}", r["faults"]);
    let (file, record) = checker_bug_record(&r).expect("the checker's bug");
    let verdict = &record["history"]["verdict"]["keys"][0];
    let lost: Vec<u64> = verdict["lost"].as_array().unwrap().iter().filter_map(Value::as_u64).collect();
    assert!(!lost.is_empty(), "{verdict}");
    // A partition landed before the final read, and every lost add was
    // acknowledged (an `ok` in the sub-history) before that read.
    let sub = record["history"]["sub_history"].as_array().unwrap();
    let read = sub.iter().find(|e| e["f"] == "read" && e["type"] == "ok").expect("the final read");
    let partitions: Vec<&Value> =
        record["faults"].as_array().unwrap().iter().filter(|f| f["kind"] == "partition").collect();
    assert!(
        partitions.iter().any(|p| p["landed"].as_u64() > Some(0)
            && p["start_ns"].as_u64().expect("start_ns") < read["time"].as_u64().expect("the read's time")),
        "{}",
        record["faults"]
    );
    for v in &lost {
        assert!(
            sub.iter().any(|e| e["type"] == "ok" && e["value"].as_u64() == Some(*v)),
            "{v} not acknowledged: {sub:?}"
        );
    }
    let o = output(&["replay", &file, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert_eq!((v["reproduced"].as_bool(), v["trace_matches"].as_bool()), (Some(true), Some(true)), "{v}");
    assert_eq!(v["from_saved_root"].as_bool(), Some(true), "{v}");
}

/// The same project with only the primary at setup (`r1`) cut off, the
/// client included (seed 1, 10 branches, 2 workers): what it loses, if
/// anything, it did not acknowledge while cut off. The client cannot reach
/// `r1` during the partition, so no lost add was acknowledged inside one;
/// losses come at the edges (docs/checkers.md). About 11 minutes here.
#[test]
#[ignore = "slow: an exploration of seven containers takes ten minutes here (ci/test.sh --slow)"]
fn redis_sentinel_with_only_the_primary_isolated_loses_no_add_acknowledged_during_the_cut() {
    if !linux_available() {
        return;
    }
    debian_image(SENTINEL_IMAGE, SENTINEL_PACKAGES);
    let tmp = tempfile::tempdir().unwrap();
    let (compose, plan) = (format!("{SENTINEL}/compose.yaml"), format!("{SENTINEL}/primary-isolated.toml"));
    let r = explore_stated_budget(&compose, &plan, &[], &tmp.path().join("out"));
    let set = &r["checkers"][0];
    assert_eq!(set["timelines"], 10, "{}", r["checkers"]);
    // The property is about adds acknowledged while the primary was cut
    // off: the exploration must have cut it off, and checked histories.
    let cut =
        r["faults"].as_array().unwrap().iter().any(|f| f["kind"] == "net.partition" && f["landed"].as_u64() > Some(0));
    assert!(cut, "the primary was never cut off: {}", r["faults"]);
    assert!(set["operations"].as_u64().expect("operations") > 0, "{set}");
    let Some((_, record)) = checker_bug_record(&r) else {
        // Nothing lost at all: no acknowledged add was lost, during a cut or otherwise.
        assert_eq!(set["invalid"], 0, "{set}");
        return;
    };
    let cuts: Vec<(u64, u64)> = record["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["landed"].as_u64() > Some(0))
        .map(|f| (f["start_ns"].as_u64().unwrap(), f["ended_ns"].as_u64().unwrap()))
        .collect();
    let sub = record["history"]["sub_history"].as_array().unwrap();
    let lost = record["history"]["verdict"]["keys"][0]["lost"].as_array().unwrap();
    assert!(!lost.is_empty(), "{}", record["history"]);
    for v in lost {
        let ok = sub.iter().find(|e| e["type"] == "ok" && &e["value"] == v).expect("a lost add was acknowledged");
        let t = ok["time"].as_u64().unwrap();
        assert!(!cuts.iter().any(|&(a, b)| a <= t && t < b), "{v} acknowledged at {t} ns, inside a cut: {cuts:?}");
    }
}

/// etcd, the negative control (examples/compose/etcd): three members of
/// Debian's etcd-server, a Test Composer workload writing and reading one
/// key with linearizable reads, and a fault plan of every kind a correct
/// database survives (swarm: a random half per line of descent). Over the
/// stated budget (seed 1, 10 branches, 2 workers) the register checker
/// finds no violation, while faults land and timelines are decided.
#[test]
#[ignore = "slow: an exploration of a three-member etcd cluster takes half an hour here (ci/test.sh --slow)"]
fn etcd_stays_linearizable_under_every_survivable_fault() {
    if !linux_available() {
        return;
    }
    debian_image("hvsim-test/etcd:bookworm", "etcd-server,etcd-client");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/etcd");
    let (compose, plan) = (format!("{dir}/compose.yaml"), format!("{dir}/faults.toml"));
    let tmp = tempfile::tempdir().unwrap();
    let r = explore_stated_budget(&compose, &plan, &["--disk-size", "256M"], &tmp.path().join("out"));
    let register = &r["checkers"][0];
    assert_eq!(register["model"], "register", "{register}");
    assert_eq!(register["invalid"], 0, "etcd lost linearizability: {}", r["bugs"]);
    assert!(register["valid"].as_u64() >= Some(5), "too few timelines decided: {register}");
    let kinds_landed = r["faults"].as_array().unwrap().iter().filter(|f| f["landed"].as_u64() > Some(0)).count();
    assert!(kinds_landed >= 5, "faults of only {kinds_landed} kinds landed: {}", r["faults"]);
}

const REDIS_TXN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-txn");

/// `examples/compose/redis-txn/compose-atomic.yaml`: Test Composer drivers
/// run transfers on Debian's Redis, each transaction one Lua script that
/// Redis runs alone, and record them as a list-append history; the
/// manifest's checker finds it serializable (the negative control of the
/// exploration below). One timeline. In the slow suite: the default one
/// checks clean transactional histories of PostgreSQL and MariaDB.
#[test]
#[ignore = "slow: the default suite checks PostgreSQL's and MariaDB's clean histories instead (ci/test.sh --slow)"]
fn redis_transactions_run_as_one_script_are_serializable() {
    if !linux_available() {
        return;
    }
    one_clean_transactional_timeline("redis", &format!("{REDIS_TXN}/compose-atomic.yaml"));
}

/// `examples/compose/redis-txn/compose.yaml`: the same transfers, each
/// micro-operation its own request. Drivers' transactions interleave and
/// the list-append checker finds them not serializable: the bug's record
/// names the anomaly, keeps a sub-history `hvsim check` finds invalid and
/// the cycle with each edge's evidence (drawn in report.html); a replay
/// reproduces it.
#[test]
#[ignore = "slow: an exploration of Redis with interleaving drivers (ci/test.sh --slow)"]
fn redis_transactions_sent_step_by_step_are_not_serializable_and_the_bug_replays() {
    if !linux_available() {
        return;
    }
    redis_image();
    let tmp = tempfile::tempdir().unwrap();
    let compose = format!("{REDIS_TXN}/compose.yaml");
    let out = tmp.path().join("out");
    let args = ["--compose", &compose, "--seed", "1", "--branches", "3", "--timeline-limit", "30s", "--reexecute", "0"];
    let r = explore_json(&args, &out);
    let (anomalies, _) = checker_bug_replays(&r, &out, &tmp, "list-append");
    assert!(
        anomalies.iter().any(|a| ["G2-item", "G-single", "G-nonadjacent", "G1c", "G0"].contains(&a.as_str())),
        "{anomalies:?}"
    );
}

/// What a checker's bug in an exploration's report `r` (out in `out`)
/// must hold: its record names the anomalies and keeps a sub-history
/// `hvsim check --model MODEL` finds invalid; a transactional model's
/// cycle is drawn in report.html; a replay reproduces the bug. The
/// anomalies and the verdict.
fn checker_bug_replays(r: &Value, out: &Path, tmp: &tempfile::TempDir, model: &str) -> (Vec<String>, Value) {
    let (file, record) = checker_bug_record(r).unwrap_or_else(|| panic!("no checker bug: {}", r["checkers"]));
    let anomalies: Vec<String> =
        record["history"]["anomalies"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    let sub: Vec<String> = record["history"]["sub_history"].as_array().unwrap().iter().map(Value::to_string).collect();
    let sub_file = tmp.path().join("sub.jsonl");
    std::fs::write(&sub_file, sub.join("\n")).unwrap();
    let o = output(&["check", "--model", model, sub_file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(6), "{}", String::from_utf8_lossy(&o.stdout));
    if model == "list-append" {
        let html = std::fs::read_to_string(common::latest(out).join("report.html")).unwrap();
        assert!(html.contains("<svg class=\"cycle\""), "report.html draws no cycle");
    }
    let o = output(&["replay", &file, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    assert_eq!((v["reproduced"].as_bool(), v["trace_matches"].as_bool()), (Some(true), Some(true)), "{v}");
    (anomalies, record["history"]["verdict"].clone())
}

/// `examples/compose/redis-lease`: drivers take a lease on Debian's Redis
/// (`SET NX PX`, a 1000 ms term) and hold it at most 600 ms by their own
/// monotonic clocks, while the plan bumps the store's realtime clock by
/// one to five seconds. Redis expires keys by realtime, so a forward bump
/// hands the lease to a second driver while the first still works: the
/// lease checker's bug names both acquires and blames the early grant,
/// its sub-history is invalid to `hvsim check --model lease`, and it
/// replays. About 7 minutes here with the root.
#[test]
#[ignore = "slow: an exploration of Redis under clock bumps and a replay (ci/test.sh --slow)"]
fn redis_leases_overlap_when_the_store_clock_jumps_and_the_bug_replays() {
    if !linux_available() {
        return;
    }
    redis_image();
    let tmp = tempfile::tempdir().unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-lease");
    let (compose, plan) = (format!("{dir}/compose.yaml"), format!("{dir}/faults.toml"));
    let out = tmp.path().join("out");
    let args = ["--compose", &compose, "--fault-plan", &plan, "--seed", "1", "--branches", "3"];
    let r = explore_json(&[&args[..], &["--timeline-limit", "20s", "--reexecute", "0"]].concat(), &out);
    let bumps = r["faults"].as_array().unwrap().iter().find(|f| f["kind"] == "clock.bump").map(|f| f["landed"].clone());
    assert!(bumps.and_then(|l| l.as_u64()) > Some(0), "no bump landed: {}", r["faults"]);
    let (anomalies, verdict) = checker_bug_replays(&r, &out, &tmp, "lease");
    assert!(anomalies.iter().all(|a| a.starts_with("two holders \"lease\" at lines")), "{anomalies:?}");
    let overlaps = verdict["overlaps"].as_array().unwrap();
    // Within their term: the store gave the lease away early.
    assert!(overlaps.iter().all(|o| o["first"]["overstayed_ns"] == 0), "{verdict}");
    assert_eq!(r["claims"][0]["verdict"], "fail-unconfirmed", "{}", r["claims"][0]);
}

const SQL_TXN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/sql-txn");

/// `compose` (a transfers example, its drivers recording a list-append
/// history, its manifest holding it to serializability; in the test
/// suite's image `--image`) explored for one timeline: some drivers ran,
/// and the history is serializable. No bug.
fn one_clean_transactional_timeline(image: &str, compose: &str) {
    test_image(image);
    let tmp = tempfile::tempdir().unwrap();
    let args = ["--compose", compose, "--branches", "1", "--timeline-limit", "30s", "--reexecute", "0"];
    let r = explore_json(&args, &tmp.path().join("out"));
    let commands = &r["composer"]["commands"];
    assert!(commands["accounts/parallel_driver_transfer.sh"]["succeeded"].as_u64() >= Some(1), "{commands}");
    let checker = &r["checkers"][0];
    assert_eq!(
        (checker["model"].as_str(), checker["consistency"].as_str()),
        (Some("list-append"), Some("serializable")),
        "{checker}"
    );
    assert_eq!((checker["timelines"].as_u64(), checker["valid"].as_u64()), (Some(1), Some(1)), "{checker}");
    // Three transfers a driver.
    assert!(checker["operations"].as_u64() >= Some(3), "{checker}");
    assert_eq!(r["bugs"].as_array().map(Vec::len), Some(0), "{}", r["bugs"]);
}

/// `examples/compose/sql-txn/{db}-serializable.yaml`: a few transfers,
/// each one transaction of Debian's database at SERIALIZABLE, every one
/// recorded and the history serializable (some may be refused: a
/// serialization failure is the database keeping its promise).
fn sql_transactions_at_serializable(db: &str) {
    one_clean_transactional_timeline(db, &format!("{SQL_TXN}/{db}-serializable.yaml"));
}

/// PostgreSQL 15 at SERIALIZABLE (serializable snapshot isolation): the
/// negative control of the write skew below. About 3 minutes here.
#[test]
fn postgres_transactions_at_serializable_are_serializable() {
    if linux_available() {
        sql_transactions_at_serializable("postgres");
    }
}

/// MariaDB 10.11 (InnoDB) at SERIALIZABLE: the negative control of the
/// lost updates below. About 3 minutes here.
#[test]
fn mariadb_transactions_at_serializable_are_serializable() {
    if linux_available() {
        sql_transactions_at_serializable("mariadb");
    }
}

/// `examples/compose/sql-txn/{compose}` explored from seed 1 for three
/// timelines: the list-append checker's bug, which must replay; its
/// anomalies and its verdict.
fn sql_transactions_bug(db: &str, compose: &str) -> (Vec<String>, Value) {
    test_image(db);
    let tmp = tempfile::tempdir().unwrap();
    let compose = format!("{SQL_TXN}/{compose}");
    let out = tmp.path().join("out");
    let args = ["--compose", &compose, "--seed", "1", "--branches", "3", "--timeline-limit", "60s", "--reexecute", "0"];
    let r = explore_json(&args, &out);
    checker_bug_replays(&r, &out, &tmp, "list-append")
}

/// PostgreSQL at REPEATABLE READ, which it implements as snapshot
/// isolation: two transfers that read the same balances and append to
/// different accounts both commit, a write skew (G2-item) that rules out
/// repeatable read (Adya's PL-2.99) and serializability but not snapshot
/// isolation. About 5 minutes here, and a replay.
#[test]
#[ignore = "slow: three timelines of PostgreSQL and a replay (ci/test.sh --slow)"]
fn postgres_repeatable_read_lets_write_skew_through_and_the_bug_replays() {
    if !linux_available() {
        return;
    }
    let (anomalies, verdict) = sql_transactions_bug("postgres", "compose.yaml");
    assert_eq!(anomalies, ["G2-item"], "{verdict}");
    assert_eq!(verdict["weakest_ruled_out"], serde_json::json!(["repeatable-read"]), "{verdict}");
    assert_eq!(verdict["strongest_consistent"], serde_json::json!(["snapshot-isolation"]), "{verdict}");
}

/// MariaDB at REPEATABLE READ: reads see the transaction's snapshot but
/// an append writes the row's latest version, so a transfer appends after
/// another's append it never read: lost updates (G-single), which rule out
/// snapshot isolation too, as Jepsen reported for MySQL 8.0.34's
/// repeatable read. About 5 minutes here, and a replay.
#[test]
#[ignore = "slow: three timelines of MariaDB and a replay (ci/test.sh --slow)"]
fn mariadb_repeatable_read_loses_updates_and_the_bug_replays() {
    if !linux_available() {
        return;
    }
    let (anomalies, verdict) = sql_transactions_bug("mariadb", "mariadb.yaml");
    assert!(
        anomalies.iter().any(|a| a == "G-single") && anomalies.iter().any(|a| a == "lost-update"),
        "{anomalies:?} {verdict}"
    );
    let ruled_out = verdict["ruled_out"].as_array().unwrap();
    assert!(ruled_out.iter().any(|m| m == "snapshot-isolation"), "{verdict}");
}

/// `examples/compose/postgres-bank` under `plan` (seed 1, three
/// timelines): the drawn faults of each `kind` land, every timeline's
/// ledger is checked (the `finally_` read), and PostgreSQL keeps every
/// read's total and no balance below zero: no bug, the claim holds.
fn bank_keeps_its_money(plan: &str, kinds: &[&str], limit: &str) {
    test_image("postgres");
    let tmp = tempfile::tempdir().unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/postgres-bank");
    let (compose, plan) = (format!("{dir}/compose.yaml"), format!("{dir}/{plan}"));
    let args = ["--compose", &compose, "--fault-plan", &plan, "--seed", "1", "--branches", "3"];
    let r =
        explore_json(&[&args[..], &["--timeline-limit", limit, "--reexecute", "0"]].concat(), &tmp.path().join("out"));
    for kind in kinds {
        let landed = r["faults"].as_array().unwrap().iter().find(|f| f["kind"] == *kind).map(|f| f["landed"].clone());
        assert!(landed.and_then(|l| l.as_u64()) > Some(0), "no {kind} landed: {}", r["faults"]);
    }
    let checker = &r["checkers"][0];
    assert_eq!(checker["model"], "ledger", "{checker}");
    assert_eq!((checker["timelines"].as_u64(), checker["valid"].as_u64()), (Some(3), Some(3)), "{checker}");
    assert_eq!(r["bugs"].as_array().map(Vec::len), Some(0), "{}", r["bugs"]);
    assert_eq!(r["claims"][0]["verdict"], "pass", "{}", r["claims"][0]);
}

/// The client cut off from PostgreSQL at drawn moments (`faults.toml`).
#[test]
#[ignore = "slow: three timelines of PostgreSQL under partitions (ci/test.sh --slow)"]
fn a_bank_on_postgres_keeps_its_money_through_partitions() {
    if linux_available() {
        bank_keeps_its_money("faults.toml", &["net.partition"], "30s");
    }
}

/// The same cuts, and the database's node losing power at drawn moments
/// (`crashes.toml`): PostgreSQL recovers from its write-ahead log each
/// time. Half an hour here: each crash is a PostgreSQL restart.
#[test]
#[ignore = "slow: three timelines of PostgreSQL under crashes and partitions, half an hour (ci/test.sh --slow)"]
fn a_bank_on_postgres_keeps_its_money_through_crashes_and_partitions() {
    if linux_available() {
        bank_keeps_its_money("crashes.toml", &["net.partition", "node.crash"], "60s");
    }
}
