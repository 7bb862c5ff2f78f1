//! `findings.md` and `findings.json`: what a reviewer reads to decide
//! whether to ship, without running anything again. One decision, then
//! each claim with its verdict, why, and the evidence; each bug with whose
//! it is and how to replay it; what no claim covers; and how the result
//! was obtained. The rules behind the decision are in docs/claims.md.

use std::fmt::Write as _;

use schemars::JsonSchema;
use serde::Serialize;

use super::{Changes, Invocation, Report, Unevaluated};
use crate::record::claims::{Blame, ClaimReport, ClaimVerdict, HarnessTally};
use crate::record::document::Tag;
use crate::record::services::ServiceExit;

/// The decision the findings support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Claims were stated, every one passed with its evidence, no bug was
    /// found, and the exploration ran to its end.
    Ship,
    /// The system under test failed: a bug blamed on it.
    DoNotShip,
    /// Nothing says the system is wrong, but nothing proves the claims
    /// either: an inconclusive claim, a harness, checker or environment
    /// failure, no claims stated, or an exploration cut short.
    NotProven,
}

impl Decision {
    pub fn name(self) -> &'static str {
        match self {
            Decision::Ship => "ship",
            Decision::DoNotShip => "do-not-ship",
            Decision::NotProven => "not-proven",
        }
    }
}

/// One bug, as a reviewer needs it.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct BugFinding {
    pub id: String,
    pub summary: String,
    pub blame: Blame,
    /// `fail-reproducible`, `fail-flaky` or `fail-unconfirmed`.
    pub verdict: ClaimVerdict,
    pub reproduction: String,
    /// The claims it falsifies (none: a failure no claim names).
    pub claims: Vec<String>,
    pub file: String,
    pub replay_command: String,
}

/// What `findings.json` holds.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Findings {
    pub schema: Tag<Findings>,
    pub decision: Decision,
    /// Why, one line each.
    pub reasons: Vec<String>,
    pub target: String,
    pub seed: u64,
    pub invocation: Invocation,
    /// How the exploration ended, and what it covered.
    pub ending: String,
    pub timelines: u64,
    pub branches: u64,
    pub vtime_ns: u64,
    pub wall_ms: u64,
    pub claims: Vec<ClaimReport>,
    pub bugs: Vec<BugFinding>,
    /// The checks no timeline evaluated, and why (null: none).
    pub unevaluated: Option<Unevaluated>,
    /// Properties (assertions, checkers) that no claim names.
    pub unclaimed: Vec<String>,
    pub harness: HarnessTally,
    /// A service exited with an error before setup complete (null: none).
    pub setup_failed: Option<ServiceExit>,
    /// What this host lets reach the guest from outside the seed.
    pub host_limits: Vec<String>,
    /// Against `--baseline` (null: none given).
    pub changes: Option<Changes>,
}

impl Findings {
    pub fn of(r: &Report) -> Findings {
        let s = &r.summary;
        let bugs: Vec<BugFinding> = r
            .bugs
            .iter()
            .map(|b| BugFinding {
                id: b.id.clone(),
                summary: b.summary.clone(),
                blame: b.blame,
                verdict: b.verdict,
                reproduction: b.reproduction.clone(),
                claims: r.claims.iter().filter(|c| c.bugs.contains(&b.id)).map(|c| c.id.clone()).collect(),
                file: b.file.clone(),
                replay_command: b.replay_command.clone(),
            })
            .collect();
        let named = |name: &str| {
            r.claims.iter().any(|c| {
                c.evidence.assertions.iter().any(|a| a.name == name)
                    || c.evidence.checkers.iter().any(|k| k.name == name)
            })
        };
        let never = |message: &str| r.unevaluated.as_ref().is_some_and(|u| u.properties.iter().any(|p| p == message));
        let mut unclaimed: Vec<String> = r
            .assertions
            .iter()
            .filter(|a| !named(&a.id) && !named(&a.message))
            .map(|a| {
                let note = if never(&a.message) { " (never evaluated)" } else { "" };
                format!("{} {:?}{note}", a.display, a.message)
            })
            .collect();
        unclaimed
            .extend(r.checkers.iter().filter(|c| !named(&c.spec.name)).map(|c| format!("checker {}", c.spec.name)));
        let (decision, reasons) = decide(r, &bugs);
        Findings {
            schema: Tag::new(),
            decision,
            reasons,
            target: s.target.clone(),
            seed: s.seed,
            invocation: r.invocation.clone(),
            ending: s.ending.describe(),
            timelines: s.timelines.ended + s.timelines.at_limit,
            branches: s.branches,
            vtime_ns: s.vtime_ns,
            wall_ms: s.wall_ms,
            claims: r.claims.clone(),
            bugs,
            unevaluated: r.unevaluated.clone(),
            unclaimed,
            harness: r.harness.clone(),
            setup_failed: s.setup_failed.clone(),
            host_limits: r.host_limits.clone(),
            changes: r.changes.clone(),
        }
    }

