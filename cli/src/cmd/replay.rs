//! `hvsim replay --snapshot FILE`: resume a saved machine.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use hvsim_snapshot::file;

use crate::session::{Host, Output, Session};
use crate::util;

#[derive(clap::Args)]
pub struct Args {
    /// A snapshot saved by `hvsim run --snapshot-at T --save-snapshot FILE`.
    #[arg(long, value_name = "FILE")]
    snapshot: PathBuf,
    /// Re-seed every entropy stream from N for everything after the
    /// snapshot. Without it, the streams continue exactly as saved, so the
    /// result equals the uninterrupted run.
    #[arg(long, value_parser = util::parse_seed)]
    seed: Option<u64>,
    #[command(flatten)]
    out: Output,
}

pub fn main(args: Args) -> Result<ExitCode> {
    let host = Host::open()?;
    let loaded = file::load(&args.snapshot)?;
    let guest = loaded.header.guest.clone();
    let mut machine = loaded.restore(&host.settings(&guest, args.out.watchdog))?;
    if let Some(seed) = args.seed {
        machine.reseed(seed);
    }
    let host_limits = if guest == "linux" { host.probes.limits() } else { Vec::new() };
    let seed = args.seed.unwrap_or(loaded.header.seed);
    Session::start(machine, &guest, seed, &args.out, host_limits)?.finish(&args.out)
}
