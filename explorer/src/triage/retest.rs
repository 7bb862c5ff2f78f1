//! `hvsim retest`: does a change make a bug go away?
//!
//! The bug's target as it was found (*before*) and as changed (*after*: new
//! files, a new compose project, a new image) each run setup again with
//! the bug's master seed, to setup complete: that build's root. From each
//! root, the same runs: first the bug's own decisions, then `runs` fresh
//! ones. A run re-seeds where the bug's timeline re-seeded, at the same
//! virtual time after the root, and where the explorer chose an SDK draw's
//! value there and a draw is pending, it chooses the same value (a
//! minimized record's vetoes apply too): the decisions that still apply to
//! the changed build. The fresh runs take new seeds at those moments,
//! so their faults and timings are drawn anew around the same decisions.
//! Each run goes as far past its root as the original failure did, and
//! again as far (a checker's bug is judged at that point), and counts if
//! the same bug (the same id) shows. The two counts, with their 95%
//! intervals, say whether the change fixed it: `7/8 -> 0/8`.
//!
//! On the build the bug was found on, the bug's own decisions usually
//! reproduce it; not always, since a run here re-seeds at a virtual time
//! where the exploration re-seeded at an exact event, and several events
//! may share a time.

use hvsim_guest_image::host::Host;
use hvsim_snapshot::SnapshotTree;
use hvsim_vmm::{Machine, Stop, Vtime};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::record::bug::wilson;
use crate::record::bug::BugRecord;
use crate::record::error::{ExploreError, Result};
use crate::record::sdk::{self, SdkMessage};
use crate::run::replay;
use crate::{StartOptions, Target};

/// How one build did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Build {
    /// Whether the bug showed under its own decisions.
    pub own_decisions: bool,
    /// Fresh runs, and those the bug showed in; the 95% interval.
    pub runs: u32,
    pub hits: u32,
    pub low: f64,
    pub high: f64,
    /// Where its root was (virtual time), and whether setup completed.
    pub root_vtime_ns: u64,
    pub setup_complete: bool,
    pub wall_ms: f64,
}

impl Build {
    pub fn describe(&self) -> String {
        format!(
            "{}/{} fresh runs failed (95%: {:.2} to {:.2}); its own decisions {}",
            self.hits,
            self.runs,
            self.low,
            self.high,
            if self.own_decisions { "failed" } else { "passed" }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Retest {
    pub bug: String,
    pub before: Build,
    pub after: Build,
}

impl Retest {
    /// Whether the change fixed it: no run of the changed build failed.
    pub fn fixed(&self) -> bool {
        self.after.hits == 0 && !self.after.own_decisions
    }
}

/// How each build is run.
pub struct Runs<'a> {
    pub host: &'a Host,
    pub start: &'a StartOptions,
    /// Where the root is taken if setup never completes.
    pub setup_limit: Vtime,
    /// Fresh runs, besides the bug's own decisions.
    pub fresh: u32,
}

/// Retests `bug` on `before` and `after`; `progress` hears which build,
/// and the runs done.
pub fn retest(
    bug: &BugRecord,
    before: &Target,
    after: &Target,
    runs: &Runs,
    progress: &mut dyn FnMut(&str, u32),
) -> Result<Retest> {
    let before = build(bug, before, runs, &mut |k| progress("before", k))?;
    let after = build(bug, after, runs, &mut |k| progress("after", k))?;
    Ok(Retest { bug: bug.id.clone(), before, after })
}

/// The seed of fresh run `run` at the bug's segment `segment`.
fn seed(bug: &BugRecord, run: u32, segment: usize) -> u64 {
    let mut h = Sha256::new();
    h.update(b"hvsim/retest/v1");
    h.update(bug.master_seed.to_le_bytes());
    h.update(bug.id.as_bytes());
    h.update(run.to_le_bytes());
    h.update((segment as u64).to_le_bytes());
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
}

fn build(bug: &BugRecord, target: &Target, how: &Runs, progress: &mut dyn FnMut(u32)) -> Result<Build> {
    let started = std::time::Instant::now();
    let runs = how.fresh;
    let mut m = target.start(bug.master_seed, how.host, how.start)?.machine;
    how.start.prepare(&mut m);
    let setup_complete = to_setup_complete(&mut m, how.setup_limit)?;
    let root = m.now();
    let (tree, mut cursor) = SnapshotTree::new(&mut m)?;
    let mut own = false;
    let mut hits = 0;
    for k in 0..=runs {
        tree.reset(&mut cursor, &mut m, tree.root())?;
        let shown = run(bug, &mut m, root, (k > 0).then_some(k))?;
        if k == 0 {
            own = shown;
        } else {
            hits += u32::from(shown);
        }
        progress(k);
    }
    let (low, high) = wilson(hits, runs);
    Ok(Build {
        own_decisions: own,
        runs,
        hits,
        low,
        high,
        root_vtime_ns: root.nanos(),
        setup_complete,
        wall_ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

/// Runs a machine at its start to setup complete (true), or to `limit`.
fn to_setup_complete(m: &mut Machine, limit: Vtime) -> Result<bool> {
    m.set_stop_on_message(true);
    loop {
        match m.run_until(limit)? {
            Stop::Message => {
                let messages = m.take_messages();
                if messages.iter().any(|msg| matches!(sdk::parse(&msg.bytes), SdkMessage::SetupComplete { .. })) {
                    return Ok(true);
                }
            }
            Stop::Deadline => return Ok(false),
            Stop::Ended(end) => {
                return Err(ExploreError::Target(format!("the target ended before setup complete: {}", end.detail())))
            }
        }
    }
}

/// One run from `root` under the bug's decisions (its own seeds, or those
/// of fresh run `fresh`): whether the bug showed.
fn run(bug: &BugRecord, m: &mut Machine, root: Vtime, fresh: Option<u32>) -> Result<bool> {
    let shift = |ns: u64| Vtime(root.nanos() + ns.saturating_sub(bug.timeline.root.vtime_ns));
    let after_root = bug.at.vtime_ns.saturating_sub(bug.timeline.root.vtime_ns);
    let horizon = match bug.bug {
        crate::record::bug::BugKind::Checker { .. } => shift(bug.at.vtime_ns),
        _ => shift(bug.at.vtime_ns.saturating_add(after_root.max(replay::SLACK.nanos()))),
    };
    bug.timeline.hold(m);
    m.take_messages();
    let mut begins = vec![bug.timeline.root.vtime_ns];
    begins.extend(bug.timeline.segments.iter().map(|s| s.until.vtime_ns));
    for (i, segment) in bug.timeline.segments.iter().enumerate() {
        if let Some(shown) = replay::watch(&bug.bug, m, shift(begins[i]))? {
            return Ok(shown);
        }
        m.reseed(fresh.map_or(segment.seed, |k| seed(bug, k, i)))?;
        if let Some(value) = segment.draw.filter(|_| m.draw_pending()) {
            m.choose_draw(value)?;
        }
    }
    Ok(replay::watch(&bug.bug, m, horizon)?.unwrap_or_else(|| bug.bug.judged_in(m)))
}
