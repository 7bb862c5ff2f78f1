//! `hvsim check HISTORY`: is a history of operations linearizable?

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_checkers::{check_text, Limits, Verdict};

#[derive(clap::Args)]
pub struct Args {
    /// The history: JSON lines of invocations and completions (see
    /// docs/checkers.md).
    history: PathBuf,
    /// Steps the search may take per key before it answers "undecided".
    #[arg(long, default_value_t = Limits::default().steps, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    step_limit: u64,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
}

pub fn main(args: Args) -> Result<ExitCode> {
    let path = args.history.display();
    let text = hvsim_vmm::files::read_text(&args.history).with_context(|| format!("cannot read history {path}"))?;
    let limits = Limits { steps: args.step_limit, ..Limits::default() };
    let verdict = check_text(&text, limits).with_context(|| format!("history {path}"))?;
    if args.json {
        println!("{}", serde_json::to_string(&verdict).expect("verdicts serialize"));
    }
    let (line, status) = match &verdict {
        Verdict::Linearizable { operations, keys } => {
            (format!("linearizable: {operations} operations on {keys} key(s)"), ExitCode::SUCCESS)
        }
        Verdict::NotLinearizable { key, op, placed, of, .. } => (
            format!(
                "NOT linearizable{}: no order of the operations explains {op} (at best {placed} of {of} ordered)",
                key.as_deref().map(|k| format!(" (key {k})")).unwrap_or_default()
            ),
            ExitCode::from(crate::util::EXIT_NOT_LINEARIZABLE),
        ),
        Verdict::Unknown { key, steps, why } => (
            format!(
                "undecided{}: the search reached {why} after {steps} steps",
                key.as_deref().map(|k| format!(" (key {k})")).unwrap_or_default()
            ),
            ExitCode::from(crate::util::EXIT_UNDECIDED),
        ),
    };
    if args.json {
        eprintln!("hvsim: check {path}: {line}");
    } else {
        println!("{path}: {line}");
    }
    Ok(status)
}
