//! The root: the target run from its master seed until it reports setup
//! complete, or a saved root (`roots.rs`) restored in its place; and the
//! bugs found before it, re-executed from a fresh start. Every branch
//! starts from what this leaves.

use std::time::Instant;

use hvsim_guest_image::host::Host;
use hvsim_vmm::{Interrupt, Machine, Stop, Vtime};

use crate::record::bug::{BugKind, Later};
use crate::record::config::ExploreConfig;
use crate::record::error::{ExploreError, Result};
use crate::record::exploration::Ending;
use crate::record::faults::FaultTally;
use crate::record::services::Services;
use crate::record::story;
use crate::record::timeline::{is_crash, point, Timeline};
use crate::run::branch::Failure;
use crate::run::bugs::{BugContext, Filed};
use crate::run::replay;
use crate::run::roots::{RootId, Roots, SavedRoot};
use crate::run::state::{ms, ms_f, State};
use crate::run::watch::{Progress, SetupProgress, Watch, SETUP_REPORT_EVERY};
use crate::run::workers::Checked;
use crate::StartOptions;

/// The root's setup runs in steps of this much virtual time, with a
/// progress report after each.
const SETUP_STEP: Vtime = Vtime(10_000_000);

/// Makes the root, or restores a saved one, and re-executes the bugs found
/// before it. The machine at the root, and whether branches can start
/// there (false: the target ended after a bug, and there is no root).
pub(crate) fn root(
    config: &ExploreConfig,
    host: &Host,
    start: &StartOptions,
    cx: &BugContext,
    state: &mut State,
    interrupt: &Interrupt,
    watch: &mut dyn Watch,
) -> Result<(Machine, bool)> {
    let target = &config.target;
    // A Linux root is kept (roots.rs): a saved one is restored rather than
    // made again. Not with a guest profile, which covers the whole run.
    let roots = if config.saved_roots && target.is_linux() && !start.cold_boot && start.profiler.is_none() {
        let store = match &config.roots_dir {
            Some(dir) => Roots::open_at(dir.clone())?,
            None => Roots::open()?,
        };
        Some((store, RootId::new(target, cx.world, config.seed)?))
    } else {
        None
    };
    let restored = roots
        .as_ref()
        .filter(|_| !config.fresh_root)
        .and_then(|(roots, id)| roots.get(id, &host.settings(true, start.watchdog)))
        .filter(|(_, saved)| saved.point.vtime_ns <= config.setup_limit.nanos());
    if let (None, Some((roots, id)), true) = (&restored, &roots, config.require_root) {
        return Err(roots.missing(id));
    }
    let (machine, branchable) = match restored {
        Some((mut machine, saved)) => {
            start.prepare(&mut machine);
            machine.set_stop_on_message(true);
            restored_root(&mut machine, &saved, state);
            state.phases.start_ms = ms_f(state.started.elapsed());
            watch.progress(Progress::RootRestored { made_ms: saved.wall_ms });
            (machine, true)
        }
        None => {
            watch.progress(Progress::Starting);
            let launch = target.start(config.seed, host, start)?;
            watch.progress(Progress::Started { boot: launch.boot.kind, wall_ms: launch.boot.wall_ms });
            let mut machine = launch.machine;
            state.phases.start_ms = ms_f(state.started.elapsed());
            machine.set_stop_on_message(true);
            // Messages before the run (none, or the boot's) are not its own.
            let first_message = machine.messages().len();

            // The root: run until setup complete.
            let before = FaultTally::mark(&machine);
            let setup_from = machine.now();
            let setup_started = Instant::now();
            let setup = setup(&mut machine, config, cx, state, watch);
            state.phases.setup_ms = ms_f(setup_started.elapsed());
            state.root.point = point(&machine);
            state.faults.add(&before, &machine);
            // False: the target ended after a bug, and there is no root.
            let branchable = setup.unwrap_or_else(|e| {
                state.fail(interrupt, "the root's setup".into(), e);
                false
            });
            let clean = branchable && state.root.setup_complete && state.bugs.records.is_empty();
            let saving = roots.as_ref().filter(|_| clean && state.ending == Ending::Running);
            if branchable {
                watch.progress(Progress::RootMade {
                    start_ms: state.phases.start_ms,
                    setup_ms: state.phases.setup_ms,
                    setup_vtime: Vtime(machine.now().nanos() - setup_from.nanos()),
                    saved: saving.is_some(),
                });
            }
            if let Some((roots, id)) = saving {
                let saved = SavedRoot {
                    id: id.clone(),
                    point: state.root.point,
                    faults: state.faults.clone(),
                    first_message,
                    wall_ms: state.phases.to_root_ms(),
                };
                // Losing it costs the next exploration time, nothing else;
                // but a root step's root is what its shards need.
                match roots.put(&saved, &mut machine) {
                    Err(e) if config.roots_dir.is_some() => return Err(e),
                    Err(e) => tracing::warn!("cannot save the root: {e}"),
                    Ok(()) => {}
                }
            }
            (machine, branchable)
        }
    };
    // Bugs before the root are re-executed from a fresh start.
    let checking = Instant::now();
    for i in 0..state.bugs.records.len() {
        for _ in 0..config.reexecutions {
            if state.ending != Ending::Running {
                break;
            }
            let took = Instant::now();
            // Before the root: no saved root is of use.
            let outcome = replay::replay(&state.bugs.records[i], host, start, None, None, &mut ()).map(|(o, _)| o);
            state.checked(Checked { bug: i, outcome, took: took.elapsed() }, watch, interrupt);
        }
    }
    state.phases.reexecution_wait_ms += ms_f(checking.elapsed());
    Ok((machine, branchable))
}

