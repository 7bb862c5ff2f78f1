//! `hvsim cache`: the boot cache of Linux machines booted to init's ready
//! point (see `hvsim_guest_image::linux::boot_cache`), and the explorer's
//! saved roots, machines at setup complete (`hvsim_explorer::roots`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use hvsim_explorer::document::{Document, Tag};
use hvsim_explorer::roots::{self, Roots};
use hvsim_guest_image::linux::boot_cache::{self, BootCache};
use hvsim_guest_image::snapshot_store::StoreEntry;
use schemars::JsonSchema;
use serde::Serialize;

use crate::util::{self, print_table, Column};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// List the cached machines and the saved roots, most recently used first.
    Ls,
    /// Remove every cached machine (the next Linux run of each shape boots)
    /// and every saved root.
    Clear,
}

/// What `hvsim cache ls --json` prints: the cached machines and the saved
/// roots, each most recently used first.
#[derive(Serialize, JsonSchema)]
pub struct CacheListing {
    schema: Tag<CacheListing>,
    dir: PathBuf,
    max_bytes: u64,
    entries: Vec<boot_cache::Entry>,
    roots: SavedRoots,
}

#[derive(Serialize, JsonSchema)]
struct SavedRoots {
    dir: PathBuf,
    max_bytes: u64,
    entries: Vec<roots::Entry>,
}

impl Document for CacheListing {
    const NAME: &'static str = "cache-ls";
    const SCHEMA: &'static str = "hvsim-cache-ls-v1";
    const ABOUT: &'static str = "the boot cache and the saved roots: `hvsim cache ls --json`";
}

/// What `hvsim cache clear --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct CacheCleared {
    schema: Tag<CacheCleared>,
    boot_cache: Cleared,
    roots: Cleared,
}

impl Document for CacheCleared {
    const NAME: &'static str = "cache-clear";
    const SCHEMA: &'static str = "hvsim-cache-clear-v1";
    const ABOUT: &'static str = "what `hvsim cache clear --json` removed";
}

#[derive(Serialize, JsonSchema)]
struct Cleared {
    dir: PathBuf,
    removed: usize,
    bytes: u64,
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let cache = BootCache::open()?;
    let roots = Roots::open()?;
    match args.what {
        What::Ls => {
            let entries = cache.entries()?;
            let saved = roots.entries()?;
            if json {
                util::print_json(&CacheListing {
                    schema: Tag::new(),
                    dir: cache.dir().to_owned(),
                    max_bytes: cache.max_bytes(),
                    entries,
                    roots: SavedRoots {
                        dir: roots.store().dir().to_owned(),
                        max_bytes: roots.store().max_bytes(),
                        entries: saved,
                    },
                })?;
                return Ok(ExitCode::SUCCESS);
            }
            println!("{}", summary(&cache)?);
            let columns =
                |what| [Column("key", false), Column("size", true), Column("last used", true), Column(what, false)];
            let mut rows = Vec::new();
            for e in &entries {
                let machine = e.description.as_ref().map_or("(description unreadable)".to_owned(), |s| {
                    let v = &s.spec.virtio;
                    let nodes = if v.nodes > 0 {
                        format!(", {} nodes with {} MiB disks", v.nodes, v.disk_bytes >> 20)
                    } else {
                        String::new()
                    };
                    format!(
                        "{} MiB RAM{nodes}, kernel {}",
                        s.spec.ram_size >> 20,
                        &s.kernel_sha256[..12.min(s.kernel_sha256.len())]
                    )
                });
                rows.push(row(e, machine));
            }
            print_table(&columns("machine"), &rows);
            let bytes: u64 = saved.iter().map(|e| e.bytes).sum();
            println!(
                "saved roots: {} roots, {} MiB of {} MiB allowed, in {}",
                saved.len(),
                mib(bytes),
                mib(roots.store().max_bytes()),
                roots.store().dir().display()
            );
            let mut rows = Vec::new();
            for e in &saved {
                let root = e.description.as_ref().map_or("(description unreadable)".to_owned(), |r| {
                    format!(
                        "seed {}, setup complete at {:.3} s (virtual), {:.0} s to make",
                        r.id.seed,
                        r.point.vtime_ns as f64 / 1e9,
                        r.wall_ms as f64 / 1000.0
                    )
                });
                rows.push(row(e, root));
            }
            print_table(&columns("root"), &rows);
        }
        What::Clear => {
            // Each told as soon as it is done: the first stays told if the
            // second fails.
            let tell = |c: &Cleared, what: &str| {
                if !json {
                    println!("removed {} {what} ({} MiB) from {}", c.removed, mib(c.bytes), c.dir.display());
                }
            };
            let (removed, bytes) = cache.clear()?;
            let boot_cache = Cleared { dir: cache.dir().to_owned(), removed, bytes };
            tell(&boot_cache, "cached machines");
            let (removed, bytes) = roots.store().clear()?;
            let saved = Cleared { dir: roots.store().dir().to_owned(), removed, bytes };
            tell(&saved, "saved roots");
            if json {
                util::print_json(&CacheCleared { schema: Tag::new(), boot_cache, roots: saved })?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line about the cache (also for `hvsim doctor`).
pub fn summary(cache: &BootCache) -> Result<String> {
    let entries = cache.entries()?;
    let bytes: u64 = entries.iter().map(|e| e.bytes).sum();
    Ok(format!(
        "boot cache: {} machines, {} MiB of {} MiB allowed, in {}",
        entries.len(),
        mib(bytes),
        mib(cache.max_bytes()),
        cache.dir().display()
    ))
}

/// A stored machine's row of `hvsim cache ls`: key, size, last use, and
/// `what` it is.
fn row<D>(e: &StoreEntry<D>, what: String) -> Vec<String> {
    vec![e.key[..16].to_owned(), format!("{} MiB", mib(e.bytes)), ago(e.last_used_ms), what]
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

fn ago(unix_ms: u64) -> String {
    let then = SystemTime::UNIX_EPOCH + Duration::from_millis(unix_ms);
    let secs = SystemTime::now().duration_since(then).unwrap_or_default().as_secs();
    match secs {
        0..=59 => format!("{secs}s ago"),
        60..=3599 => format!("{}m ago", secs / 60),
        3600..=86399 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}
