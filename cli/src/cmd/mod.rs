pub mod bench;
pub mod diff_log;
pub mod doctor;
pub mod explore;
pub mod kernel;
pub mod replay;
pub mod run;
pub mod snapshot;
