//! Links hvsim's libvoidstar into the program for its SanitizerCoverage
//! callbacks: a static program cannot take them from the shared library
//! at link time (the SDK itself still finds /usr/lib/libvoidstar.so).

fn main() {
    // At run time, not env!(): a build script compiled for one checkout may
    // be reused from a shared target directory by another.
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let src = std::path::Path::new(&dir).join("../../voidstar/voidstar.c");
    println!("cargo:rerun-if-changed={}", src.display());
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("voidstar.o");
    let status = std::process::Command::new("gcc")
        .args(["-c", "-fPIC", "-ffreestanding", "-fvisibility=hidden", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "compiling voidstar.c failed");
    println!("cargo:rustc-link-arg={}", out.display());
}
