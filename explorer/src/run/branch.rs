//! One branch as a worker runs it: reset the machine to the snapshot the
//! branch starts from, re-seed it, run it to the end of its timeline (the
//! guest's end, or the timeline's limit of virtual time from the root; or,
//! with `--slice`, a slice from its snapshot), and write down all the
//! explorer needs to merge the branch into the exploration: each stop's
//! messages and fresh coverage, a snapshot (as a delta) where something
//! was new and at every interval of virtual time, the machine's
//! fingerprint where something failed.
//!
//! The branch's first failure is its bug (see `bugs.rs`): the branch runs
//! on to its end so that what follows is on record, but it takes no
//! snapshot from there on, since nothing after a bug is a place to explore
//! from. An interrupt in that stretch ends the branch where it stands, its
//! bug kept.
//!
//! What is new here is judged against the [`Knowledge`] the exploration
//! had when the branch's round began, plus the branch's own findings. The
//! merge judges again, against everything merged before the branch: it can
//! only find less new (knowledge only grows), never more, so every stop the
//! merge finds new has its snapshot.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hvsim_snapshot::{Cursor, Delta, NodeId, SnapshotTree};
use hvsim_vmm::faults::buggify::Site;
use hvsim_vmm::faults::schedule::Episode;
use hvsim_vmm::{End, Machine, Stop, Vtime};

use crate::record::bug::{self, Fingerprint};
use crate::record::checkers::{self, Checked, CheckerSpec, Violation};
use crate::record::claims::{self, ClaimSpec, TimelineClaims};
use crate::record::composer::Composition;
use crate::record::coverage::FreshBits;
use crate::record::error::Result;
use crate::record::faults::FaultTally;
use crate::record::history::Histories;
use crate::record::services::Services;
use crate::record::story;
use crate::record::timeline::{is_crash, point, LineChoice, Point, Span, Timeline};
use crate::record::winddown;
use crate::run::knowledge::Knowledge;
use crate::run::live::{Live, LiveBranch, LIVE_EVERY};
use crate::run::revisit::{Draws, Revisit};
use crate::run::steer::{self, FirstDraw, Lead, Process, Steer, Steering};

/// A branch to run: from which snapshot, with which seed.
#[derive(Clone, Debug)]
pub(crate) struct BranchJob {
    /// The branch's number (1, 2, ...): its place in the merge order.
    pub branch: u64,
    pub seed: u64,
    /// The snapshot it starts from.
    pub tree_id: NodeId,
    /// The node's timeline, which the branch continues.
    pub base: Timeline,
    /// The value the draw pending at the snapshot takes (a draw point).
    pub draw: Option<u64>,
    /// Whether its first draw is a decision point, and whose.
    pub first_draw: FirstDraw,
    /// When Test Composer winds down, for a timeline that has no time yet
    /// (one leaving the root: `winddown.rs`).
    pub winddown: Option<Vtime>,
    /// What a line of descent leaving the root runs, where the bandit
    /// chose (`bandit.rs`): its fault rules, its template and commands.
    pub line: LineChoice,
    /// With `draw`: the way to it, known or guessed, and the draw's
    /// untried values the branch may give inside its timeline
    /// (`steer.rs`).
    pub lead: Option<Lead>,
    pub values: Vec<u64>,
    /// Bytes of snapshots it may hold before it stops taking interval and
    /// draw snapshots: its share of what the tree's budget had left when the
    /// round began (the tree is kept within its budget between rounds,
    /// `eviction.rs`; this keeps it there during one).
    pub memory_share: u64,
    /// The largest snapshot any branch merged so far took: what the next
    /// one is expected to cost at most (none yet: nothing to go by, and the
    /// first is taken while there is room at all).
    pub largest_delta: Option<u64>,
    /// A revisit (`revisit.rs`): the timeline of the branch that asked for
    /// it again, to the draw it names, which becomes a draw point.
    pub revisit: Option<Revisit>,
}

/// A stop at an SDK draw that the branch made a decision point of.
#[derive(Clone, Debug)]
pub(crate) struct DrawStop {
    /// How many outcomes the program makes of the value, if its SDK said.
    pub options: Option<u64>,
    pub armed_by: Armed,
    /// The way here, known or guessed (`steer.rs`).
    pub lead: Lead,
}

/// What made a draw a decision point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Armed {
    /// The branch's start: its first draw.
    Start,
    /// The novelty at this stop (its index): the first draw after it.
    Stop(usize),
    /// A revisit returned to it (`revisit.rs`).
    Revisit,
}

