//! The exploration report: `report.json`, `report.md`, `report.html` (for
//! triage, see [`html`]) and one `bugs/BUG-<id>.json` per bug, each
//! published whole (see `hvsim_vmm::files::publish`) into the
//! exploration's own directory ([`RunDir`]).

mod baseline;
mod dir;
mod findings;
pub mod github;
mod html;
mod junit;
mod target;
mod unevaluated;

pub use baseline::{Baseline, BugChange, Changes, Status};
pub use dir::{inputs_of_record, RunDir, LATEST};
pub use findings::{BugFinding, Decision, Findings};
pub use unevaluated::Unevaluated;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use hvsim_vmm::faults::FaultReport;
use schemars::JsonSchema;
use serde::Serialize;

use crate::record::assertions::Verdict;
use crate::record::bug::Later;
use crate::record::checkers::CheckerTally;
use crate::record::claims::{self, Blame, ClaimReport, ClaimVerdict, HarnessTally};
use crate::record::composer::ComposerTally;
use crate::record::document::Tag;
use crate::record::error::ExploreError;
use crate::record::exploration::DrawTally;
use crate::record::exploration::{
    Ending, Exploration, Garbage, Instrumentation, Phases, SeriesPoint, TimelineEnds, TreeMemory,
};
use crate::record::faults::BuggifyTally;
use crate::record::sdk::{AssertKind, Location};
use crate::record::services::ServiceExit;
use crate::record::timeline::Point;
use hvsim_vmm::summary::Replayable;

#[derive(Debug, Serialize, JsonSchema)]
pub struct AssertionReport {
    pub id: String,
    pub message: String,
    pub kind: AssertKind,
    /// The SDK's name for the assertion (e.g. `AlwaysGreaterThan`).
    pub display: String,
    pub verdict: Verdict,
    pub hits: u64,
    pub passes: u64,
    pub failures: u64,
    pub registered: bool,
    pub location: Location,
    pub bug: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct BugSummary {
    pub id: String,
    pub summary: String,
    pub at: Point,
    pub occurrences: u64,
    pub file: String,
    pub replay_command: String,
    /// The console's last lines when the bug showed.
    pub console_tail: Vec<String>,
    /// What happened in its timeline up to the failure (`story.rs`).
    pub story: Vec<crate::record::story::Entry>,
    /// How likely it was from moments of its timeline on (`likelihood.rs`).
    pub likelihood: Option<crate::record::bug::Likelihood>,
    /// "reproduced 3/3", "FLAKY: reproduced 1/3", or "UNCONFIRMED: ...".
    pub reproduction: String,
    /// `fail-reproducible`, `fail-flaky` or `fail-unconfirmed`, as for a
    /// claim it falsifies (`claims.rs`).
    pub verdict: ClaimVerdict,
    /// Whose failure it is (`claims.rs`, docs/claims.md).
    pub blame: Blame,
    /// Every re-execution asked for ran (whatever they showed).
    pub confirmed: bool,
    pub replayable: Replayable,
    pub replayable_reasons: Vec<String>,
    /// What failed after it in the same timeline.
    pub after: Vec<Later>,
    /// The drawn faults that struck in its timeline, one line each.
    pub faults: Vec<String>,
    /// With Test Composer: the template, and the commands that had started
    /// before it showed, one line each.
    pub composer: Option<(String, Vec<String>)>,
    /// The buggify sites enabled in its timeline, one line each.
    pub buggify: Vec<String>,
    /// For a checker's bug: the smallest violating sub-history found.
    pub sub_history: Option<SubHistory>,
    /// In a merge of shards: every shard that saw it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<u32>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SubHistory {
    /// Operations in the whole history, and in the sub-history.
    pub operations: usize,
    pub kept: usize,
    /// No single operation could be removed from it.
    pub minimal: bool,
    /// Its events, as JSON lines (`hvsim check --model M` takes them).
    pub lines: Vec<String>,
    /// A transactional checker's cycles in the whole history, each edge
    /// with its evidence (the first few of each anomaly).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cycles: Vec<Cycle>,
}

/// A dependency cycle a transactional checker found.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Cycle {
    /// Its anomaly (`G2-item`), and the cycle in one line
    /// (`T0 -rw-> T1 -rw-> T0`).
    pub anomaly: String,
    pub what: String,
    pub steps: Vec<CycleStep>,
}

