//! `hvsim`: the command line of the deterministic simulation VMM.

mod cmd;
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
    /// Run a guest once, as a pure function of its seed.
    Run(cmd::run::Args),
    /// Show where two determinism logs first differ.
    DiffLog(cmd::diff_log::Args),
    /// Report what this host can and cannot guarantee.
    Doctor(cmd::doctor::Args),
    /// Measure hvsim against a baseline taken in the same run.
    Bench(cmd::bench::Args),
}

fn main() -> ExitCode {
    util::install_panic_hook();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::main(a),
        Command::DiffLog(a) => cmd::diff_log::main(a),
        Command::Doctor(a) => cmd::doctor::main(a),
        Command::Bench(a) => cmd::bench::main(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hvsim: error: {e:#}");
            ExitCode::from(util::EXIT_ERROR)
        }
    }
}
