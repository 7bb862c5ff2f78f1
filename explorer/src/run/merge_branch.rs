//! A branch a worker ran, added to the exploration: judged against
//! everything merged before it, its bugs filed, what it reached given to
//! the schedule, and its new snapshots made nodes to branch from. Branches
//! merge in order, so the exploration never depends on the workers.

use hvsim_snapshot::Delta;

use crate::record::bug::{BugKind, Later};
use crate::record::exploration::SeriesPoint;
use crate::record::timeline::{is_crash, Segment, Timeline};
use crate::run::bandit::Bandit;
use crate::run::branch::{Armed, BranchJob, BranchRun, DrawStop};
use crate::run::bugs::{BugContext, Bugs, Filed};
use crate::run::knowledge::Knowledge;
use crate::run::schedule::{NewNode, Schedule};
use crate::run::state::{ms, ms_f, State};
use crate::run::watch::BranchProgress;
use crate::run::workers::Shared;

/// Adds a branch a worker ran to the exploration, with its progress.
pub(crate) fn merge_run(run: BranchRun, state: &mut State, shared: &Shared, cx: &BugContext) -> BranchProgress {
    state.phases.restore_ms += ms_f(run.restore);
    state.phases.snapshot_ms += ms_f(run.snapshot);
    state.phases.branches_ms += ms_f(run.run);
    state.phases.story_ms += ms_f(run.story_took());
    state.vtime_total += run.vtime_ns;
    // A revisit re-runs a prefix of a merged timeline: it is not a timeline
    // of its own for what counts timelines (`revisit.rs`).
    let revisiting = run.job.revisit.is_some();
    if revisiting {
        state.schedule.draws.revisits += 1;
    } else {
        state.faults.merge(&run.faults);
        for c in &run.checked {
            let tally = state.checkers.iter_mut().find(|t| t.spec.name == c.checker).expect("a configured checker");
            tally.add(c);
        }
        assert_eq!(run.claims.claims.len(), state.claims.len(), "every claim is observed in every timeline");
        for (tally, e) in state.claims.iter_mut().zip(&run.claims.claims) {
            tally.add(e, run.job.branch);
        }
        state.harness.add(&run.claims);
        if run.end.is_some() {
            state.timelines.ended += 1;
        } else {
            state.timelines.at_limit += 1;
        }
    }
    if let Some(r) = run.revisit.clone().filter(|_| !revisiting) {
        tracing::debug!(branch = run.job.branch, draw = r.draw, "a revisit asked for");
        state.revisits.push_back(BranchJob { revisit: Some(r), ..run.job.clone() });
    }
    let branch = run.job.branch;
    let new_edges = merge(run, &mut state.known, &mut state.bugs, &mut state.schedule, &mut state.bandit, shared, cx);
    for tally in state.checkers.iter_mut().filter(|t| t.bug.is_none()) {
        tally.bug = state.bugs.records.iter().find(|b| b.bug.checker() == Some(&tally.spec.name)).map(|b| b.id.clone());
    }
    if state.first_bug.is_none() && !state.bugs.records.is_empty() {
        // Time to find it, not to check it.
        let found = ms(state.started.elapsed()).saturating_sub(state.phases.reexecution_wait_ms as u64);
        state.first_bug = Some((branch, found));
    }
    let p = BranchProgress {
        branches: state.branches,
        timelines: state.timelines,
        unevaluated: state.known.assertions.by_id.values().filter(|a| a.unevaluated()).count(),
        unevaluated_composer: state
            .known
            .assertions
            .by_id
            .values()
            .filter(|a| a.unevaluated() && a.is_composer_check())
            .count(),
        snapshots: state.schedule.len(),
        signals: state.known.signals.total,
        bugs: state.bugs.records.len(),
        elapsed: state.started.elapsed(),
        phases: state.phases,
        incidence: state.incidence(),
    };
    state.series.push(SeriesPoint {
        branch,
        wall_ms: ms(p.elapsed),
        snapshots: p.snapshots,
        signals: p.signals,
        bugs: p.bugs,
        new_edges,
        edges: state.known.signals.coverage.edges(),
        incidence: p.incidence,
    });
    p
}

