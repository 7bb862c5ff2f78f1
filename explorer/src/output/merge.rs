//! Shards' results combined into one (`hvsim merge`, docs/scale.md).
//!
//! Every exploration leaves `exploration.json` in its directory: the whole
//! [`Exploration`], tallies and bug records included, which is all a merge
//! needs. [`merge`] folds several into one, by these rules:
//!
//! - they must be shards of one exploration (same target, seed, budget,
//!   span, snapshot interval and memory, schedule, batch, checkers, claims
//!   and root) run on one world,
//!   each shard at most once: anything else is refused, saying what
//!   differs;
//! - bugs are deduplicated by their stable id; the record kept is the one
//!   found first by (virtual time, shard, branch), then (a bug of the root,
//!   which every shard has) the least by what it says, and it lists every
//!   shard that saw the bug;
//! - assertion counts are summed, so a `sometimes` satisfied in any shard
//!   is satisfied and an `always` failed in any shard is failed; claims are
//!   judged again from their summed tallies and the merged bugs;
//! - fault evidence, checker, composer, buggify and harness tallies, the
//!   bandit's (rules, templates, commands), draws, and timelines are
//!   summed; coverage is the union of the shards' edges, and a coverage
//!   module two shards name is the greater (edges, base).
//!   What the root run did (faults before setup complete, its messages) is
//!   in every shard's tallies, so it counts once per shard; signals and the
//!   series of coverage and bugs over branches are sums of the shards' own;
//! - every choice among shards is by a rule that does not depend on which
//!   came first (the least example, the worst ending, sorted unions), so
//!   the result depends on the shards' results, never on the order they
//!   are named in or on which host ran which; and a merge is itself
//!   mergeable: merges of merges give the merge of all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::record::assertions::Assertions;
use crate::record::bug::BugRecord;
use crate::record::checkers::CheckerTally;
use crate::record::claims::{ClaimTally, HarnessTally};
use crate::record::composer::{CommandTally, ComposerTally};
use crate::record::coverage::Coverage;
use crate::record::error::{ExploreError, Result};
use crate::record::exploration::{
    CommandTally as BanditCommand, DrawTally, Dropped, Ending, Exploration, Garbage, Instrumentation, Phases, Read,
    RuleTally, SeriesPoint, TemplateTally, TimelineEnds, TreeMemory, FILE, FORMAT,
};
use crate::record::shard::{Shard, Shards};
use crate::run::roots::first_difference;

/// The largest `exploration.json` read: far above any exploration's
/// (hundreds of KiB per thousand branches).
const MAX_BYTES: u64 = 4 << 30;

/// The exploration whose results are in `dir`, and the directory that
/// holds them: `dir`, an exploration's directory, or the one its `latest`
/// points at, for an `--out` directory.
pub fn load(dir: &Path) -> Result<(PathBuf, Exploration)> {
    let found = [dir.to_owned(), dir.join(crate::output::report::LATEST)].into_iter().find(|d| d.join(FILE).is_file());
    let Some(dir) = found else {
        return Err(refused(format!(
            "{}: no {FILE} there or in its `latest`: not an exploration's directory, or one still running, killed or failed",
            dir.display()
        )));
    };
    let file = dir.join(FILE);
    let bytes = hvsim_vmm::files::read_bounded(&file, MAX_BYTES).map_err(|source| ExploreError::Io {
        what: "reading",
        path: file.clone(),
        source,
    })?;
    let read: Read = serde_json::from_slice(&bytes)
        .map_err(|e| refused(format!("{}: not an exploration hvsim can merge: {e}", file.display())))?;
    if read.format != FORMAT {
        return Err(refused(format!(
            "{}: format `{}` (hvsim {}), where this hvsim reads `{FORMAT}`",
            file.display(),
            read.format,
            read.hvsim_version
        )));
    }
    let e = &read.exploration;
    let broken = |what: &str| Err(refused(format!("{}: {what}", file.display())));
    if !e.coverage.fits() {
        return broken("its coverage names edges outside the coverage map");
    }
    if !e.shards.sound() {
        return broken("its shard list is not one of shards");
    }
    // A record is written under its id: only an id the bug itself gives.
    if let Some(b) = e.bugs.iter().find(|b| b.id != b.bug.id()) {
        return broken(&format!("bug `{}` is not the id of what it records ({})", b.id, b.bug.id()));
    }
    Ok((dir, read.exploration))
}

fn refused(why: String) -> ExploreError {
    ExploreError::Merge(why)
}

