//! `hvsim kernel`: the guest kernel build.

use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_guest_image::linux::{initramfs, kernel};
use hvsim_guest_image::target::file_hash;
use sha2::{Digest, Sha256};

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
    /// Print the SHA-256 of everything the guest is made of (building the
    /// kernel if needed), to compare with docs/guest-kernel.md or another
    /// machine.
    Hashes,
}

pub fn main(args: Args) -> Result<ExitCode> {
    match args.what {
        What::Build => {
            let k = kernel::ensure_built().context("cannot build the guest kernel")?;
            println!("{}", k.vmlinux.display());
        }
        What::Hashes => {
            let (version, source, pinned) = kernel::source()?;
            let k = kernel::ensure_built().context("cannot build the guest kernel")?;
            let busybox = initramfs::host_busybox()?;
            let sha = |bytes: &[u8]| hex::encode(Sha256::digest(bytes));
            let rows = [
                (
                    "source",
                    format!("{source}  linux-source-6.1 {version}{}", if pinned { "" } else { " (NOT pinned)" }),
                ),
                ("key", k.key.clone()),
                ("vmlinux", file_hash(&k.vmlinux)?),
                ("initramfs", sha(&initramfs::build(&busybox, &[]))),
                ("init", sha(initramfs::INIT)),
                ("busybox", sha(&busybox)),
                ("libvoidstar", sha(initramfs::VOIDSTAR)),
            ];
            for (name, value) in rows {
                println!("{name:<12} {value}");
            }
        }
        What::Path => match kernel::cached() {
            Some(k) => println!("{}", k.vmlinux.display()),
            None => anyhow::bail!("the guest kernel is not built yet (run `hvsim kernel build`)"),
        },
    }
    Ok(ExitCode::SUCCESS)
}
