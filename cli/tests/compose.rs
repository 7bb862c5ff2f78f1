//! Container images and compose projects, end to end: real Debian images
//! (built from Debian's packages by `hvsim image debian`, cached), loaded
//! from a docker-archive and from an OCI layout, run as containers in the
//! Linux guest. KVM and the guest kernel are needed.

mod common;

use std::path::Path;

use common::{explore_json, hvsim, latest, linux_available, output, redis_image, run_json, user_rdtsc_leaks};
use serde_json::Value;

fn inspect(name: &str) -> Value {
    let out = output(&["image", "inspect", name]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn console_lines(v: &Value) -> Vec<String> {
    v["console"].as_str().expect("console").lines().map(|l| l.trim_end().to_owned()).collect()
}

#[test]
fn a_debian_image_loads_from_both_formats_and_runs_as_a_container() {
    if !linux_available() {
        return;
    }
    let (archive, layout) = redis_image();
    for (source, tag) in [(&archive, "hvsim-test/from-archive:1"), (&layout, "hvsim-test/from-layout:1")] {
        let out = output(&["image", "load", source, "--tag", tag]);
        assert!(out.status.success(), "load {source}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let (a, l) = (inspect("hvsim-test/from-archive:1"), inspect("hvsim-test/from-layout:1"));
    assert_eq!(a["id"], l["id"], "one image config, whichever format carried it");
    // The layout's layer is gzipped, the archive's not: one tar inside.
    assert_eq!(a["layers"][0]["diff_id"], l["layers"][0]["diff_id"]);
    assert_eq!(a["config"]["cmd"][0], "redis-server");

    // As Docker runs it: its own root, user, hostname, /dev and /etc files.
    let script = "id -un; hostname; cat /etc/hostname; grep -c from-layout /etc/hosts; \
                  ls /dev/null /dev/urandom /dev/ptmx /dev/shm >/dev/null && echo devices; \
                  test -x /usr/bin/redis-server && echo redis; echo $HOME; exit 3";
    let (v, code) = run_json(&["--image", "hvsim-test/from-layout:1", "--image-cmd", &format!("sh -c '{script}'")]);
    let lines = console_lines(&v);
    let said: Vec<&str> = lines.iter().filter_map(|l| l.strip_prefix("from-layout | ")).collect();
    assert_eq!(said, ["root", "from-layout", "from-layout", "1", "devices", "redis", "/root"], "{lines:#?}");
    assert_eq!((v["exit_status"].as_u64(), code), (Some(3), 3), "the container's status is the run's");
    assert_eq!(v["services"][0]["exit_status"], 3);
}

/// examples/compose/redis (docs/compose.md's example), three services (a
/// primary, a replica, a client), runs to its end with a custom fault run
/// in the primary's container now and then. The default suite proves what
/// it does on one-container projects: a project run to its end and a
/// custom fault in a container by
/// `compose_variables_come_from_the_env_file_and_never_from_the_host`,
/// services that wait for each other's health by the set checker's test.
#[test]
#[ignore = "slow: three Redis containers take over two minutes here (ci/test.sh --slow)"]
fn the_redis_compose_project_runs_to_completion_with_a_custom_fault() {
    if !linux_available() {
        return;
    }
    redis_image();
    let compose = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis/compose.yaml");
    // With a custom fault: a configuration change run in the primary's
    // container now and then.
    let plan = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis/reload.toml");
    let (v, code) = run_json(&["--compose", compose, "--fault-plan", plan, "--seed", "7", "--vtime-limit", "120s"]);
    let lines = console_lines(&v);
    assert_eq!(code, 0, "{lines:#?}");
    assert!(lines.iter().any(|l| l == "custom[0] node 0: OK"), "redis-cli ran in the primary's container: {lines:#?}");
    assert!(lines.iter().any(|l| l == "hvsim-init: custom[0] node 0: exited with status 0"), "{lines:#?}");
    assert!(v["faults"][0]["kind"] == "node.custom" && v["faults"][0]["landed"].as_u64() >= Some(1), "{}", v["faults"]);
    assert!(lines.iter().any(|l| l == "client | all keys replicated"), "{lines:#?}");
    assert!(lines
        .iter()
        .any(|l| l.starts_with("replica | ") && l.contains("MASTER <-> REPLICA sync: Finished with success")));
    let services: Vec<(String, u64)> = v["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_owned(), s["exit_status"].as_u64().expect("exited")))
        .collect();
    assert_eq!(services, [("primary".into(), 0), ("replica".into(), 0), ("client".into(), 0)]);
}

#[test]
fn compose_mistakes_are_one_line_errors_before_anything_boots() {
    if !linux_available() {
        return; // the image needs mmdebstrap, installed where KVM tests run
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("compose.yaml");
    std::fs::write(&file, "services:\n  db:\n    image: hvsim-test/redis:bookworm\n    depends_on: [cache]\n").unwrap();
    let out = output(&["run", "--compose", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("services.db.depends_on: no service \"cache\""), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // An image the store lacks is pulled (registry.rs, against a registry
    // on loopback); with pulls forbidden, it is named before anything boots.
    std::fs::write(&file, "services:\n  db:\n    image: no-such-image:1\n").unwrap();
    let o = output(&["run", "--compose", file.to_str().unwrap(), "--pull", "never"]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("image no-such-image:1 is not in the image store") && err.contains("--pull never"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Fault plans name services; a name that is not one is refused.
    redis_image();
    std::fs::write(&file, "services:\n  db:\n    image: hvsim-test/redis:bookworm\n").unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, "[[crash]]\nnode = \"cache\"\nat = \"1s\"\n").unwrap();
    let o = output(&["run", "--compose", file.to_str().unwrap(), "--fault-plan", plan.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("crash[0]: no node named \"cache\" (the nodes are db)"), "{err}");
    assert_eq!(o.status.code(), Some(1));
}

/// The history the register project's client printed, for one key.
fn history_of(lines: &[String], key: &str) -> String {
    let tag = format!(r#""key":"{key}""#);
    let events: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("client | "))
        .filter(|l| l.starts_with('{') && l.contains(&tag))
        .collect();
    events.join("\n")
}

#[test]
#[ignore = "slow: a three-node Redis project takes minutes here (ci/test.sh --slow)"]
fn reads_from_a_redis_replica_are_not_linearizable_and_from_the_primary_they_are() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-register");
    let compose = format!("{dir}/compose.yaml");
    let plan = format!("{dir}/slow-replication.toml");
    let (v, code) = run_json(&["--compose", &compose, "--fault-plan", &plan, "--seed", "1", "--vtime-limit", "120s"]);
    let lines = console_lines(&v);
    assert_eq!(code, 0, "{lines:#?}");
    let tmp = tempfile::tempdir().unwrap();
    let check = |key: &str| {
        let history = history_of(&lines, key);
        assert_eq!(history.lines().count(), 18, "six reads and three writes of {key}, each two lines:\n{history}");
        let file = tmp.path().join(format!("{key}.jsonl"));
        std::fs::write(&file, &history).unwrap();
        let o = output(&["check", file.to_str().unwrap(), "--json"]);
        let verdict: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
        (o.status.code(), verdict, history)
    };
    // Reads from the primary: Redis is one register there.
    let (code, verdict, history) = check("p");
    assert_eq!((code, &verdict["verdict"]), (Some(0), &Value::from("linearizable")), "{verdict}\n{history}");
    // Reads from the replica, which hears of each write 300 ms late: a
    // read misses a write that completed before it began.
    let (code, verdict, history) = check("r");
    assert_eq!((code, &verdict["verdict"]), (Some(6), &Value::from("not-linearizable")), "{verdict}\n{history}");
    assert!(verdict["op"].as_str().unwrap().contains(" read r "), "a read is what no order explains: {verdict}");
}

#[test]
#[ignore = "slow: exploring a three-node Redis project on two machines takes minutes here (ci/test.sh --slow)"]
fn two_workers_find_the_replica_staleness_and_it_replays() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/redis-register");
    let (compose, plan) = (format!("{dir}/compose.yaml"), format!("{dir}/slow-replication.toml"));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let args = ["--compose", &compose, "--fault-plan", &plan, "--branches", "2", "--workers", "2", "--slice", "3s"];
    let args = [&args[..], &["--reexecute", "3"]].concat();
    let r = explore_json(&args, &out);
    assert_eq!(r["summary"]["workers"], 2);
    let bugs = r["bugs"].as_array().unwrap();
    let bug = bugs.iter().find(|b| b["summary"] == "assertion failed: replica reads see completed writes");
    let bug = bug.unwrap_or_else(|| panic!("two branches of the slow replica found no stale read: {}", r["summary"]));
    // Re-executed by either machine from the root, and replayed afresh.
    assert_eq!(bug["reproduction"], "reproduced 3/3", "{bug}");
    let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
}

/// A client that fails its always-assertion and then exits 1: the
/// exploration finds one bug, the assertion, with the guest's power-off
/// (status 1) as what followed it, not as a second bug. The script and
/// what it reads come into the container as a bind-mounted directory;
/// the exploration keeps a copy, and so does a merge of it, so the merged
/// record replays from another directory after the project and the
/// exploration are gone (issue 47).
#[test]
fn a_client_exiting_1_after_its_failed_assertion_is_one_bug_that_replays_from_anywhere() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("app/data")).unwrap();
    std::fs::write(project.join("app/data/answer"), "41\n").unwrap();
    std::fs::write(
        project.join("app/check.sh"),
        r#"echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
sleep 0.1
answer=$(cat /app/data/answer)
echo '{"antithesis_assert":{"id":"the answer is 42","message":"the answer is 42","condition":false,"hit":true,"must_hit":true,"assert_type":"always","display_type":"Always","location":{},"details":{"answer":'"$answer"'}}}' > $HVSIM_SDK_OUTPUT
echo "check: the answer was $answer"
exit 1
"#,
    )
    .unwrap();
    let compose = project.join("compose.yaml");
    std::fs::write(
        &compose,
        "services:\n  client:\n    image: hvsim-test/redis:bookworm\n    entrypoint: [\"sh\", \"/app/check.sh\"]\n    \
         volumes:\n      - ./app:/app:ro\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let args = ["--compose", compose.to_str().unwrap(), "--branches", "1", "--reexecute", "1", "--slice", "5s"];
    let r = explore_json(&args, &out);
    let bugs = r["bugs"].as_array().unwrap();
    assert_eq!(bugs.len(), 1, "one failure, one bug: {bugs:#?}");
    let bug = &bugs[0];
    assert_eq!(bug["summary"], "assertion failed: the answer is 42");
    assert_eq!(bug["reproduction"], "reproduced 1/1", "{bug}");
    let after: Vec<&str> = bug["after"].as_array().unwrap().iter().map(|l| l["what"].as_str().unwrap()).collect();
    assert_eq!(after, ["guest crashed: guest powered off with status 1"], "{bug}");
    let file = Path::new(bug["file"].as_str().unwrap());
    let record: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let console_after = record["console_after"].to_string();
    assert!(console_after.contains("client | check: the answer was 41"), "{console_after}");
    // The exploration merged on its own, as a shard's would be.
    let merged = dir.path().join("merged");
    let o = common::hvsim().arg("merge").arg(latest(&out)).arg("--out").arg(&merged).output().unwrap();
    assert_eq!(o.status.code(), Some(8), "a merge with a bug: {}", String::from_utf8_lossy(&o.stderr));
    let merged_record = merged.join("bugs").join(file.file_name().unwrap());
    assert!(merged_record.is_file(), "the merge keeps the record");
    // From another directory, the project and the exploration gone: the
    // merge's copy of the mounted directory serves (without the answer
    // file, the assertion's details would be garbage and nothing would
    // fail).
    std::fs::remove_dir_all(&project).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let o = common::hvsim()
        .current_dir(elsewhere.path())
        .args(["replay", &merged_record.display().to_string(), "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("replay printed no JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
}

/// Compose variables come from the env file given (docs/compose.md), never
/// from the environment hvsim runs in: two runs of the same seed under
/// different host environments are the same run (trace, and memory where
/// the host traps user-mode RDTSC), and a variable with no value is refused
/// before anything boots. A custom fault (docs/faults.md#custom-faults)
/// runs inside the service's container: its hostname, its user, its
/// environment.
#[test]
fn compose_variables_come_from_the_env_file_and_never_from_the_host() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = tempfile::tempdir().unwrap();
    let vars = dir.path().join("vars.env");
    std::fs::write(&vars, "GREETING=hello from the env file\nSECRET=s3\n").unwrap();
    let compose = dir.path().join("compose.yaml");
    std::fs::write(
        &compose,
        r#"services:
  app:
    image: hvsim-test/redis:${TAG:-bookworm}
    entrypoint: ["sh", "-c"]
    command: ["echo \"$$GREETING / $$SECRET / ${MODE:-default mode}\"; sleep 2"]
    environment:
      GREETING: ${GREETING}
      SECRET:
"#,
    )
    .unwrap();
    let plan = dir.path().join("custom.toml");
    std::fs::write(
        &plan,
        "[draw]\nbefore_setup = true\n\n[[draw.fault]]\nkind = \"custom\"\nevery = [\"500ms\", \"1s\"]\n\
         targets = [[\"app\"]]\ncommand = 'echo \"custom: $GREETING, as $(id -un) on $(hostname)\"'\n",
    )
    .unwrap();
    let args = [
        "run",
        "--json",
        "--compose",
        compose.to_str().unwrap(),
        "--env-file",
        vars.to_str().unwrap(),
        "--fault-plan",
        plan.to_str().unwrap(),
    ];
    let run = |host: &str| {
        let o = common::hvsim()
            .args(args)
            .env("GREETING", host)
            .env("SECRET", host)
            .env("MODE", host)
            .env("TAG", host)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
        assert_eq!(o.status.code(), Some(0), "{}", v["console"]);
        v
    };
    let (a, b) = (run("one host"), run("another host"));
    assert!(
        console_lines(&a).iter().any(|l| l == "app | hello from the env file / s3 / default mode"),
        "{:#?}",
        console_lines(&a)
    );
    // The custom fault ran in the container, with its environment.
    let lines = console_lines(&a);
    assert!(
        lines.iter().any(|l| l == "custom[0] node 0: custom: hello from the env file, as root on app"),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l == "hvsim-init: custom[0] node 0: exited with status 0"), "{lines:#?}");
    assert!(a["faults"][0]["kind"] == "node.custom" && a["faults"][0]["landed"].as_u64() >= Some(1), "{}", a["faults"]);
    // Two runs of the same seed: the same run, every exit the same.
    assert_eq!(a["trace_hash"], b["trace_hash"], "the host's environment changed nothing");
    assert_eq!(console_lines(&a), console_lines(&b));
    if user_rdtsc_leaks(&a) {
        // Debian's dynamic loader reads the TSC in user mode at every
        // exec (glibc's rtld timing); where that does not trap (this
        // nested host: see `host_limits`), those words of memory hold host
        // time, and nothing else differs. Elsewhere memory is compared too.
        eprintln!("memory hashes not compared: user-mode RDTSC does not trap on this host");
    } else {
        assert_eq!(a["memory_hash"], b["memory_hash"], "the same seed gives the same memory");
    }
    // Without the env file, GREETING has no value: refused, with its line.
    let o = common::hvsim().args(&args[..4]).env("GREETING", "from the host").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("line 7: services.app.environment.GREETING: variable GREETING has no value"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// A service that dies before setup complete is the harness's failure,
/// named at once: here Debian's `dd` fills the container's disk (a small
/// `--disk-size`) and exits 1 with ENOSPC. `hvsim explore` stops the setup
/// there rather than wait for a setup complete that cannot come, names the
/// service, its status and what it wrote last on stderr, in findings.md
/// and in report.json, and ends with status 1; the manifest's claim is a
/// `harness-error`, not `inconclusive-never-reached`.
#[test]
fn a_service_that_fills_its_disk_before_setup_is_named_with_its_last_output() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = tempfile::tempdir().unwrap();
    let compose = dir.path().join("compose.yaml");
    std::fs::write(
        &compose,
        r#"name: disk-filler
services:
  db:
    image: hvsim-test/redis:bookworm
    entrypoint: ["sh", "-c"]
    command: ["echo 'db: preparing the data directory'; dd if=/dev/zero of=/var/lib/redis/fill bs=1M"]
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hvsim.toml"),
        "[[claim]]\nid = \"db-answers\"\nstatement = \"The database answers.\"\nassertions = [\"db answers\"]\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let o = output(&[
        "explore",
        "--compose",
        compose.to_str().unwrap(),
        "--disk-size",
        "12M",
        "--branches",
        "4",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    let failed = &r["summary"]["setup_failed"];
    assert_eq!((failed["service"].as_str(), failed["status"].as_u64()), (Some("db"), Some(1)), "{failed}");
    let last: Vec<&str> = failed["last_output"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(last.contains(&"db: preparing the data directory"), "{last:?}");
    let enospc = last.iter().find(|l| l.starts_with("dd: error writing") && l.ends_with("No space left on device"));
    let enospc = *enospc.unwrap_or_else(|| panic!("dd's error is not among the last lines: {last:?}"));
    // No timeline ran from a root that never was.
    assert_eq!(r["summary"]["branches"], 0, "{}", r["summary"]);
    assert_eq!(r["summary"]["setup_complete"], false);
    // stderr: the service, its status, what it wrote last.
    assert!(stderr.contains("hvsim: error: the service db exited with status 1 at "), "{stderr}");
    assert!(stderr.contains(", its disk full (No space left on device: raise --disk-size)"), "{stderr}");
    assert!(stderr.contains(&format!("  db | {enospc}")), "{stderr}");
    // The claim is the harness's failure.
    let claim = &r["claims"][0];
    assert_eq!(
        (claim["verdict"].as_str(), claim["blame"].as_str()),
        (Some("harness-error"), Some("harness")),
        "{claim}"
    );
    assert!(claim["reason"].as_str().unwrap().contains("service db exited with status 1"), "{claim}");
    let findings = std::fs::read_to_string(common::latest(&out).join("findings.md")).unwrap();
    // Titled by the project's name, as its directory is named.
    assert!(findings.starts_with("# Findings: disk-filler (seed "), "{findings}");
    let run = common::latest(&out).canonicalize().unwrap();
    assert!(run.to_string_lossy().contains("-disk-filler-seed"), "{}", run.display());
    assert!(findings.contains("**Decision: not-proven**"), "{findings}");
    assert!(findings.contains("## Setup failed") && findings.contains(&format!("db | {enospc}")), "{findings}");
    let md = std::fs::read_to_string(common::latest(&out).join("report.md")).unwrap();
    assert!(md.contains("- root: no root: service db exited with status 1"), "{md}");
}

/// A service that dies in a timeline, with no fault to explain it, is the
/// harness's failure too: `db` registers the check a claim names, reports
/// setup complete, then exits 3 before it evaluates the check, while `idle`
/// keeps the timeline going to its limit. Every timeline's harness failed;
/// stderr, findings.md and report.json name the service, its status and
/// what it wrote last; the never-evaluated check's why is that exit, and
/// the claim is a `harness-error`.
#[test]
fn a_service_that_dies_in_a_timeline_is_named_with_its_last_output() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("db.sh"),
        r#"echo '{"antithesis_assert":{"id":"db answers","message":"db answers","condition":false,"hit":false,"must_hit":true,"assert_type":"always","display_type":"Always","location":{},"details":null}}' > $HVSIM_SDK_OUTPUT
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
sleep 0.05
echo 'db: lost my lease'
exit 3
"#,
    )
    .unwrap();
    let compose = dir.path().join("compose.yaml");
    std::fs::write(
        &compose,
        "services:\n  db:\n    image: hvsim-test/redis:bookworm\n    entrypoint: [\"sh\", \"/db.sh\"]\n    \
         volumes:\n      - ./db.sh:/db.sh:ro\n  idle:\n    image: hvsim-test/redis:bookworm\n    \
         entrypoint: [\"sleep\", \"infinity\"]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("hvsim.toml"),
        "[[claim]]\nid = \"db-answers\"\nstatement = \"The database answers.\"\nassertions = [\"db answers\"]\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let args = ["--branches", "2", "--timeline-limit", "1s", "--reexecute", "0", "--likelihood-runs", "0", "--json"];
    let o = output(
        &[&["explore", "--compose", compose.to_str().unwrap(), "--out", out.to_str().unwrap()][..], &args].concat(),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    let r: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(r["summary"]["setup_complete"], true, "{stderr}");
    let harness = &r["harness"];
    assert_eq!(harness["timelines"], 2, "every timeline's harness failed: {harness}");
    let exit = &harness["service_exit"];
    assert_eq!((exit["service"].as_str(), exit["status"].as_u64()), (Some("db"), Some(3)), "{exit}");
    let last: Vec<&str> = exit["last_output"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(last.last(), Some(&"db: lost my lease"), "{last:?}");
    // The check it never evaluated is the headline, and why is the exit.
    assert_eq!(r["unevaluated"]["properties"], serde_json::json!(["db answers"]), "{}", r["unevaluated"]);
    let why = r["unevaluated"]["why"].as_str().unwrap();
    assert!(why.starts_with("the service db exited with status 3 at "), "{why}");
    assert!(
        stderr.contains(
            "hvsim: warning: the harness failed in 2 timeline(s), first: the service db exited with status 3 at "
        ),
        "{stderr}"
    );
    assert!(stderr.contains("  db | db: lost my lease"), "{stderr}");
    let claim = &r["claims"][0];
    assert_eq!(
        (claim["verdict"].as_str(), claim["blame"].as_str()),
        (Some("harness-error"), Some("harness")),
        "{claim}"
    );
    assert!(claim["reason"].as_str().unwrap().contains("service db exited with status 3"), "{claim}");
    let findings = std::fs::read_to_string(common::latest(&out).join("findings.md")).unwrap();
    assert!(findings.contains("**Decision: not-proven**"), "{findings}");
    assert!(findings.contains("## A service exited") && findings.contains("db | db: lost my lease"), "{findings}");
}

/// A setup that is slow in virtual time (kernel work, which this nested
/// host emulates: seconds of wall time for milliseconds of virtual) still
/// shows progress that moves: at least every second, the machine's
/// activity, each service's state and the last line it wrote, however
/// little virtual time moved; with -v every line of the console as it
/// comes; once the root is made, what it cost; then the branch running.
#[test]
fn a_setup_slow_in_virtual_time_shows_progress_that_moves() {
    if !linux_available() {
        return;
    }
    redis_image();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("prep.sh"),
        r#"i=0
while [ $i -lt 4 ]; do
  ls -R /usr/lib > /dev/null
  echo "prep: step $i"
  i=$((i+1))
done
echo '{"antithesis_setup":{"status":"complete","details":null}}' > $HVSIM_SDK_OUTPUT
for j in 0 1; do
  ls -R /usr/lib > /dev/null
  echo "prep: after $j"
done
exec sleep infinity
"#,
    )
    .unwrap();
    let compose = dir.path().join("compose.yaml");
    std::fs::write(
        &compose,
        "name: slow-setup\nservices:\n  prep:\n    image: hvsim-test/redis:bookworm\n    entrypoint: [\"sh\", \"/prep.sh\"]\n    \
         volumes:\n      - ./prep.sh:/prep.sh:ro\n  idle:\n    image: hvsim-test/redis:bookworm\n    \
         entrypoint: [\"sleep\", \"infinity\"]\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let started = std::time::Instant::now();
    let o = hvsim()
        .args(["explore", "-v", "--compose", compose.to_str().unwrap(), "--fresh-root", "--branches", "1"])
        .args(["--timeline-limit", "1s"])
        .args(["--reexecute", "0", "--likelihood-runs", "0", "--out", out.to_str().unwrap()])
        .env("HVSIM_STATUS_EVERY", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let wall = started.elapsed();
    let setup: Vec<&str> = err.lines().filter(|l| l.contains("| setup: waiting for setup complete")).collect();
    // The status lines: activity, virtual time, and each service.
    assert!(setup.len() >= 4, "{} status lines in {wall:?}: {err}", setup.len());
    for (i, l) in setup.iter().enumerate() {
        // (Exits per second from the second report on.)
        assert!((i == 0 || l.contains(" exits/s")) && l.contains("SDK message(s)"), "{l}");
        assert!(l.contains("| idle  ") && l.contains("| prep  "), "{l}");
    }
    // They change while the setup runs: prep's last line moves on, and
    // the lines differ even where virtual time hardly does.
    let said: std::collections::BTreeSet<&str> = setup.iter().filter_map(|l| l.split("| setup: ").nth(1)).collect();
    assert!(said.len() >= 4, "{setup:#?}");
    let steps: std::collections::BTreeSet<&str> =
        setup.iter().filter_map(|l| l.split("prep: step ").nth(1)).map(|s| s.split(' ').next().unwrap()).collect();
    assert!(steps.len() >= 2, "prep's last line never moved: {setup:#?}");
    assert!(setup.iter().any(|l| l.contains("| prep  started: prep: step")), "{setup:#?}");
    // Once the root is made, what it cost; then the branch as it runs,
    // its virtual time and its console's last line.
    assert!(err.contains("hvsim: explore: the root took ") && err.contains("A timeline that does as much"), "{err}");
    let live: Vec<&str> = err.lines().filter(|l| l.contains("| branch 1 at ")).collect();
    assert!(live.iter().any(|l| l.contains("of virtual time: prep | prep: after")), "{err}");
    // -v: the console as it comes, every step of it before the root (init
    // relays a service's output, so the last step's line may come after
    // the setup complete the service sent at once).
    for i in 0..3 {
        assert!(err.lines().any(|l| l == format!("prep | prep: step {i}")), "step {i} not streamed: {err}");
    }
}
