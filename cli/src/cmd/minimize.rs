//! `hvsim minimize`: shrink a bug's timeline to the fewest decisions with
//! which it still fails (`hvsim_explorer::minimize`), written as a new
//! record that replays.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_explorer::bug::Minimization;
use hvsim_explorer::document::{Document, Tag};
use hvsim_explorer::minimize::{self, Budget};
use hvsim_explorer::StartOptions;
use hvsim_guest_image::host::Host;
use schemars::JsonSchema;
use serde::Serialize;

use super::replay;
use crate::util;

#[derive(clap::Args)]
pub struct Args {
    /// A bug record written by `hvsim explore` (or by `hvsim minimize`).
    bug: PathBuf,
    /// Where to write the minimized record. Default: beside the bug's,
    /// as BUG-<id>.min.json (where its exploration's copies of the
    /// target's files are, so it replays from anywhere).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Candidate runs at most, each from the bug's root to its failure (on
    /// a Linux target, seconds to minutes each here).
    #[arg(long, default_value = "64", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_runs: u32,
    /// Minimize even if the world the record comes from differs from this
    /// one (see `hvsim replay --force`).
    #[arg(long)]
    force: bool,
    /// Run the bug's target to its root even where the root was saved.
    #[arg(long)]
    fresh_root: bool,
}

/// What `hvsim minimize --json` prints: the minimized record's file and
/// what the minimization kept.
#[derive(Serialize, JsonSchema)]
pub struct MinimizeReport {
    schema: Tag<MinimizeReport>,
    /// The bug's id.
    bug: String,
    /// The minimized record (BUG-<id>.min.json unless --out).
    file: PathBuf,
    minimization: Minimization,
}

impl Document for MinimizeReport {
    const NAME: &'static str = "minimize";
    const SCHEMA: &'static str = "hvsim-minimize-v1";
    const ABOUT: &'static str = "a bug's timeline shrunk to the decisions it needs: `hvsim minimize --json`";
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let opened = replay::open(&args.bug, &host, args.force, args.fresh_root)?;
    let record = &opened.record;
    let decisions = minimize::decisions(record);
    let spinner = hvsim_guest_image::progress::spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template("hvsim: minimize [{elapsed}] {spinner} {msg}").expect("valid template"),
    );
    spinner.enable_steady_tick(std::time::Duration::from_millis(500));
    spinner.set_message(format!("{}: {} decisions, the first run from its root", record.id, decisions.len()));
    let mut progress = |runs: u32, kept: usize| {
        spinner.set_message(format!("{}: {runs} runs, {kept} of {} decisions left", record.id, decisions.len()));
    };
    let minimized = minimize::minimize(
        record,
        &host,
        &StartOptions::default(),
        opened.root.as_ref(),
        Budget { runs: args.max_runs },
        &mut progress,
    );
    spinner.finish_and_clear();
    let mut minimized = minimized?;
    minimized.target = opened.explored.clone();
    let file = match &args.out {
        Some(f) => f.clone(),
        None => args.bug.with_file_name(format!("{}.min.json", record.id)),
    };
    minimized.replay_command = hvsim_explorer::report::replay_command(&file);
    let bytes = hvsim_explorer::document::json(&minimized).with_context(|| format!("writing {}", file.display()))?;
    hvsim_vmm::files::publish(&file, &bytes).with_context(|| format!("writing {}", file.display()))?;
    let m = minimized.minimized.as_ref().expect("a minimized record says so");
    if json {
        let report = MinimizeReport { schema: Tag::new(), bug: minimized.id.clone(), file, minimization: m.clone() };
        util::print_json(&report)?;
    } else {
        let list = |ds: &[hvsim_explorer::bug::Decision]| {
            if ds.is_empty() {
                " none".to_owned()
            } else {
                ds.iter().map(|d| format!("\n    {}", d.describe())).collect::<String>()
            }
        };
        println!(
            "{}: {} decisions minimized to {} in {} runs{}\n  kept (the failure needs each):{}\n  taken back:{}\n  \
             the same failure at virtual time {:.6} s (was {:.6} s): {}\n  written to {}\n  replay: {}",
            minimized.id,
            m.decisions,
            m.kept.len(),
            m.runs,
            if m.one_minimal { " (1-minimal)" } else { " (the run budget ran out first: --max-runs)" },
            list(&m.kept),
            list(&m.removed),
            minimized.at.vtime_ns as f64 / 1e9,
            m.from_at.vtime_ns as f64 / 1e9,
            minimized.summary,
            file.display(),
            minimized.replay_command,
        );
    }
    Ok(ExitCode::from(util::EXIT_OK))
}
