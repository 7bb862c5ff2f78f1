//! virtio-rng: the guest kernel's hardware random source, fed from the
//! run's seed (stream `virtio-rng`), so even "true" randomness in the guest
//! is a function of the seed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::mmio::Mmio;
use super::{add_used, open_queue, pop};
use crate::entropy::Stream;
use crate::memory::GuestRam;

pub const DEVICE_ID: u32 = 4;
/// Bytes handed out per request at most.
const MAX_CHUNK: u64 = 64 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rng {
    stream: Stream,
    bytes: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { stream: Stream::new(seed, "virtio-rng"), bytes: 0 }
    }

    pub fn reseed(&mut self, seed: u64) {
        self.stream.reseed(seed);
    }

    pub fn notify(&mut self, q: u16, mmio: &mut Mmio, ram: &GuestRam) -> Result<(), String> {
        if q != 0 {
            return Err(format!("notify of queue {q}; an entropy source has one"));
        }
        let mut queue = open_queue(mmio, 0, ram)?;
        let r = (|| {
            while let Some(chain) = pop(&mut queue, ram)? {
                let mut buf = vec![0u8; chain.writable_len().min(MAX_CHUNK) as usize];
                self.stream.fill(&mut buf);
                let n = chain.write_at(ram, 0, &buf)?;
                self.bytes += n as u64;
                add_used(&mut queue, mmio, ram, chain.head, n as u32)?;
            }
            Ok(())
        })();
        mmio.queues[0].update(&queue);
        r
    }

    pub fn counters(&self) -> BTreeMap<String, u64> {
        super::counters(&[("bytes", self.bytes)])
    }
}

#[cfg(test)]
mod tests {
    use super::super::driver::*;
    use super::*;

    fn draw(seed: u64) -> Vec<u8> {
        let ram = GuestRam::new(4 << 20).unwrap();
        let mut mmio = Mmio::new(DEVICE_ID, 0, 1);
        driver_ok(&mut mmio, &[Ring::new(0, 0)]);
        let ring = Ring::new(0, 0);
        ring.desc(&ram, 0, 0x30_000, 16, F_WRITE | F_NEXT, 1);
        ring.desc(&ram, 1, 0x31_000, 16, F_WRITE, 0);
        ring.offer(&ram, 0);
        let mut rng = Rng::new(seed);
        rng.notify(0, &mut mmio, &ram).unwrap();
        assert_eq!(ring.used(&ram), [(0, 32)]);
        let mut out = vec![0u8; 32];
        ram.read(0x30_000, &mut out[..16]).unwrap();
        ram.read(0x31_000, &mut out[16..]).unwrap();
        out
    }

    #[test]
    fn bytes_follow_the_seed() {
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
        let mut expected = [0u8; 32];
        Stream::new(1, "virtio-rng").fill(&mut expected);
        assert_eq!(draw(1), expected);
    }
}
