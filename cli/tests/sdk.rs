//! Branches that really diverge, and programs built with the official
//! Antithesis SDKs working unchanged (issue: "Branches that really diverge,
//! and programs built with the official Antithesis SDKs work unchanged").
//! Every program here is real and runs inside the Linux guest: the official
//! Rust crate from crates.io, and small C programs that do to the output
//! path and to libvoidstar exactly what the Go and C++ SDKs do.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

fn assertion<'a>(r: &'a Value, message: &str) -> &'a Value {
    r["assertions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["message"] == message)
        .unwrap_or_else(|| panic!("{message:?} missing from the report: {}", r["assertions"]))
}

/// The vault's bug in an exploration's report: "the vault stays closed"
/// failed, and its bug record replays. Returns the bug.
fn vault_bug_replays(r: &Value) -> &Value {
    let closed = assertion(r, "the vault stays closed");
    assert_eq!(closed["verdict"], "failed", "{closed}");
    let bug = r["bugs"].as_array().unwrap().iter().find(|b| b["summary"] == "assertion failed: the vault stays closed");
    let bug = bug.unwrap_or_else(|| panic!("no bug: {}", r["bugs"]));
    replay_reproduces(bug["file"].as_str().unwrap(), &[]);
    bug
}

#[test]
fn branches_diverge_in_the_kernel_and_in_programs_with_private_generators() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The kernel's random pool after a snapshot: every seed re-keys it.
    let snap = dir.path().join("urandom.snap");
    let command = "sleep 1; head -c 16 /dev/urandom | od -An -tx1";
    let (original, code) = run_json(&[
        "--linux",
        "--seed",
        "1",
        "--init-cmd",
        command,
        "--snapshot-at",
        "500ms",
        "--save-snapshot",
        snap.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{}", original["console"]);
    let replay = |seed: &str| -> Value { replay_snapshot(&snap, &["--seed", seed]) };
    let (a, b, c) = (replay("7"), replay("7"), replay("8"));
    let bytes = |v: &Value| command_output(v).join(" ");
    assert_eq!(bytes(&a).split_whitespace().count(), 16, "{}", a["console"]);
    assert_eq!(bytes(&a), bytes(&b), "one seed, one result");
    assert_eq!((&a["trace_hash"], &a["memory_hash"]), (&b["trace_hash"], &b["memory_hash"]));
    assert_ne!(bytes(&a), bytes(&c), "/dev/urandom must follow the seed after a snapshot");
    assert_ne!(bytes(&a), bytes(&original), "re-seeding must re-key the kernel's pool");

    // A program whose three threads share a constant-seeded PRNG: only the
    // schedule can change its outcome, and timing perturbation does.
    let program = c_program(dir.path(), "interleave", "/bin/interleave");
    let r = explore_json(
        &["--linux", "--guest-file", &program, "--init-cmd", "/bin/interleave", "--no-snapshots", "--branches", "20"],
        &dir.path().join("out"),
    );
    let outcomes: Vec<&Value> = r["assertions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            a["message"].as_str().unwrap().starts_with("interleave: outcome ") && a["passes"].as_u64() > Some(0)
        })
        .collect();
    let hits: u64 = outcomes.iter().map(|a| a["hits"].as_u64().unwrap()).sum();
    assert_eq!(hits, 20, "every branch reports its outcome: {}", r["assertions"]);
    assert!(
        outcomes.len() >= 3,
        "20 branches of one snapshot reached only {} outcomes: {}",
        outcomes.len(),
        r["assertions"]
    );
}

