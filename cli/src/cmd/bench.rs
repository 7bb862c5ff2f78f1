//! `hvsim bench`: measurements printed as ratios against a baseline measured
//! side by side in the same run (absolute times on a nested host mean little).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use hvsim_guest_image::raw;
use hvsim_vmm::host::{open_kvm, HostProfile};
use hvsim_vmm::{Machine, MachineConfig, Stop, Vtime};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Cost of one exit round trip through hvsim's run loop vs a bare KVM_RUN loop.
    Exits {
        /// Exits per measurement.
        #[arg(long, default_value = "20000")]
        exits: u32,
        /// Measurements of each loop (medians are reported).
        #[arg(long, default_value = "5")]
        repeat: usize,
        #[arg(long)]
        json: bool,
    },
}

pub fn main(args: Args) -> Result<ExitCode> {
    match args.what {
        What::Exits { exits, repeat, json } => bench_exits(exits, repeat.max(1), json),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn bench_exits(n: u32, repeat: usize, json: bool) -> Result<ExitCode> {
    let host = HostProfile::detect(&open_kvm()?);
    let config = MachineConfig::raw(raw::exit_loop(n), 0, &host);
    let mut hvsim_ns = Vec::new();
    let mut bare_ns = Vec::new();
    // Alternate the two loops so drift on a shared host hits both alike.
    for _ in 0..repeat {
        let mut m = Machine::new(&config)?;
        let start = Instant::now();
        let stop = m.run_until(Vtime::MAX)?;
        let t = start.elapsed();
        if !matches!(stop, Stop::Ended(hvsim_vmm::End::Exit { status: 0 })) {
            bail!("exit-loop guest did not finish under hvsim: {stop:?}");
        }
        hvsim_ns.push(per_exit(t, m.trace_state().events));

        let mut m = Machine::new(&config)?;
        let (exits, t) = m.run_bare()?;
        bare_ns.push(per_exit(t, exits));
    }
    let (h, b) = (median(hvsim_ns), median(bare_ns));
    let ratio = h / b;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "benchmark": "exits",
                "exits_per_measurement": n,
                "repeat": repeat,
                "hvsim_ns_per_exit": h,
                "bare_kvm_ns_per_exit": b,
                "ratio": ratio,
                "nested_host": host.nested_pvm,
            })
        );
    } else {
        println!("exit round trip, median of {repeat} x {n} exits (ring-0 port reads):");
        println!("  bare KVM_RUN loop (baseline): {b:>10.0} ns/exit");
        println!("  hvsim run loop:               {h:>10.0} ns/exit");
        println!("  ratio hvsim / bare:           {ratio:>10.3}");
        if host.nested_pvm {
            println!("  (host: nested kvm_pvm; absolute numbers are not representative)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn per_exit(t: Duration, exits: u64) -> f64 {
    t.as_nanos() as f64 / exits.max(1) as f64
}
