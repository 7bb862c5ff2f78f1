//! The machine: one VM, one vCPU, guest RAM and the devices, plus the
//! serializable state that, together with RAM and the vCPU registers, is the
//! whole of a running guest. The run loop and exit handling are in `run.rs`.

mod run;

use std::path::Path;
use std::time::Duration;

use kvm_bindings::{Msrs, kvm_msr_entry, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VmFd};
use serde::{Deserialize, Serialize};

use crate::boot::raw::{self, RawImage};
use crate::clock::{Clock, Vtime};
use crate::devices::{Devices, UnclaimedPolicy};
use crate::error::{Error, KvmResultExt, Result};
use crate::host::{open_kvm, HostProfile};
use crate::memory::GuestRam;
use crate::trace::{Trace, TraceState};
use crate::vcpu::Vcpu;
use crate::watchdog::Watchdog;
use crate::{cpuid, msr};

pub use run::Stop;

/// Default guest RAM for raw guests.
pub const DEFAULT_RAW_RAM: usize = 32 << 20;
/// Default wall-clock time without an exit before the watchdog kicks.
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(2);

/// How to start the guest.
#[derive(Clone, Debug)]
pub enum Boot {
    Raw(RawImage),
}

#[derive(Clone, Debug)]
pub struct MachineConfig {
    pub seed: u64,
    pub ram_size: usize,
    pub boot: Boot,
    /// Apply the CPUID workarounds for nested `kvm_pvm` hosts.
    pub nested_workarounds: bool,
    /// `None` disables the watchdog (a spinning guest then hangs the run).
    pub watchdog: Option<Duration>,
    pub unclaimed: UnclaimedPolicy,
}

impl MachineConfig {
    /// A raw guest with defaults taken from this host.
    pub fn raw(image: RawImage, seed: u64, host: &HostProfile) -> MachineConfig {
        MachineConfig {
            seed,
            ram_size: DEFAULT_RAW_RAM,
            boot: Boot::Raw(image),
            nested_workarounds: host.nested_pvm,
            watchdog: Some(DEFAULT_WATCHDOG),
            unclaimed: UnclaimedPolicy::Strict,
        }
    }
}

/// Why a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum End {
    /// The virtual-time limit was reached with the guest still running.
    VtimeLimit,
    /// The guest powered off through the hvsim port with this status.
    Exit { status: u8 },
    /// The guest halted with interrupts disabled: nothing can wake it.
    Halted,
    /// The guest halted waiting for an interrupt, but no timer is armed.
    Idle,
    TripleFault,
    /// The guest reported a fatal error of its own (code: an exception vector
    /// for raw guests).
    GuestPanic { code: u32 },
    /// The guest broke the machine's rules (unclaimed port, bad hypercall...).
    GuestError { reason: String },
    /// KVM could not run the guest (emulation failure, entry failure...).
    KvmError { reason: String },
}

impl End {
    /// Short kebab-case name, as in the JSON summary.
    pub fn name(&self) -> &'static str {
        match self {
            End::VtimeLimit => "vtime-limit",
            End::Exit { .. } => "exit",
            End::Halted => "halted",
            End::Idle => "idle",
            End::TripleFault => "triple-fault",
            End::GuestPanic { .. } => "guest-panic",
            End::GuestError { .. } => "guest-error",
            End::KvmError { .. } => "kvm-error",
        }
    }

    /// One line for humans.
    pub fn detail(&self) -> String {
        match self {
            End::VtimeLimit => "virtual-time limit reached".into(),
            End::Exit { status } => format!("guest powered off with status {status}"),
            End::Halted => "guest halted with interrupts disabled".into(),
            End::Idle => "guest halted waiting for an interrupt with no timer armed".into(),
            End::TripleFault => "triple fault (KVM_EXIT_SHUTDOWN)".into(),
            End::GuestPanic { code } => format!("guest panic, code {code:#x}"),
            End::GuestError { reason } => format!("guest error: {reason}"),
            End::KvmError { reason } => format!("KVM error: {reason}"),
        }
    }
}

/// A message the guest sent over the hypercall channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub vtime: Vtime,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub injected: u64,
    pub msr_faults: u64,
    pub watchdog_kicks: u64,
}

/// Everything about the machine that is neither RAM nor vCPU registers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MachineState {
    pub clock: Clock,
    pub devices: Devices,
    /// The guest executed HLT and waits for an interrupt.
    pub halted: bool,
    pub ended: Option<End>,
    /// Why this run can no longer be replayed exactly (empty: it can).
    pub nonreplayable: Vec<String>,
    pub counters: Counters,
}

