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

use super::{AssertionReport, Report};
use crate::assertions::Verdict;
use crate::engine::{Ending, Exploration, SeriesPoint};
use crate::timeline::Point;
use hvsim_vmm::summary::Replayable;

const STYLE: &str = "
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
.chips span { display: inline-block; margin: .2em .4em .2em 0; padding: .1em .6em; border-radius: 1em; background: #eee; }
.bad { background: #fde2e1 !important; color: #a1130c; } .warn { background: #fff1d0 !important; color: #7a5200; }
.good { background: #dff5e3 !important; color: #16622a; } .muted { color: #6e6e73; }
.bug { border: 1px solid #f0b4b0; border-left: 5px solid #d33; border-radius: 4px; padding: .5em 1em; margin: 1em 0; }
pre { background: #f6f6f8; padding: .6em; overflow-x: auto; } code { font-family: ui-monospace, monospace; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: .25em .6em; border-bottom: 1px solid #eee; }
tr.failed td:first-child { color: #a1130c; font-weight: 600; } tr.unexercised td:first-child { color: #7a5200; font-weight: 600; }
.bar { display: flex; height: 1.4em; border-radius: 3px; overflow: hidden; } .bar div { min-width: 2px; }
svg text { font-size: 11px; fill: #6e6e73; }
";

/// Colours of the phases bar (the last also marks bugs on the chart).
const PHASE_COLOURS: [&str; 6] = ["#8e8e93", "#5ac8fa", "#34c759", "#ff9500", "#af52de", "#ff3b30"];

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
                div.chips {
                    span class=(match s.ending { Ending::Finished => "", Ending::Running => "warn", _ => "bad" }) {
                        (s.ending.describe())
                    }
                    span { "master seed " (s.seed) }
                    span { (s.branches) " branches: " (s.span) }
                    span { (s.timelines.ended) " timelines ran to the end, " (s.timelines.at_limit) " to their limit" }
                    span { "snapshot tree " (s.tree.peak_bytes >> 20) " MiB at most" @if s.tree.evicted > 0 { ", " (s.tree.evicted) " evicted" } }
                    span { (s.snapshots) " snapshots" }
                    span { (s.signals) " signals" }
                    @if s.coverage_edges > 0 { span { (s.coverage_edges) " coverage edges" } }
                    span { (format!("{:.1}", s.wall_ms as f64 / 1000.0)) " s, " (s.workers) " worker(s), rounds of " (s.batch) }
                    span class=(if s.bugs > 0 { "bad" } else { "good" }) { (s.bugs) " bug(s)" }
                    @for (label, n) in &s.verdicts {
                        span class=(verdict_class_of_label(label)) { (n) " " (label) }
                    }
                }
                p.muted {
                    "Root: " (if s.setup_complete { "setup complete" } else { "setup never reported; taken at the limit" })
                    " at " (point(exp.root.point)) ". Target: " code { (serde_json::to_string(&exp.target).unwrap_or_default()) }
                }
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
                        }
                        @for why in &b.replayable_reasons { p.muted { (why) } }
                        p { "At " (point(b.at)) ". Replay it:" }
                        pre { code { (b.replay_command) } }
                        details {
                            summary { "Timeline: the root, then " (record.timeline.segments.len()) " segment(s)" }
                            table {
                                tr { th { "from" } th { "seed" } th { "until" } }
                                tr { td { "boot" } td { (record.master_seed) } td { (point(record.timeline.root)) } }
                                @for seg in &record.timeline.segments {
                                    tr { td { "snapshot" } td { (seg.seed) } td { (point(seg.until)) } }
                                }
                            }
                        }
                        @if !b.console_tail.is_empty() {
                            p.muted { "The console's last lines:" }
                            pre { (b.console_tail.join("\n")) }
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
                    table {
                        tr { th { "checker" } th { "model" } th { "history" } th { "timelines" } th { "valid" } th { "invalid" }
                             th { "undecided" } th { "malformed" } th { "operations" } th { "bug" } }
                        @for c in &r.checkers {
                            tr { td { code { (c.spec.name) } } td { (c.spec.model.name()) } td { (c.spec.history.as_deref().unwrap_or("(unnamed)")) }
                                 td { (c.timelines) } td { (c.valid) } td class=(if c.invalid > 0 { "bad" } else { "" }) { (c.invalid) }
                                 td { (c.undecided) } td class=(if c.malformed > 0 { "bad" } else { "" }) { (c.malformed) }
                                 td { (c.operations) } td { (c.bug.as_deref().unwrap_or("")) } }
                        }
                    }
                }
                @if !r.faults.is_empty() {
                    h2 { "Faults" }
                    table {
                        tr { th { "fault" } th { "drawn faults that struck" } th { "touched, all timelines" } th { "" } }
                        @for f in &r.faults {
                            tr { td { code { (f.kind) } } td { (f.drawn) } td { (f.landed) }
                                 td class=(if f.landed > 0 { "good" } else { "bad" }) { (f.status) } }
                        }
                    }
                }
                @if !r.buggify.is_empty() {
                    h2 { "Buggify" }
                    table {
                        tr { th { "site" } th { "timelines enabled" } th { "timelines reaching it" } th { "reached" } th { "fired" } }
                        @for (site, t) in &r.buggify {
                            tr { td { code { (site) } } td { (t.timelines_enabled) } td { (t.timelines) } td { (t.reached) } td { (t.fired) } }
                        }
                    }
                }
                @if !r.composer.is_empty() {
                    h2 { "Test Composer" }
                    @for (template, n) in &r.composer.templates { p { "template " code { (template) } ": chosen in " (n) " timeline(s)" } }
                    table {
                        tr { th { "command" } th { "started" } th { "exit 0" } th { "failed" } th { "ended by a fault" } th { "stopped" } }
                        @for (c, t) in &r.composer.commands {
                            tr { td { code { (c) } } td { (t.started) } td { (t.succeeded) }
                                 td class=(if t.failed > 0 { "bad" } else { "" }) { (t.failed) } td { (t.by_fault) } td { (t.stopped) } }
                        }
                    }
                    p { (crate::composer::HOW_COUNTED) }
                }
                @if r.series.len() > 1 {
                    h2 { "Over the branches" }
                    (chart(&r.series))
                }
                h2 { "Where the wall time went" }
                (phases(r))
                @if !r.events.is_empty() || !r.instrumentation.sdks.is_empty() || s.garbage.count > 0 {
                    h2 { "The guest's SDKs and events" }
                    @for sdk in &r.instrumentation.sdks { p { "SDK: " code { (sdk.to_string()) } } }
                    @for (name, n) in &r.events { p { "event " code { (name) } ": " (n) } }
                    @if s.garbage.count > 0 {
                        p.warn { (s.garbage.count) " malformed SDK message(s) ignored, for example:" }
                        @for g in &s.garbage.examples { pre { (g) } }
                    }
                }
            }
        }
    };
    page.into_string()
}

fn point(p: Point) -> String {
    format!("virtual time {:.6} s (event {})", p.vtime_ns as f64 / 1e9, p.events)
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
        table {
            tr { th { "verdict" } th { "kind" } th { "property" } th { "hits" } th { "held" } th { "failed" } th { "bug" } }
            @for a in sorted {
                tr class=(match a.verdict { Verdict::Failed => "failed", Verdict::Held => "held", _ => "unexercised" }) {
                    td { (a.verdict.label()) }
                    td { (a.display) }
                    td {
                        (a.message)
                        @if !a.location.file.is_empty() {
                            br; span.muted { (a.location.file) ":" (a.location.begin_line) }
                        }
                    }
                    td { (a.hits) } td { (a.passes) } td { (a.failures) }
                    td { @if let Some(bug) = &a.bug { a href=(format!("#{bug}")) { (bug) } } }
                }
            }
        }
    }
}

/// What the chart draws: a name, a colour, the value at a point.
type Line = (&'static str, &'static str, fn(&SeriesPoint) -> u64);

const LINES: [Line; 3] = [
    ("signals", "#34c759", |p| p.signals),
    ("snapshots", "#5ac8fa", |p| p.snapshots as u64),
    ("coverage edges", "#af52de", |p| p.edges as u64),
];

/// Signals, snapshots and coverage edges against the branch number, each
/// scaled to its own maximum, with a red line where the bug count rose.
fn chart(series: &[SeriesPoint]) -> Markup {
    const W: f64 = 800.0;
    const H: f64 = 200.0;
    let last = series.last().map_or(1, |p| p.branch.max(1)) as f64;
    let x = |branch: u64| 40.0 + (W - 50.0) * branch as f64 / last;
    let points = |value: fn(&SeriesPoint) -> u64, max: u64| {
        let y = |p: &SeriesPoint| H - 20.0 - (H - 40.0) * value(p) as f64 / max as f64;
        series.iter().map(|p| format!("{:.1},{:.1}", x(p.branch), y(p))).collect::<Vec<_>>().join(" ")
    };
    let bug_at: Vec<u64> = series.windows(2).filter(|w| w[1].bugs > w[0].bugs).map(|w| w[1].branch).collect();
    html! {
        svg width=(W) height=(H) viewBox=(format!("0 0 {W} {H}")) role="img" {
            line x1="40" y1=(H - 20.0) x2=(W - 10.0) y2=(H - 20.0) stroke="#ccc" {}
            text x="40" y=(H - 5.0) { "branch 0" }
            text x=(W - 90.0) y=(H - 5.0) { "branch " (last) }
            @for b in &bug_at {
                line x1=(x(*b)) y1="15" x2=(x(*b)) y2=(H - 20.0) stroke=(PHASE_COLOURS[5]) stroke-dasharray="4 3" {}
            }
            @for (i, (name, colour, value)) in LINES.iter().enumerate() {
                @let max = series.iter().map(*value).max().unwrap_or(0);
                @if max > 0 {
                    polyline points=(points(*value, max)) fill="none" stroke=(colour) stroke-width="2" {}
                    text x=(50.0 + 170.0 * i as f64) y="12" style=(format!("fill:{colour}")) { (name) " (up to " (max) ")" }
                }
            }
        }
        p.muted { "Each line is scaled to its own maximum; dashed red: a new bug." }
    }
}

fn phases(r: &Report) -> Markup {
    let p = &r.summary.phases;
    let parts = [
        ("start", p.start_ms),
        ("setup", p.setup_ms),
        ("branches", p.branches_ms),
        ("restores", p.restore_ms),
        ("snapshots", p.snapshot_ms),
        ("bug re-executions", p.reexecution_ms),
    ];
    let total = parts.iter().map(|(_, ms)| ms).sum::<u64>().max(1) as f64;
    html! {
        div.bar {
            @for (i, (name, ms)) in parts.iter().enumerate() {
                div style=(format!("width:{:.2}%;background:{}", 100.0 * *ms as f64 / total, PHASE_COLOURS[i]))
                    title=(format!("{name}: {ms} ms")) {}
            }
        }
        p.muted {
            @for (i, (name, ms)) in parts.iter().enumerate() {
                span style=(format!("color:{}", PHASE_COLOURS[i])) { "■ " } (name) " " (ms) " ms  "
            }
            "(branches, restores, snapshots and re-executions are summed over the workers; the exploration waited "
            (p.reexecution_wait_ms) " ms for re-executions)"
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hvsim_guest_image::world::World;

    use crate::assertions::Assertions;
    use crate::bug::{BugKind, BugRecord, Fingerprint, Later};
    use crate::engine::{Ending, Exploration, RootInfo, SeriesPoint};
    use crate::sdk::{self, SdkMessage};
    use crate::timeline::{Point, Timeline};
    use crate::Target;

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
            Timeline { root: at, segments: vec![] },
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
        let point =
            |branch, bugs| SeriesPoint { branch, wall_ms: 0, snapshots: 1, signals: 1, bugs, new_edges: 0, edges: 0 };
        let exp = Exploration {
            target: Target::Raw { guest: HOSTILE.into() },
            seed: 1,
            budget: Default::default(),
            span: crate::branch::Span::Slice(hvsim_vmm::Vtime(5_000_000)),
            snapshot_every_ns: None,
            timelines: Default::default(),
            tree: Default::default(),
            branch_from_snapshots: true,
            policy: Default::default(),
            draws: Default::default(),
            batch: 1,
            workers: 1,
            root: RootInfo { point: at, setup_complete: true, ended: None, restored: false },
            branches: 2,
            snapshots: 1,
            signals: 1,
            wall_ms: 1,
            vtime_ns: 1,
            assertions,
            bugs: vec![bug],
            events: BTreeMap::from([(HOSTILE.to_owned(), 1)]),
            garbage: crate::engine::Garbage { count: 1, examples: vec![HOSTILE.into()] },
            faults: Default::default(),
            composer: Default::default(),
            checkers: Vec::new(),
            coverage_edges: 0,
            instrumentation: Default::default(),
            series: vec![point(1, 0), point(2, 1)],
            first_bug: Some((2, 1)),
            phases: Default::default(),
            ending: Ending::Interrupted { reason: 2 },
            guest_profile: None,
        };
        let dir = tempfile::tempdir().unwrap();
        let run = crate::report::RunDir::create(dir.path(), "hostile").unwrap();
        run.write(&exp).unwrap();
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
