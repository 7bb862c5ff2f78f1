//! hvsim's guest kernel: Debian's `linux-source-6.1` + `make tinyconfig` +
//! the project's config fragment and patches, built once per machine and
//! cached under the hash of everything that goes into it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use indicatif::ProgressStyle;
use sha2::{Digest, Sha256};

use crate::cache;
use crate::error::{io, ImageError, Result};
use crate::hash::file_hash;

use super::packages;

pub const CONFIG_FRAGMENT: &str = include_str!("../../kernel/config.fragment");

/// The patch set, applied in order (see docs/guest-kernel.md).
pub const PATCHES: &[(&str, &str)] = &[
    ("0001-x86-hvsim-guest-support.patch", include_str!("../../kernel/patches/0001-x86-hvsim-guest-support.patch")),
    (
        "0002-random-under-hvsim-entropy-comes-only-from-the-VMM.patch",
        include_str!("../../kernel/patches/0002-random-under-hvsim-entropy-comes-only-from-the-VMM.patch"),
    ),
    (
        "0003-x86-workarounds-for-nested-kvm_pvm-hosts-each-behind.patch",
        include_str!("../../kernel/patches/0003-x86-workarounds-for-nested-kvm_pvm-hosts-each-behind.patch"),
    ),
    (
        "0004-x86-hvsim-publish-the-running-task-for-the-profiler.patch",
        include_str!("../../kernel/patches/0004-x86-hvsim-publish-the-running-task-for-the-profiler.patch"),
    ),
    (
        "0005-x86-hvsim-a-clock-the-vdso-reads-without-exiting.patch",
        include_str!("../../kernel/patches/0005-x86-hvsim-a-clock-the-vdso-reads-without-exiting.patch"),
    ),
    (
        "0006-time-namespace-a-realtime-offset-that-may-change.patch",
        include_str!("../../kernel/patches/0006-time-namespace-a-realtime-offset-that-may-change.patch"),
    ),
    (
        "0007-x86-hvsim-a-question-and-its-answer-in-one-exchange.patch",
        include_str!("../../kernel/patches/0007-x86-hvsim-a-question-and-its-answer-in-one-exchange.patch"),
    ),
    (
        "0008-x86-a-32-KiB-kernel-command-line.patch",
        include_str!("../../kernel/patches/0008-x86-a-32-KiB-kernel-command-line.patch"),
    ),
];

const SOURCE_PACKAGE: &str = "linux-source-6.1";
const SOURCE_TARBALL: &str = "/usr/src/linux-source-6.1.tar.xz";
/// The kernel sources this hvsim was checked with: Debian's
/// `linux-source-6.1` versions and the SHA-256 of their tarballs. A tarball
/// of a listed version with another hash is refused. Debian's security
/// archive replaces a version when the next one comes out, so a version not
/// listed is built with a warning: its kernel differs from other machines'
/// builds, and bug records from those machines refuse to replay on it (the
/// kernel is part of their world). Add a version here once its build has
/// been checked (docs/guest-kernel.md, "Reproducible").
pub const PINNED_SOURCES: &[(&str, &str)] = &[
    ("6.1.192-2", "4d415b3d364834fd818270e88813e90323bbfce4f519a0e6bd4940ddcd7df693"),
    ("6.1.192-3", "cacdc3830989309d042083be3307969e55600ed7f908cf00df544c5ff50759a1"),
];
/// Everything the build runs, plus busybox-static for the initramfs.
pub const PACKAGES: &[&str] = &[
    SOURCE_PACKAGE,
    "bc",
    "bison",
    "flex",
    "libelf-dev",
    "libssl-dev",
    "make",
    "gcc",
    "patch",
    "xz-utils",
    "busybox-static",
];
/// Bump when the build procedure changes its output.
const RECIPE: &str = "hvsim-kernel-recipe-2";
/// Build steps `make vmlinux` prints for this configuration (for progress).
const EXPECTED_BUILD_STEPS: u64 = 1450;

