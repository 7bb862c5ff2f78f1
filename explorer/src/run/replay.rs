//! Replaying a bug record: its target started (or its saved root
//! restored), its timeline followed segment by segment to the failure
//! point, and the failure judged there. `hvsim replay` and `hvsim debug`,
//! the explorer's re-executions, minimize, likelihood and retest all
//! follow timelines this way. The record itself, plain data, is `bug.rs`.

use hvsim_guest_image::host::Host;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::{End, Machine, Stop, Vtime};
use serde::{Deserialize, Serialize};

use crate::record::bug::{BugKind, BugRecord, Fingerprint};
use crate::record::checkers;
use crate::record::error::{ExploreError, Result};
use crate::record::sdk::{self, SdkMessage};
use crate::record::timeline::{is_crash, point, Point, Segment};
use crate::run::roots::{RootId, Roots};
use crate::{StartOptions, Target};

/// What a replay observed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReplayOutcome {
    /// The same failure at the same point, with the same trace (and memory,
    /// unless the host lets it differ: see [`memory_may_differ`]).
    pub reproduced: bool,
    pub expected: String,
    /// The failure observed at the bug's point, if any.
    pub observed: Option<String>,
    pub at: Point,
    pub vtime_ns: u64,
    /// The machine where the replay stopped.
    pub fingerprint: Fingerprint,
    /// Whether the trace and memory hashes match the record's (false for a
    /// record without them).
    pub trace_matches: bool,
    pub memory_matches: bool,
    /// With `--profile-guest`: the replay's samples.
    #[serde(skip)]
    pub profile: Option<GuestProfile>,
    /// It started from a saved root (`roots.rs`).
    pub from_saved_root: bool,
}

impl ReplayOutcome {
    /// Counts this re-execution of `record`'s timeline in its record.
    pub fn count_in(&self, record: &mut BugRecord) {
        tracing::debug!(
            bug = %record.id,
            reproduced = self.reproduced,
            observed = ?self.observed,
            at = self.at.events,
            trace_matches = self.trace_matches,
            memory_matches = self.memory_matches,
            "re-executed"
        );
        record.count_reexecution(self.reproduced, self.memory_matches);
    }
}

/// Starts the bug's target, or restores its timeline's root if the root
/// `root` names was saved and is that root (`roots.rs`: the id is of the
/// target as explored, before its files were relocated), and follows its
/// timeline to the failure point. `limit`, if given, bounds the virtual
/// time the replay may run. Returns the machine where it stopped too
/// (`hvsim debug` goes on from there).
pub fn replay(
    bug: &BugRecord,
    host: &Host,
    start: &StartOptions,
    limit: Option<Vtime>,
    root: Option<&RootId>,
    observer: &mut dyn Observer,
) -> Result<(ReplayOutcome, Machine)> {
    let (mut m, from_saved_root) = machine(bug, host, start, root)?;
    observer.prepare(&mut m)?;
    let mut outcome = follow(&mut m, bug, memory_may_differ(&bug.target, host), limit, observer)?;
    observer.finish(&mut m)?;
    outcome.profile = m.take_guest_profile();
    outcome.from_saved_root = from_saved_root;
    Ok((outcome, m))
}

/// A machine to follow the bug's timeline on: its saved root, restored,
/// if `root` names it (true), else the target started afresh (false).
pub fn machine(bug: &BugRecord, host: &Host, start: &StartOptions, root: Option<&RootId>) -> Result<(Machine, bool)> {
    match root.and_then(|id| saved_root(bug, id, host, start)) {
        Some(m) => Ok((m, true)),
        None => Ok((bug.target.start(bug.master_seed, host, start)?.machine, false)),
    }
}

/// What a replay does besides following the timeline: `hvsim replay`
/// tells the timeline's story as it goes (`story.rs`), writes logs, saves
/// a snapshot; the explorer's re-executions do nothing more (`()`).
pub trait Observer {
    /// Before the timeline is followed, with the machine at its start or
    /// at its root.
    fn prepare(&mut self, _: &mut Machine) -> Result<()> {
        Ok(())
    }
    /// At each stop on the way: a segment's end, an SDK message.
    fn stopped(&mut self, _: &Machine) {}
    /// Where the replay stopped: at the failure, where the timeline went
    /// elsewhere, or at the virtual-time limit.
    fn finish(&mut self, _: &mut Machine) -> Result<()> {
        Ok(())
    }
}

impl Observer for () {}

