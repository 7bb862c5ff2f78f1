//! The explorer's workers: one machine each, each on its own thread (the
//! calling thread is worker 0, with the machine that ran the root), all
//! sharing the snapshot tree. Two kinds of work, in two queues:
//!
//! - a round's *branches*, handed out together and returned in branch
//!   order, so which worker ran a branch, and when, changes how long the
//!   round takes and nothing else;
//! - *checks*, the re-executions that confirm a new bug, which only ever
//!   change that bug's record. A worker thread takes a branch when one is
//!   waiting and a check otherwise; the calling thread takes only branches
//!   while a round runs, so with more than one worker the checks run beside
//!   the next rounds instead of holding them up. With one worker the
//!   explorer runs them between rounds ([`Pool::run_checks`]).
//!
//! Workers only read the tree while they work on a branch, and while a
//! check resets its machine to the root; the explorer adds a round's
//! snapshots to it between rounds, when no branch runs.

use std::sync::{Arc, RwLock};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use hvsim_snapshot::{Cursor, SnapshotTree};
use hvsim_vmm::machine::HostSettings;
use hvsim_vmm::profiler::{GuestProfile, ProfilerConfig};
use hvsim_vmm::{Interrupt, Machine};

use crate::record::bug::BugRecord;
use crate::record::error::{ExploreError, Result};
use crate::run::branch::{self, BranchJob, BranchRun, Rules};
use crate::run::knowledge::Knowledge;
use crate::run::live::Live;
use crate::run::replay::{self, ReplayOutcome};

/// A re-execution of bug `bug`'s timeline from the root.
pub(crate) struct Check {
    /// Index of the bug in the exploration's records.
    pub bug: usize,
    pub record: Arc<BugRecord>,
}

/// A check's outcome, and the worker time it took.
pub(crate) struct Checked {
    pub bug: usize,
    pub outcome: Result<ReplayOutcome>,
    pub took: Duration,
}

enum Job {
    Branch(Box<BranchJob>, Arc<Knowledge>),
    Check(Check),
}

enum Done {
    Branch(Result<Box<BranchRun>>),
    Checked(Checked),
}

/// What every worker reads.
pub(crate) struct Shared {
    pub tree: RwLock<SnapshotTree>,
    pub rules: Rules,
    /// Whether a re-execution's memory may differ (see `replay::follow`).
    pub memory_may_differ: bool,
    /// The branches running now, for progress displays.
    pub live: Arc<Live>,
}

impl Shared {
    pub fn tree(&self) -> std::sync::RwLockReadGuard<'_, SnapshotTree> {
        self.tree.read().unwrap_or_else(|e| e.into_inner())
    }
}

struct Worker {
    machine: Machine,
    cursor: Cursor,
}

impl Worker {
    fn work(&mut self, job: Job, shared: &Shared) -> Done {
        match job {
            Job::Branch(job, known) => {
                let tree = shared.tree();
                let branch = job.branch;
                let run =
                    branch::run(*job, &known, &shared.rules, &tree, &mut self.cursor, &mut self.machine, &shared.live);
                shared.live.ended(branch);
                Done::Branch(run.map(Box::new))
            }
            Job::Check(check) => {
                let started = Instant::now();
                let outcome = self.check(&check.record, shared);
                Done::Checked(Checked { bug: check.bug, outcome, took: started.elapsed() })
            }
        }
    }

    fn check(&mut self, record: &BugRecord, shared: &Shared) -> Result<ReplayOutcome> {
        // The tree is held only for the reset: a check may outlast rounds.
        let root = shared.tree().root();
        shared.tree().reset(&mut self.cursor, &mut self.machine, root)?;
        replay::follow(&mut self.machine, record, shared.memory_may_differ, None, &mut ())
    }

    /// `work`, with a panic (a bug in hvsim) turned into an error for its
    /// job: the explorer would otherwise wait for the job forever.
    fn work_caught(&mut self, job: Job, shared: &Shared, who: usize) -> (Done, bool) {
        let check = match &job {
            Job::Check(c) => Some(c.bug),
            Job::Branch(..) => None,
        };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.work(job, shared))) {
            Ok(done) => (done, false),
            Err(_) => {
                let e = ExploreError::Target(format!("internal error: worker {who} panicked (see above)"));
                let done = match check {
                    Some(bug) => Done::Checked(Checked { bug, outcome: Err(e), took: Duration::ZERO }),
                    None => Done::Branch(Err(e)),
                };
                (done, true)
            }
        }
    }
}

