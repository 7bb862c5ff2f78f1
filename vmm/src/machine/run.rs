//! The run loop: enter the guest, handle its exit, advance the clock, fire
//! timers, inject an interrupt if one is due and the guest can take it, and
//! log the exit. This is where every VM exit is handled.

use hvsim_abi::hc;

use crate::clock::{ExitKind, Vtime};
use crate::devices::hypercall::{Effect, GuestError};
use crate::error::Result;
use crate::msr::{self, MsrAnswer};
use crate::profiler::sampler::Sampler;
use crate::trace::Event;
use crate::vcpu::Exit;
use crate::watchdog::Watchdog;

use super::{End, Machine, Message};

/// Why `run_until` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Virtual time reached the requested deadline; the guest can resume.
    Deadline,
    /// The guest sent a message (only with `set_stop_on_message(true)`).
    Message,
    /// The run is over.
    Ended(End),
}

/// Why the run loop stopped: a [`Stop`], or (only in `run_until_ready`)
/// the guest's `READY`, or (only in `run_until_or_wall`) the wall clock.
enum Halt {
    Stop(Stop),
    Ready,
    Paused,
}

/// What handling one exit decided, beyond the bytes moved.
enum Outcome {
    Continue,
    Halt,
    Effect(Effect),
    End(End),
}

impl Machine {
    /// Runs the guest until virtual time reaches `deadline`, the run ends, or
    /// (if asked) the guest sends a message.
    pub fn run_until(&mut self, deadline: Vtime) -> Result<Stop> {
        self.run_until_point(deadline, u64::MAX)
    }

    /// Like [`run_until`](Self::run_until), also stopping ([`Stop::Deadline`])
    /// once the trace holds `max_events` events: a point that, unlike a
    /// virtual time, no two exits share.
    pub fn run_until_point(&mut self, deadline: Vtime, max_events: u64) -> Result<Stop> {
        match self.run_loop(deadline, max_events)? {
            Halt::Stop(stop) => Ok(stop),
            Halt::Ready => unreachable!("READY halts only run_until_ready"),
            Halt::Paused => unreachable!("only run_until_or_wall pauses"),
        }
    }

    /// Like [`run_until`](Self::run_until), but also returns (`Ok(None)`)
    /// after the first exit at which the wall clock has passed `by`: a
    /// pause between two exits, which the guest cannot tell from going on
    /// (as a stop at an event count), so that a caller can show progress
    /// while virtual time hardly moves (guest kernel code emulated on a
    /// nested host). Each call handles at least one exit.
    pub fn run_until_or_wall(&mut self, deadline: Vtime, by: std::time::Instant) -> Result<Option<Stop>> {
        self.pause_at = Some(by);
        let halt = self.run_loop(deadline, u64::MAX);
        self.pause_at = None;
        // No kick for a pause that is over, whatever enters the guest next.
        if let Some(w) = &self.watchdog {
            w.kick_at(None);
        }
        Ok(match halt? {
            Halt::Stop(stop) => Some(stop),
            Halt::Paused => None,
            Halt::Ready => unreachable!("READY halts only run_until_ready"),
        })
    }

    /// Runs a booting guest until it is ready for its run (`hc::op::READY`):
    /// `Ok(None)`, and the machine waits for [`Machine::begin_run`].
    /// Otherwise why it stopped first. Elsewhere `READY` stops nothing.
    pub fn run_until_ready(&mut self, deadline: Vtime) -> Result<Option<Stop>> {
        self.stop_at_ready = true;
        let halt = self.run_loop(deadline, u64::MAX);
        self.stop_at_ready = false;
        Ok(match halt? {
            Halt::Stop(stop) => Some(stop),
            Halt::Ready => None,
            Halt::Paused => unreachable!("only run_until_or_wall pauses"),
        })
    }