/// The machine where something failed: what its bug record keeps.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub at: Point,
    pub fingerprint: Fingerprint,
    pub console_tail: Vec<String>,
    /// The console's length there.
    pub console_bytes: usize,
    /// The drawn faults that struck in the timeline up to there.
    pub faults: Vec<Episode>,
    /// What Test Composer ran in the timeline up to there.
    pub composer: Option<Composition>,
    /// The buggify sites enabled in the timeline up to there.
    pub buggify: BTreeMap<String, Site>,
    /// What happened in the timeline up to there (`story.rs`), and the
    /// wall time telling it took.
    pub story: Vec<story::Entry>,
    pub story_took: Duration,
    /// What reached the timeline from outside the seed up to there
    /// (the machine's watchdog-forced exits).
    pub outside_seed: Vec<String>,
}

impl Failure {
    /// `nodes`: the target's node names (`story::nodes`).
    pub fn of(m: &Machine, nodes: &[String]) -> Failure {
        let telling = Instant::now();
        let story = story::of(m, &|n| story::name(nodes, n));
        Failure {
            story,
            story_took: telling.elapsed(),
            at: point(m),
            fingerprint: Fingerprint::of(m),
            console_tail: bug::console_tail(&m.console_last_lines(bug::CONSOLE_TAIL_LINES)),
            console_bytes: m.console_len(),
            outside_seed: m.state().nonreplayable.clone(),
            faults: m.state().devices.virtio.struck(),
            composer: Composition::of(m.messages()),
            buggify: m
                .state()
                .devices
                .hc
                .buggify()
                .sites()
                .iter()
                .filter(|(_, s)| s.enabled)
                .map(|(n, s)| (n.clone(), *s))
                .collect(),
        }
    }
}

/// The machine stopped with messages, or at an interval.
pub(crate) struct StopRecord {
    pub at: Point,
    /// Coverage the guest's map showed that was new to the branch.
    pub coverage: FreshBits,
    pub messages: Vec<Vec<u8>>,
    /// Where a message here was the branch's first failure (an always-type
    /// assertion, say).
    pub failure: Option<Failure>,
    /// The machine here, if something was new to the branch or this is an
    /// interval stop.
    pub snapshot: Option<Delta>,
    /// A stop at an interval of virtual time (`Rules::every`), not at a
    /// message.
    pub interval: bool,
    /// The stop is at an SDK draw made a decision point.
    pub draw: Option<DrawStop>,
    /// The stop is at an SDK draw the branch steered: the timeline's next
    /// segment starts here (`steer.rs`).
    pub steer: Option<Steer>,
    /// The draws of the process that spoke here, on the way to here, if
    /// they are the way (`steer.rs`).
    pub way: Option<Lead>,
    /// The process whose message was new here, as the worker saw it, or
    /// where none was (coverage alone, a slice's end) the last to speak
    /// before (`None`: none has, or a guest that names no process).
    pub novel_by: Process,
}

pub(crate) struct BranchRun {
    pub job: BranchJob,
    pub stops: Vec<StopRecord>,
    /// Coverage new to the branch when it ended.
    pub end_coverage: FreshBits,
    /// Every edge it reached that its timeline had not reached before it
    /// (the discovery estimates count timelines per edge, as they count
    /// features: `discovery.rs`).
    pub edges_reached: FreshBits,
    /// Bytes its snapshots hold, the largest of them, and interval and
    /// draw snapshots it did not take to stay within its share
    /// (`BranchJob::memory_share`).
    pub snapshot_bytes: u64,
    pub largest_delta: Option<u64>,
    pub snapshots_skipped: u64,
    /// How it ended: at its deadline (`None`), or with the guest's end.
    pub end: Option<End>,
    /// Where it ended.
    pub end_at: Point,
    /// Where the guest crashed, if that was the branch's first failure.
    pub crash: Option<Failure>,
    /// What each checker said of the timeline's history at its end.
    pub checked: Vec<Checked>,
    /// A checker's violation, and where (if it was the first failure).
    pub violation: Option<(Violation, Option<Failure>)>,
    /// What the timeline says of each claim (`claims.rs`).
    pub claims: TimelineClaims,
    /// With a failure: the console's lines from the first one on.
    pub console_after: Vec<String>,
    /// Landing evidence: what each fault kind touched in this branch.
    pub faults: FaultTally,
    /// How long each Test Composer command of the timeline ran
    /// (`winddown::durations`).
    pub composer_took: Vec<(String, u64)>,
    /// Values of its draw point the branch took and did not reach.
    pub unused_draws: Vec<u64>,
    /// The draw it asks the explorer to return to (`revisit.rs`).
    pub revisit: Option<Revisit>,
    pub vtime_ns: u64,
    pub restore: Duration,
    pub snapshot: Duration,
    pub run: Duration,
}

