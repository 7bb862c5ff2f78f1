//! `hvsim check HISTORY`: is a history of operations linearizable (a
//! register per key), or, with `--model set|queue`, did the set or queue
//! keep every acknowledged element?

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_checkers::{history, judge, Limits, ModelKind, Status};
use hvsim_explorer::document::{Document, Tag};
use schemars::JsonSchema;
use serde::Serialize;

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
}

/// What `hvsim check --json` prints: the model's own verdict, with all it
/// counted (docs/checkers.md); its fields are the model's.
#[derive(Serialize, JsonSchema)]
pub struct CheckReport {
    schema: Tag<CheckReport>,
    #[serde(flatten)]
    verdict: serde_json::Map<String, serde_json::Value>,
}

impl Document for CheckReport {
    const NAME: &'static str = "check";
    const SCHEMA: &'static str = "hvsim-check-v1";
    const ABOUT: &'static str = "a history's verdict: `hvsim check --json`";
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let path = args.history.display();
    let text = hvsim_vmm::files::read_text(&args.history).with_context(|| format!("cannot read history {path}"))?;
    let limits = Limits { steps: args.step_limit, ..Limits::default() };
    let events = history::parse(&text).with_context(|| format!("history {path}"))?;
    let j = judge(args.model.into(), &events, limits).with_context(|| format!("history {path}"))?;
    if json {
        let serde_json::Value::Object(verdict) = j.verdict else {
            anyhow::bail!("history {path}: the {} checker's verdict is not a JSON object", args.model.name());
        };
        crate::util::print_json(&CheckReport { schema: Tag::new(), verdict })?;
        eprintln!("hvsim: check {path}: {}", j.summary);
    } else {
        println!("{path}: {}", j.summary);
    }
    Ok(ExitCode::from(match j.status {
        Status::Valid => crate::util::EXIT_OK,
        Status::Invalid => crate::util::EXIT_NOT_LINEARIZABLE,
        Status::Undecided => crate::util::EXIT_UNDECIDED,
    }))
}

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

impl Model {
    fn name(self) -> &'static str {
        match self {
            Model::Register => "register",
            Model::Set => "set",
            Model::Queue => "queue",
        }
    }
}

impl From<Model> for ModelKind {
    fn from(m: Model) -> ModelKind {
        match m {
            Model::Register => ModelKind::Register,
            Model::Set => ModelKind::Set,
            Model::Queue => ModelKind::Queue,
        }
    }
}