    fn run_loop(&mut self, deadline: Vtime, max_events: u64) -> Result<Halt> {
        self.prepare_vcpu_thread()?;
        if let Some(w) = &self.watchdog {
            w.kick_at(self.pause_at);
        }
        loop {
            if self.interrupt.as_ref().is_some_and(crate::Interrupt::raised) {
                self.trace.flush()?;
                return Err(crate::Error::Interrupted);
            }
            if let Some(end) = &self.state.ended {
                self.trace.flush()?;
                return Ok(Halt::Stop(Stop::Ended(end.clone())));
            }
            if self.trace.state().events >= max_events {
                self.trace.flush()?;
                return Ok(Halt::Stop(Stop::Deadline));
            }
            if self.state.halted {
                if !self.wake_from_halt(deadline)? {
                    return Ok(Halt::Stop(Stop::Deadline));
                }
                continue;
            }
            if self.now() >= deadline {
                self.trace.flush()?;
                return Ok(Halt::Stop(Stop::Deadline));
            }
            if let Some(halt) = self.step()? {
                self.trace.flush()?;
                return Ok(halt);
            }
            if self.pause_at.is_some_and(|by| std::time::Instant::now() >= by) {
                self.trace.flush()?;
                return Ok(Halt::Paused);
            }
        }
    }

    /// Sets up the calling thread, which runs the vCPU, the first time it
    /// runs it: pins it to a CPU if asked, and (re)starts the watchdog and
    /// the profiler's sampler on it.
    fn prepare_vcpu_thread(&mut self) -> Result<()> {
        // SAFETY: pthread_self and pthread_equal have no preconditions.
        let me = unsafe { libc::pthread_self() };
        if !matches!(self.vcpu_thread, Some(t) if unsafe { libc::pthread_equal(t, me) } != 0) {
            if let Some(cpu) = self.host.pin_cpu {
                crate::host::pin_current_thread(cpu)?;
            }
            let interrupt = &self.interrupt;
            self.watchdog = self.host.watchdog.map(|t| Watchdog::start(t, interrupt.clone())).transpose()?;
            if let Some(p) = &mut self.profiler {
                p.stop_sampler();
            }
            self.vcpu_thread = Some(me);
        }
        if let Some(p) = &mut self.profiler {
            if p.sampler.is_none() {
                p.sampler = Some(Sampler::start(p.config.period())?);
            }
        }
        Ok(())
    }

