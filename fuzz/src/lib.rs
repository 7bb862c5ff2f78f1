//! The fuzz targets: each takes any bytes and feeds them to one of hvsim's
//! parsers, which must answer with a value or an error and never panic,
//! hang or allocate without bound. `src/bin/afl.rs` runs them under AFL++
//! (`ci/fuzz.sh`); the tests below replay `corpus/` and `regressions/`.
//! The owning crates' unit tests replay the same files through the same
//! parser entry points, so the default test suite covers them too.

use std::path::Path;

use sha2::{Digest, Sha256};

mod extract;
mod hypercall;
mod image_text;
pub mod leaks;
mod tar_text;

/// A target: a name (its corpus directory's) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name.
pub const TARGETS: &[Target] = &[
    ("snapshot", snapshot),
    ("bug_record", bug_record),
    ("fault_plan", fault_plan),
    ("sdk", sdk),
    ("diff_log", diff_log),
    ("compose", compose),
    ("layer_path", layer_path),
    ("virtio", virtio),
    ("hypercall", hypercall::hypercall),
    ("layers", extract::layers),
    ("image", extract::image),
    ("history", history),
    ("txn_history", txn_history),
    ("registry", registry),
];

pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// A snapshot file, as it is (a checksum is hard to guess, so this mostly
/// reaches the length, magic and checksum checks), and with its SHA-256
/// appended (so mutations reach the header's JSON, the size checks and the
/// compressed memory). Corpus files are snapshots without their checksum.
pub fn snapshot(data: &[u8]) {
    let path = Path::new("fuzz.snap");
    let pages = |bytes: Vec<u8>| {
        if let Ok(loaded) = hvsim_snapshot::file::parse(bytes, path) {
            let _ = loaded.header.vtime();
            let _ = loaded.for_each_page(|_, page| assert_eq!(page.len(), hvsim_vmm::memory::PAGE_SIZE));
        }
    };
    // What `load` reads before the whole file: the announced lengths, at
    // this length and as if the file were a sparse terabyte.
    for len in [data.len() as u64, 1 << 40] {
        if let Ok(want) = hvsim_snapshot::file::announced(&mut std::io::Cursor::new(data), len, path) {
            assert_eq!(want, len, "a length is announced only when it is the file's");
        }
    }
    pages(data.to_vec());
    let mut sealed = data.to_vec();
    sealed.extend_from_slice(&Sha256::digest(data));
    pages(sealed);
}

/// A bug record file (JSON).
pub fn bug_record(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(record) = hvsim_explorer::bug::BugRecord::parse(text) {
        let _ = (record.bug.signature(), record.bug.describe(), record.reproduction_words());
        let _ = record.reproduction.verdict();
    }
}

/// A fault plan: byte 0 picks the seed, byte 1 the number of nodes (0 to
/// 16), the rest is the plan's TOML; parsed with unnamed nodes and with
/// named ones (a compose project's).
pub fn fault_plan(data: &[u8]) {
    use hvsim_vmm::faults::FaultPlan;
    let [seed, nodes, text @ ..] = data else { return };
    let Ok(text) = std::str::from_utf8(text) else { return };
    let seed = u64::from(*seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let nodes = u16::from(*nodes % 17);
    if let Ok(plan) = FaultPlan::parse(text, seed, nodes) {
        let _ = plan.configured();
    }
    let names: Vec<String> = (0..nodes)
        .map(|i| ["db", "web", "cache"].get(usize::from(i)).map_or(format!("n{i}"), |s| s.to_string()))
        .collect();
    if let Ok(plan) = FaultPlan::parse_named(text, seed, nodes, &names) {
        let _ = plan.configured();
    }
}

/// One line of the guest SDK's protocol.
pub fn sdk(data: &[u8]) {
    use hvsim_explorer::sdk::{self, SdkMessage};
    if let SdkMessage::Assert(a) = sdk::parse(data) {
        let _ = (a.kind.display(), a.kind.demand(), a.kind.failure_is_bug());
    }
}

/// Two determinism logs (`hvsim diff-log`): byte 0 is the context, the
/// rest is log A, a NUL byte, log B (no NUL: the halves). A log equals
/// itself; a divergence keeps at most `context` shared events.
pub fn diff_log(data: &[u8]) {
    use hvsim_vmm::trace::diff_logs;
    let [context, rest @ ..] = data else { return };
    let context = usize::from(*context % 16);
    let (a, b) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => rest.split_at(rest.len() / 2),
    };
    if let Ok(Some(d)) = diff_logs(a, b, context) {
        assert!(d.common.len() <= context, "{} shared events kept, context {context}", d.common.len());
        assert!(d.a.is_some() || d.b.is_some(), "a divergence where both logs ended");
        assert_ne!(d.a, d.b, "a divergence of equal events");
    }
    if let Ok(d) = diff_logs(a, a, context) {
        assert_eq!(d, None, "a log differs from itself");
    }
}

