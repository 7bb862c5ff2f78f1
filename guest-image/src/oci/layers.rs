//! Applying an image's layers to a directory, exactly and safely.
//!
//! Exactly: whiteouts (`.wh.NAME`) delete what lower layers put at NAME,
//! an opaque marker (`.wh..wh..opq`) hides every lower entry of its
//! directory, hardlinks share their target's inode, and modes (setuid
//! bits included), owners and mtimes are the ones the layer records.
//! Device nodes are skipped and counted (the guest's /dev is its own).
//! Owners are not applied on the host, which may not be root: they are
//! kept in the [`Tree`] and written into the file system image by
//! `rootfs`, so the result does not depend on who builds it.
//!
//! Safely: the [`Tree`] mirrors what is on disk, and every entry is
//! checked against it before anything is written. An entry whose path is
//! absolute or has a `..`, whose parent is a symbolic link (planted by an
//! earlier entry or layer) or a file, or a hardlink whose target is not a
//! regular file of the image, is refused with an error that names the
//! layer and the entry. So no path that reaches the host's file system
//! passes through a symbolic link, and nothing is written outside `dest`.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::store::{ImageRecord, Store};
use super::Compression;
use crate::error::{invalid, io, Result};

/// The largest owner id a file system stores.
const MAX_ID: u64 = u32::MAX as u64;

/// The last second ext4 stores (2446-05-10): a signed 32-bit count and two
/// epoch bits. A later mtime would wrap in the root file system.
const MAX_MTIME: u64 = (1 << 31) - 1 + 3 * (1 << 32);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink(Vec<u8>),
    Fifo,
}

/// One path of the applied image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: Kind,
    /// Permission bits, with setuid, setgid and sticky.
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: u64,
    /// The layer that last wrote it (opaque markers hide lower ones).
    layer: usize,
}

/// The image's paths (relative, `/`-separated; the root is `""`), in
/// sorted order.
#[derive(Debug, Default)]
pub struct Tree {
    pub nodes: BTreeMap<String, Node>,
}

/// What applying an image did.
#[derive(Debug)]
pub struct Applied {
    pub tree: Tree,
    pub devices_skipped: usize,
    pub hardlinks: usize,
    pub bytes: u64,
}

/// Applies every layer of `record` to the empty directory `dest`.
pub fn apply_image(store: &Store, record: &ImageRecord, dest: &Path) -> Result<Applied> {
    let mut a = Applier::new(dest)?;
    for (i, layer) in record.layers.iter().enumerate() {
        let path = store.blob_path(&layer.blob);
        let file = File::open(&path).map_err(io("reading a layer", &path))?;
        let label = format!("layer {} ({})", i + 1, layer.diff_id.short());
        let (_, reader) = Compression::open(file).map_err(|e| invalid(&label, e.to_string()))?;
        a.layer(&label, reader)?;
    }
    a.finish()
}

/// Applies layers one at a time, bottom first.
pub struct Applier {
    dest: PathBuf,
    tree: Tree,
    layer: usize,
    devices_skipped: usize,
    hardlinks: usize,
    bytes: u64,
}

impl Applier {
    pub fn new(dest: &Path) -> Result<Applier> {
        let empty =
            std::fs::read_dir(dest).map_err(io("opening the root file system directory", dest))?.next().is_none();
        if !empty {
            return Err(invalid(dest.display(), "layers are applied to an empty directory"));
        }
        let mut tree = Tree::default();
        tree.nodes.insert(String::new(), Node { kind: Kind::Dir, mode: 0o755, uid: 0, gid: 0, mtime: 0, layer: 0 });
        Ok(Applier { dest: dest.to_owned(), tree, layer: 0, devices_skipped: 0, hardlinks: 0, bytes: 0 })
    }

