//! The local image store: content-addressed, under the cache directory.
//!
//! ```text
//! <cache>/images/
//!   blobs/sha256/<hex>        every blob (layers, configs), each stored once
//!   images/<id hex>.json      one record per image; the id is its config digest
//!   tags.json                 name -> image id
//!   rootfs/<id hex>.ext4      root file systems built from images (`rootfs`)
//!   tmp/                      imports in progress (renamed into place)
//!   lock                      held while the store changes
//! ```
//!
//! Blobs are immutable and written by rename, so a reader never sees half
//! of one; records and tags are rewritten whole under the lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_spec::image::ImageConfiguration;
use serde::{Deserialize, Serialize};

use super::{normalize_name, Compression, Digest, MAX_DOCUMENT_BYTES};
use crate::cache::{self, Lock};
use crate::error::{invalid, io, ImageError, Result};

/// An image in the store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The digest of its config: what `docker images` calls the image id.
    pub id: Digest,
    /// Bottom layer first.
    pub layers: Vec<Layer>,
    /// Where it was loaded or pulled from, for `image inspect`.
    pub source: String,
    /// For a pulled image, `host/repo@sha256:…`: the registry's name for
    /// these bytes, which a replay pulls by if the store lost them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_digest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Layer {
    /// Digest of the blob as stored (compressed, if it is).
    pub blob: Digest,
    /// Digest of the uncompressed tar (the config's `rootfs.diff_ids`).
    pub diff_id: Digest,
    pub compression: Compression,
    /// Bytes stored, and bytes of the uncompressed tar.
    pub size: u64,
    pub unpacked: u64,
}

/// What `Store::remove` did.
#[derive(Debug, Default)]
pub struct Removed {
    pub untagged: Vec<String>,
    pub deleted: Option<Digest>,
    pub freed_bytes: u64,
}

pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store in hvsim's cache directory.
    pub fn open() -> Result<Store> {
        Store::at(cache::dir().join("images"))
    }

    pub fn at(dir: PathBuf) -> Result<Store> {
        for sub in ["blobs/sha256", "images", "rootfs", "tmp"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(io("creating the image store", &d))?;
        }
        Ok(Store { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Held while the store's records, tags or blobs change.
    pub fn lock(&self) -> Result<Lock> {
        Lock::acquire(&self.dir.join("lock"))
    }

    /// A scratch directory on the store's file system (so its files can be
    /// renamed into place), deleted on drop.
    pub fn scratch(&self) -> Result<tempfile::TempDir> {
        let tmp = self.dir.join("tmp");
        tempfile::Builder::new().prefix("import-").tempdir_in(&tmp).map_err(io("creating a scratch directory", &tmp))
    }

    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.dir.join("blobs/sha256").join(digest.hex())
    }

    fn record_path(&self, id: &Digest) -> PathBuf {
        self.dir.join("images").join(format!("{}.json", id.hex()))
    }

    /// Moves `file` (already verified to hash to `digest`, on the store's
    /// file system) into the store, unless the blob is there already.
    pub fn put_blob(&self, file: &Path, digest: &Digest) -> Result<()> {
        let dest = self.blob_path(digest);
        if dest.exists() {
            return Ok(());
        }
        std::fs::rename(file, &dest).map_err(io("storing a blob", &dest))
    }

    /// Records an image (its blobs already stored) and points `tags` at it.
    pub fn put_image(&self, record: &ImageRecord, tags: &[String]) -> Result<()> {
        let _lock = self.lock()?;
        for d in record.layers.iter().map(|l| &l.blob).chain([&record.id]) {
            assert!(self.blob_path(d).exists(), "put_image before its blob {d} was stored");
        }
        write_json(&self.record_path(&record.id), record)?;
        let mut all = self.tags()?;
        for t in tags {
            all.insert(normalize_name(t), record.id.clone());
        }
        self.write_tags(&all)
    }

    fn tags(&self) -> Result<BTreeMap<String, Digest>> {
        let p = self.dir.join("tags.json");
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| invalid(p.display(), format!("corrupt tag list: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(io("reading the tag list", &p)(e)),
        }
    }

    fn write_tags(&self, tags: &BTreeMap<String, Digest>) -> Result<()> {
        write_json(&self.dir.join("tags.json"), tags)
    }

    fn record(&self, id: &Digest) -> Result<ImageRecord> {
        let p = self.record_path(id);
        let b = std::fs::read(&p).map_err(io("reading an image record", &p))?;
        serde_json::from_slice(&b).map_err(|e| invalid(p.display(), format!("corrupt image record: {e}")))
    }

    /// Every image with its tags, sorted by first tag (untagged last).
    pub fn images(&self) -> Result<Vec<(ImageRecord, Vec<String>)>> {
        let tags = self.tags()?;
        let mut out = Vec::new();
        let dir = self.dir.join("images");
        for e in std::fs::read_dir(&dir).map_err(io("listing images", &dir))? {
            let name = e.map_err(io("listing images", &dir))?.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
            let Ok(id) = Digest::parse(&format!("sha256:{hex}")) else { continue };
            let names: Vec<String> = tags.iter().filter(|(_, d)| **d == id).map(|(t, _)| t.clone()).collect();
            out.push((self.record(&id)?, names));
        }
        out.sort_by(|a, b| (a.1.is_empty(), &a.1, &a.0.id).cmp(&(b.1.is_empty(), &b.1, &b.0.id)));
        Ok(out)
    }

    /// The image a user means by `name`: a tag (`redis`, `redis:7`), an id
    /// (`sha256:...`) or a unique prefix of one (at least 4 digits).
    pub fn resolve(&self, name: &str) -> Result<ImageRecord> {
        if let Some(id) = self.tags()?.get(&normalize_name(name)) {
            return self.record(id);
        }
        let hex = name.strip_prefix("sha256:").unwrap_or(name);
        if hex.len() >= 4 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let found: Vec<ImageRecord> =
                self.images()?.into_iter().map(|(r, _)| r).filter(|r| r.id.hex().starts_with(hex)).collect();
            match found.len() {
                1 => return Ok(found.into_iter().next().unwrap()),
                n if n > 1 => {
                    return Err(ImageError::Setup(format!("image id prefix {name:?} is ambiguous ({n} images)")))
                }
                _ => {}
            }
        }
        Err(ImageError::Setup(format!("no image {name:?} in the store {} (see `hvsim image ls`)", self.dir.display())))
    }

    /// The image's config document.
    pub fn config(&self, record: &ImageRecord) -> Result<ImageConfiguration> {
        let p = self.blob_path(&record.id);
        let b = read_document(&p)?;
        ImageConfiguration::from_reader(&b[..]).map_err(|e| invalid(p.display(), format!("not an image config: {e}")))
    }

    /// Removes a tag, or (given an id, or the image's last tag) the image,
    /// and then every blob and root file system no image needs any more.
    pub fn remove(&self, name: &str) -> Result<Removed> {
        let record = self.resolve(name)?;
        let _lock = self.lock()?;
        let mut tags = self.tags()?;
        let mut removed = Removed::default();
        let tag = normalize_name(name);
        if tags.get(&tag) == Some(&record.id) {
            tags.remove(&tag);
            removed.untagged.push(tag);
        } else {
            tags.retain(|t, d| {
                let keep = *d != record.id;
                if !keep {
                    removed.untagged.push(t.clone());
                }
                keep
            });
        }
        self.write_tags(&tags)?;
        if tags.values().any(|d| *d == record.id) {
            return Ok(removed);
        }
        let p = self.record_path(&record.id);
        std::fs::remove_file(&p).map_err(io("removing an image record", &p))?;
        removed.deleted = Some(record.id.clone());
        removed.freed_bytes += self.remove_rootfs(&record.id);
        removed.freed_bytes += self.collect_garbage()?;
        Ok(removed)
    }

    /// Deletes the root file systems built from image `id`, by any recipe.
    fn remove_rootfs(&self, id: &Digest) -> u64 {
        let dir = self.dir.join("rootfs");
        let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(id.hex()))
            .map(|e| remove_counted(&e.path()))
            .sum()
    }

    /// Deletes blobs no image record refers to; returns the bytes freed.
    fn collect_garbage(&self) -> Result<u64> {
        let mut live = std::collections::HashSet::new();
        for (r, _) in self.images()? {
            live.insert(r.id.hex().to_owned());
            live.extend(r.layers.iter().map(|l| l.blob.hex().to_owned()));
        }
        let dir = self.dir.join("blobs/sha256");
        let mut freed = 0;
        for e in std::fs::read_dir(&dir).map_err(io("listing blobs", &dir))? {
            let e = e.map_err(io("listing blobs", &dir))?;
            if !live.contains(e.file_name().to_string_lossy().as_ref()) {
                freed += remove_counted(&e.path());
            }
        }
        Ok(freed)
    }
}

fn remove_counted(path: &Path) -> u64 {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    match std::fs::remove_file(path) {
        Ok(()) => size,
        Err(_) => 0,
    }
}

/// Reads a JSON document of an image, refusing one too large to be real.
pub(crate) fn read_document(path: &Path) -> Result<Vec<u8>> {
    hvsim_vmm::files::read_bounded(path, MAX_DOCUMENT_BYTES).map_err(io("reading an image document", path))
}

/// Writes `value` as JSON to a temporary file beside `path`, then renames.
fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let dir = path.parent().expect("store paths have a parent");
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io("writing", path))?;
    serde_json::to_writer_pretty(&mut tmp, value).map_err(|e| io("writing", path)(e.into()))?;
    tmp.persist(path).map_err(|e| io("writing", path)(e.error))?;
    Ok(())
}
