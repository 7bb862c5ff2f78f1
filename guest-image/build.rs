//! Builds the guest's init statically, and libvoidstar (the SDK library the
//! Antithesis SDKs load, `guest-sdk/voidstar/`), and hands both to this
//! crate, which embeds them: `hvsim` then needs no separate file to boot a
//! Linux guest.
//!
//! The init is an ordinary workspace crate (guest-init/), compiled here a
//! second time by a nested cargo with `+crt-static` (glibc, no dynamic
//! loader: the initramfs holds no shared libraries) in its own target
//! directory, so it never contends with the outer build's locks or flags.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let init_dir = manifest_dir.join("../guest-init");
    println!("cargo:rerun-if-changed={}", init_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", init_dir.join("Cargo.toml").display());
    // Init is built with the ABI crate: a change there is a change of init.
    println!("cargo:rerun-if-changed={}", manifest_dir.join("../abi/src").display());
    println!("cargo:rerun-if-changed={}", manifest_dir.join("../abi/Cargo.toml").display());

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let target_dir = out_dir.join("guest-init-target");
    let target = "x86_64-unknown-linux-gnu";
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--offline", "--bin", "hvsim-init"])
        .arg("--manifest-path")
        .arg(init_dir.join("Cargo.toml"))
        .args(["--target", target])
        .arg("--target-dir")
        .arg(&target_dir)
        .args(["--config", "profile.release.opt-level=\"s\""])
        .args(["--config", "profile.release.strip=true"])
        .args(["--config", "profile.release.panic=\"abort\""])
        .args(["--config", "profile.release.lto=true"])
        // Flags of the outer build must not leak into the nested one.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_PROFILE_RELEASE_DEBUG")
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    let status = cmd.status().expect("cannot run cargo for the guest init");
    assert!(status.success(), "building the static guest init failed: {status}");

    let built = target_dir.join(target).join("release").join("hvsim-init");
    std::fs::copy(&built, out_dir.join("hvsim-init"))
        .unwrap_or_else(|e| panic!("cannot copy {}: {e}", built.display()));

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
