//! `hvsim`: the command line of the deterministic simulation VMM.

mod cmd;
mod documents;
mod linux_args;
mod profile;
mod session;
mod signals;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Deterministic simulation of whole systems in one KVM virtual machine.
#[derive(Parser)]
#[command(name = "hvsim", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Only warnings, errors and results on stderr: no progress, no notes.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// More on stderr: -v what hvsim does, -vv debugging detail, -vvv
    /// everything (HVSIM_LOG=<filter> chooses precisely).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Print the result as JSON on stdout, as its schema says (`hvsim
    /// schema`): one document, or JSON Lines where a command prints as it
    /// goes. Notes and progress stay on stderr.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Explore a target's timelines for bugs (default: the built-in demo).
    ///
    /// Branches timelines from snapshots wherever something new happens.
    /// Each exploration gets its own directory in --out (OUT/latest is the
    /// newest) with report.html (the page to read), report.md, report.json
    /// and bugs/ (one record per bug, for `hvsim replay`). Exit status: 0 no
    /// bug, 8 bugs found, 9 interrupted (SIGINT, SIGTERM) without a bug, 10
    /// with --fail-on-unmet a property never satisfied or never reached, 1
    /// an error (docs/cli.md).
    Explore(cmd::explore::Args),
    /// Combine the results of an exploration's shards (`explore --shard
    /// I/N`) into one exploration's report (docs/scale.md). Exit status as
    /// for explore.
    Merge(cmd::merge::Args),
    /// Run a guest once, as a pure function of its seed.
    Run(cmd::run::Args),
    /// Reproduce a bug found by `explore`, or resume a saved snapshot.
    Replay(cmd::replay::Args),
    /// Shrink a bug's timeline to the fewest decisions (faults, buggify
    /// sites, chosen draws) with which it still fails, as a new record.
    Minimize(cmd::minimize::Args),
    /// A shell in a node or service at a moment of a bug's timeline
    /// (e.g. 100 ms before its failure).
    Debug(cmd::debug::Args),
    /// Run a bug's decisions on the build it was found on and on a changed
    /// one (new files, compose project or image): how often each fails.
    Retest(cmd::retest::Args),
    /// Inspect snapshot files.
    Snapshot(cmd::snapshot::Args),
    /// Show where two determinism logs first differ.
    DiffLog(cmd::diff_log::Args),
    /// Check a recorded history: registers for linearizability; sets, queues, ledgers and logs for lost or
    /// invented elements; transactions for isolation anomalies (Elle's list-append and rw-register).
    Check(cmd::check::Args),
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
    /// The versioned JSON Schemas of the documents hvsim writes (reports,
    /// bug records, summaries, findings): list, print, write, check a file.
    Schema(cmd::schema::Args),
}

/// An error and its causes on one line, each cause once: many errors
/// already include their source's text, which `{:#}` would repeat.
fn one_line(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text.replace('\n', " ")
}

/// Help and version go to stdout as clap prints them; every other command
/// line mistake is one line in hvsim's error style, exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(util::EXIT_USAGE);
    }
    // clap's message: the error, perhaps continued on indented lines, then
    // a blank line, usage and tips.
    let text = e.render().to_string();
    let message: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    eprintln!("hvsim: error: {message} (see --help)");
    ExitCode::from(util::EXIT_USAGE)
}

fn main() -> ExitCode {
    util::install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    hvsim_guest_image::progress::set_quiet(cli.quiet);
    // Warnings from the machine (e.g. a device the guest broke) go to
    // stderr as they happen; -v and HVSIM_LOG show more.
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("HVSIM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    let json = cli.json;
    let result = match cli.command {
        Command::Explore(a) => cmd::explore::main(a, json),
        Command::Run(a) => cmd::run::main(a, json),
        Command::Replay(a) => cmd::replay::main(a, json),
        Command::Minimize(a) => cmd::minimize::main(a, json),
        Command::Debug(a) => cmd::debug::main(a, json),
        Command::Retest(a) => cmd::retest::main(a, json),
        Command::Snapshot(a) => cmd::snapshot::main(a, json),
        Command::DiffLog(a) => cmd::diff_log::main(a, json),
        Command::Doctor(a) => cmd::doctor::main(a, json),
        Command::Check(a) => cmd::check::main(a, json),
        Command::Bench(a) => cmd::bench::main(a, json),
        Command::Kernel(a) => cmd::kernel::main(a, json),
        Command::Cache(a) => cmd::cache::main(a, json),
        Command::Image(a) => cmd::image::main(a, json),
        Command::Schema(a) => cmd::schema::main(a, json),
        Command::Merge(a) => cmd::merge::main(a, json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hvsim: error: {}", one_line(&e));
            ExitCode::from(util::EXIT_ERROR)
        }
    }
}
