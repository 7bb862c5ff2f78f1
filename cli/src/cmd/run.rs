//! `hvsim run`: one run of a guest.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hvsim_guest_image::linux::{self, GuestFile, LinuxOptions};
use hvsim_guest_image::raw;
use hvsim_vmm::{Machine, MachineConfig, Vtime};

use hvsim_guest_image::host::Host;

use crate::nodes::NodeArgs;
use crate::session::{Output, Session};
use crate::util;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").args(["guest", "linux", "list_guests"]).required(true)))]
pub struct Args {
    /// Built-in raw guest to run (see --list-guests).
    #[arg(long)]
    guest: Option<String>,
    /// Boot hvsim's Linux guest (building its kernel the first time).
    #[arg(long)]
    linux: bool,
    /// With --linux: the shell command init runs; its exit status ends the run.
    #[arg(long, default_value = "true", requires = "linux")]
    init_cmd: String,
    /// With --linux: guest RAM (e.g. 128M, 1G).
    #[arg(long, default_value = "128M", value_parser = util::parse_size, requires = "linux")]
    mem: usize,
    /// With --linux: keep the kernel's boot messages on the console.
    #[arg(long, requires = "linux")]
    verbose_boot: bool,
    /// With --linux: copy a host file into the guest (repeatable).
    #[arg(long, value_name = "HOST:GUEST", value_parser = GuestFile::parse, requires = "linux")]
    guest_file: Vec<GuestFile>,
    #[command(flatten)]
    nodes: NodeArgs,
    /// Master seed (decimal or 0x hex): the run is a pure function of it.
    #[arg(long, default_value = "0", value_parser = util::parse_seed)]
    seed: u64,
    /// Save a snapshot when virtual time reaches this point (with
    /// --save-snapshot); the run then goes on as if nothing happened.
    #[arg(long, value_parser = util::parse_duration, requires = "save_snapshot")]
    snapshot_at: Option<Duration>,
    /// Where --snapshot-at saves the snapshot.
    #[arg(long, value_name = "FILE", requires = "snapshot_at")]
    save_snapshot: Option<PathBuf>,
    #[command(flatten)]
    out: Output,
    /// List the built-in guests and exit.
    #[arg(long)]
    list_guests: bool,
}

pub fn main(args: Args) -> Result<ExitCode> {
    if args.list_guests {
        for g in raw::GUESTS {
            let forever = if g.runs_forever { " (runs until stopped)" } else { "" };
            println!("{:<14} {}{forever}", g.name, g.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Bad input is reported before anything slow (kernel build, boot).
    let system = if args.linux { Some(args.nodes.system()?) } else { None };
    let host = Host::open()?;
    let (name, config, host_limits) = if let Some(system) = system {
        let opts = LinuxOptions {
            command: args.init_cmd.clone(),
            node_command: system.node_cmd.clone(),
            nested_workarounds: host.profile.nested_pvm,
            verbose: args.verbose_boot,
            cpuid_virtualized: host.probes.cpuid_virtualized,
            files: args.guest_file.clone(),
        };
        let image = linux::prepare(&opts).context("cannot prepare the Linux guest")?;
        let mut config = MachineConfig::linux(image, args.seed, args.mem, &host.profile);
        system.apply(&mut config, args.seed)?;
        ("linux", config, host.probes.limits())
    } else {
        let name = args.guest.as_deref().expect("clap requires a target");
        let Some(guest) = raw::find(name) else {
            let names: Vec<_> = raw::GUESTS.iter().map(|g| g.name).collect();
            bail!("no built-in guest `{name}` (there are: {})", names.join(", "));
        };
        (guest.name, MachineConfig::raw(guest.build(), args.seed, &host.profile), Vec::new())
    };
    let mut config = config;
    config.host = host.settings(args.linux, args.out.watchdog.map(|w| w.0));

    let machine = Machine::new(&config).context("cannot create the virtual machine")?;
    let mut session = Session::start(machine, name, args.seed, &args.out, host_limits)?;
    if let (Some(at), Some(path)) = (args.snapshot_at, &args.save_snapshot) {
        let at = Vtime(u64::try_from(at.as_nanos()).unwrap_or(u64::MAX));
        match session.run_to(at)? {
            None => {
                let stats = hvsim_snapshot::file::save(path, &mut session.machine, name, args.seed)?;
                eprintln!(
                    "hvsim: snapshot at virtual time {at} saved to {} ({} pages, {} bytes)",
                    path.display(),
                    stats.pages,
                    stats.file_bytes
                );
            }
            Some(end) => eprintln!(
                "hvsim: warning: the run ended ({}) before --snapshot-at {at}; no snapshot saved",
                end.name()
            ),
        }
    }
    session.finish(&args.out)
}
