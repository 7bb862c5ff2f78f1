//! The machine: one VM, one vCPU, guest RAM and the devices, plus the
//! serializable state that, together with RAM and the vCPU registers, is the
//! whole of a running guest. The run loop and exit handling are in `run.rs`.

mod dirty;
mod inputs;
mod profile;
mod run;
mod snapshot;

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use kvm_bindings::{kvm_cpuid_entry2, kvm_msr_entry, Msrs};
use kvm_ioctls::{Kvm, VmFd};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::append_log::{AppendLog, Weigh};
use crate::boot::linux::{self, LinuxImage, RNG_SEED_LEN};
use crate::boot::raw::{self, RawImage};
use crate::clock::{Clock, Vtime};
use crate::devices::rtc::DEFAULT_EPOCH;
use crate::devices::virtio::{Virtio, VirtioSpec};
use crate::devices::{Devices, UnclaimedPolicy};
use crate::entropy::Stream;
use crate::error::{Error, KvmResultExt, Result};
use crate::faults::FaultPlan;
use crate::host::{open_kvm, HostProfile};
use crate::memory::GuestRam;
use crate::profiler::{GuestProfile, ProfilerConfig};
use crate::trace::{Trace, TraceState};
use crate::vcpu::Vcpu;
use crate::vcpu_state::saveable_msrs;
use crate::watchdog::Watchdog;
use crate::{cpuid, msr};

pub use inputs::RunInputs;
pub use profile::{Stretch, WallProfile};
pub use run::Stop;
pub use snapshot::{Holdings, MachineSnapshot};

/// Default guest RAM for raw guests.
pub const DEFAULT_RAW_RAM: usize = 32 << 20;
/// Default wall-clock time without an exit before the watchdog kicks.
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(2);

/// How to start the guest.
#[derive(Clone, Debug)]
pub enum Boot {
    Raw(RawImage),
    Linux(LinuxImage),
}

/// What the guest sees of its machine, beyond RAM and registers: fixed for a
/// run, saved in snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MachineSpec {
    pub ram_size: usize,
    /// Apply the CPUID workarounds for nested `kvm_pvm` hosts.
    pub nested_workarounds: bool,
    pub unclaimed: UnclaimedPolicy,
    pub virtio: VirtioSpec,
    /// Timing perturbation from the seed: exit costs and the alarm vary
    /// within bounds, so that the schedules of programs whose randomness
    /// lives in their own memory differ between seeds (docs/determinism.md).
    #[serde(default)]
    pub perturb_timing: bool,
}

/// How this host runs the machine. Not part of the guest's world: taken from
/// the current host, also when a snapshot is restored.
#[derive(Clone, Debug)]
pub struct HostSettings {
    /// `None` disables the watchdog (a spinning guest then hangs the run).
    pub watchdog: Option<Duration>,
    /// Whether this host's interrupt-window exits land exactly where the
    /// guest enables interrupts. Where they do not (nested `kvm_pvm`), hvsim
    /// never requests them and injects only at other exits, helped by the
    /// guest's interrupt-pending flag (`hc::op::IRQ_FLAG`).
    pub precise_irq_window: bool,
    /// Pin the vCPU thread to this host CPU: where CPUID is not virtualized,
    /// the guest reads the APIC ID of whichever CPU runs it.
    pub pin_cpu: Option<usize>,
    /// KVM shadows the guest's page tables here (`HostProfile::shadow_paging`).
    pub shadow_paging: bool,
}

impl HostSettings {
    /// Defaults for this host (before `raw::probes` refine them).
    pub fn for_host(host: &HostProfile) -> HostSettings {
        HostSettings {
            watchdog: Some(DEFAULT_WATCHDOG),
            precise_irq_window: !host.nested_pvm,
            pin_cpu: None,
            shadow_paging: host.shadow_paging,
        }
    }
}

#[derive(Clone, Debug)]
pub struct MachineConfig {
    pub seed: u64,
    /// Unix time the guest's RTC shows at virtual time zero.
    pub epoch: u64,
    pub boot: Boot,
    pub spec: MachineSpec,
    /// The faults the virtio devices inject (resolved: see `faults.rs`).
    pub faults: FaultPlan,
    pub host: HostSettings,
}

