//! SIGINT (Ctrl-C) and SIGTERM during an exploration: the first raises the
//! explorer's interrupt, and the exploration ends at its machines' next
//! exits, writing everything it found; a second ends the process at once
//! (status 128 + the signal's number, as a shell reports it).

use anyhow::{Context, Result};
use hvsim_vmm::Interrupt;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Starts watching for the signals; the interrupt they raise.
pub fn interrupt_on_signals() -> Result<Interrupt> {
    let interrupt = Interrupt::new();
    let mut signals = Signals::new([SIGINT, SIGTERM]).context("cannot watch for SIGINT and SIGTERM")?;
    let raised = interrupt.clone();
    std::thread::Builder::new()
        .name("hvsim-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if raised.raised() {
                    std::process::exit(128 + signal);
                }
                raised.raise(usize::try_from(signal).expect("signal numbers are positive"));
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                eprintln!("hvsim: {name}: ending the exploration and writing what it found (again to quit at once)");
            }
        })
        .context("cannot start the signal thread")?;
    Ok(interrupt)
}