    /// Applies one layer's (uncompressed) tar stream; `label` names it in
    /// errors.
    pub fn layer(&mut self, label: &str, reader: impl Read) -> Result<()> {
        self.layer += 1;
        let mut tar = tar::Archive::new(reader);
        let entries = tar.entries().map_err(|e| invalid(label, format!("broken tar stream: {e}")))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| invalid(label, format!("broken tar stream: {e}")))?;
            let raw = entry.path_bytes().into_owned();
            let shown = String::from_utf8_lossy(&raw).into_owned();
            self.entry(&mut entry).map_err(|why| invalid(format!("{label}: entry {shown:?}"), why))?;
        }
        Ok(())
    }

    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<R>) -> std::result::Result<(), String> {
        let header = entry.header();
        let kind = header.entry_type();
        if kind == tar::EntryType::XGlobalHeader {
            return Ok(());
        }
        let rel = clean(&entry.path_bytes())?;
        let layer = self.layer;
        let meta = |kind| -> std::result::Result<Node, String> {
            let (uid, gid) = (header.uid().map_err(|e| e.to_string())?, header.gid().map_err(|e| e.to_string())?);
            if uid > MAX_ID || gid > MAX_ID {
                return Err(format!("its owner {uid}:{gid} is beyond the 32 bits a file system stores"));
            }
            let mtime = header.mtime().map_err(|e| e.to_string())?;
            if mtime > MAX_MTIME {
                return Err(format!("its mtime {mtime} is after 2446, the last time ext4 stores"));
            }
            Ok(Node { kind, mode: header.mode().map_err(|e| e.to_string())? & 0o7777, uid, gid, mtime, layer })
        };
        if rel.is_empty() {
            // The root itself: only its metadata can change.
            if !kind.is_dir() {
                return Err("the root can only be a directory".into());
            }
            let node = meta(Kind::Dir)?;
            self.tree.nodes.insert(rel, node);
            return Ok(());
        }
        let (parent, name) = split(&rel);
        self.make_parents(parent)?;
        if name == ".wh..wh..opq" {
            let lower: Vec<String> =
                self.children(parent).filter(|(_, n)| n.layer < self.layer).map(|(p, _)| p.clone()).collect();
            for p in lower {
                // Removing a directory took what was under it already.
                if self.tree.nodes.contains_key(&p) {
                    self.remove(&p)?;
                }
            }
            return Ok(());
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            if hidden.is_empty() || hidden == "." || hidden == ".." {
                return Err("a whiteout without a name".into());
            }
            let target = join(parent, hidden);
            if self.tree.nodes.contains_key(&target) {
                self.remove(&target)?;
            }
            return Ok(());
        }
        let path = self.dest.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                let node = meta(Kind::Dir)?;
                match self.tree.nodes.get(&rel) {
                    Some(n) if n.kind == Kind::Dir => {}
                    Some(_) => {
                        self.remove(&rel)?;
                        mkdir(&path)?;
                    }
                    None => mkdir(&path)?,
                }
                self.tree.nodes.insert(rel, node);
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let node = meta(Kind::File)?;
                self.replace(&rel)?;
                let declared = entry.size();
                let mut out = File::options()
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| format!("cannot create it: {e}"))?;
                let n = std::io::copy(entry, &mut out).map_err(|e| format!("cannot read its data: {e}"))?;
                if n != declared {
                    return Err(format!("truncated: {n} of its {declared} bytes"));
                }
                out.set_permissions(std::fs::Permissions::from_mode(node.mode))
                    .map_err(|e| format!("cannot set its mode: {e}"))?;
                self.bytes += n;
                self.tree.nodes.insert(rel, node);
            }
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().ok_or("a symbolic link without a target")?.into_owned();
                let node = meta(Kind::Symlink(target.clone()))?;
                self.replace(&rel)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path)
                    .map_err(|e| format!("cannot create it: {e}"))?;
                self.tree.nodes.insert(rel, node);
            }
            tar::EntryType::Link => {
                let raw = entry.link_name_bytes().ok_or("a hardlink without a target")?.into_owned();
                let target = clean(&raw).map_err(|why| format!("its hardlink target: {why}"))?;
                let node = match self.tree.nodes.get(&target) {
                    Some(n) if n.kind == Kind::File => Node { layer: self.layer, ..n.clone() },
                    _ => {
                        return Err(format!(
                            "a hardlink to {:?}, which is not a regular file of the image",
                            String::from_utf8_lossy(&raw)
                        ))
                    }
                };
                if target == rel {
                    return Ok(());
                }
                self.replace(&rel)?;
                std::fs::hard_link(self.dest.join(&target), &path).map_err(|e| format!("cannot link it: {e}"))?;
                self.hardlinks += 1;
                self.tree.nodes.insert(rel, node);
            }
            tar::EntryType::Fifo => {
                let node = meta(Kind::Fifo)?;
                self.replace(&rel)?;
                let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| "a NUL in its path")?;
                // SAFETY: mkfifo with a valid C string.
                if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                    return Err(format!("cannot create it: {}", std::io::Error::last_os_error()));
                }
                self.tree.nodes.insert(rel, node);
            }
            tar::EntryType::Char | tar::EntryType::Block => self.devices_skipped += 1,
            other => return Err(format!("unsupported tar entry type {other:?}")),
        }
        Ok(())
    }

    /// Makes sure every ancestor of a path is a directory of the tree
    /// (creating missing ones as tools do: 0755, root), refusing to pass
    /// through anything else.
    fn make_parents(&mut self, parent: &str) -> std::result::Result<(), String> {
        if parent.is_empty() {
            return Ok(());
        }
        let mut at = 0;
        loop {
            let end = parent[at..].find('/').map_or(parent.len(), |i| at + i);
            let prefix = &parent[..end];
            match self.tree.nodes.get(prefix).map(|n| &n.kind) {
                Some(Kind::Dir) => {}
                Some(Kind::Symlink(_)) => return Err(format!("it would write through the symbolic link {prefix:?}")),
                Some(_) => return Err(format!("{prefix:?} is not a directory")),
                None => {
                    mkdir(&self.dest.join(prefix))?;
                    let node = Node { kind: Kind::Dir, mode: 0o755, uid: 0, gid: 0, mtime: 0, layer: self.layer };
                    self.tree.nodes.insert(prefix.to_owned(), node);
                }
            }
            if end == parent.len() {
                return Ok(());
            }
            at = end + 1;
        }
    }

    /// Clears the way for a new non-directory at `rel`.
    fn replace(&mut self, rel: &str) -> std::result::Result<(), String> {
        if self.tree.nodes.contains_key(rel) {
            self.remove(rel)?;
        }
        Ok(())
    }

    fn children<'a>(&'a self, dir: &str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        self.tree
            .nodes
            .range(prefix.clone()..)
            .take_while(move |(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| !p.is_empty())
    }

    /// Removes `rel` and everything under it, from the tree and the disk.
    fn remove(&mut self, rel: &str) -> std::result::Result<(), String> {
        assert!(!rel.is_empty(), "the root is never removed");
        let under: Vec<String> = self.children(rel).map(|(p, _)| p.clone()).collect();
        for p in under {
            self.tree.nodes.remove(&p);
        }
        let node = self.tree.nodes.remove(rel).expect("removing a path of the tree");
        let path = self.dest.join(rel);
        let r = if node.kind == Kind::Dir { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        r.map_err(|e| format!("cannot remove {rel:?}: {e}"))
    }

    /// Sets every directory's mode and every path's mtime (last: adding a
    /// child changes its directory's mtime).
    pub fn finish(self) -> Result<Applied> {
        for (rel, node) in &self.tree.nodes {
            let path = self.dest.join(rel);
            if node.kind == Kind::Dir {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(node.mode))
                    .map_err(io("setting a directory's mode", &path))?;
            }
            set_mtime(&path, node.mtime).map_err(io("setting an mtime", &path))?;
        }
        Ok(Applied {
            tree: self.tree,
            devices_skipped: self.devices_skipped,
            hardlinks: self.hardlinks,
            bytes: self.bytes,
        })
    }
}

