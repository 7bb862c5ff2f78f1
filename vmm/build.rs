//! Fingerprints the machine model: a hash of the source of the VMM, the
//! guest ABI and the snapshot format, and of the locked dependency versions.
//! Two builds with the same fingerprint run every guest the same way, so a
//! machine saved by one (the boot cache) can be restored by the other; a
//! build with any change to these sources never reuses what another saved.
//! (Compiler and optimisation level change nothing a guest can observe.)

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("..");
    let mut inputs = Vec::new();
    for dir in ["vmm/src", "abi/src", "snapshot/src"] {
        let dir = root.join(dir);
        println!("cargo:rerun-if-changed={}", dir.display());
        files(&dir, &mut inputs);
    }
    let lock = root.join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    inputs.push(lock);
    let mut h = Sha256::new();
    for path in &inputs {
        let rel = path.strip_prefix(&root).expect("under the workspace");
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        h.update((rel.as_os_str().len() as u64).to_le_bytes());
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    println!("cargo:rustc-env=HVSIM_MODEL_ID={}", hex::encode(&h.finalize()[..16]));
}