/// A bug that depends on something outside the seed is reported as flaky,
/// never as a clean replayable bug: the explorer re-executes its timeline
/// from the root snapshot before reporting it.
#[test]
fn a_bug_that_does_not_reproduce_is_reported_flaky() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = c_program(dir.path(), "tscflake", "/bin/tscflake");
    let (probe, code) = run_json(&["--linux", "--init-cmd", "true"]);
    assert_eq!(code, 0, "{probe}");
    let args =
        ["--linux", "--guest-file", &program, "--init-cmd", "/bin/tscflake", "--branches", "1", "--reexecute", "3"];
    let r = explore_json(&args, &dir.path().join("out"));
    let summary = "assertion failed: the TSC's bits 8-11 are never 0";
    let bug = r["bugs"].as_array().unwrap().iter().find(|b| b["summary"] == summary);
    let bug = bug.unwrap_or_else(|| panic!("no bug: {}", serde_json::to_string_pretty(&r).unwrap()));
    if user_rdtsc_leaks(&probe) {
        // The host's TSC: the failing read is another one each time.
        assert_eq!(bug["replayable"], "no", "{bug}");
        assert!(bug["reproduction"].as_str().unwrap().starts_with("FLAKY: reproduced "), "{bug}");
        assert!(bug["replayable_reasons"].to_string().contains("flaky"), "{bug}");
        let md = read(&latest(&dir.path().join("out")).join("report.md"));
        assert!(md.contains("FLAKY: reproduced") && md.contains("replayable: no"), "{md}");
    } else {
        assert_eq!(
            (bug["reproduction"].as_str(), bug["replayable"].as_str()),
            (Some("reproduced 3/3"), Some("verified"))
        );
    }
}

/// The example program (`guest-sdk/examples/antithesis-rust`), built by
/// its `build.sh` as a user would build it for hvsim (statically, with
/// SanitizerCoverage; cached outside the repository).
fn vault() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/examples/antithesis-rust/build.sh");
    let out = Command::new("bash").arg(&script).output().expect("bash runs");
    assert!(out.status.success(), "building the example failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).expect("a path").trim())
}

#[test]
fn a_program_built_with_the_official_rust_sdk_is_explored_unchanged() {
    if !linux_available() {
        return;
    }
    let binary = vault();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = format!("{}:/bin/vault", binary.display());
    let r = explore_json(
        &["--linux", "--guest-file", &file, "--init-cmd", "/bin/vault", "--branches", "200", "--slice", "500ms"],
        &out,
    );
    let s = &r["summary"];
    assert_eq!(s["garbage"]["count"], 0, "malformed messages: {}", s["garbage"]);
    assert_eq!(s["setup_complete"], true);
    // Every assertion kind of the crate, with the verdict it deserves.
    for held in [
        "always: x is at least 5",
        "always or unreachable: x stays below 7",
        "sometimes: x is 5",
        "reachable: the program starts",
        "unreachable: x is never huge",
        "numeric: x stays above 1",
        "numeric: x at least 5",
        "numeric: x below 100",
        "numeric: x at most 6",
        "numeric: x sometimes above 4",
        "numeric: x sometimes at least 5",
        "numeric: x sometimes below 6",
        "numeric: x sometimes at most 5",
        "boolean: x is small or odd",
        "boolean: x small and positive",
        "gate 1 opens",
        "gate 2 opens",
        "gate 3 opens",
        "gate 4 opens",
        "gate 5 opens",
    ] {
        let a = assertion(&r, held);
        assert_eq!(a["verdict"], "held", "{a}");
        assert_eq!(a["registered"], true, "the crate registers every assertion: {a}");
    }
    let never = assertion(&r, "unreachable: x is never huge");
    assert_eq!((never["kind"].as_str(), never["hits"].as_u64()), (Some("unreachable"), Some(0)));
    assert_eq!(assertion(&r, "numeric: x stays above 1")["display"], "Always");
    // The bug behind five 1-in-8 random draws, found within 200 branches
    // (the draws are decision points); it replays.
    let bug = vault_bug_replays(&r);
    // Found through draws the explorer chose (libvoidstar announces every
    // draw of the SDK), at draw points and inside timelines, where the
    // program retries its gates (docs/exploration.md): the record's
    // timeline carries their values, and it replayed above.
    let record: Value = serde_json::from_str(&read(Path::new(bug["file"].as_str().unwrap()))).unwrap();
    let chosen = record["timeline"]["segments"].as_array().unwrap().iter().filter(|s| s["draw"].is_u64()).count();
    assert!(chosen > 0 && s["draws"]["points"].as_u64() > Some(0), "{}", record["timeline"]);
    assert!(s["draws"]["steered"].as_u64() > Some(0), "no value given inside a timeline: {}", s["draws"]);
    // The guest kernel names the process behind each message: the story
    // says which process failed (the vault, not init: pid 1).
    let story = record["story"].as_array().unwrap();
    let failed = story.iter().filter_map(|e| e["text"].as_str()).find(|t| t.contains("FAILS: the vault stays closed"));
    let pid =
        failed.and_then(|t| t.rsplit_once("(pid ")).and_then(|(_, p)| p.trim_end_matches(')').parse::<u32>().ok());
    assert!(pid.is_some_and(|p| p > 1), "the failing assertion names no process: {failed:?}");
    assert_eq!(r["events"]["vault_started"], 1);
    // The SDK said who it is; coverage from the instrumented binary arrived
    // and steered.
    let sdk = &r["instrumentation"]["sdks"][0];
    assert_eq!((sdk["language"]["name"].as_str(), sdk["sdk_version"].as_str()), (Some("Rust"), Some("0.3.0")));
    let module = &r["instrumentation"]["coverage_modules"]["sanitizer-coverage"];
    assert!(module[0].as_u64() > Some(100), "{}", r["instrumentation"]);
    assert!(s["coverage_edges"].as_u64() > Some(100), "{s}");
    assert!(!r["edges_by_timeline"].as_array().unwrap().is_empty(), "branches reached new edges: {}", r["series"]);
    let md = read(&latest(&out).join("report.md"));
    assert!(md.contains("## Coverage") && md.contains("\"sdk_version\":\"0.3.0\""), "{md}");
}

