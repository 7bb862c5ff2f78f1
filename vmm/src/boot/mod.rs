//! Getting a guest from nothing to its first instruction.

pub mod raw;