    pub fn markdown(&self) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "# Findings: {} (seed {})\n", self.target, self.seed);
        let _ = writeln!(m, "**Decision: {}**\n", self.decision.name());
        for r in &self.reasons {
            let _ = writeln!(m, "- {r}");
        }
        let _ = writeln!(m);
        if let Some(exit) = &self.setup_failed {
            last_output(&mut m, "Setup failed", &exit.describe(), exit);
        }
        if let Some(exit) = &self.harness.service_exit {
            let words = format!(
                "{} (the first of {} timeline(s) whose harness failed)",
                exit.describe_in_timeline(),
                self.harness.timelines
            );
            last_output(&mut m, "A service exited", &words, exit);
        }
        super::never_evaluated(&mut m, self.unevaluated.as_ref());
        if let Some(c) = &self.changes {
            m += &c.markdown();
        }
        let _ = writeln!(m, "## Claims\n");
        if self.claims.is_empty() {
            let _ = writeln!(
                m,
                "No claims are stated (`[[claim]]` in the project manifest, docs/claims.md): \
                 nothing below says what the system promises, only what was checked."
            );
        } else {
            m += &crate::record::claims::table(&self.claims);
        }
        for c in &self.claims {
            let e = &c.evidence;
            let _ = writeln!(m, "\n### {}: {}\n", c.id, c.statement);
            let _ = writeln!(
                m,
                "- verdict: **{}**{}",
                c.verdict.name(),
                c.blame.map(|b| format!(" (blame: {})", b.name())).unwrap_or_default()
            );
            let _ = writeln!(m, "- why: {}", c.reason);
            let _ = writeln!(
                m,
                "- exercised in {} of {} timeline(s), {} evaluation(s) of its properties",
                e.exercised, e.timelines, e.evaluations
            );
            if e.required_faults.is_empty() {
                let _ = writeln!(m, "- faults it must survive: none stated");
            } else {
                let _ = writeln!(m, "- faults it must survive: {}", e.required_faults.join(", "));
            }
            if e.faults_landed.is_empty() {
                let _ = writeln!(m, "- faults that landed while it was exercised: none");
            }
            for (kind, l) in &e.faults_landed {
                let _ = writeln!(
                    m,
                    "- landed while it was exercised: {kind}, {} fault(s) in {} timeline(s), touching {}",
                    l.faults, l.timelines, l.touches
                );
            }
            let s = |ns: u64| format!("{:.3}s", ns as f64 / 1e9);
            for x in &e.landings {
                let _ = writeln!(
                    m,
                    "  - branch {}: {} in force {} to {}, touched {}, while the claim was exercised {} to {}",
                    x.branch,
                    x.landing.kind,
                    s(x.landing.start_ns),
                    s(x.landing.until_ns),
                    x.landing.touches,
                    s(x.exercised_from_ns),
                    s(x.exercised_until_ns)
                );
            }
            for o in &e.checkers {
                let _ = writeln!(
                    m,
                    "- checker {}: {} timeline(s) checked, {} operation(s)",
                    o.name, o.timelines, o.operations
                );
            }
            if !e.checkers.is_empty() {
                let _ = writeln!(
                    m,
                    "- operations checked in the timelines that exercised it: {} (at least {} asked)",
                    e.operations, e.min_operations
                );
            }
            for o in &e.assertions {
                let _ = writeln!(m, "- assertion {:?}: {} hit(s), {} held", o.name, o.hits, o.held);
            }
            for id in &c.bugs {
                let _ = writeln!(m, "- falsified by {id}");
            }
        }
        let _ = writeln!(m, "\n## Bugs ({})\n", self.bugs.len());
        if self.bugs.is_empty() {
            let _ = writeln!(m, "None found.");
        }
        for b in &self.bugs {
            let _ = writeln!(
                m,
                "- **{}** ({}, blame: {}): {}; {}; claims: {}\n  - replay: `{}`",
                b.id,
                b.verdict.name(),
                b.blame.name(),
                b.summary,
                b.reproduction,
                if b.claims.is_empty() { "none".to_owned() } else { b.claims.join(", ") },
                b.replay_command
            );
        }
        if !self.unclaimed.is_empty() {
            let _ = writeln!(m, "\n## Properties no claim names\n");
            for p in &self.unclaimed {
                let _ = writeln!(m, "- {p}");
            }
        }
        let _ = writeln!(m, "\n## How this was obtained\n");
        let i = &self.invocation;
        let _ = writeln!(m, "- `{}` (hvsim {}) on {}, started {}", i.command, i.hvsim_version, i.host, i.started);
        let _ = writeln!(
            m,
            "- {}; {} timeline(s), {} branch(es), {:.3} s of virtual time in {:.1} s",
            self.ending,
            self.timelines,
            self.branches,
            self.vtime_ns as f64 / 1e9,
            self.wall_ms as f64 / 1e3
        );
        if let Some(why) = &self.harness.example {
            let _ = writeln!(m, "- the harness failed in {} timeline(s), first: {why}", self.harness.timelines);
        }
        if self.host_limits.is_empty() {
            let _ = writeln!(m, "- host limits: none");
        }
        for l in &self.host_limits {
            let _ = writeln!(m, "- host limit: {l}");
        }
        m
    }
}

