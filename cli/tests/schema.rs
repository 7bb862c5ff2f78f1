//! `hvsim schema`: the committed schemas in docs/schemas/ are what hvsim
//! generates, and documents are checked against them. (Every document a
//! test makes is checked as hvsim writes it: `common::hvsim` sets
//! HVSIM_SCHEMA_CHECK=1.) No KVM needed.

mod common;

use std::path::Path;

use common::output;
use serde_json::Value;

const DOCUMENTS: [(&str, &str); 24] = [
    ("report", "hvsim-report-v1"),
    ("bug", "hvsim-bug-v1"),
    ("summary", "hvsim-summary-v1"),
    ("replay", "hvsim-replay-v1"),
    ("findings", "hvsim-findings-v1"),
    ("minimize", "hvsim-minimize-v1"),
    ("retest", "hvsim-retest-v1"),
    ("debug-line", "hvsim-debug-line-v1"),
    ("check", "hvsim-check-v1"),
    ("txn-history", "hvsim-txn-history-v1"),
    ("doctor", "hvsim-doctor-v1"),
    ("snapshot-info", "hvsim-snapshot-info-v1"),
    ("diff-log", "hvsim-diff-log-v1"),
    ("cache-ls", "hvsim-cache-ls-v1"),
    ("cache-clear", "hvsim-cache-clear-v1"),
    ("image-load", "hvsim-image-load-v1"),
    ("image-ls", "hvsim-image-ls-v1"),
    ("image-pull", "hvsim-image-pull-v1"),
    ("image-rm", "hvsim-image-rm-v1"),
    ("image-inspect", "hvsim-image-inspect-v1"),
    ("kernel", "hvsim-kernel-v1"),
    ("kernel-hashes", "hvsim-kernel-hashes-v1"),
    ("bench", "hvsim-bench-v1"),
    ("schema-list", "hvsim-schema-list-v1"),
];

fn committed() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schemas"))
}

/// The committed schemas cannot drift from the types: a change to a
/// document's type must come with its regenerated schema.
#[test]
fn committed_schemas_are_what_hvsim_writes() {
    let dir = tempfile::tempdir().unwrap();
    let o = output(&["schema", "--write", dir.path().to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let regenerate = "regenerate them with `cargo run --bin hvsim -- schema --write docs/schemas` (and bump the \
                      document's version if a field was removed, renamed or retyped: docs/schemas/README.md)";
    let mut written: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    written.sort();
    let mut there: Vec<String> = std::fs::read_dir(committed())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "README.md")
        .collect();
    there.sort();
    assert_eq!(there, written, "docs/schemas/ holds other schemas than hvsim writes: {regenerate}");
    for name in &written {
        let new = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let old = std::fs::read_to_string(committed().join(name)).unwrap();
        assert!(old == new, "docs/schemas/{name} is not what this hvsim generates: {regenerate}");
    }
}

#[test]
fn list_names_every_document_and_its_schema() {
    let o = output(&["schema", "--list", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(listed["schema"], "hvsim-schema-list-v1");
    let pairs: Vec<(&str, &str)> = listed["documents"]
        .as_array()
        .expect("an array")
        .iter()
        .map(|d| (d["name"].as_str().unwrap(), d["schema"].as_str().unwrap()))
        .collect();
    assert_eq!(pairs, DOCUMENTS);
    let o = output(&["schema", "summary"]);
    let schema: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(schema["$id"], "hvsim-summary-v1");
    let o = output(&["schema", "nothing"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("hvsim: error: no document named \"nothing\" (there are: report, bug,")
            && err.lines().count() == 1
    );
}

/// `--check FILE` checks a document against the schema it names, and says
/// where it breaks it, on one line.
#[test]
fn check_says_where_a_document_breaks_its_schema() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("replay.json");
    let mut doc = serde_json::json!({
        "schema": "hvsim-replay-v1", "bug": "BUG-0", "reproduced": true, "trace_matches": true,
        "memory_matches": true, "trace_hash": "t", "world_differences": "", "assertion": null,
        "expected": "e", "vtime_ns": 1, "events": 2, "from_saved_root": false, "story": [],
    });
    std::fs::write(&file, doc.to_string()).unwrap();
    let check = || output(&["schema", "--check", file.to_str().unwrap()]);
    let o = check();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("a valid replay document (hvsim-replay-v1)"));
    doc["events"] = "two".into();
    std::fs::write(&file, doc.to_string()).unwrap();
    let o = check();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("replay.json: the replay document does not match its schema hvsim-replay-v1 at /events: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    doc.as_object_mut().unwrap().remove("schema");
    std::fs::write(&file, doc.to_string()).unwrap();
    let err = String::from_utf8_lossy(&check().stderr).into_owned();
    assert!(err.contains("no \"schema\" field names its schema"), "{err}");
}
