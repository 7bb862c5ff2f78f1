// The inputs of a fuzz target: its seed corpus and the inputs of crashes it
// found (fuzz/, docs/fuzzing.md). One copy for every crate's corpus-replay
// test, included with
// `include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));`
// (every crate sits beside fuzz/, and fuzz/.. is the workspace too).

/// Each file of `fuzz/corpus/NAME/` and `fuzz/regressions/NAME/`, in order,
/// with its bytes.
#[allow(dead_code)]
fn fuzz_inputs(name: &str) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let fuzz = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files: Vec<std::path::PathBuf> = ["corpus", "regressions"]
        .iter()
        .filter_map(|d| std::fs::read_dir(fuzz.join(d).join(name)).ok())
        .flatten()
        .map(|e| e.expect("a directory entry").path())
        .collect();
    files.sort();
    files.into_iter().map(|f| (f.clone(), std::fs::read(&f).expect("a fuzz input"))).collect()
}
