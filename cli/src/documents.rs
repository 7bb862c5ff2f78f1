//! Every JSON document hvsim writes, by name: the explorer's (reports, bug
//! records, run summaries, replays, findings: `hvsim_explorer::schema`) and
//! what each command prints for `--json`. The one list `hvsim schema` and
//! `docs/schemas/` are made from; each is printed through
//! `util::print_json`, which checks it against its schema under
//! `HVSIM_SCHEMA_CHECK=1`.

use std::path::PathBuf;

use hvsim_explorer::document::{entry, Document, Entry, Tag};
use hvsim_explorer::schema;
use schemars::JsonSchema;
use serde::Serialize;

use crate::cmd;

pub fn all() -> Vec<Entry> {
    let mut all = schema::documents();
    all.extend([
        entry::<cmd::minimize::MinimizeReport>(),
        entry::<cmd::retest::RetestReport>(),
        entry::<cmd::debug::DebugLine>(),
        entry::<cmd::check::CheckReport>(),
        entry::<cmd::check::TxnHistoryLine>(),
        entry::<cmd::doctor::DoctorReport>(),
        entry::<cmd::snapshot::SnapshotInfo>(),
        entry::<cmd::diff_log::LogDiff>(),
        entry::<cmd::cache::CacheListing>(),
        entry::<cmd::cache::CacheCleared>(),
        entry::<cmd::image::ImagesLoaded>(),
        entry::<cmd::image::ImageList>(),
        entry::<cmd::image::ImagePulled>(),
        entry::<cmd::image::ImagesRemoved>(),
        entry::<cmd::image::ImageInspect>(),
        entry::<cmd::kernel::KernelJson>(),
        entry::<cmd::kernel::HashesJson>(),
        entry::<cmd::bench::BenchReport>(),
        entry::<SchemaList>(),
        // A command's new --json document is one line here, then
        // `hvsim schema --write docs/schemas`.
    ]);
    all
}

/// The document named `name`.
pub fn find(name: &str) -> Option<Entry> {
    all().into_iter().find(|e| e.name == name)
}

// Here, below both the `schema` command and the list that names it.

/// What `hvsim schema --json` prints: the documents listed, written or
/// checked.
#[derive(Serialize, JsonSchema)]
pub struct SchemaList {
    pub schema: Tag<SchemaList>,
    pub documents: Vec<Listed>,
}

impl Document for SchemaList {
    const NAME: &'static str = "schema-list";
    const SCHEMA: &'static str = "hvsim-schema-list-v1";
    const ABOUT: &'static str = "the documents `hvsim schema --json` listed, wrote or checked";
}

/// One document, as `--json` lists it.
#[derive(Serialize, JsonSchema)]
pub struct Listed {
    name: &'static str,
    schema: &'static str,
    about: &'static str,
    /// With --write: where its schema was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    file: Option<PathBuf>,
}

impl Listed {
    pub fn of(e: &Entry, file: Option<PathBuf>) -> Listed {
        Listed { name: e.name, schema: e.schema_id, about: e.about, file }
    }
}
