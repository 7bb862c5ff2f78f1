pub mod bench;
pub mod diff_log;
pub mod doctor;
pub mod run;
