//! `hvsim kernel`: the guest kernel build.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_explorer::document::{Document, Tag};
use hvsim_guest_image::hash::file_hash;
use hvsim_guest_image::linux::{initramfs, kernel};
use schemars::JsonSchema;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::util::print_json;

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

/// What `hvsim kernel build --json` and `hvsim kernel path --json` print.
#[derive(Serialize, JsonSchema)]
pub struct KernelJson {
    schema: Tag<KernelJson>,
    #[serde(flatten)]
    kernel: KernelInfo,
}

impl Document for KernelJson {
    const NAME: &'static str = "kernel";
    const SCHEMA: &'static str = "hvsim-kernel-v1";
    const ABOUT: &'static str = "the guest kernel: `hvsim kernel build --json`, `hvsim kernel path --json`";
}

impl KernelJson {
    fn of(built: Option<&kernel::Kernel>, cached: bool) -> Result<KernelJson> {
        Ok(KernelJson { schema: Tag::new(), kernel: KernelInfo::of(built, cached)? })
    }
}

/// The kernel, as its documents describe it.
#[derive(Serialize, JsonSchema)]
struct KernelInfo {
    /// linux-source-6.1's installed version (null: not installed).
    source_version: Option<String>,
    /// The hash of the build's inputs, which names its cache entry.
    key: Option<String>,
    /// It was built before this command (`build` built nothing).
    cached: bool,
    /// Null when not built.
    vmlinux: Option<PathBuf>,
    vmlinux_sha256: Option<String>,
}

impl KernelInfo {
    fn of(built: Option<&kernel::Kernel>, cached: bool) -> Result<KernelInfo> {
        let (source_version, key) = kernel::expected().unzip();
        let vmlinux_sha256 = built.map(|k| file_hash(&k.vmlinux)).transpose()?;
        Ok(KernelInfo {
            source_version,
            key: built.map(|k| k.key.clone()).or(key),
            cached,
            vmlinux: built.map(|k| k.vmlinux.clone()),
            vmlinux_sha256,
        })
    }
}

/// What `hvsim kernel hashes --json` prints: the rows of its table.
#[derive(Serialize, JsonSchema)]
pub struct HashesJson {
    schema: Tag<HashesJson>,
    #[serde(flatten)]
    kernel: KernelInfo,
    /// The source tarball's SHA-256, and whether it and its version are
    /// among the ones this hvsim was checked with.
    source_sha256: String,
    pinned: bool,
    initramfs_sha256: String,
    init_sha256: String,
    busybox_sha256: String,
    libvoidstar_sha256: String,
}

impl Document for HashesJson {
    const NAME: &'static str = "kernel-hashes";
    const SCHEMA: &'static str = "hvsim-kernel-hashes-v1";
    const ABOUT: &'static str = "the SHA-256 of everything the guest is made of: `hvsim kernel hashes --json`";
}

fn build() -> Result<(kernel::Kernel, bool)> {
    let cached = kernel::cached().is_some();
    Ok((kernel::ensure_built().context("cannot build the guest kernel")?, cached))
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    match args.what {
        What::Build => {
            let (k, cached) = build()?;
            if json {
                print_json(&KernelJson::of(Some(&k), cached)?)?;
            } else {
                println!("{}", k.vmlinux.display());
            }
        }
        What::Hashes => {
            let (version, source, pinned) = kernel::source()?;
            let (k, cached) = build()?;
            let busybox = initramfs::host_busybox()?;
            let sha = |bytes: &[u8]| hex::encode(Sha256::digest(bytes));
            let hashes = HashesJson {
                schema: Tag::new(),
                kernel: KernelInfo::of(Some(&k), cached)?,
                source_sha256: source,
                pinned,
                initramfs_sha256: sha(&initramfs::build(&busybox, &[])),
                init_sha256: sha(initramfs::INIT),
                busybox_sha256: sha(&busybox),
                libvoidstar_sha256: sha(initramfs::VOIDSTAR),
            };
            if json {
                print_json(&hashes)?;
                return Ok(ExitCode::SUCCESS);
            }
            let h = &hashes;
            let rows = [
                (
                    "source",
                    format!(
                        "{}  linux-source-6.1 {version}{}",
                        h.source_sha256,
                        if pinned { "" } else { " (NOT pinned)" }
                    ),
                ),
                ("key", k.key.clone()),
                ("vmlinux", h.kernel.vmlinux_sha256.clone().unwrap_or_default()),
                ("initramfs", h.initramfs_sha256.clone()),
                ("init", h.init_sha256.clone()),
                ("busybox", h.busybox_sha256.clone()),
                ("libvoidstar", h.libvoidstar_sha256.clone()),
            ];
            for (name, value) in rows {
                println!("{name:<12} {value}");
            }
        }
        What::Path => {
            let k = kernel::cached();
            // Not built is a state scripts ask about: described on stdout
            // as well, with the same error and exit status as without --json.
            if json {
                print_json(&KernelJson::of(k.as_ref(), k.is_some())?)?;
            }
            match k {
                Some(k) if !json => println!("{}", k.vmlinux.display()),
                Some(_) => {}
                None => anyhow::bail!("the guest kernel is not built yet (run `hvsim kernel build`)"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
