//! How likely a bug is along its own timeline: from a few moments of the
//! timeline that found it (the root, and evenly spaced points up to the
//! failure), a few fresh branches each (new seeds, the same horizon), and
//! the share of them in which the same bug follows. Where that share jumps
//! is where the bug became likely: the decision that mattered lies between
//! those two moments (Antithesis's bug likelihood over time).
//!
//! Each share comes with its 95% Wilson interval: with 8 branches a point,
//! 8/8 means "at least 0.68", not certainty. The runs' seeds derive from
//! the master seed, the bug and the point, so the estimate is part of the
//! exploration's pure function of its seed. What it may cost is bounded in
//! virtual time, a share of what the exploration's branches ran; a bug
//! whose estimate would not fit is left unestimated, and says so.

use hvsim_snapshot::{Cursor, NodeId, SnapshotTree};
use hvsim_vmm::{Machine, Stop, Vtime};
use sha2::{Digest, Sha256};

use crate::record::bug::{wilson, BugRecord, Likelihood, LikelihoodPoint};
use crate::record::config::LikelihoodParams;
use crate::record::error::Result;
use crate::record::timeline::Span;
use crate::run::engine::{AfterRounds, LastRound};
use crate::run::replay::{self, Reach};

/// Each bug's likelihood, estimated after the exploration's last round on
/// its own machine and snapshot tree (the loop's [`AfterRounds`]), within
/// the budget, in the order found.
pub struct Estimates;

impl AfterRounds for Estimates {
    fn after_rounds(&mut self, end: LastRound<'_>) {
        let params = end.config.likelihood;
        if params.runs == 0 {
            return;
        }
        let mut budget = (params.budget.max(0.0) * end.vtime_ns as f64) as u64;
        for record in end.bugs.iter_mut() {
            if record.timeline.segments.is_empty() {
                let why = "found before the root: no branch starts before it".to_owned();
                record.likelihood = Some(Likelihood::unestimated(why));
                continue;
            }
            let horizon = match end.config.span {
                Span::Whole { limit } => Vtime(record.timeline.root.vtime_ns.saturating_add(limit.nanos())),
                Span::Slice(slice) => Vtime(record.at.vtime_ns.saturating_add(slice.nanos())),
            };
            record.likelihood = match estimate(record, params, horizon, end.tree, end.cursor, end.machine, &mut budget)
            {
                Ok(l) => Some(l),
                Err(_) if end.interrupt.raised() => return,
                Err(e) => Some(Likelihood::unestimated(format!("the estimate failed: {e}"))),
            };
        }
    }
}

/// The seed of run `run` from point `point` of bug `bug`'s estimate.
fn seed(master: u64, bug: &str, point: u32, run: u32) -> u64 {
    let mut h = Sha256::new();
    h.update(b"hvsim/likelihood/v1");
    h.update(master.to_le_bytes());
    h.update(bug.as_bytes());
    h.update(point.to_le_bytes());
    h.update(run.to_le_bytes());
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
}

/// The moments of `bug`'s timeline to estimate from: the root, evenly
/// spaced ones, and the last just before the failure (at 99% of the way).
fn moments(bug: &BugRecord, points: u32) -> Vec<Vtime> {
    let (root, at) = (bug.timeline.root.vtime_ns, bug.at.vtime_ns);
    let n = u64::from(points.max(1));
    let mut all: Vec<Vtime> = (0..n.saturating_sub(1)).map(|j| Vtime(root + (at - root) * j / (n - 1))).collect();
    all.push(Vtime(root + (at - root) * 99 / 100));
    all.dedup();
    all
}

