//! `hvsim doctor`: what this host can do, and what hvsim can promise on it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use hvsim_explorer::document::{Document, Tag};
use hvsim_guest_image::linux::boot_cache::BootCache;
use hvsim_guest_image::raw::probes::HostProbes;
use hvsim_vmm::cpuid::{self, Why};
use hvsim_vmm::host::{open_kvm, HostProfile, PmuStatus};
use schemars::JsonSchema;
use serde::Serialize;

use crate::util;

#[derive(clap::Args)]
pub struct Args {}

/// What `hvsim doctor --json` prints: the host's KVM, what the probes
/// found, and what hvsim can promise here.
#[derive(Serialize, JsonSchema)]
pub struct DoctorReport {
    schema: Tag<DoctorReport>,
    /// Whether /dev/kvm can be used; if not, `error` says why and nothing
    /// else is known.
    kvm: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(flatten)]
    host: Option<HostProfile>,
    /// The raw-guest probes of what KVM does here (null where a required
    /// capability is missing).
    probes: Option<HostProbes>,
    guarantees: Vec<String>,
    /// How each way of reading time is answered: (what, how).
    tsc: Vec<(&'static str, String)>,
    boot_cache: Option<BootCacheInfo>,
}

impl Document for DoctorReport {
    const NAME: &'static str = "doctor";
    const SCHEMA: &'static str = "hvsim-doctor-v1";
    const ABOUT: &'static str = "what this host can do and what hvsim can promise on it: `hvsim doctor --json`";
}

#[derive(Serialize, JsonSchema)]
struct BootCacheInfo {
    dir: PathBuf,
    max_bytes: u64,
    entries: usize,
}

pub fn main(_: Args, json: bool) -> Result<ExitCode> {
    let kvm = match open_kvm() {
        Ok(k) => k,
        Err(e) => {
            if json {
                util::print_json(&DoctorReport {
                    schema: Tag::new(),
                    kvm: false,
                    error: Some(e.to_string()),
                    host: None,
                    probes: None,
                    guarantees: Vec::new(),
                    tsc: Vec::new(),
                    boot_cache: None,
                })?;
            } else {
                println!("/dev/kvm: NOT usable: {e}");
                println!("hvsim cannot run guests on this host.");
            }
            return Ok(ExitCode::from(crate::util::EXIT_ERROR));
        }
    };
    let host = HostProfile::detect(&kvm);
    let probes = if host.missing().is_empty() { Some(HostProbes::run(&host)?) } else { None };
    let guarantees = guarantees(&host, probes.as_ref());
    let cache = BootCache::open()?;
    if json {
        let boot_cache = BootCacheInfo {
            dir: cache.dir().to_owned(),
            max_bytes: cache.max_bytes(),
            entries: cache.entries()?.len(),
        };
        util::print_json(&DoctorReport {
            schema: Tag::new(),
            kvm: true,
            error: None,
            tsc: tsc_handling(probes.as_ref()),
            host: Some(host.clone()),
            probes,
            guarantees,
            boot_cache: Some(boot_cache),
        })?;
    } else {
        println!("/dev/kvm: usable (KVM API version {})", host.kvm_api_version);
        println!("capabilities:");
        for c in &host.capabilities {
            println!(
                "  {:<28} {:<8} {}{}",
                c.name,
                if c.present { "yes" } else { "no" },
                c.used_for,
                if c.required && !c.present { "  (REQUIRED)" } else { "" }
            );
        }
        match &host.pmu {
            PmuStatus::Available => println!("PMU: available (exact preemption is possible)"),
            PmuStatus::Unavailable(why) => println!("PMU: unavailable: {why}"),
        }
        if host.nested_pvm {
            let hidden: Vec<_> =
                cpuid::HIDDEN_BITS.iter().filter(|h| h.why == Why::NestedHost).map(|h| h.name).collect();
            println!("nested host: kvm_pvm detected; guest kernel mode is emulated (slow).");
            println!("  hiding from guests here only: {}", hidden.join(", "));
        } else {
            println!("nested host: no (no guest-kernel workarounds applied)");
        }
        if host.shadow_paging {
            println!(
                "paging: KVM shadows guest page tables; each snapshot reset has it drop its shadows \
                 (exact; each reset costs a little more)"
            );
        } else {
            println!("paging: two-dimensional (EPT/NPT); snapshot resets copy pages only");
        }
        if let Some(p) = &probes {
            let yes_no = |b: bool| if b { "yes" } else { "NO" };
            println!("probed by running tiny guests:");
            println!("  CPUID policy reaches the guest:         {}", yes_no(p.cpuid_virtualized));
            println!("  user-mode RDTSC traps under CR4.TSD:    {}", yes_no(p.user_rdtsc_traps));
            println!("  interrupt-window exits are exact:       {}", yes_no(p.precise_irq_window));
            println!("  user-mode RDTSCP, CPUID bit hidden:     {}", p.user_rdtscp_hidden.name());
        }
        println!("TSC handling:");
        for (what, how) in tsc_handling(probes.as_ref()) {
            println!("  {what:<22} {how}");
        }
        println!("guarantees:");
        for g in &guarantees {
            println!("  - {g}");
        }
        println!("{} (`hvsim cache ls`)", super::cache::summary(&cache)?);
    }
    Ok(ExitCode::from(if host.missing().is_empty() { 0 } else { crate::util::EXIT_ERROR }))
}

/// How the guest's reads of the time-stamp counter are kept deterministic,
/// here: (reader, how).
fn tsc_handling(probes: Option<&HostProbes>) -> Vec<(&'static str, String)> {
    let user = match probes {
        Some(p) if p.user_rdtsc_traps => "RDTSC and RDTSCP fault (#GP under CR4.TSD; RDTSCP #UD where its CPUID bit \
             is hidden) and hvsim's kernel answers with virtual time"
            .to_owned(),
        Some(_) => "NOT deterministic here: this host ignores CR4.TSD, so RDTSC and RDTSCP read the host TSC \
             (the kernel's emulation exists and is tested through /init emulate-tsc)"
            .to_owned(),
        None => "not probed".to_owned(),
    };
    vec![
        (
            "guest kernel (ring 0)",
            "never reads it: hvsim's kernel has no TSC (its rdtsc() is 0, the TSC bit is hidden from CPUID) \
             and keeps time by hvsim's clock"
                .to_owned(),
        ),
        ("RDMSR IA32_TSC", "virtual time, one tick per virtual nanosecond".to_owned()),
        ("guest user mode", user),
    ]
}

fn guarantees(host: &HostProfile, probes: Option<&HostProbes>) -> Vec<String> {
    let mut g =
        vec!["virtual time, interrupts and entropy are functions of the seed and the guest's exits".to_string()];
    match host.pmu {
        PmuStatus::Available => g.push(
            "a PMU exists, but hvsim does not yet use it: a guest that runs without exits is still \
             preempted by the wall-clock watchdog, and such runs are marked non-replayable"
                .into(),
        ),
        PmuStatus::Unavailable(_) => g.push(
            "no PMU: a guest that runs without exits is preempted only by the wall-clock watchdog; \
             such runs are marked non-replayable (never silently)"
                .into(),
        ),
    }
    if !host.missing().is_empty() {
        g.push(format!("cannot run guests: missing {}", host.missing().join(", ")));
    }
    if let Some(p) = probes {
        g.extend(p.limits());
    }
    if host.nested_pvm {
        g.push("timings here are not representative of a bare-metal KVM host (guest ring 0 is ~1000x slower)".into());
    }
    g
}
