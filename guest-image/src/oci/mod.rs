//! Container images: what users bring their system as.
//!
//! - `load`: reads `docker save`/`podman save` archives (both the legacy
//!   `manifest.json` layout and the OCI layout newer Docker writes inside
//!   the tar) and OCI image layout directories, verifies every digest, and
//!   imports them into the store.
//! - `registry`: pulls images from registries through the same
//!   verification into the store; `distribution` speaks their protocol
//!   (the OCI distribution API), every body read with a bound.
//! - `store`: the content-addressed local store (each blob once, images
//!   by config digest, tags naming them).
//! - `layers`: applies an image's layers to a directory, exactly (whiteouts,
//!   opaque directories, hardlinks, modes, owners, mtimes) and safely (no
//!   entry can write outside the root).
//! - `rootfs`: builds the read-only, reproducible ext4 base a node boots.
//! - `pack`: writes images in those formats (tests and the test images).
//!
//! Crates: `oci-spec` for the OCI JSON documents (maintained by the youki
//! project, the types the specification defines), `tar`, `flate2` and
//! `zstd` for layers, `sha2` for digests.

pub mod debian;
pub mod distribution;
pub mod layers;
pub mod load;
pub mod pack;
pub mod registry;
pub mod rootfs;
pub mod store;

use std::fmt;
use std::io::{self, Read, Write};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::error::{invalid, Result};

/// A `sha256:<64 lowercase hex>` content digest. Parsing validates it, so
/// its hex part is safe to use as a file name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> std::result::Result<Digest, String> {
        let hex = s.strip_prefix("sha256:").ok_or_else(|| format!("digest {s:?} is not sha256"))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!("digest {s:?} is not 64 lowercase hex digits"));
        }
        Ok(Digest(hex.to_owned()))
    }

    /// Parses `s`, or says which document (`at`) held the bad digest.
    pub fn parse_at(s: &str, at: impl fmt::Display) -> Result<Digest> {
        Digest::parse(s).map_err(|why| invalid(at, why))
    }

    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest(hex::encode(Sha256::digest(bytes)))
    }

    pub fn hex(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, as `docker images` shows image ids.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

impl TryFrom<String> for Digest {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Digest, String> {
        Digest::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

/// Counts and hashes what passes through it.
pub struct Hashing<T> {
    inner: T,
    hasher: Sha256,
    bytes: u64,
}

impl<T> Hashing<T> {
    pub fn new(inner: T) -> Hashing<T> {
        use sha2::Digest as _;
        Hashing { inner, hasher: Sha256::new(), bytes: 0 }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn finish(self) -> (Digest, u64, T) {
        use sha2::Digest as _;
        (Digest(hex::encode(self.hasher.finalize())), self.bytes, self.inner)
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        use sha2::Digest as _;
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use sha2::Digest as _;
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// How a layer blob is compressed, told by its first bytes (media types
/// lie: Docker's legacy archives call every layer a tar).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn sniff(head: &[u8]) -> Compression {
        match head {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
            _ => Compression::None,
        }
    }

    /// Sniffs the compression of `input` (a file, usually) and returns a
    /// reader of its decompressed bytes.
    pub fn open(input: impl Read + 'static) -> io::Result<(Compression, Box<dyn Read>)> {
        let mut reader = io::BufReader::with_capacity(1 << 16, input);
        let head = io::BufRead::fill_buf(&mut reader)?;
        let c = Compression::sniff(head);
        let r: Box<dyn Read> = match c {
            Compression::None => Box::new(reader),
            // MultiGzDecoder: a gzip stream may have several members.
            Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(reader)),
            Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(reader)?),
        };
        Ok((c, r))
    }
}

/// Bound on what one image may hold, uncompressed: a layer that inflates
/// beyond it (a compression bomb) is refused before it fills the disk.
pub const MAX_IMAGE_BYTES: u64 = 64 << 30;

/// Bound on the JSON documents of an image (manifests, indexes, configs),
/// which are read into memory.
pub const MAX_DOCUMENT_BYTES: u64 = 16 << 20;

/// A normalized image reference: `redis` → `redis:latest`; a digest or a
/// name with a tag is kept as it is.
pub fn normalize_name(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if last.contains(':') || last.contains('@') {
        name.to_owned()
    } else {
        format!("{name}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_validated() {
        let d = Digest::of(b"");
        assert_eq!(d.to_string(), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert!(Digest::parse("sha512:00").is_err());
        assert!(Digest::parse("sha256:../../etc/passwd").is_err());
        assert!(Digest::parse(&format!("sha256:{}", "A".repeat(64))).is_err());
    }

    #[test]
    fn names_get_the_latest_tag() {
        assert_eq!(normalize_name("redis"), "redis:latest");
        assert_eq!(normalize_name("redis:7"), "redis:7");
        assert_eq!(normalize_name("localhost:5000/app"), "localhost:5000/app:latest");
        assert_eq!(normalize_name("localhost:5000/app:v1"), "localhost:5000/app:v1");
    }
}