impl MachineConfig {
    /// A raw guest with defaults taken from this host.
    pub fn raw(image: RawImage, seed: u64, host: &HostProfile) -> MachineConfig {
        MachineConfig {
            seed,
            epoch: DEFAULT_EPOCH,
            boot: Boot::Raw(image),
            spec: MachineSpec {
                ram_size: DEFAULT_RAW_RAM,
                nested_workarounds: host.nested_pvm,
                unclaimed: UnclaimedPolicy::Strict,
                virtio: VirtioSpec::default(),
                // The built-in guests' exact timings are part of their tests.
                perturb_timing: false,
            },
            faults: FaultPlan::default(),
            host: HostSettings::for_host(host),
        }
    }

    /// A Linux guest with defaults taken from this host.
    pub fn linux(image: LinuxImage, seed: u64, ram_size: usize, host: &HostProfile) -> MachineConfig {
        MachineConfig {
            seed,
            epoch: DEFAULT_EPOCH,
            boot: Boot::Linux(image),
            spec: MachineSpec {
                ram_size,
                nested_workarounds: host.nested_pvm,
                // An OS probes for legacy hardware that is not there.
                unclaimed: UnclaimedPolicy::Lenient,
                // The kernel's entropy comes from the seed; nodes are opt-in.
                virtio: VirtioSpec { rng: true, ..VirtioSpec::default() },
                perturb_timing: true,
            },
            faults: FaultPlan::default(),
            host: HostSettings::for_host(host),
        }
    }
}

/// Why a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum End {
    /// The virtual-time limit was reached with the guest still running.
    VtimeLimit,
    /// The guest powered off through the hvsim port with this status.
    Exit {
        status: u8,
    },
    /// The guest asked to reboot (a run does not survive a reboot).
    Reboot,
    /// The guest halted with interrupts disabled: nothing can wake it.
    Halted,
    /// The guest halted waiting for an interrupt, but no timer is armed.
    Idle,
    TripleFault,
    /// The guest reported a fatal error of its own (code: an exception vector
    /// for raw guests).
    GuestPanic {
        code: u32,
    },
    /// The guest broke the machine's rules (unclaimed port, bad hypercall...).
    GuestError {
        reason: String,
    },
    /// KVM could not run the guest (emulation failure, entry failure...).
    KvmError {
        reason: String,
    },
}

impl End {
    /// Short kebab-case name, as in the JSON summary.
    pub fn name(&self) -> &'static str {
        match self {
            End::VtimeLimit => "vtime-limit",
            End::Exit { .. } => "exit",
            End::Reboot => "reboot",
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
            End::Reboot => "guest requested a reboot".into(),
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
    /// The process that sent it (its tgid), where the guest kernel says
    /// ([`crate::guest_task`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<u32>,
}

impl Weigh for Message {
    fn weight(&self) -> usize {
        std::mem::size_of::<Message>() + self.bytes.len()
    }
}

/// The guest's interrupt-pending flag (`hc::op::IRQ_FLAG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IrqFlag {
    pub gpa: u64,
    /// What hvsim last wrote there.
    pub raised: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Counters {
    pub injected: u64,
    pub msr_faults: u64,
    pub watchdog_kicks: u64,
}

/// Everything about the machine that is neither RAM nor vCPU registers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MachineState {
    /// Every message the guest sent, in order (shared along a line of
    /// snapshots, see `append_log.rs`).
    pub messages: AppendLog<Message>,
    pub clock: Clock,
    pub devices: Devices,
    /// The guest executed HLT and waits for an interrupt.
    pub halted: bool,
    /// An interrupt-window exit is requested (part of the vCPU's run state).
    pub irq_window_requested: bool,
    pub irq_flag: Option<IrqFlag>,
    /// Where the guest's coverage map is (`hc::op::COVERAGE`).
    #[serde(default)]
    pub coverage_map: Option<u64>,
    /// Guest-physical address of the guest's clock page (`hc::op::VCLOCK`),
    /// written at the end of every exit.
    #[serde(default)]
    pub clock_page: Option<u64>,
    /// Guest-virtual address of the kernel's running-task page, if its
    /// kernel has one ([`crate::guest_task`]; found at boot).
    #[serde(default)]
    pub task_page: Option<u64>,
    pub ended: Option<End>,
    /// Why this run can no longer be replayed exactly (empty: it can).
    pub nonreplayable: Vec<String>,
    pub counters: Counters,
}

