//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

/// The demo's bug id, derived as docs/cli.md says: from what failed.
pub fn vault_bug_id() -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(b"assertion:the vault stays closed");
    format!("BUG-{}", &hex::encode(digest)[..12])
}

/// Whether KVM tests can run here. Without /dev/kvm they are skipped with a
/// printed reason, unless HVSIM_REQUIRE_KVM=1 (as in CI), where that fails.
pub fn kvm_available() -> bool {
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => true,
        Err(e) => {
            if required_everywhere() {
                panic!("HVSIM_REQUIRE_KVM=1 but /dev/kvm cannot be opened: {e}");
            }
            eprintln!("skipping KVM test: /dev/kvm cannot be opened: {e}");
            false
        }
    }
}

/// Whether every test must check all it says (HVSIM_REQUIRE_KVM=1, as CI
/// sets): KVM, tools and pinned sources missing are then failures.
fn required_everywhere() -> bool {
    std::env::var("HVSIM_REQUIRE_KVM").as_deref() == Ok("1")
}

/// A test that cannot check all its name says here, and why. A limit of the
/// host (user-mode RDTSC that does not trap, no PMU) is printed and the test
/// passes. Anything else (a tool or a pinned kernel source missing) fails
/// it under HVSIM_REQUIRE_KVM=1, as in CI, whose machines ci/test.sh
/// prepares with everything the tests need; elsewhere it is printed.
pub fn skipping(why: &str, host_limit: bool) {
    if !host_limit && required_everywhere() {
        panic!("cannot check here, and CI must: {why}");
    }
    eprintln!("skipped: {why}");
}

/// Whether a test that boots Linux can run here: [`kvm_available`], and,
/// under cargo-nextest, in the `linux` test group of .config/nextest.toml,
/// which starts such tests first and gives them their timeout. A Linux
/// test missing from the group fails here, naming itself.
pub fn linux_available() -> bool {
    if let Ok(group) = std::env::var("NEXTEST_TEST_GROUP") {
        let name = std::env::var("NEXTEST_TEST_NAME").unwrap_or_default();
        assert_eq!(group, "linux", "{name} boots Linux: name it in .config/nextest.toml's linux group");
    }
    kvm_available()
}

/// hvsim checks every document it writes (reports, bug records,
/// summaries, findings) against its schema with this set to 1
/// (`hvsim_explorer::schema`): so every test checks its documents.
pub const SCHEMA_CHECK: &str = hvsim_explorer::document::CHECK_VAR;

pub fn hvsim() -> Command {
    let mut c = Command::cargo_bin("hvsim").expect("hvsim binary is built");
    c.env(SCHEMA_CHECK, "1");
    c
}

pub fn output(args: &[&str]) -> Output {
    hvsim().args(args).output().expect("hvsim runs")
}

/// Runs `hvsim run --json ARGS` and returns the summary and the exit code.
pub fn run_json(args: &[&str]) -> (Value, i32) {
    let mut full = vec!["run", "--json"];
    full.extend_from_slice(args);
    let out = output(&full);
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "hvsim {full:?} printed no JSON summary ({e}); stdout: {text}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (v, out.status.code().expect("exited"))
}

/// `hvsim explore --json --out OUT ARGS`: the report, once the exit status
/// is checked against it (8 with a bug, 0 without) and OUT/latest is
/// checked to hold the same report. Unless ARGS say otherwise, each bug
/// is re-executed once (not 3 times) and its likelihood is not estimated
/// (up to 40 more timelines per bug): the tests that look at those say
/// `--reexecute` or `--likelihood-runs`, and only they pay for them.
pub fn explore_json(args: &[&str], out: &Path) -> Value {
    let mut full = vec!["explore", "--json", "--out", out.to_str().unwrap()];
    full.extend_from_slice(args);
    for (flag, cheap) in [("--reexecute", "1"), ("--likelihood-runs", "0")] {
        if !args.contains(&flag) {
            full.extend_from_slice(&[flag, cheap]);
        }
    }
    let o = output(&full);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let report: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("hvsim {full:?} printed no JSON report ({e}): {stderr}"));
    let bugs = report["bugs"].as_array().expect("a report lists its bugs").len();
    let expected = if bugs > 0 { 8 } else { 0 };
    assert_eq!(o.status.code(), Some(expected), "hvsim {full:?} with {bugs} bug(s): {stderr}");
    let written: Value = serde_json::from_str(&read(&latest(out).join("report.json"))).unwrap();
    assert_eq!(written["summary"]["seed"], report["summary"]["seed"]);
    report
}

