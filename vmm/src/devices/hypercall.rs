//! The hvsim paravirtual port block: commands, a byte channel both ways, the
//! virtual clock and a one-shot alarm (see `hvsim_abi::hc` for the layout).
//!
//! The guest is untrusted: every malformed access (wrong width, reading past
//! the queued bytes, an unknown command) is reported as a [`GuestError`],
//! which ends the run with that reason; nothing here can panic on guest input.

use std::collections::VecDeque;

use hvsim_abi::hc;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::clock::Vtime;
use crate::entropy::Stream;
use crate::faults::buggify::Buggify;

/// A guest protocol violation; ends the run with this text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestError(pub String);

/// What a command asks of the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    Exit(u8),
    Message(Vec<u8>),
    Panic(u32),
    Reboot,
    /// The guest registered its interrupt-pending flag at this page frame.
    IrqFlag(u64),
    /// The guest is booted and waits for its run (`READY`).
    Ready,
    /// The guest's coverage map is at this page frame (`COVERAGE`).
    CoverageMap(u64),
    /// `VCLOCK`: the guest's clock page is at this page frame.
    ClockPage(u64),
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChannelStats {
    pub messages: u64,
    /// Messages longer than guest RAM, dropped at `SEND`.
    pub oversized: u64,
    pub random_bytes: u64,
    /// SDK draws announced (`{"hvsim_draw": ...}`), and of those, the ones
    /// whose value was chosen from outside ([`Hypercall::choose_draw`]).
    #[serde(default)]
    pub draws: u64,
    #[serde(default)]
    pub chosen_draws: u64,
    /// Answers dropped because the command after their question did not
    /// take them (a question sent where nothing reads the answer).
    #[serde(default)]
    pub unanswered: u64,
}

/// The answer to the question the guest just sent (an SDK draw, a buggify
/// site, a clock value), offered to the next command only (`hc::op::ANSWER`,
/// or a `RANDOM` of at most 8 bytes): the chosen value if any, else the
/// stream's next bytes (so an unchosen draw reads what it always would).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAnswer {
    pub chosen: Option<u64>,
}

#[serde_with::serde_as]
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Hypercall {
    tx: Vec<u8>,
    /// Bytes of the current message beyond `max_message` (not kept).
    tx_overflow: u64,
    rx: VecDeque<u8>,
    clock_latch: u64,
    alarm_lo: u32,
    alarm: Option<Vtime>,
    /// Timing perturbation: the alarm goes off up to a quarter of its delay
    /// (at most [`MAX_ALARM_LATENESS`]) late, drawn from this stream.
    #[serde(default)]
    alarm_jitter: Option<Stream>,
    /// The guest's entropy stream (`RANDOM`).
    entropy: Stream,
    stats: ChannelStats,
    /// Machine events the guest has not read yet (`EVENT`), oldest first.
    #[serde(default)]
    events: VecDeque<u32>,
    /// The run's work (`INBOX`) and how much of it the guest has read.
    #[serde(default)]
    #[serde_as(as = "serde_with::hex::Hex")]
    inbox: Vec<u8>,
    #[serde(default)]
    inbox_read: usize,
    /// What the guest said it handles (`hc::caps`).
    #[serde(default)]
    caps: u32,
    /// The guest sent `READY` (it may only once).
    #[serde(default)]
    ready: bool,
    /// The longest message kept: the guest's RAM size.
    #[serde(default = "default_max_message")]
    max_message: usize,
    /// The run asked to hear of setup complete (`hc::event::SETUP`), and
    /// has not yet.
    #[serde(default)]
    announce_setup: bool,
    /// The answer to the message just sent, if it asked a question.
    #[serde(default, alias = "draw")]
    answer: Option<PendingAnswer>,
    /// Buggify sites in this timeline.
    #[serde(default)]
    buggify: Buggify,
}

fn default_max_message() -> usize {
    1 << 20
}

/// Events kept for a guest that does not read them (a raw guest never
/// does); older ones are dropped first.
const MAX_EVENTS: usize = 256;
/// The most a perturbed alarm goes off late.
pub const MAX_ALARM_LATENESS: u64 = 100_000;

fn u32_of(data: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(data.try_into().ok()?))
}

