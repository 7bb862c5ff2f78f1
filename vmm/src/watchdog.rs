//! Forward progress without a PMU.
//!
//! A guest that computes or spins without ever exiting gets no timer
//! interrupt: interrupts are only injected at exits. Where a PMU exists, a
//! branch counter could force an exit at an exact, replayable point (rr's
//! technique); this host has none, so a wall-clock watchdog thread kicks the
//! vCPU out of `KVM_RUN` with a signal when it has not exited for `timeout`.
//! Such an exit happens at a point that depends on host timing, so the run
//! loop marks the run non-replayable when it sees one. The watchdog touches
//! nothing but two counters and the signal: it is not a device thread.
//!
//! It also carries the machine's [`Interrupt`] into `KVM_RUN`: a guest
//! spinning in user mode may not exit for the whole timeout (a minute for
//! Linux), so once the interrupt is raised the watchdog kicks the vCPU
//! within [`INTERRUPT_POLL`], invisibly to the guest (like the profiler's
//! kick: no time, no event), and the run loop ends at its next check. A
//! pause on the wall clock (`Machine::run_until_or_wall`) is carried in the
//! same way.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::kick;
use crate::Interrupt;

/// How soon a raised interrupt reaches a vCPU inside `KVM_RUN`.
pub const INTERRUPT_POLL: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Shared {
    /// Incremented by the vCPU thread at every real exit (not at kicks).
    progress: AtomicU64,
    in_guest: AtomicBool,
    /// Set just before the watchdog kicks; taken by the vCPU thread.
    kicked: AtomicBool,
    kicks: AtomicU64,
    /// When to kick the vCPU out of `KVM_RUN` for a pause (`kick_at`).
    pause_at: Mutex<Option<Instant>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

pub struct Watchdog {
    shared: Arc<Shared>,
    timeout: Duration,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching the calling thread, which must be the vCPU thread,
    /// and `interrupt`, if any.
    pub fn start(timeout: Duration, interrupt: Option<Interrupt>) -> Result<Watchdog> {
        kick::install()?;
        // SAFETY: pthread_self has no preconditions.
        let target = unsafe { libc::pthread_self() };
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("hvsim-watchdog".into())
            .spawn(move || watch(&s, target, timeout, interrupt.as_ref()))
            .map_err(|e| Error::Host("starting the watchdog thread", e))?;
        Ok(Watchdog { shared, timeout, thread: Some(thread) })
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub fn entering_guest(&self) {
        self.shared.in_guest.store(true, Ordering::SeqCst);
    }

    /// The vCPU left `KVM_RUN`; `exited` unless a signal kicked it out
    /// (a kick is not progress: the guest may still be spinning).
    pub fn left_guest(&self, exited: bool) {
        self.shared.in_guest.store(false, Ordering::SeqCst);
        if exited {
            self.shared.progress.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Whether the last kick out of `KVM_RUN` was the watchdog's (and
    /// forgets it): other kicks (the profiler's) must stay invisible.
    pub fn take_kick(&self) -> bool {
        self.shared.kicked.swap(false, Ordering::SeqCst)
    }

    /// Kicks the vCPU out of `KVM_RUN` once the wall clock passes `at`
    /// (`Machine::run_until_or_wall`'s pause), invisibly as for a raised
    /// interrupt; `None`: never.
    pub fn kick_at(&self, at: Option<Instant>) {
        *self.shared.pause_at.lock().unwrap_or_else(|p| p.into_inner()) = at;
    }

    pub fn kicks(&self) -> u64 {
        self.shared.kicks.load(Ordering::SeqCst)
    }
}

fn watch(s: &Shared, target: libc::pthread_t, timeout: Duration, interrupt: Option<&Interrupt>) {
    let mut last = s.progress.load(Ordering::SeqCst);
    let mut since = Instant::now();
    let mut stop = s.stop.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        // Polled: a pause may be asked for at any time.
        stop = s.wake.wait_timeout(stop, timeout.min(INTERRUPT_POLL)).unwrap_or_else(|p| p.into_inner()).0;
        if *stop {
            return;
        }
        let paused = s.pause_at.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|at| Instant::now() >= at);
        if (paused || interrupt.is_some_and(Interrupt::raised)) && s.in_guest.load(Ordering::SeqCst) {
            // Not `kicked`: the run loop takes it for no exit at all.
            // SAFETY: as below.
            unsafe { kick::kick(target) };
        }
        if since.elapsed() < timeout {
            continue;
        }
        since = Instant::now();
        let now = s.progress.load(Ordering::SeqCst);
        if now == last && s.in_guest.load(Ordering::SeqCst) {
            s.kicks.fetch_add(1, Ordering::SeqCst);
            s.kicked.store(true, Ordering::SeqCst);
            // SAFETY: `target` is the vCPU thread, alive until `Drop` below
            // has joined this thread.
            unsafe { kick::kick(target) };
        }
        last = now;
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
