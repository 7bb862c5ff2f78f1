//! The guest is byte-for-byte the same on every machine for one hvsim
//! version (issue: "Seeds that travel"): `hvsim kernel hashes` here must
//! match the hashes docs/guest-kernel.md lists for this kernel build, and
//! with `ci/test.sh --slow` the kernel is built twice more from scratch, in
//! other directories, to the same bytes.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{hvsim, read, skipping};

/// `hvsim kernel hashes` (with the cache in `cache`, if given), by name.
fn hashes(cache: Option<&Path>) -> BTreeMap<String, String> {
    let mut cmd = hvsim();
    cmd.args(["kernel", "hashes"]);
    if let Some(dir) = cache {
        cmd.env("HVSIM_CACHE_DIR", dir);
    }
    let out = cmd.output().expect("hvsim runs");
    assert!(out.status.success(), "hvsim kernel hashes: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_owned(), v.trim().to_owned())))
        .collect()
}

/// The documented builds: key prefix -> (busybox, vmlinux, initramfs).
fn documented() -> BTreeMap<String, (String, String, String)> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/guest-kernel.md");
    let text = read(&doc);
    let section = text.split("\n## Reproducible").nth(1).expect("docs/guest-kernel.md has a Reproducible section");
    let section = section.split("\n## ").next().expect("split yields at least one part");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<String> = l.split('|').map(|c| c.trim().trim_matches('`').to_owned()).collect();
            assert!(cells.len() >= 7, "a row of the hashes table has five cells: {l}");
            (cells[1].clone(), (cells[3].clone(), cells[4].clone(), cells[5].clone()))
        })
        .collect()
}

#[test]
fn the_guest_here_has_the_documented_hashes() {
    let here = hashes(None);
    if here["source"].contains("NOT pinned") {
        let why = format!(
            "this machine's kernel source is not a pinned one ({}): pin it in guest-image/src/linux/kernel.rs",
            here["source"]
        );
        skipping(&why, false);
        return;
    }
    let key = &here["key"][..16];
    let row = format!(
        "| `{key}` | {} | `{}` | `{}` | `{}` |",
        here["source"].split_whitespace().last().unwrap(),
        &here["busybox"][..16],
        here["vmlinux"],
        here["initramfs"]
    );
    let docs = documented();
    let Some((busybox, vmlinux, initramfs)) = docs.get(key) else {
        panic!("docs/guest-kernel.md lists no hashes for kernel {key}; after checking the build, add:\n{row}");
    };
    assert_eq!(*vmlinux, here["vmlinux"], "the kernel built here differs from the documented build of {key}");
    if here["busybox"].starts_with(busybox.as_str()) {
        assert_eq!(*initramfs, here["initramfs"], "the initramfs differs from the documented one");
    } else {
        let why = format!("the initramfs: busybox-static here ({}) is not the documented one", &here["busybox"][..16]);
        skipping(&why, false);
    }
}

#[test]
#[ignore = "slow: two kernel builds take about 10 minutes here (ci/test.sh --slow)"]
fn the_kernel_builds_to_the_same_bytes_in_other_directories() {
    let here = hashes(None);
    for i in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let cache: PathBuf = dir.path().join(format!("cache-{i}"));
        let built = hashes(Some(&cache));
        for part in ["key", "vmlinux", "initramfs"] {
            assert_eq!(built[part], here[part], "build {i}: {part} differs");
        }
    }
}
