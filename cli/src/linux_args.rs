//! Options that describe a Linux target (shared by `run` and `explore`):
//! its command, memory and files, and the nodes that make it a simulated
//! multi-node system, with their disks and the fault plan.

use std::path::PathBuf;

use anyhow::{Context, Result};
use hvsim_guest_image::linux::GuestFile;
use hvsim_guest_image::target::{file_hash, StartOptions, System, Target};
use hvsim_vmm::devices::virtio::MAX_NODES;
use hvsim_vmm::faults::FaultPlan;

use crate::util;

#[derive(clap::Args, Clone, Debug)]
pub struct LinuxArgs {
    /// With --linux: the shell command init runs; its exit status ends the
    /// run (report through the SDK to explore it).
    #[arg(long, default_value = "true", requires = "linux")]
    pub init_cmd: String,
    /// With --linux: guest RAM (e.g. 128M, 1G).
    #[arg(long, default_value = "128M", value_parser = util::parse_size, requires = "linux")]
    pub mem: usize,
    /// With --linux: copy a host file into the guest (repeatable).
    #[arg(long, value_name = "HOST:GUEST", value_parser = GuestFile::parse, requires = "linux")]
    pub guest_file: Vec<GuestFile>,
    /// With --linux: boot the guest even if the boot cache holds it (and do
    /// not save it there).
    #[arg(long, requires = "linux")]
    pub cold_boot: bool,
    #[command(flatten)]
    pub nodes: NodeArgs,
}

impl LinuxArgs {
    /// The target these options describe (reads and hashes its files).
    pub fn target(&self, verbose_boot: bool) -> Result<Target> {
        let files = self
            .guest_file
            .iter()
            .map(|f| Ok((f.clone(), file_hash(&f.host)?)))
            .collect::<hvsim_guest_image::Result<Vec<_>>>()?;
        Ok(Target::Linux { command: self.init_cmd.clone(), mem: self.mem, files, system: self.nodes.system()?, verbose_boot })
    }

    pub fn start_options(&self, watchdog: Option<Option<std::time::Duration>>) -> StartOptions {
        StartOptions { cold_boot: self.cold_boot, watchdog }
    }
}

#[derive(clap::Args, Clone, Debug)]
pub struct NodeArgs {
    /// With --linux: nodes to simulate. Each gets a NIC on hvsim's switch,
    /// its own network namespace with address 10.0.0.<node+1>, and a disk
    /// (run a command on node I with `hvsim-node I CMD...` in the guest).
    #[arg(long, default_value_t = 0, requires = "linux",
          value_parser = clap::value_parser!(u16).range(0..=i64::from(MAX_NODES)))]
    pub nodes: u16,
    /// With --nodes: the fault plan to inject (TOML; see examples/faults/).
    #[arg(long, value_name = "FILE", requires = "nodes")]
    pub fault_plan: Option<PathBuf>,
    /// With --nodes: each node's disk size.
    #[arg(long, default_value = "64M", value_parser = util::parse_size, requires = "nodes")]
    pub disk_size: usize,
    /// With --nodes: a raw disk image every node's disk starts from
    /// (read-only; writes go to a per-node overlay in memory).
    #[arg(long, value_name = "FILE", requires = "nodes")]
    pub disk_image: Option<PathBuf>,
    /// With --nodes: a shell command every node runs as its service
    /// (`HVSIM_NODE` says which), started when the run starts and again
    /// whenever a crashed node restarts.
    #[arg(long, value_name = "CMD", requires = "nodes")]
    pub node_cmd: Option<String>,
}

impl NodeArgs {
    /// The system these options describe (reads the plan, hashes the image).
    pub fn system(&self) -> Result<System> {
        let fault_plan = self
            .fault_plan
            .as_ref()
            .map(|p| std::fs::read_to_string(p).with_context(|| format!("cannot read fault plan {}", p.display())))
            .transpose()?;
        if let (Some(text), Some(path)) = (&fault_plan, &self.fault_plan) {
            // Check it now, for an error that names the file.
            FaultPlan::parse(text, 0, self.nodes).map_err(|e| anyhow::anyhow!("fault plan {}: {e}", path.display()))?;
        }
        let disk_image = match &self.disk_image {
            None => None,
            Some(p) => {
                let hash = file_hash(p)?;
                let len = std::fs::metadata(p).with_context(|| format!("cannot read disk image {}", p.display()))?.len();
                if len > self.disk_size as u64 {
                    anyhow::bail!("disk image {} ({len} bytes) is larger than --disk-size ({} bytes)", p.display(), self.disk_size);
                }
                Some((p.clone(), hash))
            }
        };
        Ok(System {
            nodes: self.nodes,
            disk_bytes: self.disk_size as u64,
            disk_image,
            fault_plan,
            node_cmd: self.node_cmd.clone(),
        })
    }
}