/// A section on a service's exit: what happened, and what it wrote last.
fn last_output(m: &mut String, heading: &str, words: &str, exit: &ServiceExit) {
    let _ = writeln!(m, "## {heading}\n\nThe {words}. What it wrote last:\n\n```text");
    for line in &exit.last_output {
        let _ = writeln!(m, "{} | {line}", exit.service);
    }
    let _ = writeln!(m, "```\n");
}

/// The decision, and its reasons (docs/claims.md).
fn decide(r: &Report, bugs: &[BugFinding]) -> (Decision, Vec<String>) {
    let mut reasons = Vec::new();
    let system: Vec<&BugFinding> = bugs.iter().filter(|b| b.blame == Blame::System).collect();
    for b in &system {
        reasons.push(format!("{} is the system's: {} ({})", b.id, b.summary, b.reproduction));
    }
    if !system.is_empty() {
        return (Decision::DoNotShip, reasons);
    }
    for b in bugs {
        reasons.push(format!("{} is the {}'s, not the system's: {}", b.id, b.blame.name(), b.summary));
    }
    if let Some(exit) = &r.summary.setup_failed {
        reasons.push(format!("the harness failed: the {}; no timeline ran", exit.describe()));
    } else if let Some(why) = &r.harness.example {
        reasons.push(format!("the harness failed in {} timeline(s), first: {why}", r.harness.timelines));
    }
    if let Some(u) = &r.unevaluated {
        reasons.push(format!("{} check(s) were never evaluated in any timeline: {}", u.properties.len(), u.why));
    }
    for c in r.claims.iter().filter(|c| c.verdict != ClaimVerdict::Pass) {
        reasons.push(format!("claim {} is {}: {}", c.id, c.verdict.name(), c.reason));
    }
    if r.claims.is_empty() {
        reasons.push("no claims are stated: the properties held, but no promise was tested against faults".into());
    }
    if !r.summary.ending.ran_to_end() {
        reasons.push(format!("the exploration did not run to its end: {}", r.summary.ending.describe()));
    }
    let missing = r.summary.shards.missing();
    if !missing.is_empty() {
        reasons.push(format!(
            "{} of the exploration's {} shards are not in this merge: their branches never ran here",
            missing.len(),
            r.summary.shards.count
        ));
    }
    if reasons.is_empty() {
        let passed = r.claims.len();
        reasons.push(format!("all {passed} claim(s) passed with evidence, and no bug was found"));
        return (Decision::Ship, reasons);
    }
    (Decision::NotProven, reasons)
}
