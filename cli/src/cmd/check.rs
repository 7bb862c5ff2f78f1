//! `hvsim check HISTORY`: is a history of operations linearizable (a
//! register per key), or, with `--model set|queue`, did the set or queue
//! keep every acknowledged element?

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_checkers::queue::{QueueKey, QueueVerdict};
use hvsim_checkers::set::{SetKey, SetVerdict};
use hvsim_checkers::{check_text, history, Limits, Verdict};
use serde_json::Value;

/// What the history's objects are.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Model {
    /// A read/write/compare-and-set register per key: linearizability.
    Register,
    /// A set per key: `add`, and a final `read` of all of it.
    Set,
    /// A queue per key: `enqueue`, `dequeue`, and a final `drain`.
    Queue,
}

#[derive(clap::Args)]
pub struct Args {
    /// The history: JSON lines of invocations and completions (see
    /// docs/checkers.md).
    history: PathBuf,
    /// What the history's objects are.
    #[arg(long, value_enum, default_value = "register")]
    model: Model,
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
    let (line, status) = match args.model {
        Model::Register => register(&text, &args)?,
        Model::Set | Model::Queue => {
            let events = history::parse(&text).with_context(|| format!("history {path}"))?;
            let (verdict, line, status) = if matches!(args.model, Model::Set) {
                let v = hvsim_checkers::set::check(&events).with_context(|| format!("history {path}"))?;
                let (line, status) = describe_set(&v);
                (serde_json::to_string(&v), line, status)
            } else {
                let v = hvsim_checkers::queue::check(&events).with_context(|| format!("history {path}"))?;
                let (line, status) = describe_queue(&v);
                (serde_json::to_string(&v), line, status)
            };
            if args.json {
                println!("{}", verdict.expect("verdicts serialize"));
            }
            (line, status)
        }
    };
    if args.json {
        eprintln!("hvsim: check {path}: {line}");
    } else {
        println!("{path}: {line}");
    }
    Ok(status)
}

/// A set verdict in a line, and the exit status.
fn describe_set(v: &SetVerdict) -> (String, ExitCode) {
    let (keys, what, status) = match v {
        SetVerdict::Valid { keys } => (keys, "valid", crate::util::EXIT_OK),
        SetVerdict::Invalid { keys } => (keys, "INVALID", crate::util::EXIT_NOT_LINEARIZABLE),
        SetVerdict::Undecided { keys } => (keys, "undecided (a set was never read)", crate::util::EXIT_UNDECIDED),
    };
    let each = |k: &SetKey| {
        format!(
            "{}{} acknowledged of {} added: {} lost {}, {} unexpected {}, {} duplicated, {} failed but present, {} recovered",
            k.key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default(),
            k.acknowledged,
            k.attempted,
            k.lost.len(),
            Value::from(k.lost.clone()),
            k.unexpected.len(),
            Value::from(k.unexpected.clone()),
            k.duplicated.len(),
            k.failed_but_present.len(),
            k.recovered
        )
    };
    (format!("{what}: {}", keys.iter().map(each).collect::<Vec<_>>().join("; ")), ExitCode::from(status))
}

/// A queue verdict in a line, and the exit status.
fn describe_queue(v: &QueueVerdict) -> (String, ExitCode) {
    let (keys, what, status) = match v {
        QueueVerdict::Valid { keys } => (keys, "valid", crate::util::EXIT_OK),
        QueueVerdict::Invalid { keys } => (keys, "INVALID", crate::util::EXIT_NOT_LINEARIZABLE),
        QueueVerdict::Undecided { keys } => (keys, "undecided (no drain)", crate::util::EXIT_UNDECIDED),
    };
    let each = |k: &QueueKey| {
        format!(
            "{}{} acknowledged of {} enqueued, {} out: {} lost {}, {} duplicated {}, {} unexpected {}",
            k.key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default(),
            k.acknowledged,
            k.enqueued,
            k.dequeued,
            k.lost.len(),
            Value::from(k.lost.clone()),
            k.duplicated.len(),
            Value::from(k.duplicated.clone()),
            k.unexpected.len(),
            Value::from(k.unexpected.clone())
        )
    };
    (format!("{what}: {}", keys.iter().map(each).collect::<Vec<_>>().join("; ")), ExitCode::from(status))
}

/// Linearizability of registers, key by key.
fn register(text: &str, args: &Args) -> Result<(String, ExitCode)> {
    let path = args.history.display();
    let limits = Limits { steps: args.step_limit, ..Limits::default() };
    let verdict = check_text(text, limits).with_context(|| format!("history {path}"))?;
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
    Ok((line, status))
}
