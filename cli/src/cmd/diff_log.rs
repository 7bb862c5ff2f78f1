//! `hvsim diff-log A B`: the first event where two determinism logs diverge.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_vmm::trace::diff_logs;

#[derive(clap::Args)]
pub struct Args {
    a: PathBuf,
    b: PathBuf,
    /// Shared events to show before the divergence.
    #[arg(long, default_value = "5")]
    context: usize,
}

pub fn main(args: Args) -> Result<ExitCode> {
    let open = |p: &PathBuf| -> Result<BufReader<File>> {
        Ok(BufReader::new(File::open(p).with_context(|| format!("cannot open log {}", p.display()))?))
    };
    let d = diff_logs(open(&args.a)?, open(&args.b)?, args.context).context("cannot read the logs")?;
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
