//! `hvsim minimize`: the fewest of a failing timeline's decisions with
//! which the same property still fails.
//!
//! A bug's timeline is its seeds, and the seeds decide: which drawn faults
//! strike (and when, and whom), which buggify sites fire, and, where the
//! explorer branched at an SDK draw, the value the draw took. Those are the
//! timeline's *decisions*, and so are the Test Composer commands its
//! template started (init's composer asks the machine before each one,
//! `Control::ComposerRun`). A candidate keeps some of them and takes the
//! others back ([`Vetoes`]: the draw is still made, so everything else the
//! seeds decide stays put as far as the run allows; a draw the explorer
//! chose is left to the stream). Delta debugging (Zeller and Hildebrandt's
//! ddmin) searches for a 1-minimal set: the same failure (the same bug id)
//! with it, and with no one of its decisions taken back too.
//!
//! Each candidate runs from the bug's root (restored in process from a
//! snapshot of it) through the timeline's segments, to the failure or to
//! a bound past where the original failed. The result is a bug record of
//! its own, whose timeline carries its vetoes; it is replayed once from the
//! root before it is returned, so it replays.

use hvsim_guest_image::host::Host;
use hvsim_snapshot::tree::{Cursor, SnapshotTree};
use hvsim_vmm::faults::Vetoes;
use hvsim_vmm::{Machine, Stop, Vtime};

use crate::record::bug::{BugKind, BugRecord, Decision, Minimization, Reproduction};
use crate::record::checkers;
use crate::record::error::{ExploreError, Result};
use crate::record::story;
use crate::record::timeline::point;
use crate::record::timeline::{Point, Timeline};
use crate::run::branch::Failure;
use crate::run::replay::{self, Reach};
use crate::run::roots::RootId;
use crate::StartOptions;

/// The decisions of `bug`'s timeline after its root, in a fixed order.
pub fn decisions(bug: &BugRecord) -> Vec<Decision> {
    let name = |n: u16| story::name(&story::nodes(&bug.target), n);
    let mut all: Vec<Decision> = bug
        .faults
        .iter()
        .filter(|e| e.start_ns >= bug.timeline.root.vtime_ns)
        .map(|e| Decision::Fault { id: e.id, what: e.describe(&name) })
        .collect();
    all.extend(
        bug.buggify.iter().filter(|(_, s)| s.fired > 0).map(|(site, _)| Decision::Buggify { site: site.clone() }),
    );
    let runs = bug.composer.iter().flat_map(|c| &c.runs);
    all.extend(runs.map(|r| Decision::Command { run: r.run, command: r.command.clone(), service: r.service.clone() }));
    all.extend(
        bug.timeline
            .segments
            .iter()
            .enumerate()
            .filter_map(|(segment, s)| s.draw.map(|value| Decision::Draw { segment, value })),
    );
    all
}

/// The timeline of `bug` with only `kept` of its decisions: none of those
/// its seeds would make after the original failure either (later faults,
/// sites that had not fired, commands not yet started).
fn candidate(bug: &BugRecord, all: &[Decision], kept: &[bool]) -> Timeline {
    let mut t = bug.timeline.clone();
    let later = bug.faults.iter().map(|e| e.id + 1).max().unwrap_or(0);
    let later_command = bug.composer.as_ref().map(|c| c.runs.iter().map(|r| r.run + 1).max().unwrap_or(1));
    t.vetoes = Vetoes {
        faults_from: Some(later),
        buggify_only: Some(Default::default()),
        commands_from: later_command,
        ..Vetoes::default()
    };
    for (d, &keep) in all.iter().zip(kept) {
        match d {
            Decision::Fault { id, .. } if !keep => {
                t.vetoes.faults.insert(*id);
            }
            Decision::Buggify { site } if keep => {
                t.vetoes.buggify_only.get_or_insert_with(Default::default).insert(site.clone());
            }
            Decision::Draw { segment, .. } if !keep => t.segments[*segment].draw = None,
            Decision::Command { run, .. } if !keep => {
                t.vetoes.commands.insert(*run);
            }
            _ => {}
        }
    }
    t
}

/// Bounds on the search.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Candidate runs at most.
    pub runs: u32,
}

