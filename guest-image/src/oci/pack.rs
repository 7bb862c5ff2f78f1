//! Writing images in the formats `load` reads: what the tests (and the
//! images the test suite builds from Debian packages) are made with.
//! Output is deterministic: fixed times and owners in every tar.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use serde_json::json;

use super::{Compression, Digest};
use crate::error::{io, Result};

/// A layer as it will be stored: its blob (maybe compressed) and the
/// digest of its uncompressed tar.
#[derive(Clone)]
pub struct PackLayer {
    pub blob: Vec<u8>,
    pub diff_id: Digest,
    pub compression: Compression,
}

impl PackLayer {
    /// A layer from an uncompressed tar.
    pub fn new(tar: &[u8], compression: Compression) -> PackLayer {
        let blob = match compression {
            Compression::None => tar.to_vec(),
            Compression::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(tar).expect("writing to memory");
                e.finish().expect("writing to memory")
            }
            Compression::Zstd => zstd::encode_all(tar, 3).expect("writing to memory"),
        };
        PackLayer { blob, diff_id: Digest::of(tar), compression }
    }

    fn media_type(&self) -> &'static str {
        match self.compression {
            Compression::None => "application/vnd.oci.image.layer.v1.tar",
            Compression::Gzip => "application/vnd.oci.image.layer.v1.tar+gzip",
            Compression::Zstd => "application/vnd.oci.image.layer.v1.tar+zstd",
        }
    }
}

/// What the image's config says about running it.
#[derive(Clone, Debug, Default)]
pub struct RunConfig {
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    pub env: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub exposed_ports: Vec<String>,
}

/// An image to write.
pub struct Pack {
    pub config: Vec<u8>,
    pub layers: Vec<PackLayer>,
    /// The name it is tagged with (`RepoTags`, `io.containerd.image.name`).
    pub name: Option<String>,
}

/// The formats `load` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `docker save` before Docker 25: `manifest.json`, `<id>.json`,
    /// `<layer>/layer.tar`.
    DockerLegacy,
    /// `docker save` since Docker 25: `manifest.json` beside an OCI layout.
    DockerOci,
    /// An OCI image layout directory.
    OciDir,
    /// An OCI image layout in a tar (`podman save --format oci-archive`).
    OciArchive,
}

impl Pack {
    pub fn new(run: &RunConfig, layers: Vec<PackLayer>, name: Option<&str>) -> Pack {
        let mut config = json!({ "Env": run.env });
        let c = config.as_object_mut().expect("an object");
        let mut set = |k: &str, v: Option<serde_json::Value>| {
            if let Some(v) = v {
                c.insert(k.into(), v);
            }
        };
        set("Entrypoint", run.entrypoint.as_ref().map(|v| json!(v)));
        set("Cmd", run.cmd.as_ref().map(|v| json!(v)));
        set("WorkingDir", run.working_dir.as_ref().map(|v| json!(v)));
        set("User", run.user.as_ref().map(|v| json!(v)));
        if !run.exposed_ports.is_empty() {
            let ports: serde_json::Map<String, serde_json::Value> =
                run.exposed_ports.iter().map(|p| (p.clone(), json!({}))).collect();
            set("ExposedPorts", Some(ports.into()));
        }
        let diff_ids: Vec<String> = layers.iter().map(|l| l.diff_id.to_string()).collect();
        let doc = json!({
            "architecture": "amd64",
            "os": "linux",
            "config": config,
            "rootfs": { "type": "layers", "diff_ids": diff_ids },
        });
        Pack { config: serde_json::to_vec(&doc).expect("json"), layers, name: name.map(str::to_owned) }
    }

    pub fn config_digest(&self) -> Digest {
        Digest::of(&self.config)
    }

