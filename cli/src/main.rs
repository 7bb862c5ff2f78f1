//! `hvsim`: the command line of the deterministic simulation VMM.

mod cmd;
mod linux_args;
mod profile;
mod session;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Deterministic simulation of whole systems in one KVM virtual machine.
#[derive(Parser)]
#[command(name = "hvsim", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Explore a target's timelines for bugs (default: the built-in demo).
    Explore(cmd::explore::Args),
    /// Run a guest once, as a pure function of its seed.
    Run(cmd::run::Args),
    /// Reproduce a bug found by `explore`, or resume a saved snapshot.
    Replay(cmd::replay::Args),
    /// Inspect snapshot files.
    Snapshot(cmd::snapshot::Args),
    /// Show where two determinism logs first differ.
    DiffLog(cmd::diff_log::Args),
    /// Report what this host can and cannot guarantee.
    Doctor(cmd::doctor::Args),
    /// Measure hvsim against a baseline taken in the same run.
    Bench(cmd::bench::Args),
    /// Build or locate hvsim's guest kernel.
    Kernel(cmd::kernel::Args),
    /// List or clear the boot cache of booted Linux machines.
    Cache(cmd::cache::Args),
    /// Import, list, inspect and remove container images.
    Image(cmd::image::Args),
}

fn main() -> ExitCode {
    util::install_panic_hook();
    // Warnings from the machine (e.g. a device the guest broke) go to
    // stderr as they happen; HVSIM_LOG=debug and the like show more.
    let filter = tracing_subscriber::EnvFilter::try_from_env("HVSIM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Explore(a) => cmd::explore::main(a),
        Command::Run(a) => cmd::run::main(a),
        Command::Replay(a) => cmd::replay::main(a),
        Command::Snapshot(a) => cmd::snapshot::main(a),
        Command::DiffLog(a) => cmd::diff_log::main(a),
        Command::Doctor(a) => cmd::doctor::main(a),
        Command::Bench(a) => cmd::bench::main(a),
        Command::Kernel(a) => cmd::kernel::main(a),
        Command::Cache(a) => cmd::cache::main(a),
        Command::Image(a) => cmd::image::main(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hvsim: error: {e:#}");
            ExitCode::from(util::EXIT_ERROR)
        }
    }
}
