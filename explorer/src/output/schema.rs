//! The JSON documents hvsim writes and their versioned JSON Schemas: the
//! one list `hvsim schema --write docs/schemas` publishes, and the
//! documents of runs and replays. How a document is written and checked is
//! `document.rs`.

use hvsim_guest_image::container::ServiceState;
use hvsim_guest_image::linux::boot_cache::BootReport;
use hvsim_vmm::summary::Summary;
use schemars::JsonSchema;
use serde::Serialize;

use crate::output::report::{Findings, Report};
use crate::record::bug::BugRecord;
use crate::record::document::{entry, Document, Entry, Tag};
use crate::record::story;

/// The documents the explorer writes, by name; with each command's
/// `--json` document (the CLI's `documents.rs`), the list `hvsim schema`
/// and `docs/schemas/` are made from.
pub fn documents() -> Vec<Entry> {
    vec![
        entry::<Report>(),
        entry::<BugRecord>(),
        entry::<RunReport>(),
        entry::<ReplayReport>(),
        entry::<Findings>(),
        // A new document is one line here (its type implements `Document`
        // and carries a `Tag`), then `hvsim schema --write docs/schemas`.
    ]
}

impl Document for Report {
    const NAME: &'static str = "report";
    const SCHEMA: &'static str = "hvsim-report-v1";
    const ABOUT: &'static str = "an exploration's report: report.json, and `hvsim explore --json`";
}

impl Document for BugRecord {
    const NAME: &'static str = "bug";
    const SCHEMA: &'static str = "hvsim-bug-v1";
    const ABOUT: &'static str =
        "a bug record: bugs/BUG-<id>.json of an exploration, BUG-<id>.min.json of `hvsim minimize`";
}

impl Document for Findings {
    const NAME: &'static str = "findings";
    const SCHEMA: &'static str = "hvsim-findings-v1";
    const ABOUT: &'static str = "what a reviewer reads to decide whether to ship: findings.json of an exploration";
}

/// What `hvsim run --json` and `hvsim replay --snapshot FILE --json` print:
/// the machine's summary, and how the run got its machine.
#[derive(Serialize, JsonSchema)]
pub struct RunReport {
    pub schema: Tag<RunReport>,
    #[serde(flatten)]
    pub summary: Summary,
    pub boot: BootReport,
    /// With containers: how each service ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<ServiceState>,
}

impl Document for RunReport {
    const NAME: &'static str = "summary";
    const SCHEMA: &'static str = "hvsim-summary-v1";
    const ABOUT: &'static str = "a run's summary: `hvsim run --json`, `hvsim replay --snapshot FILE --json`";
}

/// What `hvsim replay BUG.json --json` prints: whether the bug's failure
/// came again, and the story of its timeline as the replay told it.
#[derive(Serialize, JsonSchema)]
pub struct ReplayReport {
    pub schema: Tag<ReplayReport>,
    /// The bug's id.
    pub bug: String,
    /// The same failure at the same point with the same trace (and memory,
    /// unless the host lets it differ).
    pub reproduced: bool,
    pub trace_matches: bool,
    pub memory_matches: bool,
    /// The trace hash where the replay stopped.
    pub trace_hash: String,
    /// How the world the record comes from differs from this one (empty if
    /// it does not; replayed with `--force`).
    pub world_differences: String,
    /// The failure observed at the bug's point, if any.
    pub assertion: Option<String>,
    /// The failure the record expects.
    pub expected: String,
    pub vtime_ns: u64,
    pub events: u64,
    /// It started from the saved root of its timeline.
    pub from_saved_root: bool,
    /// What happened in its timeline, as the replay went.
    pub story: Vec<story::Entry>,
}

impl Document for ReplayReport {
    const NAME: &'static str = "replay";
    const SCHEMA: &'static str = "hvsim-replay-v1";
    const ABOUT: &'static str = "a bug's replay: `hvsim replay BUG.json --json`";
}

#[cfg(test)]
mod tests {
    use hvsim_guest_image::world::World;

