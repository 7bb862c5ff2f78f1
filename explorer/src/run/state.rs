//! The exploration as the loop keeps it while it runs ([`State`]): what it
//! knows, its bugs, its schedule and tallies, how it is ending. It becomes
//! the [`Exploration`] the loop hands out.

use std::time::{Duration, Instant};

use hvsim_guest_image::host::Host;
use hvsim_guest_image::world::World;
use hvsim_vmm::profiler::GuestProfile;
use hvsim_vmm::{Interrupt, Vtime};

use crate::record::checkers::CheckerTally;
use crate::record::claims::{ClaimTally, HarnessTally};
use crate::record::config::ExploreConfig;
use crate::record::discovery::Discovered;
use crate::record::error::{ExploreError, Result};
use crate::record::exploration::{Ending, Exploration, Phases, RootInfo, SeriesPoint, TimelineEnds, TreeMemory};
use crate::record::faults::FaultTally;
use crate::record::shard::Shards;
use crate::record::timeline::Point;
use crate::run::bandit::Bandit;
use crate::run::bugs::Bugs;
use crate::run::knowledge::Knowledge;
use crate::run::schedule::Schedule;
use crate::run::steer::Process;
use crate::run::watch::Watch;
use crate::run::workers::Checked;

/// The reason the explorer raises its machines' interrupt with when an
/// error ends the exploration.
pub(crate) const ENDED_BY_ERROR: usize = usize::MAX;

/// Milliseconds, with the fraction: phases sum many short stretches (a
/// branch of the demo takes 2-3 ms), which whole milliseconds would cut.
pub(crate) fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The reason the explorer's timer raises its machines' interrupt with
/// when the wall-time budget is spent: the exploration has finished.
pub(crate) const TIME_UP: usize = usize::MAX - 1;

/// How an exploration whose machines were interrupted for `reason` ended:
/// its wall-time budget was spent (after `branches`), or it was
/// interrupted.
pub(crate) fn interrupted(reason: usize, branches: u64) -> Ending {
    if reason == TIME_UP {
        Ending::TimeSpent { branches }
    } else {
        Ending::Interrupted { reason }
    }
}

/// Everything an [`Exploration`] is made of, as the loop keeps it.
pub(crate) struct State {
    pub(crate) started: Instant,
    pub(crate) known: Knowledge,
    pub(crate) bugs: Bugs,
    pub(crate) root: RootInfo,
    /// The features reached on the way to the root (`Schedule`).
    pub(crate) root_reached: Vec<String>,
    /// The process that said setup complete: the one whose draws a branch
    /// from the root makes decisions of (`steer.rs`).
    pub(crate) set_up_by: Process,
    pub(crate) schedule: Schedule,
    /// The fault rules' bandit (`--schedule bandit`).
    pub(crate) bandit: Bandit,
    pub(crate) branches: u64,
    pub(crate) vtime_total: u64,
    pub(crate) series: Vec<SeriesPoint>,
    pub(crate) first_bug: Option<(u64, u64)>,
    pub(crate) phases: Phases,
    pub(crate) faults: FaultTally,
    pub(crate) timelines: TimelineEnds,
    pub(crate) tree: TreeMemory,
    /// The largest snapshot a merged branch took (`BranchJob::largest_delta`).
    pub(crate) largest_delta: Option<u64>,
    pub(crate) ending: Ending,
    pub(crate) checkers: Vec<CheckerTally>,
    pub(crate) claims: Vec<ClaimTally>,
    pub(crate) harness: HarnessTally,
    pub(crate) host_limits: Vec<String>,
    pub(crate) world: World,
    /// Revisits merged branches asked for, to run first (`revisit.rs`).
    pub(crate) revisits: std::collections::VecDeque<crate::run::branch::BranchJob>,
}

impl State {
    pub(crate) fn new(config: &ExploreConfig, host: &Host) -> Result<State> {
        Ok(State {
            started: Instant::now(),
            known: Knowledge::default(),
            bugs: Bugs::new(config.reexecutions),
            root: RootInfo {
                point: Point { events: 0, vtime_ns: 0 },
                setup_complete: false,
                ended: None,
                restored: false,
                setup_failed: None,
            },
            root_reached: Vec::new(),
            set_up_by: None,
            schedule: Schedule::default(),
            bandit: Bandit::default(),
            branches: 0,
            vtime_total: 0,
            series: Vec::new(),
            first_bug: None,
            phases: Phases::default(),
            faults: FaultTally::default(),
            timelines: TimelineEnds::default(),
            tree: TreeMemory { budget_bytes: config.snapshot_memory, ..TreeMemory::default() },
            largest_delta: None,
            ending: Ending::Running,
            checkers: config.checkers.iter().map(CheckerTally::new).collect(),
            claims: config.claims.iter().map(ClaimTally::new).collect(),
            harness: HarnessTally::default(),
            host_limits: host.probes.limits(),
            world: World::of(&config.target, host)?,
            revisits: Default::default(),
        })
    }

