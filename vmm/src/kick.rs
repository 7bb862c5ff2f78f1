//! Kicking the vCPU thread out of `KVM_RUN` from another thread: a
//! real-time signal whose handler does nothing, so that its delivery alone
//! makes `KVM_RUN` return EINTR. The watchdog and the guest profiler's
//! sampler share it; each says through its own flag that the kick was its.

use std::sync::Once;

use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

use crate::error::{Error, Result};

fn signal() -> libc::c_int {
    SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}

/// Installs the no-op handler (once per process).
pub(crate) fn install() -> Result<()> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = register_signal_handler(signal(), on_kick)
            .map_err(|e| Error::Host("registering the vCPU kick signal", std::io::Error::from_raw_os_error(e.errno())));
    });
    result
}

/// Sends the kick to `thread`.
///
/// # Safety
/// `thread` must be a live thread of this process (the caller keeps the
/// vCPU thread alive until it has stopped kicking it).
pub(crate) unsafe fn kick(thread: libc::pthread_t) {
    // SAFETY: the caller guarantees `thread` is alive.
    unsafe { libc::pthread_kill(thread, signal()) };
}