    use serde_json::Value;

    use super::*;
    use crate::record::bug::{BugKind, Fingerprint};
    use crate::record::document::{check, json};
    use crate::record::timeline::{Point, Timeline};
    use crate::Target;

    fn record() -> BugRecord {
        let at = Point { events: 10, vtime_ns: 1000 };
        let end = hvsim_vmm::End::Exit { status: 3 };
        let failure = Fingerprint { trace_hash: "t".into(), memory_hash: "m".into() };
        let target = Target::Raw { guest: "demo".into() };
        BugRecord::new(BugKind::Crash { end }, at, Timeline::at(at), target, 1, 1, World::default(), failure, 3)
    }

    /// A document with a field of the wrong type is refused, naming the
    /// document, its schema, where, and what is wrong; as written, it
    /// passes.
    #[test]
    fn a_document_that_breaks_its_schema_is_refused_saying_where() {
        let mut value = serde_json::to_value(record()).unwrap();
        check::<BugRecord>(&value).unwrap();
        value["master_seed"] = "one".into();
        let e = check::<BugRecord>(&value).unwrap_err().to_string();
        assert_eq!(
            e,
            r#"the bug document does not match its schema hvsim-bug-v1 at /master_seed: "one" is not of type "integer""#
        );
        value["master_seed"] = 1.into();
        // The value at fault is quoted, cut short.
        value["summary"] = serde_json::json!(["x".repeat(1000)]);
        let e = check::<BugRecord>(&value).unwrap_err().to_string();
        assert!(e.contains(" at /summary: [\"xxx") && e.ends_with("...") && e.len() < 500, "{e}");
        value["summary"] = "s".into();
        value["schema"] = "hvsim-bug-v0".into();
        let e = check::<BugRecord>(&value).unwrap_err().to_string();
        assert!(e.contains("hvsim-bug-v1 at /schema: "), "{e}");
        value.as_object_mut().unwrap().remove("schema");
        let e = check::<BugRecord>(&value).unwrap_err().to_string();
        assert!(e.contains("at its top level: \"schema\" is a required property"), "{e}");
    }

    #[test]
    fn every_schema_names_itself_and_requires_its_tag() {
        let names: Vec<&str> = documents().iter().map(|e| e.name).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for e in documents() {
            let s = (e.schema)();
            assert_eq!(s.get("$id").and_then(Value::as_str), Some(e.schema_id));
            assert!(e.schema_id.starts_with(&format!("hvsim-{}-v", e.name)), "{}", e.schema_id);
            assert_eq!(s.pointer("/properties/schema/const").and_then(Value::as_str), Some(e.schema_id), "{}", e.name);
            let required = s.get("required").and_then(Value::as_array).expect("required fields");
            assert!(required.iter().any(|r| r == "schema"), "{}: {required:?}", e.name);
            jsonschema::validator_for(s.as_value()).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        }
    }

    /// Records written before records named their schema still load; one
    /// naming another schema does not.
    #[test]
    fn records_without_a_tag_load_and_another_schema_is_refused() {
        let mut value = serde_json::to_value(record()).unwrap();
        assert_eq!(value["schema"], "hvsim-bug-v1");
        value.as_object_mut().unwrap().remove("schema");
        let r = BugRecord::parse(&value.to_string()).unwrap();
        assert_eq!(serde_json::to_value(&r).unwrap()["schema"], "hvsim-bug-v1", "written with its tag again");
        value["schema"] = "hvsim-bug-v9".into();
        let e = BugRecord::parse(&value.to_string()).unwrap_err();
        assert!(e.contains("schema hvsim-bug-v9: this hvsim reads hvsim-bug-v1"), "{e}");
    }

    /// `json` writes what `serde_json` would, and checks it when asked.
    #[test]
    fn json_is_pretty_json_of_the_document() {
        let r = record();
        assert_eq!(json(&r).unwrap(), serde_json::to_vec_pretty(&r).unwrap());
    }
}