/// The root of the bug's timeline, restored, if `id`'s root was saved and
/// is that root.
fn saved_root(bug: &BugRecord, id: &RootId, host: &Host, start: &StartOptions) -> Option<Machine> {
    if !bug.target.is_linux() || start.cold_boot || start.profiler.is_some() {
        return None;
    }
    let (mut m, saved) = Roots::open().ok()?.get(id, &host.settings(true, start.watchdog))?;
    if saved.point != bug.timeline.root {
        return None;
    }
    start.prepare(&mut m);
    Some(m)
}

/// How far past a recorded point's virtual time a replay may run without
/// reaching the point's event before it counts as diverged.
pub const SLACK: Vtime = Vtime(1_000_000_000);

/// Whether guest memory may differ between executions of the same trace:
/// on a host that lets Linux's user mode read the TSC, RDRAND or the host's
/// CPUID without a trap (see `host_limits`), programs such as glibc's
/// dynamic loader keep what they read in memory (the TSC; CPUID leaf 1,
/// which holds the APIC ID of the host CPU that ran it).
pub fn memory_may_differ(target: &Target, host: &Host) -> bool {
    target.is_linux() && !host.probes.limits().is_empty()
}

/// Follows the bug's timeline from `m`, which is at the start of the
/// target's run or at the timeline's root, to the failure point, and says
/// whether the same failure showed there with the same trace and memory
/// (the memory need not match if `memory_may_differ`).
///
/// A timeline that has not reached a point's event within [`SLACK`] of
/// virtual time after the point's own time has diverged: the replay stops
/// there (so an edited or foreign record cannot run forever), and at
/// `limit` in any case.
pub fn follow(
    m: &mut Machine,
    bug: &BugRecord,
    memory_may_differ: bool,
    limit: Option<Vtime>,
    observer: &mut dyn Observer,
) -> Result<ReplayOutcome> {
    // A record is data: one whose root the machine it starts from is
    // already past (an edited root) is refused, not followed.
    if point(m).events > bug.timeline.root.events {
        return Err(ExploreError::Target(format!(
            "{}: damaged bug record: its timeline's root is at event {}, but the root it starts from is at event {}",
            bug.id,
            bug.timeline.root.events,
            point(m).events
        )));
    }
    let outcome = |observed: Option<String>, m: &mut Machine| {
        let fingerprint = Fingerprint::of(m);
        let (trace_matches, memory_matches) = match &bug.failure {
            Some(f) => (f.trace_hash == fingerprint.trace_hash, f.memory_hash == fingerprint.memory_hash),
            None => (false, false),
        };
        ReplayOutcome {
            reproduced: observed.as_deref() == Some(&bug.summary)
                && point(m) == bug.at
                && trace_matches
                && (memory_matches || memory_may_differ),
            expected: bug.summary.clone(),
            observed,
            at: point(m),
            vtime_ns: m.now().nanos(),
            fingerprint,
            trace_matches,
            memory_matches,
            profile: None,
            from_saved_root: false,
        }
    };
    let stop_on_message = m.stop_on_message();
    // Every message is a stop: the observer hears of it as it comes
    // (stopping changes nothing in the run).
    m.set_stop_on_message(true);
    m.take_messages();
    let deadline = |p: Point| Vtime(p.vtime_ns.saturating_add(SLACK.nanos())).min(limit.unwrap_or(Vtime::MAX));
    let result = follow_timeline(m, bug, outcome, deadline, observer);
    m.set_stop_on_message(stop_on_message);
    result
}

/// A segment's start: every stream re-seeded, and the pending draw's value
/// if the segment chose it (it starts at a draw point). False if no draw
/// is pending there: the timeline went elsewhere.
pub(crate) fn begin(m: &mut Machine, segment: &Segment) -> Result<bool> {
    m.reseed(segment.seed)?;
    match segment.draw {
        Some(_) if !m.draw_pending() => Ok(false),
        Some(value) => Ok(m.choose_draw(value).map(|()| true)?),
        None => Ok(true),
    }
}

/// Runs `m` to virtual time `t`, stopping at every message, watching for
/// `bug`: `Some(shown)` if the run decided on the way (the bug showed in a
/// message, or the machine ended: then whether with this bug), `None` at
/// `t`. For fresh runs that look for a known bug (`likelihood.rs`,
/// `retest.rs`).
pub(crate) fn watch(bug: &BugKind, m: &mut Machine, t: Vtime) -> Result<Option<bool>> {
    m.set_stop_on_message(true);
    loop {
        match m.run_until(t)? {
            Stop::Message => {
                if m.take_messages().iter().any(|msg| bug.shown_by(&msg.bytes)) {
                    return Ok(Some(true));
                }
            }
            Stop::Deadline => return Ok(None),
            Stop::Ended(end) => return Ok(Some(bug.shown_by_end(&end) || bug.judged_in(m))),
        }
    }
}

