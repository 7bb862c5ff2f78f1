//! The world a run happens in: everything besides its seed and the
//! target's own inputs that decides what the run does. A bug record (and a
//! snapshot file) carries the world it was found in; a replay first
//! compares it with the world it is about to run in and refuses, with the
//! parts that differ, rather than silently replaying something else.
//!
//! Each part is a short text, mostly a SHA-256: the hvsim version and
//! machine model, the guest kernel and initramfs and what the initramfs
//! holds (hvsim's init, busybox, libvoidstar), the kernel command line, the
//! CPUID and MSR policy the guest sees on this host, and the target
//! description itself (which names its files, disk image and container
//! images by hash).

use std::collections::BTreeMap;

use hvsim_vmm::{cpuid, msr};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{ImageError, Result};
use crate::hash::file_hash;
use crate::host::Host;
use crate::linux::{self, initramfs, LinuxOptions};
use crate::raw;
use crate::target::Target;

/// Named parts of a world (see the module docs), in a stable order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct World(pub BTreeMap<String, String>);

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl World {
    /// The world `target` runs in on this host with this hvsim. For a Linux
    /// target this prepares the guest (building the kernel the first time).
    pub fn of(target: &Target, host: &Host) -> Result<World> {
        let World(mut parts) = World::machine(host)?;
        let mut put = |name: &str, value: String| parts.insert(name.to_owned(), value);
        put("target", sha256(&serde_json::to_vec(target).expect("targets serialize")));
        match target {
            Target::Raw { guest } => {
                let code = raw::find(guest).map(|g| g.build().code).unwrap_or_default();
                put("guest", sha256(&code));
            }
            Target::Linux { verbose_boot, .. } => {
                let image = linux::prepare(&LinuxOptions {
                    nested_workarounds: host.profile.nested_pvm,
                    verbose: *verbose_boot,
                    cpuid_virtualized: host.probes.cpuid_virtualized,
                })?;
                put("kernel", file_hash(&image.kernel)?);
                put("initramfs", sha256(&image.initrd));
                put("init", sha256(initramfs::INIT));
                put("busybox", sha256(&initramfs::host_busybox()?));
                put("libvoidstar", sha256(initramfs::VOIDSTAR));
                put("cmdline", image.cmdline);
            }
        }
        Ok(World(parts))
    }

    /// The parts this hvsim and host decide whatever the guest: the hvsim
    /// version, machine model, and the CPUID and MSR policy the guest gets.
    /// (What a snapshot file is checked against: the guest's own parts
    /// travel inside it.)
    pub fn machine(host: &Host) -> Result<World> {
        let mut parts = BTreeMap::new();
        let mut put = |name: &str, value: String| parts.insert(name.to_owned(), value);
        put("hvsim", env!("CARGO_PKG_VERSION").to_owned());
        put("model", hvsim_vmm::MODEL_ID.to_owned());
        let kvm = hvsim_vmm::host::open_kvm().map_err(|e| ImageError::Setup(e.to_string()))?;
        let cpuid = cpuid::guest_cpuid_sha256(&kvm, host.profile.nested_pvm);
        put("cpuid", cpuid.map_err(|e| ImageError::Setup(e.to_string()))?);
        put("msr-policy", msr::policy_sha256());
        Ok(World(parts))
    }

    /// Only the parts `keys` has too.
    pub fn restricted_to(&self, keys: &World) -> World {
        World(self.0.iter().filter(|(k, _)| keys.0.contains_key(*k)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// The parts that differ from `other` (this world's value first), as
    /// one line: empty when the worlds are the same.
    pub fn diff(&self, other: &World) -> String {
        let short = |v: Option<&String>| match v {
            None => "(none)".to_owned(),
            Some(v) if v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()) => v[..12].to_owned(),
            Some(v) => format!("{v:?}"),
        };
        let names: std::collections::BTreeSet<&String> = self.0.keys().chain(other.0.keys()).collect();
        names
            .into_iter()
            .filter(|n| self.0.get(*n) != other.0.get(*n))
            .map(|n| format!("{n} {} vs {}", short(self.0.get(n)), short(other.0.get(n))))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_names_every_part_that_differs() {
        let a = World([("kernel", "a".repeat(64)), ("hvsim", "0.1.0".into())].map(|(k, v)| (k.to_owned(), v)).into());
        let mut b = a.clone();
        assert_eq!(a.diff(&b), "");
        b.0.insert("kernel".into(), "b".repeat(64));
        b.0.insert("cmdline".into(), "console=ttyS0".into());
        assert_eq!(a.diff(&b), "cmdline (none) vs \"console=ttyS0\"; kernel aaaaaaaaaaaa vs bbbbbbbbbbbb");
    }
}
