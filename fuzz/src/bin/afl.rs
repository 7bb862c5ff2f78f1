//! The AFL++ harness: `hvsim-fuzz TARGET` runs one target of the library
//! in AFL++'s persistent mode (`ci/fuzz.sh` starts it under afl-fuzz). An
//! input that leaks heap memory is a crash too (`hvsim_fuzz::leaks`).

#[global_allocator]
static ALLOCATOR: hvsim_fuzz::leaks::Counting = hvsim_fuzz::leaks::Counting;

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(run) = hvsim_fuzz::target(&name) else {
        let names: Vec<&str> = hvsim_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
        eprintln!("usage: hvsim-fuzz TARGET (one of: {})", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        let leaked = hvsim_fuzz::leaks::leaked(run, data);
        assert!(leaked == 0, "{name}: this input leaks {leaked} bytes each time it runs");
    });
}