/// Runs from the bug's root: a snapshot of it, and a machine to reset.
struct Runner<'a> {
    bug: &'a BugRecord,
    tree: SnapshotTree,
    cursor: Cursor,
    machine: Machine,
    /// How far past the original failure a candidate may run.
    limit: Vtime,
    runs: u32,
    memory_may_differ: bool,
}

/// Where a candidate failed, and where each of its segments ended on the
/// way (a minimized record's points are its own run's, not the original's).
struct Failed {
    at: Point,
    ends: Vec<Point>,
}

impl Runner<'_> {
    /// Runs `timeline` from the root; where the bug showed, if it did.
    fn run(&mut self, timeline: &Timeline) -> Result<Option<Failed>> {
        self.runs += 1;
        let m = &mut self.machine;
        self.tree.reset(&mut self.cursor, m, self.tree.root())?;
        timeline.hold(m);
        m.set_stop_on_message(true);
        m.take_messages();
        let bug = &self.bug.bug;
        let mut ends = Vec::new();
        let last = timeline.segments.len().saturating_sub(1);
        for (i, segment) in timeline.segments.iter().enumerate() {
            if !replay::begin(m, segment)? {
                return Ok(None); // the draw was not where it was
            }
            // Each segment to its end (the last to the bound), stopping at
            // every message to look for the failure.
            let until = if i == last { u64::MAX } else { segment.until.events };
            let failed = |m: &Machine, ends: Vec<Point>| Some(Failed { at: point(m), ends });
            loop {
                match m.run_until_point(self.limit, until)? {
                    Stop::Message => {
                        if m.take_messages().iter().any(|msg| bug.shown_by(&msg.bytes)) {
                            return Ok(failed(m, ends));
                        }
                    }
                    Stop::Ended(end) => {
                        return Ok(if bug.shown_by_end(&end) || bug.judged_in(m) { failed(m, ends) } else { None });
                    }
                    Stop::Deadline if m.now() >= self.limit => {
                        return Ok(if bug.judged_in(m) { failed(m, ends) } else { None });
                    }
                    Stop::Deadline => break,
                }
            }
            // Where the original segment ended on the clock after its last
            // exit (the guest halted), the same wait, up to the next exit.
            if m.now().nanos() < segment.until.vtime_ns {
                if let Stop::Ended(_) = m.run_until_point(Vtime(segment.until.vtime_ns), until + 1)? {
                    return Ok(None);
                }
            }
            ends.push(point(m));
        }
        Ok(None)
    }
}

/// Minimizes `bug`'s decisions (see the module's comment); `progress` hears
/// of each candidate run (runs so far, decisions kept so far).
pub fn minimize(
    bug: &BugRecord,
    host: &Host,
    start: &StartOptions,
    root: Option<&RootId>,
    budget: Budget,
    progress: &mut dyn FnMut(u32, usize),
) -> Result<BugRecord> {
    let all = decisions(bug);
    let (mut m, _) = replay::machine(bug, host, start, root)?;
    let root_point = bug.timeline.root;
    match replay::reach(&mut m, root_point, Vtime(root_point.vtime_ns.saturating_add(replay::SLACK.nanos())), &mut ())?
    {
        Reach::Reached => {}
        _ => return Err(ExploreError::Target(format!("{}: its timeline's root was not reached", bug.id))),
    }
    let (tree, cursor) = SnapshotTree::new(&mut m)?;
    // A checker's bug is judged at its timeline's end: candidates run to
    // the same point in virtual time. Others may fail later than the
    // original did, within as long again as the original ran past its root.
    let limit = match bug.bug {
        BugKind::Checker { .. } => Vtime(bug.at.vtime_ns),
        _ => Vtime(bug.at.vtime_ns.saturating_add((bug.at.vtime_ns - root_point.vtime_ns).max(replay::SLACK.nanos()))),
    };
    let memory_may_differ = replay::memory_may_differ(&bug.target, host);
    let mut runner = Runner { bug, tree, cursor, machine: m, limit, runs: 0, memory_may_differ };
    if runner.run(&candidate(bug, &all, &vec![true; all.len()]))?.is_none() {
        return Err(ExploreError::Target(format!(
            "{}: its timeline, run again from its root, did not fail the same way: nothing to minimize \
             (does `hvsim replay` reproduce it?)",
            bug.id
        )));
    }
    let mask = |keep: &[usize]| {
        let mut m = vec![false; all.len()];
        keep.iter().for_each(|&i| m[i] = true);
        m
    };
    let (kept, finished) = ddmin(all.len(), budget.runs.saturating_sub(runner.runs), &mut |keep| {
        let fails = runner.run(&candidate(bug, &all, &mask(keep)))?.is_some();
        progress(runner.runs, keep.len());
        Ok(fails)
    })?;
    let timeline = candidate(bug, &all, &mask(&kept));
    record(bug, runner, timeline, &all, &kept, finished)
}

