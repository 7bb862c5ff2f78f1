//! Checkers for what clients of a distributed system saw: given a history
//! of operations (invocations and completions, in real-time order), does
//! some correct object explain every answer?
//!
//! - [`history`]: the history format (JSON lines, Jepsen's shape) and its
//!   pairing into operations;
//! - [`model`]: what a correct object answers (a register with
//!   compare-and-set, per key);
//! - [`linearizable`]: the linearizability search;
//! - [`set`]: sets, Jepsen's set checker (lost, unexpected, duplicated
//!   adds);
//! - [`queue`]: queues, Jepsen's total-queue checker (every acknowledged
//!   enqueue dequeued exactly once);
//! - [`ledger`]: ledgers, Jepsen's bank checker (totals conserved, no
//!   account below zero);
//! - [`lease`]: leases (no two holders at once, in virtual time);
//! - [`log`]: append-only logs (one order for every reader, no
//!   acknowledged entry lost);
//! - [`judge`]: one verdict over every model (valid, invalid, undecided),
//!   with the anomalies named;
//! - [`txn`]: transactions (list-append, read-write registers), checked
//!   for isolation anomalies as Elle checks them;
//! - [`shrink`]: the smallest violating sub-history (delta debugging);
//! - [`generate`]: histories of real registers, for benchmarks and tests.
//!
//! Pure and KVM-free: a history recorded in an hvsim run, in a Jepsen run
//! or by hand is checked the same way (`hvsim check`, docs/checkers.md).

pub mod error;
pub mod generate;
pub mod history;
pub mod judge;
pub mod lease;
pub mod ledger;
pub mod linearizable;
pub mod log;
pub mod model;
pub mod queue;
pub mod set;
pub mod shrink;
pub mod txn;

pub use error::{Error, Result};
pub use judge::{judge, Judgement, ModelKind, Options, Status};
pub use linearizable::{check, Limits, Verdict};

/// The limits the `history` fuzz target checks with: small, so that each
/// input takes milliseconds.
pub const FUZZ_LIMITS: Limits = Limits { memo: true, steps: 20_000, memo_bytes: 1 << 20, time: None };

/// Parses a history and checks it for linearizability.
pub fn check_text(text: &str, limits: Limits) -> Result<Verdict> {
    let events = history::parse(text)?;
    check(&model::operations(&events)?, limits)
}

#[cfg(test)]
mod tests {
    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `history` fuzz target does, over its corpus and
    /// regressions; every seed is a history with a verdict.
    #[test]
    fn fuzz_corpus_and_regressions_check_without_panics() {
        let inputs = fuzz_inputs("history");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let verdict = std::str::from_utf8(&data).map(|text| super::check_text(text, super::FUZZ_LIMITS));
            if file.iter().any(|c| c == "corpus") {
                assert!(matches!(verdict, Ok(Ok(_))), "{}: {verdict:?}", file.display());
            }
        }
    }
}
