//! Layer 1: what an exploration and a bug are. Plain data and the pure
//! functions over it (the SDK protocol, assertions and their verdicts,
//! timelines and bug records, histories and their checkers, claims, the
//! discovery estimates, the report's documents), with no machine and no
//! exploration loop. Files here import only each other (and other crates).

pub mod assertions;
pub mod bug;
pub mod checkers;
pub mod claims;
pub mod composer;
pub mod config;
pub mod coverage;
pub mod discovery;
pub mod document;
pub mod error;
pub mod exploration;
pub mod faults;
pub mod history;
pub mod manifest;
pub mod sdk;
pub mod services;
pub mod shard;
pub mod story;
pub mod timeline;
pub mod winddown;
