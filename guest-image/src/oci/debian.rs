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
const RECIPE: &str = "hvsim-debian-image-2";
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
    /// Python packages from PyPI (pinned, `name==version`), pure wheels,
    /// installed into /usr/lib/python3/dist-packages by a second layer.
    pub pip: Vec<String>,
    /// Files (path in the image, mode, contents) in that second layer.
    pub files: Vec<crate::linux::RunFile>,
    /// Shell commands run once the packages are installed, with the root
    /// as `$1` (mmdebstrap's customize hooks): configuration a package's
    /// own set-up must see, such as how a database's files are made.
    pub customize: Vec<String>,
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
        for part in
            [RECIPE, &self.name, &self.suite, &self.packages.join(","), &self.pip.join(","), &format!("{:?}", self.run)]
        {
            h.update(part.as_bytes());
            h.update([0]);
        }
        for hook in &self.customize {
            h.update(hook.as_bytes());
            h.update([0]);
        }
        for (path, mode, data) in &self.files {
            h.update(path.as_bytes());
            h.update(mode.to_le_bytes());
            h.update(Sha256::digest(data));
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
        let spinner = crate::progress::spinner();
        spinner.set_style(
            indicatif::ProgressStyle::with_template(
                "hvsim: building image {msg} from Debian packages [{elapsed}] {spinner}",
            )
            .expect("static template"),
        );
        spinner.set_message(self.name.clone());
        spinner.enable_steady_tick(std::time::Duration::from_millis(200));
        let mut cmd = Command::new("mmdebstrap");
        cmd.args(["--quiet", "--variant=minbase", "--format=tar"])
            .arg(format!("--include={}", self.packages.join(",")))
            // What a container does not need; Debian's slim images drop it too.
            .args(["doc", "man", "locale", "info"].map(|d| format!("--dpkgopt=path-exclude=/usr/share/{d}/*")))
            .args(self.customize.iter().map(|c| format!("--customize-hook={c}")))
            .arg(&self.suite)
            .arg(&tar)
            .arg(MIRROR)
            .env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)
            .stdin(Stdio::null());
        let out = cmd.output().map_err(|e| ImageError::Setup(format!("cannot run mmdebstrap: {e}")))?;
        spinner.finish_and_clear();
        if !out.status.success() {
            // mmdebstrap's own last line ("E: mmdebstrap failed to run")
            // says nothing; the one before it says what failed.
            let err = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
            let last = match lines.len() {
                0 => "no message".to_owned(),
                n => lines[n.saturating_sub(2)..].join(" / "),
            };
            return Err(ImageError::Setup(format!("mmdebstrap {} failed ({}): {last}", self.suite, out.status)));
        }
        let mut tars = vec![std::fs::read(&tar).map_err(io("reading mmdebstrap's output", &tar))?];
        if !self.pip.is_empty() || !self.files.is_empty() {
            tars.push(self.extra_layer(work.path())?);
        }
        let layers = |c| tars.iter().map(|t| PackLayer::new(t, c)).collect();
        let plain = Pack::new(&self.run, layers(Compression::None), Some(&self.name));
        let tmp_archive = work.path().join("docker-archive.tar");
        plain.write(Format::DockerOci, &tmp_archive)?;
        let gzipped = Pack::new(&self.run, layers(Compression::Gzip), Some(&self.name));
        let tmp_layout = work.path().join("oci");
        gzipped.write(Format::OciDir, &tmp_layout)?;
        // The layout first: the archive's presence says both are there.
        let _ = std::fs::remove_dir_all(&layout);
        std::fs::rename(&tmp_layout, &layout).map_err(io("storing an image", &layout))?;
        std::fs::rename(&tmp_archive, &archive).map_err(io("storing an image", &archive))?;
        Ok(Built { archive, layout, built: true })
    }
}

