//! Test Composer templates in compose projects (docs/compose.md): the
//! template's commands run in a service's container, in the order and
//! under the fault regime Antithesis's Test Composer gives them, and a
//! command that fails is a bug with the composition in its record. Real
//! Debian images; KVM and the guest kernel are needed.

mod common;

use std::path::Path;

use common::{explore_json, kvm_available, output};
use serde_json::Value;

fn redis_image() {
    let out = output(&["image", "debian", "--redis"]);
    assert!(out.status.success(), "hvsim image debian --redis: {}", String::from_utf8_lossy(&out.stderr));
}

fn write_script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A project of one service whose template checks the schedule from the
/// inside: `first_` runs before every driver, drivers run in the service's
/// container (its hostname, environment and mount namespace) after it,
/// `finally_` only once every driver has ended, and an `eventually_` only
/// once the drivers were stopped; `helper_` never runs. Each of the two
/// last exits 1 once its checks passed (2 if one failed), so the timeline
/// ends with a bug named after it, whose record lists the composition,
/// and which replays.
#[test]
fn a_template_runs_in_test_composer_order_and_its_failing_command_is_a_bug_that_replays() {
    if !kvm_available() {
        return;
    }
    redis_image();
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("test/main");
    std::fs::create_dir_all(&t).unwrap();
    let driver = |name: &str| {
        format!(
            "[ -e /tmp/first ] || {{ echo 'a driver before first_'; exit 2; }}\n\
             [ \"$ROLE\" = app ] && [ \"$(cat /proc/sys/kernel/hostname)\" = app ] || {{ echo 'not in app'; exit 2; }}\n\
             echo \"{name} start $$\" >> /tmp/drivers\nsleep 0.05\necho \"{name} end $$\" >> /tmp/drivers\n"
        )
    };
    write_script(&t, "first_setup.sh", "[ -e /tmp/drivers ] && exit 2\ntouch /tmp/first\necho 'set up'\n");
    write_script(&t, "parallel_driver_a.sh", &driver("a"));
    write_script(&t, "parallel_driver_b.sh", &driver("b"));
    write_script(&t, "anytime_probe.sh", "echo \"anytime: $(grep -c start /tmp/drivers) driver(s) started\"\n");
    write_script(&t, "helper_lib.sh", "touch /tmp/helper\nexit 3\n");
    let ended = "[ -e /tmp/helper ] && { echo 'a helper ran'; exit 2; }\n\
                 starts=$(grep -c start /tmp/drivers); ends=$(grep -c end /tmp/drivers)\n";
    write_script(
        &t,
        "finally_check.sh",
        &format!(
            "{ended}[ \"$starts\" -ge 1 ] && [ \"$starts\" = \"$ends\" ] || {{ echo \"finally: $starts started, $ends ended\"; exit 2; }}\n\
             echo \"finally: all $starts driver(s) ended\"\nexit 1\n"
        ),
    );
    write_script(
        &t,
        "eventually_check.sh",
        &format!(
            "{ended}[ \"$starts\" -ge 1 ] || exit 2\n\
             ps=$(grep -l parallel_drive[r] /proc/[0-9]*/cmdline 2>/dev/null | wc -l)\n\
             [ \"$ps\" = 0 ] || {{ echo \"eventually: $ps driver(s) still running\"; exit 2; }}\n\
             echo \"eventually: drivers stopped\"\nexit 1\n"
        ),
    );
    let compose = dir.path().join("compose.yaml");
    std::fs::write(
        &compose,
        r#"services:
  app:
    image: hvsim-test/redis:bookworm
    environment:
      ROLE: app
    entrypoint: ["sh", "-c", "echo '{\"antithesis_setup\":{\"status\":\"complete\",\"details\":null}}' > $$HVSIM_SDK_OUTPUT; exec sleep infinity"]
    volumes:
      - ./test:/opt/antithesis/test/v1:ro
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    let r = explore_json(&["--compose", compose.to_str().unwrap(), "--branches", "1", "--reexecute", "1"], &out);
    assert_eq!(r["summary"]["timelines"]["ended"], 1, "the timeline ends with its template: {}", r["summary"]);
    let bugs = r["bugs"].as_array().unwrap();
    assert_eq!(bugs.len(), 1, "{bugs:#?}");
    let bug = &bugs[0];
    let summary = bug["summary"].as_str().unwrap();
    let last = match summary {
        "assertion failed: Test Composer: main/finally_check.sh exits 0" => "main/finally_check.sh",
        "assertion failed: Test Composer: main/eventually_check.sh exits 0" => "main/eventually_check.sh",
        _ => panic!("the bug is the last command's exit: {bug}"),
    };
    assert_eq!(bug["reproduction"], "reproduced 1/1", "{bug}");
    let record: Value = serde_json::from_str(&std::fs::read_to_string(bug["file"].as_str().unwrap()).unwrap()).unwrap();
    let c = &record["composer"];
    assert_eq!(c["template"], "main", "{record}");
    let runs = c["runs"].as_array().unwrap();
    let field = |r: &Value, k: &str| r[k].as_u64().unwrap_or(u64::MAX);
    assert_eq!(runs[0]["command"], "main/first_setup.sh", "{runs:#?}");
    assert_eq!(runs[0]["status"], 0, "{runs:#?}");
    let end = runs.last().unwrap();
    assert_eq!((end["command"].as_str(), &end["status"]), (Some(last), &Value::from(1)), "{runs:#?}");
    let drivers: Vec<&Value> =
        runs.iter().filter(|r| r["command"].as_str().unwrap().starts_with("main/parallel_driver_")).collect();
    assert!(!drivers.is_empty(), "{runs:#?}");
    for d in &drivers {
        assert!(field(d, "started_ns") >= field(&runs[0], "ended_ns"), "first_ runs alone: {runs:#?}");
        assert!(field(d, "ended_ns") <= field(end, "started_ns"), "drivers end before {last}: {runs:#?}");
        // Drivers run to their end, or the composer stops them for an
        // eventually command: neither is a failure.
        assert!(d["status"] == 0 || (d["stopped"] == true && last.contains("eventually")), "{runs:#?}");
    }
    assert!(runs.iter().all(|r| r["service"] == "app"), "{runs:#?}");
    assert!(!runs.iter().any(|r| r["command"].as_str().unwrap().contains("helper")), "{runs:#?}");
    // The exploration's tally agrees with the composition it found.
    let tally = &r["composer"]["commands"];
    assert_eq!(tally[last]["failed"], 1, "{tally}");
    assert_eq!(tally["main/first_setup.sh"]["succeeded"], 1, "{tally}");
    let report = std::fs::read_to_string(common::latest(&out).join("report.md")).unwrap();
    assert!(report.contains("## Test Composer") && report.contains("Test Composer template `main`"), "{report}");

    let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("replay printed no JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
}
