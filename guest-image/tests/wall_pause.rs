//! A run paused on the wall clock (`Machine::run_until_or_wall`, what lets
//! progress move while virtual time hardly does) is the same run: paused
//! after every exit, the raw guests give the trace, memory and console of
//! a run that never paused, twice over.

mod common;

use std::time::Instant;

use hvsim_vmm::{Machine, Stop, Vtime};

use common::kvm_available;

fn machine(guest: &str, seed: u64) -> Machine {
    Machine::new(&common::raw_config(guest, seed)).unwrap()
}

/// Trace hash, memory hash, console and exits.
type Outcome = (String, [u8; 32], Vec<u8>, u64);

fn outcome(m: &Machine) -> Outcome {
    (m.trace_state().hash_hex(), m.ram().hash(), m.console().to_vec(), m.trace_state().events)
}

const UNTIL: Vtime = Vtime(300_000_000);

fn straight(guest: &str, seed: u64) -> Outcome {
    let mut m = machine(guest, seed);
    let stop = m.run_until(UNTIL).unwrap();
    assert!(matches!(stop, Stop::Deadline | Stop::Ended(_)), "{stop:?}");
    outcome(&m)
}

/// Paused after every exit (the wall clock is always past `by`): returns
/// the outcome and the pauses.
fn paused(guest: &str, seed: u64) -> (Outcome, u64) {
    let mut m = machine(guest, seed);
    let mut pauses = 0;
    loop {
        match m.run_until_or_wall(UNTIL, Instant::now()).unwrap() {
            None => pauses += 1,
            Some(Stop::Deadline | Stop::Ended(_)) => break,
            Some(stop) => panic!("{stop:?}"),
        }
    }
    (outcome(&m), pauses)
}

#[test]
fn pausing_after_every_exit_changes_nothing() {
    if !kvm_available() {
        return;
    }
    // A timer-driven guest and one whose output follows its seeded stream.
    for (guest, seed) in [("timer", 1), ("entropy", 7)] {
        let expected = straight(guest, seed);
        assert!(expected.3 > 50, "{guest}: the run must do real work ({} exits)", expected.3);
        assert_eq!(straight(guest, seed), expected, "{guest}: the same seed twice");
        for _ in 0..2 {
            let (got, pauses) = paused(guest, seed);
            assert!(pauses * 2 >= expected.3, "{guest}: {pauses} pauses in {} exits", expected.3);
            assert!(got == expected, "{guest}: a run paused {pauses} times is another run");
        }
    }
}
