//! Finding leaks while fuzzing: an allocator that counts the heap bytes
//! each thread has alive, and a check that an input leaves no more alive
//! than before it ran, twice in a row. Twice, because the first run of an
//! input may fill something meant to last (a plan parsed once for every
//! input, a lazily registered log call site); a leak grows again.
//!
//! The harness (`src/bin/afl.rs`) installs [`Counting`] as its global
//! allocator, and an input that leaks is a crash to AFL.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    /// Bytes this thread allocated minus bytes it freed (negative when it
    /// frees what another thread allocated). A `const` Cell: reading it
    /// never allocates, so the allocator can use it.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // During thread teardown the counter may be gone: not counting then is
    // harmless (the harness runs inputs on a live thread).
    let _ = LIVE.try_with(|l| l.set(l.get().wrapping_add(delta)));
}

/// The system allocator, counting.
pub struct Counting;

// SAFETY: every call is passed on to the system allocator unchanged; only
// the count is added, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Heap bytes this thread has alive (by [`Counting`]'s count).
pub fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Runs `target` on `data`; if it left bytes alive, runs it again, and
/// returns how many more bytes the second run left alive (a leak), or 0.
pub fn leaked(target: fn(&[u8]), data: &[u8]) -> isize {
    let before = live();
    target(data);
    if live() <= before {
        return 0;
    }
    let again = live();
    target(data);
    (live() - again).max(0)
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    fn clean(data: &[u8]) {
        let v = data.to_vec();
        assert_eq!(v.len(), data.len());
    }

    fn leaks(data: &[u8]) {
        Box::leak(data.to_vec().into_boxed_slice());
    }

    fn caches_once(data: &[u8]) {
        static CACHE: OnceLock<Vec<u8>> = OnceLock::new();
        let c = CACHE.get_or_init(|| vec![7; 4096]);
        assert!(c.len() > data.len());
    }

    #[test]
    fn a_leak_is_found_and_what_lasts_by_design_is_not() {
        assert_eq!(leaked(clean, &[1; 100]), 0);
        assert_eq!(leaked(leaks, &[1; 100]), 100);
        assert_eq!(leaked(caches_once, &[1; 100]), 0, "the first run fills the cache, the second finds it");
        assert_eq!(leaked(caches_once, &[1; 100]), 0);
    }

    include!("../inputs.rs");

    /// Every target, over its seeds: nothing leaks.
    #[test]
    fn no_target_leaks_on_its_seeds() {
        for (name, run) in crate::TARGETS {
            for (f, data) in fuzz_inputs(name) {
                assert_eq!(leaked(*run, &data), 0, "{name}: {} leaks", f.display());
            }
        }
    }
}
