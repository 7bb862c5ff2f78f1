//! Snapshots through the CLI (issue: "Whole-VM snapshots"): every
//! deterministic guest runs the same with a snapshot saved anywhere and
//! restored in a new process (each guest's seed run at least seven times:
//! the raw guests' proof of determinism), saving is transparent, a restore
//! continues exactly, re-seeding
//! diverges where entropy is used, and damaged files are refused.

mod common;

use std::path::Path;

use common::*;
use hvsim_guest_image::raw::GUESTS;
use serde_json::Value;

/// What must not change when a snapshot is taken or restored.
fn outcome(v: &Value) -> [Value; 7] {
    ["trace_hash", "memory_hash", "console", "exits", "vtime_ns", "end", "messages"].map(|k| v[k].clone())
}

fn save_and_replay(guest: &str, seed: &str, at_ns: u64, file: &Path) -> (Value, Value) {
    let at = format!("{at_ns}ns");
    let (with_snapshot, _) =
        run_json(&["--guest", guest, "--seed", seed, "--snapshot-at", &at, "--save-snapshot", file.to_str().unwrap()]);
    let replayed = replay_snapshot(file, &[]);
    (with_snapshot, replayed)
}

#[test]
fn snapshots_are_transparent_for_every_deterministic_guest() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for g in GUESTS.iter().filter(|g| g.deterministic) {
        // Guests that run forever stop at their default limit (1s).
        let (straight, _) = run_json(&["--guest", g.name, "--seed", "11"]);
        assert_eq!(straight["replayable"], "expected", "{}: {}", g.name, straight["replayable_reasons"]);
        let exits = straight["exits"].as_u64().expect("exits");
        assert!(exits > 10, "{}: suspiciously few exits: {exits}", g.name);
        let total = straight["vtime_ns"].as_u64().unwrap();
        // Halfway, and (for idle) deep in a halt. (A snapshot before the
        // first instruction is restored by the entropy test below; the
        // explorer restores thousands inside its runs, explore.rs.)
        let mut points = vec![total / 2];
        if g.name == "idle" {
            points.push(600_000_000_000);
        }
        for at in points {
            let file = dir.path().join(format!("{}-{at}.snap", g.name));
            let (with_snapshot, replayed) = save_and_replay(g.name, "11", at, &file);
            assert_eq!(outcome(&with_snapshot), outcome(&straight), "{}: saving at {at} ns changed the run", g.name);
            assert_eq!(outcome(&replayed), outcome(&straight), "{}: restoring at {at} ns diverged", g.name);
        }
    }
}

#[test]
fn replays_repeat_and_new_seeds_diverge_where_entropy_is_used() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("entropy.snap");
    // Before the guest's first instruction: its random bytes are still to come.
    let (original, _) = run_json(&[
        "--guest",
        "entropy",
        "--seed",
        "1",
        "--snapshot-at",
        "0ns",
        "--save-snapshot",
        file.to_str().unwrap(),
    ]);
    let replay = |seed: &str| -> Value { replay_snapshot(&file, &["--seed", seed]) };
    let runs: Vec<Value> = (0..3).map(|_| replay("7")).collect();
    assert!(runs.iter().all(|r| outcome(r) == outcome(&runs[0])), "replays of one (snapshot, seed) differ");
    let other = replay("8");
    assert_ne!(runs[0]["console"], other["console"], "different seeds must change the random bytes");
    assert_ne!(runs[0]["console"], original["console"], "re-seeding must change what comes after the snapshot");
    // Up to the first random bytes the runs agree: the same number of exits
    // before the divergence, the same length of output.
    assert_eq!(runs[0]["exits"], other["exits"]);
}

#[test]
fn damaged_snapshot_files_are_refused_with_one_line() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.snap");
    run_json(&["--guest", "serial", "--snapshot-at", "5us", "--save-snapshot", good.to_str().unwrap()]);
    let bytes = std::fs::read(&good).unwrap();
    let info = output(&["snapshot", "info", good.to_str().unwrap()]);
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));

    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    let mut wrong_version = bytes.clone();
    wrong_version[8..12].copy_from_slice(&99u32.to_le_bytes());
    let n = wrong_version.len() - 32;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&wrong_version[..n]);
    wrong_version[n..].copy_from_slice(&digest);
    let mut header_flipped = bytes.clone();
    header_flipped[24 + 10] ^= 0x20;
    let mut huge_header = bytes.clone();
    huge_header[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("flipped", flipped, "checksum mismatch"),
        ("header-flipped", header_flipped, "checksum mismatch"),
        ("huge-header", huge_header, "its header length, 1099511627776 bytes, is beyond any snapshot's"),
        // Grown to a terabyte below (sparse): refused before it is read.
        ("sparse", bytes.clone(), "more than its lengths say"),
        ("short", bytes[..bytes.len() / 2].to_vec(), "truncated"),
        ("tail-cut", bytes[..bytes.len() - 40].to_vec(), "truncated"),
        ("empty", vec![], "truncated"),
        ("foreign", b"this is not a snapshot at all, just some text that is long enough".to_vec(), "bad magic"),
        ("version", wrong_version, "format version 99"),
    ];
    for (name, data, expect) in cases {
        let path = dir.path().join(format!("{name}.snap"));
        std::fs::write(&path, &data).unwrap();
        if name == "sparse" {
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1 << 40).unwrap();
        }
        for cmd in
            [vec!["replay", "--snapshot", path.to_str().unwrap()], vec!["snapshot", "info", path.to_str().unwrap()]]
        {
            let out = output(&cmd);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{name}: {cmd:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{name}: more than one line: {err}");
            assert!(err.contains(expect) && err.contains(path.to_str().unwrap()), "{name}: {err}");
        }
    }
    // An intact snapshot from another world (here: another hvsim version,
    // same-length text, checksum fixed up) is refused unless --force.
    let mut other = bytes.clone();
    let from = format!("\"hvsim\":\"{}\"", env!("CARGO_PKG_VERSION"));
    let to = format!("\"hvsim\":\"{}\"", "9".repeat(env!("CARGO_PKG_VERSION").len()));
    let at = other.windows(from.len()).position(|w| w == from.as_bytes()).expect("the header pins the hvsim version");
    other[at..at + to.len()].copy_from_slice(to.as_bytes());
    let n = other.len() - 32;
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&other[..n]);
    other[n..].copy_from_slice(&digest);
    let path = dir.path().join("other-world.snap");
    std::fs::write(&path, &other).unwrap();
    let out = output(&["replay", "--snapshot", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("found in another world") && err.contains("hvsim \"999") && err.contains("--force"), "{err}");
    let forced = output(&["replay", "--snapshot", path.to_str().unwrap(), "--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", String::from_utf8_lossy(&forced.stderr));
    assert!(String::from_utf8_lossy(&forced.stderr).contains("replaying in another world"));

    let missing = output(&["replay", "--snapshot", "/nonexistent/x.snap"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/x.snap"));
}
