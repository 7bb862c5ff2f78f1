//! `report.html`: the exploration report as one page for triage, readable
//! offline (no script, no request): the bugs first, each with how to replay
//! it, whether its re-executions reproduced it, its timeline and the
//! console's last lines; then every property, failed and never-reached ones
//! before those that held; the faults and whether they landed; signals,
//! snapshots and bugs over the branches; where the wall time went.
//!
//! Assertion messages, console lines and event names come from the guest:
//! maud escapes every string it is given, so none of them can add markup.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::{target, AssertionReport, Cycle, Report};
use crate::record::assertions::Verdict;
use crate::record::claims::{Blame, ClaimVerdict};
use crate::record::exploration::{Ending, Exploration, SeriesPoint};
use crate::record::timeline::Point;
use hvsim_vmm::summary::Replayable;

const STYLE: &str = "
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; color: #1d1d1f;
       overflow-wrap: anywhere; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
dl.head { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .15em 1em; margin: .6em 0; }
dl.head dt { color: #555; } dl.head dd { margin: 0; }
.chips span { display: inline-block; margin: .2em .4em .2em 0; padding: .1em .6em; border-radius: 1em; background: #eee; }
.bad { background: #fde2e1 !important; color: #a1130c; } .warn { background: #fff1d0 !important; color: #7a5200; }
.good { background: #dff5e3 !important; color: #16622a; } .muted { color: #555; }
.unevaluated { border: 1px solid #f0d090; border-left: 5px solid #e6a100; border-radius: 4px; padding: .5em 1em; margin: 1em 0; }
.bug { border: 1px solid #f0b4b0; border-left: 5px solid #d33; border-radius: 4px; padding: .5em 1em; margin: 1em 0; }
pre { background: #f6f6f8; padding: .6em; white-space: pre-wrap; overflow-wrap: anywhere; }
code { font-family: ui-monospace, monospace; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: .25em .6em; border-bottom: 1px solid #eee; }
th, td { overflow-wrap: normal; } th { white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.failed td:first-child { color: #a1130c; font-weight: 600; } tr.unexercised td:first-child { color: #7a5200; font-weight: 600; }
table.story td { font-family: ui-monospace, monospace; font-size: .85em; white-space: pre-wrap; vertical-align: top; }
table.story td:nth-child(2) { white-space: nowrap; }
.bar { display: flex; height: 1.4em; border-radius: 3px; overflow: hidden; } .bar div { min-width: 2px; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 24em), 1fr)); gap: 1em 2em; }
.charts figure { margin: 0; } .charts figcaption { font-weight: 600; }
svg.plot { width: 100%; height: auto; display: block; }
svg.plot text { font-size: 13px; fill: #333; }
svg.cycle { width: 22em; height: auto; display: block; } svg.cycle text { font-size: 13px; }
@media (max-width: 40em) { body { margin: 1em auto; font-size: 14px; } dl.head { grid-template-columns: minmax(0, 1fr); }
  dl.head dd { margin-bottom: .3em; } }
";

/// Colours of the phases bar.
const PHASE_COLOURS: [&str; 8] =
    ["#8e8e93", "#5ac8fa", "#34c759", "#ff9500", "#af52de", "#ff3b30", "#ffcc00", "#c7c7cc"];

/// The page for `r`, the report of `exp`.
pub fn render(r: &Report, exp: &Exploration) -> String {
    let s = &r.summary;
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "hvsim: " (s.target) ", seed " (s.seed) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "hvsim exploration of " code { (s.target) } }
                @if let Some(u) = &r.unevaluated {
                    div.unevaluated {
                        p { strong { "Never evaluated: " (u.properties.len()) " check(s) no timeline reached." }
                            " The exploration cannot say whether they hold." }
                        ul { @for p in &u.properties { li { (p) } } }
                        p { "Why: " (u.why) "." }
                    }
                }
                (header(r))
                div.chips {
                    span class=(match s.ending { Ending::Finished => "", Ending::Running | Ending::TimeSpent { .. } => "warn", _ => "bad" }) {
                        (s.ending.describe())
                    }
                    span { "master seed " (s.seed) }
                    span { (s.branches) " branches: " (s.span) }
                    span { (s.timelines.ended) " timelines ran to the end, " (s.timelines.at_limit) " to their limit" }
                    span { "snapshot tree " (s.tree.peak_bytes >> 20) " MiB at most" @if s.tree.evicted > 0 { ", " (s.tree.evicted) " evicted" } @if s.tree.snapshots_skipped > 0 { ", " (s.tree.snapshots_skipped) " not taken to stay within its budget" } }
                    span { (s.snapshots) " snapshots" }
                    span { (s.signals) " signals" }
                    @if s.coverage_edges > 0 { span { (s.coverage_edges) " coverage edges" } }
                    span { (s.workers) " worker(s), rounds of " (s.batch) }
                    @if s.shards.count > 1 {
                        span class=(if s.shards.missing().is_empty() { "" } else { "warn" }) { (s.shards.describe()) }
                    }
                    span class=(if s.bugs > 0 { "bad" } else { "good" }) { (s.bugs) " bug(s)" }
                    @for (label, n) in &s.verdicts {
                        span class=(verdict_class_of_label(label)) { (n) " " (label) }
                    }
                }
                @if s.discovery.incidence.timelines > 0 {
                    p.discovery { "Discovery: " (s.discovery.describe()) "." }
                }
                ul.target { @for line in target::brief(&exp.target) { li { (line) } } }
                details.muted {
                    summary { "The target's whole description" }
                    pre { code { (serde_json::to_string_pretty(&exp.target).unwrap_or_default()) } }
                }
                p.muted {
                    "Root: " (super::root_words(exp)) " at " (point(exp.root.point)) "."
                }
                @if !r.claims.is_empty() { (claims(r)) }
                @if let Some(c) = &r.changes { (changes(c)) }
                h2 { "Bugs (" (r.bugs.len()) ")" }
                @if r.bugs.is_empty() { p { "None found." } }
                @for (b, record) in r.bugs.iter().zip(&exp.bugs) {
                    div.bug id=(b.id) {
                        h3 { (b.id) ": " (b.summary) }
                        div.chips {
                            span class=(replayable_class(b.replayable)) { (b.reproduction) }
                            span class=(replayable_class(b.replayable)) { "replayable: " (b.replayable.name()) }
                            span { "seen " (b.occurrences) " time(s)" }
                            span { "found in branch " (record.branch) }
                            span class=(if b.blame == Blame::System { "bad" } else { "warn" }) { "blame: " (b.blame.name()) }
                        }
                        @for why in &b.replayable_reasons { p.muted { (why) } }
                        p { "At " (point(b.at)) ". Replay it (it tells this story as it goes):" }
                        pre { code { (b.replay_command) } }
                        (story(&b.story))
                        @if let Some(l) = &b.likelihood { (likelihood(l, b.at.vtime_ns)) }
                        @if b.console_tail.is_empty() {
                            p.muted { "The console was empty when it failed: the guest had written nothing to it." }
                        }
                        details {
                            summary { "How the replay reaches it: boot with seed " (record.master_seed) " to the root, then "
                                      (record.timeline.segments.len()) " re-seeded segment(s)" }
                            div.scroll { table {
                                tr { th { "from" } th { "seed (every entropy stream re-seeded)" } th { "until" } }
                                tr { td { "boot" } td { (record.master_seed) } td { (point(record.timeline.root)) } }
                                @for seg in &record.timeline.segments {
                                    tr { td { "snapshot" } td { (format!("{:#018x}", seg.seed)) } td { (point(seg.until)) } }
                                }
                            } }
                        }
                        @if !b.faults.is_empty() {
                            p { "Drawn faults in its timeline:" }
                            ul { @for f in &b.faults { li { (f) } } }
                        }
                        @if !b.buggify.is_empty() {
                            p { "Buggify sites enabled in its timeline:" }
                            ul { @for s in &b.buggify { li { (s) } } }
                        }
                        @if let Some(h) = &b.sub_history {
                            p { "The smallest violating sub-history found: " (h.kept) " of the history's " (h.operations) " operations"
                                @if h.minimal { " (no one of them can be removed)" } ":" }
                            pre { (h.lines.join("\n")) }
                            @for c in &h.cycles {
                                p { (c.anomaly) " in the whole history: " code { (c.what) } }
                                (cycle(c))
                                ul { @for s in &c.steps { li { "T" (s.from) " -" (s.kind) "-> T" (s.to) ": " (s.why) } } }
                            }
                        }
                        @if let Some((template, runs)) = &b.composer {
                            p { "Test Composer template " code { (template) } "; commands in its timeline:" }
                            ul { @for run in runs { li { (run) } } }
                        }
                        @if !b.after.is_empty() {
                            p { "After it, in the same timeline (consequences, not bugs of their own):" }
                            ul { @for later in &b.after { li { (point(later.at)) ": " (later.what) } } }
                        }
                        @if !record.console_after.is_empty() {
                            p.muted { "The console from the failure to the end of that timeline:" }
                            pre { (record.console_after.join("\n")) }
                        }
                    }
                }
                h2 { "Properties (" (r.assertions.len()) ")" }
                (properties(&r.assertions))
                @if !r.checkers.is_empty() {
                    h2 { "Checkers" }
                    div.scroll { table {
                        tr { th { "checker" } th { "model" } th { "history" } th { "timelines" } th { "valid" } th { "invalid" }
                             th { "undecided" } th { "malformed" } th { "operations" } th { "bug" } }
                        @for c in &r.checkers {
                            tr { td { code { (c.spec.name) } } td { (c.spec.model.name()) } td { (c.spec.history.as_deref().unwrap_or("(unnamed)")) }
                                 td { (c.timelines) } td { (c.valid) } td class=(if c.invalid > 0 { "bad" } else { "" }) { (c.invalid) }
                                 td { (c.undecided) } td class=(if c.malformed > 0 { "bad" } else { "" }) { (c.malformed) }
                                 td { (c.operations) } td { (c.bug.as_deref().unwrap_or("")) } }
                        }
                    } }
                }
                @if !r.faults.is_empty() {
                    h2 { "Faults" }
                    div.scroll { table {
                        tr { th { "fault" } th { "drawn faults that struck" } th { "touched, all timelines" } th { "" } }
                        @for f in &r.faults {
                            tr { td { code { (f.kind) } } td { (f.drawn) } td { (f.landed) }
                                 td class=(if f.landed > 0 { "good" } else { "bad" }) { (f.status) } }
                        }
                    } }
                }
                @if !r.buggify.is_empty() {
                    h2 { "Buggify" }
                    div.scroll { table {
                        tr { th { "site" } th { "timelines enabled" } th { "timelines reaching it" } th { "reached" } th { "fired" } }
                        @for (site, t) in &r.buggify {
                            tr { td { code { (site) } } td { (t.timelines_enabled) } td { (t.timelines) } td { (t.reached) } td { (t.fired) } }
                        }
                    } }
                }
                @if !r.composer.is_empty() {
                    h2 { "Test Composer" }
                    @for (template, n) in &r.composer.templates { p { "template " code { (template) } ": chosen in " (n) " timeline(s)" } }
                    div.scroll { table {
                        tr { th { "command" } th { "started" } th { "exit 0" } th { "failed" } th { "ended by a fault" } th { "stopped" } }
                        @for (c, t) in &r.composer.commands {
                            tr { td { code { (c) } } td { (t.started) } td { (t.succeeded) }
                                 td class=(if t.failed > 0 { "bad" } else { "" }) { (t.failed) } td { (t.by_fault) } td { (t.stopped) } }
                        }
                    } }
                    p { (crate::record::composer::HOW_COUNTED) }
                }
                @if r.series.len() > 1 {
                    h2 { "Over the branches" }
                    (charts(&r.series))
                }
                h2 { "Where the wall time went" }
                (phases(r))
                @if !r.events.is_empty() || !r.instrumentation.sdks.is_empty() || s.garbage.count > 0 || s.dropped.describe().is_some() {
                    h2 { "The guest's SDKs and events" }
                    @for sdk in &r.instrumentation.sdks { p { "SDK: " code { (sdk.to_string()) } } }
                    @for (name, n) in &r.events { p { "event " code { (name) } ": " (n) } }
                    @if s.garbage.count > 0 {
                        p.warn { (s.garbage.count) " malformed SDK message(s) ignored, for example:" }
                        @for g in &s.garbage.examples { pre { (g) } }
                    }
                    @if let Some(line) = s.dropped.describe() { p.warn { (line) } }
                }
            }
        }
    };
    page.into_string()
}

fn point(p: Point) -> String {
    format!("virtual time {:.6} s (event {})", p.vtime_ns as f64 / 1e9, p.events)
}

/// Each claim's verdict, why, and what landed while it was exercised.
/// Against `--baseline`: each bug's standing, and the verdicts that changed.
fn changes(c: &super::Changes) -> Markup {
    let class = |s: super::Status| match s {
        super::Status::New => "bad",
        super::Status::Ongoing => "warn",
        super::Status::Resolved => "good",
    };
    html! {
        h2 { "Against the baseline" }
        p { (c.describe()) ". Baseline: " code { (c.baseline) } ", started " (c.baseline_started) "." }
        @if !c.bugs.is_empty() {
            div.scroll { table {
                tr { th { "bug" } th { "status" } th { "summary" } }
                @for b in &c.bugs {
                    tr {
                        td { @if b.status == super::Status::Resolved { (b.id) } @else { a href=(format!("#{}", b.id)) { (b.id) } } }
                        td class=(class(b.status)) { (b.status.name()) }
                        td { (b.summary) }
                    }
                }
            } }
        }
        @if !c.properties.is_empty() {
            div.scroll { table {
                tr { th { "property" } th { "before" } th { "now" } }
                @for p in &c.properties {
                    tr {
                        td { (p.property) }
                        td { (p.before.as_deref().unwrap_or("(absent)")) }
                        td { (p.after.as_deref().unwrap_or("(absent)")) }
                    }
                }
            } }
        }
    }
}

fn claims(r: &Report) -> Markup {
    let class = |v: ClaimVerdict| match v {
        ClaimVerdict::Pass => "good",
        v if v.is_fail() => "bad",
        _ => "warn",
    };
    html! {
        h2 { "Claims (" (r.claims.len()) ")" }
        div.scroll { table {
            tr { th { "claim" } th { "verdict" } th { "blame" } th { "why" } th { "exercised" } th { "faults landed meanwhile" }
                 th { "operations checked" } }
            @for c in &r.claims {
                tr {
                    td { code { (c.id) } br; span.muted { (c.statement) } }
                    td class=(class(c.verdict)) { (c.verdict.name()) }
                    td { (c.blame.map_or("", Blame::name)) }
                    td { (c.reason) @for id in &c.bugs { " " a href=(format!("#{id}")) { (id) } } }
                    td { (c.evidence.exercised) " of " (c.evidence.timelines) " timelines" }
                    td { @for (kind, l) in &c.evidence.faults_landed {
                        (kind) ": " (l.faults) " in " (l.timelines) " timeline(s) " br;
                    } }
                    td { (c.evidence.operations) }
                }
            }
        } }
        p.muted { "Verdicts and blame follow docs/claims.md; findings.md beside this page has the evidence in full." }
    }
}

fn replayable_class(r: Replayable) -> &'static str {
    match r {
        Replayable::Verified => "good",
        Replayable::Expected => "warn",
        Replayable::No => "bad",
    }
}

fn verdict_class_of_label(label: &str) -> &'static str {
    match label {
        l if l == Verdict::Failed.label() => "bad",
        l if l == Verdict::Held.label() => "good",
        _ => "warn",
    }
}

/// Failed first, then never reached or never satisfied, then held.
fn properties(assertions: &[AssertionReport]) -> Markup {
    let rank = |v: Verdict| match v {
        Verdict::Failed => 0,
        Verdict::NeverReached => 1,
        Verdict::SometimesNeverSatisfied => 2,
        Verdict::Held => 3,
    };
    let mut sorted: Vec<&AssertionReport> = assertions.iter().collect();
    sorted.sort_by_key(|a| rank(a.verdict));
    html! {
        div.scroll { table {
            tr { th { "verdict" } th { "kind" } th { "property" } th { "hits" } th { "held" } th { "failed" } th { "bug" } }
            @for a in sorted {
                tr class=(match a.verdict { Verdict::Failed => "failed", Verdict::Held => "held", _ => "unexercised" }) {
                    td { (a.verdict.label()) }
                    td { (a.display) }
                    td {
                        (a.message)
                        @if !a.location.file.is_empty() {
                            br; span.muted { (a.location.file) @if a.location.begin_line > 0 { ":" (a.location.begin_line) } }
                        }
                    }
                    td { (a.hits) } td { (a.passes) } td { (a.failures) }
                    td { @if let Some(bug) = &a.bug { a href=(format!("#{bug}")) { (bug) } } }
                }
            }
        } }
    }
}

/// What the charts draw: a name, a unit, a colour, the value at a point.
type Line = (&'static str, &'static str, &'static str, fn(&SeriesPoint) -> u64);

const LINES: [Line; 5] = [
    ("Signals", "new behaviours found", "#1e8e3e", |p| p.signals),
    ("Snapshots", "snapshots taken", "#0a6fb5", |p| p.snapshots as u64),
    ("Coverage edges", "edges reached", "#8e44ad", |p| p.edges as u64),
    ("Features reached", "features (assertion states, guidance) reached", "#16a085", |p| p.incidence.observed),
    ("Chance the next timeline finds something new", "per mille (Good-Turing)", "#c0392b", |p| {
        (1000.0 * p.incidence.next_new().value).round() as u64
    }),
];

/// One chart per measure (each with its own scale) against the branch
/// number, all on the same branch axis, with a dashed red line where a new
/// bug was found.
fn charts(series: &[SeriesPoint]) -> Markup {
    let bug_at: Vec<u64> = series.windows(2).filter(|w| w[1].bugs > w[0].bugs).map(|w| w[1].branch).collect();
    html! {
        div.charts {
            @for line in &LINES {
                @if series.iter().map(line.3).max().unwrap_or(0) > 0 {
                    figure { figcaption { span style=(format!("color:{}", line.2)) { "━ " } (line.0) }
                             (plot(series, line, &bug_at)) }
                }
            }
        }
        p.muted { "x: branches run (timelines); y: the count so far. "
                  @if !bug_at.is_empty() { span style="color:#d33" { "┅" } " a new bug found at that branch." } }
    }
}

/// "Nice" tick values from 0 to at least `max`: steps of 1, 2 or 5 times a
/// power of ten, at most 6 of them.
fn ticks(max: u64) -> Vec<u64> {
    let max = max.max(1);
    let mut step = 1u64;
    'found: loop {
        for m in [1, 2, 5] {
            if max.div_ceil(step * m) <= 5 {
                step *= m;
                break 'found;
            }
        }
        step *= 10;
    }
    (0..=max.div_ceil(step)).map(|k| k * step).collect()
}

fn plot(series: &[SeriesPoint], (name, unit, colour, value): &Line, bug_at: &[u64]) -> Markup {
    const W: f64 = 400.0;
    const H: f64 = 220.0;
    const LEFT: f64 = 56.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 10.0;
    const BOTTOM: f64 = 44.0;
    let xs = ticks(series.last().map_or(1, |p| p.branch));
    let ys = ticks(series.iter().map(value).max().unwrap_or(0));
    let (x_max, y_max) = (*xs.last().expect("ticks") as f64, *ys.last().expect("ticks") as f64);
    let x = |b: u64| LEFT + (W - LEFT - RIGHT) * b as f64 / x_max;
    let y = |v: u64| H - BOTTOM - (H - BOTTOM - TOP) * v as f64 / y_max;
    let points: Vec<String> = series.iter().map(|p| format!("{:.1},{:.1}", x(p.branch), y(value(p)))).collect();
    html! {
        svg.plot viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(format!("{name} ({unit}) against branches")) {
            @for t in &ys {
                line x1=(LEFT) x2=(W - RIGHT) y1=(y(*t)) y2=(y(*t)) stroke="#e5e5e5" {}
                text x=(LEFT - 6.0) y=(y(*t) + 4.0) text-anchor="end" { (t) }
            }
            @for t in &xs {
                line x1=(x(*t)) x2=(x(*t)) y1=(H - BOTTOM) y2=(H - BOTTOM + 5.0) stroke="#333" {}
                text x=(x(*t)) y=(H - BOTTOM + 19.0) text-anchor="middle" { (t) }
            }
            line x1=(LEFT) x2=(W - RIGHT) y1=(H - BOTTOM) y2=(H - BOTTOM) stroke="#333" {}
            line x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(H - BOTTOM) stroke="#333" {}
            text x=(LEFT + (W - LEFT - RIGHT) / 2.0) y=(H - 6.0) text-anchor="middle" { "branch" }
            text transform=(format!("translate(14,{}) rotate(-90)", (H - BOTTOM + TOP) / 2.0)) text-anchor="middle" { (unit) }
            @for b in bug_at {
                line x1=(x(*b)) x2=(x(*b)) y1=(TOP) y2=(H - BOTTOM) stroke="#d33" stroke-dasharray="4 3" {}
            }
            polyline points=(points.join(" ")) fill="none" stroke=(colour) stroke-width="2" {}
        }
    }
}

/// A bug's likelihood over its timeline (`likelihood.rs`): the share of
/// fresh branches from each moment that the bug followed, with its 95%
/// interval, against virtual time; the failure's moment marked.
fn likelihood(l: &crate::record::bug::Likelihood, failure_ns: u64) -> Markup {
    const W: f64 = 400.0;
    const H: f64 = 200.0;
    const LEFT: f64 = 48.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 10.0;
    const BOTTOM: f64 = 44.0;
    let first = l.points.first().map_or(0, |p| p.vtime_ns);
    let span = failure_ns.saturating_sub(first).max(1) as f64;
    let x = |t: u64| LEFT + (W - LEFT - RIGHT) * (t.saturating_sub(first)) as f64 / span;
    let y = |p: f64| H - BOTTOM - (H - BOTTOM - TOP) * p;
    let secs = |t: u64| format!("{:.3}", t as f64 / 1e9);
    html! {
        @match &l.not_estimated {
            Some(why) => { p.muted { "Likelihood over its timeline: not estimated (" (why) ")." } }
            None => {
                p { "How likely the bug was, from moments of its timeline: of fresh branches from each (new seeds, the same horizon), \
                     the share the same bug followed, with its 95% interval. " (l.describe()) "." }
                figure.likelihood style="max-width:32em;margin:0" {
                    svg.plot viewBox=(format!("0 0 {W} {H}")) role="img" aria-label="the bug's likelihood against virtual time" {
                        @for t in [0.0, 0.5, 1.0] {
                            line x1=(LEFT) x2=(W - RIGHT) y1=(y(t)) y2=(y(t)) stroke="#e5e5e5" {}
                            text x=(LEFT - 6.0) y=(y(t) + 4.0) text-anchor="end" { (t) }
                        }
                        @for p in &l.points {
                            line x1=(x(p.vtime_ns)) x2=(x(p.vtime_ns)) y1=(H - BOTTOM) y2=(H - BOTTOM + 5.0) stroke="#333" {}
                        }
                        text x=(x(first)) y=(H - BOTTOM + 19.0) text-anchor="start" { (secs(first)) }
                        text x=(x(failure_ns)) y=(H - BOTTOM + 19.0) text-anchor="end" { (secs(failure_ns)) }
                        line x1=(LEFT) x2=(W - RIGHT) y1=(H - BOTTOM) y2=(H - BOTTOM) stroke="#333" {}
                        line x1=(LEFT) x2=(LEFT) y1=(TOP) y2=(H - BOTTOM) stroke="#333" {}
                        line x1=(x(failure_ns)) x2=(x(failure_ns)) y1=(TOP) y2=(H - BOTTOM) stroke="#d33" stroke-dasharray="4 3" {}
                        text x=(LEFT + (W - LEFT - RIGHT) / 2.0) y=(H - 6.0) text-anchor="middle" { "virtual time (s); dashed: the failure" }
                        text transform=(format!("translate(14,{}) rotate(-90)", (H - BOTTOM + TOP) / 2.0)) text-anchor="middle" { "P(bug follows)" }
                        @for p in &l.points {
                            line x1=(x(p.vtime_ns)) x2=(x(p.vtime_ns)) y1=(y(p.low)) y2=(y(p.high)) stroke="#0a6fb5" stroke-width="2" {}
                            circle cx=(x(p.vtime_ns)) cy=(y(p.share())) r="4" fill="#0a6fb5" {
                                title { (secs(p.vtime_ns)) " s: " (p.hits) "/" (p.runs) }
                            }
                        }
                    }
                }
                p.muted { (l.points.iter().map(|p| p.runs).sum::<u32>()) " runs, " (format!("{:.3}", l.vtime_ns as f64 / 1e9))
                          " s of virtual time, " (format!("{:.0}", l.wall_ms)) " ms of wall time (--likelihood-runs, --likelihood-points, --likelihood-budget)." }
            }
        }
    }
}

/// A bug's story (`story.rs`) as a table: when, who, what.
fn story(entries: &[crate::record::story::Entry]) -> Markup {
    use crate::record::story::What;
    html! {
        @if !entries.is_empty() {
            details open {
                summary { "What happened, in virtual time: the last output of each service and of the kernel, \
                           init's words, SDK messages, the faults as they struck and ended, and the failure" }
                div.scroll { table.story {
                    tr { th.num { "time (s)" } th { "who" } th { "what" } }
                    @for e in entries {
                        tr class=(match e.what { What::Fault => "warn", What::Failure => "bad", _ => "" }) {
                            td.num { (format!("{:.6}", e.vtime_ns as f64 / 1e9)) } td { (e.source) } td { (e.text) }
                        }
                    }
                } }
            }
        }
    }
}

/// The header: which hvsim, the command, the host, when, how long.
fn header(r: &Report) -> Markup {
    let (i, s) = (&r.invocation, &r.summary);
    html! {
        dl.head {
            dt { "hvsim" } dd { (i.hvsim_version) }
            dt { "command" } dd { code { (i.command) } }
            dt { "host" } dd { (i.host) }
            dt { "started" } dd { (i.started) }
            dt { "wall time" } dd { (format!("{:.1} s", s.wall_ms as f64 / 1e3)) }
            dt { "virtual time" } dd { (format!("{:.3} s", s.vtime_ns as f64 / 1e9)) " over every branch" }
            dt { "first bug" } dd {
                @match s.first_bug {
                    Some((branch, ms)) => { (format!("{:.1} s", ms as f64 / 1e3)) " after the start, in branch " (branch) }
                    None => { "none found" }
                }
            }
        }
    }
}

fn phases(r: &Report) -> Markup {
    let (p, s) = (&r.summary.phases, &r.summary);
    let mut parts = vec![
        ("start", p.start_ms),
        ("setup", p.setup_ms),
        ("branches", p.branches_ms),
        ("restores", p.restore_ms),
        ("snapshots", p.snapshot_ms),
        ("bug re-executions", p.reexecution_ms),
        ("likelihood estimates", p.likelihood_ms),
    ];
    let accounted: f64 = parts.iter().map(|(_, ms)| ms).sum();
    // One worker: the rest of the wall time is the explorer's own work.
    if s.workers == 1 {
        parts.push(("the explorer's own work", (s.wall_ms as f64 - accounted).max(0.0)));
    }
    let total = parts.iter().map(|(_, ms)| ms).sum::<f64>().max(1e-9);
    html! {
        div.bar {
            @for (i, (name, ms)) in parts.iter().enumerate() {
                div style=(format!("width:{:.2}%;background:{}", 100.0 * ms / total, PHASE_COLOURS[i]))
                    title=(format!("{name}: {ms:.1} ms")) {}
            }
        }
        p.muted {
            @for (i, (name, ms)) in parts.iter().enumerate() {
                span style=(format!("color:{}", PHASE_COLOURS[i])) { "■ " } (name) " " (format!("{ms:.1}")) " ms  "
            }
            @if s.workers == 1 {
                "(of " (s.wall_ms) " ms of wall time; the exploration waited " (format!("{:.1}", p.reexecution_wait_ms))
                " ms for re-executions)"
            } @else {
                "(branches, restores, snapshots and re-executions are summed over the " (s.workers)
                " workers, so they add up to more than the " (s.wall_ms) " ms of wall time; the exploration waited "
                (format!("{:.1}", p.reexecution_wait_ms)) " ms for re-executions)"
            }
            " Telling bugs' stories took " (format!("{:.1}", p.story_ms)) " ms of the branches' time."
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hvsim_guest_image::world::World;

    use crate::record::assertions::Assertions;
    use crate::record::bug::{BugKind, BugRecord, Fingerprint, Later};
    use crate::record::exploration::{Ending, Exploration, SeriesPoint};
    use crate::record::sdk::{self, SdkMessage};
    use crate::record::timeline::{Point, Timeline};
    use crate::Target;

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(super::ticks(0), vec![0, 1]);
        assert_eq!(super::ticks(7), vec![0, 2, 4, 6, 8]);
        assert_eq!(super::ticks(500), vec![0, 100, 200, 300, 400, 500]);
        assert_eq!(super::ticks(1770), vec![0, 500, 1000, 1500, 2000]);
        for max in 1..3000 {
            let t = super::ticks(max);
            assert!(*t.last().unwrap() >= max && t.len() <= 6 && t.len() >= 2, "{max}: {t:?}");
        }
    }

    /// Markup a guest could try to slip into the page.
    const HOSTILE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>";

    #[test]
    fn what_the_guest_wrote_cannot_add_markup() {
        let escaped = HOSTILE.replace('<', "\\u003c");
        let line = format!(
            r#"{{"antithesis_assert":{{"id":"{escaped}","message":"{escaped}","condition":false,"hit":true,
               "must_hit":true,"assert_type":"always","display_type":"Always","location":{{"file":"{escaped}"}},"details":null}}}}"#
        );
        let SdkMessage::Assert(a) = sdk::parse(line.replace('\n', "").as_bytes()) else { panic!("an assertion") };
        let mut assertions = Assertions::default();
        assert!(assertions.observe(&a).failed);
        let kind = BugKind::from_assertion(&a);
        let id = kind.id();
        assertions.by_id.get_mut(&a.id).expect("observed").bug = Some(id.clone());
        let at = Point { events: 10, vtime_ns: 1000 };
        let mut bug = BugRecord::new(
            kind,
            at,
            Timeline::at(at),
            Target::Raw { guest: HOSTILE.into() },
            1,
            1,
            World::default(),
            Fingerprint { trace_hash: "t".into(), memory_hash: "m".into() },
            3,
        );
        bug.console_tail = vec![format!("</pre>{HOSTILE}")];
        bug.after = vec![Later { at, what: HOSTILE.into() }];
        bug.console_after = vec![format!("</pre>{HOSTILE}")];
        let point = |branch, bugs| SeriesPoint {
            branch,
            wall_ms: 0,
            snapshots: 1,
            signals: 1,
            bugs,
            new_edges: 0,
            edges: 0,
            incidence: Default::default(),
        };
        let exp = Exploration {
            assertions,
            bugs: vec![bug],
            events: BTreeMap::from([(HOSTILE.to_owned(), 1)]),
            garbage: crate::record::exploration::Garbage { count: 1, examples: vec![HOSTILE.into()] },
            series: vec![point(1, 0), point(2, 1)],
            discovery: Default::default(),
            first_bug: Some((2, 1)),
            ending: Ending::Interrupted { reason: 2 },
            ..Exploration::example(Target::Raw { guest: HOSTILE.into() }, at)
        };
        let dir = tempfile::tempdir().unwrap();
        let run = crate::output::report::RunDir::create(dir.path(), "hostile").unwrap();
        run.write(&exp).unwrap();
        // What was written matches its schema (`schema.rs`).
        let read = |name: &str| -> serde_json::Value {
            serde_json::from_str(&std::fs::read_to_string(run.path().join(name)).unwrap()).unwrap()
        };
        crate::record::document::check::<crate::output::report::Report>(&read("report.json")).unwrap();
        crate::record::document::check::<crate::output::report::Findings>(&read("findings.json")).unwrap();
        crate::record::document::check::<BugRecord>(&read(&format!("bugs/{id}.json"))).unwrap();
        let page = std::fs::read_to_string(run.path().join("report.html")).unwrap();
        for tag in ["<script", "<img"] {
            assert!(!page.contains(tag), "{tag} reached the page:\n{page}");
        }
        assert_eq!(page.matches("<pre>").count(), page.matches("</pre>").count(), "no element closed early");
        for text in ["&lt;script&gt;alert(1)&lt;/script&gt;", "&lt;/pre&gt;"] {
            assert!(page.contains(text), "the text shows, escaped:\n{page}");
        }
        // The bug is there, linked from its property, with its replay.
        let (div, link) = (format!(r#"<div class="bug" id="{id}">"#), format!(r##"href="#{id}""##));
        assert!(page.contains(&div) && page.contains(&link), "{page}");
        assert!(page.contains("hvsim replay ") && page.contains("interrupted (SIGINT)"), "{page}");
        assert!(page.contains("UNCONFIRMED: re-executed 0 of 3 times"), "{page}");
    }
}

/// A dependency cycle drawn: its transactions around a circle, each edge
/// an arrow named by its kind (read-write edges, the anti-dependencies
/// that separate isolation levels, in red).
fn cycle(c: &Cycle) -> Markup {
    const SIZE: f64 = 320.0;
    let n = c.steps.len().max(1) as f64;
    let r = if c.steps.len() > 1 { 110.0 } else { 0.0 };
    // Node i (the i-th step's `from`) on the circle, the first at the top.
    let at = |i: usize| {
        let a = std::f64::consts::TAU * i as f64 / n - std::f64::consts::FRAC_PI_2;
        (SIZE / 2.0 + r * a.cos(), SIZE / 2.0 + r * a.sin())
    };
    let label = format!("{}: {}", c.anomaly, c.what);
    html! {
        svg.cycle viewBox=(format!("0 0 {SIZE} {SIZE}")) role="img" aria-label=(label) {
            defs { marker #arrow viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                path d="M 0 0 L 10 5 L 0 10 z" fill="#555" {}
            } }
            @for (i, s) in c.steps.iter().enumerate() {
                @let ((x1, y1), (x2, y2)) = (at(i), at((i + 1) % c.steps.len()));
                @let (dx, dy) = (x2 - x1, y2 - y1);
                @let len = dx.hypot(dy).max(1.0);
                // Each edge bends to its left, so the two edges of a
                // two-transaction cycle are two arcs, not one line.
                @let (cx, cy) = ((x1 + x2) / 2.0 + 40.0 * dy / len, (y1 + y2) / 2.0 - 40.0 * dx / len);
                @let unit = |x: f64, y: f64| { let l = x.hypot(y).max(1.0); (x / l, y / l) };
                @let ((sx, sy), (ex, ey)) = (unit(cx - x1, cy - y1), unit(x2 - cx, y2 - cy));
                @let colour = if s.kind == "rw" { "#d33" } else { "#555" };
                path d=(format!("M {:.1} {:.1} Q {cx:.1} {cy:.1} {:.1} {:.1}", x1 + 22.0 * sx, y1 + 22.0 * sy, x2 - 24.0 * ex, y2 - 24.0 * ey))
                    fill="none" stroke=(colour) stroke-width="2" marker-end="url(#arrow)" {}
                // The label beside the curve's middle.
                text x=(format!("{:.1}", (x1 + x2) / 4.0 + cx / 2.0 + 14.0 * dy / len))
                    y=(format!("{:.1}", (y1 + y2) / 4.0 + cy / 2.0 - 14.0 * dx / len + 4.0)) text-anchor="middle" fill=(colour) { (s.kind) }
            }
            @for (i, s) in c.steps.iter().enumerate() {
                @let (x, y) = at(i);
                circle cx=(format!("{x:.1}")) cy=(format!("{y:.1}")) r="22" fill="#fff" stroke="#333" stroke-width="1.5" {}
                text x=(format!("{x:.1}")) y=(format!("{:.1}", y + 5.0)) text-anchor="middle" { "T" (s.from) }
            }
        }
    }
}

#[cfg(test)]
mod cycle_tests {
    use super::*;
    use crate::output::report::CycleStep;

    /// Each transaction of a cycle is drawn once, each edge once, read-write
    /// edges apart; what the guest wrote is escaped.
    #[test]
    fn a_cycle_is_drawn_with_its_transactions_and_edges() {
        let step = |from, to, kind: &str| CycleStep { from, to, kind: kind.into(), why: "<b>".into() };
        let c = Cycle {
            anomaly: "G-single".into(),
            what: "T3 -wr-> T7 -rw-> T3".into(),
            steps: vec![step(3, 7, "wr"), step(7, 3, "rw")],
        };
        let svg = cycle(&c).into_string();
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        assert_eq!(svg.matches("fill=\"none\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("stroke=\"#d33\"").count(), 1, "{svg}");
        assert!(svg.contains(">T3<") && svg.contains(">T7<"), "{svg}");
        assert!(svg.contains("aria-label=\"G-single: T3 -wr-&gt; T7 -rw-&gt; T3\""), "{svg}");
    }
}