pub(crate) struct Pool<'scope> {
    main: Worker,
    branches: Option<Sender<(usize, Job)>>,
    checks: Option<Sender<(usize, Job)>>,
    branch_queue: Receiver<(usize, Job)>,
    check_queue: Receiver<(usize, Job)>,
    /// The other workers' results; only they hold its senders, so it
    /// closes if they all stop.
    results: Receiver<(usize, Done)>,
    /// Checks queued and not yet returned.
    checks_out: usize,
    threads: Vec<ScopedJoinHandle<'scope, Option<GuestProfile>>>,
}

/// How to make the other workers' machines.
pub(crate) struct MachineSettings {
    /// Each worker's host settings (index 0: the calling thread's).
    pub hosts: Vec<HostSettings>,
    pub profiler: Option<ProfilerConfig>,
    /// Stops every worker's machine when raised.
    pub interrupt: Interrupt,
}

/// A worker thread's next job: a branch if one waits, else a check, else
/// whichever comes first. `None` once the explorer has hung up.
fn next_job(branches: &Receiver<(usize, Job)>, checks: &Receiver<(usize, Job)>) -> Option<(usize, Job)> {
    match branches.try_recv() {
        Ok(job) => return Some(job),
        Err(TryRecvError::Disconnected) => return None,
        Err(TryRecvError::Empty) => {}
    }
    match checks.try_recv() {
        Ok(job) => return Some(job),
        Err(TryRecvError::Disconnected) => return None,
        Err(TryRecvError::Empty) => {}
    }
    crossbeam_channel::select! {
        recv(branches) -> job => job.ok(),
        recv(checks) -> job => job.ok(),
    }
}