impl Hypercall {
    /// The port block of a guest with `ram` bytes of RAM (the longest
    /// message it can send).
    pub fn new(seed: u64, ram: usize) -> Hypercall {
        Hypercall {
            tx: Vec::new(),
            tx_overflow: 0,
            rx: VecDeque::new(),
            clock_latch: 0,
            alarm_lo: 0,
            alarm: None,
            alarm_jitter: None,
            entropy: Stream::new(seed, "guest"),
            stats: ChannelStats::default(),
            events: VecDeque::new(),
            inbox: Vec::new(),
            inbox_read: 0,
            caps: 0,
            ready: false,
            max_message: ram,
            announce_setup: false,
            answer: None,
            buggify: Buggify::new(seed),
        }
    }

    /// Perturbs the alarm from the `timing` stream of `seed` (see
    /// [`MAX_ALARM_LATENESS`]).
    pub fn with_alarm_jitter(mut self, seed: u64) -> Hypercall {
        self.alarm_jitter = Some(Stream::new(seed, "alarm"));
        self
    }

    /// Re-keys the guest's entropy stream and the alarm's perturbation.
    pub fn reseed(&mut self, seed: u64) {
        self.entropy.reseed(seed);
        self.buggify.reseed(seed);
        if let Some(s) = &mut self.alarm_jitter {
            s.reseed(seed);
        }
    }

    /// Gives the guest its run's work, to read with `INBOX`.
    pub fn set_inbox(&mut self, work: Vec<u8>) {
        self.inbox = work;
        self.inbox_read = 0;
    }

    /// Whether the run wants `hc::event::SETUP` at setup complete.
    pub fn set_announce_setup(&mut self, on: bool) {
        self.announce_setup = on;
    }

    /// Whether setup complete is to be announced now (once per run).
    pub fn take_setup_announcement(&mut self) -> bool {
        std::mem::take(&mut self.announce_setup)
    }

    /// The guest announced an SDK draw (see `control.rs`): its answer is
    /// the stream's next bytes unless [`Hypercall::choose_draw`] decides it.
    pub fn announce_draw(&mut self) {
        self.answer = Some(PendingAnswer::default());
        self.stats.draws += 1;
    }

    /// A buggify site is reached: the answer is whether it fires (1) or
    /// not (0).
    pub fn reach_buggify(&mut self, name: &str, fire: Option<f64>) {
        let fires = self.buggify.reach(name, fire);
        self.answer(u64::from(fires));
    }

    /// The question the guest just asked (see `control.rs`) is answered
    /// with `value`.
    pub fn answer(&mut self, value: u64) {
        self.answer = Some(PendingAnswer { chosen: Some(value) });
    }

    /// Setup complete: buggify sites are decided and fire from now on.
    pub fn arm_buggify(&mut self) {
        self.buggify.arm();
    }

    pub fn buggify(&self) -> &Buggify {
        &self.buggify
    }

    pub fn buggify_mut(&mut self) -> &mut Buggify {
        &mut self.buggify
    }

    /// Whether an announced draw waits for its answer to be taken.
    pub fn draw_pending(&self) -> bool {
        self.answer.is_some()
    }

    /// The value the pending draw will read (its low bytes, for a read of
    /// fewer than 8): the chosen one, or the stream's next 8 bytes. Looking
    /// changes nothing.
    pub fn pending_draw_value(&self) -> Option<u64> {
        let draw = self.answer?;
        Some(draw.chosen.unwrap_or_else(|| {
            let mut bytes = [0; 8];
            self.entropy.clone().fill(&mut bytes);
            u64::from_le_bytes(bytes)
        }))
    }

    /// Makes the pending draw return `value` (its low bytes, for a read of
    /// fewer than 8). False if no draw is pending.
    pub fn choose_draw(&mut self, value: u64) -> bool {
        let Some(draw) = &mut self.answer else { return false };
        if draw.chosen.replace(value).is_none() {
            self.stats.chosen_draws += 1;
        }
        true
    }

    /// Whether the guest handles all of `caps` (`hc::caps`).
    pub fn guest_handles(&self, caps: u32) -> bool {
        self.caps & caps == caps
    }