    /// One guest entry and exit. Returns a halt the caller asked for, if due.
    fn step(&mut self) -> Result<Option<Halt>> {
        let now = self.now();
        self.scratch.clear();
        let watchdog = self.watchdog.as_ref();
        let sampler = self.profiler.as_ref().and_then(|p| p.sampler.as_ref());
        if let Some(w) = watchdog {
            w.entering_guest();
        }
        if let Some(s) = sampler {
            s.entering_guest();
        }
        let entered = self.profile.is_some().then(std::time::Instant::now);
        let result = self.vcpu.run();
        let in_guest = entered.map(|t| t.elapsed());
        let kicked = matches!(result, Ok(Exit::Interrupted));
        if let Some(s) = sampler {
            s.left_guest();
        }
        if let Some(w) = watchdog {
            w.left_guest(!kicked);
        }
        if kicked && !watchdog.is_some_and(Watchdog::take_kick) {
            // The profiler's kick (or a stray signal): invisible to the
            // guest. No virtual time, no timers, no injection, no event.
            if let (Some(p), Some(wall)) = (&mut self.profile, in_guest) {
                p.in_guest += wall;
            }
            self.sample_guest();
            return Ok(None);
        }
        let devices = &mut self.state.devices;
        let scratch = &mut self.scratch;
        let (kind, addr, outcome) = match result {
            Err(e) => (ExitKind::Shutdown, 0, Outcome::End(End::KvmError { reason: format!("KVM_RUN failed: {e}") })),
            Ok(exit) => match exit {
                Exit::IoOut { port, size, data } => {
                    scratch.extend_from_slice(data);
                    let r = devices.pio_write(port, usize::from(size), data, now);
                    (
                        ExitKind::PioOut,
                        u64::from(port),
                        guest_result(r.map(|e| e.map_or(Outcome::Continue, Outcome::Effect))),
                    )
                }
                Exit::IoIn { port, size, data } => {
                    let r = devices.pio_read(port, usize::from(size), data, now);
                    scratch.extend_from_slice(data);
                    (ExitKind::PioIn, u64::from(port), guest_result(r.map(|()| Outcome::Continue)))
                }
                Exit::MmioRead { addr, data } => {
                    let r = devices.mmio_read(addr, data);
                    scratch.extend_from_slice(data);
                    (ExitKind::MmioRead, addr, guest_result(r.map(|()| Outcome::Continue)))
                }
                Exit::MmioWrite { addr, data } => {
                    scratch.extend_from_slice(data);
                    let r = devices.mmio_write(addr, data, &self.ram, now);
                    (ExitKind::MmioWrite, addr, guest_result(r.map(|()| Outcome::Continue)))
                }
                Exit::MsrRead { index, value, error, .. } => {
                    match msr::read(index, now.nanos()) {
                        MsrAnswer::Value(v) => *value = v,
                        MsrAnswer::Ignored => *value = 0,
                        MsrAnswer::Fault => {
                            *error = 1;
                            self.state.counters.msr_faults += 1;
                        }
                    }
                    scratch.extend_from_slice(&value.to_le_bytes());
                    (ExitKind::MsrRead, u64::from(index), Outcome::Continue)
                }
                Exit::MsrWrite { index, value, error, .. } => {
                    if msr::write(index) == MsrAnswer::Fault {
                        *error = 1;
                        self.state.counters.msr_faults += 1;
                    }
                    scratch.extend_from_slice(&value.to_le_bytes());
                    (ExitKind::MsrWrite, u64::from(index), Outcome::Continue)
                }
                Exit::Hlt => (ExitKind::Halt, 0, Outcome::Halt),
                Exit::IrqWindowOpen => (ExitKind::IrqWindow, 0, Outcome::Continue),
                Exit::Interrupted => {
                    self.state.counters.watchdog_kicks += 1;
                    let reason = format!(
                        "watchdog: the guest ran {:?} of wall time without a VM exit; \
                         forced exit at virtual time {now}",
                        self.host.watchdog.unwrap_or_default()
                    );
                    if self.state.nonreplayable.len() < 16 {
                        self.state.nonreplayable.push(reason);
                    }
                    (ExitKind::WatchdogKick, 0, Outcome::Continue)
                }
                Exit::Shutdown => (ExitKind::Shutdown, 0, Outcome::End(End::TripleFault)),
                Exit::InternalError { suberror, data } => (
                    ExitKind::Shutdown,
                    0,
                    Outcome::End(End::KvmError {
                        reason: format!(
                            "internal error, suberror {suberror} ({}), data {data:x?}",
                            internal_error_name(suberror)
                        ),
                    }),
                ),
                Exit::FailEntry { reason } => (
                    ExitKind::Shutdown,
                    0,
                    Outcome::End(End::KvmError { reason: format!("VM entry failed, reason {reason:#x}") }),
                ),
                Exit::Other(r) => (
                    ExitKind::Shutdown,
                    0,
                    Outcome::End(End::KvmError { reason: format!("unhandled KVM exit reason {r}") }),
                ),
            },
        };
        self.state.clock.charge(kind);
        let now = self.now();
        if let (Some(profile), Some(wall)) = (&mut self.profile, in_guest) {
            let event = self.trace.state().events;
            profile.record(super::Stretch { event, vtime: now, wall, ended_by: kind });
        }
        self.state.devices.fire_timers(now, &self.ram);

        match outcome {
            Outcome::Halt => {
                if self.vcpu.if_flag() {
                    // Logged when the halt resolves, with the time it woke at.
                    self.state.halted = true;
                    return Ok(None);
                }
                self.record(kind, addr, None)?;
                self.state.ended = Some(End::Halted);
                Ok(None)
            }
            Outcome::End(end) => {
                self.record(kind, addr, None)?;
                self.state.ended = Some(end);
                Ok(None)
            }
            Outcome::Continue => {
                let inject = self.inject_if_ready()?;
                self.record(kind, addr, inject)?;
                Ok(None)
            }
            Outcome::Effect(effect) => {
                let inject = match effect {
                    Effect::Exit(_) | Effect::Panic(_) | Effect::Reboot => None,
                    Effect::Message(_)
                    | Effect::IrqFlag(_)
                    | Effect::Ready
                    | Effect::CoverageMap(_)
                    | Effect::ClockPage(_) => self.inject_if_ready()?,
                };
                self.record(kind, addr, inject)?;
                match effect {
                    Effect::Exit(status) => self.state.ended = Some(End::Exit { status }),
                    Effect::Panic(code) => self.state.ended = Some(End::GuestPanic { code }),
                    Effect::Reboot => self.state.ended = Some(End::Reboot),
                    Effect::IrqFlag(pfn) => self.register_irq_flag(pfn)?,
                    Effect::CoverageMap(pfn) => self.register_coverage_map(pfn),
                    Effect::ClockPage(pfn) => self.register_clock_page(pfn)?,
                    Effect::Ready => return Ok(self.stop_at_ready.then_some(Halt::Ready)),
                    Effect::Message(bytes) => {
                        if let Some(control) = crate::control::recognize(&bytes) {
                            self.state.devices.control(&control, now);
                        }
                        let sender = self.sender();
                        self.state.messages.push(Message { vtime: now, bytes, sender });
                        return Ok(self.stop_on_message.then_some(Halt::Stop(Stop::Message)));
                    }
                }
                Ok(None)
            }
        }
    }