/// Adds a branch a worker ran to the exploration: its coverage and
/// messages (judged against everything merged before it), its first
/// failure as a bug and what failed after it as that bug's consequences,
/// what it reached to the schedule, and each snapshot before that failure
/// that is still new (or a draw point still wanted) as a node to branch
/// from (with the snapshots before it in the branch, which its pages build
/// on), and to the fault rules' bandit whether its line's rules found
/// anything new. Returns the coverage edges it reached first.
fn merge(
    run: BranchRun,
    known: &mut Knowledge,
    bugs: &mut Bugs,
    schedule: &mut Schedule,
    bandit: &mut Bandit,
    shared: &Shared,
    cx: &BugContext,
) -> u64 {
    /// A stop as the merge judged it.
    struct Judged {
        timeline: Timeline,
        new_here: u64,
        features: Vec<String>,
        /// Something new here was progress (new edges, or a feature that
        /// is not a sometimes-type assertion's first failing evaluation).
        progress: bool,
        /// A feature new here was progress: the timeline went deeper.
        deeper: bool,
        watermarks: Vec<String>,
        snapshot: Option<Delta>,
        interval: bool,
        draw: Option<DrawStop>,
        /// How many of the branch's `reached` it had reached here.
        reached: usize,
        novel_by: Option<u32>,
    }
    let BranchJob { branch, seed, tree_id, base, draw, winddown, line, revisit, .. } = run.job;
    let base = base.winding_down(winddown).of_line(line);
    for (command, ns) in &run.composer_took {
        known.composer_took(command, *ns);
    }
    // The timeline's segments so far: the branch's own, and one more from
    // every draw it steered (`steer.rs`), the last still open.
    let mut closed: Vec<Segment> = Vec::new();
    let mut open = (seed, draw);
    let timeline_to = |closed: &[Segment], (seed, draw): (u64, Option<u64>), until| {
        let mut t = base.clone();
        t.segments.extend_from_slice(closed);
        t.segments.push(Segment { seed, draw, until });
        t
    };
    let mut new_edges = 0;
    // The branch's first failure, and the stop it showed at.
    let mut first: Option<(Filed, usize)> = None;
    // Every feature the branch reached, and (by stop) the assertions it
    // reached without satisfying.
    let mut reached = Vec::new();
    let mut approaches: Vec<(usize, String)> = Vec::new();
    let mut stops = Vec::with_capacity(run.stops.len());
    for (i, stop) in run.stops.into_iter().enumerate() {
        let timeline = timeline_to(&closed, open, stop.at);
        if let Some(steer) = stop.steer {
            closed.push(Segment { seed: open.0, draw: open.1, until: stop.at });
            open = (steer.seed, Some(steer.value));
            schedule.draws.steered += 1;
        }
        let covered = known.merge_coverage(&stop.coverage);
        new_edges += covered;
        let mut judged = Judged {
            timeline,
            new_here: covered,
            features: Vec::new(),
            progress: covered > 0,
            deeper: false,
            watermarks: Vec::new(),
            snapshot: stop.snapshot,
            interval: stop.interval,
            draw: stop.draw,
            reached: 0,
            novel_by: stop.novel_by,
        };
        let mut reached_here = Vec::new();
        for msg in &stop.messages {
            let o = known.process(msg);
            judged.new_here += o.new_signals;
            new_edges += o.new_edges;
            judged.progress |= o.progress;
            if let Some(r) = o.reached {
                if o.new_signals > 0 {
                    judged.deeper |= o.progress;
                    judged.features.push(r.clone());
                }
                if o.onward {
                    reached_here.push(r.clone());
                }
                reached.push(r);
            }
            approaches.extend(o.approached.map(|a| (i, a)));
            judged.watermarks.extend(o.watermark);
            let Some(kind) = o.bug else { continue };
            match first {
                None => {
                    // The worker judged the same message the same way.
                    let failure = stop.failure.as_ref().expect("the worker fingerprints a branch's first failure");
                    let timeline = judged.timeline.clone();
                    first = Some((bugs.record(kind, timeline, failure, &mut known.assertions, cx, branch), i));
                }
                Some((filed, _)) => {
                    let later = Later { at: stop.at, what: kind.describe() };
                    bugs.later(filed, &kind, later, &mut known.assertions);
                }
            }
        }
        judged.reached = reached.len();
        if let Some(way) = &stop.way {
            schedule.learn_leads(&reached_here, way);
        }
        if judged.new_here > 0 && first.is_none() {
            tracing::debug!(branch, signals = judged.new_here, "something new");
            // A revisit takes snapshots at its draw only; what it finds new
            // (a timeline it did not repeat exactly) is merged all the same.
            assert!(
                judged.snapshot.is_some() || !shared.rules.snapshots || revisit.is_some(),
                "branch {branch}: new to the exploration but not to the branch"
            );
        }
        stops.push(judged);
    }
    new_edges += known.merge_coverage(&run.end_coverage);
    if let Some(end) = run.end.filter(is_crash) {
        let kind = BugKind::Crash { end };
        match (first, &run.crash) {
            (None, Some(failure)) => {
                let timeline = timeline_to(&closed, open, failure.at);
                let filed = bugs.record(kind, timeline, failure, &mut known.assertions, cx, branch);
                first = Some((filed, stops.len()));
            }
            (Some((filed, _)), _) => {
                let later = Later { at: run.end_at, what: kind.describe() };
                bugs.later(filed, &kind, later, &mut known.assertions);
            }
            (None, None) => unreachable!("the worker fingerprints a crash that is the branch's first failure"),
        }
    }
    if let Some((violation, failure)) = run.violation {
        let kind = BugKind::Checker { checker: violation.spec.clone(), summary: violation.judgement.summary.clone() };
        match (first, failure) {
            (None, Some(failure)) => {
                let timeline = timeline_to(&closed, open, failure.at);
                let filed = bugs.record(kind, timeline, &failure, &mut known.assertions, cx, branch);
                if filed.new {
                    bugs.records[filed.index].history = Some(violation.finding());
                }
                first = Some((filed, stops.len()));
            }
            (Some((filed, _)), _) => {
                let later = Later { at: run.end_at, what: kind.describe() };
                bugs.later(filed, &kind, later, &mut known.assertions);
            }
            (None, None) => unreachable!("the worker fingerprints a violation that is the branch's first failure"),
        }
    }
    if let Some((filed, _)) = first.filter(|(f, _)| f.new) {
        bugs.records[filed.index].console_after = run.console_after;
    }
    let fruitful = new_edges > 0 || stops.iter().any(|s| s.new_here > 0) || first.is_some_and(|(f, _)| f.new);
    if revisit.is_none() {
        let all_approached: Vec<String> = approaches.iter().map(|(_, a)| a.clone()).collect();
        schedule.branch_merged(tree_id, &reached, &all_approached, fruitful);
        schedule.give_back(tree_id, &run.unused_draws);
        schedule.edges_reached(&run.edges_reached);
        let ran: Vec<&str> = run.composer_took.iter().map(|(command, _)| command.as_str()).collect();
        bandit.rewarded(&base, &run.faults, &ran, fruitful);
    }
    // A draw point stays one if what armed it is still new here (or, armed
    // at the branch's start, if no other branch from there made one).
    let mut start_draw_wanted = schedule.draw_child_wanted(tree_id);
    for i in 0..stops.len() {
        let keep = match stops[i].draw {
            Some(DrawStop { armed_by: Armed::Stop(j), .. }) => stops[j].progress,
            Some(DrawStop { armed_by: Armed::Start, .. }) => std::mem::take(&mut start_draw_wanted),
            Some(DrawStop { armed_by: Armed::Revisit, .. }) => true,
            None => false,
        };
        if !keep {
            stops[i].draw = None;
        }
    }
    // A stop is a place to branch from if something was new there, it is
    // an interval stop, or a draw point; snapshots after the branch's last
    // such place before its first failure are of no use.
    let before_failure = first.map_or(stops.len(), |(_, at)| at);
    let node_here = |s: &Judged| s.snapshot.is_some() && (s.new_here > 0 || s.interval || s.draw.is_some());
    let kept = stops[..before_failure].iter().rposition(node_here).map_or(0, |i| i + 1);
    let stops_had_draw = stops.iter().any(|s| s.draw.is_some());
    let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
    let mut parent = tree_id;
    let mut last_node = None;
    let mut novel_stops = 0;
    for (i, s) in stops.into_iter().take(kept).enumerate() {
        // Progress along a chain of properties; new edges alone are not.
        novel_stops += u32::from(s.deeper);
        let is_node = node_here(&s);
        let Some(delta) = s.snapshot else { continue };
        parent = tree.insert(parent, delta);
        if !is_node {
            continue;
        }
        // A draw point is the draw after the branch's last node before it
        // (or its start): that one makes no other. A revisit's is the
        // draw the branch it follows made far from its start: it stands as
        // deep as that branch was there, and takes nothing from its start.
        let draw_parent = s.draw.as_ref().filter(|_| revisit.is_none()).map(|_| last_node.unwrap_or(tree_id));
        if let (Some(r), Some(_)) = (&revisit, &s.draw) {
            novel_stops += r.deeper;
        }
        last_node = Some(parent);
        // A revisit's draw point stands before what the branch it follows
        // reached after that draw.
        let after: Vec<String> = match &revisit {
            Some(r) if s.draw.is_some() => r.approached.clone(),
            _ => approaches.iter().filter(|(at, _)| *at > i).map(|(_, a)| a.clone()).collect(),
        };
        let node = NewNode {
            timeline: s.timeline,
            tree_id: parent,
            novel_stops,
            signals: s.new_here,
            features: &s.features,
            interval: s.interval && s.new_here == 0,
            draw: s.draw.as_ref().map(|d| d.options),
            lead: s.draw.map(|d| d.lead),
            approaches: &after,
            watermarks: &s.watermarks,
            reached: &reached[..s.reached],
            novel_by: s.novel_by,
        };
        schedule.add(node, tree_id, draw_parent);
    }
    if let Some(r) = &revisit {
        if !stops_had_draw {
            // Determinism says this cannot happen: say so where it does.
            tracing::warn!(branch, draw = r.draw, "a revisit did not reach the draw it returns to");
        }
    }
    new_edges
}
