//! What the guest image crate's KVM tests share: whether they can run, and
//! a raw guest's machine as they all build it.

use std::time::Duration;

use hvsim_guest_image::raw;
use hvsim_vmm::host::{open_kvm, HostProfile};
use hvsim_vmm::MachineConfig;

/// Whether /dev/kvm opens; with HVSIM_REQUIRE_KVM=1 (CI) it must.
pub fn kvm_available() -> bool {
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("HVSIM_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("HVSIM_REQUIRE_KVM=1 but /dev/kvm cannot be opened: {e}");
            }
            eprintln!("skipping KVM test: /dev/kvm cannot be opened: {e}");
            false
        }
    }
}

/// The raw guest `guest` from `seed`, in 4 MiB, on this host as probed,
/// with a 5 s watchdog.
pub fn raw_config(guest: &str, seed: u64) -> MachineConfig {
    let host = HostProfile::detect(&open_kvm().unwrap());
    let probes = raw::probes::HostProbes::run(&host).unwrap();
    let mut config = MachineConfig::raw(raw::find(guest).unwrap().build(), seed, &host);
    config.spec.ram_size = 4 << 20;
    probes.configure(&mut config.host);
    config.host.watchdog = Some(Duration::from_secs(5));
    config
}
