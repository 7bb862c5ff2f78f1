//! What the explorer runs: a built-in raw guest or hvsim's Linux guest with
//! a command. Plain data, so a bug record names the exact target to replay.

use std::path::PathBuf;

use hvsim_guest_image::host::Host;
use hvsim_guest_image::linux::{self, GuestFile, LinuxOptions};
use hvsim_guest_image::raw;
use hvsim_vmm::devices::virtio::VirtioSpec;
use hvsim_vmm::faults::FaultPlan;
use hvsim_vmm::MachineConfig;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{ExploreError, Result};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    Raw { guest: String },
    Linux {
        command: String,
        mem: usize,
        /// Host files copied into the guest, with the SHA-256 of their
        /// contents when the exploration ran (a replay refuses changed files).
        #[serde(default)]
        files: Vec<(GuestFile, String)>,
        /// Simulated nodes, their disks, and the faults injected.
        #[serde(default)]
        system: System,
    },
}

/// A simulated multi-node system inside the Linux guest (`--nodes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct System {
    pub nodes: u16,
    /// Each node's disk size in bytes.
    pub disk_bytes: u64,
    /// The base image under every disk, with its SHA-256 (a replay refuses
    /// a changed image).
    pub disk_image: Option<(PathBuf, String)>,
    /// The fault plan's text: kept whole, so a bug record replays without
    /// the file. Ranges are resolved from the master seed.
    pub fault_plan: Option<String>,
    /// The command every node runs, started again when a node restarts.
    #[serde(default)]
    pub node_cmd: Option<String>,
}

impl System {
    /// Gives the machine this system's devices and faults.
    pub fn apply(&self, config: &mut MachineConfig, seed: u64) -> Result<()> {
        if let Some((path, hash)) = &self.disk_image {
            check_unchanged(path, hash, "disk image")?;
        }
        config.spec.virtio = VirtioSpec {
            nodes: self.nodes,
            disk_bytes: self.disk_bytes,
            disk_base: self.disk_image.as_ref().map(|(p, _)| p.display().to_string()),
            rng: true,
        };
        if let Some(text) = &self.fault_plan {
            config.faults = FaultPlan::parse(text, seed, self.nodes)
                .map_err(|e| ExploreError::Target(format!("fault plan: {e}")))?;
        }
        Ok(())
    }
}

fn check_unchanged(path: &std::path::Path, hash: &str, what: &str) -> Result<()> {
    if file_hash(path)? != hash {
        return Err(ExploreError::Target(format!(
            "{what} {} changed since the exploration (its SHA-256 differs)",
            path.display()
        )));
    }
    Ok(())
}

impl Target {
    pub fn name(&self) -> String {
        match self {
            Target::Raw { guest } => guest.clone(),
            Target::Linux { .. } => "linux".into(),
        }
    }

    pub fn is_linux(&self) -> bool {
        matches!(self, Target::Linux { .. })
    }

    /// The machine for this target under master seed `seed` on `host`.
    pub fn config(&self, seed: u64, host: &Host) -> Result<MachineConfig> {
        let mut config = match self {
            Target::Raw { guest } => {
                let g = raw::find(guest).ok_or_else(|| {
                    let names: Vec<_> = raw::GUESTS.iter().map(|g| g.name).collect();
                    ExploreError::Target(format!("no built-in guest `{guest}` (there are: {})", names.join(", ")))
                })?;
                MachineConfig::raw(g.build(), seed, &host.profile)
            }
            Target::Linux { command, mem, files, system } => {
                for (f, hash) in files {
                    check_unchanged(&f.host, hash, "guest file")?;
                }
                let opts = LinuxOptions {
                    command: command.clone(),
                    node_command: system.node_cmd.clone(),
                    nested_workarounds: host.profile.nested_pvm,
                    verbose: false,
                    cpuid_virtualized: host.probes.cpuid_virtualized,
                    files: files.iter().map(|(f, _)| f.clone()).collect(),
                };
                let image = linux::prepare(&opts).map_err(|e| ExploreError::Target(e.to_string()))?;
                let mut config = MachineConfig::linux(image, seed, *mem, &host.profile);
                system.apply(&mut config, seed)?;
                config
            }
        };
        config.host = host.settings(self.is_linux(), None);
        Ok(config)
    }
}

/// SHA-256 (hex) of a host file.
pub fn file_hash(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| ExploreError::Target(format!("cannot read {}: {e}", path.display())))?;
    Ok(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_recorded_before_nodes_existed_still_load() {
        let old = r#"{"kind":"linux","command":"true","mem":134217728,"files":[]}"#;
        let t: Target = serde_json::from_str(old).unwrap();
        assert!(matches!(t, Target::Linux { system, .. } if system == System::default()));
        let with = Target::Linux {
            command: "true".into(),
            mem: 1 << 27,
            files: vec![],
            system: System {
                nodes: 2,
                disk_bytes: 1 << 20,
                disk_image: None,
                fault_plan: Some("[network]\ndrop = 0.1\n".into()),
                node_cmd: Some("serve".into()),
            },
        };
        let back: Target = serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back, with, "the fault plan's text travels with a bug record");
    }
}
