//! Importing images into the store from what `docker save`, `podman save`
//! and OCI tools write.
//!
//! Accepted sources:
//! - a docker-archive tar (optionally gzip or zstd compressed), with the
//!   legacy `manifest.json` (`Config`, `RepoTags`, `Layers` paths) and/or
//!   the OCI layout newer Docker writes beside it;
//! - an OCI image layout, as a directory or a tar of one (`oci-layout`,
//!   `index.json`, `blobs/sha256/...`), single- or multi-platform: the
//!   linux/amd64 manifest is chosen.
//!
//! Nothing is trusted: every blob is hashed and compared with the digest
//! that names it (descriptors, `blobs/sha256/<hex>` paths, `<hex>.json`
//! configs), every layer is decompressed and compared with the config's
//! `rootfs.diff_ids`, and only then does anything enter the store.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use oci_spec::image::{Arch, Descriptor, ImageConfiguration, ImageIndex, ImageManifest, MediaType, Os};
use serde::Deserialize;

use super::store::{read_document, ImageRecord, Layer, Store};
use super::{Compression, Digest, Hashing, MAX_IMAGE_BYTES};
use crate::error::{invalid, io, Result};

/// Entries an image archive may hold: a docker-archive has three per
/// layer and a few more, an OCI layout one per blob; an archive of
/// thousands of entries is not an image, and each entry costs a file.
pub const MAX_ARCHIVE_ENTRIES: usize = 10_000;

/// Layers an image may have: more than Docker's overlay2 driver mounts.
pub const MAX_LAYERS: usize = 128;

/// Images one source may hold: each is verified layer by layer.
pub const MAX_IMAGES: usize = 256;

/// An image the import put in the store.
#[derive(Debug)]
pub struct Loaded {
    pub record: ImageRecord,
    pub tags: Vec<String>,
}

/// Imports every image `source` (an archive file or a layout directory)
/// holds. `tag` names the image (there must be exactly one then).
pub fn load(store: &Store, source: &Path, tag: Option<&str>) -> Result<Vec<Loaded>> {
    let scratch = store.scratch()?;
    let mut files = if source.is_dir() {
        Files::Dir { root: source.to_owned(), copied: HashMap::new() }
    } else {
        Files::Archive(Archive::unpack(source, scratch.path())?)
    };
    let label = source.display().to_string();
    let found = if files.exists("manifest.json") {
        docker_images(&mut files, &label, scratch.path())?
    } else if files.exists("index.json") {
        oci_images(&mut files, &label, scratch.path())?
    } else {
        return Err(invalid(&label, "neither manifest.json nor index.json: not a docker-archive or OCI image layout"));
    };
    if found.is_empty() {
        return Err(invalid(&label, "holds no image"));
    }
    if tag.is_some() && found.len() > 1 {
        return Err(invalid(&label, format!("holds {} images; --tag names exactly one", found.len())));
    }
    let bar = crate::progress::bar(found.iter().flat_map(|f| &f.layers).map(|l| l.staged.size).sum());
    bar.set_style(
        indicatif::ProgressStyle::with_template("hvsim: verifying layers {bar:30} {bytes}/{total_bytes}")
            .expect("static template"),
    );
    let mut loaded = Vec::new();
    for image in found {
        let record = image.verify_and_store(store, &label, &bar)?;
        let tags: Vec<String> = match tag {
            Some(t) => vec![super::normalize_name(t)],
            None => image.names.iter().map(|n| super::normalize_name(n)).collect(),
        };
        store.put_image(&record, &tags)?;
        loaded.push(Loaded { record, tags });
    }
    bar.finish_and_clear();
    Ok(loaded)
}

/// A file of the source, hashed, in scratch space on the store's file
/// system.
#[derive(Clone, Debug)]
pub(super) struct Staged {
    pub(super) path: PathBuf,
    pub(super) digest: Digest,
    pub(super) size: u64,
}

/// The regular files of an archive, copied out (and hashed) in one pass;
/// its symbolic links (legacy archives link repeated layers) kept aside.
struct Archive {
    files: HashMap<String, Staged>,
    links: HashMap<String, String>,
}

