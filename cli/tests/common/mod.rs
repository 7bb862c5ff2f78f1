//! Helpers shared by the CLI integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use serde_json::Value;

/// Whether KVM tests can run here. Without /dev/kvm they are skipped with a
/// printed reason, unless HVSIM_REQUIRE_KVM=1 (as in CI), where that fails.
pub fn kvm_available() -> bool {
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("HVSIM_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("HVSIM_REQUIRE_KVM=1 but /dev/kvm cannot be opened: {e}");
            }
            eprintln!("skipping KVM test: /dev/kvm cannot be opened: {e}");
            false
        }
    }
}

pub fn hvsim() -> Command {
    Command::cargo_bin("hvsim").expect("hvsim binary is built")
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