impl BranchRun {
    /// The wall time its failures' stories took (part of `run`).
    pub fn story_took(&self) -> Duration {
        let failures = self.stops.iter().filter_map(|s| s.failure.as_ref());
        let more = self.crash.iter().chain(self.violation.as_ref().and_then(|(_, f)| f.as_ref()));
        failures.chain(more).map(|f| f.story_took).sum()
    }
}

/// How branches are run, the same for every worker.
pub(crate) struct Rules {
    pub span: Span,
    /// Snapshots at every multiple of this much virtual time since the
    /// root, whether or not something was new there.
    pub every: Option<Vtime>,
    /// Where timelines start.
    pub root: Vtime,
    /// The console's complete lines at the root.
    pub root_console_lines: usize,
    /// Whether to take snapshots where something is new.
    pub snapshots: bool,
    /// Whether SDK draws are decision points (`schedule.rs`).
    pub draws: bool,
    /// Whether a branch asks to return to a draw before something new
    /// (`revisit.rs`).
    pub revisits: bool,
    /// Checkers run at the end of the branch's timeline.
    pub checkers: Vec<CheckerSpec>,
    /// Claims observed at its end.
    pub claims: Vec<ClaimSpec>,
    /// The target's node names, for bugs' stories (`story::nodes`).
    pub nodes: Vec<String>,
}

impl Rules {
    /// Where a branch starting at `from` ends, at the latest.
    pub fn deadline(&self, from: Vtime) -> Vtime {
        match self.span {
            Span::Whole { limit } => Vtime(self.root.nanos().saturating_add(limit.nanos())).max(from),
            Span::Slice(slice) => Vtime(from.nanos().saturating_add(slice.nanos())),
        }
    }

    /// The first interval point after `now`.
    fn next_interval(&self, now: Vtime) -> Option<Vtime> {
        let every = self.every.filter(|e| e.nanos() > 0 && self.snapshots)?.nanos();
        let k = now.nanos().saturating_sub(self.root.nanos()) / every + 1;
        Some(Vtime(self.root.nanos().saturating_add(k.saturating_mul(every))))
    }
}

