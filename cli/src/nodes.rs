//! Options that make a Linux guest a simulated multi-node system: nodes,
//! their disks, and the fault plan (shared by `run` and `explore`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use hvsim_explorer::target::{file_hash, System};
use hvsim_vmm::devices::virtio::MAX_NODES;
use hvsim_vmm::faults::FaultPlan;

use crate::util;

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
    /// (`HVSIM_NODE` says which), started at boot and again whenever a
    /// crashed node restarts.
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
