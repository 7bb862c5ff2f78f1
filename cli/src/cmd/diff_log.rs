//! `hvsim diff-log A B`: the first event where two determinism logs diverge.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_explorer::document::{Document, Tag};
use hvsim_vmm::trace::diff_logs;
use schemars::JsonSchema;
use serde::Serialize;

use crate::util;

/// The first line of every log `--log` writes.
pub const LOG_FORMAT: &str = "# hvsim determinism log v1";

#[derive(clap::Args)]
pub struct Args {
    a: PathBuf,
    b: PathBuf,
    /// Shared events to show before the divergence.
    #[arg(long, default_value = "5", value_parser = clap::value_parser!(u16).range(0..=1000))]
    context: u16,
}

/// What `hvsim diff-log --json` prints: where the logs first differ, if
/// they do.
#[derive(Serialize, JsonSchema)]
pub struct LogDiff {
    schema: Tag<LogDiff>,
    identical: bool,
    /// The index of the first differing event (0-based).
    event: Option<u64>,
    /// The events both logs share just before it, oldest first.
    common: Vec<String>,
    a: Side,
    b: Side,
}

impl Document for LogDiff {
    const NAME: &'static str = "diff-log";
    const SCHEMA: &'static str = "hvsim-diff-log-v1";
    const ABOUT: &'static str = "where two determinism logs first differ: `hvsim diff-log --json`";
}

#[derive(Serialize, JsonSchema)]
struct Side {
    file: PathBuf,
    /// Its differing event; null where the log ended (or none differs).
    event: Option<String>,
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    // A log starts with its format's first line; anything else (another
    // file, a log of another format version) is refused before diffing.
    let open = |p: &PathBuf| -> Result<BufReader<File>> {
        let file = hvsim_vmm::files::open_regular(p).with_context(|| format!("cannot open log {}", p.display()))?;
        let mut r = BufReader::new(file);
        let mut first = String::new();
        r.read_line(&mut first).with_context(|| format!("cannot read log {}", p.display()))?;
        if first.trim_end() != LOG_FORMAT {
            anyhow::bail!(
                "{} is not an hvsim determinism log of this version (its first line is not `{LOG_FORMAT}`)",
                p.display()
            );
        }
        Ok(r)
    };
    let d = diff_logs(open(&args.a)?, open(&args.b)?, usize::from(args.context)).context("cannot read the logs")?;
    if json {
        util::print_json(&LogDiff {
            schema: Tag::new(),
            identical: d.is_none(),
            event: d.as_ref().map(|d| d.event),
            common: d.as_ref().map_or_else(Vec::new, |d| d.common.clone()),
            a: Side { file: args.a.clone(), event: d.as_ref().and_then(|d| d.a.clone()) },
            b: Side { file: args.b.clone(), event: d.as_ref().and_then(|d| d.b.clone()) },
        })?;
        return Ok(ExitCode::from(if d.is_some() { 1 } else { 0 }));
    }
    let Some(d) = d else {
        println!("identical: the logs have the same events");
        return Ok(ExitCode::SUCCESS);
    };
    println!("logs diverge at event {}", d.event);
    for line in &d.common {
        println!("  {line}");
    }
    let show = |l: &Option<String>| l.clone().unwrap_or_else(|| "(log ends)".into());
    println!("- {}: {}", args.a.display(), show(&d.a));
    println!("+ {}: {}", args.b.display(), show(&d.b));
    Ok(ExitCode::from(1))
}
