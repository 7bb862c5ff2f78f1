//! Layer 2: running timelines. The exploration loop (`engine`), its
//! branches as workers run them on machines (`workers`, `branch`), what a
//! branch's messages teach (`knowledge`), where the next one starts
//! (`schedule`, `steer`, `revisit`, `bandit`), the root (`setup`,
//! `roots`) and replaying a record (`replay`). Files here import layer 1
//! and each other, never triage or outputs.

pub(crate) mod bandit;
pub(crate) mod branch;
pub(crate) mod bugs;
pub mod engine;
pub(crate) mod eviction;
pub(crate) mod knowledge;
pub mod live;
pub(crate) mod merge_branch;
pub mod replay;
pub(crate) mod revisit;
pub mod roots;
pub mod schedule;
pub(crate) mod setup;
pub(crate) mod state;
pub(crate) mod steer;
pub mod watch;
pub(crate) mod workers;