impl Archive {
    /// Stages every file of the archive at `path`: at most
    /// [`MAX_ARCHIVE_ENTRIES`] entries and [`MAX_IMAGE_BYTES`] bytes.
    fn unpack(path: &Path, scratch: &Path) -> Result<Archive> {
        let file = hvsim_vmm::files::open_regular(path).map_err(io("opening the image archive", path))?;
        let size = file.metadata().map_err(io("opening the image archive", path))?.len();
        let bar = crate::progress::bar(size).with_style(
            indicatif::ProgressStyle::with_template("hvsim: reading the archive {bar:30} {bytes}/{total_bytes}")
                .expect("static template"),
        );
        let (_, reader) = Compression::open(bar.wrap_read(file)).map_err(io("reading the image archive", path))?;
        let mut tar = tar::Archive::new(reader);
        let mut archive = Archive { files: HashMap::new(), links: HashMap::new() };
        let label = path.display();
        let entries = tar.entries().map_err(io("reading the image archive", path))?;
        let mut staged = 0u64;
        for (i, entry) in entries.enumerate() {
            if i == MAX_ARCHIVE_ENTRIES {
                return Err(invalid(&label, format!("more than {MAX_ARCHIVE_ENTRIES} entries: not an image archive")));
            }
            let mut entry = entry.map_err(|e| invalid(&label, format!("broken tar stream: {e}")))?;
            let raw = entry.path_bytes().into_owned();
            let kind = entry.header().entry_type();
            let Some(name) = archive_name(&raw) else {
                return Err(invalid(
                    &label,
                    format!("entry {:?} leaves the archive's root", String::from_utf8_lossy(&raw)),
                ));
            };
            if kind.is_file() {
                let declared = entry.size();
                staged = staged.saturating_add(declared);
                if staged > MAX_IMAGE_BYTES {
                    return Err(invalid(&label, format!("holds more than {} GiB", MAX_IMAGE_BYTES >> 30)));
                }
                let dest = scratch.join(format!("f{i}"));
                let out = File::create(&dest).map_err(io("staging an archive entry", &dest))?;
                let mut hashing = Hashing::new(out);
                std::io::copy(&mut entry, &mut hashing).map_err(|e| invalid(&label, format!("entry {name}: {e}")))?;
                let (digest, size, _) = hashing.finish();
                if size != declared {
                    return Err(invalid(&label, format!("entry {name}: truncated ({size} of {declared} bytes)")));
                }
                archive.links.remove(&name);
                archive.files.insert(name, Staged { path: dest, digest, size });
            } else if kind.is_symlink() {
                let target = entry.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
                let parent = Path::new(&name).parent().unwrap_or(Path::new("")).to_owned();
                let joined = parent.join(String::from_utf8_lossy(&target).as_ref());
                if let Some(t) = archive_name(joined.as_os_str().as_encoded_bytes()) {
                    archive.files.remove(&name);
                    archive.links.insert(name, t);
                }
            }
        }
        bar.finish_and_clear();
        Ok(archive)
    }

    fn get(&self, name: &str) -> Option<&Staged> {
        let mut name = name.to_owned();
        for _ in 0..8 {
            if let Some(f) = self.files.get(&name) {
                return Some(f);
            }
            name = self.links.get(&name)?.clone();
        }
        None
    }
}

