//! Builds the guest's init statically, and libvoidstar (the SDK library the
//! Antithesis SDKs load, `guest-sdk/voidstar/`), and hands both to this
//! crate, which embeds them: `hvsim` then needs no separate file to boot a
//! Linux guest.
//!
//! The init is an ordinary workspace crate (guest-init/), compiled here a
//! second time by a nested cargo with `+crt-static` (glibc, no dynamic
//! loader: the initramfs holds no shared libraries) in a target directory
//! of its own, so it never contends with the outer build's locks or flags.
//! The binary is kept by a hash of everything it is built from (its
//! sources, the ABI crate's, the lock file, this script, the compiler):
//! every profile, every `cargo clippy`, and every clone of the repository
//! that shares a target directory (CI's, outside the clone) takes the one
//! build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let init_dir = manifest_dir.join("../guest-init");
    println!("cargo:rerun-if-changed={}", init_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", init_dir.join("Cargo.toml").display());
    // Init is built with the ABI crate: a change there is a change of init.
    println!("cargo:rerun-if-changed={}", manifest_dir.join("../abi/src").display());
    println!("cargo:rerun-if-changed={}", manifest_dir.join("../abi/Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", manifest_dir.join("../Cargo.lock").display());

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // OUT_DIR is TARGET/PROFILE/build/PACKAGE-HASH/out: the init's home is
    // beside the profiles, shared by all of them.
    let home = out_dir.ancestors().nth(4).expect("OUT_DIR lies four levels inside the target directory");
    let home = home.join("hvsim-guest-init");
    let key = source_key(&manifest_dir.join(".."), &env::var("RUSTC").unwrap_or_else(|_| "rustc".into()));
    let cached = home.join("by-source").join(&key).join("hvsim-init");
    if !cached.exists() {
        let built = build_init(&cargo, &init_dir, &home.join("target"));
        let dir = cached.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        // Written beside, then renamed: a build interrupted halfway leaves
        // no binary under the key.
        let partial = dir.join(format!("hvsim-init.{}.partial", std::process::id()));
        std::fs::copy(&built, &partial).unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));
        std::fs::rename(&partial, &cached).unwrap_or_else(|e| panic!("cannot rename {}: {e}", partial.display()));
    }
    std::fs::copy(&cached, out_dir.join("hvsim-init"))
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", cached.display()));

    // libvoidstar: no C library, so it loads into any program.
    let voidstar = manifest_dir.join("../guest-sdk/voidstar/voidstar.c");
    println!("cargo:rerun-if-changed={}", voidstar.display());
    let status = Command::new(env::var("CC").unwrap_or_else(|_| "gcc".into()))
        .args([
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-ffreestanding",
            "-fvisibility=hidden",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .args(["-Wl,--build-id=none", "-Wl,-soname,libvoidstar.so", "-o"])
        .arg(out_dir.join("libvoidstar.so"))
        .arg(&voidstar)
        .status()
        .expect("cannot run gcc for libvoidstar");
    assert!(status.success(), "building libvoidstar failed: {status}");
}

/// Builds the static init with a nested cargo; the binary's path.
fn build_init(cargo: &str, init_dir: &Path, target_dir: &Path) -> PathBuf {
    let target = "x86_64-unknown-linux-gnu";
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--offline", "--bin", "hvsim-init"])
        .arg("--manifest-path")
        .arg(init_dir.join("Cargo.toml"))
        .args(["--target", target])
        .arg("--target-dir")
        .arg(target_dir)
        .args(["--config", "profile.release.opt-level=\"s\""])
        .args(["--config", "profile.release.strip=true"])
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["--config", "profile.release.lto=true"])
        // Flags of the outer build must not leak into the nested one, nor
        // its wrappers (`cargo clippy` runs this script with clippy-driver
        // as the workspace's compiler): the init must be the same bytes
        // whichever command built it first.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("CLIPPY_ARGS")
        .env_remove("CLIPPY_CONF_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    let status = cmd.status().expect("cannot run cargo for the guest init");
    assert!(status.success(), "building the static guest init failed: {status}");
    target_dir.join(target).join("release").join("hvsim-init")
}

/// A hash of what the init is built from: the files of guest-init and abi
/// (paths relative to the workspace, so the clone's path does not count),
/// the workspace's lock file, this script, and the compiler's version.
fn source_key(workspace: &Path, rustc: &str) -> String {
    let mut files = Vec::new();
    for dir in ["guest-init", "abi"] {
        collect(workspace, &workspace.join(dir), &mut files);
    }
    // The recipe too: a change to how the init is built is a new init.
    files.push(PathBuf::from("Cargo.lock"));
    files.push(PathBuf::from("guest-image/build.rs"));
    files.sort();
    let mut h = Sha256::new();
    for f in &files {
        let bytes = std::fs::read(workspace.join(f)).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        h.update(f.to_string_lossy().as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    let version = Command::new(rustc).arg("-vV").output().expect("cannot run rustc -vV");
    assert!(version.status.success(), "rustc -vV failed");
    h.update(&version.stdout);
    hex::encode(h.finalize())
}

/// Every file under `dir` but build output, as paths relative to `root`.
fn collect(root: &Path, dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.file_name().is_some_and(|n| n == "target") {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else {
            files.push(path.strip_prefix(root).expect("under the workspace").to_owned());
        }
    }
}
