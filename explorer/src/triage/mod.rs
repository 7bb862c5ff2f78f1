//! Layer 3: triage on top of runs. How likely a bug is (`likelihood`),
//! whether it reproduces (`retest`), and its smallest timeline
//! (`minimize`): each runs timelines through layer 2. Files here import
//! layers 1 and 2 and each other.

pub mod likelihood;
pub mod minimize;
pub mod retest;
