//! The one way hvsim writes a JSON document ([`json`]), the `"schema"`
//! field each carries ([`Tag`]), and checking a document against its
//! schema.
//!
//! Each document carries a top-level `"schema"` field naming its schema and
//! version (`hvsim-report-v1`), which is also the schema's `$id`. The
//! schemas are generated from the Rust types (`schemars`, reading their
//! `serde` attributes) for what hvsim *writes*. With `HVSIM_SCHEMA_CHECK=1`
//! (the test suite sets it), [`json`] checks every document against its
//! schema as it is written, so a type that drifts from its schema fails
//! the run. The list of documents is `schema.rs`.
//!
//! A field removed, renamed or retyped bumps a document's version; a field
//! added does not (the schemas allow fields they do not name).

use std::borrow::Cow;
use std::marker::PhantomData;

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

pub fn entry<D: Document>() -> Entry {
    Entry { name: D::NAME, schema_id: D::SCHEMA, about: D::ABOUT, schema: schema::<D> }
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
    checked::<D>(bytes)
}

/// `doc` as one line of JSON Lines (no newline), for a command that prints
/// as it goes; checked like [`json`].
pub fn json_line<D: Document>(doc: &D) -> Result<Vec<u8>, DocumentError> {
    let bytes = serde_json::to_vec(doc).map_err(|source| DocumentError::Serialize { name: D::NAME, source })?;
    checked::<D>(bytes)
}

/// `bytes`, checked against `D`'s schema if `HVSIM_SCHEMA_CHECK=1`.
fn checked<D: Document>(bytes: Vec<u8>) -> Result<Vec<u8>, DocumentError> {
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
        format!("hvsim_explorer::document::Tag<{}>", D::SCHEMA).into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> Schema {
        schemars::json_schema!({
            "description": "This document's schema and its version.",
            "type": "string",
            "const": D::SCHEMA,
        })
    }
}
