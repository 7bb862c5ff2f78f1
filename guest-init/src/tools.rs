//! Small test tools, reached as `/init TOOL ARGS...` from a guest shell.

use std::process::ExitCode;

pub fn main(args: Vec<String>) -> ExitCode {
    match args.first().map(String::as_str) {
        Some("rdtsc") => rdtsc(args.get(1).and_then(|n| n.parse().ok()).unwrap_or(5)),
        _ => {
            eprintln!("usage: /init rdtsc [N]   (as PID 1: hvsim's init)");
            ExitCode::from(2)
        }
    }
}

/// Prints `n` readings of the time-stamp counter, one per line.
fn rdtsc(n: usize) -> ExitCode {
    for _ in 0..n {
        // SAFETY: RDTSC has no memory effects.
        let t = unsafe { core::arch::x86_64::_rdtsc() };
        println!("{t}");
    }
    ExitCode::SUCCESS
}
