//! The JSON documents hvsim writes, their versioned JSON Schemas, and the
//! one way every document is written ([`json`]).
//!
//! Each document carries a top-level `"schema"` field naming its schema and
//! version (`hvsim-report-v1`), which is also the schema's `$id`. The
//! schemas are generated from the Rust types (`schemars`, reading their
//! `serde` attributes) for what hvsim *writes*; `hvsim schema --write
//! docs/schemas` publishes them. With `HVSIM_SCHEMA_CHECK=1` (the test
//! suite sets it), [`json`] checks every document against its schema as it
//! is written, so a type that drifts from its schema fails the run.
//!
//! A field removed, renamed or retyped bumps a document's version; a field
//! added does not (the schemas allow fields they do not name).

use std::borrow::Cow;
use std::marker::PhantomData;

use hvsim_guest_image::container::ServiceState;
use hvsim_guest_image::linux::boot_cache::BootReport;
use hvsim_vmm::summary::Summary;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::bug::BugRecord;
use crate::report::{Findings, Report};
use crate::story;

/// A JSON document hvsim writes, with a schema of its own.
pub trait Document: Serialize + JsonSchema {
    /// Its name: `hvsim schema NAME`, `docs/schemas/NAME.json`.
    const NAME: &'static str;
    /// Its schema's name and version: the document's `"schema"` field and
    /// the schema's `$id`.
    const SCHEMA: &'static str;
    /// What it is and where hvsim writes it, in a few words.
    const ABOUT: &'static str;
}

/// One entry of the registry: a document and its schema.
pub struct Entry {
    pub name: &'static str,
    pub schema_id: &'static str,
    pub about: &'static str,
    pub schema: fn() -> Schema,
}

fn entry<D: Document>() -> Entry {
    Entry { name: D::NAME, schema_id: D::SCHEMA, about: D::ABOUT, schema: schema::<D> }
}

/// Every document hvsim writes, by name: the one list `hvsim schema` and
/// `docs/schemas/` are made from.
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

/// The document named `name`.
pub fn find(name: &str) -> Option<Entry> {
    documents().into_iter().find(|e| e.name == name)
}

/// The JSON Schema (draft 2020-12) of what hvsim writes as `D`, with its
/// `$id`.
pub fn schema<D: Document>() -> Schema {
    // The serialize contract: what hvsim writes (an `Option` is `null`, not
    // absent; a field with a default is written all the same).
    let mut schema = SchemaSettings::draft2020_12().for_serialize().into_generator().into_root_schema_for::<D>();
    schema.insert("$id".into(), D::SCHEMA.into());
    schema
}

/// Why a document could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("cannot serialize the {name} document: {source}")]
    Serialize { name: &'static str, source: serde_json::Error },
    /// Only with `HVSIM_SCHEMA_CHECK=1`.
    #[error("the {name} document does not match its schema {schema} at {}: {message}", at(pointer))]
    Invalid { name: &'static str, schema: &'static str, pointer: String, message: String },
    /// Only with `HVSIM_SCHEMA_CHECK=1`: a schema the validator refuses is
    /// a bug in hvsim.
    #[error("the schema {schema} of the {name} document is not a valid JSON Schema: {message}")]
    BadSchema { name: &'static str, schema: &'static str, message: String },
}

fn at(pointer: &str) -> String {
    if pointer.is_empty() {
        "its top level".to_owned()
    } else {
        pointer.to_owned()
    }
}

/// The variable that turns on checking every document as it is written.
pub const CHECK_VAR: &str = "HVSIM_SCHEMA_CHECK";

/// `doc` as hvsim writes it (pretty JSON); checked against its schema
/// first if `HVSIM_SCHEMA_CHECK=1`.
pub fn json<D: Document>(doc: &D) -> Result<Vec<u8>, DocumentError> {
    let bytes = serde_json::to_vec_pretty(doc).map_err(|source| DocumentError::Serialize { name: D::NAME, source })?;
    if std::env::var_os(CHECK_VAR).is_some_and(|v| v == "1") {
        // What was written, read back: the check sees exactly the bytes.
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|source| DocumentError::Serialize { name: D::NAME, source })?;
        check::<D>(&value)?;
    }
    Ok(bytes)
}

/// Checks `value` against `D`'s schema: the first violation, with its
/// JSON pointer.
pub fn check<D: Document>(value: &Value) -> Result<(), DocumentError> {
    check_against(D::NAME, D::SCHEMA, schema::<D>().as_value(), value)
}

/// Checks `value` against `schema`, the schema of the document `name`.
pub fn check_against(
    name: &'static str,
    schema_id: &'static str,
    schema: &Value,
    value: &Value,
) -> Result<(), DocumentError> {
    let validator = jsonschema::validator_for(schema).map_err(|e| DocumentError::BadSchema {
        name,
        schema: schema_id,
        message: e.to_string(),
    })?;
    let first = validator.iter_errors(value).next().map(|e| (e.instance_path().to_string(), shorten(e.to_string())));
    match first {
        None => Ok(()),
        Some((pointer, message)) => Err(DocumentError::Invalid { name, schema: schema_id, pointer, message }),
    }
}

/// A violation's message quotes the value at fault, which may be a whole
/// object: the error stays one readable line.
fn shorten(mut message: String) -> String {
    const MAX: usize = 300;
    if message.len() > MAX {
        let mut end = MAX;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

/// A document's `"schema"` field: always `D::SCHEMA` when written. A
/// document read back may lack it (written before documents carried it);
/// one naming another schema is refused.
pub struct Tag<D>(PhantomData<fn() -> D>);

impl<D> Tag<D> {
    pub const fn new() -> Tag<D> {
        Tag(PhantomData)
    }
}

impl<D> Default for Tag<D> {
    fn default() -> Tag<D> {
        Tag::new()
    }
}

impl<D> Clone for Tag<D> {
    fn clone(&self) -> Tag<D> {
        *self
    }
}

impl<D> Copy for Tag<D> {}

impl<D> PartialEq for Tag<D> {
    fn eq(&self, _: &Tag<D>) -> bool {
        true
    }
}

impl<D> Eq for Tag<D> {}

impl<D: Document> std::fmt::Debug for Tag<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(D::SCHEMA)
    }
}

impl<D: Document> Serialize for Tag<D> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(D::SCHEMA)
    }
}

impl<'de, D: Document> Deserialize<'de> for Tag<D> {
    fn deserialize<De: serde::Deserializer<'de>>(d: De) -> Result<Tag<D>, De::Error> {
        let name = Cow::<str>::deserialize(d)?;
        if name != D::SCHEMA {
            return Err(serde::de::Error::custom(format!(
                "schema {name}: this hvsim reads {} (it may have been written by another hvsim)",
                D::SCHEMA
            )));
        }
        Ok(Tag::new())
    }
}

impl<D: Document> JsonSchema for Tag<D> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Tag".into()
    }

    fn schema_id() -> Cow<'static, str> {
        format!("hvsim_explorer::schema::Tag<{}>", D::SCHEMA).into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> Schema {
        schemars::json_schema!({
            "description": "This document's schema and its version.",
            "type": "string",
            "const": D::SCHEMA,
        })
    }
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

    use super::*;
    use crate::bug::{BugKind, Fingerprint};
    use crate::timeline::{Point, Timeline};
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
