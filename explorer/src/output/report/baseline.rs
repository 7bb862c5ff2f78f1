//! Findings from run to run: this exploration against an earlier one
//! (`--baseline`), as a CI job that explores every merge needs them. Each
//! bug is **new** (the earlier exploration did not find it), **ongoing**
//! (both did) or **resolved** (only the earlier one did: this exploration
//! did not find it, which is not proof that it is gone); each property,
//! claim and checker whose verdict changed is listed with both verdicts.
//!
//! The earlier exploration is read from its `report.json` (an exploration
//! directory, an `--out` directory's `latest`, or the file itself), as
//! JSON: an older hvsim's report is still read, field by field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::Report;
use crate::record::error::{ExploreError, Result};

/// What `--baseline` names, read once before the exploration starts.
#[derive(Clone, Debug)]
pub struct Baseline {
    /// The report.json read.
    pub file: PathBuf,
    pub started: String,
    bugs: BTreeMap<String, String>,
    /// Property (assertion, claim or checker) name -> its verdict.
    verdicts: BTreeMap<String, String>,
}

/// A bug's standing against the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    New,
    Ongoing,
    Resolved,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::New => "new",
            Status::Ongoing => "ongoing",
            Status::Resolved => "resolved",
        }
    }
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BugChange {
    pub id: String,
    pub summary: String,
    pub status: Status,
}

/// A property whose verdict is not the baseline's (null: it was not there).
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct VerdictChange {
    pub property: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// This exploration against the baseline: in report.json, report.md,
/// report.html and the findings.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Changes {
    /// The baseline's report.json, and when its exploration started.
    pub baseline: String,
    pub baseline_started: String,
    /// Every bug of either exploration: new and ongoing ones as this
    /// exploration found them, then the resolved ones.
    pub bugs: Vec<BugChange>,
    pub properties: Vec<VerdictChange>,
}

impl Changes {
    pub fn count(&self, status: Status) -> usize {
        self.bugs.iter().filter(|b| b.status == status).count()
    }

    /// What became of the bug `id` since the baseline.
    pub fn status_of(&self, id: &str) -> Option<Status> {
        self.bugs.iter().find(|b| b.id == id).map(|b| b.status)
    }

    /// The baseline's bugs this exploration did not find.
    pub fn resolved(&self) -> impl Iterator<Item = &BugChange> {
        self.bugs.iter().filter(|b| b.status == Status::Resolved)
    }

    /// One line: "2 new, 1 ongoing, 0 resolved bugs; 3 verdicts changed".
    pub fn describe(&self) -> String {
        format!(
            "{} new, {} ongoing, {} resolved bug(s) against the baseline; {} verdict(s) changed",
            self.count(Status::New),
            self.count(Status::Ongoing),
            self.count(Status::Resolved),
            self.properties.len()
        )
    }

    /// A Markdown section (report.md, findings.md).
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut m = String::new();
        let _ = writeln!(m, "## Against the baseline\n");
        let _ =
            writeln!(m, "{} (baseline: `{}`, started {}).\n", self.describe(), self.baseline, self.baseline_started);
        if !self.bugs.is_empty() {
            let _ = writeln!(m, "| bug | status | summary |\n| --- | --- | --- |");
            for b in &self.bugs {
                let _ = writeln!(m, "| {} | {} | {} |", b.id, b.status.name(), b.summary.replace('|', "\\|"));
            }
            m.push('\n');
        }
        if !self.properties.is_empty() {
            let _ = writeln!(m, "| property | before | now |\n| --- | --- | --- |");
            for p in &self.properties {
                let _ = writeln!(
                    m,
                    "| {} | {} | {} |",
                    p.property.replace('|', "\\|"),
                    p.before.as_deref().unwrap_or("(absent)"),
                    p.after.as_deref().unwrap_or("(absent)")
                );
            }
            m.push('\n');
        }
        m
    }
}