/// A built guest kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub vmlinux: PathBuf,
    /// Hash of the build's inputs (names the cache entry).
    pub key: String,
}

fn key(source_version: &str) -> String {
    let mut h = Sha256::new();
    for part in [RECIPE, source_version, CONFIG_FRAGMENT] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    for (name, patch) in PATCHES {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name);
        h.update((patch.len() as u64).to_le_bytes());
        h.update(patch);
    }
    hex::encode(h.finalize())
}

/// The installed source's version and the key its build is cached under,
/// built or not (for `hvsim kernel path --json`); None without the source.
pub fn expected() -> Option<(String, String)> {
    let version = packages::version(SOURCE_PACKAGE)?;
    let key = key(&version);
    Some((version, key))
}

/// The cached kernel for the current inputs, if it has been built.
pub fn cached() -> Option<Kernel> {
    let (_, key) = expected()?;
    let vmlinux = cache::dir().join("kernel").join(&key[..16]).join("vmlinux");
    vmlinux.exists().then_some(Kernel { vmlinux, key })
}

/// Builds the kernel unless it is cached; installs what the build needs.
/// Shows progress on stderr. Safe to run concurrently: one process builds,
/// the others wait for it.
pub fn ensure_built() -> Result<Kernel> {
    if let Some(k) = cached() {
        return Ok(k);
    }
    packages::ensure(PACKAGES)?;
    let version = packages::version(SOURCE_PACKAGE)
        .ok_or_else(|| ImageError::Setup(format!("{SOURCE_PACKAGE} is not installed")))?;
    let key = key(&version);
    let root = cache::dir().join("kernel");
    let _lock = cache::Lock::acquire(&root.join(".lock"))?;
    check_source(&version, Path::new(SOURCE_TARBALL))?;
    let out_dir = root.join(&key[..16]);
    let vmlinux = out_dir.join("vmlinux");
    if vmlinux.exists() {
        return Ok(Kernel { vmlinux, key });
    }
    let start = Instant::now();
    crate::note!("hvsim: building the guest kernel ({SOURCE_PACKAGE} {version}, key {})", &key[..16]);
    let work = root.join(format!("build-{}", &key[..16]));
    if work.exists() {
        std::fs::remove_dir_all(&work).map_err(io("removing an old build tree", &work))?;
    }
    std::fs::create_dir_all(&work).map_err(io("creating the build tree", &work))?;
    let log_path = root.join(format!("build-{}.log", &key[..16]));
    let mut log = File::create(&log_path).map_err(io("creating the build log", &log_path))?;

    step("unpacking the kernel source");
    run(
        &mut log,
        &log_path,
        "unpacking",
        Command::new("tar").args(["-xf", SOURCE_TARBALL, "--strip-components=1", "-C"]).arg(&work),
    )?;

    step("applying the patch set");
    for (name, patch) in PATCHES {
        let path = root.join(format!("build-{}.{name}", &key[..16]));
        std::fs::write(&path, patch).map_err(io("writing a patch", &path))?;
        let applied = run(
            &mut log,
            &log_path,
            &format!("applying {name}"),
            Command::new("patch").args(["-p1", "--forward", "--batch", "-i"]).arg(&path).current_dir(&work),
        );
        let _ = std::fs::remove_file(&path);
        applied?;
    }

    step("configuring (tinyconfig + fragment)");
    run(&mut log, &log_path, "make tinyconfig", make().arg("tinyconfig").current_dir(&work))?;
    let fragment = work.join("hvsim.config");
    std::fs::write(&fragment, CONFIG_FRAGMENT).map_err(io("writing the config fragment", &fragment))?;
    run(
        &mut log,
        &log_path,
        "merging the config fragment",
        Command::new("scripts/kconfig/merge_config.sh").args(["-m", ".config", "hvsim.config"]).current_dir(&work),
    )?;
    run(&mut log, &log_path, "make olddefconfig", make().arg("olddefconfig").current_dir(&work))?;
    let config_path = work.join(".config");
    let config = std::fs::read_to_string(&config_path).map_err(io("reading the kernel config", &config_path))?;
    check_config(&config, CONFIG_FRAGMENT)?;

    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    step(&format!("compiling vmlinux with {jobs} jobs (a few minutes)"));
    compile(&mut log, &log_path, &work, jobs)?;

    std::fs::create_dir_all(&out_dir).map_err(io("creating the kernel cache entry", &out_dir))?;
    let tmp = out_dir.join("vmlinux.partial");
    std::fs::copy(work.join("vmlinux"), &tmp).map_err(io("copying vmlinux into the cache", &tmp))?;
    std::fs::write(out_dir.join("config"), &config).map_err(io("saving the kernel config", &out_dir))?;
    std::fs::rename(&tmp, &vmlinux).map_err(io("publishing vmlinux", &vmlinux))?;
    std::fs::remove_dir_all(&work).map_err(io("removing the build tree", &work))?;
    crate::note!("hvsim: guest kernel built in {:.0?}: {}", start.elapsed(), vmlinux.display());
    Ok(Kernel { vmlinux, key })
}