impl DebianImage {
    /// The second layer: the Python wheels, unpacked where Debian's python3
    /// finds them, and the files. Entries sorted, times and owners fixed.
    fn extra_layer(&self, work: &std::path::Path) -> Result<Vec<u8>> {
        let mut entries: std::collections::BTreeMap<String, (u32, Vec<u8>)> = std::collections::BTreeMap::new();
        if !self.pip.is_empty() {
            let dest = work.join("wheels");
            let out = Command::new("python3")
                .args(["-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "--dest"])
                .arg(&dest)
                .args(&self.pip)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| ImageError::Setup(format!("cannot run python3 -m pip: {e}")))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
                return Err(ImageError::Setup(format!("pip download {} failed: {last}", self.pip.join(" "))));
            }
            let mut wheels: Vec<_> = std::fs::read_dir(&dest)
                .map_err(io("reading downloaded wheels", &dest))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            wheels.sort();
            for wheel in wheels {
                let file = std::fs::File::open(&wheel).map_err(io("reading a wheel", &wheel))?;
                let mut zip =
                    zip::ZipArchive::new(file).map_err(|e| ImageError::Setup(format!("{}: {e}", wheel.display())))?;
                for i in 0..zip.len() {
                    let mut f = zip.by_index(i).map_err(|e| ImageError::Setup(format!("{}: {e}", wheel.display())))?;
                    let Some(name) = f.enclosed_name() else {
                        return Err(ImageError::Setup(format!(
                            "{}: entry {:?} leaves the wheel",
                            wheel.display(),
                            f.name()
                        )));
                    };
                    if f.is_dir() {
                        continue;
                    }
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut data).map_err(io("reading a wheel", &wheel))?;
                    entries.insert(format!("usr/lib/python3/dist-packages/{}", name.display()), (0o644, data));
                }
            }
        }
        for (path, mode, data) in &self.files {
            entries.insert(path.trim_start_matches('/').to_owned(), (*mode, data.clone()));
        }
        let mut b = tar::Builder::new(Vec::new());
        let mut dirs = std::collections::BTreeSet::new();
        for path in entries.keys() {
            let mut p = std::path::Path::new(path).parent();
            while let Some(d) = p.filter(|d| !d.as_os_str().is_empty()) {
                dirs.insert(d.display().to_string());
                p = d.parent();
            }
        }
        let header = |kind, mode, size| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(size);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(SOURCE_DATE_EPOCH.parse().expect("a number"));
            h
        };
        for d in &dirs {
            let mut h = header(tar::EntryType::Directory, 0o755, 0);
            b.append_data(&mut h, format!("{d}/"), std::io::empty()).map_err(io("packing a layer", work))?;
        }
        for (path, (mode, data)) in &entries {
            let mut h = header(tar::EntryType::Regular, *mode, data.len() as u64);
            b.append_data(&mut h, path, &data[..]).map_err(io("packing a layer", work))?;
        }
        b.into_inner().map_err(io("packing a layer", work))
    }
}

/// The test suite's image for the official Antithesis Python SDK: Debian
/// bookworm's python3 with `antithesis` from PyPI and a program that uses
/// it (guest-sdk/examples/antithesis-python/vault.py), its command.
pub fn python_antithesis() -> DebianImage {
    DebianImage {
        name: "hvsim-test/python-antithesis:bookworm".into(),
        suite: "bookworm".into(),
        packages: vec!["python3".into()],
        pip: vec!["antithesis==0.4.0".into()],
        files: vec![(
            "/opt/vault.py".into(),
            0o644,
            include_bytes!("../../../guest-sdk/examples/antithesis-python/vault.py").to_vec(),
        )],
        customize: vec![],
        run: RunConfig {
            cmd: Some(vec!["python3".into(), "/opt/vault.py".into()]),
            env: path(),
            ..RunConfig::default()
        },
    }
}

/// The test suite's Redis image: Debian bookworm with `redis-server` and
/// `redis-tools`, whose command is `redis-server`.
pub fn redis() -> DebianImage {
    DebianImage {
        name: "hvsim-test/redis:bookworm".into(),
        suite: "bookworm".into(),
        packages: vec!["redis-server".into(), "redis-tools".into()],
        pip: vec![],
        files: vec![],
        customize: vec![],
        run: RunConfig {
            cmd: Some(vec!["redis-server".into(), "--protected-mode".into(), "no".into()]),
            env: path(),
            exposed_ports: vec!["6379/tcp".into()],
            ..RunConfig::default()
        },
    }
}

