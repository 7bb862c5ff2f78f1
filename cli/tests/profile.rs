//! The guest profiler (`--profile-guest`): its samples are invisible to the
//! guest (same trace, same memory), and what it reports names real kernel
//! functions, processes and nodes.

mod common;

use std::path::Path;

use common::{kvm_available, linux_available, read, run_json, user_rdtsc_leaks};
use serde_json::Value;

fn hashes(v: &Value) -> (String, String) {
    (v["trace_hash"].as_str().unwrap().to_owned(), v["memory_hash"].as_str().unwrap().to_owned())
}

fn profiled(args: &[&str], prefix: &Path, rate: &str) -> (Value, String) {
    let mut full = args.to_vec();
    let prefix_arg = prefix.to_str().unwrap();
    full.extend(["--profile-guest", rate, "--profile-out", prefix_arg]);
    let (v, code) = run_json(&full);
    assert!(code == 0 || code == 3 || code == 4, "exit {code}");
    let folded = read(&prefix.with_extension("folded"));
    let svg = read(&prefix.with_extension("svg"));
    assert!(svg.starts_with("<?xml") && svg.contains("</svg>"), "not an SVG: {}", &svg[..svg.len().min(200)]);
    (v, folded)
}

/// Sample counts by frame prefix of folded lines.
fn samples(folded: &str, pred: impl Fn(&str) -> bool) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| pred(stack))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn samples_change_nothing_in_a_raw_guest() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["--guest", "timer", "--seed", "5"];
    let (plain, code) = run_json(&args);
    assert_eq!(code, 0);
    // A high rate: thousands of kicks out of KVM_RUN during the run.
    let (with, folded) = profiled(&args, &dir.path().join("p"), "5000");
    assert_eq!(hashes(&plain), hashes(&with), "profiling changed the run");
    assert_eq!(plain["exits"], with["exits"]);
    let guest = samples(&folded, |s| s.contains("[kernel]") || s.contains("[user]"));
    assert!(guest > 0, "no guest samples: {folded}");
}

#[test]
fn a_linux_profile_names_kernel_functions_processes_and_nodes() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Two nodes each exec a few programs: kernel work (fork, exec, page
    // faults) in processes the profile must name, on nodes it must name;
    // then their shells count in user mode (well under the watchdog's 2 s,
    // without a system call), code the profile must place in the program.
    let args = [
        "--linux",
        "--seed",
        "3",
        "--nodes",
        "2",
        "--node-cmd",
        "for i in 1 2 3; do ls /bin > /dev/null; done; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done",
        "--init-cmd",
        "sleep 1",
    ];
    let (plain, code) = run_json(&args);
    assert_eq!(code, 0, "{plain}");
    let (with, folded) = profiled(&args, &dir.path().join("p"), "1000");
    assert_eq!(plain["trace_hash"], with["trace_hash"], "profiling changed the trace");
    if user_rdtsc_leaks(&plain) {
        eprintln!("memory hashes not compared: user-mode RDTSC does not trap on this host");
    } else {
        assert_eq!(plain["memory_hash"], with["memory_hash"], "profiling changed memory");
    }

    let kernel = samples(&folded, |s| s.contains(";[kernel];"));
    assert!(kernel > 20, "too few kernel samples ({kernel}): {folded}");
    // Kernel frames are named from vmlinux: hex frames are rare.
    let frames: Vec<&str> = folded
        .lines()
        .filter(|l| l.contains(";[kernel];"))
        .flat_map(|l| l.rsplit_once(' ').unwrap().0.split(";[kernel];").nth(1).unwrap().split(';'))
        .collect();
    let unnamed = frames.iter().filter(|f| f.starts_with("0x")).count();
    assert!(unnamed * 10 <= frames.len(), "{unnamed} of {} kernel frames unnamed: {folded}", frames.len());
    // Stacks go deeper than the sampled instruction: frame pointers work.
    assert!(folded.lines().any(|l| l.split(';').count() >= 6), "no deep kernel stacks: {folded}");
    // The programs and the nodes they ran on.
    let on = |node: &str, comm: &str| samples(&folded, |s| s.starts_with(&format!("{node};{comm};")));
    for node in ["node0", "node1"] {
        assert!(on(node, "ls") > 0, "no samples of ls on {node}: {folded}");
    }
    // User samples of the counting shells are named by program and offset:
    // sh has no soname, so its image takes the process name.
    let user = samples(&folded, |s| s.contains(";sh;[user];"));
    let leaf_in_sh = |s: &str| s.contains(";sh;[user];") && s.rsplit(';').next().unwrap().starts_with("sh+0x");
    let named = samples(&folded, leaf_in_sh);
    assert!(user >= 10, "too few user samples of sh ({user}): {folded}");
    assert!(named * 10 >= user * 9, "{named} of {user} user samples of sh named sh+offset: {folded}");
}