/// One edge of a cycle: transactions by their position in the history.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CycleStep {
    pub from: u64,
    pub to: u64,
    /// ww, wr, rw or realtime.
    pub kind: String,
    pub why: String,
}

impl Cycle {
    /// The cycles of a transactional verdict (`hvsim_checkers::txn`); none
    /// in another model's.
    pub fn of_verdict(verdict: &serde_json::Value) -> Vec<Cycle> {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let anomalies = verdict["anomalies"].as_array().map(Vec::as_slice).unwrap_or_default();
        anomalies
            .iter()
            .filter_map(|a| {
                let steps = a["cycle"].as_array().filter(|c| !c.is_empty())?;
                let steps = steps
                    .iter()
                    .map(|s| CycleStep {
                        from: s["from"].as_u64().unwrap_or_default(),
                        to: s["to"].as_u64().unwrap_or_default(),
                        kind: text(&s["kind"]),
                        why: text(&s["why"]),
                    })
                    .collect();
                Some(Cycle { anomaly: text(&a["anomaly"]), what: text(&a["what"]), steps })
            })
            .collect()
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Summary {
    pub target: String,
    pub seed: u64,
    /// Why it ended (`running` in a report written while it runs).
    pub ending: Ending,
    /// How far branches ran ("whole timelines of up to 20ms", "slices of
    /// 5ms"), and snapshot intervals.
    pub span: String,
    pub timelines: TimelineEnds,
    pub tree: TreeMemory,
    pub branches: u64,
    /// Branches per round (the exploration depends on it), and the
    /// workers that ran them (it does not).
    pub batch: usize,
    pub workers: usize,
    /// How branches picked their snapshot (`rarity` or `energy`).
    pub schedule: &'static str,
    /// SDK draws made decision points, and branches that chose a value.
    pub draws: DrawTally,
    pub snapshots: usize,
    pub signals: u64,
    pub coverage_edges: usize,
    pub wall_ms: u64,
    pub vtime_ns: u64,
    pub setup_complete: bool,
    /// A service exited with an error before setup complete: the setup
    /// stopped there and no timeline ran (null: none did).
    pub setup_failed: Option<ServiceExit>,
    /// The root came from a saved root (what was explored does not change).
    pub root_restored: bool,
    pub bugs: usize,
    /// Branch number and milliseconds at which the first bug appeared.
    pub first_bug: Option<(u64, u64)>,
    pub verdicts: BTreeMap<String, usize>,
    pub garbage: Garbage,
    /// Messages whose assertion, guidance or event name was one too many.
    #[serde(default)]
    pub dropped: crate::record::exploration::Dropped,
    /// Where the wall time went.
    pub phases: Phases,
    /// Which shards of the exploration this report holds (docs/scale.md).
    pub shards: crate::record::shard::Shards,
    /// How much is likely still unfound (`discovery.rs`), and whether the
    /// stop rule ended the exploration.
    pub discovery: crate::record::discovery::Estimates,
    /// The fault rules as the bandit saw them (`--schedule bandit`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<crate::record::exploration::RuleTally>,
    /// The Test Composer templates as the bandit saw them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub templates: Vec<crate::record::exploration::TemplateTally>,
    /// The Test Composer commands as the bandit saw them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<crate::record::exploration::CommandTally>,
}

/// What `hvsim explore --json` prints and `report.json` holds.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Report {
    pub schema: Tag<Report>,
    /// The hvsim, command line, host and start time of the exploration.
    pub invocation: Invocation,
    pub summary: Summary,
    /// The checks no timeline evaluated, and why: what a reader must see
    /// first (`report/unevaluated.rs`). Null when every check was.
    pub unevaluated: Option<Unevaluated>,
    /// Against `--baseline`: each bug new, ongoing or resolved, and the
    /// verdicts that changed (`report/baseline.rs`). Null without one.
    pub changes: Option<Changes>,
    pub assertions: Vec<AssertionReport>,
    pub bugs: Vec<BugSummary>,
    pub events: BTreeMap<String, u64>,
    /// What Test Composer ran over every timeline.
    pub composer: ComposerTally,
    /// The project's checkers: timelines checked, and their verdicts.
    pub checkers: Vec<CheckerTally>,
    /// The project's claims: each one's verdict, why, and the evidence.
    pub claims: Vec<ClaimReport>,
    /// Timelines whose harness failed outside any assertion or checker.
    pub harness: HarnessTally,
    /// What this host lets reach the guest from outside the seed.
    pub host_limits: Vec<String>,
    /// Each buggify site: timelines it was enabled in, times it fired.
    pub buggify: BTreeMap<String, BuggifyTally>,
    /// Landing evidence over every timeline: per configured fault kind, the
    /// packets or requests it touched ("not landed" if none).
    pub faults: Vec<FaultReport>,
    /// Coverage (signals) and bugs over time; at most 100 points.
    pub series: Vec<SeriesPoint>,
    /// The SDKs that reported, and the instrumented modules.
    pub instrumentation: Instrumentation,
    /// The timelines (branches) that reached the most coverage edges first,
    /// most first; at most 10.
    pub edges_by_timeline: Vec<TimelineEdges>,
}

/// Who ran an exploration, how and when: a report's header.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Invocation {
    pub hvsim_version: String,
    /// The command line, as typed (arguments with spaces quoted).
    pub command: String,
    pub host: String,
    /// When it started (RFC 3339, UTC).
    pub started: String,
}