/// Refuses a source tarball whose hash is not the one pinned for its
/// version; warns about a version not pinned at all.
fn check_source(version: &str, tarball: &Path) -> Result<()> {
    let pinned = PINNED_SOURCES.iter().find(|(v, _)| *v == version).map(|(_, h)| *h);
    let actual = file_hash(tarball)?;
    match pinned {
        Some(expected) if expected == actual => Ok(()),
        Some(expected) => Err(ImageError::Setup(format!(
            "the kernel source {} ({SOURCE_PACKAGE} {version}) has SHA-256 {actual}, not the pinned {expected}: \
             refusing to build from it",
            tarball.display()
        ))),
        None => {
            eprintln!(
                "hvsim: warning: {SOURCE_PACKAGE} {version} is not a pinned kernel source (pinned: {}); building \
                 anyway, but this kernel will differ from other machines' and their bug records will not replay here",
                PINNED_SOURCES.iter().map(|(v, _)| *v).collect::<Vec<_>>().join(", ")
            );
            Ok(())
        }
    }
}

/// The kernel source the build uses: the installed `linux-source-6.1`
/// version and its tarball's SHA-256, and whether that pair is pinned.
pub fn source() -> Result<(String, String, bool)> {
    let version = packages::version(SOURCE_PACKAGE)
        .ok_or_else(|| ImageError::Setup(format!("{SOURCE_PACKAGE} is not installed")))?;
    let hash = file_hash(Path::new(SOURCE_TARBALL))?;
    let pinned = PINNED_SOURCES.contains(&(version.as_str(), hash.as_str()));
    Ok((version, hash, pinned))
}

/// `make` with the build's identity fixed: the kernel's version string
/// (`uname -v`) is then the same on every machine.
fn make() -> Command {
    let mut c = Command::new("make");
    c.env("KBUILD_BUILD_TIMESTAMP", "Thu Jan  1 00:00:00 UTC 2026")
        .env("KBUILD_BUILD_USER", "hvsim")
        .env("KBUILD_BUILD_HOST", "hvsim")
        .env("KBUILD_BUILD_VERSION", "1");
    c
}

fn step(what: &str) {
    crate::note!("hvsim: kernel: {what}");
}