    /// The process that sent the message just received: the guest kernel's
    /// running task ([`crate::guest_task`]), read in the sender's own
    /// address space (the kernel half is the same in every one). `None`
    /// where the guest publishes none (a raw guest, another kernel).
    fn sender(&self) -> Option<u32> {
        let va = self.state.task_page?;
        let sregs = self.vcpu.fd().get_sregs().ok()?;
        let space = crate::profiler::walk::AddressSpace::new(&self.ram, sregs.cr3, sregs.cr4);
        crate::guest_task::read(&space, va).map(|t| t.tgid)
    }

    /// Records a profile sample if the sampler asked for one.
    fn sample_guest(&mut self) {
        let Some(p) = &mut self.profiler else { return };
        if !p.sampler.as_ref().is_some_and(Sampler::take_pending) {
            return;
        }
        let fd = self.vcpu.fd();
        match (fd.get_regs(), fd.get_sregs()) {
            (Ok(regs), Ok(sregs)) => p.record(&self.ram, self.state.task_page, &regs, &sregs),
            _ => p.profile.failed += 1,
        }
    }

    /// The guest is halted with interrupts enabled: deliver a pending
    /// interrupt, or jump the clock to the next timer deadline. Returns false
    /// if `deadline` comes first (the guest stays halted).
    fn wake_from_halt(&mut self, deadline: Vtime) -> Result<bool> {
        if !self.state.devices.pic.has_interrupt() {
            match self.state.devices.next_deadline() {
                None => {
                    self.record(ExitKind::Halt, 0, None)?;
                    self.state.ended = Some(End::Idle);
                    return Ok(true);
                }
                Some(t) if t > deadline => {
                    if deadline > self.now() {
                        self.state.clock.jump_to(deadline);
                    }
                    return Ok(false);
                }
                Some(t) => {
                    if t > self.now() {
                        self.state.clock.jump_to(t);
                    }
                    let now = self.now();
                    self.state.devices.fire_timers(now, &self.ram);
                    if !self.state.devices.pic.has_interrupt() {
                        // The timer fired into a masked line: keep sleeping.
                        return Ok(true);
                    }
                }
            }
        }
        // Halted with IF set, so KVM can take the interrupt now.
        let vector = self.state.devices.pic.acknowledge();
        self.vcpu.inject(vector)?;
        self.state.counters.injected += 1;
        self.state.halted = false;
        self.set_irq_flag(false)?;
        self.record(ExitKind::Halt, 0, Some(vector))?;
        Ok(true)
    }

