//! The sampler thread: at a fixed wall-clock rate it kicks the vCPU out of
//! `KVM_RUN` (see [`crate::kick`]) if the vCPU is in the guest, and counts a
//! tick of VMM time if it is not. The vCPU thread takes the sample itself,
//! at the kicked exit, and resumes the guest as if nothing had happened.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::kick;

#[derive(Default)]
struct Shared {
    in_guest: AtomicBool,
    /// Set just before a kick; taken by the vCPU thread at the exit.
    pending: AtomicBool,
    /// Ticks that found the vCPU thread outside the guest.
    vmm_ticks: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
}

pub struct Sampler {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts sampling the calling thread, which must be the vCPU thread.
    pub fn start(period: Duration) -> Result<Sampler> {
        assert!(!period.is_zero(), "a sampling period of zero");
        kick::install()?;
        // SAFETY: pthread_self has no preconditions.
        let target = unsafe { libc::pthread_self() };
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("hvsim-sampler".into())
            .spawn(move || sample(&s, target, period))
            .map_err(|e| Error::Host("starting the profiler's sampler thread", e))?;
        Ok(Sampler { shared, thread: Some(thread) })
    }

    pub fn entering_guest(&self) {
        self.shared.in_guest.store(true, Ordering::SeqCst);
    }

    pub fn left_guest(&self) {
        self.shared.in_guest.store(false, Ordering::SeqCst);
    }

    /// Whether a sample is due (and forgets it).
    pub fn take_pending(&self) -> bool {
        self.shared.pending.swap(false, Ordering::SeqCst)
    }

    pub fn vmm_ticks(&self) -> u64 {
        self.shared.vmm_ticks.load(Ordering::SeqCst)
    }
}

fn sample(s: &Shared, target: libc::pthread_t, period: Duration) {
    let mut stop = s.stop.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        stop = s.wake.wait_timeout(stop, period).unwrap_or_else(|p| p.into_inner()).0;
        if *stop {
            return;
        }
        if s.in_guest.load(Ordering::SeqCst) {
            s.pending.store(true, Ordering::SeqCst);
            // SAFETY: `target` is the vCPU thread, alive until `Drop` below
            // has joined this thread.
            unsafe { kick::kick(target) };
        } else {
            s.vmm_ticks.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
