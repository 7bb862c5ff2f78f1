//! Container images made from Debian's packages with `mmdebstrap`: real
//! images without a registry. The test suite's images are made this way
//! (a Debian bookworm with `redis-server` and `redis-tools`), and
//! `hvsim image debian` makes them for anyone.
//!
//! The root file system becomes one layer, packed by `pack` as a
//! docker-archive (what `docker save` writes) and as an OCI layout (what
//! registries and `skopeo` use), so that both paths of `load` see real
//! images. Built once per recipe, cached outside the repository.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use sha2::{Digest as _, Sha256};

use super::pack::{Format, Pack, PackLayer, RunConfig};
use super::Compression;
use crate::cache::{self, Lock};
use crate::error::{io, ImageError, Result};
use crate::linux::packages;

/// Bumped when the way images are made changes.
const RECIPE: &str = "hvsim-debian-image-1";
const MIRROR: &str = "http://deb.debian.org/debian";
/// File times in the image (mmdebstrap clamps to it): fixed, so one
/// recipe gives one image while Debian's packages stay the same.
const SOURCE_DATE_EPOCH: &str = "1700000000";

#[derive(Clone, Debug)]
pub struct DebianImage {
    /// The image's name (`RepoTags`).
    pub name: String,
    pub suite: String,
    pub packages: Vec<String>,
    pub run: RunConfig,
}

/// Where a built image is, in both formats.
#[derive(Clone, Debug)]
pub struct Built {
    pub archive: PathBuf,
    pub layout: PathBuf,
    /// False if it came from the cache.
    pub built: bool,
}

impl DebianImage {
    fn key(&self) -> String {
        let mut h = Sha256::new();
        for part in [RECIPE, &self.name, &self.suite, &self.packages.join(","), &format!("{:?}", self.run)] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        hex::encode(&h.finalize()[..8])
    }

    /// Builds the image unless the cache has it.
    pub fn build(&self) -> Result<Built> {
        let dir = cache::dir().join("debian-images").join(self.key());
        let archive = dir.join("docker-archive.tar");
        let layout = dir.join("oci");
        let _lock = Lock::acquire(&dir.with_extension("lock"))?;
        if archive.exists() && layout.join("index.json").exists() {
            return Ok(Built { archive, layout, built: false });
        }
        packages::ensure(&["mmdebstrap"])?;
        std::fs::create_dir_all(&dir).map_err(io("creating the image cache", &dir))?;
        let work = tempfile::tempdir_in(&dir).map_err(io("creating a scratch directory", &dir))?;
        let tar = work.path().join("rootfs.tar");
        let spinner = indicatif::ProgressBar::new_spinner();
        spinner.set_style(
            indicatif::ProgressStyle::with_template("hvsim: building image {msg} from Debian packages [{elapsed}] {spinner}")
                .expect("static template"),
        );
        spinner.set_message(self.name.clone());
        spinner.enable_steady_tick(std::time::Duration::from_millis(200));
        let mut cmd = Command::new("mmdebstrap");
        cmd.args(["--quiet", "--variant=minbase", "--format=tar"])
            .arg(format!("--include={}", self.packages.join(",")))
            // What a container does not need; Debian's slim images drop it too.
            .args(["doc", "man", "locale", "info"].map(|d| format!("--dpkgopt=path-exclude=/usr/share/{d}/*")))
            .arg(&self.suite)
            .arg(&tar)
            .arg(MIRROR)
            .env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
            .stdin(Stdio::null());
        let out = cmd.output().map_err(|e| ImageError::Setup(format!("cannot run mmdebstrap: {e}")))?;
        spinner.finish_and_clear();
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
            return Err(ImageError::Setup(format!("mmdebstrap {} failed ({}): {last}", self.suite, out.status)));
        }
        let bytes = std::fs::read(&tar).map_err(io("reading mmdebstrap's output", &tar))?;
        let plain = Pack::new(&self.run, vec![PackLayer::new(&bytes, Compression::None)], Some(&self.name));
        let tmp_archive = work.path().join("docker-archive.tar");
        plain.write(Format::DockerOci, &tmp_archive)?;
        let gzipped = Pack::new(&self.run, vec![PackLayer::new(&bytes, Compression::Gzip)], Some(&self.name));
        let tmp_layout = work.path().join("oci");
        gzipped.write(Format::OciDir, &tmp_layout)?;
        // The layout first: the archive's presence says both are there.
        let _ = std::fs::remove_dir_all(&layout);
        std::fs::rename(&tmp_layout, &layout).map_err(io("storing an image", &layout))?;
        std::fs::rename(&tmp_archive, &archive).map_err(io("storing an image", &archive))?;
        Ok(Built { archive, layout, built: true })
    }
}

/// The test suite's Redis image: Debian bookworm with `redis-server` and
/// `redis-tools`, whose command is `redis-server`.
pub fn redis() -> DebianImage {
    DebianImage {
        name: "hvsim-test/redis:bookworm".into(),
        suite: "bookworm".into(),
        packages: vec!["redis-server".into(), "redis-tools".into()],
        run: RunConfig {
            cmd: Some(vec!["redis-server".into(), "--protected-mode".into(), "no".into()]),
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            exposed_ports: vec!["6379/tcp".into()],
            ..RunConfig::default()
        },
    }
}
