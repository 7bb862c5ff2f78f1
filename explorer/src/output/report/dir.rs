//! An exploration's own directory. `--out DIR` holds explorations, as
//! Jepsen's `store/` holds tests: each gets `DIR/<UTC time>-<target>-seed<N>/`,
//! which no other exploration writes to, and `DIR/latest` points at the
//! newest. So an exploration never overwrites or deletes an earlier one's
//! bugs, and a CI job finds its results at one path.
//!
//! Inside: `bugs/BUG-<id>.json`, each published the moment the bug is found
//! and again when confirmed; `report.json`, `report.md` and `report.html`,
//! refreshed while the exploration runs and written last when it ends;
//! `junit.xml`, the same as test results for CI (`junit.rs`);
//! `inputs/`, copies of the host files the target reads, by content hash
//! (see `hvsim_guest_image::inputs`), so that its records replay from
//! anywhere; `exploration.json`, all of it, for `hvsim merge`.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{io, markdown, report, Baseline, Invocation, Report};
use crate::record::bug::BugRecord;
use crate::record::document::{self, Document};
use crate::record::error::{ExploreError, Result};
use crate::record::exploration::Exploration;

pub struct RunDir {
    /// Where it is written.
    path: PathBuf,
    /// Where it will be read from, as reports and records name it: `path`,
    /// unless it is written elsewhere and then renamed (a merge's).
    named: PathBuf,
    /// Who made it, how and when: in every report written to it.
    invocation: Invocation,
    /// What its reports compare with (`--baseline`).
    baseline: Option<Baseline>,
}

/// The name of the link to the newest exploration.
pub const LATEST: &str = "latest";
/// The folder of a run's inputs.
const INPUTS: &str = "inputs";

impl RunDir {
    /// Creates a new exploration directory in `out` (created if need be)
    /// named for now and `label`, and points `out/latest` at it.
    pub fn create(out: &Path, label: &str) -> Result<RunDir> {
        std::fs::create_dir_all(out).map_err(io("creating the output directory", out))?;
        // 2026-11-25T16:21:50Z -> 20261125T162150Z
        let now: String = humantime::format_rfc3339_seconds(SystemTime::now())
            .to_string()
            .chars()
            .filter(|c| !matches!(c, '-' | ':'))
            .collect();
        let base = format!("{now}-{label}");
        let mut n = 1;
        let path = loop {
            let name = if n == 1 { base.clone() } else { format!("{base}-{n}") };
            let path = out.join(&name);
            match std::fs::create_dir(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(io("creating an exploration's directory", path)(e)),
            }
        };
        let bugs = path.join("bugs");
        std::fs::create_dir(&bugs).map_err(io("creating the output directory", &bugs))?;
        point_latest(out, path.file_name().expect("a name was just given"))?;
        Ok(RunDir { named: path.clone(), path, invocation: Invocation::here(), baseline: None })
    }

    /// A directory written at `path` (which must not exist) that will be
    /// renamed to `named` once whole.
    pub fn staged(path: &Path, named: &Path) -> Result<RunDir> {
        std::fs::create_dir(path).map_err(io("creating a directory", path))?;
        let bugs = path.join("bugs");
        std::fs::create_dir(&bugs).map_err(io("creating a directory", &bugs))?;
        Ok(RunDir { path: path.to_owned(), named: named.to_owned(), invocation: Invocation::here(), baseline: None })
    }