pub struct Machine {
    vm: VmFd,
    pub(crate) vcpu: Vcpu,
    ram: GuestRam,
    state: MachineState,
    trace: Trace,
    watchdog_timeout: Option<Duration>,
    watchdog: Option<(Watchdog, libc::pthread_t)>,
    outbox: Vec<Message>,
    stop_on_message: bool,
    /// Copy of the current exit's data, for the log.
    scratch: Vec<u8>,
    _kvm: Kvm,
}

impl Machine {
    pub fn new(config: &MachineConfig) -> Result<Machine> {
        let kvm = open_kvm()?;
        let vm = kvm.create_vm().kvm("KVM_CREATE_VM")?;
        let ram = GuestRam::new(config.ram_size)?;
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: ram.size() as u64,
            userspace_addr: ram.host_base(),
        };
        // SAFETY: the region maps exactly `ram.size()` bytes owned by `ram`,
        // which the Machine keeps alive as long as the VM.
        unsafe { vm.set_user_memory_region(region) }.kvm("KVM_SET_USER_MEMORY_REGION")?;
        msr::install_filter(&vm)?;

        let vcpu_fd = vm.create_vcpu(0).kvm("KVM_CREATE_VCPU")?;
        let vcpu = Vcpu::new(vcpu_fd, vm.run_size());
        let mut cpuid =
            kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).kvm("KVM_GET_SUPPORTED_CPUID")?;
        cpuid::apply(cpuid.as_mut_slice(), config.nested_workarounds);
        vcpu.fd().set_cpuid2(&cpuid).kvm("KVM_SET_CPUID2")?;

        let entries: Vec<kvm_msr_entry> = msr::BOOT_MSRS
            .iter()
            .map(|&(index, data)| kvm_msr_entry { index, data, ..Default::default() })
            .collect();
        let msrs = Msrs::from_entries(&entries)
            .map_err(|e| Error::Config(format!("building boot MSR list: {e:?}")))?;
        let set = vcpu.fd().set_msrs(&msrs).kvm("KVM_SET_MSRS")?;
        if set != entries.len() {
            return Err(Error::Config(format!(
                "KVM accepted only {set} of {} boot MSRs (first refused: {:#x})",
                entries.len(),
                entries[set].index
            )));
        }

        match &config.boot {
            Boot::Raw(image) => {
                raw::load(&ram, image)?;
                let sregs = vcpu.fd().get_sregs().kvm("KVM_GET_SREGS")?;
                vcpu.fd().set_sregs(&raw::initial_sregs(sregs)).kvm("KVM_SET_SREGS")?;
                vcpu.fd().set_regs(&raw::initial_regs(ram.size() as u64)).kvm("KVM_SET_REGS")?;
                vcpu.fd().set_fpu(&raw::initial_fpu()).kvm("KVM_SET_FPU")?;
            }
        }

        Ok(Machine {
            vm,
            vcpu,
            ram,
            state: MachineState {
                clock: Clock::default(),
                devices: Devices::new(config.seed, config.unclaimed),
                halted: false,
                ended: None,
                nonreplayable: Vec::new(),
                counters: Counters::default(),
            },
            trace: Trace::new(),
            watchdog_timeout: config.watchdog,
            watchdog: None,
            outbox: Vec::new(),
            stop_on_message: false,
            scratch: Vec::with_capacity(4096),
            _kvm: kvm,
        })
    }

    pub fn now(&self) -> Vtime {
        self.state.clock.now()
    }

    pub fn state(&self) -> &MachineState {
        &self.state
    }

    pub fn ram(&self) -> &GuestRam {
        &self.ram
    }

    pub fn vm(&self) -> &VmFd {
        &self.vm
    }

    pub fn trace_state(&self) -> &TraceState {
        self.trace.state()
    }

    /// Writes the full determinism log of everything from now on to `path`.
    pub fn log_to(&mut self, path: &Path, header: &str) -> Result<()> {
        self.trace.log_to(path, header)
    }

    /// Makes `run_until` return [`Stop::Message`] after each guest message.
    pub fn set_stop_on_message(&mut self, on: bool) {
        self.stop_on_message = on;
    }

    /// Messages received since the last call.
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    pub fn console(&self) -> &[u8] {
        self.state.devices.serial.console()
    }

    /// Ends the run from outside (e.g. at the virtual-time limit).
    pub fn end(&mut self, end: End) {
        if self.state.ended.is_none() {
            self.state.ended = Some(end);
        }
    }

    pub fn flush_log(&mut self) -> Result<()> {
        self.trace.flush()
    }
}