impl Invocation {
    /// This process's.
    pub fn here() -> Invocation {
        let quote = |a: String| if a.contains(char::is_whitespace) || a.is_empty() { format!("'{a}'") } else { a };
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Invocation {
            hvsim_version: env!("CARGO_PKG_VERSION").to_owned(),
            command: std::env::args().map(quote).collect::<Vec<_>>().join(" "),
            host: host.trim().to_owned(),
            started: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct TimelineEdges {
    pub branch: u64,
    pub new_edges: u64,
}

/// The report of `exp`, whose bug records are (or will be) in `bugs_dir`.
pub fn report(exp: &Exploration, bugs_dir: &Path, invocation: &Invocation) -> Report {
    let limited_host = !exp.host_limits.is_empty();
    let bugs = exp
        .bugs
        .iter()
        .map(|bug| {
            let file = bugs_dir.join(format!("{}.json", bug.id));
            BugSummary {
                id: bug.id.clone(),
                summary: bug.summary.clone(),
                at: bug.at,
                occurrences: bug.occurrences,
                replay_command: replay_command(&file),
                file: file.display().to_string(),
                console_tail: bug.console_tail.clone(),
                story: bug.story.clone(),
                likelihood: bug.likelihood.clone(),
                reproduction: bug.reproduction_words(),
                verdict: claims::fail_verdict(bug),
                blame: claims::blame(bug, limited_host),
                confirmed: bug.reproduction.confirmed(),
                replayable: bug.replayable,
                replayable_reasons: bug.replayable_reasons.clone(),
                after: bug.after.clone(),
                faults: bug.faults.iter().map(|e| e.describe(&|n| node_name(&exp.target, n))).collect(),
                composer: bug.composer.as_ref().map(|c| (c.template.clone(), c.describe())),
                buggify: bug
                    .buggify
                    .iter()
                    .map(|(name, s)| format!("{name}: reached {}, fired {}", s.reached, s.fired))
                    .collect(),
                sub_history: bug.history.as_ref().map(|h| SubHistory {
                    operations: h.shrink.operations,
                    kept: h.shrink.kept,
                    minimal: h.shrink.minimal,
                    lines: h.sub_history.iter().map(|e| serde_json::to_string(e).expect("events serialize")).collect(),
                    cycles: Cycle::of_verdict(&h.verdict),
                }),
                shards: bug.shards.clone(),
            }
        })
        .collect();
    let assertions: Vec<AssertionReport> = exp
        .assertions
        .iter()
        .map(|r| AssertionReport {
            id: r.id.clone(),
            message: r.message.clone(),
            kind: r.kind,
            display: r.display.clone(),
            verdict: r.verdict(),
            hits: r.hits,
            passes: r.passes,
            failures: r.failures,
            registered: r.registered,
            location: r.location.clone(),
            bug: r.bug.clone(),
        })
        .collect();
    let mut verdicts = BTreeMap::new();
    for a in &assertions {
        *verdicts.entry(a.verdict.label().to_owned()).or_insert(0) += 1;
    }
    let step = exp.series.len().div_ceil(100).max(1);
    let series: Vec<SeriesPoint> = exp
        .series
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i + 1 == exp.series.len())
        .map(|(_, p)| p.clone())
        .collect();
    let mut edges_by_timeline: Vec<TimelineEdges> = exp
        .series
        .iter()
        .filter(|p| p.new_edges > 0)
        .map(|p| TimelineEdges { branch: p.branch, new_edges: p.new_edges })
        .collect();
    edges_by_timeline.sort_by(|a, b| b.new_edges.cmp(&a.new_edges).then(a.branch.cmp(&b.branch)));
    edges_by_timeline.truncate(10);
    let cx = claims::Context {
        assertions: &exp.assertions,
        checkers: &exp.checkers,
        bugs: &exp.bugs,
        harness: &exp.harness,
        host_limits: limited_host,
    };
    Report {
        schema: Tag::new(),
        invocation: invocation.clone(),
        unevaluated: unevaluated::unevaluated(exp),
        changes: None,
        summary: Summary {
            target: exp.target.name(),
            seed: exp.seed,
            ending: exp.ending.clone(),
            span: exp.describe_span(),
            timelines: exp.timelines,
            tree: exp.tree,
            branches: exp.branches,
            batch: exp.batch,
            workers: exp.workers,
            schedule: exp.policy.name(),
            draws: exp.draws,
            snapshots: exp.snapshots,
            signals: exp.signals,
            coverage_edges: exp.coverage_edges,
            wall_ms: exp.wall_ms,
            vtime_ns: exp.vtime_ns,
            setup_complete: exp.root.setup_complete,
            setup_failed: exp.root.setup_failed.clone(),
            root_restored: exp.root.restored,
            bugs: exp.bugs.len(),
            first_bug: exp.first_bug,
            verdicts,
            garbage: exp.garbage.clone(),
            dropped: exp.dropped.clone(),
            phases: exp.phases,
            shards: exp.shards.clone(),
            discovery: exp.discovery.estimates(),
            rules: exp.rules.clone(),
            templates: exp.templates.clone(),
            commands: exp.commands.clone(),
        },
        assertions,
        bugs,
        events: exp.events.clone(),
        composer: exp.composer.clone(),
        checkers: exp.checkers.clone(),
        claims: exp.claims.iter().map(|t| claims::judge(t, &cx)).collect(),
        harness: exp.harness.clone(),
        host_limits: exp.host_limits.clone(),
        buggify: exp.faults.buggify.clone(),
        faults: exp.faults.reports(),
        series,
        instrumentation: exp.instrumentation.clone(),
        edges_by_timeline,
    }
}

/// Node `n` of `target` as people know it: its service's name in a
/// compose project.
pub fn node_name(target: &crate::Target, n: u16) -> String {
    crate::record::story::name(&crate::record::story::nodes(target), n)
}

/// The checks no timeline evaluated, as a Markdown block quote that opens a
/// report or findings (nothing if every check was evaluated).
pub(crate) fn never_evaluated(m: &mut String, unevaluated: Option<&Unevaluated>) {
    let Some(u) = unevaluated else { return };
    let _ = writeln!(
        m,
        "> **Never evaluated: {} check(s) no timeline reached.** The exploration cannot say whether they hold.",
        u.properties.len()
    );
    for p in &u.properties {
        let _ = writeln!(m, "> - {p}");
    }
    let _ = writeln!(m, ">\n> Why: {}.\n", u.why);
}

/// How to replay the record at `file`.
/// How the root was reached, in words.
pub(crate) fn root_words(exp: &Exploration) -> String {
    let r = &exp.root;
    if let Some(exit) = &r.setup_failed {
        return format!("no root: {}", exit.describe());
    }
    if let Some(end) = &r.ended {
        return format!("no root: the target ended before setup complete, after a bug ({end})");
    }
    match (&exp.ending, r.setup_complete) {
        (_, true) => "setup complete".into(),
        (Ending::Interrupted { .. }, false) => "setup interrupted before it completed".into(),
        (Ending::TimeSpent { .. }, false) => "the time budget was spent before setup completed".into(),
        _ => "setup never reported; root taken at the limit".into(),
    }
}

pub fn replay_command(file: &Path) -> String {
    format!("hvsim replay {}", file.display())
}

pub(crate) fn markdown(r: &Report, exp: &Exploration) -> String {
    let s = &r.summary;
    let mut m = String::new();
    let _ = writeln!(m, "# hvsim exploration report\n");
    never_evaluated(&mut m, r.unevaluated.as_ref());
    let _ = writeln!(m, "- target: `{}`", s.target);
    for line in target::brief(&exp.target) {
        let _ = writeln!(m, "  - {line}");
    }
    let whole = serde_json::to_string_pretty(&exp.target).unwrap_or_default();
    let _ = writeln!(
        m,
        "\n<details><summary>The target's whole description</summary>\n\n```json\n{whole}\n```\n\n</details>\n"
    );
    let _ = writeln!(m, "- master seed: {}", s.seed);
    let _ = writeln!(m, "- {}", s.ending.describe());
    let _ = writeln!(
        m,
        "- {} branches ({}) from {} snapshots; {} new signals; {:.1} s",
        s.branches,
        s.span,
        s.snapshots,
        s.signals,
        s.wall_ms as f64 / 1000.0
    );
    let _ = writeln!(
        m,
        "- timelines: {} ran to the guest's end, {} to their limit",
        s.timelines.ended, s.timelines.at_limit
    );
    let _ = writeln!(
        m,
        "- snapshot tree: {} MiB now ({} MiB of it machine state), {} MiB at most (with what branches held during a \
         round), budget {} MiB; {} snapshots evicted; {} interval and draw snapshots not taken, to stay within it",
        s.tree.bytes >> 20,
        s.tree.state_bytes >> 20,
        s.tree.peak_bytes >> 20,
        s.tree.budget_bytes >> 20,
        s.tree.evicted,
        s.tree.snapshots_skipped
    );
    let _ = writeln!(m, "- rounds of {} branches, run by {} workers", s.batch, s.workers);
    if s.draws.points > 0 {
        let _ = writeln!(
            m,
            "- SDK draws (`{}`): {} decision points, {} branches started at one with a chosen value, {} values \
             given inside timelines, {} revisits (branches that returned to a draw to make it a point)",
            s.schedule, s.draws.points, s.draws.chosen, s.draws.steered, s.draws.revisits
        );
    }
    if s.shards.count > 1 {
        let _ = writeln!(m, "- {} (docs/scale.md)", s.shards.describe());
    }
    let _ = writeln!(
        m,
        "- root: {} at virtual time {} ns (event {}){}",
        root_words(exp),
        exp.root.point.vtime_ns,
        exp.root.point.events,
        if s.root_restored { ", restored from a saved root" } else { "" }
    );
    let p = &s.phases;
    let _ = writeln!(
        m,
        "- wall time: start {:.1} ms, setup {:.1} ms, branches {:.1} ms, snapshot restores {:.1} ms, snapshots {:.1} ms, \
         bug re-executions {:.1} ms (these four summed over the workers; the exploration waited {:.1} ms for \
         re-executions; telling bugs' stories took {:.1} ms of the branches'), likelihood estimates {:.1} ms",
        p.start_ms,
        p.setup_ms,
        p.branches_ms,
        p.restore_ms,
        p.snapshot_ms,
        p.reexecution_ms,
        p.reexecution_wait_ms,
        p.story_ms,
        p.likelihood_ms
    );
    if s.garbage.count > 0 {
        let _ =
            writeln!(m, "- {} malformed SDK messages ignored, e.g. {:?}", s.garbage.count, s.garbage.examples.first());
    }
    if let Some(line) = s.dropped.describe() {
        let _ = writeln!(m, "- {line}");
    }
    if !r.claims.is_empty() {
        let _ = writeln!(m, "\n## Claims\n");
        m += &claims::table(&r.claims);
        let _ = writeln!(m, "\nThe evidence behind each verdict is in findings.md.");
    }
    if let Some(c) = &r.changes {
        m.push('\n');
        m += &c.markdown();
    }
    let _ = writeln!(m, "\n## Bugs ({})\n", r.bugs.len());
    if r.bugs.is_empty() {
        let _ = writeln!(m, "None found.");
    }
    for b in &r.bugs {
        let _ = writeln!(
            m,
            "- **{}**: {} — blame: {}; at virtual time {} ns (event {}), seen {} time(s); {}, replayable: {}{}\n  - replay: `{}`",
            b.id,
            b.summary,
            b.blame.name(),
            b.at.vtime_ns,
            b.at.events,
            b.occurrences,
            b.reproduction,
            b.replayable.name(),
            if b.replayable_reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", b.replayable_reasons.join("; "))
            },
            b.replay_command
        );
        if let Some(l) = &b.likelihood {
            let _ = writeln!(
                m,
                "  - likelihood that it follows, from moments of its timeline (bug/runs): {} ({:.3} s of virtual time, {:.0} ms)",
                l.describe(),
                l.vtime_ns as f64 / 1e9,
                l.wall_ms
            );
        }
        if !b.story.is_empty() {
            let _ = writeln!(m, "  - what happened (virtual time, who, what):\n\n    ```text");
            for e in &b.story {
                let _ = writeln!(m, "    {}", e.line());
            }
            let _ = writeln!(m, "    ```");
        }
        if !b.faults.is_empty() {
            let _ = writeln!(m, "  - drawn faults in its timeline:");
            for f in &b.faults {
                let _ = writeln!(m, "    - {f}");
            }
        }
        if !b.buggify.is_empty() {
            let _ = writeln!(m, "  - buggify sites enabled in its timeline:");
            for s in &b.buggify {
                let _ = writeln!(m, "    - {s}");
            }
        }
        if let Some(h) = &b.sub_history {
            let _ = writeln!(
                m,
                "  - the smallest violating sub-history found: {} of the history's {} operations{}:\n\n    ```json",
                h.kept,
                h.operations,
                if h.minimal { " (no one of them can be removed)" } else { "" }
            );
            for line in &h.lines {
                let _ = writeln!(m, "    {line}");
            }
            let _ = writeln!(m, "    ```");
            for c in &h.cycles {
                let _ = writeln!(m, "  - {} in the whole history: {}", c.anomaly, c.what);
                for s in &c.steps {
                    let _ = writeln!(m, "    - T{} -{}-> T{}: {}", s.from, s.kind, s.to, s.why);
                }
            }
        }
        if let Some((template, runs)) = &b.composer {
            let _ = writeln!(m, "  - Test Composer template `{template}`; commands in its timeline:");
            for r in runs {
                let _ = writeln!(m, "    - {r}");
            }
        }
        for later in &b.after {
            let _ = writeln!(
                m,
                "  - then, at virtual time {} ns (event {}): {}",
                later.at.vtime_ns, later.at.events, later.what
            );
        }
        if !b.console_tail.is_empty() {
            let _ = writeln!(m, "  - the console's last lines:\n\n    ```text");
            for line in &b.console_tail {
                let _ = writeln!(m, "    {line}");
            }
            let _ = writeln!(m, "    ```");
        }
    }
    let _ = writeln!(m, "\n## Properties\n");
    let _ = writeln!(m, "| verdict | kind | property | hits | held | failed | bug |");
    let _ = writeln!(m, "| --- | --- | --- | --- | --- | --- | --- |");
    for a in &r.assertions {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} |",
            a.verdict.label(),
            a.display,
            a.message.replace('|', "\\|"),
            a.hits,
            a.passes,
            a.failures,
            a.bug.as_deref().unwrap_or("")
        );
    }
    if !r.checkers.is_empty() {
        let _ = writeln!(m, "\n## Checkers\n");
        let _ = writeln!(
            m,
            "| checker | model | history | timelines | valid | invalid | undecided | malformed | operations | bug |"
        );
        let _ = writeln!(m, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for c in &r.checkers {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.spec.name.replace('|', "\\|"),
                c.spec.model.name(),
                c.spec.history.as_deref().unwrap_or("(unnamed)").replace('|', "\\|"),
                c.timelines,
                c.valid,
                c.invalid,
                c.undecided,
                c.malformed,
                c.operations,
                c.bug.as_deref().unwrap_or("")
            );
        }
        if let Some(e) = r.checkers.iter().find_map(|c| c.malformed_example.as_ref()) {
            let _ = writeln!(m, "\nA history that could not be checked: {e}");
        }
    }
    if !r.faults.is_empty() {
        let _ = writeln!(m, "\n## Faults\n");
        let _ = writeln!(m, "| fault | drawn faults that struck | touched (all timelines) | |");
        let _ = writeln!(m, "| --- | --- | --- | --- |");
        for f in &r.faults {
            let _ = writeln!(m, "| {} | {} | {} | {} |", f.kind, f.drawn, f.landed, f.status);
        }
    }
    if !r.buggify.is_empty() {
        let _ = writeln!(m, "\n## Buggify\n");
        let _ = writeln!(m, "| site | timelines enabled | timelines reaching it | reached | fired |");
        let _ = writeln!(m, "| --- | --- | --- | --- | --- |");
        for (site, t) in &r.buggify {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | {} |",
                site.replace('|', "\\|"),
                t.timelines_enabled,
                t.timelines,
                t.reached,
                t.fired
            );
        }
    }
    if !r.composer.is_empty() {
        let _ = writeln!(m, "\n## Test Composer\n");
        for (template, n) in &r.composer.templates {
            let _ = writeln!(m, "- template `{template}`: chosen in {n} timeline(s)");
        }
        let _ = writeln!(m, "\n| command | started | exit 0 | failed | ended by a fault | stopped |");
        let _ = writeln!(m, "| --- | --- | --- | --- | --- | --- |");
        for (c, t) in &r.composer.commands {
            let _ = writeln!(
                m,
                "| {c} | {} | {} | {} | {} | {} |",
                t.started, t.succeeded, t.failed, t.by_fault, t.stopped
            );
        }
        let _ = writeln!(m, "\n{}", crate::record::composer::HOW_COUNTED);
    }
    if !r.events.is_empty() {
        let _ = writeln!(m, "\n## Events\n");
        for (name, n) in &r.events {
            let _ = writeln!(m, "- {name}: {n}");
        }
    }
    if !r.instrumentation.sdks.is_empty() {
        let _ = writeln!(m, "\n## SDKs\n");
        for sdk in &r.instrumentation.sdks {
            let _ = writeln!(m, "- `{sdk}`");
        }
    }
    if s.coverage_edges > 0 || !r.instrumentation.coverage_modules.is_empty() {
        let _ = writeln!(m, "\n## Coverage\n");
        let _ = writeln!(m, "{} edges reached over all timelines.\n", s.coverage_edges);
        for (name, (edges, _)) in &r.instrumentation.coverage_modules {
            let _ = writeln!(m, "- module `{name}`: {edges} edges");
        }
        if !r.edges_by_timeline.is_empty() {
            let _ = writeln!(m, "\n| branch | edges it reached first |\n| --- | --- |");
            for t in &r.edges_by_timeline {
                let _ = writeln!(m, "| {} | {} |", t.branch, t.new_edges);
            }
        }
    }
    let _ = writeln!(m, "\n## Coverage and bugs over time\n");
    let _ = writeln!(m, "Discovery: {}.\n", r.summary.discovery.describe());
    // The bandit's arms (`--schedule bandit`): name, chosen, pulls, rewards.
    let arms = |m: &mut String, what: &str, columns: &str, rows: Vec<(&str, u64, u64, u64)>| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(m, "{what} as the bandit saw them (`--schedule bandit`):\n");
        let _ = writeln!(m, "{columns}\n| --- | --- | --- | --- |");
        for (name, chosen, pulls, rewards) in rows {
            let _ = writeln!(m, "| {name} | {chosen} | {pulls} | {rewards} |");
        }
        let _ = writeln!(m);
    };
    let s = &r.summary;
    arms(
        &mut m,
        "Fault rules",
        "| rule | chosen | timelines on | struck and found something new |",
        s.rules.iter().map(|t| (t.kind.as_str(), t.chosen, t.pulls, t.rewards)).collect(),
    );
    arms(
        &mut m,
        "Test Composer templates",
        "| template | chosen | timelines | found something new |",
        s.templates.iter().map(|t| (t.template.as_str(), t.chosen, t.pulls, t.rewards)).collect(),
    );
    arms(
        &mut m,
        "Test Composer commands",
        "| command | chosen | timelines on | ran and found something new |",
        s.commands.iter().map(|t| (t.command.as_str(), t.chosen, t.pulls, t.rewards)).collect(),
    );
    let _ = writeln!(m, "| branch | wall ms | snapshots | signals | edges | bugs | features | next timeline new |");
    let _ = writeln!(m, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for p in &r.series {
        let next = p.incidence.next_new();
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1}% [{:.1}%, {:.1}%] |",
            p.branch,
            p.wall_ms,
            p.snapshots,
            p.signals,
            p.edges,
            p.bugs,
            p.incidence.observed,
            100.0 * next.value,
            100.0 * next.low,
            100.0 * next.high
        );
    }
    m
}

fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ExploreError {
    let path = path.into();
    move |source| ExploreError::Io { what, path, source }
}