/// A layer path made relative and canonical (`./a//b/` → `a/b`); refused
/// if absolute or if it has a `..`.
pub fn clean(raw: &[u8]) -> std::result::Result<String, String> {
    let s = std::str::from_utf8(raw).map_err(|_| "its path is not UTF-8".to_owned())?;
    if s.starts_with('/') {
        return Err("an absolute path".into());
    }
    let mut parts = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err("a path with \"..\"".into()),
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

fn split(rel: &str) -> (&str, &str) {
    match rel.rfind('/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => ("", rel),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// Creates a directory writable by its builder until `finish` sets its
/// mode.
fn mkdir(path: &Path) -> std::result::Result<(), String> {
    std::fs::create_dir(path).map_err(|e| format!("cannot create directory {}: {e}", path.display()))
}

fn set_mtime(path: &Path, secs: u64) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let t = libc::timespec { tv_sec: secs as libc::time_t, tv_nsec: 0 };
    // SAFETY: a valid C string and two timespecs; AT_SYMLINK_NOFOLLOW so a
    // link's own time is set, never its target's.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_or_refused() {
        assert_eq!(clean(b"./a//b/").unwrap(), "a/b");
        assert_eq!(clean(b"./").unwrap(), "");
        assert!(clean(b"/etc/passwd").is_err());
        assert!(clean(b"a/../../b").is_err());
        assert!(clean(b"..").is_err());
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `layer_path` fuzz target checks, over its corpus and
    /// regressions: a cleaned path is relative, clean, and stays the same.
    #[test]
    fn fuzz_corpus_and_regressions_clean_to_clean_paths() {
        let inputs = fuzz_inputs("layer_path");
        assert!(!inputs.is_empty());
        for (_, data) in inputs {
            if let Ok(rel) = clean(&data) {
                assert!(!rel.starts_with('/'));
                assert!(rel.is_empty() || rel.split('/').all(|c| !matches!(c, "" | "." | "..")), "{rel:?}");
                assert_eq!(clean(rel.as_bytes()).as_deref(), Ok(rel.as_str()));
            }
        }
    }
}