/// How a run to a point of a timeline went.
pub(crate) enum Reach {
    Reached,
    /// Short of the point, or past it: the timeline went elsewhere.
    Elsewhere,
    Ended(End),
}

/// Runs `m` to `until` exactly, by `deadline` at the latest, telling the
/// observer of every stop on the way.
pub(crate) fn reach(m: &mut Machine, until: Point, deadline: Vtime, observer: &mut dyn Observer) -> Result<Reach> {
    loop {
        let stop = m.run_until_point(deadline, until.events)?;
        observer.stopped(m);
        match stop {
            Stop::Message => {
                m.take_messages();
            }
            Stop::Deadline if m.trace_state().events < until.events => return Ok(Reach::Elsewhere),
            Stop::Deadline => break,
            Stop::Ended(end) => return Ok(Reach::Ended(end)),
        }
    }
    // A point the explorer stopped at on the clock (an interval, the end of
    // a slice, the setup limit) may lie after its last exit: the guest was
    // halted and the clock ran on to it, exit-less. The same wait here; an
    // exit on the way means the timeline went elsewhere.
    if m.now().nanos() < until.vtime_ns {
        match m.run_until(Vtime(until.vtime_ns))? {
            Stop::Deadline if m.trace_state().events == until.events => {}
            Stop::Ended(end) => return Ok(Reach::Ended(end)),
            _ => return Ok(Reach::Elsewhere),
        }
    }
    Ok(Reach::Reached)
}

fn follow_timeline(
    m: &mut Machine,
    bug: &BugRecord,
    outcome: impl Fn(Option<String>, &mut Machine) -> ReplayOutcome,
    deadline: impl Fn(Point) -> Vtime,
    observer: &mut dyn Observer,
) -> Result<ReplayOutcome> {
    // Root, then every segment but the last, to their exact points.
    let mut stops: Vec<(Option<&Segment>, Point)> = vec![(None, bug.timeline.root)];
    stops.extend(bug.timeline.segments.iter().map(|s| (Some(s), s.until)));
    let (last, _) = stops.pop().expect("the root is always there");
    for (segment, until) in stops {
        if let Some(segment) = segment {
            if !begin(m, segment)? {
                return Ok(outcome(None, m));
            }
        }
        match reach(m, until, deadline(until), observer)? {
            Reach::Reached => {}
            Reach::Elsewhere => return Ok(outcome(None, m)),
            Reach::Ended(end) => return Ok(outcome(Some(BugKind::Crash { end }.describe()), m)),
        }
        if segment.is_none() {
            // What the timeline decides beyond its seeds, it decides at its root.
            bug.timeline.hold(m);
        }
    }
    if let Some(segment) = last {
        if !begin(m, segment)? {
            return Ok(outcome(None, m));
        }
    }
    // The last stretch: watch every message up to the failure point.
    let mut observed = None;
    // A checker's bug shows at the timeline's end: its history judged there.
    let judged = |m: &Machine| match &bug.bug {
        BugKind::Checker { checker, .. } => checkers::observe(checker, m.messages())
            .map(|summary| BugKind::Checker { checker: checker.clone(), summary }.describe()),
        _ => None,
    };
    loop {
        let stop = m.run_until_point(deadline(bug.at), bug.at.events)?;
        observer.stopped(m);
        match stop {
            Stop::Message => {
                for msg in m.take_messages() {
                    if let SdkMessage::Assert(a) = sdk::parse(&msg.bytes) {
                        let kind = BugKind::from_assertion(&a);
                        if a.hit
                            && matches!(&bug.bug, BugKind::Assertion { id, .. } if *id == a.id)
                            && a.kind.fails(a.condition)
                        {
                            observed = Some(kind.describe());
                        }
                    }
                }
            }
            Stop::Deadline => {
                // A timeline's end on the clock may lie after its last exit
                // (the guest halted, the clock ran on): the same wait here.
                if m.trace_state().events == bug.at.events && m.now().nanos() < bug.at.vtime_ns {
                    if let Stop::Ended(end) = m.run_until(Vtime(bug.at.vtime_ns))? {
                        let o = is_crash(&end).then(|| BugKind::Crash { end }.describe());
                        return Ok(outcome(o.or_else(|| judged(m)).or(observed), m));
                    }
                }
                return Ok(outcome(judged(m).or(observed), m));
            }
            Stop::Ended(end) => {
                let o = is_crash(&end).then(|| BugKind::Crash { end }.describe()).or_else(|| judged(m)).or(observed);
                return Ok(outcome(o, m));
            }
        }
    }
}