/// Runs `cmd` with its output appended to the build log.
fn run(log: &mut File, log_path: &Path, what: &str, cmd: &mut Command) -> Result<()> {
    let out = log.try_clone().map_err(io("duplicating the log", log_path))?;
    let err = log.try_clone().map_err(io("duplicating the log", log_path))?;
    let _ = writeln!(log, "### {what}");
    let status =
        cmd.stdout(out).stderr(err).status().map_err(|e| ImageError::Setup(format!("cannot run {what}: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(command_failed(what, &status.to_string(), log_path))
    }
}

fn command_failed(what: &str, status: &str, log_path: &Path) -> ImageError {
    let text = std::fs::read_to_string(log_path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(15)..].join("\n");
    ImageError::Command { what: what.to_owned(), status: status.to_owned(), log: log_path.to_owned(), tail }
}

/// `make vmlinux`, counting build steps for the progress bar.
fn compile(log: &mut File, log_path: &Path, work: &Path, jobs: usize) -> Result<()> {
    let err = log.try_clone().map_err(io("duplicating the log", log_path))?;
    let mut child = make()
        .arg(format!("-j{jobs}"))
        .arg("vmlinux")
        .current_dir(work)
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| ImageError::Setup(format!("cannot run make: {e}")))?;
    let bar = crate::progress::bar(EXPECTED_BUILD_STEPS);
    bar.set_style(
        ProgressStyle::with_template("hvsim: kernel: [{elapsed_precise}] {bar:40} {pos}/~{len} {msg}")
            .expect("valid template"),
    );
    let stdout = child.stdout.take().expect("piped");
    let mut steps = 0u64;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(log, "{line}");
        if line.starts_with("  ") {
            steps += 1;
            bar.set_position(steps.min(EXPECTED_BUILD_STEPS));
            bar.set_message(line.split_whitespace().last().unwrap_or("").to_owned());
        }
    }
    bar.finish_and_clear();
    let status = child.wait().map_err(|e| ImageError::Setup(format!("waiting for make: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(command_failed("make vmlinux", &status.to_string(), log_path))
    }
}

/// Fails if any option the fragment sets did not end up in the config:
/// Kconfig silently drops options whose dependencies are missing.
pub fn check_config(config: &str, fragment: &str) -> Result<()> {
    let mut values: BTreeMap<&str, &str> = BTreeMap::new();
    for line in config.lines() {
        if let Some((k, v)) = line.split_once('=') {
            if k.starts_with("CONFIG_") {
                values.insert(k, v);
            }
        }
    }
    let mut wrong = Vec::new();
    for line in fragment.lines().map(str::trim) {
        if let Some((k, v)) = line.split_once('=') {
            if values.get(k) != Some(&v) {
                wrong.push(format!("{k}={v} (got {})", values.get(k).unwrap_or(&"unset")));
            }
        } else if let Some(k) = line.strip_prefix("# ").and_then(|l| l.strip_suffix(" is not set")) {
            if let Some(v) = values.get(k) {
                wrong.push(format!("{k} should be unset (got {v})"));
            }
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(ImageError::Setup(format!("the kernel config did not take: {}", wrong.join("; "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_check_catches_dropped_options() {
        let fragment = "CONFIG_A=y\n# CONFIG_B is not set\n";
        assert!(check_config("CONFIG_A=y\n# CONFIG_B is not set\n", fragment).is_ok());
        let e = check_config("CONFIG_B=y\n", fragment).unwrap_err().to_string();
        assert!(e.contains("CONFIG_A=y (got unset)") && e.contains("CONFIG_B should be unset"), "{e}");
    }

    #[test]
    fn key_covers_inputs() {
        assert_ne!(key("6.1.1"), key("6.1.2"));
        assert_eq!(key("6.1.1"), key("6.1.1"));
    }

    #[test]
    fn a_source_with_another_hash_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let tarball = dir.path().join("linux-source-6.1.tar.xz");
        std::fs::write(&tarball, b"not the kernel").unwrap();
        let (version, _) = PINNED_SOURCES[0];
        let e = check_source(version, &tarball).unwrap_err().to_string();
        assert!(e.contains("not the pinned") && e.contains(version), "{e}");
        // A version nobody pinned builds, with a warning.
        assert!(check_source("6.1.999-1", &tarball).is_ok());
    }

    #[test]
    fn patches_are_well_formed() {
        for (name, patch) in PATCHES {
            assert!(patch.contains("\n--- a/") && patch.contains("\n+++ b/"), "{name}");
        }
    }
}
