//! `hvsim merge`: shards' results combined into one exploration's
//! (docs/scale.md): a new directory with report.json, report.md,
//! report.html, findings, bugs/ and inputs/, whose records replay on their
//! own.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_explorer::merge;
use hvsim_explorer::report::RunDir;

use crate::cmd::explore::{exit_status, print_summary};

#[derive(clap::Args)]
pub struct Args {
    /// Shards' results: exploration directories, or the --out directories
    /// they were written to (each one's `latest` is taken).
    #[arg(required = true, value_name = "SHARD_DIR")]
    shards: Vec<PathBuf>,
    /// The merged exploration's directory: new, or empty. It appears whole
    /// (written beside it, then renamed).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// As for `hvsim explore`: also exit 10 when a property was never
    /// satisfied or reached, or a claim did not pass.
    #[arg(long)]
    fail_on_unmet: bool,
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    if std::fs::read_dir(&args.out).is_ok_and(|mut d| d.next().is_some()) || args.out.is_file() {
        anyhow::bail!(
            "--out {}: it exists and is not an empty directory; a merge writes a new one",
            args.out.display()
        );
    }
    let mut inputs = Vec::new();
    for dir in &args.shards {
        let (dir, exploration) = merge::load(dir)?;
        inputs.push((dir, exploration));
    }
    for (dir, e) in &inputs {
        if !e.ending.ran_to_end() {
            eprintln!("hvsim: merge: warning: {} {}: merged as it stands", dir.display(), e.ending.describe());
        }
    }
    let dirs: Vec<PathBuf> = inputs.iter().map(|(d, _)| d.clone()).collect();
    let merged = merge::merge(inputs)?;
    let staging = staging_dir(&args.out)?;
    let written = (|| {
        let run = RunDir::staged(&staging, &args.out)?;
        for dir in &dirs {
            let from = dir.join("inputs");
            hvsim_guest_image::inputs::copy_missing(&from, &run.inputs())
                .with_context(|| format!("copying the kept files of {}", from.display()))?;
        }
        let report = run.write(&merged)?;
        if args.out.is_dir() {
            std::fs::remove_dir(&args.out).with_context(|| format!("replacing the empty {}", args.out.display()))?;
        }
        std::fs::rename(&staging, &args.out)
            .with_context(|| format!("moving the merge from {} to {}", staging.display(), args.out.display()))?;
        anyhow::Ok(report)
    })();
    let report = match written {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e.context("cannot write the merged exploration"));
        }
    };
    if json {
        crate::util::print_json(&report)?;
    }
    let shards = &report.summary.shards;
    eprintln!(
        "hvsim: merged {} director{}: {}",
        args.shards.len(),
        if args.shards.len() == 1 { "y" } else { "ies" },
        if shards.count == 1 { "the whole exploration".to_owned() } else { shards.describe() }
    );
    if !shards.missing().is_empty() {
        eprintln!("hvsim: merge: warning: {}: the missing shards' branches are not in it", shards.describe());
    }
    print_summary(&report, &args.out);
    Ok(ExitCode::from(exit_status(&report, args.fail_on_unmet, super::explore::FailOn::Any)))
}

/// A new directory beside `out`, on its file system, for the rename.
fn staging_dir(out: &Path) -> Result<PathBuf> {
    let name = out.file_name().with_context(|| format!("--out {}: names no directory", out.display()))?;
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let staging = parent.join(format!(".{}.merging-{}", name.to_string_lossy(), std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    Ok(staging)
}