/// Runs `job` on `machine` (standing at `cursor` in `tree`).
pub(crate) fn run(
    job: BranchJob,
    known: &Knowledge,
    rules: &Rules,
    tree: &SnapshotTree,
    cursor: &mut Cursor,
    machine: &mut Machine,
    live: &Live,
) -> Result<BranchRun> {
    let started = Instant::now();
    tree.reset(cursor, machine, job.tree_id)?;
    let restore = started.elapsed();
    if let Some(on) = &job.base.line.rules {
        assert_eq!(machine.fault_rules().as_ref(), Some(on), "a snapshot holds its line's fault rules");
    }
    assert_eq!(machine.template(), job.base.line.template.as_deref(), "a snapshot holds its line's template");
    assert_eq!(machine.composer_commands(), job.base.line.commands.as_deref(), "a snapshot holds its line's commands");
    if let Some(on) = &job.line.rules {
        // A line leaving the root: the rules chosen replace swarm's, before
        // the re-seed draws each rule's next fault (as a replay holds them).
        machine.choose_fault_rules(on);
    }
    if let Some(template) = &job.line.template {
        machine.choose_template(template);
    }
    if let Some(on) = &job.line.commands {
        machine.choose_commands(on);
    }
    machine.reseed(job.seed)?;
    assert_eq!(machine.winddown().map(Vtime::nanos), job.base.winddown_ns, "a snapshot holds its timeline's wind-down");
    if let Some(at) = job.winddown.filter(|_| machine.winddown().is_none()) {
        machine.set_winddown(at);
    }
    if let Some(value) = job.draw {
        // A draw point: the snapshot stands at a draw the guest announced.
        machine.choose_draw(value)?;
    }
    let mut known = known.clone();
    let start_map = machine.coverage_map().map(<[u8]>::to_vec);
    // The first draw after something new (or after the start, if the job
    // says) is a decision point: which stop armed it.
    // A revisit makes no decision of its own: it takes again those of the
    // branch it follows, to the draw it returns to.
    let revisit = job.revisit.clone().filter(|_| rules.draws && rules.snapshots);
    // With the process whose next draw it is (`None`: any).
    let mut armed: Option<(Armed, Process)> = match job.first_draw {
        FirstDraw::Armed(by) if rules.draws && revisit.is_none() => Some((Armed::Start, by)),
        _ => None,
    };
    let mut draws = Draws::default();
    // The last process to speak (a hit, a guidance, setup complete): whose
    // novelty a snapshot stands after where no message names it (coverage
    // alone, a slice's end). A process that only draws, as noise does, says
    // nothing.
    let mut last_spoke: Process = match job.first_draw {
        FirstDraw::Armed(by) => by,
        FirstDraw::Unarmed => None,
    };
    let mut steering = if rules.draws && revisit.is_none() {
        Steering::new(job.base.segments.is_empty(), job.draw, job.lead.clone(), job.values.clone())
    } else {
        Steering::new(false, None, None, Vec::new())
    };
    let before = FaultTally::mark(machine);
    let from = machine.now();
    let deadline = rules.deadline(from);
    let mut stops = Vec::new();
    let mut snapshot = Duration::ZERO;
    // (A cell: the interval stop reads it while `capture` may add to it.)
    let snapshot_bytes = std::cell::Cell::new(0u64);
    let largest_delta = std::cell::Cell::new(job.largest_delta);
    let mut snapshots_skipped = 0u64;
    // The console's length at the branch's first failure.
    let mut failed_at: Option<usize> = None;
    // Whether the snapshots it holds leave room for one more as large as
    // the largest yet, within its share of the memory budget.
    let room = || snapshot_bytes.get() + largest_delta.get().unwrap_or(0) < job.memory_share;
    let mut capture = |machine: &mut Machine, cursor: &mut Cursor| -> Result<Delta> {
        let taken = Instant::now();
        let delta = tree.capture(cursor, machine)?;
        snapshot += taken.elapsed();
        let bytes = delta.bytes() as u64;
        snapshot_bytes.set(snapshot_bytes.get() + bytes);
        largest_delta.set(Some(largest_delta.get().unwrap_or(0).max(bytes)));
        Ok(delta)
    };
    // When the live display last heard of this branch.
    let mut shown = started;
    let (end, end_coverage) = loop {
        let interval = rules.next_interval(machine.now()).filter(|&t| t < deadline);
        let stop = match machine.run_until_or_wall(interval.unwrap_or(deadline), shown + LIVE_EVERY) {
            // Paused on the wall clock, invisibly: where it is, for the
            // progress display, and on.
            Ok(None) => {
                let last_line = machine.console_last_lines(1);
                let last_line = String::from_utf8_lossy(&last_line).trim().to_owned();
                let vtime = Vtime(machine.now().nanos().saturating_sub(rules.root.nanos()));
                live.update(LiveBranch {
                    branch: job.branch,
                    vtime,
                    last_line: Some(last_line).filter(|l| !l.is_empty()),
                });
                shown = Instant::now();
                continue;
            }
            // Interrupted after its first failure: the bug is what the
            // branch was for, and the rest of its timeline only context, so
            // the branch ends here and its bug is kept.
            Err(hvsim_vmm::Error::Interrupted) if failed_at.is_some() => break (None, known.new_coverage(machine)),
            stop => stop?.expect("paused is handled above"),
        };
        match stop {
            Stop::Message => {
                let at = point(machine);
                let coverage = known.new_coverage(machine);
                let mut new_here = coverage.count();
                let mut fails = false;
                let mut draw_options = None;
                let mut progress = new_here > 0;
                // Who said what (`steer.rs`): the process whose message made
                // progress (`None`: coverage alone, or a guest that does not
                // say), the one that draws, and the last to speak (a hit, a
                // guidance or setup complete: not a draw, which noise makes).
                let mut progress_by: Process = None;
                let mut drawer: Process = None;
                let mut spoke: Process = None;
                let mut approached_by: Process = None;
                let mut novel_by: Process = None;
                // Assertions reached for the first time, unsatisfied.
                let mut approached = Vec::new();
                let mut deeper = false;
                let mut messages = Vec::new();
                for msg in machine.take_messages() {
                    let o = known.process(&msg.bytes);
                    new_here += o.new_signals;
                    progress |= o.progress;
                    if o.progress {
                        progress_by = msg.sender;
                    }
                    if o.onward {
                        // A passing hit or a guidance, new or not.
                        steering.onward(msg.sender);
                    }
                    if o.onward || o.progress || o.setup_complete {
                        spoke = msg.sender;
                    }
                    fails |= o.bug.is_some();
                    if o.draw.is_some() {
                        draw_options = o.draw;
                        drawer = msg.sender;
                    }
                    messages.push(msg.bytes);
                    if o.new_signals > 0 {
                        novel_by = msg.sender;
                        if o.approached.is_some() {
                            approached_by = msg.sender;
                        }
                        approached.extend(o.approached);
                        // What the merge counts as a step deeper.
                        deeper |= o.progress && o.reached.is_some();
                    }
                }
                // What no message names (new coverage alone) is credited to
                // the last process that spoke.
                last_spoke = spoke.or(last_spoke);
                let novel_by = novel_by.or(last_spoke);
                let progress_by = progress_by.or(last_spoke);
                let failure = (fails && failed_at.is_none()).then(|| Failure::of(machine, &rules.nodes));
                if let Some(f) = &failure {
                    failed_at = Some(f.console_bytes);
                }
                let open = rules.snapshots && failed_at.is_none();
                // What a sometimes-type assertion failing for the first time
                // arms nothing: the draws after it are those of another try.
                if progress && rules.draws && revisit.is_none() {
                    armed = Some((Armed::Stop(stops.len()), progress_by));
                    steering.progress();
                    tracing::trace!(branch = job.branch, stop = stops.len(), "progress");
                }
                if failed_at.is_none() && rules.revisits && revisit.is_none() {
                    draws.approached(approached_by, &approached);
                    if deeper {
                        draws.deeper();
                    }
                }
                let drawing = draw_options.is_some() && machine.draw_pending();
                let pending = drawing && open;
                // Novelty arms the next draw of the process that made it (of
                // any, where none is named).
                let arms = |(_, by): (Armed, Process)| by.is_none() || by == drawer;
                let mut draw = match (draw_options, armed.filter(|&a| arms(a))) {
                    (Some(options), Some((armed_by, _))) if pending => {
                        armed = None;
                        Some(DrawStop { options, armed_by, lead: steering.lead(drawer) })
                    }
                    // The draw a revisit returns to.
                    (Some(options), _) if pending && revisit.as_ref().is_some_and(|r| r.draw == draws.next()) => {
                        Some(DrawStop {
                            options,
                            armed_by: Armed::Revisit,
                            lead: Lead { values: Vec::new(), exact: false, process: drawer },
                        })
                    }
                    _ => None,
                };
                // A decision point is a place among many, as an interval
                // is: taken within the branch's share of the memory budget
                // only. What is new is always kept.
                if draw.is_some() && new_here == 0 && !room() {
                    draw = None;
                    snapshots_skipped += 1;
                }
                // A revisit takes no snapshot but at its draw.
                let snap = (new_here > 0 && revisit.is_none() || draw.is_some()) && open;
                let delta = if snap { Some(capture(machine, cursor)?) } else { None };
                let way = steering.way(spoke.or(drawer));
                let returned = draw.is_some() && revisit.is_some();
                // After the snapshot, which stands before the draw's value.
                let steer = match pending.then(|| if draw.is_none() { steering.draw(drawer) } else { None }) {
                    _ if returned => None,
                    // A revisit steers where the branch it follows did.
                    Some(None) if revisit.is_some() => revisit.as_ref().and_then(|r| r.steer_at(draws.next())),
                    Some(Some(value)) => Some(Steer { seed: steer::seed(job.seed, steering.steered()), value }),
                    Some(None) => {
                        steering.stream_draw(drawer, machine.pending_draw_value());
                        None
                    }
                    None => None,
                };
                if let Some(Steer { seed, value }) = steer {
                    machine.reseed(seed)?;
                    machine.choose_draw(value)?;
                    tracing::trace!(branch = job.branch, stop = stops.len(), value, "steered");
                }
                if drawing {
                    draws.drawn(drawer, draw.is_some(), steer);
                }
                stops.push(StopRecord {
                    at,
                    coverage,
                    messages,
                    failure,
                    snapshot: delta,
                    interval: false,
                    draw,
                    steer,
                    way,
                    novel_by,
                });
                if returned {
                    // The revisit's work is done: the draw point stands.
                    break (None, FreshBits::default());
                }
            }
            Stop::Deadline if interval.is_some() && machine.now() < deadline && revisit.is_some() => {}
            Stop::Deadline if interval.is_some() && machine.now() < deadline => {
                // A place a later branch can start the rest of the timeline
                // from, under other faults.
                let coverage = known.new_coverage(machine);
                // Within its share of the memory budget only, as a draw.
                let within = room();
                snapshots_skipped += u64::from(failed_at.is_none() && !within);
                let delta = if failed_at.is_none() && within { Some(capture(machine, cursor)?) } else { None };
                let at = point(machine);
                stops.push(StopRecord {
                    at,
                    coverage,
                    messages: Vec::new(),
                    failure: None,
                    snapshot: delta,
                    interval: true,
                    draw: None,
                    steer: None,
                    way: None,
                    novel_by: last_spoke,
                });
            }
            Stop::Deadline => {
                let coverage = known.new_coverage(machine);
                // A slice's end is where the timeline goes on: a place to
                // branch from, new (edges found after the last message) or
                // not (an interval, within the branch's share of the memory
                // budget), so that a later branch can run the next slice.
                let new = coverage.count() > 0;
                let slice_end =
                    matches!(rules.span, Span::Slice(_)) && rules.snapshots && failed_at.is_none() && revisit.is_none();
                snapshots_skipped += u64::from(slice_end && !new && !room());
                if slice_end && (new || room()) {
                    let delta = Some(capture(machine, cursor)?);
                    let at = point(machine);
                    stops.push(StopRecord {
                        at,
                        coverage,
                        messages: Vec::new(),
                        failure: None,
                        snapshot: delta,
                        interval: !new,
                        draw: None,
                        steer: None,
                        way: None,
                        novel_by: last_spoke,
                    });
                    break (None, FreshBits::default());
                }
                break (None, coverage);
            }
            Stop::Ended(end) => break (Some(end), known.new_coverage(machine)),
        }
    };
    let crashed = end.as_ref().is_some_and(is_crash);
    let crash = (crashed && failed_at.is_none()).then(|| Failure::of(machine, &rules.nodes));
    // A revisit's timeline is a prefix of one already checked.
    let histories = if rules.checkers.is_empty() || revisit.is_some() {
        Histories::new()
    } else {
        crate::record::sdk::histories(machine.messages())
    };
    let (checked, violation) = checkers::run(&rules.checkers, &histories);
    let struck = machine.state().devices.virtio.struck();
    // A service that exited with an error in the timeline (since its root,
    // wherever this branch started) before any fault struck in it: nothing
    // the exploration did explains it. Faults the plan writes down are in
    // force from the start.
    let first_fault = if machine.state().devices.virtio.plan.writes_faults() {
        Some(0)
    } else {
        struck.iter().map(|f| f.start_ns).min()
    };
    let service_exits: Vec<_> = Services::from_line(rules.root_console_lines)
        .exited(machine)
        .into_iter()
        .filter(|e| e.status != 0 && first_fault.is_none_or(|f| e.vtime_ns < f))
        .collect();
    let claims = claims::observe(
        &rules.claims,
        &rules.checkers,
        &claims::TimelineEnd {
            messages: machine.messages(),
            histories: &histories,
            faults: &struck,
            checked: &checked,
            end: end.as_ref(),
            end_ns: machine.now().nanos(),
            failed_ns: stops.iter().find_map(|s| s.failure.as_ref().map(|f| f.at.vtime_ns)),
            service_exits: &service_exits,
        },
    );
    let first_failure = failed_at.is_none() && crash.is_none();
    let violation = violation.map(|v| (v, first_failure.then(|| Failure::of(machine, &rules.nodes))));
    let console_after = failed_at.map(|from| bug::console_tail(&machine.console_from(from))).unwrap_or_default();
    let mut faults = FaultTally::default();
    faults.add(&before, machine);
    let composer_took =
        Composition::of(machine.messages()).map_or_else(Vec::new, |c| winddown::durations(&c, machine.now()));
    Ok(BranchRun {
        composer_took,
        stops,
        end_coverage,
        edges_reached: machine
            .coverage_map()
            .map(|m| FreshBits::set_since(start_map.as_deref(), m))
            .unwrap_or_default(),
        snapshot_bytes: snapshot_bytes.get(),
        largest_delta: largest_delta.get(),
        snapshots_skipped,
        end,
        end_at: point(machine),
        crash,
        checked,
        violation,
        claims,
        console_after,
        faults,
        unused_draws: steering.unused(),
        revisit: draws.wanted(),
        vtime_ns: machine.now().nanos() - from.nanos(),
        restore,
        snapshot,
        run: started.elapsed().saturating_sub(restore + snapshot),
        job,
    })
}
