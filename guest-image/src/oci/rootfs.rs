//! The read-only root file system a node boots from its image: ext4, built
//! once per image (cached in the store by image id) and reproducible, the
//! same image giving the same bytes on every machine.
//!
//! Why ext4 through `mke2fs -d`: the guest kernel has ext4 already (node
//! disks use it), e2fsprogs is on every Debian host, and `mke2fs -d`
//! copies a directory tree without root or loop devices. erofs would be
//! smaller but needs erofs-utils newer than Debian 12 ships for tar input,
//! and a second file system in the guest kernel.
//!
//! Reproducible because nothing of the build host or the build time gets
//! in: the UUID and directory hash seed are fixed, time is faked
//! (`E2FSPROGS_FAKE_TIME`), there is no journal, and every inode's owner
//! and times are then set from the layers by `debugfs` (the host copy is
//! owned by whoever built it, and its ctime is the build time).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::layers::{apply_image, Applied, Kind};
use super::store::{ImageRecord, Store};
use super::Digest;
use crate::cache::Lock;
use crate::error::{invalid, io, ImageError, Result};
use crate::linux::packages;

/// The version of how root file systems are made, in their cached names.
const RECIPE: &str = "r2";
/// Fixed so that the same image gives the same bytes.
const UUID: &str = "6876736d-726f-6f74-6673-000000000001";
/// Not 0: e2fsprogs takes 0 for "not set" and uses the clock.
const FAKE_TIME: &str = "1700000000";
const BLOCK: u64 = 4096;

/// Where the root file system of image `id` is cached in `store`; the name
/// has the recipe's version, so a new recipe builds anew.
pub fn path(store: &Store, id: &Digest) -> PathBuf {
    store.dir().join("rootfs").join(format!("{}-{RECIPE}.ext4", id.hex()))
}

/// A built root file system.
#[derive(Debug)]
pub struct RootFs {
    pub path: PathBuf,
    /// The file system's size; the file holds less: trailing zeros are cut
    /// (a disk reads zeros past its base image).
    pub fs_bytes: u64,
    /// False if it came from the cache.
    pub built: bool,
}

/// The root file system of `record`, built unless cached.
pub fn build(store: &Store, record: &ImageRecord) -> Result<RootFs> {
    let path = path(store, &record.id);
    let _lock = Lock::acquire(&path.with_extension("lock"))?;
    if path.exists() {
        return Ok(RootFs { fs_bytes: fs_bytes(&path)?, path, built: false });
    }
    packages::ensure(&["e2fsprogs"])?;
    let scratch = store.scratch()?;
    let root = scratch.path().join("root");
    std::fs::create_dir(&root).map_err(io("creating a scratch directory", &root))?;
    let applied = apply_image(store, record, &root)?;
    let image = scratch.path().join("rootfs.ext4");
    make_ext4(&root, &applied, &image)?;
    trim_zeros(&image)?;
    std::fs::rename(&image, &path).map_err(io("storing the root file system", &path))?;
    Ok(RootFs { fs_bytes: fs_bytes(&path)?, path, built: true })
}

/// An empty ext4 file system of `bytes` for a node's disk (the writable
/// layer of its container and its volumes), built once per size. Its
/// metadata is packed at the start and its inode tables left for the
/// kernel not to initialize (`noinit_itable`), so the file is a few MiB
/// whatever the disk's size.
pub fn empty_ext4(store: &Store, bytes: u64) -> Result<PathBuf> {
    let path = store.dir().join("rootfs").join(format!("empty-{bytes}-{RECIPE}.ext4"));
    let _lock = Lock::acquire(&path.with_extension("lock"))?;
    if path.exists() {
        return Ok(path);
    }
    packages::ensure(&["e2fsprogs"])?;
    let scratch = store.scratch()?;
    let image = scratch.path().join("empty.ext4");
    let f = std::fs::File::create(&image).map_err(io("creating a disk image", &image))?;
    f.set_len(bytes).map_err(io("sizing a disk image", &image))?;
    drop(f);
    let inodes = (bytes / (64 << 10)).clamp(1024, 1 << 20);
    let mut mke2fs = Command::new("mke2fs");
    mke2fs
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-m", "0", "-L", "hvsim-node"])
        .args(["-O", "^resize_inode,sparse_super2", "-U", UUID, "-J", "size=4,location=0"])
        .arg("-E")
        .arg(format!("hash_seed={UUID},num_backup_sb=0,lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0"))
        .arg("-N")
        .arg(inodes.to_string())
        .arg(&image);
    run(mke2fs, "mke2fs", &image)?;
    trim_zeros(&image)?;
    std::fs::rename(&image, &path).map_err(io("storing a disk image", &path))?;
    Ok(path)
}