    /// Queues a machine event for the guest (see `hc::op::EVENT`).
    pub fn push_event(&mut self, event: u32) {
        debug_assert_ne!(event, 0, "0 means no event");
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    pub fn claims(port: u16) -> bool {
        (hc::BASE..hc::BASE + hc::LEN).contains(&port)
    }

    pub fn stats(&self) -> &ChannelStats {
        &self.stats
    }

    /// The armed alarm, if any.
    pub fn deadline(&self) -> Option<Vtime> {
        self.alarm
    }

    /// Returns whether the alarm went off (it is one-shot).
    pub fn fire(&mut self, now: Vtime) -> bool {
        match self.alarm {
            Some(t) if t <= now => {
                self.alarm = None;
                true
            }
            _ => false,
        }
    }

    pub fn pio_write(&mut self, port: u16, data: &[u8], now: Vtime) -> Result<Option<Effect>, GuestError> {
        match port {
            hc::DATA => {
                let room = self.max_message.saturating_sub(self.tx.len());
                let keep = data.len().min(room);
                self.tx.extend_from_slice(&data[..keep]);
                self.tx_overflow += (data.len() - keep) as u64;
                Ok(None)
            }
            hc::CMD => {
                let word = u32_of(data).ok_or_else(|| width_error(port, data.len(), "OUT"))?;
                self.command(word)
            }
            hc::ALARM_LO => {
                self.alarm_lo = u32_of(data).ok_or_else(|| width_error(port, data.len(), "OUT"))?;
                Ok(None)
            }
            hc::ALARM_HI => {
                let hi = u32_of(data).ok_or_else(|| width_error(port, data.len(), "OUT"))?;
                let t = (u64::from(hi) << 32) | u64::from(self.alarm_lo);
                let late = match &mut self.alarm_jitter {
                    Some(stream) if t != 0 => {
                        let bound = (t.saturating_sub(now.0) / 4).min(MAX_ALARM_LATENESS);
                        stream.below(bound + 1)
                    }
                    _ => 0,
                };
                self.alarm = (t != 0).then_some(Vtime(t.saturating_add(late)));
                Ok(None)
            }
            // The exit itself is the point: the run loop injects after it.
            hc::POKE => Ok(None),
            _ => Err(GuestError(format!("OUT to unassigned hvsim port {port:#x}"))),
        }
    }

    fn command(&mut self, word: u32) -> Result<Option<Effect>, GuestError> {
        let arg = word & hc::ARG_MASK;
        let op = (word >> 24) as u8;
        // An answer is offered to the command right after its question and
        // no later: no other reader can take it (see `hc::op::ANSWER`).
        let takes = op == hc::op::ANSWER || op == hc::op::RANDOM && arg <= 8;
        let offered = self.answer.take();
        if offered.is_some() && !takes {
            self.stats.unanswered += 1;
        }
        match op {
            hc::op::EXIT => Ok(Some(Effect::Exit(arg as u8))),
            hc::op::PANIC => Ok(Some(Effect::Panic(arg))),
            hc::op::REBOOT => Ok(Some(Effect::Reboot)),
            hc::op::IRQ_FLAG => Ok(Some(Effect::IrqFlag(u64::from(arg)))),
            hc::op::SEND => {
                let msg = std::mem::take(&mut self.tx);
                if std::mem::take(&mut self.tx_overflow) > 0 {
                    self.stats.oversized += 1;
                    return Ok(None);
                }
                self.stats.messages += 1;
                Ok(Some(Effect::Message(msg)))
            }
            hc::op::RANDOM => {
                if arg == 0 || arg > hc::MAX_RANDOM {
                    return Err(GuestError(format!("RANDOM of {arg} bytes (allowed: 1..={})", hc::MAX_RANDOM)));
                }
                if self.rx.len() + arg as usize > 2 * hc::MAX_RANDOM as usize {
                    return Err(GuestError(format!("RANDOM while {} earlier bytes are still unread", self.rx.len())));
                }
                let mut buf = vec![0; arg as usize];
                match offered {
                    Some(PendingAnswer { chosen: Some(value) }) if takes => {
                        buf.copy_from_slice(&value.to_le_bytes()[..arg as usize])
                    }
                    _ => self.entropy.fill(&mut buf),
                }
                self.rx.extend(buf);
                self.stats.random_bytes += u64::from(arg);
                Ok(None)
            }
            hc::op::ANSWER => {
                if !self.rx.is_empty() {
                    return Err(GuestError(format!("ANSWER while {} earlier bytes are still unread", self.rx.len())));
                }
                if let Some(PendingAnswer { chosen }) = offered {
                    let value = chosen.unwrap_or_else(|| {
                        let mut b = [0; 8];
                        self.entropy.fill(&mut b);
                        self.stats.random_bytes += 8;
                        u64::from_le_bytes(b)
                    });
                    self.rx.extend(value.to_le_bytes());
                }
                Ok(None)
            }
            hc::op::EVENT => {
                if self.rx.len() + 4 > 2 * hc::MAX_RANDOM as usize {
                    return Err(GuestError(format!("EVENT while {} earlier bytes are still unread", self.rx.len())));
                }
                self.rx.extend(self.events.pop_front().unwrap_or(0).to_le_bytes());
                Ok(None)
            }
            hc::op::READY => {
                if std::mem::replace(&mut self.ready, true) {
                    return Err(GuestError("READY sent a second time (a run starts once)".into()));
                }
                Ok(Some(Effect::Ready))
            }
            hc::op::INBOX => {
                if arg == 0 || arg > hc::MAX_RANDOM {
                    return Err(GuestError(format!("INBOX of {arg} bytes (allowed: 1..={})", hc::MAX_RANDOM)));
                }
                if !self.rx.is_empty() {
                    return Err(GuestError(format!("INBOX while {} earlier bytes are still unread", self.rx.len())));
                }
                let rest = &self.inbox[self.inbox_read..];
                let n = rest.len().min(arg as usize);
                self.rx.extend(&rest[..n]);
                self.inbox_read += n;
                if self.inbox_read == self.inbox.len() {
                    // Read to the end: nothing of it needs to live on in snapshots.
                    self.set_inbox(Vec::new());
                }
                Ok(None)
            }
            hc::op::CAPS => {
                self.caps = arg;
                Ok(None)
            }
            hc::op::COVERAGE => Ok(Some(Effect::CoverageMap(u64::from(arg)))),
            hc::op::VCLOCK => Ok(Some(Effect::ClockPage(u64::from(arg)))),
            hc::op::RESET => {
                self.tx.clear();
                self.tx_overflow = 0;
                self.rx.clear();
                Ok(None)
            }
            op => Err(GuestError(format!("unknown hypercall command {op:#04x} (word {word:#010x})"))),
        }
    }

    pub fn pio_read(&mut self, port: u16, data: &mut [u8], now: Vtime) -> Result<(), GuestError> {
        let word = match port {
            hc::DATA => {
                if data.len() > self.rx.len() {
                    return Err(GuestError(format!(
                        "read of {} bytes from the hvsim channel with {} queued",
                        data.len(),
                        self.rx.len()
                    )));
                }
                for b in data.iter_mut() {
                    *b = self.rx.pop_front().expect("length checked above");
                }
                return Ok(());
            }
            hc::CMD => self.rx.len() as u32,
            hc::CLOCK_LO => {
                self.clock_latch = now.0;
                now.0 as u32
            }
            hc::CLOCK_HI => (self.clock_latch >> 32) as u32,
            hc::ALARM_LO => self.alarm.map_or(0, |t| t.0 as u32),
            hc::ALARM_HI => self.alarm.map_or(0, |t| (t.0 >> 32) as u32),
            _ => return Err(GuestError(format!("IN from unassigned hvsim port {port:#x}"))),
        };
        if data.len() != 4 {
            return Err(width_error(port, data.len(), "IN"));
        }
        data.copy_from_slice(&word.to_le_bytes());
        Ok(())
    }
}

fn width_error(port: u16, len: usize, dir: &str) -> GuestError {
    GuestError(format!("{len}-byte {dir} at hvsim port {port:#x}, which takes 32-bit accesses"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RAM: usize = 1 << 20;

    fn cmd(h: &mut Hypercall, op: u8, arg: u32) -> Result<Option<Effect>, GuestError> {
        h.pio_write(hc::CMD, &hc::cmd(op, arg).to_le_bytes(), Vtime(0))
    }

    #[test]
    fn message_round_trip() {
        let mut h = Hypercall::new(1, RAM);
        h.pio_write(hc::DATA, b"hello ", Vtime(0)).unwrap();
        h.pio_write(hc::DATA, b"world", Vtime(0)).unwrap();
        assert_eq!(cmd(&mut h, hc::op::SEND, 0), Ok(Some(Effect::Message(b"hello world".to_vec()))));
        assert_eq!(cmd(&mut h, hc::op::SEND, 0), Ok(Some(Effect::Message(vec![]))));
        assert_eq!(h.stats().messages, 2);
    }

    #[test]
    fn oversized_message_is_dropped_and_counted() {
        let mut h = Hypercall::new(1, RAM);
        let chunk = vec![b'x'; 4096];
        for _ in 0..=(RAM / chunk.len()) {
            h.pio_write(hc::DATA, &chunk, Vtime(0)).unwrap();
        }
        assert_eq!(cmd(&mut h, hc::op::SEND, 0), Ok(None));
        assert_eq!(h.stats().oversized, 1);
        h.pio_write(hc::DATA, b"ok", Vtime(0)).unwrap();
        assert_eq!(cmd(&mut h, hc::op::SEND, 0), Ok(Some(Effect::Message(b"ok".to_vec()))));
    }

    #[test]
    fn random_bytes_come_from_the_seed() {
        let draw = |seed| {
            let mut h = Hypercall::new(seed, RAM);
            cmd(&mut h, hc::op::RANDOM, 8).unwrap();
            let mut status = [0; 4];
            h.pio_read(hc::CMD, &mut status, Vtime(0)).unwrap();
            assert_eq!(u32::from_le_bytes(status), 8);
            let mut b = [0; 8];
            h.pio_read(hc::DATA, &mut b, Vtime(0)).unwrap();
            b
        };
        assert_eq!(draw(5), draw(5));
        assert_ne!(draw(5), draw(6));
    }

    #[test]
    fn an_announced_draw_reads_the_chosen_value_once() {
        let read = |h: &mut Hypercall, n: u32| {
            cmd(h, hc::op::RANDOM, n).unwrap();
            let mut b = vec![0; n as usize];
            h.pio_read(hc::DATA, &mut b, Vtime(0)).unwrap();
            b
        };
        let (mut chosen, mut plain) = (Hypercall::new(5, RAM), Hypercall::new(5, RAM));
        // Nothing pending: nothing to choose.
        assert!(!chosen.choose_draw(3));
        chosen.announce_draw();
        plain.announce_draw();
        assert!(chosen.draw_pending() && chosen.choose_draw(3));
        assert_eq!(read(&mut chosen, 8), 3u64.to_le_bytes());
        assert!(!chosen.draw_pending());
        // Unchosen, the draw reads the stream, as without the announcement;
        // and the chosen value did not take from the stream.
        assert_eq!(read(&mut chosen, 8), read(&mut plain, 8));
        chosen.announce_draw();
        chosen.choose_draw(0x1234);
        assert_eq!(read(&mut chosen, 1), [0x34]);
        assert_eq!((chosen.stats().draws, chosen.stats().chosen_draws), (2, 2));
    }

    /// The answer to a question is taken by `ANSWER` (or a `RANDOM` of at
    /// most 8 bytes) right after it, and by nothing later: another reader's
    /// bytes come from the stream, and the answer is dropped and counted.
    #[test]
    fn an_answer_is_offered_to_the_next_command_only() {
        let take = |h: &mut Hypercall| -> Option<u64> {
            cmd(h, hc::op::ANSWER, 0).unwrap();
            let mut status = [0; 4];
            h.pio_read(hc::CMD, &mut status, Vtime(0)).unwrap();
            (u32::from_le_bytes(status) == 8).then(|| {
                let mut b = [0; 8];
                h.pio_read(hc::DATA, &mut b, Vtime(0)).unwrap();
                u64::from_le_bytes(b)
            })
        };
        let random8 = |h: &mut Hypercall| {
            cmd(h, hc::op::RANDOM, 8).unwrap();
            let mut b = [0; 8];
            h.pio_read(hc::DATA, &mut b, Vtime(0)).unwrap();
            u64::from_le_bytes(b)
        };
        let mut h = Hypercall::new(5, RAM);
        // A message that asked nothing has no answer.
        assert_eq!(take(&mut h), None);
        h.answer(0xAB);
        assert_eq!(take(&mut h), Some(0xAB));
        assert_eq!(take(&mut h), None, "taken once");
        // Another command between the question and its taking drops it:
        // the reader gets the stream's bytes, not the answer.
        h.answer(0xCD);
        cmd(&mut h, hc::op::EVENT, 0).unwrap();
        h.pio_read(hc::DATA, &mut [0; 4], Vtime(0)).unwrap();
        assert_eq!(take(&mut h), None);
        h.answer(0xEF);
        assert_eq!(random8(&mut h), 0xEF, "a RANDOM right after the question takes it");
        h.answer(0x12);
        cmd(&mut h, hc::op::RANDOM, 32).unwrap();
        h.pio_read(hc::DATA, &mut [0; 32], Vtime(0)).unwrap();
        assert_eq!(take(&mut h), None, "a larger read is not an answer and drops it");
        assert_eq!(h.stats().unanswered, 2);
        // An unchosen draw's answer is the stream's next 8 bytes, and what
        // it will be can be seen beforehand without changing it.
        let (mut drawn, mut plain) = (Hypercall::new(6, RAM), Hypercall::new(6, RAM));
        assert_eq!(drawn.pending_draw_value(), None, "no draw pending");
        drawn.announce_draw();
        let seen = drawn.pending_draw_value();
        assert_eq!(seen, drawn.pending_draw_value());
        assert_eq!(take(&mut drawn), Some(random8(&mut plain)));
        assert_eq!(seen, Some(random8(&mut Hypercall::new(6, RAM))));
        drawn.announce_draw();
        drawn.choose_draw(9);
        assert_eq!(drawn.pending_draw_value(), Some(9));
        // ANSWER with bytes still unread is a protocol error.
        cmd(&mut h, hc::op::RANDOM, 4).unwrap();
        assert!(cmd(&mut h, hc::op::ANSWER, 0).is_err());
    }

    #[test]
    fn protocol_violations_are_errors() {
        let mut h = Hypercall::new(1, RAM);
        assert!(cmd(&mut h, hc::op::RANDOM, 0).is_err());
        assert!(cmd(&mut h, hc::op::RANDOM, hc::MAX_RANDOM + 1).is_err());
        assert!(cmd(&mut h, 0x7F, 0).is_err());
        assert!(h.pio_read(hc::DATA, &mut [0; 1], Vtime(0)).is_err());
        assert!(h.pio_read(hc::CLOCK_LO, &mut [0; 2], Vtime(0)).is_err());
        assert!(h.pio_write(hc::CMD, &[1], Vtime(0)).is_err());
        assert!(h.pio_write(hc::BASE + 2, &[1], Vtime(0)).is_err());
    }

    #[test]
    fn clock_latches_both_halves() {
        let mut h = Hypercall::new(1, RAM);
        let t = Vtime(0x1_2345_6789);
        let mut lo = [0; 4];
        let mut hi = [0; 4];
        h.pio_read(hc::CLOCK_LO, &mut lo, t).unwrap();
        h.pio_read(hc::CLOCK_HI, &mut hi, Vtime(u64::MAX)).unwrap();
        assert_eq!(u32::from_le_bytes(lo), 0x2345_6789);
        assert_eq!(u32::from_le_bytes(hi), 1);
    }

    #[test]
    fn events_are_read_oldest_first_then_zero() {
        let mut h = Hypercall::new(1, RAM);
        let next = |h: &mut Hypercall| {
            cmd(h, hc::op::EVENT, 0).unwrap();
            let mut b = [0; 4];
            h.pio_read(hc::DATA, &mut b, Vtime(0)).unwrap();
            u32::from_le_bytes(b)
        };
        let (down, up) = (hc::event::word(hc::event::NODE_DOWN, 3), hc::event::word(hc::event::NODE_UP, 3));
        h.push_event(down);
        h.push_event(up);
        assert_eq!([next(&mut h), next(&mut h), next(&mut h)], [down, up, 0]);
        assert_eq!(hc::event::split(up), (hc::event::NODE_UP, 3));
        // A guest that never reads keeps only the newest.
        for i in 1..=(MAX_EVENTS as u32 + 10) {
            h.push_event(i);
        }
        assert_eq!(next(&mut h), 11);
    }

    #[test]
    fn the_inbox_is_read_in_chunks_then_empty() {
        let mut h = Hypercall::new(1, RAM);
        h.set_inbox((0..100u8).collect());
        let mut got = Vec::new();
        loop {
            cmd(&mut h, hc::op::INBOX, 30).unwrap();
            let mut status = [0; 4];
            h.pio_read(hc::CMD, &mut status, Vtime(0)).unwrap();
            let n = u32::from_le_bytes(status) as usize;
            if n == 0 {
                break;
            }
            let mut b = vec![0; n];
            h.pio_read(hc::DATA, &mut b, Vtime(0)).unwrap();
            got.extend(b);
        }
        assert_eq!(got, (0..100u8).collect::<Vec<_>>());
        assert!(cmd(&mut h, hc::op::INBOX, 0).is_err());
        cmd(&mut h, hc::op::RANDOM, 4).unwrap();
        assert!(cmd(&mut h, hc::op::INBOX, 4).is_err(), "INBOX behind unread bytes");
    }

    #[test]
    fn ready_once_and_caps() {
        let mut h = Hypercall::new(1, RAM);
        assert!(!h.guest_handles(hc::caps::RESEED));
        cmd(&mut h, hc::op::CAPS, hc::caps::RESEED).unwrap();
        assert!(h.guest_handles(hc::caps::RESEED));
        assert_eq!(cmd(&mut h, hc::op::READY, 0), Ok(Some(Effect::Ready)));
        assert!(cmd(&mut h, hc::op::READY, 0).is_err());
    }

    #[test]
    fn a_perturbed_alarm_goes_off_late_within_bounds() {
        let arm = |h: &mut Hypercall, at: u64, now: u64| {
            h.pio_write(hc::ALARM_LO, &(at as u32).to_le_bytes(), Vtime(now)).unwrap();
            h.pio_write(hc::ALARM_HI, &((at >> 32) as u32).to_le_bytes(), Vtime(now)).unwrap();
            h.deadline().unwrap().0
        };
        let mut lates = Vec::new();
        let mut h = Hypercall::new(1, RAM).with_alarm_jitter(7);
        for i in 0..100u64 {
            let late = arm(&mut h, 1_000_000 * (i + 1), 0) - 1_000_000 * (i + 1);
            assert!(late <= MAX_ALARM_LATENESS, "{late}");
            lates.push(late);
            // A short delay is late by at most a quarter of it.
            assert!(arm(&mut h, 1_000 + 400, 1_000) - 1_400 <= 100);
        }
        assert!(lates.iter().any(|&l| l > 0) && lates.iter().any(|&l| l != lates[0]));
        let mut again = Hypercall::new(1, RAM).with_alarm_jitter(7);
        assert_eq!(arm(&mut again, 1_000_000, 0) - 1_000_000, lates[0], "lateness follows the seed");
        assert_eq!(arm(&mut Hypercall::new(1, RAM), 5_000, 0), 5_000, "no perturbation unless asked");
    }

    #[test]
    fn alarm_is_one_shot() {
        let mut h = Hypercall::new(1, RAM);
        h.pio_write(hc::ALARM_LO, &5000u32.to_le_bytes(), Vtime(0)).unwrap();
        h.pio_write(hc::ALARM_HI, &0u32.to_le_bytes(), Vtime(0)).unwrap();
        assert_eq!(h.deadline(), Some(Vtime(5000)));
        assert!(!h.fire(Vtime(4999)));
        assert!(h.fire(Vtime(6000)));
        assert!(!h.fire(Vtime(7000)));
    }

    proptest! {
        #[test]
        fn arbitrary_guest_traffic_never_panics(
            ops in prop::collection::vec((0u16..24, any::<bool>(), prop::collection::vec(any::<u8>(), 0..9)), 0..100)
        ) {
            let mut h = Hypercall::new(9, RAM);
            for (off, write, mut data) in ops {
                let port = hc::BASE + off;
                if write {
                    let _ = h.pio_write(port, &data, Vtime(1));
                } else {
                    let _ = h.pio_read(port, &mut data, Vtime(1));
                }
            }
        }
    }
}
