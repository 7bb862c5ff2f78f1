//! The physical limit for `hvsim bench exits`: a bare `KVM_RUN` loop.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::machine::Machine;
use crate::vcpu::Exit;

impl Machine {
    /// Runs the guest with the least userspace work possible per exit: answer
    /// every `IN` with zeroes, stop at the first hypercall port `OUT` (the
    /// exit-loop guest's EXIT). No clock, no devices, no log. Returns the
    /// number of exits and the wall time they took.
    pub fn run_bare(&mut self) -> Result<(u64, Duration)> {
        let start = Instant::now();
        let mut exits = 0u64;
        loop {
            exits += 1;
            match self.vcpu.run() {
                Ok(Exit::IoIn { data, .. }) => data.fill(0),
                Ok(Exit::IoOut { port, .. }) if port == hvsim_abi::hc::CMD => break,
                Ok(Exit::IoOut { .. }) => {}
                Ok(other) => return Err(crate::Error::Config(format!("bare loop: unexpected exit {other:?}"))),
                Err(e) => return Err(crate::Error::Kvm { op: "KVM_RUN", err: e }),
            }
        }
        Ok((exits, start.elapsed()))
    }
}