impl<'scope> Pool<'scope> {
    /// A worker per host settings: the calling thread with `machine` (at
    /// the tree's root), and a thread for each other, with a machine made
    /// from the root.
    pub fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        machine: Machine,
        cursor: Cursor,
        shared: &'env Shared,
        settings: &MachineSettings,
    ) -> Result<Pool<'scope>> {
        let workers = settings.hosts.len();
        assert!(workers >= 1, "at least the calling thread works");
        let (branches, branch_queue) = crossbeam_channel::unbounded::<(usize, Job)>();
        let (checks, check_queue) = crossbeam_channel::unbounded::<(usize, Job)>();
        let (done_tx, results) = crossbeam_channel::unbounded::<(usize, Done)>();
        let (ready_tx, ready) = crossbeam_channel::unbounded::<Result<()>>();
        let mut threads = Vec::new();
        for w in 1..workers {
            let host = settings.hosts[w].clone();
            let profiler = settings.profiler;
            let interrupt = settings.interrupt.clone();
            let (branch_queue, check_queue) = (branch_queue.clone(), check_queue.clone());
            let (done, ready) = (done_tx.clone(), ready_tx.clone());
            let spawned =
                std::thread::Builder::new().name(format!("hvsim-worker-{w}")).spawn_scoped(scope, move || {
                    let made = shared.tree().machine_at_root(&host);
                    let mut worker = match made {
                        Ok((mut machine, cursor)) => {
                            machine.set_stop_on_message(true);
                            machine.set_interrupt(interrupt);
                            if let Some(p) = profiler {
                                machine.enable_guest_profiler(p);
                            }
                            Worker { machine, cursor }
                        }
                        Err(e) => {
                            let _ = ready.send(Err(ExploreError::from(e)));
                            return None;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    // Until the explorer hangs up; a panic ends this worker.
                    while let Some((i, job)) = next_job(&branch_queue, &check_queue) {
                        let (result, panicked) = worker.work_caught(job, shared, w);
                        if done.send((i, result)).is_err() || panicked {
                            return None;
                        }
                    }
                    worker.machine.take_guest_profile()
                });
            threads.push(spawned.map_err(|e| ExploreError::Target(format!("cannot start a worker thread: {e}")))?);
        }
        drop(done_tx);
        for _ in 1..workers {
            ready.recv().map_err(|_| ExploreError::Target("a worker thread stopped while starting".into()))??;
        }
        Ok(Pool {
            main: Worker { machine, cursor },
            branches: Some(branches),
            checks: Some(checks),
            branch_queue,
            check_queue,
            results,
            checks_out: 0,
            threads,
        })
    }

    /// Queues checks; their outcomes come through the `checked` callbacks
    /// of [`run_round`](Self::run_round) and [`run_checks`](Self::run_checks).
    pub fn queue_checks(&mut self, checks: Vec<Check>) {
        let sender = self.checks.as_ref().expect("the pool runs until finished");
        for check in checks {
            self.checks_out += 1;
            sender.send((0, Job::Check(check))).expect("the pool holds its own receiver");
        }
    }

    /// Runs a round of branches on every worker; their results, in job
    /// order. Checks that end meanwhile go to `checked`.
    pub fn run_round(
        &mut self,
        round: Vec<(BranchJob, Arc<Knowledge>)>,
        shared: &Shared,
        checked: &mut dyn FnMut(Checked),
    ) -> Result<Vec<Result<Box<BranchRun>>>> {
        let n = round.len();
        let sender = self.branches.as_ref().expect("the pool runs until finished");
        for (i, (job, known)) in round.into_iter().enumerate() {
            sender.send((i, Job::Branch(Box::new(job), known))).expect("the pool holds its own receiver");
        }
        let mut runs: Vec<Option<Result<Box<BranchRun>>>> = (0..n).map(|_| None).collect();
        let mut pending = n;
        // The calling thread runs branches too, until none is waiting.
        while let Ok((i, job)) = self.branch_queue.try_recv() {
            let Done::Branch(run) = self.main.work(job, shared) else { unreachable!("a branch returns a branch") };
            runs[i] = Some(run);
            pending -= 1;
        }
        while pending > 0 {
            match self.receive()? {
                (i, Done::Branch(run)) => {
                    runs[i] = Some(run);
                    pending -= 1;
                }
                (_, Done::Checked(c)) => checked(c),
            }
        }
        Ok(runs.into_iter().map(|r| r.expect("every branch returns")).collect())
    }

    /// Runs or waits for every check queued, the calling thread taking
    /// its share.
    /// The calling thread's machine and where it stands in the tree, for
    /// work after the rounds (`likelihood.rs`).
    pub fn main_machine(&mut self) -> (&mut Machine, &mut Cursor) {
        (&mut self.main.machine, &mut self.main.cursor)
    }

    pub fn run_checks(&mut self, shared: &Shared, checked: &mut dyn FnMut(Checked)) -> Result<()> {
        while self.checks_out > 0 {
            let done = match self.check_queue.try_recv() {
                Ok((_, job)) => {
                    self.checks_out -= 1;
                    self.main.work(job, shared)
                }
                Err(_) => self.receive()?.1,
            };
            let Done::Checked(c) = done else { unreachable!("no branch runs between rounds") };
            checked(c);
        }
        Ok(())
    }

    fn receive(&mut self) -> Result<(usize, Done)> {
        let received = self
            .results
            .recv()
            .map_err(|_| ExploreError::Target("every worker thread stopped before its jobs were done".into()))?;
        if matches!(received.1, Done::Checked(_)) {
            self.checks_out -= 1;
        }
        Ok(received)
    }

    /// Stops the workers (a check still running ends at once if the
    /// machines' interrupt is raised, and its outcome is dropped); returns
    /// the guest profiles of every worker, merged into one.
    pub fn finish(mut self) -> Option<GuestProfile> {
        drop(self.branches.take());
        drop(self.checks.take());
        let mut profile = self.main.machine.take_guest_profile();
        for t in self.threads {
            if let Some(p) = t.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)) {
                match &mut profile {
                    Some(mine) => mine.merge(p),
                    None => profile = Some(p),
                }
            }
        }
        profile
    }
}