/// What makes two explorations shards of one: equal in all of it.
fn identity(e: &Exploration) -> serde_json::Map<String, serde_json::Value> {
    let v = |x: serde_json::Result<serde_json::Value>| x.expect("explorations serialize");
    let checkers: Vec<_> = e.checkers.iter().map(|c| &c.spec).collect();
    let claims: Vec<_> = e.claims.iter().map(|c| &c.spec).collect();
    [
        ("target", v(serde_json::to_value(&e.target))),
        ("master seed", e.seed.into()),
        ("budget", v(serde_json::to_value(e.budget))),
        ("span", v(serde_json::to_value(e.span))),
        ("snapshot interval", v(serde_json::to_value(e.snapshot_every_ns))),
        ("branching from snapshots", e.branch_from_snapshots.into()),
        ("schedule", e.policy.name().into()),
        ("batch", e.batch.into()),
        ("checkers", v(serde_json::to_value(checkers))),
        ("claims", v(serde_json::to_value(claims))),
        ("shard count", e.shards.count.into()),
        ("root", v(serde_json::to_value(e.root.point))),
        ("snapshot memory", e.tree.budget_bytes.into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The explorations in `inputs` (with where each was read from, for
/// errors), merged.
pub fn merge(mut inputs: Vec<(PathBuf, Exploration)>) -> Result<Exploration> {
    if inputs.is_empty() {
        return Err(refused("nothing to merge".into()));
    }
    if let Some((path, e)) = inputs.iter().find(|(_, e)| !e.shards.sound()) {
        let s = &e.shards;
        return Err(refused(format!(
            "{}: its shard list {:?} of {} is not one of shards",
            path.display(),
            s.indices,
            s.count
        )));
    }
    inputs.sort_by_key(|(_, e)| e.shards.indices[0]);
    let (first_path, first) = &inputs[0];
    let want = identity(first);
    for (path, e) in &inputs[1..] {
        for (k, there) in identity(e) {
            if want[&k] != there {
                return Err(refused(format!(
                    "{} and {} are not shards of one exploration: their {k} differs ({} and {})",
                    first_path.display(),
                    path.display(),
                    want[&k],
                    there
                )));
            }
        }
        if let Some(d) = first_difference(&first.world.0, &e.world.0, ["in the first", "in the second"]) {
            return Err(refused(format!(
                "{} and {} ran on different worlds ({d}): shards merge only from one machine type",
                first_path.display(),
                path.display()
            )));
        }
    }
    let mut indices: Vec<u32> = inputs.iter().flat_map(|(_, e)| e.shards.indices.iter().copied()).collect();
    indices.sort_unstable();
    if let Some(w) = indices.windows(2).find(|w| w[0] == w[1]) {
        let twice: Vec<String> = inputs
            .iter()
            .filter(|(_, e)| e.shards.indices.contains(&w[0]))
            .map(|(p, _)| p.display().to_string())
            .collect();
        return Err(refused(format!(
            "shard {} of {} is named twice: {}",
            w[0],
            first.shards.count,
            twice.join(" and ")
        )));
    }
    let shards = Shards { count: first.shards.count, indices };
    let several = inputs.len() > 1;
    let mut parts = inputs.into_iter().map(|(_, e)| e);
    let mut out = parts.next().expect("one at least");
    let first_shard = out.shards.indices[0];
    // Per bug of `out`, every shard that saw it (a merge's records list
    // theirs).
    let saw = |b: &BugRecord, shard: u32| if b.shards.is_empty() { vec![shard] } else { b.shards.clone() };
    let mut seen: Vec<Vec<u32>> = out.bugs.iter().map(|b| saw(b, first_shard)).collect();
    // Each assertion's and checker's first bug, as each shard named it.
    let mut assertion_bugs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut checker_bugs: Vec<Vec<String>> = out.checkers.iter().map(|_| Vec::new()).collect();
    let mut named =
        |assertions: &Assertions, checkers: &[CheckerTally], assertion_bugs: &mut BTreeMap<String, Vec<String>>| {
            for a in assertions.iter() {
                assertion_bugs.entry(a.id.clone()).or_default().extend(a.bug.clone());
            }
            for (c, t) in checker_bugs.iter_mut().zip(checkers) {
                c.extend(t.bug.clone());
            }
        };
    named(&out.assertions, &out.checkers, &mut assertion_bugs);
    let mut series = vec![std::mem::take(&mut out.series)];
    // Discovery estimates need each feature's count over every shard's
    // timelines, which a shard does not keep: shards merged have none (one
    // shard keeps its own).
    if several {
        out.discovery = crate::record::discovery::Discovered::default();
    }
    let mut coverage = Coverage::default();
    coverage.merge_bits(&out.coverage);
    for e in parts {
        // Taken apart whole, as each tally below: a field added to an
        // exploration does not compile until the merge says how it
        // combines.
        let Exploration {
            // Equal in every shard (`identity`), or recomputed below.
            target: _,
            seed: _,
            budget: _,
            span: _,
            snapshot_every_ns: _,
            branch_from_snapshots: _,
            policy: _,
            batch: _,
            world: _,
            coverage_edges: _,
            discovery: _,
            guest_profile: _,
            timelines,
            tree,
            draws,
            rules,
            templates,
            commands,
            workers,
            root,
            branches,
            snapshots,
            signals,
            wall_ms,
            vtime_ns,
            assertions,
            bugs: shard_bugs,
            events,
            composer,
            checkers,
            claims,
            harness,
            host_limits,
            garbage,
            dropped,
            faults,
            instrumentation,
            series: shard_series,
            first_bug,
            phases,
            ending,
            shards: of,
            coverage: shard_coverage,
        } = e;
        let shard = of.indices[0];
        named(&assertions, &checkers, &mut assertion_bugs);
        let TimelineEnds { ended, at_limit } = timelines;
        add(&mut out.timelines.ended, ended);
        add(&mut out.timelines.at_limit, at_limit);
        let TreeMemory { root_bytes, bytes, state_bytes, peak_bytes, budget_bytes: _, evicted, snapshots_skipped } =
            tree;
        let t = &mut out.tree;
        add(&mut t.root_bytes, root_bytes);
        add(&mut t.bytes, bytes);
        add(&mut t.state_bytes, state_bytes);
        add(&mut t.peak_bytes, peak_bytes);
        add(&mut t.evicted, evicted);
        add(&mut t.snapshots_skipped, snapshots_skipped);
        let DrawTally { points, chosen, steered, revisits } = draws;
        add(&mut out.draws.points, points);
        add(&mut out.draws.chosen, chosen);
        add(&mut out.draws.steered, steered);
        add(&mut out.draws.revisits, revisits);
        merge_arms(&mut out.rules, rules);
        merge_arms(&mut out.templates, templates);
        merge_arms(&mut out.commands, commands);
        add(&mut out.workers, workers);
        // The root's point is equal (`identity`); what else it says, the
        // same in every shard that reached it.
        out.root.restored &= root.restored;
        add(&mut out.branches, branches);
        add(&mut out.snapshots, snapshots);
        add(&mut out.signals, signals);
        out.wall_ms = out.wall_ms.max(wall_ms);
        add(&mut out.vtime_ns, vtime_ns);
        add_assertions(&mut out.assertions, &assertions);
        for bug in shard_bugs {
            let saw = saw(&bug, shard);
            match out.bugs.iter().position(|b| b.id == bug.id) {
                Some(i) => {
                    let occurrences = out.bugs[i].occurrences.saturating_add(bug.occurrences);
                    if kept_first(&bug, &out.bugs[i], shards.count) {
                        out.bugs[i] = bug;
                    }
                    out.bugs[i].occurrences = occurrences;
                    seen[i].extend(saw);
                }
                None => {
                    out.bugs.push(bug);
                    seen.push(saw);
                }
            }
        }
        for (k, n) in events {
            add(out.events.entry(k).or_default(), n);
        }
        let ComposerTally { templates: composer_templates, commands: composer_commands, winddowns } = composer;
        for (t, n) in composer_templates {
            add(out.composer.templates.entry(t).or_default(), n);
        }
        add(&mut out.composer.winddowns, winddowns);
        for (c, t) in composer_commands {
            let o = out.composer.commands.entry(c).or_default();
            let CommandTally { started, succeeded, failed, by_fault, stopped, longest_ns } = t;
            o.longest_ns = o.longest_ns.max(longest_ns);
            add(&mut o.started, started);
            add(&mut o.succeeded, succeeded);
            add(&mut o.failed, failed);
            add(&mut o.by_fault, by_fault);
            add(&mut o.stopped, stopped);
        }
        // Identity made the checker and claim lists equal, in order.
        for (o, t) in out.checkers.iter_mut().zip(checkers) {
            let CheckerTally {
                spec: _,
                timelines,
                valid,
                invalid,
                undecided,
                malformed,
                malformed_example,
                operations,
                bug: _,
            } = t;
            add(&mut o.timelines, timelines);
            add(&mut o.valid, valid);
            add(&mut o.invalid, invalid);
            add(&mut o.undecided, undecided);
            add(&mut o.malformed, malformed);
            add(&mut o.operations, operations);
            o.malformed_example = least(o.malformed_example.take(), malformed_example);
        }
        for (o, t) in out.claims.iter_mut().zip(claims) {
            add_claim(o, t);
        }
        // The least example, with the service exit that goes with it.
        let HarnessTally { timelines, example, service_exit } = harness;
        add(&mut out.harness.timelines, timelines);
        if example.is_some() && (out.harness.example.is_none() || example < out.harness.example) {
            (out.harness.example, out.harness.service_exit) = (example, service_exit);
        }
        out.host_limits = union(std::mem::take(&mut out.host_limits), host_limits, usize::MAX);
        let Garbage { count, examples } = garbage;
        add(&mut out.garbage.count, count);
        out.garbage.examples = union(std::mem::take(&mut out.garbage.examples), examples, GARBAGE_EXAMPLES);
        let Dropped { assertions, guidance, events, composer, instrumentation: instrumented } = dropped;
        add(&mut out.dropped.assertions, assertions);
        add(&mut out.dropped.guidance, guidance);
        add(&mut out.dropped.events, events);
        add(&mut out.dropped.composer, composer);
        add(&mut out.dropped.instrumentation, instrumented);
        out.faults.merge(&faults);
        coverage.merge_bits(&shard_coverage);
        let Instrumentation { sdks, coverage_modules } = instrumentation;
        let text = |v: Vec<serde_json::Value>| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let all = union(text(std::mem::take(&mut out.instrumentation.sdks)), text(sdks), usize::MAX);
        out.instrumentation.sdks = all.iter().filter_map(|x| serde_json::from_str(x).ok()).collect();
        // A module named alike by two shards: the greater (edges, base),
        // whichever came first.
        for (name, m) in coverage_modules {
            let o = out.instrumentation.coverage_modules.entry(name).or_insert(m);
            *o = (*o).max(m);
        }
        series.push(shard_series);
        out.first_bug = match (out.first_bug, first_bug) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let p = &mut out.phases;
        let Phases {
            start_ms,
            setup_ms,
            branches_ms,
            restore_ms,
            snapshot_ms,
            reexecution_ms,
            reexecution_wait_ms,
            story_ms,
            likelihood_ms,
        } = phases;
        add(&mut p.start_ms, start_ms);
        add(&mut p.setup_ms, setup_ms);
        add(&mut p.branches_ms, branches_ms);
        add(&mut p.restore_ms, restore_ms);
        add(&mut p.snapshot_ms, snapshot_ms);
        add(&mut p.reexecution_ms, reexecution_ms);
        add(&mut p.reexecution_wait_ms, reexecution_wait_ms);
        add(&mut p.story_ms, story_ms);
        add(&mut p.likelihood_ms, likelihood_ms);
        out.ending = std::cmp::max_by_key(out.ending.clone(), ending, ending_rank);
    }
    // A shard's time ran out: the merge's words count every shard's branches.
    if let Ending::TimeSpent { branches } = &mut out.ending {
        *branches = out.branches;
    }
    // In the order found: by branch, then (several bugs of the root) by
    // virtual time.
    let mut order: Vec<usize> = (0..out.bugs.len()).collect();
    order.sort_by_key(|&i| {
        let b = &out.bugs[i];
        (b.branch, b.at.vtime_ns, b.at.events, b.id.clone())
    });
    let mut bugs: Vec<Option<BugRecord>> = std::mem::take(&mut out.bugs).into_iter().map(Some).collect();
    out.bugs = order
        .iter()
        .map(|&i| {
            let mut b = bugs[i].take().expect("each once");
            b.shards = std::mem::take(&mut seen[i]);
            b.shards.sort_unstable();
            b.shards.dedup();
            if shards.count == 1 {
                b.shards.clear();
            }
            b
        })
        .collect();
    // An assertion's or checker's bug: of those its shards named, the
    // first in that order.
    let first_of = |ids: &[String]| {
        let first = ids.iter().filter_map(|id| out.bugs.iter().position(|b| &b.id == id)).min();
        first.map(|i| out.bugs[i].id.clone())
    };
    for a in out.assertions.by_id.values_mut() {
        a.bug = assertion_bugs.get(&a.id).and_then(|ids| first_of(ids));
    }
    for (c, ids) in out.checkers.iter_mut().zip(&checker_bugs) {
        c.bug = first_of(ids);
    }
    out.series = merge_series(series);
    out.coverage = coverage.bits();
    out.coverage_edges = coverage.edges();
    out.shards = shards;
    Ok(out)
}

/// Whether record `a` of a bug is kept over `b`: the first found, by
/// (virtual time, the shard that ran its branch, branch), then (the
/// root's bugs, branch 0, are every shard's) by what the record says, so
/// that which one is kept never depends on the order shards are merged in.
fn kept_first(a: &BugRecord, b: &BugRecord, shards: u32) -> bool {
    let found = |r: &BugRecord| (r.at.vtime_ns, Shard::of_branch(r.branch, shards), r.branch);
    // What the shards merged into it say is summed apart.
    let content = |r: &BugRecord| {
        let mut r = r.clone();
        (r.shards, r.occurrences) = (Vec::new(), 0);
        serde_json::to_vec(&r).expect("records serialize")
    };
    (found(a), content(a)) < (found(b), content(b))
}

/// A bandit arm's tally: what names it, and its counts (chosen, pulls,
/// rewards), taken apart whole so that a field added to one does not
/// compile until it says how it merges.
trait Arm {
    fn key(&self) -> (&str, &str);
    fn counts(self) -> [u64; 3];
    fn counts_mut(&mut self) -> [&mut u64; 3];
}

impl Arm for RuleTally {
    fn key(&self) -> (&str, &str) {
        (&self.kind, &self.landing)
    }
    fn counts(self) -> [u64; 3] {
        let RuleTally { kind: _, landing: _, chosen, pulls, rewards } = self;
        [chosen, pulls, rewards]
    }
    fn counts_mut(&mut self) -> [&mut u64; 3] {
        [&mut self.chosen, &mut self.pulls, &mut self.rewards]
    }
}

impl Arm for TemplateTally {
    fn key(&self) -> (&str, &str) {
        (&self.template, "")
    }
    fn counts(self) -> [u64; 3] {
        let TemplateTally { template: _, chosen, pulls, rewards } = self;
        [chosen, pulls, rewards]
    }
    fn counts_mut(&mut self) -> [&mut u64; 3] {
        [&mut self.chosen, &mut self.pulls, &mut self.rewards]
    }
}

impl Arm for BanditCommand {
    fn key(&self) -> (&str, &str) {
        (&self.command, &self.template)
    }
    fn counts(self) -> [u64; 3] {
        let BanditCommand { command: _, template: _, chosen, pulls, rewards } = self;
        [chosen, pulls, rewards]
    }
    fn counts_mut(&mut self) -> [&mut u64; 3] {
        [&mut self.chosen, &mut self.pulls, &mut self.rewards]
    }
}

/// Adds `from`'s arms into `to`'s, each by its key (every shard lists the
/// same, in the plan's order); one `to` lacks is added at the end.
fn merge_arms<T: Arm>(to: &mut Vec<T>, from: Vec<T>) {
    for t in from {
        match to.iter().position(|o| o.key() == t.key()) {
            Some(i) => {
                for (o, n) in to[i].counts_mut().into_iter().zip(t.counts()) {
                    add(o, n);
                }
            }
            None => to.push(t),
        }
    }
}

/// Sums counts from files, which may hold anything: at the top they stay.
trait Add {
    fn add_to(self, to: &mut Self);
}

macro_rules! saturating {
    ($($t:ty),*) => {$(impl Add for $t {
        fn add_to(self, to: &mut $t) {
            *to = to.saturating_add(self);
        }
    })*};
}
saturating!(u64, usize);

impl Add for f64 {
    fn add_to(self, to: &mut f64) {
        // Finite: JSON has no infinity, and the sum is written back.
        *to = (*to + self).clamp(f64::MIN, f64::MAX);
    }
}

/// Of two examples, one that does not depend on which came first.
fn least(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The sorted union of two lists, at most `max` long.
fn union(a: Vec<String>, b: Vec<String>, max: usize) -> Vec<String> {
    let all: std::collections::BTreeSet<String> = a.into_iter().chain(b).collect();
    all.into_iter().take(max).collect()
}

/// The examples of garbage a merge keeps (as an exploration does).
const GARBAGE_EXAMPLES: usize = 10;

/// Which ending a merge has: the worst of its shards'.
fn ending_rank(e: &Ending) -> (u8, String) {
    let rank = match e {
        Ending::Finished => 0,
        Ending::TimeSpent { .. } => 1,
        Ending::Running => 2,
        Ending::Interrupted { .. } => 3,
        Ending::Failed { .. } => 4,
    };
    (rank, e.describe())
}

fn add<T: Add>(to: &mut T, x: T) {
    x.add_to(to);
}

fn add_assertions(out: &mut Assertions, other: &Assertions) {
    for (id, r) in &other.by_id {
        match out.by_id.get_mut(id) {
            Some(o) => {
                add(&mut o.hits, r.hits);
                add(&mut o.passes, r.passes);
                add(&mut o.failures, r.failures);
                o.registered |= r.registered;
                o.describe_least(r.kind, &r.message, &r.display, &r.location);
            }
            None => {
                out.by_id.insert(id.clone(), r.clone());
            }
        }
    }
}

fn add_claim(o: &mut ClaimTally, t: ClaimTally) {
    let ClaimTally {
        spec: _,
        timelines,
        exercised,
        evaluations,
        landed,
        examples,
        operations,
        undecided,
        unreadable,
        unreadable_example,
    } = t;
    add(&mut o.timelines, timelines);
    add(&mut o.exercised, exercised);
    add(&mut o.evaluations, evaluations);
    for (kind, l) in landed {
        let x = o.landed.entry(kind).or_default();
        add(&mut x.timelines, l.timelines);
        add(&mut x.faults, l.faults);
        add(&mut x.touches, l.touches);
    }
    // The first few of each kind over the whole exploration, by branch.
    let mut all = std::mem::take(&mut o.examples);
    all.extend(examples);
    all.sort_by_key(|x| x.branch);
    for x in all {
        if o.examples.iter().filter(|y| y.landing.kind == x.landing.kind).count() < crate::record::claims::EXAMPLES {
            o.examples.push(x);
        }
    }
    add(&mut o.operations, operations);
    add(&mut o.undecided, undecided);
    add(&mut o.unreadable, unreadable);
    o.unreadable_example = least(o.unreadable_example.take(), unreadable_example);
}

/// Coverage and bugs over the whole exploration's branches: at each
/// shard's point, the sum of every shard's latest counts (so a signal or
/// bug two shards found counts twice here), wall time the latest. The
/// features' counts only for one shard (several cannot be summed).
fn merge_series(shards: Vec<Vec<SeriesPoint>>) -> Vec<SeriesPoint> {
    let one = shards.len() == 1;
    let mut points: Vec<(usize, SeriesPoint)> =
        shards.into_iter().enumerate().flat_map(|(k, s)| s.into_iter().map(move |p| (k, p))).collect();
    points.sort_by_key(|(k, p)| (p.branch, *k));
    let mut latest: BTreeMap<usize, SeriesPoint> = BTreeMap::new();
    points
        .into_iter()
        .map(|(k, p)| {
            latest.insert(k, p.clone());
            let sum = |f: &dyn Fn(&SeriesPoint) -> u64| latest.values().map(f).fold(0u64, u64::saturating_add);
            SeriesPoint {
                branch: p.branch,
                wall_ms: latest.values().map(|q| q.wall_ms).max().unwrap_or(0),
                snapshots: sum(&|q| q.snapshots as u64) as usize,
                signals: sum(&|q| q.signals),
                bugs: sum(&|q| q.bugs as u64) as usize,
                new_edges: p.new_edges,
                edges: sum(&|q| q.edges as u64) as usize,
                incidence: if one { p.incidence } else { Default::default() },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::bug::{BugKind, Fingerprint};
    use crate::record::exploration::to_json;
    use crate::record::sdk::{AssertKind, Assertion, Location};
    use proptest::prelude::{any, Strategy};

    use crate::record::timeline::{Point, Timeline};
    use crate::Target;
    use hvsim_guest_image::world::World;

    fn assertion(id: &str, kind: AssertKind, condition: bool) -> Assertion {
        Assertion {
            id: id.into(),
            message: id.into(),
            kind,
            display: kind.display().into(),
            hit: true,
            condition,
            location: Location::default(),
            details: serde_json::Value::Null,
        }
    }

    /// Shard `index` of 3 that saw, per entry, an always-assertion fail at
    /// (virtual time, branch), and a sometimes-assertion `condition`.
    fn shard(index: u32, failures: &[(&str, u64, u64)], sometimes: bool) -> Exploration {
        shard_of(index, 3, failures, sometimes)
    }

    fn shard_of(index: u32, count: u32, failures: &[(&str, u64, u64)], sometimes: bool) -> Exploration {
        let mut assertions = Assertions::default();
        assertions.observe(&assertion("sometimes", AssertKind::Sometimes, sometimes));
        let bugs = failures
            .iter()
            .map(|&(id, vtime_ns, branch)| {
                let a = assertion(id, AssertKind::Always, false);
                assertions.observe(&a);
                let at = Point { events: vtime_ns, vtime_ns };
                let fp = Fingerprint { trace_hash: "t".into(), memory_hash: "m".into() };
                let target = Target::Raw { guest: "demo".into() };
                let mut b = BugRecord::new(
                    BugKind::from_assertion(&a),
                    at,
                    Timeline::at(at),
                    target,
                    1,
                    branch,
                    World::default(),
                    fp,
                    0,
                );
                b.story = vec![];
                b.occurrences = 2;
                assertions.by_id.get_mut(id).unwrap().bug.get_or_insert(b.id.clone());
                b
            })
            .collect::<Vec<_>>();
        let point = |branch| SeriesPoint {
            branch,
            wall_ms: branch,
            snapshots: 1,
            signals: 1,
            bugs: 0,
            new_edges: 1,
            edges: 1,
            incidence: Default::default(),
        };
        let mut coverage = Coverage::default();
        coverage.add_edge(u64::from(index));
        Exploration {
            first_bug: bugs.first().map(|b| (b.branch, 1)),
            assertions,
            bugs,
            events: BTreeMap::from([("e".to_owned(), 1)]),
            coverage_edges: coverage.edges(),
            // Two of the shard's branches: its first and second.
            series: vec![point(u64::from(index) + 1), point(u64::from(index + count) + 1)],
            discovery: Default::default(),
            shards: Shards::of(Shard::new(index, count).unwrap()),
            coverage: coverage.bits(),
            ..Exploration::example(Target::Raw { guest: "demo".into() }, Point { events: 1, vtime_ns: 1 })
        }
    }

    fn three() -> Vec<(PathBuf, Exploration)> {
        vec![
            ("s0".into(), shard(0, &[("lost write", 500, 4), ("torn read", 90, 7)], false)),
            ("s1".into(), shard(1, &[("lost write", 200, 5)], true)),
            ("s2".into(), shard(2, &[("lost write", 200, 3)], false)),
        ]
    }

    fn json(e: &Exploration) -> serde_json::Value {
        serde_json::from_slice(&to_json(e)).unwrap()
    }

    #[test]
    fn the_merge_does_not_depend_on_the_order_of_its_inputs_and_merges_of_merges_agree() {
        let want = json(&merge(three()).unwrap());
        let mut rotated = three();
        rotated.rotate_left(1);
        assert_eq!(json(&merge(rotated).unwrap()), want);
        let mut reversed = three();
        reversed.reverse();
        assert_eq!(json(&merge(reversed).unwrap()), want);
        // (0 + 2) + 1 == 0 + 1 + 2.
        let mut parts = three();
        let one = parts.remove(1);
        let partial = merge(parts).unwrap();
        assert_eq!(partial.shards.describe(), "shards 0, 2 of 3 (missing 1)");
        assert_eq!(json(&merge(vec![("m".into(), partial), one]).unwrap()), want);
    }

    /// Examples, endings and lists: chosen by rules that do not depend on
    /// which shard came first, so that (0 + 2) + 1 == 0 + 1 + 2 for them too.
    #[test]
    fn choices_among_shards_do_not_depend_on_how_they_are_grouped() {
        let parts = || {
            let mut parts = three();
            parts[1].1.harness.example = Some("b: exit 3".into());
            parts[2].1.harness.example = Some("a: exit 2".into());
            parts[1].1.host_limits = vec!["rdtsc".into()];
            parts[2].1.host_limits = vec!["cpuid".into(), "rdtsc".into()];
            parts[1].1.garbage.examples = vec!["z".into()];
            parts[2].1.garbage.examples = vec!["y".into()];
            parts[2].1.ending = Ending::Interrupted { reason: 15 };
            parts
        };
        let flat = merge(parts()).unwrap();
        assert_eq!(flat.harness.example.as_deref(), Some("a: exit 2"));
        assert_eq!(flat.host_limits, ["cpuid", "rdtsc"]);
        assert_eq!(flat.garbage.examples, ["y", "z"]);
        assert_eq!(flat.ending, Ending::Interrupted { reason: 15 }, "the worst ending");
        let mut parts = parts();
        let one = parts.remove(1);
        let grouped = merge(vec![("m".into(), merge(parts).unwrap()), one]).unwrap();
        assert_eq!(json(&grouped), json(&flat));
    }

    /// What one shard saw, drawn: one id reported in several ways, bugs of
    /// a few ids at colliding virtual times, examples, an ending.
    #[derive(Clone, Debug)]
    struct Seen {
        /// (id, kind, message, line, condition)
        reports: Vec<(u8, u8, u8, u8, bool)>,
        /// (id, virtual time, the shard's k-th branch)
        failures: Vec<(u8, u64, u64)>,
        harness: Option<u8>,
        limits: Vec<u8>,
        garbage: Vec<u8>,
        ending: u8,
        events: Vec<(u8, u64)>,
        /// A bug of the root (branch 0, every shard's), its record told
        /// apart by what its console said after it.
        root_bug: Option<u8>,
        /// Per bandit arm (rules, templates, commands): chosen, pulls,
        /// rewards.
        arms: Vec<(u64, u64, u64)>,
        steered: u64,
        /// A coverage module's (edges, base), as this shard saw it.
        module: Option<(u64, u64)>,
    }

    fn seen() -> impl Strategy<Value = Seen> {
        (
            proptest::collection::vec((0..3u8, 0..3u8, 0..2u8, 0..2u8, any::<bool>()), 0..6),
            proptest::collection::vec((0..3u8, 0..3u64, 0..3u64), 0..4),
            proptest::option::of(0..4u8),
            proptest::collection::vec(0..4u8, 0..3),
            proptest::collection::vec(0..4u8, 0..3),
            0..3u8,
            proptest::collection::vec((0..3u8, 0..5u64), 0..3),
            (
                proptest::option::of(0..3u8),
                proptest::collection::vec((0..4u64, 0..4u64, 0..4u64), 3),
                0..5u64,
                proptest::option::of((0..3u64, 0..3u64)),
            ),
        )
            .prop_map(
                |(reports, failures, harness, limits, garbage, ending, events, (root_bug, arms, steered, module))| {
                    Seen {
                        reports,
                        failures,
                        harness,
                        limits,
                        garbage,
                        ending,
                        events,
                        root_bug,
                        arms,
                        steered,
                        module,
                    }
                },
            )
    }

    fn drawn(index: u32, count: u32, s: &Seen) -> Exploration {
        // An exploration keeps one record per bug: its first.
        let mut names: Vec<(String, u64, u64)> = s
            .failures
            .iter()
            .map(|&(id, vtime, k)| (format!("bug {id}"), vtime, k * u64::from(count) + u64::from(index) + 1))
            .collect();
        names.sort_by_key(|(_, vtime, branch)| (*vtime, *branch));
        let mut ids = std::collections::BTreeSet::new();
        names.retain(|(id, ..)| ids.insert(id.clone()));
        let failures: Vec<(&str, u64, u64)> = names.iter().map(|(n, t, b)| (n.as_str(), *t, *b)).collect();
        let mut e = shard_of(index, count, &failures, index.is_multiple_of(2));
        let kinds = [AssertKind::Always, AssertKind::Sometimes, AssertKind::Reachable];
        for &(id, kind, message, line, condition) in &s.reports {
            let mut a = assertion(&format!("report {id}"), kinds[usize::from(kind)], condition);
            a.message = format!("said {message}");
            a.location.begin_line = u64::from(line);
            e.assertions.observe(&a);
        }
        e.harness.example = s.harness.map(|h| format!("exit {h}"));
        e.harness.timelines = u64::from(s.harness.is_some());
        e.host_limits = s.limits.iter().map(|l| format!("limit {l}")).collect();
        e.host_limits.sort();
        e.host_limits.dedup();
        e.garbage.examples = s.garbage.iter().map(|g| format!("garbage {g}")).collect();
        e.garbage.examples.sort();
        e.garbage.examples.dedup();
        e.ending = match s.ending {
            0 => Ending::Finished,
            1 => Ending::Interrupted { reason: 2 },
            _ => Ending::Interrupted { reason: 15 },
        };
        for &(k, n) in &s.events {
            *e.events.entry(format!("event {k}")).or_default() += n;
        }
        if let Some(variant) = s.root_bug {
            let mut root = shard_of(index, count, &[("root bug", 1, 0)], false).bugs.remove(0);
            root.console_after = vec![format!("variant {variant}")];
            e.first_bug = Some((0, 1));
            e.bugs.insert(0, root);
        }
        let [(c0, p0, r0), (c1, p1, r1), (c2, p2, r2)] = [s.arms[0], s.arms[1], s.arms[2]];
        e.rules =
            vec![RuleTally { kind: "partition".into(), landing: "cut".into(), chosen: c0, pulls: p0, rewards: r0 }];
        e.templates = vec![TemplateTally { template: "t".into(), chosen: c1, pulls: p1, rewards: r1 }];
        e.commands =
            vec![BanditCommand { command: "t/c".into(), template: "t".into(), chosen: c2, pulls: p2, rewards: r2 }];
        e.draws.steered = s.steered;
        e.draws.revisits = s.steered / 3;
        if let Some(m) = s.module {
            e.instrumentation.coverage_modules.insert("m".into(), m);
        }
        e
    }

    /// Merges `parts` in groups drawn from `cut`: contiguous runs, each
    /// merged first, then the merges merged.
    fn grouped(parts: Vec<(PathBuf, Exploration)>, cut: &[bool]) -> Exploration {
        let mut groups: Vec<Vec<(PathBuf, Exploration)>> = vec![Vec::new()];
        for (i, p) in parts.into_iter().enumerate() {
            if cut.get(i).copied().unwrap_or(false) && !groups.last().unwrap().is_empty() {
                groups.push(Vec::new());
            }
            groups.last_mut().unwrap().push(p);
        }
        let merged = groups.into_iter().enumerate().map(|(i, g)| (format!("m{i}").into(), merge(g).unwrap())).collect();
        merge(merged).unwrap()
    }

    proptest::proptest! {
        /// Every field of a merge is the same for any order of its shards
        /// and any grouping of them into merges of merges.
        #[test]
        fn a_merge_is_the_same_in_any_order_and_any_grouping(
            seen in proptest::collection::vec(seen(), 2..6),
            order in any::<u64>(),
            cut in proptest::collection::vec(any::<bool>(), 6),
        ) {
            let count = seen.len() as u32;
            let parts = || -> Vec<(PathBuf, Exploration)> {
                seen.iter().enumerate().map(|(i, s)| (format!("s{i}").into(), drawn(i as u32, count, s))).collect()
            };
            let flat = json(&merge(parts()).unwrap());
            let shuffled = || {
                let mut p = parts();
                let n = p.len();
                for i in 0..n {
                    p.swap(i, (order >> (i * 8)) as usize % n);
                }
                p
            };
            proptest::prop_assert_eq!(&json(&merge(shuffled()).unwrap()), &flat);
            proptest::prop_assert_eq!(&json(&grouped(shuffled(), &cut)), &flat);
            // Every tally is the sum of the shards'.
            let m = merge(parts()).unwrap();
            let total = |f: &dyn Fn(&Seen) -> u64| seen.iter().map(f).sum::<u64>();
            proptest::prop_assert_eq!(m.rules[0].pulls, total(&|s| s.arms[0].1));
            proptest::prop_assert_eq!(m.templates[0].rewards, total(&|s| s.arms[1].2));
            proptest::prop_assert_eq!(m.commands[0].chosen, total(&|s| s.arms[2].0));
            proptest::prop_assert_eq!(m.draws.steered, total(&|s| s.steered));
            proptest::prop_assert_eq!(m.draws.revisits, total(&|s| s.steered / 3));
            // A root bug's record: the least of what the shards said.
            let least = seen.iter().filter_map(|s| s.root_bug).min();
            let root = m.bugs.iter().find(|b| b.branch == 0);
            proptest::prop_assert_eq!(root.map(|b| b.console_after.clone()), least.map(|v| vec![format!("variant {v}")]));
        }
    }

    #[test]
    fn a_shard_file_that_lies_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = shard(0, &[("lost write", 1, 1)], false);
        e.bugs[0].id = "../../../etc/x".into();
        std::fs::write(dir.path().join(FILE), to_json(&e)).unwrap();
        let err = load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("bug `../../../etc/x` is not the id of what it records"), "{err}");
        let mut e = shard(0, &[], false);
        e.shards.count = u32::MAX;
        std::fs::write(dir.path().join(FILE), to_json(&e)).unwrap();
        assert!(load(dir.path()).unwrap_err().to_string().contains("its shard list is not one of shards"));
        std::fs::write(dir.path().join(FILE), b"{\"format\":\"hvsim-exploration-v9\"}").unwrap();
        assert!(load(dir.path()).unwrap_err().to_string().contains("not an exploration hvsim can merge"));
        assert!(load(&dir.path().join("nowhere")).unwrap_err().to_string().contains("no exploration.json there"));
    }

    #[test]
    fn bugs_keep_the_first_record_and_every_shard_that_saw_them() {
        let m = merge(three()).unwrap();
        let ids: Vec<&str> = m.bugs.iter().map(|b| b.summary.as_str()).collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        let lost = m.bugs.iter().find(|b| b.summary.contains("lost write")).unwrap();
        // Virtual time 200 in shards 1 and 2: shard 1's, the lower shard.
        assert_eq!((lost.at.vtime_ns, lost.branch), (200, 5));
        assert_eq!(lost.shards, vec![0, 1, 2]);
        assert_eq!(lost.occurrences, 6);
        let torn = m.bugs.iter().find(|b| b.summary.contains("torn read")).unwrap();
        assert_eq!(torn.shards, vec![0]);
        // In the order found: by branch.
        assert_eq!(m.bugs.iter().map(|b| b.branch).collect::<Vec<_>>(), vec![5, 7]);
        assert_eq!(m.first_bug, Some((3, 1)), "shard 2 found one at branch 3");
        // Each assertion names its first bug in that order.
        let a = &m.assertions.by_id["lost write"];
        assert_eq!(a.bug.as_deref(), Some(lost.id.as_str()));
    }

    #[test]
    fn verdicts_sum_counts_and_coverage_is_a_union() {
        let m = merge(three()).unwrap();
        let s = &m.assertions.by_id["sometimes"];
        assert_eq!((s.hits, s.passes), (3, 1));
        assert_eq!(s.verdict(), crate::record::assertions::Verdict::Held, "satisfied in one shard: satisfied");
        let a = &m.assertions.by_id["lost write"];
        assert_eq!((a.hits, a.failures, a.verdict()), (3, 3, crate::record::assertions::Verdict::Failed));
        assert_eq!((m.branches, m.events["e"]), (6, 3));
        assert_eq!(m.coverage_edges, 3, "three different edges");
        let mut same = three();
        for (_, e) in &mut same {
            e.coverage = shard(0, &[], false).coverage;
        }
        assert_eq!(merge(same).unwrap().coverage_edges, 1, "one edge, found by all three");
        assert_eq!(
            m.series.iter().map(|p| (p.branch, p.signals)).collect::<Vec<_>>(),
            vec![(1, 1), (2, 2), (3, 3), (4, 3), (5, 3), (6, 3)]
        );
    }

    #[test]
    fn shards_of_different_explorations_or_named_twice_are_refused() {
        let err = |inputs| merge(inputs).unwrap_err().to_string();
        let mut other = three();
        other[1].1.seed = 2;
        assert_eq!(err(other), "s0 and s1 are not shards of one exploration: their master seed differs (1 and 2)");
        let mut other = three();
        other[2].1.shards = Shards::of(Shard::new(2, 4).unwrap());
        assert!(err(other).contains("their shard count differs (3 and 4)"));
        let mut other = three();
        other[1].1.world = World(BTreeMap::from([("kernel".into(), "k".into())]));
        assert!(err(other).contains("ran on different worlds (kernel: (none) in the first, `k` in the second)"));
        let mut twice = three();
        twice[2].1.shards = Shards::of(Shard::new(1, 3).unwrap());
        assert_eq!(err(twice), "shard 1 of 3 is named twice: s1 and s2");
        let mut broken = three();
        broken[0].1.shards.indices = vec![];
        assert!(err(broken).contains("is not one of shards"));
        assert_eq!(err(vec![]), "nothing to merge");
    }
}