/// Zeller and Hildebrandt's ddmin over the indices `0..n`, all of which
/// fail `fails`: a subset that still fails, 1-minimal (no one index can be
/// left out) unless `budget` tests ran out first (then false). The empty
/// set is tried last. No set is tested twice: ddmin meets the same subsets
/// again as its granularity changes, and each test here is a whole
/// timeline run again (seconds on a nested host).
pub fn ddmin(n: usize, budget: u32, fails: &mut dyn FnMut(&[usize]) -> Result<bool>) -> Result<(Vec<usize>, bool)> {
    let mut kept: Vec<usize> = (0..n).collect();
    let mut tests = 0u32;
    // Every set tried, with whether it failed; sets are kept in index order.
    let mut seen: std::collections::HashMap<Vec<usize>, bool> = std::collections::HashMap::new();
    let mut test = |set: &[usize], tests: &mut u32| -> Result<Option<bool>> {
        debug_assert!(set.windows(2).all(|w| w[0] < w[1]), "ddmin's sets are in index order");
        if let Some(&failed) = seen.get(set) {
            return Ok(Some(failed));
        }
        if *tests >= budget {
            return Ok(None);
        }
        *tests += 1;
        let failed = fails(set)?;
        seen.insert(set.to_vec(), failed);
        Ok(Some(failed))
    };
    let mut granularity = 2usize;
    while kept.len() >= 2 {
        let size = kept.len().div_ceil(granularity);
        let chunks: Vec<Vec<usize>> = kept.chunks(size).map(<[usize]>::to_vec).collect();
        // Each subset alone; then, with more than two, each complement.
        // Subsets of one decision each are left out when there are more
        // than two: a failure one decision alone causes would have shown at
        // a coarser granularity (one half or the other still failing), so
        // they would only cost runs; the complements keep the result
        // 1-minimal.
        let singletons = chunks.len() > 2 && chunks.iter().all(|c| c.len() == 1);
        let mut tries: Vec<(Vec<usize>, bool)> =
            if singletons { Vec::new() } else { chunks.iter().map(|c| (c.clone(), true)).collect() };
        if chunks.len() > 2 {
            for skip in 0..chunks.len() {
                let rest = chunks.iter().enumerate().filter(|&(i, _)| i != skip).flat_map(|(_, c)| c.clone());
                tries.push((rest.collect(), false));
            }
        }
        let mut reduced = false;
        for (t, subset) in tries {
            let Some(failed) = test(&t, &mut tests)? else { return Ok((kept, false)) };
            if failed {
                kept = t;
                granularity = if subset { 2 } else { (granularity - 1).max(2) };
                reduced = true;
                break;
            }
        }
        if !reduced {
            if granularity >= kept.len() {
                break;
            }
            granularity = (2 * granularity).min(kept.len());
        }
    }
    if kept.len() == 1 {
        match test(&[], &mut tests)? {
            None => return Ok((kept, false)),
            Some(true) => kept.clear(),
            Some(false) => {}
        }
    }
    Ok((kept, true))
}