impl MachineState {
    fn new(config: &MachineConfig) -> Result<MachineState> {
        let spec = &config.spec;
        let virtio = Virtio::new(&spec.virtio, &config.faults, config.seed).map_err(Error::Config)?;
        Ok(MachineState {
            messages: AppendLog::new(),
            clock: Clock::new(spec.perturb_timing.then_some(config.seed)),
            devices: Devices::new(
                config.seed,
                config.epoch,
                spec.ram_size,
                spec.unclaimed,
                virtio,
                spec.perturb_timing,
            ),
            halted: false,
            irq_window_requested: false,
            irq_flag: None,
            coverage_map: None,
            clock_page: None,
            task_page: None,
            ended: None,
            nonreplayable: Vec::new(),
            counters: Counters::default(),
        })
    }

    /// Re-seeds every entropy stream the VMM keeps from `seed`, for what
    /// happens from now on (`Machine::reseed` also reaches the guest's).
    fn reseed(&mut self, seed: u64) {
        self.clock.reseed(seed);
        self.devices.hc.reseed(seed);
        self.devices.virtio.reseed(seed, self.clock.now());
    }
}

pub struct Machine {
    _kvm: Kvm,
    vm: VmFd,
    pub(crate) vcpu: Vcpu,
    ram: GuestRam,
    spec: MachineSpec,
    host: HostSettings,
    /// The CPUID the guest was given (saved in snapshots to detect a
    /// restore on a different CPU).
    cpuid: Vec<kvm_cpuid_entry2>,
    /// MSRs to save in snapshots (probed once: readable and writable).
    saveable_msrs: Vec<u32>,
    state: MachineState,
    trace: Trace,
    /// The watchdog, and the thread it and the CPU pinning were set up for.
    watchdog: Option<Watchdog>,
    vcpu_thread: Option<libc::pthread_t>,
    /// How many of `state.messages` `take_messages` has handed out.
    messages_taken: usize,
    stop_on_message: bool,
    /// Inside `run_until_ready`.
    stop_at_ready: bool,
    /// Where `run_until_or_wall` pauses: a wall-clock instant.
    pause_at: Option<std::time::Instant>,
    /// Copy of the current exit's data, for the log.
    scratch: Vec<u8>,
    profile: Option<WallProfile>,
    profiler: Option<crate::profiler::Attached>,
    dirty_log: bool,
    /// Raised from another thread: the run loop stops (see `interrupt.rs`).
    interrupt: Option<crate::Interrupt>,
}

impl Machine {
    /// A new machine, booted from `config.boot`.
    pub fn new(config: &MachineConfig) -> Result<Machine> {
        let state = MachineState::new(config)?;
        let mut m = Machine::create(&config.spec, &config.host, state)?;
        m.boot(&config.boot, config.seed)?;
        // The seed is part of the machine's history from its first event:
        // machines started from different seeds differ in the trace even
        // before either draws a random number (so a bug record with an
        // edited seed cannot replay as reproduced).
        m.scratch.clear();
        m.scratch.extend_from_slice(&config.seed.to_le_bytes());
        m.record(crate::clock::ExitKind::Reseed, 0, None)?;
        Ok(m)
    }

