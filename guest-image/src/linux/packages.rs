//! Debian packages the guest build needs, installed on demand (idempotent).

use std::process::{Command, Stdio};

use crate::cache;
use crate::error::{ImageError, Result};

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "install ok installed")
}

/// Installed version of `package`, if any.
pub fn version(package: &str) -> Option<String> {
    let o = Command::new("dpkg-query").args(["-W", "-f=${Version}", package]).output().ok()?;
    let v = String::from_utf8_lossy(&o.stdout).trim().to_owned();
    (o.status.success() && !v.is_empty()).then_some(v)
}

/// Makes sure every package is installed, running apt-get for the missing
/// ones (which needs root). A no-op when all are present. Installs are
/// serialized (on a fresh machine the kernel build and the image builds of
/// parallel tests each install packages, and dpkg allows one at a time).
pub fn ensure(packages: &[&str]) -> Result<()> {
    let missing = |packages: &[&str]| -> Vec<String> {
        packages.iter().filter(|p| !installed(p)).map(|p| (*p).to_owned()).collect()
    };
    if missing(packages).is_empty() {
        return Ok(());
    }
    let _lock = cache::Lock::acquire(&cache::dir().join(".apt.lock"))?;
    // Another process may have installed them while this one waited.
    let missing = missing(packages);
    if missing.is_empty() {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(ImageError::Setup(format!(
            "missing Debian packages: {} (install them, or run hvsim as root to let it)",
            missing.join(" ")
        )));
    }
    crate::note!("hvsim: installing Debian packages: {}", missing.join(" "));
    let apt = |args: &[&str]| -> Result<()> {
        // dpkg's own lock may still be held by something outside hvsim.
        let status = Command::new("apt-get")
            .args(["-o", "DPkg::Lock::Timeout=600"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .map_err(|e| ImageError::Setup(format!("cannot run apt-get: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(ImageError::Setup(format!("apt-get {} failed ({status})", args.join(" "))))
        }
    };
    apt(&["update", "-qq"])?;
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend(missing.iter().map(String::as_str));
    apt(&install)?;
    match missing.iter().find(|p| !installed(p)) {
        Some(p) => Err(ImageError::Setup(format!("apt-get did not install {p}"))),
        None => Ok(()),
    }
}
