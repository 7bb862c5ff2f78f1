//! The explorer's workers: one machine each, each on its own thread (the
//! calling thread is worker 0, with the machine that ran the root), all
//! sharing the snapshot tree. The explorer hands them a round of jobs at a
//! time and gets the results back in job order, so which worker ran a job,
//! and when, changes how long a round takes and nothing else.
//!
//! Workers only read the tree while they work; the explorer adds a round's
//! snapshots to it between rounds, when every worker waits for jobs.

use std::sync::{Arc, RwLock};
use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::{Receiver, Sender};
use hvsim_snapshot::{Cursor, SnapshotTree};
use hvsim_vmm::machine::HostSettings;
use hvsim_vmm::profiler::{GuestProfile, ProfilerConfig};
use hvsim_vmm::Machine;

use crate::branch::{self, BranchJob, BranchRun, Rules};
use crate::bug::{self, BugRecord, ReplayOutcome};
use crate::engine::Knowledge;
use crate::error::{ExploreError, Result};

pub(crate) enum Job {
    Branch(BranchJob, Arc<Knowledge>),
    /// A bug's timeline again, from the root.
    Reexecute(Arc<BugRecord>),
}

pub(crate) enum Done {
    Branch(Box<BranchRun>),
    Reexecuted(ReplayOutcome),
}

/// What every worker reads.
pub(crate) struct Shared {
    pub tree: RwLock<SnapshotTree>,
    pub rules: Rules,
    /// Whether a re-execution's memory may differ (see `bug::follow`).
    pub memory_may_differ: bool,
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
    fn work(&mut self, job: Job, shared: &Shared) -> Result<Done> {
        let tree = shared.tree();
        match job {
            Job::Branch(job, known) => {
                let run = branch::run(job, &known, &shared.rules, &tree, &mut self.cursor, &mut self.machine)?;
                Ok(Done::Branch(Box::new(run)))
            }
            Job::Reexecute(record) => {
                tree.reset(&mut self.cursor, &mut self.machine, tree.root())?;
                Ok(Done::Reexecuted(bug::follow(&mut self.machine, &record, shared.memory_may_differ, None)?))
            }
        }
    }
}

pub(crate) struct Pool<'scope> {
    main: Worker,
    jobs: Option<Sender<(usize, Job)>>,
    queue: Receiver<(usize, Job)>,
    /// The other workers' results; only they hold its senders, so it
    /// closes if they all stop.
    results: Receiver<(usize, Result<Done>)>,
    threads: Vec<ScopedJoinHandle<'scope, Option<GuestProfile>>>,
}

/// How to make the other workers' machines.
pub(crate) struct MachineSettings {
    /// Each worker's host settings (index 0: the calling thread's).
    pub hosts: Vec<HostSettings>,
    pub profiler: Option<ProfilerConfig>,
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
        let (jobs, queue) = crossbeam_channel::unbounded::<(usize, Job)>();
        let (done_tx, results) = crossbeam_channel::unbounded::<(usize, Result<Done>)>();
        let (ready_tx, ready) = crossbeam_channel::unbounded::<Result<()>>();
        let mut threads = Vec::new();
        for w in 1..workers {
            let host = settings.hosts[w].clone();
            let profiler = settings.profiler;
            let (queue, done, ready) = (queue.clone(), done_tx.clone(), ready_tx.clone());
            let spawned =
                std::thread::Builder::new().name(format!("hvsim-worker-{w}")).spawn_scoped(scope, move || {
                    let made = shared.tree().machine_at_root(&host);
                    let mut worker = match made {
                        Ok((mut machine, cursor)) => {
                            machine.set_stop_on_message(true);
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
                    // Until the explorer drops its sender. A panic (a bug in
                    // hvsim) ends this worker with an error for its job,
                    // where the explorer would otherwise wait for it forever.
                    for (i, job) in queue.iter() {
                        let result =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker.work(job, shared)));
                        let panicked = result.is_err();
                        let done_or_why = result.unwrap_or_else(|_| {
                            Err(ExploreError::Target(format!("internal error: worker {w} panicked (see above)")))
                        });
                        if done.send((i, done_or_why)).is_err() || panicked {
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
        Ok(Pool { main: Worker { machine, cursor }, jobs: Some(jobs), queue, results, threads })
    }

    /// Runs `jobs` on every worker; their results, in job order.
    pub fn run(&mut self, jobs: Vec<Job>, shared: &Shared) -> Result<Vec<Done>> {
        let n = jobs.len();
        let sender = self.jobs.as_ref().expect("the pool runs until finished");
        for job in jobs.into_iter().enumerate() {
            sender.send(job).expect("workers wait for jobs while the pool lives");
        }
        let mut results: Vec<Option<Result<Done>>> = (0..n).map(|_| None).collect();
        let mut pending = n;
        // The calling thread works too, until the queue is empty.
        while let Ok((i, job)) = self.queue.try_recv() {
            results[i] = Some(self.main.work(job, shared));
            pending -= 1;
        }
        for _ in 0..pending {
            let (i, done) = self
                .results
                .recv()
                .map_err(|_| ExploreError::Target("every worker thread stopped before its jobs were done".into()))?;
            results[i] = Some(done);
        }
        // The first failed job in job order, whichever worker ran it.
        results.into_iter().map(|d| d.expect("every job returns a result")).collect()
    }

    /// Stops the workers; returns the guest profiles of every worker,
    /// merged into one.
    pub fn finish(mut self) -> Option<GuestProfile> {
        drop(self.jobs.take());
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
