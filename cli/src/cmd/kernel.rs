//! `hvsim kernel`: the guest kernel build.

use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_guest_image::linux::kernel;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Build the guest kernel (installs what it needs; a no-op when cached).
    Build,
    /// Print the path of the cached kernel, if built.
    Path,
}

pub fn main(args: Args) -> Result<ExitCode> {
    match args.what {
        What::Build => {
            let k = kernel::ensure_built().context("cannot build the guest kernel")?;
            println!("{}", k.vmlinux.display());
        }
        What::Path => match kernel::cached() {
            Some(k) => println!("{}", k.vmlinux.display()),
            None => anyhow::bail!("the guest kernel is not built yet (run `hvsim kernel build`)"),
        },
    }
    Ok(ExitCode::SUCCESS)
}
