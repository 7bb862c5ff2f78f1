//! Asking a running machine to stop, from another thread: a signal handler
//! (Ctrl-C) or an explorer that is ending. The run loop looks at the flag
//! before every guest entry and stops with [`crate::Error::Interrupted`];
//! the guest never sees it, and a run that was interrupted is not a result.
//! A guest that runs long without an exit is still reached: the watchdog
//! kicks it out of `KVM_RUN` within its period.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A shared flag: zero until raised, then the reason it was raised for
/// (a signal's number, say), which the raiser chooses.
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Arc<AtomicUsize>);

impl Interrupt {
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Raises the flag with `reason` (non-zero) unless it is already raised:
    /// the first reason stays.
    pub fn raise(&self, reason: usize) {
        assert_ne!(reason, 0, "zero means not raised");
        let _ = self.0.compare_exchange(0, reason, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// The reason, once raised.
    pub fn reason(&self) -> Option<usize> {
        match self.0.load(Ordering::SeqCst) {
            0 => None,
            r => Some(r),
        }
    }

    pub fn raised(&self) -> bool {
        self.reason().is_some()
    }

    /// The flag itself, for code that stores into it directly (a signal
    /// handler registered with `signal_hook::flag::register_usize`).
    pub fn flag(&self) -> &Arc<AtomicUsize> {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_stays() {
        let i = Interrupt::new();
        let seen_elsewhere = i.clone();
        assert_eq!(i.reason(), None);
        i.raise(15);
        i.raise(2);
        assert_eq!(seen_elsewhere.reason(), Some(15));
        assert!(seen_elsewhere.raised());
    }
}