    /// Its reports compare with `baseline` (read before the exploration
    /// starts, so that a baseline of `latest` is the one before it).
    pub fn with_baseline(mut self, baseline: Option<Baseline>) -> RunDir {
        self.baseline = baseline;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the host files the target reads are kept.
    pub fn inputs(&self) -> PathBuf {
        self.path.join(INPUTS)
    }

    /// Publishes a bug's record as it stands, with its replay command.
    pub fn write_bug(&self, record: &BugRecord) -> Result<()> {
        let name = format!("{}.json", record.id);
        let file = self.path.join("bugs").join(&name);
        let mut record = record.clone();
        record.replay_command = super::replay_command(&self.named.join("bugs").join(&name));
        let json = document(&record, &file)?;
        hvsim_vmm::files::publish(&file, &json).map_err(io("writing a bug record", &file))
    }

    /// Publishes every bug record and the reports of `exp`; returns the
    /// report.
    pub fn write(&self, exp: &Exploration) -> Result<Report> {
        for bug in &exp.bugs {
            self.write_bug(bug)?;
        }
        let mut report = report(exp, &self.named.join("bugs"), &self.invocation);
        report.changes = self.baseline.as_ref().map(|b| b.compare(&report));
        let publish = |name: &str, bytes: &[u8]| {
            let file = self.path.join(name);
            hvsim_vmm::files::publish(&file, bytes).map_err(io("writing the report", &file))
        };
        publish("report.json", &document(&report, &self.path.join("report.json"))?)?;
        publish("report.md", markdown(&report, exp).as_bytes())?;
        publish("report.html", super::html::render(&report, exp).as_bytes())?;
        let findings = super::Findings::of(&report);
        publish("findings.json", &document(&findings, &self.path.join("findings.json"))?)?;
        publish("findings.md", findings.markdown().as_bytes())?;
        publish("junit.xml", super::junit::junit(&report).as_bytes())?;
        // Only whole: a shard killed after a checkpoint has no result to
        // merge, and the merge reports it missing.
        if exp.ending != crate::record::exploration::Ending::Running {
            publish(crate::record::exploration::FILE, &crate::record::exploration::to_json(exp))?;
        }
        Ok(report)
    }
}

/// `doc` as written to `file` (`document::json`).
fn document<D: Document>(doc: &D, file: &Path) -> Result<Vec<u8>> {
    document::json(doc).map_err(|source| ExploreError::Document { path: file.to_owned(), source })
}

/// The run directory a bug record at `record` belongs to, if it is where
/// an exploration wrote it (`<run>/bugs/<id>.json`): its inputs are there.
pub fn inputs_of_record(record: &Path) -> Option<PathBuf> {
    let bugs = record.parent()?;
    let run = bugs.parent()?;
    let inputs = run.join(INPUTS);
    (bugs.file_name()? == "bugs" && inputs.is_dir()).then_some(inputs)
}

/// Points `out/latest` at `name` (a relative link, so `out` can move):
/// a new link renamed over the old one.
fn point_latest(out: &Path, name: &std::ffi::OsStr) -> Result<()> {
    let latest = out.join(LATEST);
    let tmp = out.join(format!(".{LATEST}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp).map_err(io("linking the latest exploration", &tmp))?;
    std::fs::rename(&tmp, &latest).map_err(io("linking the latest exploration", &latest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exploration_gets_its_own_directory_and_latest_follows() {
        let out = tempfile::tempdir().unwrap();
        let a = RunDir::create(out.path(), "demo-seed1").unwrap();
        let b = RunDir::create(out.path(), "demo-seed1").unwrap();
        assert_ne!(a.path(), b.path());
        assert!(a.path().join("bugs").is_dir() && b.path().join("bugs").is_dir());
        let name = a.path().file_name().unwrap().to_str().unwrap();
        assert!(name.ends_with("-demo-seed1") && name.len() == "20261125T162150Z-demo-seed1".len(), "{name}");
        let latest = out.path().join(LATEST);
        assert_eq!(std::fs::read_link(&latest).unwrap(), b.path().file_name().unwrap());
        assert_eq!(std::fs::canonicalize(&latest).unwrap(), std::fs::canonicalize(b.path()).unwrap());
        let record = b.path().join("bugs/BUG-0.json");
        assert_eq!(inputs_of_record(&record), None, "no inputs saved");
        std::fs::create_dir(b.inputs()).unwrap();
        assert_eq!(inputs_of_record(&record), Some(b.inputs()));
        assert_eq!(inputs_of_record(Path::new("BUG-0.json")), None);
    }
}