    /// The VM, RAM (all zero) and vCPU with its CPUID and boot MSRs: a
    /// machine with nothing loaded, in `state`.
    fn create(spec: &MachineSpec, host: &HostSettings, state: MachineState) -> Result<Machine> {
        let kvm = open_kvm()?;
        let vm = kvm.create_vm().kvm("KVM_CREATE_VM")?;
        let ram = GuestRam::new(spec.ram_size)?;
        dirty::enable_manual_protect(&vm);
        dirty::register_ram(&vm, &ram, false)?;
        msr::install_filter(&vm)?;

        let vcpu_fd = vm.create_vcpu(0).kvm("KVM_CREATE_VCPU")?;
        let vcpu = Vcpu::new(vcpu_fd, vm.run_size());
        let cpuid = cpuid::guest_cpuid(&kvm, spec.nested_workarounds)?;
        vcpu.fd().set_cpuid2(&cpuid).kvm("KVM_SET_CPUID2")?;
        let saveable_msrs = saveable_msrs(&kvm, vcpu.fd())?;

        let entries: Vec<kvm_msr_entry> =
            msr::BOOT_MSRS.iter().map(|&(index, data)| kvm_msr_entry { index, data, ..Default::default() }).collect();
        let msrs = Msrs::from_entries(&entries).map_err(|e| Error::Config(format!("building boot MSR list: {e:?}")))?;
        let set = vcpu.fd().set_msrs(&msrs).kvm("KVM_SET_MSRS")?;
        if set != entries.len() {
            return Err(Error::Config(format!(
                "KVM accepted only {set} of {} boot MSRs (first refused: {:#x})",
                entries.len(),
                entries[set].index
            )));
        }

        Ok(Machine {
            _kvm: kvm,
            vm,
            vcpu,
            ram,
            spec: spec.clone(),
            host: host.clone(),
            cpuid: cpuid.as_slice().to_vec(),
            saveable_msrs,
            state,
            trace: Trace::new(),
            watchdog: None,
            vcpu_thread: None,
            messages_taken: 0,
            stop_on_message: false,
            stop_at_ready: false,
            pause_at: None,
            scratch: Vec::with_capacity(4096),
            profile: None,
            profiler: None,
            dirty_log: false,
            interrupt: None,
        })
    }

    /// Loads the guest and sets the registers of its first instruction.
    fn boot(&mut self, boot: &Boot, seed: u64) -> Result<()> {
        let ram = &self.ram;
        let regs = match boot {
            Boot::Raw(image) => {
                raw::load(ram, image)?;
                raw::initial_regs(ram.size() as u64)
            }
            Boot::Linux(image) => {
                let mut rng_seed = [0u8; RNG_SEED_LEN];
                Stream::new(seed, "linux-boot-rng").fill(&mut rng_seed);
                let entry = linux::load(ram, image, &self.state.devices.virtio.cmdline(), &rng_seed)?;
                self.state.task_page = entry.task_page;
                entry.regs
            }
        };
        // Both boot paths enter in 64-bit mode on the same long-mode tables.
        let fd = self.vcpu.fd();
        let sregs = fd.get_sregs().kvm("KVM_GET_SREGS")?;
        fd.set_sregs(&raw::initial_sregs(sregs)).kvm("KVM_SET_SREGS")?;
        fd.set_regs(&regs).kvm("KVM_SET_REGS")?;
        fd.set_fpu(&raw::initial_fpu()).kvm("KVM_SET_FPU")?;
        Ok(())
    }

    pub fn now(&self) -> Vtime {
        self.state.clock.now()
    }

    pub fn state(&self) -> &MachineState {
        &self.state
    }

    pub fn spec(&self) -> &MachineSpec {
        &self.spec
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

    /// From now on, `run_until` and the like end with
    /// [`Error::Interrupted`] before the next guest entry once `interrupt`
    /// is raised.
    pub fn set_interrupt(&mut self, interrupt: crate::Interrupt) {
        self.interrupt = Some(interrupt);
        // The watchdog carries it into `KVM_RUN`: started again with it.
        self.vcpu_thread = None;
    }

    /// Makes `run_until` return [`Stop::Message`] after each guest message.
    pub fn set_stop_on_message(&mut self, on: bool) {
        self.stop_on_message = on;
    }

    pub fn stop_on_message(&self) -> bool {
        self.stop_on_message
    }

    /// Messages received since the last call.
    pub fn take_messages(&mut self) -> Vec<Message> {
        let new = self.state.messages.iter_from(self.messages_taken).cloned().collect();
        self.messages_taken = self.state.messages.len();
        new
    }

    /// The guest's coverage map (`hc::op::COVERAGE`), if it has one: one
    /// bit per edge its instrumented programs reached (`hc::coverage_bit`).
    pub fn coverage_map(&self) -> Option<&[u8]> {
        let gpa = self.state.coverage_map? as usize;
        self.ram.as_slice().get(gpa..gpa + hvsim_abi::hc::COVERAGE_BYTES)
    }

    /// Every message of the run so far (including before a restored snapshot).
    pub fn messages(&self) -> &AppendLog<Message> {
        &self.state.messages
    }

    /// The console so far (borrowed when it is one part of its log).
    pub fn console(&self) -> Cow<'_, [u8]> {
        self.console_from(0)
    }

