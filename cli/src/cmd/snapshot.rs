//! `hvsim snapshot info FILE`: what a snapshot holds (and that it is intact).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use hvsim_explorer::document::{Document, Tag};
use hvsim_snapshot::file;
use hvsim_vmm::Vtime;
use schemars::JsonSchema;
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Verify a snapshot file and describe it.
    Info { file: PathBuf },
}

/// What `hvsim snapshot info --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct SnapshotInfo {
    schema: Tag<SnapshotInfo>,
    file: PathBuf,
    format_version: u32,
    hvsim_version: String,
    world: BTreeMap<String, String>,
    guest: String,
    seed: u64,
    vtime_ns: u64,
    exits: u64,
    trace_hash: String,
    ram_bytes: usize,
    pages_stored: usize,
    memory_compressed_bytes: usize,
    halted: bool,
    /// How the machine had ended, if it had.
    ended: Option<String>,
    console_bytes: usize,
    messages: usize,
}

impl Document for SnapshotInfo {
    const NAME: &'static str = "snapshot-info";
    const SCHEMA: &'static str = "hvsim-snapshot-info-v1";
    const ABOUT: &'static str = "a snapshot file, verified and described: `hvsim snapshot info --json`";
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let What::Info { file: path } = args.what;
    let loaded = file::load(&path)?;
    let pages = loaded.for_each_page(|_, _| {})?;
    let h = &loaded.header;
    let m = &h.machine;
    let info = SnapshotInfo {
        schema: Tag::new(),
        file: path.clone(),
        format_version: file::VERSION,
        hvsim_version: h.hvsim_version.clone(),
        world: h.world.clone(),
        guest: h.guest.clone(),
        seed: h.seed,
        vtime_ns: m.state.clock.now().nanos(),
        exits: m.trace.events,
        trace_hash: m.trace.hash_hex(),
        ram_bytes: m.spec.ram_size,
        pages_stored: pages,
        memory_compressed_bytes: loaded.compressed_memory_bytes(),
        halted: m.state.halted,
        ended: m.state.ended.as_ref().map(|e| e.name().to_owned()),
        console_bytes: m.state.devices.serial.console_len(),
        messages: m.state.messages.len(),
    };
    if json {
        crate::util::print_json(&info)?;
    } else {
        println!("{}: hvsim snapshot, format {}, written by hvsim {}", path.display(), file::VERSION, h.hvsim_version);
        println!("  guest {} seed {}", h.guest, h.seed);
        println!(
            "  at virtual time {} after {} exits; trace {}",
            Vtime(m.state.clock.now().nanos()),
            m.trace.events,
            m.trace.hash_hex()
        );
        println!(
            "  RAM {} MiB, {} pages stored ({} bytes compressed)",
            m.spec.ram_size >> 20,
            pages,
            loaded.compressed_memory_bytes()
        );
        println!("  vCPU {}", if m.state.halted { "halted" } else { "running" });
        for (part, value) in &h.world {
            println!("  world: {part} {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