/// The report.json `path` means: the file, a directory holding one, or
/// an `--out` directory whose `latest` holds one.
fn report_file(path: &Path) -> Option<PathBuf> {
    [path.to_owned(), path.join("report.json"), path.join(super::LATEST).join("report.json")]
        .into_iter()
        .find(|p| p.is_file())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
}

impl Baseline {
    /// Reads the earlier exploration at `path`.
    pub fn read(path: &Path) -> Result<Baseline> {
        let bad = |why: String| ExploreError::Baseline(format!("--baseline {}: {why}", path.display()));
        let file = report_file(path).ok_or_else(|| {
            bad("no report.json there (give an exploration's directory, its report.json, or an --out directory with a `latest`)".into())
        })?;
        let bytes = std::fs::read(&file).map_err(|e| bad(format!("{}: {e}", file.display())))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("{}: not JSON: {e}", file.display())))?;
        if v["schema"].as_str().is_some_and(|s| !s.starts_with("hvsim-report-")) || v["summary"].is_null() {
            return Err(bad(format!("{} is not an exploration's report.json", file.display())));
        }
        let bugs = list(&v, "bugs").iter().map(|b| (text(&b["id"]), text(&b["summary"]))).collect();
        let verdicts = verdicts(&v);
        Ok(Baseline { file, started: text(&v["invocation"]["started"]), bugs, verdicts })
    }

    /// `report` against this baseline.
    pub fn compare(&self, report: &Report) -> Changes {
        let mut bugs: Vec<BugChange> = report
            .bugs
            .iter()
            .map(|b| BugChange {
                id: b.id.clone(),
                summary: b.summary.clone(),
                status: if self.bugs.contains_key(&b.id) { Status::Ongoing } else { Status::New },
            })
            .collect();
        for (id, summary) in &self.bugs {
            if !report.bugs.iter().any(|b| &b.id == id) {
                bugs.push(BugChange { id: id.clone(), summary: summary.clone(), status: Status::Resolved });
            }
        }
        // The same fields a baseline is read from: this report as JSON.
        let now = verdicts(&serde_json::to_value(report).expect("a report serializes"));
        let mut properties = Vec::new();
        for name in self.verdicts.keys().chain(now.keys()).collect::<std::collections::BTreeSet<_>>() {
            let (before, after) = (self.verdicts.get(name), now.get(name));
            if before != after {
                properties.push(VerdictChange {
                    property: name.clone(),
                    before: before.cloned(),
                    after: after.cloned(),
                });
            }
        }
        Changes { baseline: self.file.display().to_string(), baseline_started: self.started.clone(), bugs, properties }
    }
}

/// How a property is named across explorations: its kind and its text
/// (an assertion's message is what the program says; its id can move with
/// the source line).
fn property_name(kind: &str, name: &str) -> String {
    format!("{kind}: {name}")
}

/// A checker's verdict over the exploration, from its tally.
fn checker_verdict(c: &Value) -> String {
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    if n("invalid") > 0 {
        "invalid".into()
    } else if n("undecided") > 0 || n("malformed") > 0 {
        "undecided".into()
    } else if n("valid") > 0 {
        "valid".into()
    } else {
        "never checked".into()
    }
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn list(v: &Value, key: &str) -> Vec<Value> {
    v[key].as_array().cloned().unwrap_or_default()
}

/// Every property's verdict in a report (as JSON).
fn verdicts(v: &Value) -> BTreeMap<String, String> {
    let mut verdicts = BTreeMap::new();
    for a in list(v, "assertions") {
        verdicts.insert(property_name("assertion", &text(&a["message"])), text(&a["verdict"]));
    }
    for c in list(v, "claims") {
        verdicts.insert(property_name("claim", &text(&c["id"])), text(&c["verdict"]));
    }
    for c in list(v, "checkers") {
        verdicts.insert(property_name("checker", &text(&c["spec"]["name"])), checker_verdict(&c));
    }
    verdicts
}