    /// Injects the PIC's pending interrupt if the guest can take it now.
    /// Otherwise the interrupt waits: for an interrupt-window exit where the
    /// host's are exact, and, where the guest registered one, with its
    /// interrupt-pending flag raised so it pokes us once it enables interrupts.
    pub(super) fn inject_if_ready(&mut self) -> Result<Option<u8>> {
        let pending = self.state.devices.pic.has_interrupt();
        let injected = if pending && self.vcpu.ready_for_interrupt() {
            let vector = self.state.devices.pic.acknowledge();
            self.vcpu.inject(vector)?;
            self.state.counters.injected += 1;
            Some(vector)
        } else {
            None
        };
        let waiting = pending && injected.is_none();
        let request = waiting && self.host.precise_irq_window;
        self.vcpu.request_interrupt_window(request);
        self.state.irq_window_requested = request;
        self.set_irq_flag(waiting)?;
        Ok(injected)
    }

    fn register_irq_flag(&mut self, pfn: u64) -> Result<()> {
        let gpa = pfn << 12;
        if !self.ram.contains(gpa, 4) {
            self.state.ended =
                Some(End::GuestError { reason: format!("IRQ_FLAG page frame {pfn:#x} is outside guest RAM") });
            return Ok(());
        }
        self.ram.write(gpa, &0u32.to_le_bytes())?;
        self.state.irq_flag = Some(super::IrqFlag { gpa, raised: false });
        Ok(())
    }

    fn register_coverage_map(&mut self, pfn: u64) {
        let gpa = pfn << 12;
        if self.ram.contains(gpa, hc::COVERAGE_BYTES as u64) {
            self.state.coverage_map = Some(gpa);
        } else {
            self.state.ended = Some(End::GuestError {
                reason: format!("COVERAGE page frame {pfn:#x}: the map would lie outside guest RAM"),
            });
        }
    }

    fn register_clock_page(&mut self, pfn: u64) -> Result<()> {
        let gpa = pfn << 12;
        if !self.ram.contains(gpa, hc::VCLOCK_BYTES as u64) {
            self.state.ended =
                Some(End::GuestError { reason: format!("VCLOCK page frame {pfn:#x} is outside guest RAM") });
            return Ok(());
        }
        self.state.clock_page = Some(gpa);
        self.write_clock_page()
    }

    /// Puts the last exit's number and the virtual time in the guest's
    /// clock page: what its vDSO answers until the next exit.
    fn write_clock_page(&mut self) -> Result<()> {
        if let Some(gpa) = self.state.clock_page {
            let mut page = [0u8; hc::VCLOCK_BYTES];
            page[..8].copy_from_slice(&self.trace.state().events.to_le_bytes());
            page[8..].copy_from_slice(&self.state.clock.now().nanos().to_le_bytes());
            self.ram.write(gpa, &page)?;
        }
        Ok(())
    }

    /// Writes the guest's interrupt-pending flag when its value changes.
    fn set_irq_flag(&mut self, raised: bool) -> Result<()> {
        if let Some(flag) = &mut self.state.irq_flag {
            if flag.raised != raised {
                self.ram.write(flag.gpa, &u32::from(raised).to_le_bytes())?;
                flag.raised = raised;
            }
        }
        Ok(())
    }

    /// Logs the exit that just ended, and publishes its end to the guest's
    /// clock page.
    pub(super) fn record(&mut self, kind: ExitKind, addr: u64, inject: Option<u8>) -> Result<()> {
        let ev = Event { kind, addr, data: &self.scratch, vtime: self.state.clock.now(), inject };
        self.trace.record(&ev)?;
        self.write_clock_page()
    }
}

fn guest_result(r: std::result::Result<Outcome, GuestError>) -> Outcome {
    r.unwrap_or_else(|GuestError(reason)| Outcome::End(End::GuestError { reason }))
}

fn internal_error_name(suberror: u32) -> &'static str {
    match suberror {
        1 => "emulation failure: the host could not emulate a guest instruction",
        2 => "simultaneous exceptions",
        3 => "delivery event",
        4 => "unexpected exit reason",
        _ => "unknown",
    }
}