/// The minimized timeline's own bug record, replayed once from the root.
fn record(
    bug: &BugRecord,
    mut runner: Runner,
    mut timeline: Timeline,
    all: &[Decision],
    kept: &[usize],
    finished: bool,
) -> Result<BugRecord> {
    let Failed { at, ends } = runner
        .run(&timeline)?
        .ok_or_else(|| ExploreError::Target(format!("{}: the minimized timeline did not fail again", bug.id)))?;
    let m = &mut runner.machine;
    // The segments that began before it failed, each ending where it did
    // in this run; the last ends at the failure.
    timeline.segments.truncate(ends.len() + 1);
    for (segment, end) in timeline.segments.iter_mut().zip(ends.iter().chain([&at])) {
        segment.until = *end;
    }
    let failure = Failure::of(m, &story::nodes(&bug.target));
    let mut r = bug.clone();
    r.at = at;
    r.timeline = timeline;
    r.failure = Some(failure.fingerprint.clone());
    r.console_tail = failure.console_tail.clone();
    r.faults = failure.faults.clone();
    r.buggify = failure.buggify.clone();
    r.composer = failure.composer.clone();
    // Its own run's: what reached the original from outside the seed need
    // not reach this one (judged with the reproduction below).
    r.outside_seed = failure.outside_seed.clone();
    if let BugKind::Checker { checker, .. } = &bug.bug {
        if let Some(summary) = checkers::observe(checker, m.messages()) {
            r.bug = BugKind::Checker { checker: checker.clone(), summary };
            r.summary = r.bug.describe();
        }
    }
    r.story = failure.story.clone();
    r.story.push(story::failure(at.vtime_ns, &r.summary));
    r.after.clear();
    r.console_after.clear();
    r.occurrences = 1;
    r.minimized = Some(Minimization {
        from_at: bug.at,
        decisions: all.len(),
        kept: kept.iter().map(|&i| all[i].clone()).collect(),
        removed: (0..all.len()).filter(|i| !kept.contains(i)).map(|i| all[i].clone()).collect(),
        runs: runner.runs,
        one_minimal: finished,
    });
    // It replays: followed from the root as `hvsim replay` will.
    runner.tree.reset(&mut runner.cursor, &mut runner.machine, runner.tree.root())?;
    let outcome = replay::follow(&mut runner.machine, &r, runner.memory_may_differ, None, &mut ())?;
    r.reproduction = Reproduction { wanted: 1, ..Reproduction::default() };
    outcome.count_in(&mut r);
    if !outcome.reproduced {
        return Err(ExploreError::Target(format!(
            "{}: the minimized timeline failed, but following its record did not reach the same failure ({})",
            bug.id,
            outcome.observed.as_deref().unwrap_or("no failure")
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ddmin finds the decisions a failure needs, whichever they are.
    #[test]
    fn ddmin_keeps_exactly_what_the_failure_needs() {
        for needed in [vec![], vec![0], vec![7], vec![3, 7], vec![0, 5, 11], (0..12).collect::<Vec<_>>()] {
            let mut tests = 0;
            let mut fails = |keep: &[usize]| {
                tests += 1;
                Ok(needed.iter().all(|i| keep.contains(i)))
            };
            let (kept, minimal) = ddmin(12, 1000, &mut fails).unwrap();
            assert_eq!((kept, minimal), (needed.clone(), true));
            assert!(tests <= 12 * 12, "{tests} tests for {needed:?}");
        }
    }

    /// Each set is tested once, and no set of one decision among more than
    /// two: finding what a composer bug of four decisions needs (the first
    /// and the last) takes 7 runs, not the 15 it took when ddmin ran again
    /// the sets it had met at a finer granularity (nor the 9 with each
    /// decision alone tried too).
    #[test]
    fn ddmin_tests_no_set_twice() {
        let mut tried: Vec<Vec<usize>> = Vec::new();
        let mut fails = |keep: &[usize]| {
            assert!(!tried.iter().any(|t| t == keep), "{keep:?} tested again after {tried:?}");
            tried.push(keep.to_vec());
            Ok(keep.contains(&0) && keep.contains(&3))
        };
        let (kept, minimal) = ddmin(4, 1000, &mut fails).unwrap();
        assert_eq!((kept, minimal), (vec![0, 3], true));
        assert_eq!(tried.len(), 7, "{tried:?}");
    }

    #[test]
    fn ddmin_stops_at_its_budget_with_a_failing_set() {
        let mut fails = |keep: &[usize]| Ok(keep.contains(&9));
        let (kept, minimal) = ddmin(16, 2, &mut fails).unwrap();
        assert!(!minimal && kept.contains(&9) && kept.len() < 16, "{kept:?}");
    }
}
