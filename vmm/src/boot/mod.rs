//! Getting a guest from nothing to its first instruction.

pub mod linux;
pub mod mptable;
pub mod raw;