/// Estimates `bug`'s likelihood with `machine` (standing at `cursor` in
/// `tree`, whose root is the bug's root), runs going to `horizon` at most;
/// `budget_ns`: the virtual time left to spend, less what this spends.
/// Runs go round the points (one from each, then another from each...), so
/// a budget that runs out leaves every point with as many runs, give or
/// take one.
#[allow(clippy::too_many_arguments)]
fn estimate(
    bug: &BugRecord,
    params: LikelihoodParams,
    horizon: Vtime,
    tree: &mut SnapshotTree,
    cursor: &mut Cursor,
    machine: &mut Machine,
    budget_ns: &mut u64,
) -> Result<Likelihood> {
    let started = std::time::Instant::now();
    let mut out = Likelihood { horizon_ns: horizon.nanos(), ..Likelihood::default() };
    // The pass along the timeline and a first run from its root must fit,
    // or nothing is spent.
    let root = bug.timeline.root.vtime_ns;
    let first = bug.at.vtime_ns.saturating_sub(root).saturating_add(horizon.nanos().saturating_sub(root));
    if params.runs == 0 || first > *budget_ns {
        out.not_estimated = Some(format!(
            "following its timeline and one run from its root could take {:.1} s of virtual time, more than the \
             {:.1} s of budget left (--likelihood-budget)",
            first as f64 / 1e9,
            *budget_ns as f64 / 1e9
        ));
        return Ok(out);
    }
    let from = machine_at_root(tree, cursor, machine)?;
    bug.timeline.hold(machine);
    let nodes = moments_of(bug, &moments(bug, params.points), tree, cursor, machine)?;
    out.vtime_ns += machine.now().nanos().saturating_sub(from.nanos());
    *budget_ns = budget_ns.saturating_sub(out.vtime_ns);
    let mut hits = vec![0u32; nodes.len()];
    let mut runs = vec![0u32; nodes.len()];
    'rounds: for k in 0..params.runs {
        for (j, &(t, node)) in nodes.iter().enumerate() {
            // Only a run that cannot overrun the budget starts.
            if horizon.nanos().saturating_sub(t.nanos()) > *budget_ns {
                break 'rounds;
            }
            tree.reset(cursor, machine, node)?;
            // The root's own node was saved before the timeline held.
            bug.timeline.hold(machine);
            machine.reseed(seed(bug.master_seed, &bug.id, j as u32, k))?;
            machine.take_messages();
            let shown = replay::watch(&bug.bug, machine, horizon)?.unwrap_or_else(|| bug.bug.judged_in(machine));
            hits[j] += u32::from(shown);
            runs[j] += 1;
            let ran = machine.now().nanos().saturating_sub(t.nanos());
            out.vtime_ns += ran;
            *budget_ns = budget_ns.saturating_sub(ran);
        }
    }
    for (j, &(t, _)) in nodes.iter().enumerate() {
        if runs[j] > 0 {
            let (low, high) = wilson(hits[j], runs[j]);
            out.points.push(LikelihoodPoint { vtime_ns: t.nanos(), runs: runs[j], hits: hits[j], low, high });
        }
    }
    // Evicted leaf by leaf: each moment's node is the next one's parent.
    for &(_, node) in nodes.iter().rev() {
        if node != tree.root() && tree.is_leaf(node) {
            tree.evict(node);
        }
    }
    if out.points.is_empty() {
        out.not_estimated = Some(format!(
            "a run from its root could take {:.1} s of virtual time, more than the budget left \
             (--likelihood-budget, --likelihood-runs)",
            horizon.nanos().saturating_sub(bug.timeline.root.vtime_ns) as f64 / 1e9
        ));
    }
    out.wall_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(out)
}

/// Resets the machine to the tree's root (the bug's root); the time there.
fn machine_at_root(tree: &SnapshotTree, cursor: &mut Cursor, machine: &mut Machine) -> Result<Vtime> {
    tree.reset(cursor, machine, tree.root())?;
    Ok(machine.now())
}

/// Follows `bug`'s timeline once from the root, snapshotting it at each of
/// `moments` on the way (the root's own node for a moment at the root);
/// the moments it reached, with their nodes.
fn moments_of(
    bug: &BugRecord,
    moments: &[Vtime],
    tree: &mut SnapshotTree,
    cursor: &mut Cursor,
    machine: &mut Machine,
) -> Result<Vec<(Vtime, NodeId)>> {
    let mut nodes = Vec::new();
    let mut next = moments.iter().peekable();
    while next.next_if(|t| t.nanos() <= bug.timeline.root.vtime_ns).is_some() {
        nodes.push((Vtime(bug.timeline.root.vtime_ns), tree.root()));
    }
    let last = bug.timeline.segments.len().saturating_sub(1);
    for (i, segment) in bug.timeline.segments.iter().enumerate() {
        if !replay::begin(machine, segment)? {
            return Ok(nodes);
        }
        let until = if i == last { bug.at } else { segment.until };
        while let Some(&&t) = next.peek() {
            if t.nanos() >= until.vtime_ns {
                break;
            }
            // Stopping on the clock and going on changes nothing.
            match machine.run_until_point(t, until.events)? {
                Stop::Deadline if machine.now() >= t => {
                    nodes.push((t, tree.snapshot(cursor, machine)?));
                    next.next();
                }
                Stop::Deadline => break, // the segment's end came first
                Stop::Message => {}
                Stop::Ended(_) => return Ok(nodes),
            }
        }
        if i < last
            && !matches!(
                replay::reach(machine, until, Vtime(until.vtime_ns + replay::SLACK.nanos()), &mut ())?,
                Reach::Reached
            )
        {
            return Ok(nodes);
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_intervals_bound_the_share_and_narrow_with_runs() {
        assert_eq!(wilson(0, 0), (0.0, 1.0));
        let (lo, hi) = wilson(8, 8);
        assert!((0.67..0.68).contains(&lo) && hi == 1.0, "{lo} {hi}");
        let (lo, hi) = wilson(0, 8);
        assert!(lo == 0.0 && (0.32..0.33).contains(&hi), "{lo} {hi}");
        let (a, b) = wilson(4, 8);
        let (c, d) = wilson(40, 80);
        assert!(a < 0.5 && 0.5 < b && b - a > d - c);
    }

    #[test]
    fn the_jump_is_the_largest_rise() {
        let p = |t: u64, hits: u32| LikelihoodPoint { vtime_ns: t, runs: 8, hits, low: 0.0, high: 1.0 };
        let l = Likelihood { points: vec![p(0, 0), p(1, 1), p(2, 7), p(3, 8)], ..Likelihood::default() };
        let (a, b) = l.jump().unwrap();
        assert_eq!((a.vtime_ns, b.vtime_ns), (1, 2));
        assert!(l.describe().contains("became likely between 0.000 s and 0.000 s (0.12 to 0.88)"), "{}", l.describe());
    }
}