/// A compose file (YAML), parsed and checked as `compose::load` does.
pub fn compose(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new("/nonexistent/hvsim-fuzz/compose.yaml");
    if let Ok((project, _warnings)) = hvsim_guest_image::compose::parse_checked(text, path, &Default::default()) {
        let _ = project.node_names();
    }
}

/// A history (JSON lines) checked for linearizability, with a small step
/// limit: a verdict or a one-line error, the same verdict twice, and a
/// linearizable verdict counts every operation the history pairs.
pub fn history(data: &[u8]) {
    use hvsim_checkers::{check_text, history, Verdict, FUZZ_LIMITS};
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(verdict) = check_text(text, FUZZ_LIMITS) else { return };
    assert_eq!(check_text(text, FUZZ_LIMITS).ok(), Some(verdict.clone()), "the same history, another verdict");
    if let Verdict::Linearizable { operations, .. } = verdict {
        let ops = history::operations(&history::parse(text).expect("parsed once")).expect("paired once");
        assert_eq!(operations, ops.len());
    }
}

/// A history (JSON lines) checked as transactions of both models at every
/// consistency model, with a small step limit: a verdict or a one-line
/// error, and the same verdict twice (a timeline's check must be a
/// function of its history).
pub fn txn_history(data: &[u8]) {
    use hvsim_checkers::txn::{check_text, Consistency, TxnModel, TxnOptions, FUZZ_STEPS};
    let Ok(text) = std::str::from_utf8(data) else { return };
    for model in [TxnModel::ListAppend, TxnModel::RwRegister] {
        for c in Consistency::ALL {
            let options = TxnOptions { steps: FUZZ_STEPS, ..TxnOptions::new(c) };
            let Ok(v) = check_text(model, text, options) else { continue };
            let again = check_text(model, text, options).expect("checked once");
            assert_eq!(
                (v.verdict, &v.found, v.edges),
                (again.verdict, &again.found, again.edges),
                "the same history, another verdict"
            );
        }
    }
}

/// A path in an OCI layer's tar: cleaned to a relative path without `.`,
/// `..` or empty components, and cleaning it again changes nothing.
pub fn layer_path(data: &[u8]) {
    use hvsim_guest_image::oci::layers::clean;
    if let Ok(rel) = clean(data) {
        assert!(!rel.starts_with('/'), "{rel:?} is absolute");
        assert!(rel.is_empty() || rel.split('/').all(|c| !matches!(c, "" | "." | "..")), "{rel:?} is not clean");
        assert_eq!(clean(rel.as_bytes()).as_deref(), Ok(rel.as_str()), "cleaning {rel:?} again changes it");
    }
}

/// A registry's reply, through every parser its bytes reach
/// (`hvsim_guest_image::oci::distribution`): the first line as a
/// `WWW-Authenticate` header and as a content type, the rest as a token
/// service's answer, an error's body and a manifest or index.
pub fn registry(data: &[u8]) {
    hvsim_guest_image::oci::distribution::check_reply(data);
}

/// The virtio devices of a two-node machine under a hostile driver
/// (`hvsim_vmm::devices::virtio::hostile`): byte 0 places a snapshot's
/// round trip, the rest decode to the driver's operations.
pub fn virtio(data: &[u8]) {
    use hvsim_vmm::devices::virtio::hostile;
    // Made once per thread: it holds the benches' RAM, which two inputs
    // checked at once (the tests run in threads) must not share.
    thread_local! {
        static SETUP: hostile::Setup = hostile::Setup::new();
    }
    SETUP.with(|setup| hostile::check_bytes(setup, data));
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../inputs.rs");

    #[test]
    fn every_target_runs_its_corpus_and_regressions() {
        for (name, run) in TARGETS {
            let inputs = fuzz_inputs(name);
            assert!(!inputs.is_empty(), "no seed corpus for target {name}");
            for (f, data) in inputs {
                eprintln!("{name}: {}", f.display());
                run(&data);
            }
        }
    }

    #[test]
    fn every_target_takes_empty_and_short_inputs() {
        for (_, run) in TARGETS {
            for input in [&b""[..], b"\0", b"\xff\xff", b"{}", b"\n\n\n"] {
                run(input);
            }
        }
    }
}