/// The name of an archive member relative to its root, with `./` and `..`
/// resolved lexically; `None` if it would leave the root.
fn archive_name(raw: &[u8]) -> Option<String> {
    let path = Path::new(std::str::from_utf8(raw).ok()?);
    let mut parts: Vec<&str> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

/// Where files come from: an archive (already staged) or a directory
/// (copied into scratch, and hashed, when first asked for).
enum Files {
    Archive(Archive),
    Dir { root: PathBuf, copied: HashMap<String, Staged> },
}

impl Files {
    fn exists(&self, name: &str) -> bool {
        match self {
            Files::Archive(a) => a.get(name).is_some(),
            Files::Dir { root, .. } => root.join(name).is_file(),
        }
    }

    /// The file `name`, staged and hashed; `label` names the source.
    fn get(&mut self, name: &str, label: &str, scratch: &Path) -> Result<Staged> {
        let Some(clean) = archive_name(name.as_bytes()) else {
            return Err(invalid(label, format!("{name:?} points outside the image")));
        };
        match self {
            Files::Archive(a) => {
                a.get(&clean).cloned().ok_or_else(|| invalid(label, format!("{clean} is missing from the archive")))
            }
            Files::Dir { root, copied } => {
                if let Some(s) = copied.get(&clean) {
                    return Ok(s.clone());
                }
                let src = root.join(&clean);
                let mut input = hvsim_vmm::files::open_regular(&src).map_err(io("reading the image layout", &src))?;
                let len = input.metadata().map_err(io("reading the image layout", &src))?.len();
                let total = copied.values().map(|s| s.size).sum::<u64>().saturating_add(len);
                if total > MAX_IMAGE_BYTES {
                    return Err(invalid(label, format!("holds more than {} GiB", MAX_IMAGE_BYTES >> 30)));
                }
                let dest = scratch.join(format!("d{}", copied.len()));
                let out = File::create(&dest).map_err(io("staging a blob", &dest))?;
                let mut hashing = Hashing::new(out);
                std::io::copy(&mut input, &mut hashing).map_err(io("reading the image layout", &src))?;
                let (digest, size, _) = hashing.finish();
                let s = Staged { path: dest, digest, size };
                copied.insert(clean, s.clone());
                Ok(s)
            }
        }
    }

    /// The blob a descriptor names, checked against its digest and size.
    fn blob(&mut self, d: &Descriptor, label: &str, scratch: &Path) -> Result<Staged> {
        let digest = Digest::parse_at(d.digest().as_ref(), label)?;
        let s = self.get(&format!("blobs/sha256/{}", digest.hex()), label, scratch)?;
        if s.digest != digest {
            return Err(invalid(label, format!("blob {digest}: digest mismatch (its content hashes to {})", s.digest)));
        }
        if s.size != d.size() {
            return Err(invalid(label, format!("blob {digest}: {} bytes, its descriptor says {}", s.size, d.size())));
        }
        Ok(s)
    }
}

/// An image found in a source (or pulled: `registry`), its blobs staged
/// but not yet verified against the config.
pub(super) struct Found {
    pub(super) names: Vec<String>,
    pub(super) config: Staged,
    pub(super) layers: Vec<FoundLayer>,
}

pub(super) struct FoundLayer {
    /// Where it is in the source, for errors.
    pub(super) name: String,
    pub(super) staged: Staged,
}

impl Found {
    /// Checks the config (platform, one diff_id per layer) and every layer
    /// (decompressed, hashed, compared with its diff_id), then moves the
    /// blobs into the store.
    pub(super) fn verify_and_store(
        &self,
        store: &Store,
        label: &str,
        bar: &indicatif::ProgressBar,
    ) -> Result<ImageRecord> {
        let config_bytes = read_document(&self.config.path)?;
        let config = ImageConfiguration::from_reader(&config_bytes[..])
            .map_err(|e| invalid(label, format!("config {}: not an image config: {e}", self.config.digest)))?;
        if *config.os() != Os::Linux || *config.architecture() != Arch::Amd64 {
            return Err(invalid(
                label,
                format!("the image is for {}/{}; hvsim runs linux/amd64 images", config.os(), config.architecture()),
            ));
        }
        let diff_ids = config.rootfs().diff_ids();
        if diff_ids.len() != self.layers.len() {
            return Err(invalid(
                label,
                format!("the config lists {} layers, the manifest {}", diff_ids.len(), self.layers.len()),
            ));
        }
        let mut layers = Vec::new();
        let mut total = 0u64;
        for (layer, diff_id) in self.layers.iter().zip(diff_ids) {
            let want = Digest::parse_at(diff_id, format!("{label}: config {}", self.config.digest))?;
            let at = format!("{label}: layer {}", layer.name);
            let file = File::open(&layer.staged.path).map_err(io("reading a staged layer", &layer.staged.path))?;
            let (compression, reader) = Compression::open(file).map_err(|e| invalid(&at, e.to_string()))?;
            let mut hashing = Hashing::new(reader.take(MAX_IMAGE_BYTES - total + 1));
            std::io::copy(&mut hashing, &mut std::io::sink())
                .map_err(|e| invalid(&at, format!("cannot decompress ({compression:?}): {e}")))?;
            let (got, unpacked, _) = hashing.finish();
            total += unpacked;
            if total > MAX_IMAGE_BYTES {
                return Err(invalid(&at, format!("the image unpacks to more than {} GiB", MAX_IMAGE_BYTES >> 30)));
            }
            if got != want {
                return Err(invalid(&at, format!("digest mismatch: its tar hashes to {got}, the config says {want}")));
            }
            bar.inc(layer.staged.size);
            layers.push(Layer {
                blob: layer.staged.digest.clone(),
                diff_id: want,
                compression,
                size: layer.staged.size,
                unpacked,
            });
        }
        for layer in &self.layers {
            // An image may use one blob twice: the first rename took it.
            if !store.blob_path(&layer.staged.digest).exists() {
                store.put_blob(&layer.staged.path, &layer.staged.digest)?;
            }
        }
        store.put_blob(&self.config.path, &self.config.digest)?;
        Ok(ImageRecord { id: self.config.digest.clone(), layers, source: label.to_owned(), repo_digest: None })
    }
}

/// One image of a docker-archive's `manifest.json`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerManifest {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

fn docker_images(files: &mut Files, label: &str, scratch: &Path) -> Result<Vec<Found>> {
    let m = files.get("manifest.json", label, scratch)?;
    let manifests: Vec<DockerManifest> = serde_json::from_slice(&read_document(&m.path)?)
        .map_err(|e| invalid(format!("{label}: manifest.json"), e.to_string()))?;
    let mut found = Vec::new();
    for dm in manifests {
        let config = files.get(&dm.config, label, scratch)?;
        // The config's name is its digest (`<hex>.json`, `blobs/sha256/<hex>`).
        let stem = Path::new(&dm.config).file_name().and_then(|n| n.to_str()).unwrap_or("");
        let named = stem.strip_suffix(".json").unwrap_or(stem);
        if let Ok(d) = Digest::parse(&format!("sha256:{named}")) {
            if d != config.digest {
                return Err(invalid(
                    label,
                    format!("config {}: digest mismatch (its content hashes to {})", dm.config, config.digest),
                ));
            }
        }
        check_layer_count(dm.layers.len(), label)?;
        let mut layers = Vec::new();
        for name in &dm.layers {
            layers.push(FoundLayer { name: name.clone(), staged: files.get(name, label, scratch)? });
        }
        push_found(&mut found, Found { names: dm.repo_tags.unwrap_or_default(), config, layers }, label)?;
    }
    Ok(found)
}

fn push_found(found: &mut Vec<Found>, image: Found, label: &str) -> Result<()> {
    if found.len() == MAX_IMAGES {
        return Err(invalid(label, format!("holds more than {MAX_IMAGES} images")));
    }
    found.push(image);
    Ok(())
}

pub(super) fn check_layer_count(layers: usize, label: &str) -> Result<()> {
    if layers > MAX_LAYERS {
        return Err(invalid(label, format!("an image of {layers} layers; hvsim takes at most {MAX_LAYERS}")));
    }
    Ok(())
}

fn is_index(m: &MediaType) -> bool {
    matches!(m, MediaType::ImageIndex) || m.as_ref() == "application/vnd.docker.distribution.manifest.list.v2+json"
}

fn is_manifest(m: &MediaType) -> bool {
    matches!(m, MediaType::ImageManifest) || m.as_ref() == "application/vnd.docker.distribution.manifest.v2+json"
}

fn oci_images(files: &mut Files, label: &str, scratch: &Path) -> Result<Vec<Found>> {
    let idx = files.get("index.json", label, scratch)?;
    let index = ImageIndex::from_reader(&read_document(&idx.path)?[..])
        .map_err(|e| invalid(format!("{label}: index.json"), e.to_string()))?;
    let mut found = Vec::new();
    let mut platforms = Vec::new();
    for d in index.manifests() {
        let names = ref_names(d);
        collect_manifests(files, label, scratch, d, &names, 0, &mut found, &mut platforms)?;
    }
    if found.is_empty() && !platforms.is_empty() {
        return Err(invalid(label, format!("no linux/amd64 image (it has {})", platforms.join(", "))));
    }
    Ok(found)
}

/// The names a layout gives the image a descriptor points at.
fn ref_names(d: &Descriptor) -> Vec<String> {
    let a = d.annotations().as_ref();
    let full = a.and_then(|a| a.get("io.containerd.image.name"));
    let reference = a.and_then(|a| a.get("org.opencontainers.image.ref.name"));
    full.or(reference).map(|n| vec![n.clone()]).unwrap_or_default()
}

#[allow(clippy::too_many_arguments)]
fn collect_manifests(
    files: &mut Files,
    label: &str,
    scratch: &Path,
    d: &Descriptor,
    names: &[String],
    depth: usize,
    found: &mut Vec<Found>,
    platforms: &mut Vec<String>,
) -> Result<()> {
    if depth > 4 {
        return Err(invalid(label, "image indexes nested more than 4 deep"));
    }
    if let Some(p) = d.platform() {
        if *p.os() != Os::Linux || *p.architecture() != Arch::Amd64 {
            platforms.push(format!("{}/{}", p.os(), p.architecture()));
            return Ok(());
        }
    }
    if is_index(d.media_type()) {
        let blob = files.blob(d, label, scratch)?;
        let index = ImageIndex::from_reader(&read_document(&blob.path)?[..])
            .map_err(|e| invalid(format!("{label}: index {}", blob.digest), e.to_string()))?;
        for inner in index.manifests() {
            collect_manifests(files, label, scratch, inner, names, depth + 1, found, platforms)?;
        }
        return Ok(());
    }
    if !is_manifest(d.media_type()) {
        return Ok(()); // attestations, signatures and other artifacts
    }
    let blob = files.blob(d, label, scratch)?;
    let manifest = ImageManifest::from_reader(&read_document(&blob.path)?[..])
        .map_err(|e| invalid(format!("{label}: manifest {}", blob.digest), e.to_string()))?;
    check_layer_count(manifest.layers().len(), label)?;
    let config = files.blob(manifest.config(), label, scratch)?;
    let mut layers = Vec::new();
    for l in manifest.layers() {
        layers.push(FoundLayer { name: l.digest().to_string(), staged: files.blob(l, label, scratch)? });
    }
    push_found(found, Found { names: names.to_vec(), config, layers }, label)
}
