//! Every JSON document hvsim writes, by name: the explorer's (reports, bug
//! records, run summaries, replays, findings: `hvsim_explorer::schema`) and
//! what each command prints for `--json`. The one list `hvsim schema` and
//! `docs/schemas/` are made from; each is printed through
//! `util::print_json`, which checks it against its schema under
//! `HVSIM_SCHEMA_CHECK=1`.

use hvsim_explorer::document::{entry, Entry};
use hvsim_explorer::schema;

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
        entry::<cmd::schema::SchemaList>(),
        // A command's new --json document is one line here, then
        // `hvsim schema --write docs/schemas`.
    ]);
    all
}

/// The document named `name`.
pub fn find(name: &str) -> Option<Entry> {
    all().into_iter().find(|e| e.name == name)
}