/// The test suite's PostgreSQL image: Debian bookworm's PostgreSQL 15 with
/// its cluster (`15/main`) made when the image is built, not at every
/// start, reachable over the network without a password, and
/// python3-psycopg2 for clients. It runs as `postgres`.
///
/// The cluster is made anew with 1 MiB WAL segments: a container's first
/// write to a file of its image copies the whole file up (overlayfs), and
/// the stock 16 MiB segment made that copy most of the server's start
/// where kernel code is emulated.
pub fn postgres() -> DebianImage {
    const CONF: &str = "\
# hvsim's test image: a database for one test machine.
listen_addresses = '*'
ssl = off
# The guest's RAM is shared by every container (docs/compose.md).
shared_buffers = 8MB
max_connections = 10
# /run is not the image's in a container; /tmp is.
unix_socket_directories = '/tmp'
external_pid_file = ''
";
    const HBA: &str = "\
# hvsim's test image: anyone, from anywhere, without a password.
local all all trust
host all all all trust
";
    let etc = "$1/etc/postgresql/15/main";
    DebianImage {
        name: "hvsim-test/postgres:bookworm".into(),
        suite: "bookworm".into(),
        packages: vec!["postgresql-15".into(), "python3-psycopg2".into()],
        pip: vec![],
        files: vec![],
        customize: vec![
            "chroot \"$1\" pg_dropcluster 15 main".into(),
            "chroot \"$1\" pg_createcluster 15 main -- --wal-segsize=1".into(),
            format!("cat > {etc}/conf.d/hvsim.conf <<'EOF'\n{CONF}EOF"),
            format!("cat > {etc}/pg_hba.conf <<'EOF'\n{HBA}EOF"),
        ],
        run: RunConfig {
            cmd: Some(
                [
                    "/usr/lib/postgresql/15/bin/postgres",
                    "-D",
                    "/var/lib/postgresql/15/main",
                    "-c",
                    "config_file=/etc/postgresql/15/main/postgresql.conf",
                ]
                .map(String::from)
                .to_vec(),
            ),
            env: path(),
            user: Some("postgres".into()),
            exposed_ports: vec!["5432/tcp".into()],
            ..RunConfig::default()
        },
    }
}

/// The test suite's MariaDB image: Debian bookworm's MariaDB 10.11 (InnoDB)
/// with its data directory made when the image is built, reachable over
/// the network by any user without a password (`skip-grant-tables`), and
/// python3-pymysql for clients. It runs as `mysql`.
///
/// The data directory is made anew with a 4 MiB redo log (stock: 96 MiB),
/// for the reason `postgres` gives.
pub fn mariadb() -> DebianImage {
    const CNF: &str = "\
# hvsim's test image: a database for one test machine.
[mysqld]
bind-address = 0.0.0.0
skip-name-resolve
skip-grant-tables
# /run is not the image's in a container; /tmp is.
socket = /tmp/mysqld.sock
pid-file = /tmp/mysqld.pid
# The guest's RAM is shared by every container (docs/compose.md).
innodb_buffer_pool_size = 16M
innodb_log_file_size = 4M

[client]
socket = /tmp/mysqld.sock
";
    DebianImage {
        name: "hvsim-test/mariadb:bookworm".into(),
        suite: "bookworm".into(),
        packages: vec!["mariadb-server".into(), "python3-pymysql".into()],
        pip: vec![],
        files: vec![],
        customize: vec![
            format!("cat > \"$1/etc/mysql/mariadb.conf.d/90-hvsim.cnf\" <<'EOF'\n{CNF}EOF"),
            "rm -rf \"$1\"/var/lib/mysql/*".into(),
            "chroot \"$1\" mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db --force --skip-name-resolve".into(),
        ],
        run: RunConfig {
            cmd: Some(vec!["mariadbd".into()]),
            env: path(),
            user: Some("mysql".into()),
            exposed_ports: vec!["3306/tcp".into()],
            ..RunConfig::default()
        },
    }
}

/// Debian's PATH, which images made from packages do not set themselves.
fn path() -> Vec<String> {
    vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()]
}
