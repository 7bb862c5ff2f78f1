//! What the explorer runs: a built-in raw guest or hvsim's Linux guest with
//! a command. Plain data, so a bug record names the exact target to replay.

use hvsim_guest_image::host::Host;
use hvsim_guest_image::linux::{self, GuestFile, LinuxOptions};
use sha2::{Digest, Sha256};
use hvsim_guest_image::raw;
use hvsim_vmm::MachineConfig;
use serde::{Deserialize, Serialize};

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
    },
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
            Target::Linux { command, mem, files } => {
                for (f, hash) in files {
                    if file_hash(&f.host)? != *hash {
                        return Err(ExploreError::Target(format!(
                            "guest file {} changed since the exploration (its SHA-256 differs)",
                            f.host.display()
                        )));
                    }
                }
                let opts = LinuxOptions {
                    command: command.clone(),
                    nested_workarounds: host.profile.nested_pvm,
                    verbose: false,
                    cpuid_virtualized: host.probes.cpuid_virtualized,
                    files: files.iter().map(|(f, _)| f.clone()).collect(),
                };
                let image = linux::prepare(&opts).map_err(|e| ExploreError::Target(e.to_string()))?;
                MachineConfig::linux(image, seed, *mem, &host.profile)
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
