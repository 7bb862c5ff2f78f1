//! The `hypercall` target: hvsim's paravirtual port block
//! (`hvsim_vmm::devices::hypercall`) under a guest that writes and reads
//! its ports at random. Every access either does what the ABI says or is a
//! protocol error that ends the run; nothing panics, a message never
//! exceeds the guest's RAM, an alarm that is due goes off once, and a
//! serde round trip part way (a snapshot) changes nothing that follows.

use hvsim_abi::hc;
use hvsim_vmm::clock::Vtime;
use hvsim_vmm::control::Control;
use hvsim_vmm::devices::hypercall::{Effect, Hypercall};

/// The guest's RAM, small so that a message can outgrow it.
const RAM: usize = 4096;
/// Accesses one input makes, at most.
const MAX_ACCESSES: usize = 512;

/// One port access, or time passing.
enum Access {
    Port { port: u16, write: bool, data: Vec<u8> },
    Tick(u64),
}

/// Each access is a byte `p` and, unless `p` is 0xff (time passes by the
/// next two bytes, in microseconds), a byte `w`: the port is `BASE + p %
/// (LEN + 4)` (the block and a few ports past it), bit 7 of `w` makes it a
/// write of the next `w & 0xf` (at most 8) bytes, or a read of that many.
fn accesses(mut data: &[u8]) -> Vec<Access> {
    let mut out = Vec::new();
    while out.len() < MAX_ACCESSES {
        match data {
            [0xff, a, b, rest @ ..] => {
                out.push(Access::Tick(u64::from(u16::from_le_bytes([*a, *b])) * 1000));
                data = rest;
            }
            [p, w, rest @ ..] => {
                let len = usize::from(w & 0xf).min(8);
                let write = w & 0x80 != 0;
                let take = if write { len.min(rest.len()) } else { 0 };
                let bytes = if write { rest[..take].to_vec() } else { vec![0; len] };
                out.push(Access::Port { port: hc::BASE + u16::from(*p) % (hc::LEN + 4), write, data: bytes });
                data = &rest[take..];
            }
            _ => break,
        }
    }
    out
}

/// A guest's session with the port block, as a transcript.
struct Session {
    h: Hypercall,
    now: Vtime,
    transcript: Vec<String>,
    /// The guest broke the protocol: its run is over.
    ended: bool,
}

impl Session {
    fn new(seed: u8) -> Session {
        let mut h = Hypercall::new(u64::from(seed), RAM).with_alarm_jitter(u64::from(seed));
        h.set_inbox(b"the run's work, read in chunks".to_vec());
        h.push_event(hc::event::word(hc::event::NODE_DOWN, 1));
        Session { h, now: Vtime(0), transcript: Vec::new(), ended: false }
    }

    fn play(&mut self, accesses: &[Access]) {
        for a in accesses {
            if self.ended {
                return;
            }
            let line = match a {
                Access::Tick(ns) => {
                    self.now = Vtime(self.now.0 + ns);
                    let due = self.h.deadline().is_some_and(|t| t <= self.now);
                    assert_eq!(self.h.fire(self.now), due, "an alarm due at {:?} is not what fired", self.h.deadline());
                    assert!(!due || self.h.deadline().is_none(), "the alarm is one-shot");
                    format!("tick {ns}: {due}")
                }
                Access::Port { port, write: true, data } => match self.h.pio_write(*port, data, self.now) {
                    Ok(effect) => {
                        if let Some(Effect::Message(m)) = &effect {
                            assert!(m.len() <= RAM, "a {}-byte message from a guest of {RAM} bytes", m.len());
                            // What the machine acts on itself: draws and buggify
                            // sites (the rest is the virtio devices').
                            match hvsim_vmm::control::recognize(m) {
                                Some(Control::Draw) => self.h.announce_draw(),
                                Some(Control::Buggify { name, fire }) => self.h.reach_buggify(&name, fire),
                                Some(Control::SetupComplete) => self.h.arm_buggify(),
                                _ => {}
                            }
                        }
                        format!("out {port:#x} {data:?}: {effect:?}")
                    }
                    Err(e) => {
                        self.ended = true;
                        format!("out {port:#x}: {}", e.0)
                    }
                },
                Access::Port { port, write: false, data } => {
                    let mut buf = data.clone();
                    match self.h.pio_read(*port, &mut buf, self.now) {
                        Ok(()) => format!("in {port:#x}: {buf:?}"),
                        Err(e) => {
                            self.ended = true;
                            format!("in {port:#x}: {}", e.0)
                        }
                    }
                }
            };
            self.transcript.push(line);
        }
    }

    /// What a snapshot and restore do to the port block.
    fn round_trip(&mut self) {
        let json = serde_json::to_string(&self.h).expect("the port block serializes");
        self.h = serde_json::from_str(&json).expect("the port block deserializes");
        assert_eq!(serde_json::to_string(&self.h).expect("the port block serializes"), json);
    }
}

/// Byte 0 places the round trip (a fraction of the accesses), byte 1 is
/// the seed, the rest are the accesses.
pub fn hypercall(data: &[u8]) {
    let [cut, seed, rest @ ..] = data else { return };
    let accesses = accesses(rest);
    let cut = usize::from(*cut) * accesses.len() / 255;
    let mut straight = Session::new(*seed);
    straight.play(&accesses);
    let mut restored = Session::new(*seed);
    restored.play(&accesses[..cut]);
    restored.round_trip();
    restored.play(&accesses[cut..]);
    assert_eq!(straight.transcript, restored.transcript, "a round trip after {cut} accesses changed what followed");
    assert_eq!(serde_json::to_string(&straight.h).ok(), serde_json::to_string(&restored.h).ok());
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../inputs.rs");

    /// The `a-guest-session` seed is a guest's ordinary session, start to
    /// end, with no protocol error: the fuzzer starts from real traffic.
    #[test]
    fn the_session_seed_speaks_the_protocol() {
        let data = fuzz_inputs("hypercall").into_iter().find(|(f, _)| f.ends_with("a-guest-session")).unwrap().1;
        let mut s = Session::new(data[1]);
        s.play(&accesses(&data[2..]));
        let t = s.transcript.join("\n");
        assert!(!s.ended, "{t}");
        for needle in [
            "Some(Ready)",
            "Some(Message([123, 34, 97",
            "tick 6000000: true",
            "Some(IrqFlag(256))",
            "Some(CoverageMap(512))",
            "Some(ClockPage(768))",
            "Some(Exit(0))",
        ] {
            assert!(t.contains(needle), "{needle} not in:\n{t}");
        }
        assert_eq!(s.h.stats().random_bytes, 8);
    }
}