/// The newest exploration's directory in an `--out` directory.
pub fn latest(out: &Path) -> PathBuf {
    out.join("latest")
}

/// The subcommands an `hvsim ... --help` text lists (`help` aside).
pub fn subcommands(help: &str) -> Vec<String> {
    let Some(start) = help.find("Commands:") else { return Vec::new() };
    help[start..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// `hvsim PATH... --help`, each path asked once.
#[derive(Default)]
pub struct Helps(std::collections::BTreeMap<Vec<String>, String>);

impl Helps {
    pub fn of(&mut self, path: &[String]) -> String {
        self.0
            .entry(path.to_vec())
            .or_insert_with(|| {
                let args: Vec<&str> = path.iter().map(String::as_str).chain(["--help"]).collect();
                let o = output(&args);
                assert!(o.status.success(), "hvsim {args:?}: {}", String::from_utf8_lossy(&o.stderr));
                String::from_utf8_lossy(&o.stdout).into_owned()
            })
            .clone()
    }

    /// The subcommand path an `hvsim` command's words (after `hvsim`)
    /// name: `explore`, `image debian`. Flags are skipped; the path ends at
    /// the first word its help does not list as a subcommand.
    pub fn subcommand_path(&mut self, words: &[String]) -> Vec<String> {
        let mut path: Vec<String> = Vec::new();
        for w in words.iter().filter(|w| !w.starts_with('-')) {
            if path.is_empty() || subcommands(&self.of(&path)).contains(w) {
                path.push(w.clone());
            } else {
                break;
            }
        }
        path
    }
}

/// Whether a `--help` text names `flag` as a word of its own (`--json`,
/// not the start of `--json-lines`).
pub fn documents(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let before = help[..i].chars().next_back();
        let after = help[i + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// Every file under `dir`, in name order.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines the command printed, between init's readiness line and its
/// report (the console is a tty: lines end in CR LF).
pub fn command_output(v: &Value) -> Vec<String> {
    let console = v["console"].as_str().expect("console");
    let after = console.split("hvsim-init: ready").nth(1).unwrap_or_else(|| panic!("no readiness line: {console}"));
    let before = after.split("hvsim-init: command exited").next().unwrap();
    before.lines().map(|l| l.trim_end_matches('\r').to_owned()).filter(|l| !l.is_empty()).collect()
}

/// Whether this host lets guest programs read the host's TSC (reported by
/// the run in `host_limits`).
pub fn user_rdtsc_leaks(v: &Value) -> bool {
    v["host_limits"]
        .as_array()
        .expect("host_limits")
        .iter()
        .any(|l| l.as_str().is_some_and(|l| l.starts_with("user-mode RDTSC does not trap")))
}

/// What an exploration found, from its report and bug files, without what
/// depends on the host's speed, on the workers or on whether the root was
/// restored from a saved one (wall times, file paths, the command line):
/// two explorations that agree on this explored the same timelines. Each
/// bug's failure point carries the hash of its trace and, unless `memory`
/// is false, of guest memory. How often a bug's re-executions reproduced it
/// is left out too: an observation made after the exploration, which a
/// host that lets guest programs read its TSC can change (memory may then
/// differ between executions of the same trace).
#[allow(dead_code)]
pub fn exploration_digest(report: &Value, memory: bool) -> Value {
    const LEFT_OUT: [&str; 10] = [
        "invocation",
        "workers",
        "root_restored",
        "file",
        "replay_command",
        "first_bug",
        "reproduction",
        "replayable",
        "replayable_reasons",
        "confirmed",
    ];
    fn strip(v: &Value, memory: bool) -> Value {
        match v {
            Value::Object(o) => Value::Object(
                o.iter()
                    .filter(|(k, _)| {
                        !(k.ends_with("_ms") || LEFT_OUT.contains(&k.as_str()) || (!memory && *k == "memory_hash"))
                    })
                    .map(|(k, v)| (k.clone(), strip(v, memory)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(|v| strip(v, memory)).collect()),
            v => v.clone(),
        }
    }
    let records: Vec<Value> = report["bugs"]
        .as_array()
        .expect("a report lists its bugs")
        .iter()
        .map(|b| {
            let file = b["file"].as_str().expect("each bug has a file");
            strip(&serde_json::from_str(&read(Path::new(file))).expect("a bug file is JSON"), memory)
        })
        .collect();
    serde_json::json!({ "report": strip(report, memory), "records": records })
}

/// Whether Linux programs here can keep host-dependent values in memory
/// (`hvsim doctor`: CPUID not virtualized, or user-mode RDTSC not trapped),
/// so that the same trace may end with different memory.
#[allow(dead_code)]
pub fn linux_memory_may_differ() -> bool {
    let o = output(&["doctor", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("hvsim doctor --json prints JSON");
    let p = &v["probes"];
    p["cpuid_virtualized"] == false || p["user_rdtsc_traps"] == false
}

/// Where two JSON values first differ (a path like `/bugs/0/at`), if they do.
#[allow(dead_code)]
pub fn first_difference(a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => x.keys().chain(y.keys()).find_map(|k| match (x.get(k), y.get(k)) {
            (Some(p), Some(q)) => first_difference(p, q).map(|d| format!("/{k}{d}")),
            (p, q) => Some(format!("/{k}: {p:?} vs {q:?}")),
        }),
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (p, q))| first_difference(p, q).map(|d| format!("/{i}{d}")))
        }
        _ => (a != b).then(|| format!(": {a} vs {b}")),
    }
}

/// `hvsim replay FILE --json MORE`: its JSON, once it said the bug was
/// reproduced (exit status 0).
pub fn replay_reproduces(file: &str, more: &[&str]) -> Value {
    let o = output(&[&["replay", file, "--json"], more].concat());
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("replay printed no JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
    v
}

/// `hvsim replay --json --snapshot FILE MORE`: the restored run's JSON.
pub fn replay_snapshot(file: &Path, more: &[&str]) -> Value {
    let o = output(&[&["replay", "--json", "--snapshot", file.to_str().unwrap()], more].concat());
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("replay printed no JSON ({e}): {}", String::from_utf8_lossy(&o.stderr)))
}

/// An image of Debian packages made by `hvsim image debian` (once per
/// machine, then cached) and loaded into the store as `name`.
pub fn debian_image(name: &str, packages: &str) {
    let out = output(&["image", "debian", name, "--packages", packages]);
    assert!(out.status.success(), "hvsim image debian {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// One of the test suite's images (`hvsim image debian --FLAG`: `redis`,
/// `postgres`, `mariadb`...), built once per machine, then loaded.
pub fn test_image(flag: &str) {
    let out = output(&["image", "debian", &format!("--{flag}")]);
    assert!(out.status.success(), "hvsim image debian --{flag}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The test suite's Redis image, built (once per machine) and loaded; the
/// paths of its docker-archive and OCI layout.
pub fn redis_image() -> (String, String) {
    let out = output(&["image", "debian", "--redis", "--paths"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "hvsim image debian --redis: {text}{}", String::from_utf8_lossy(&out.stderr));
    let path = |prefix: &str| {
        text.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_else(|| panic!("no {prefix} in {text}")).to_owned()
    };
    (path("docker-archive: "), path("OCI layout: "))
}

/// Builds a C program from `cli/tests/guest/` statically; returns HOST:GUEST.
pub fn c_program(dir: &Path, name: &str, guest: &str) -> String {
    c_program_from(dir, &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest").join(format!("{name}.c")), guest)
}

/// [`c_program`] of the C source at `src`.
pub fn c_program_from(dir: &Path, src: &Path, guest: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = dir.join(src.file_stem().expect("a source file's name"));
    let out = std::process::Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-static", "-s", "-pthread", "-I"])
        .arg(root.join("../guest-sdk/c"))
        .arg("-o")
        .arg(&bin)
        .arg(src)
        .output()
        .expect("gcc runs");
    assert!(out.status.success(), "gcc {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    format!("{}:{guest}", bin.display())
}