/// Takes in a saved root as if the exploration had just run it: what its
/// messages (every one since power-on) and coverage say, and the faults
/// that landed before it.
fn restored_root(machine: &mut Machine, saved: &SavedRoot, state: &mut State) {
    state.known.new_coverage(machine);
    let messages: Vec<_> = machine.messages().iter_from(saved.first_message).cloned().collect();
    for msg in messages {
        let o = state.known.process(&msg.bytes);
        assert!(o.bug.is_none(), "only roots reached without a bug are saved");
        state.root.setup_complete |= o.setup_complete;
        if o.setup_complete {
            state.set_up_by = msg.sender;
        }
        state.root_reached.extend(o.reached);
    }
    assert!(state.root.setup_complete, "only roots at setup complete are saved");
    state.root.point = saved.point;
    state.root.restored = true;
    state.faults = saved.faults.clone();
}

/// Where the root's setup stands, for the progress display.
fn setup_progress(
    machine: &Machine,
    config: &ExploreConfig,
    services: &mut Services,
    started: Instant,
    sdk_messages: u64,
) -> Progress {
    Progress::Setup(SetupProgress {
        vtime: machine.now(),
        limit: config.setup_limit,
        elapsed: started.elapsed(),
        sdk_messages,
        exits: machine.trace_state().events,
        services: services.views(),
        lines: services.take_lines(),
    })
}

/// Runs the root until the target reports setup complete (or the setup
/// limit): true. False if there can be no root: the target ended first
/// after a bug (the end is then in that bug's record), or a service exited
/// with an error (`RootInfo::setup_failed`; the harness failed, and a
/// setup complete may never come); an error if the target ended without a
/// bug.
fn setup(
    machine: &mut Machine,
    config: &ExploreConfig,
    cx: &BugContext,
    state: &mut State,
    watch: &mut dyn Watch,
) -> Result<bool> {
    let setup_started = Instant::now();
    let mut first: Option<Filed> = None;
    // With -v, every console line is shown as it comes.
    let mut services = Services::of(&story::nodes(cx.target), tracing::enabled!(tracing::Level::INFO));
    let mut sdk_messages = 0u64;
    let mut exits = Vec::new();
    let mut reported = Instant::now();
    let mut step = Vtime(0);
    while !state.root.setup_complete {
        if machine.now() >= step {
            step = Vtime(machine.now().nanos().saturating_add(SETUP_STEP.nanos()).min(config.setup_limit.nanos()));
        }
        let stop = machine.run_until_or_wall(step, reported + SETUP_REPORT_EVERY)?;
        // The console is read at a pause too, for the display; the exits
        // it shows are judged at the next stop, as without the pause.
        exits.extend(services.exited(machine));
        // Paused on the wall clock, the machine is where it would have been
        // (`run_until_or_wall`): a report, and the same step again.
        let Some(stop) = stop else {
            watch.progress(setup_progress(machine, config, &mut services, setup_started, sdk_messages));
            reported = Instant::now();
            continue;
        };
        if matches!(stop, Stop::Message) {
            state.known.new_coverage(machine);
            for msg in machine.take_messages() {
                sdk_messages += 1;
                let o = state.known.process(&msg.bytes);
                state.root.setup_complete |= o.setup_complete;
                if o.setup_complete {
                    state.set_up_by = msg.sender;
                }
                state.root_reached.extend(o.reached);
                let Some(kind) = o.bug else { continue };
                let at = point(machine);
                match first {
                    None => {
                        let timeline = Timeline::at(at);
                        let failure = Failure::of(machine, &story::nodes(cx.target));
                        let filed = state.bugs.record(kind, timeline, &failure, &mut state.known.assertions, cx, 0);
                        first = Some(filed);
                        state.first_bug = Some((0, ms(state.started.elapsed())));
                        watch.bug(&state.bugs.records[filed.index])?;
                    }
                    Some(filed) => {
                        let later = Later { at, what: kind.describe() };
                        state.bugs.later(filed, &kind, later, &mut state.known.assertions);
                    }
                }
            }
        }
        if state.root.setup_complete {
            // The last report: the lines that came with setup complete.
            watch.progress(setup_progress(machine, config, &mut services, setup_started, sdk_messages));
            break;
        }
        // A service that failed before the system was ready, with no fault
        // to blame, is the harness's failure: named with what it said last.
        if let Some(exit) = std::mem::take(&mut exits).into_iter().find(|e| e.status != 0) {
            if first.is_none() && machine.state().devices.virtio.struck().is_empty() {
                state.harness.timelines += 1;
                state.harness.example = Some(exit.describe());
                state.root.setup_failed = Some(exit);
                return Ok(false);
            }
        }
        match stop {
            Stop::Message => {}
            Stop::Deadline if step >= config.setup_limit => break,
            Stop::Deadline => {
                watch.progress(setup_progress(machine, config, &mut services, setup_started, sdk_messages));
                reported = Instant::now();
            }
            Stop::Ended(end) => {
                let Some(filed) = first else {
                    return Err(ExploreError::Target(format!(
                        "the target ended before reporting setup complete: {}",
                        end.detail()
                    )));
                };
                let what = BugKind::Crash { end: end.clone() }.describe();
                if is_crash(&end) {
                    let later = Later { at: point(machine), what: what.clone() };
                    state.bugs.later(filed, &BugKind::Crash { end: end.clone() }, later, &mut state.known.assertions);
                }
                state.root.ended = Some(end.detail());
                return Ok(false);
            }
        }
    }
    Ok(true)
}
