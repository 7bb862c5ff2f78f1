//! Every command and subcommand takes `--json`, and those that need no KVM
//! print one JSON document with it (a cache directory of their own each).

mod common;

use std::path::Path;
use std::process::Output;

use common::{hvsim, output, subcommands};
use serde_json::Value;

/// Commands where JSON makes no sense (none so far): keep this short.
const NO_JSON: &[&str] = &[];

fn help(args: &[&str]) -> String {
    let o = output(args);
    assert!(o.status.success(), "hvsim {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn every_command_and_subcommand_takes_json() {
    let top = subcommands(&help(&["--help"]));
    assert!(top.len() >= 10, "{top:?}");
    let mut checked = Vec::new();
    for c in &top {
        let text = help(&[c, "--help"]);
        let subs = subcommands(&text);
        // A command with subcommands does nothing itself: they take --json.
        let leaves: Vec<(String, String)> = if subs.is_empty() {
            vec![(c.clone(), text)]
        } else {
            subs.iter().map(|s| (format!("{c} {s}"), help(&[c, s, "--help"]))).collect()
        };
        for (name, text) in leaves {
            if !NO_JSON.contains(&name.as_str()) {
                assert!(text.contains("--json"), "hvsim {name} has no --json: {text}");
            }
            checked.push(name);
        }
    }
    assert!(checked.len() >= 25, "only {checked:?}");
}

/// `hvsim ARGS` with its own cache directory: exit status and stdout's JSON.
fn json(cache: &Path, args: &[&str]) -> (i32, Value) {
    let o: Output = hvsim().args(args).env("HVSIM_CACHE_DIR", cache).output().expect("hvsim runs");
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("hvsim {args:?}: {e}: {o:?}"));
    (o.status.code().expect("exited"), v)
}

#[test]
fn diff_log_json_says_where_logs_differ() {
    let dir = tempfile::tempdir().unwrap();
    let log = |name: &str, events: &[&str]| {
        let path = dir.path().join(name);
        std::fs::write(&path, format!("# hvsim determinism log v1\n# guest t\n{}\n", events.join("\n"))).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let a = log("a.log", &["0 1000 pio-out port=0xf00 data=1", "1 2000 hlt", "2 3000 hlt"]);
    let b = log("b.log", &["0 1000 pio-out port=0xf00 data=1", "1 2000 hlt", "2 3000 pio-in port=0xf04 data=2"]);
    let cache = dir.path().join("cache");

    let (code, v) = json(&cache, &["diff-log", "--json", &a, &a]);
    assert_eq!((code, &v["identical"], &v["event"]), (0, &Value::Bool(true), &Value::Null), "{v}");

    let (code, v) = json(&cache, &["diff-log", "--json", "--context", "1", &a, &b]);
    assert_eq!((code, v["identical"].as_bool(), v["event"].as_u64()), (1, Some(false), Some(2)), "{v}");
    assert_eq!(v["common"], serde_json::json!(["1 2000 hlt"]), "{v}");
    assert_eq!((v["a"]["event"].as_str(), v["b"]["file"].as_str()), (Some("2 3000 hlt"), Some(b.as_str())), "{v}");
}

#[test]
fn cache_and_image_json_with_empty_stores() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let (code, v) = json(cache, &["cache", "ls", "--json"]);
    assert_eq!((code, v["entries"].as_array().map(Vec::len)), (0, Some(0)), "{v}");
    assert_eq!(v["roots"]["entries"].as_array().map(Vec::len), Some(0), "{v}");
    let (code, v) = json(cache, &["cache", "clear", "--json"]);
    assert_eq!((code, v["boot_cache"]["removed"].as_u64(), v["roots"]["removed"].as_u64()), (0, Some(0), Some(0)));
    let (code, v) = json(cache, &["image", "ls", "--json"]);
    assert_eq!((code, v["images"].as_array().map(Vec::len)), (0, Some(0)), "{v}");
}

/// `kernel path` describes the kernel whether built or not (not built:
/// exit status 1, as without --json); with a stand-in vmlinux where the
/// build would put it, `path` and `build` find it without building.
#[test]
fn kernel_json_locates_and_describes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path();
    let (code, v) = json(cache, &["kernel", "path", "--json"]);
    assert_eq!((code, &v["cached"], &v["vmlinux"]), (1, &Value::Bool(false), &Value::Null), "{v}");
    // Without linux-source-6.1 installed there is no key, and `build` would
    // install it: not in a cheap test.
    let Some(key) = v["key"].as_str() else {
        common::skipping("the built half: linux-source-6.1 is not installed (hvsim kernel build installs it)", false);
        return;
    };
    let vmlinux = cache.join("kernel").join(&key[..16]).join("vmlinux");
    std::fs::create_dir_all(vmlinux.parent().unwrap()).unwrap();
    std::fs::write(&vmlinux, b"not a kernel").unwrap();
    for command in ["path", "build"] {
        let (code, v) = json(cache, &["kernel", command, "--json"]);
        assert_eq!((code, v["cached"].as_bool()), (0, Some(true)), "{command}: {v}");
        assert_eq!(v["vmlinux"].as_str(), vmlinux.to_str(), "{command}: {v}");
        assert_eq!(v["key"].as_str(), Some(key), "{command}: {v}");
        assert!(v["source_version"].is_string() && v["vmlinux_sha256"].as_str().is_some_and(|h| h.len() == 64));
    }
}

/// `debug --json` is JSON Lines: an object per command and one at the end.
/// The demo has no init to run commands, so each is left running at the
/// limit: the lines' shape, without a Linux boot.
#[test]
fn debug_json_is_a_line_per_command_and_one_at_the_end() {
    if !common::kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = common::explore_json(&["--branches", "100"], &dir.path().join("out"));
    let bug = report["bugs"][0]["file"].as_str().expect("the demo's bug");
    let o = hvsim()
        .args(["debug", bug, "--json", "--at", "-5ms", "--command-limit", "50ms"])
        .write_stdin("echo hi\n\nls\n")
        .output()
        .expect("hvsim runs");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let types: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    assert_eq!(types, ["command", "command", "end"], "{lines:?}");
    assert_eq!((lines[0]["command"].as_str(), lines[0]["still_running"].as_bool()), (Some("echo hi"), Some(true)));
    assert_eq!(lines[1]["elapsed_ns"].as_u64(), Some(50_000_000), "{lines:?}");
    assert_eq!((lines[2]["commands"].as_u64(), &lines[2]["vtime_ns"]), (Some(2), &lines[1]["vtime_ns"]));
}