    pub(crate) fn exploration(&self, config: &ExploreConfig, guest_profile: Option<GuestProfile>) -> Exploration {
        Exploration {
            target: config.target.clone(),
            seed: config.seed,
            budget: config.budget,
            span: config.span,
            snapshot_every_ns: config.snapshot_every.map(Vtime::nanos),
            timelines: self.timelines,
            tree: self.tree,
            branch_from_snapshots: config.branch_from_snapshots,
            policy: config.policy,
            draws: self.schedule.draws,
            rules: self.bandit.rules.clone(),
            templates: self.bandit.templates.clone(),
            commands: self.bandit.commands.clone(),
            batch: config.batch,
            workers: config.workers,
            root: self.root.clone(),
            branches: self.branches,
            snapshots: self.schedule.len(),
            signals: self.known.signals.total,
            wall_ms: ms(self.started.elapsed()),
            vtime_ns: self.vtime_total,
            coverage_edges: self.known.signals.coverage.edges(),
            instrumentation: self.known.instrumentation.clone(),
            assertions: self.known.assertions.clone(),
            bugs: self.bugs.records.clone(),
            events: self.known.events.clone(),
            composer: self.known.composer.clone(),
            checkers: self.checkers.clone(),
            claims: self.claims.clone(),
            harness: self.harness.clone(),
            host_limits: self.host_limits.clone(),
            garbage: self.known.garbage.clone(),
            dropped: self.known.dropped.clone(),
            faults: self.faults.clone(),
            series: self.series.clone(),
            discovery: Discovered {
                incidence: self.incidence(),
                until_saturated: config.until_saturated,
                saturated_at: self.saturated(config).then_some(self.branches),
            },
            first_bug: self.first_bug,
            phases: self.phases,
            ending: self.ending.clone(),
            shards: Shards::of(config.shard),
            world: self.world.clone(),
            coverage: self.known.signals.coverage.bits(),
            guest_profile,
        }
    }

    /// Whether the stop rule, if given, says the exploration is done:
    /// decided from merged knowledge, after each merged branch, so the
    /// worker count never changes where it stops.
    pub(crate) fn saturated(&self, config: &ExploreConfig) -> bool {
        config.until_saturated.is_some_and(|rule| rule.reached(&self.incidence()))
    }

    /// What the discovery estimates go by: each feature's count of
    /// timelines that reached it, over the timelines merged. Revisits are
    /// branches but not timelines of their own (`revisit.rs`): counted as
    /// timelines that found nothing, they would lower the estimates.
    pub(crate) fn incidence(&self) -> crate::record::discovery::Incidence {
        self.schedule.incidence(self.branches - self.schedule.draws.revisits)
    }

    /// Ends the exploration with `e`, which happened `during` something,
    /// unless it already ended: an error that follows an interruption is
    /// the interruption's doing.
    pub(crate) fn fail(&mut self, interrupt: &Interrupt, during: String, e: ExploreError) {
        if self.ending != Ending::Running {
            return;
        }
        self.ending = match interrupt.reason() {
            Some(reason) => interrupted(reason, self.branches),
            None => Ending::Failed { during, error: e.to_string() },
        };
        interrupt.raise(ENDED_BY_ERROR);
    }

    /// Counts a finished check (a re-execution of a bug's timeline); the
    /// record goes out again once the bug is confirmed.
    pub(crate) fn checked(&mut self, c: Checked, watch: &mut dyn Watch, interrupt: &Interrupt) {
        self.phases.reexecution_ms += ms_f(c.took);
        match c.outcome {
            Ok(outcome) => {
                if self.bugs.reexecuted(c.bug, &outcome) {
                    let record = &self.bugs.records[c.bug];
                    tracing::debug!(bug = %record.id, "{}", record.reproduction_words());
                    if let Err(e) = watch.bug(record) {
                        self.fail(interrupt, format!("writing {}", record.id), e);
                    }
                }
            }
            Err(e) => {
                let during = format!("a re-execution of {}", self.bugs.records[c.bug].id);
                self.fail(interrupt, during, e);
            }
        }
    }

    /// Hands out the records of bugs found since `from` (their index).
    pub(crate) fn found(&mut self, from: usize, watch: &mut dyn Watch, interrupt: &Interrupt) {
        for i in from..self.bugs.records.len() {
            if let Err(e) = watch.bug(&self.bugs.records[i]) {
                self.fail(interrupt, format!("writing {}", self.bugs.records[i].id), e);
            }
        }
    }
}