    /// The console after its first `from` bytes.
    pub fn console_from(&self, from: usize) -> Cow<'_, [u8]> {
        self.state.devices.serial.console_from(from)
    }

    /// The console from the start of its `n`th line from the end.
    pub fn console_last_lines(&self, n: usize) -> Cow<'_, [u8]> {
        self.state.devices.serial.last_lines(n)
    }

    /// The console's length in bytes.
    pub fn console_len(&self) -> usize {
        self.state.devices.serial.console_len()
    }

    /// Takes back decisions from now on (`faults::Vetoes`).
    pub fn veto(&mut self, vetoes: &crate::faults::Vetoes) {
        self.state.devices.virtio.schedule.veto(vetoes);
        self.state.devices.hc.buggify_mut().veto(vetoes);
    }

    /// Test Composer winds down at virtual time `at` in this timeline
    /// (`Control::ComposerBudget`); once set, a timeline keeps it.
    pub fn set_winddown(&mut self, at: Vtime) {
        self.state.devices.virtio.schedule.set_winddown(at.nanos());
    }

    /// When Test Composer winds down in this timeline, if it was set.
    pub fn winddown(&self) -> Option<Vtime> {
        self.state.devices.virtio.schedule.winddown().map(Vtime)
    }

    /// The drawn-fault rules this line of descent switches on, chosen by
    /// the explorer as the line leaves the root, in place of swarm's coins.
    pub fn choose_fault_rules(&mut self, on: &[bool]) {
        self.state.devices.virtio.schedule.choose_rules(on);
    }

    /// Which drawn-fault rules this line of descent switched on, if chosen.
    pub fn fault_rules(&self) -> Option<Vec<bool>> {
        self.state.devices.virtio.schedule.rules_on().map(<[bool]>::to_vec)
    }

    /// The Test Composer template this line of descent runs, chosen by the
    /// explorer as the line leaves the root (`--schedule bandit`) in place
    /// of the composer's own draw.
    pub fn choose_template(&mut self, name: &str) {
        self.state.devices.virtio.schedule.choose_template(name);
    }

    /// Which Test Composer template this line of descent runs, if chosen.
    pub fn template(&self) -> Option<&str> {
        self.state.devices.virtio.schedule.template()
    }

    /// The Test Composer commands this line of descent switches on (named
    /// `template/file`), chosen by the explorer as the line leaves the
    /// root (`--schedule bandit`); the composer chooses among those only.
    pub fn choose_commands(&mut self, on: &[String]) {
        self.state.devices.virtio.schedule.choose_commands(on);
    }

    /// Which Test Composer commands this line of descent switches on, if chosen.
    pub fn composer_commands(&self) -> Option<&[String]> {
        self.state.devices.virtio.schedule.commands()
    }

    /// The console's complete lines from line `first` on, each with the
    /// virtual time (ns) it began.
    pub fn console_lines_from(&self, first: usize) -> impl Iterator<Item = (u64, Cow<'_, [u8]>)> + '_ {
        self.state.devices.serial.lines_from(first)
    }

    /// How many lines of the console are complete.
    pub fn console_complete_lines(&self) -> usize {
        self.state.devices.serial.complete_lines()
    }

    /// Ends the run from outside (e.g. at the virtual-time limit).
    pub fn end(&mut self, end: End) {
        if self.state.ended.is_none() {
            self.state.ended = Some(end);
        }
    }

    /// Starts measuring where wall time goes (see [`WallProfile`]).
    pub fn enable_wall_profile(&mut self, keep: usize) {
        self.profile = Some(WallProfile::new(keep));
    }

    pub fn wall_profile(&self) -> Option<&WallProfile> {
        self.profile.as_ref()
    }

    /// Starts sampling the guest (see [`crate::profiler`]): from the next
    /// `run_until` on, until [`take_guest_profile`](Self::take_guest_profile).
    pub fn enable_guest_profiler(&mut self, config: ProfilerConfig) {
        self.profiler = Some(crate::profiler::Attached::new(config));
    }

    /// Stops the guest profiler and returns what it sampled.
    pub fn take_guest_profile(&mut self) -> Option<GuestProfile> {
        let mut attached = self.profiler.take()?;
        attached.stop_sampler();
        Some(attached.profile)
    }

    pub fn flush_log(&mut self) -> Result<()> {
        self.trace.flush()
    }
}