#[test]
fn what_the_go_and_cpp_sdks_do_to_the_output_path_and_libvoidstar_works() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = c_program(dir.path(), "sdk_shapes", "/bin/sdk-shapes");
    let (v, code) = run_json(&[
        "--linux",
        "--guest-file",
        &program,
        "--init-cmd",
        "for m in go cpp voidstar concurrent; do sdk-shapes $m || echo \"$m failed\"; done",
    ]);
    assert_eq!(code, 0, "{}", v["console"]);
    let out = command_output(&v);
    assert!(!out.iter().any(|l| l.ends_with("failed")), "{out:?}");
    let messages: Vec<Value> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            serde_json::from_str(m.as_str().unwrap())
                .unwrap_or_else(|e| panic!("a message is not JSON ({e}): {m:.200}"))
        })
        .collect();
    let ids: Vec<String> =
        messages.iter().filter_map(|m| m["antithesis_assert"]["id"].as_str().map(str::to_owned)).collect();
    let mut expected: Vec<String> = Vec::new();
    for mode in ["go", "cpp", "voidstar"] {
        let n = if mode == "voidstar" { 2 } else { 3 };
        expected.extend((0..n).map(|i| format!("{mode} {i}")));
    }
    for p in 0..4 {
        expected.extend((0..25).map(|i| format!("concurrent {p} {i}")));
    }
    let mut sorted = ids.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected, "each line exactly once, whole");
    // Go truncates the file and C++ never flushes: nothing was lost. The
    // 300 KiB message through libvoidstar arrived whole.
    let big = messages.iter().find(|m| m["antithesis_assert"]["id"] == "voidstar 1").unwrap();
    assert_eq!(big["antithesis_assert"]["details"].as_str().map(str::len), Some(300 * 1024));
    // libvoidstar's random numbers come from the run's seed.
    let random = out.iter().find(|l| l.starts_with("voidstar: random ")).expect("random line").clone();
    let (v2, _) = run_json(&["--linux", "--seed", "1", "--guest-file", &program, "--init-cmd", "sdk-shapes voidstar"]);
    let random2 = command_output(&v2).into_iter().find(|l| l.starts_with("voidstar: random ")).unwrap();
    assert_ne!(random, random2, "a different seed gives different numbers");
    assert!(messages.iter().any(|m| m["hvsim_coverage_module"]["name"] == "sdk-shapes.sym.tsv"));
}