    /// The OCI manifest, as bytes, and its digest.
    fn manifest(&self) -> (Vec<u8>, Digest) {
        let layers: Vec<_> = self
            .layers
            .iter()
            .map(|l| json!({ "mediaType": l.media_type(), "digest": Digest::of(&l.blob).to_string(), "size": l.blob.len() }))
            .collect();
        let m = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": self.config_digest().to_string(),
                "size": self.config.len(),
            },
            "layers": layers,
        });
        let bytes = serde_json::to_vec(&m).expect("json");
        let d = Digest::of(&bytes);
        (bytes, d)
    }

    /// `index.json` of an OCI layout whose manifests are `manifests`
    /// (JSON descriptors).
    fn index(manifests: Vec<serde_json::Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        }))
        .expect("json")
    }

    /// The files of the image in `format` (an OCI directory's are written
    /// as a tar's would be), in order; blobs are borrowed.
    pub fn files(&self, format: Format) -> Vec<(String, Cow<'_, [u8]>)> {
        let mut files = Vec::new();
        let blob = |d: &Digest| format!("blobs/sha256/{}", d.hex());
        let tags: Vec<String> = self.name.iter().cloned().collect();
        if format == Format::DockerLegacy {
            let config_name = format!("{}.json", self.config_digest().hex());
            files.push((config_name.clone(), Cow::Borrowed(&self.config[..])));
            let mut layer_names = Vec::new();
            for l in &self.layers {
                assert_eq!(l.compression, Compression::None, "legacy archives hold uncompressed layers");
                let name = format!("{}/layer.tar", l.diff_id.hex());
                files.push((format!("{}/VERSION", l.diff_id.hex()), Cow::Borrowed(&b"1.0"[..])));
                files.push((name.clone(), Cow::Borrowed(&l.blob[..])));
                layer_names.push(name);
            }
            let m = json!([{ "Config": config_name, "RepoTags": tags, "Layers": layer_names }]);
            files.push(("manifest.json".into(), Cow::Owned(serde_json::to_vec(&m).expect("json"))));
            return files;
        }
        let (manifest, manifest_digest) = self.manifest();
        files.push(("oci-layout".into(), Cow::Borrowed(&br#"{"imageLayoutVersion":"1.0.0"}"#[..])));
        files.push((blob(&self.config_digest()), Cow::Borrowed(&self.config[..])));
        for l in &self.layers {
            files.push((blob(&Digest::of(&l.blob)), Cow::Borrowed(&l.blob[..])));
        }
        files.push((blob(&manifest_digest), Cow::Owned(manifest.clone())));
        let mut descriptor = json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest.to_string(),
            "size": manifest.len(),
        });
        if let Some(name) = &self.name {
            descriptor["annotations"] = json!({ "io.containerd.image.name": name });
        }
        files.push(("index.json".into(), Cow::Owned(Pack::index(vec![descriptor]))));
        if format == Format::DockerOci {
            let layers: Vec<String> = self.layers.iter().map(|l| blob(&Digest::of(&l.blob))).collect();
            let m = json!([{ "Config": blob(&self.config_digest()), "RepoTags": tags, "Layers": layers }]);
            files.push(("manifest.json".into(), Cow::Owned(serde_json::to_vec(&m).expect("json"))));
        }
        files
    }

    /// Writes the image to `out` (a directory for `OciDir`, else a tar).
    pub fn write(&self, format: Format, out: &Path) -> Result<()> {
        let files = self.files(format);
        if format == Format::OciDir {
            return write_dir(out, &files);
        }
        write_tar(out, &files)
    }
}

/// Writes `files` under `dir`, creating their directories.
pub fn write_dir<B: AsRef<[u8]>>(dir: &Path, files: &[(String, B)]) -> Result<()> {
    for (name, data) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().expect("a parent")).map_err(io("writing an image", dir))?;
        std::fs::write(&p, data.as_ref()).map_err(io("writing an image", &p))?;
    }
    Ok(())
}

/// Writes `files` as a tar with fixed times and owners.
pub fn write_tar<B: AsRef<[u8]>>(out: &Path, files: &[(String, B)]) -> Result<()> {
    let f = std::fs::File::create(out).map_err(io("writing an image", out))?;
    let mut b = tar::Builder::new(std::io::BufWriter::new(f));
    for (name, data) in files {
        let data = data.as_ref();
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data).map_err(io("writing an image", out))?;
    }
    b.into_inner().and_then(|mut w| w.flush()).map_err(io("writing an image", out))
}