/// The size of the ext4 file system in `path` (from its superblock).
fn fs_bytes(path: &Path) -> Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).map_err(io("reading a root file system", path))?;
    let mut sb = [0u8; 1024];
    f.seek(SeekFrom::Start(1024))
        .and_then(|_| f.read_exact(&mut sb))
        .map_err(io("reading a root file system", path))?;
    if sb[56..58] != [0x53, 0xef] {
        return Err(invalid(path.display(), "not an ext4 file system (bad superblock magic)"));
    }
    let u32_at = |o: usize| u64::from(u32::from_le_bytes(sb[o..o + 4].try_into().expect("4 bytes")));
    let blocks = u32_at(4) | (u32_at(0x150) << 32);
    let block_size = 1024u64 << u32_at(24).min(16);
    Ok(blocks * block_size)
}

/// Cuts the trailing zeros of a file (to a whole block).
fn trim_zeros(path: &Path) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(io("trimming", path))?;
    let len = f.metadata().map_err(io("trimming", path))?.len();
    let mut end = len;
    let mut buf = vec![0u8; 1 << 20];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        f.seek(SeekFrom::Start(start)).and_then(|_| f.read_exact(chunk)).map_err(io("trimming", path))?;
        if let Some(last) = chunk.iter().rposition(|&b| b != 0) {
            end = start + last as u64 + 1;
            break;
        }
        end = start;
    }
    f.set_len(end.div_ceil(BLOCK) * BLOCK).map_err(io("trimming", path))
}

/// Makes an ext4 image of `root` (the applied image) at `out`.
pub fn make_ext4(root: &Path, applied: &Applied, out: &Path) -> Result<()> {
    let nodes = &applied.tree.nodes;
    // Room for every file's blocks, a block per directory and long link,
    // the inode table, and slack for ext4's own metadata.
    let mut blocks = 0u64;
    for (rel, n) in nodes {
        blocks += match &n.kind {
            Kind::File => std::fs::symlink_metadata(root.join(rel)).map_or(0, |m| m.len()).div_ceil(BLOCK),
            Kind::Dir => 1,
            Kind::Symlink(t) if t.len() >= 60 => 1,
            _ => 0,
        };
    }
    let inodes = nodes.len() as u64 + 64;
    let total = (blocks + blocks / 10 + inodes * 256 / BLOCK + (16 << 20) / BLOCK).max((32 << 20) / BLOCK);
    let f = std::fs::File::create(out).map_err(io("creating the root file system", out))?;
    f.set_len(total * BLOCK).map_err(io("sizing the root file system", out))?;
    drop(f);
    let mut mke2fs = Command::new("mke2fs");
    mke2fs
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-I", "256", "-m", "0", "-L", "hvsim-root"])
        .args(["-O", "^has_journal", "-U", UUID])
        .arg("-E")
        .arg(format!("hash_seed={UUID},lazy_itable_init=0,root_owner=0:0"))
        .arg("-N")
        .arg(inodes.to_string())
        .arg("-d")
        .arg(root)
        .arg(out);
    run(mke2fs, "mke2fs", out)?;
    // Owners and times from the layers, for every inode.
    let mut script = Vec::new();
    for (rel, n) in nodes {
        if rel.contains(['\n', '\r']) {
            return Err(invalid(format!("image path {rel:?}"), "a newline in a file name"));
        }
        let p = format!("\"/{}\"", rel.replace('"', "\"\""));
        for (field, value) in
            [("uid", n.uid), ("gid", n.gid), ("atime", n.mtime), ("mtime", n.mtime), ("ctime", n.mtime)]
        {
            writeln!(script, "sif {p} {field} {value}").expect("writing to memory");
        }
    }
    let script_path = out.with_extension("debugfs");
    std::fs::write(&script_path, &script).map_err(io("writing a debugfs script", &script_path))?;
    let mut debugfs = Command::new("debugfs");
    debugfs.arg("-w").arg("-f").arg(&script_path).arg(out);
    run(debugfs, "debugfs", out)?;
    std::fs::remove_file(&script_path).map_err(io("removing", &script_path))?;
    Ok(())
}

fn run(mut cmd: Command, what: &str, out: &Path) -> Result<()> {
    let o = cmd
        .env("E2FSPROGS_FAKE_TIME", FAKE_TIME)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| ImageError::Setup(format!("cannot run {what}: {e}")))?;
    // debugfs reports a failed command on stderr and still exits 0.
    let err = String::from_utf8_lossy(&o.stderr);
    let failed: Vec<&str> = err.lines().filter(|l| !l.starts_with("debugfs ") && !l.trim().is_empty()).collect();
    if !o.status.success() || !failed.is_empty() {
        return Err(invalid(
            out.display(),
            format!("{what} failed ({}): {}", o.status, failed.first().copied().unwrap_or("no message")),
        ));
    }
    Ok(())
}
