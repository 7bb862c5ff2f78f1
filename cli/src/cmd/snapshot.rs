//! `hvsim snapshot info FILE`: what a snapshot holds (and that it is intact).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use hvsim_snapshot::file;
use hvsim_vmm::Vtime;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Verify a snapshot file and describe it.
    Info {
        file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

pub fn main(args: Args) -> Result<ExitCode> {
    let What::Info { file: path, json } = args.what;
    let loaded = file::load(&path)?;
    let pages = loaded.for_each_page(|_, _| {})?;
    let h = &loaded.header;
    let m = &h.machine;
    let info = serde_json::json!({
        "file": path.display().to_string(),
        "format_version": file::VERSION,
        "hvsim_version": h.hvsim_version,
        "world": h.world,
        "guest": h.guest,
        "seed": h.seed,
        "vtime_ns": m.state.clock.now().nanos(),
        "exits": m.trace.events,
        "trace_hash": m.trace.hash_hex(),
        "ram_bytes": m.spec.ram_size,
        "pages_stored": pages,
        "memory_compressed_bytes": loaded.compressed_memory_bytes(),
        "halted": m.state.halted,
        "ended": m.state.ended.as_ref().map(|e| e.name()),
        "console_bytes": m.state.devices.serial.console().len(),
        "messages": m.state.messages.len(),
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
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