#[test]
fn a_program_using_the_official_python_sdk_is_explored_unchanged_in_its_image() {
    if !linux_available() {
        return;
    }
    // Debian's python3 with `antithesis` 0.4.0 from PyPI and
    // guest-sdk/examples/antithesis-python/vault.py, built once per machine.
    let o = output(&["image", "debian", "--python-antithesis"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let r = explore_json(
        // The bug is replayed below, in a process of its own.
        &[
            "--image",
            "hvsim-test/python-antithesis:bookworm",
            "--branches",
            "120",
            "--slice",
            "1s",
            "--seed",
            "3",
            "--reexecute",
            "0",
        ],
        &out,
    );
    let s = &r["summary"];
    assert_eq!(s["garbage"]["count"], 0, "malformed messages: {}", s["garbage"]);
    assert_eq!(s["setup_complete"], true);
    // It found libvoidstar in its container and used it.
    let sdk = &r["instrumentation"]["sdks"][0];
    assert_eq!(sdk["language"]["name"].as_str(), Some("Python"), "{}", r["instrumentation"]);
    for held in [
        "always: x is at least 5",
        "always or unreachable: x stays below 7",
        "sometimes: x is 5",
        "reachable: the program starts",
        "numeric: x stays above 1",
        "numeric: x sometimes below 6",
        "boolean: x is small or odd",
        "gate 1 opens",
        "gate 2 opens",
        "gate 3 opens",
    ] {
        let a = assertion(&r, held);
        assert_eq!(a["verdict"], "held", "{a}");
    }
    // The Python SDK reports an assertion when it is reached (it does not
    // register them ahead), so one never reached is not in the report.
    let listed = r["assertions"].as_array().unwrap();
    assert!(!listed.iter().any(|a| a["message"] == "unreachable: x is never huge"), "{listed:?}");
    assert_eq!(r["events"]["vault_started"], 1);
    // The bug behind three 1-in-6 choices drawn from the run's seed; it
    // replays, and the report keeps what the console said, the service named.
    let bug = vault_bug_replays(&r);
    let tail: Vec<&str> = bug["console_tail"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert!(tail.contains(&"hvsim-init: service python-antithesis started"), "{tail:#?}");
}

/// examples/compose/python-buggify: a Python service on hvsim's Python SDK
/// whose ledger loses a deposit only when its buggify site fires. The
/// explorer finds it in the timelines that enabled the site (and only
/// there), and the bug replays.
#[test]
fn a_python_service_failing_only_when_buggify_fires_is_found_and_replays() {
    if !linux_available() {
        return;
    }
    let o = output(&["image", "debian", "--python-antithesis"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let compose = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/compose/python-buggify/compose.yaml");
    let dir = tempfile::tempdir().unwrap();
    // Seed 1 enables the site in 2 of its first 4 timelines.
    // The bug is replayed at the end, in a process of its own.
    let args = ["--compose", compose, "--branches", "4", "--seed", "1", "--reexecute", "0"];
    let r = explore_json(&args, &dir.path().join("out"));
    let site = &r["buggify"]["ledger: a deposit is lost"];
    let enabled = site["timelines_enabled"].as_u64().unwrap_or(0);
    assert!(enabled >= 1 && site["fired"].as_u64() >= Some(1), "{}", r["buggify"]);
    assert!(enabled < site["timelines"].as_u64().unwrap(), "a site is enabled in some timelines only: {site}");
    let bug =
        r["bugs"].as_array().unwrap().iter().find(|b| b["summary"] == "assertion failed: every deposit is counted");
    let bug = bug.unwrap_or_else(|| panic!("no bug: {}", r["bugs"]));
    let occurrences = bug["occurrences"].as_u64().expect("occurrences");
    assert!(occurrences <= enabled, "only timelines that enabled the site fail: {bug}");
    let fired = bug["buggify"][0].as_str().unwrap_or_default();
    assert!(fired.starts_with("ledger: a deposit is lost: reached ") && !fired.ends_with("fired 0"), "{bug}");
    replay_reproduces(bug["file"].as_str().unwrap(), &[]);
}

/// Every symbol an official SDK declares against libvoidstar, from a
/// dynamically linked program of this project's (cli/tests/guest/
/// voidstar_abi.c) in the guest, with glibc's loader and libc from this
/// host: each is found and returns, what each sends arrives as
/// docs/sdk-protocol.md says, and the program's own exported
/// trace-pc-guard callback (the C++ SDK's shape) is not called back.
#[test]
fn every_symbol_the_sdks_declare_against_libvoidstar_works_from_a_dynamic_program() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest/voidstar_abi.c");
    let bin = dir.path().join("voidstar-abi");
    let cc = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-rdynamic", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("gcc runs");
    assert!(cc.status.success(), "gcc: {}", String::from_utf8_lossy(&cc.stderr));
    // The loader and C library it was linked against, where it looks for them.
    let loader = "/lib64/ld-linux-x86-64.so.2";
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let program = format!("{}:/bin/voidstar-abi", bin.display());
    let (loader_file, libc_file) = (format!("{loader}:{loader}"), format!("{libc}:{libc}"));
    let args = ["--linux", "--guest-file", &program, "--guest-file", &loader_file, "--guest-file", &libc_file];
    let (v, code) = run_json(&[&args[..], &["--init-cmd", "/bin/voidstar-abi"]].concat());
    let out = command_output(&v);
    assert_eq!(code, 0, "{out:#?}\n{}", v["console"]);
    assert!(out.iter().any(|l| l == "voidstar-abi: done"), "{out:#?}");
    assert!(out.iter().any(|l| l == "voidstar-abi: guards numbered 1, reported and zeroed 1, forwarded 3"), "{out:#?}");
    assert!(out.iter().any(|l| l == "voidstar-abi: notify_coverage asks again: 0"), "{out:#?}");
    let messages: Vec<Value> =
        v["messages"].as_array().unwrap().iter().map(|m| serde_json::from_str(m.as_str().unwrap()).unwrap()).collect();
    let named = |key: &str| -> Vec<Value> { messages.iter().filter_map(|m| m.get(key).cloned()).collect() };
    assert_eq!(named("fuzz_putchar"), [Value::from("putchar line\n"), Value::from("!")]);
    assert_eq!(named("fuzz_set_source_name"), [Value::from("voidstar-abi")]);
    assert_eq!(named("fuzz_info_message"), [Value::from("an info message")]);
    assert_eq!(named("fuzz_error_message"), [Value::from("an error message")]);
    assert_eq!(named("fuzz_exit"), [Value::from(3)]);
    assert_eq!(named("antithesis_setup").len(), 1);
    let held: Vec<&str> = messages
        .iter()
        .filter(|m| m["antithesis_assert"]["condition"] == true)
        .filter_map(|m| m["antithesis_assert"]["id"].as_str())
        .collect();
    assert_eq!(held, ["getchar gives a byte", "trace-pc-guard callbacks do not recurse"]);
    let modules: Vec<&str> = messages.iter().filter_map(|m| m["hvsim_coverage_module"]["name"].as_str()).collect();
    assert_eq!(modules, ["voidstar-abi.sym.tsv", "sanitizer-coverage"]);
    // Its draws are the run's: another seed, other numbers.
    let draws = |v: &Value| command_output(v).into_iter().filter(|l| l.contains("random") || l.contains("getchar"));
    let (v1, _) = run_json(&[&args[..], &["--seed", "1", "--init-cmd", "/bin/voidstar-abi"]].concat());
    assert_ne!(draws(&v).collect::<Vec<_>>(), draws(&v1).collect::<Vec<_>>());
}

/// Buggify in a Linux program of hvsim's C SDK (`tests/guest/buggify.c`):
/// the double-applied transfer happens only when its site fires, so only
/// in timelines where the site is enabled; the explorer finds it, the bug
/// record names the site, a replay decides the same, and the same seed
/// explores the same.
#[test]
fn a_bug_only_buggify_reaches_is_found_and_replays() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = c_program(dir.path(), "buggify", "/bin/ledger");
    // The bug is replayed below, in a process of its own.
    let args = [
        "--linux",
        "--guest-file",
        &program,
        "--init-cmd",
        "/bin/ledger",
        "--branches",
        "24",
        "--seed",
        "3",
        "--reexecute",
        "0",
    ];
    let r = explore_json(&args, &dir.path().join("a"));
    let lost = "ledger: the reply is lost";
    let bug = r["bugs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["summary"] == "assertion failed: ledger: every transfer is applied once");
    let bug = bug.unwrap_or_else(|| panic!("not found: {}", r["summary"]));
    let record: Value = serde_json::from_str(&read(Path::new(bug["file"].as_str().unwrap()))).unwrap();
    let site = &record["buggify"][lost];
    assert!(site["enabled"] == true && site["fired"].as_u64() >= Some(1), "{}", record["buggify"]);
    let o = output(&["replay", bug["file"].as_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["reproduced"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
    // Each site is enabled in some timelines and not in others, and only
    // enabled sites fired.
    for name in [lost, "ledger: the server is slow"] {
        let t = &r["buggify"][name];
        let (enabled, timelines) = (t["timelines_enabled"].as_u64().unwrap(), t["timelines"].as_u64().unwrap());
        assert!(enabled > 0 && enabled < timelines, "{name}: {t}");
    }
    let site = &r["buggify"][lost];
    assert!(site["fired"].as_u64().expect("fired") < site["reached"].as_u64().expect("reached"), "{site}");
    // The same seed explores the same: the whole report (bugs, their
    // timelines and failure hashes, the buggify tally) but times.
    let again = explore_json(&args, &dir.path().join("b"));
    let memory = !linux_memory_may_differ();
    let (a, b) = (exploration_digest(&r, memory), exploration_digest(&again, memory));
    assert!(a == b, "the same seed explored differently at {:?}", first_difference(&a, &b));
}

/// A question and its answer are one exchange (issue 47): two processes
/// ask hvsim questions whose answers they know through the C SDK's
/// exchange, in a tight loop, while a third reads the run's randomness
/// from /dev/hvsim (`tests/guest/exchange.c`). Every answer reaches its
/// asker; before the guest kernel took the answer in the same exchange as
/// the question, 26 of 5,231 went astray here in 0.4 s of virtual time
/// (random bytes, or the other asker's answer). The same seed does the
/// same twice.
#[test]
fn every_answer_reaches_its_asker_while_others_read_the_channel() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = c_program(dir.path(), "exchange", "/bin/exchange");
    let args = ["--linux", "--guest-file", &program, "--init-cmd", "/bin/exchange"];
    let run = || {
        let (v, code) = run_json(&args);
        let out = command_output(&v);
        assert_eq!(code, 0, "{out:#?}\n{}", v["console"]);
        assert!(out.iter().any(|l| l == "exchange: every answer reached its asker"), "{out:#?}");
        let asked = |who: &str| {
            let line = out.iter().find(|l| l.starts_with(&format!("exchange: {who}: "))).expect("the asker reports");
            let n: u64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
            assert!(line.ends_with(" questions, 0 wrong answers") && n > 100, "{line}");
        };
        asked("budget");
        asked("runs");
        // The reader did read meanwhile: the random stream went far beyond
        // what the questions' answers take.
        assert!(v["channel"]["random_bytes"].as_u64().unwrap() > 8 * 1000, "{}", v["channel"]);
        v
    };
    let (first, second) = (run(), run());
    for key in ["trace_hash", "memory_hash"] {
        assert_eq!(first[key], second[key], "{key}");
    }
}

/// The largest resident set of this test's children so far, in bytes.
fn children_peak_rss() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0);
    usage.ru_maxrss as u64 * 1024
}

/// Memory stays inside `--snapshot-memory` (issue 47): a program that
/// sends about 860 KB of SDK messages and then logs and draws for a second
/// (`guest-sdk/c/chatty.c`, what `hvsim bench memory` measures), explored with a snapshot every 10 ms of
/// virtual time (hundreds of snapshots, each with that log behind it). The
/// tree counts the snapshots' machine states (console and messages shared
/// along a line of descent, counted once), takes no more interval
/// snapshots once a branch's share of the budget is spent and evicts
/// between rounds to stay within it, and the explorer's peak resident memory is a
/// single run's, the tree's peak and a margin: nothing it holds goes
/// uncounted. Before, every snapshot copied the whole log and the tree
/// counted pages only: with these settings, 843 MB resident here for a
/// single run's 161 MB and a tree whose peak was 190 MB.
#[test]
fn a_chatty_program_explored_stays_within_its_snapshot_memory() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/c/chatty.c");
    let program = c_program_from(dir.path(), &source, "/bin/chatty");
    let target = ["--linux", "--guest-file", &program, "--init-cmd", "/bin/chatty"];
    let (run, code) = run_json(&target);
    assert_eq!(code, 0, "{}", run["console"]);
    let messages: usize = run["messages"].as_array().unwrap().iter().map(|m| m.as_str().unwrap().len()).sum();
    assert!(messages > 800_000, "the program sent {messages} bytes of messages");
    let one_run = children_peak_rss();
    let out = dir.path().join("out");
    let explore = ["--branches", "3", "--snapshot-every", "10ms", "--snapshot-memory", "160M"];
    let r = explore_json(&[&target[..], &explore[..]].concat(), &out);
    let tree = &r["summary"]["tree"];
    let bytes = |k: &str| tree[k].as_u64().unwrap();
    // Hundreds of places to snapshot: taken, or (past a branch's share of
    // the budget) not taken.
    let places = r["summary"]["snapshots"].as_u64().unwrap() + bytes("snapshots_skipped");
    assert!(places > 100, "{}", r["summary"]);
    assert!(bytes("state_bytes") > 0 && bytes("bytes") <= 160 << 20, "{tree}");
    assert!(bytes("evicted") + bytes("snapshots_skipped") > 0, "the budget was reached: {tree}");
    let explored = children_peak_rss();
    // The margin: the explorer's own tables, deltas on their way into the
    // tree, and what the allocator keeps of evicted snapshots.
    let margin = 128 << 20;
    assert!(
        explored <= one_run + bytes("peak_bytes") + margin,
        "peak resident {explored} bytes; one run {one_run}; tree {tree}"
    );
}

/// The family of programs on the official Rust SDK
/// (`guest-sdk/examples/antithesis-rust/src/bin/antithesis-family.rs`),
/// each explored under the rarity policy with one seed, as `hvsim bench
/// explore --family` does: every bug found within four times the timelines
/// that trying each draw's values in order needs (the program's own
/// figure; retry-same-state, whose steps no assertion tells apart, takes
/// the longest); and two of them explored again take the same timelines to
/// the same bugs.
#[test]
fn the_family_of_sdk_programs_is_explored_to_each_bug() {
    if !linux_available() {
        return;
    }
    let bench = |extra: &[&str]| -> Value {
        let mut args = vec!["bench", "explore", "--family", "--seeds", "1", "--max-branches", "150"];
        args.extend_from_slice(&["--policy", "rarity", "--json"]);
        args.extend_from_slice(extra);
        let o = output(&args);
        assert!(o.status.success(), "hvsim {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let all = bench(&[]);
    let programs = all["programs"].as_array().unwrap();
    assert!(programs.len() >= 8, "{all}");
    for p in programs {
        let bound = 4 * p["in_order"].as_u64().unwrap();
        let found = p["rows"][0]["timelines_to_bug"].as_u64();
        assert!(found.is_some_and(|t| t <= bound), "{}: not found within {bound} timelines: {p}", p["program"]);
    }
    // Deterministic: the same seed, the same timelines to the same bug.
    let again = bench(&["--program", "choice-sizes", "--program", "slow-stages"]);
    for p in again["programs"].as_array().unwrap() {
        let first = programs.iter().find(|q| q["program"] == p["program"]).unwrap();
        assert_eq!(p["rows"], first["rows"], "{} explored twice", p["program"]);
    }
}

/// The family in full, as `hvsim bench explore --family` measures it: five
/// seeds, every policy, 60 timelines at most. What issue 73 asks, checked
/// where it holds and named where it does not yet: the rarity policy's
/// median within twice each program's in-order bound; no slower than one
/// value per branch but for [`SLOWER_THAN_ONE_VALUE`]; every seed's bug
/// found but for [`NOT_ALWAYS_FOUND`]. A named shortfall must still hold
/// (the runs are deterministic), so that a search that mends it says to
/// strike it from the list.
#[test]
#[ignore = "slow: eight programs, three policies and five seeds take about 30 minutes here (ci/test.sh --slow)"]
fn the_family_in_full_meets_the_search_goals_but_for_those_named() {
    /// None since coverage alone is credited to the last process that spoke
    /// and snapshots at one decision share its values (slow-stages was
    /// slower before: docs/exploration.md#measured).
    const SLOWER_THAN_ONE_VALUE: &[&str] = &[];
    /// No assertion tells one retried step from another; the table's sum
    /// is found for four seeds of five.
    const NOT_ALWAYS_FOUND: &[&str] = &["retry-same-state", "table-sum"];
    if !linux_available() {
        return;
    }
    let o = output(&["bench", "explore", "--family", "--seeds", "5", "--max-branches", "60", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for p in v["programs"].as_array().unwrap() {
        let name = p["program"].as_str().unwrap();
        assert_eq!(p["within_twice_in_order"], true, "{name}: {p}");
        let slower = p["no_slower_than_one_value"] == false;
        assert_eq!(slower, SLOWER_THAN_ONE_VALUE.contains(&name), "{name}: slower than one value per branch? {p}");
        let always = p["found"]["rarity"] == 5;
        assert_eq!(!always, NOT_ALWAYS_FOUND.contains(&name), "{name}: found for every seed? {p}");
    }
}
