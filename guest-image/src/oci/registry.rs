//! Pulling images from registries that speak the OCI distribution API
//! (Docker Hub, GHCR, Quay, Harbor, ECR, a `registry:2` of one's own).
//!
//! The protocol is spoken by [`super::distribution`]: tags and digests,
//! image indexes, anonymous, basic and bearer-token auth, every body read
//! with a bound. This module adds what a pull into its store needs:
//! - credentials from the user's Docker config (`$DOCKER_CONFIG` or
//!   `~/.docker/config.json`, its `auths`, `credsStore` and `credHelpers`),
//!   read by the `docker_credential` crate;
//! - plain HTTP only to the registries the user names as insecure, and a
//!   CA file for registries with a private certificate authority;
//! - the linux/amd64 image of an index (hvsim runs nothing else);
//! - every blob hashed as it arrives and checked against its descriptor,
//!   then every layer decompressed and checked against the config's
//!   `diff_ids` by the same code `hvsim image load` uses ([`super::load`]),
//!   before anything enters the store.
//!
//! A pulled image is tagged with the reference it was pulled by and with
//! its repository digest (`host/repo@sha256:…`, the digest the tag named
//! then), which runs record so a replay uses, and pulls, exactly the same
//! bytes.

use std::fs::File;
use std::io::Write;

use oci_spec::distribution::Reference;

use super::distribution::{chain, document, linux_amd64, one_line, Document, Session};
pub use super::distribution::{Access, CA_ENV, INSECURE_ENV};
use super::load::{check_layer_count, Found, FoundLayer, Staged};
use super::store::{ImageRecord, Store};
use super::{normalize_name, Digest, Hashing, MAX_DOCUMENT_BYTES, MAX_IMAGE_BYTES};
use crate::error::{invalid, io, ImageError, Result};

/// When `--compose` and `--image` pull an image (`docker compose --pull`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PullPolicy {
    /// Only images the store lacks.
    #[default]
    Missing,
    /// Every image named by a registry reference, even if the store has it.
    Always,
    /// None: an image the store lacks is an error.
    Never,
}

/// What [`pull`] put in the store.
#[derive(Debug)]
pub struct Pulled {
    pub record: ImageRecord,
    pub tags: Vec<String>,
    /// `host/repo@sha256:…`: what the reference named when it was pulled.
    pub repo_digest: String,
    /// Blobs downloaded, and their bytes; layers the store already had are
    /// not downloaded again.
    pub blobs_fetched: usize,
    pub bytes_fetched: u64,
}

/// Pulls `reference` (`redis:7`, `ghcr.io/org/app@sha256:…`) into the store.
pub fn pull(store: &Store, reference: &str, access: &Access) -> Result<Pulled> {
    let parsed = parse_reference(reference)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the registry client", store.dir()))?;
    runtime.block_on(pull_async(store, reference, &parsed, access))
}

/// The images `names` that `policy` says to pull, pulled; the rest must
/// be in the store already (or be made by hvsim, like `hvsim image debian`).
pub fn ensure(store: &Store, names: &[String], policy: PullPolicy, access: &Access) -> Result<Vec<Pulled>> {
    let mut pulled = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        if !seen.insert(normalize_name(name)) {
            continue;
        }
        let have = store.resolve(name).is_ok();
        match policy {
            PullPolicy::Never if !have => {
                return Err(ImageError::Setup(format!(
                    "image {name} is not in the image store {} and --pull never forbids pulling it",
                    store.dir().display()
                )))
            }
            PullPolicy::Missing if have => {}
            PullPolicy::Never => {}
            PullPolicy::Missing | PullPolicy::Always => {
                let p = pull(store, name, access)?;
                crate::note!(
                    "hvsim: pulled {name}: {} ({} blobs, {:.1} MiB downloaded)",
                    p.repo_digest,
                    p.blobs_fetched,
                    p.bytes_fetched as f64 / (1 << 20) as f64
                );
                pulled.push(p);
            }
        }
    }
    Ok(pulled)
}

/// The reference as a registry names it; `redis` is Docker Hub's
/// `docker.io/library/redis:latest`.
fn parse_reference(reference: &str) -> Result<Reference> {
    let r: Reference = reference.parse().map_err(|e| invalid(format!("image {reference}"), format!("{e}")))?;
    if let Some(d) = r.digest() {
        Digest::parse(d).map_err(|why| invalid(format!("image {reference}"), why))?;
    }
    Ok(r)
}

async fn pull_async(store: &Store, reference: &str, parsed: &Reference, access: &Access) -> Result<Pulled> {
    let at = format!("pulling {reference}");
    let fail = |why: String| invalid(&at, why);
    let mut session = Session::open(parsed, access, credentials(parsed)?).await.map_err(fail)?;
    let top = session.manifest(parsed.digest().or(parsed.tag()).unwrap_or("latest")).await.map_err(fail)?;
    if let Some(named) = parsed.digest() {
        if top.digest.to_string() != named {
            return Err(fail(format!("the registry sent a manifest whose digest is {}", top.digest)));
        }
    }
    let (manifest, manifest_digest) = match document(&top.bytes, top.content_type.as_deref()).map_err(fail)? {
        Document::Image(m) => (m, top.digest.clone()),
        Document::Index(index) => {
            let d = linux_amd64(&index).map_err(fail)?;
            let named = Digest::parse_at(d.digest().as_ref(), &at)?;
            let inner = session.manifest(&named.to_string()).await.map_err(fail)?;
            if inner.digest != named || inner.bytes.len() as u64 != d.size() {
                return Err(fail(format!(
                    "the registry sent another manifest for {named} (it hashes to {})",
                    inner.digest
                )));
            }
            match document(&inner.bytes, inner.content_type.as_deref()).map_err(fail)? {
                Document::Image(m) => (m, named),
                Document::Index(_) => return Err(fail(format!("{named}, the index's linux/amd64 image, is an index"))),
            }
        }
    };
    let repo_digest = format!("{}/{}@{}", parsed.registry(), parsed.repository(), top.digest);
    check_layer_count(manifest.layers().len(), &at)?;
    if manifest.config().size() > MAX_DOCUMENT_BYTES {
        return Err(fail(format!(
            "its config is {} bytes; hvsim reads configs up to 16 MiB",
            manifest.config().size()
        )));
    }

    let blobs = || [manifest.config()].into_iter().chain(manifest.layers());
    let total = pull_size(blobs().map(|d| (d.digest().as_ref(), d.size())), &at)?;
    let scratch = store.scratch()?;
    let bar = crate::progress::bar(total).with_style(
        indicatif::ProgressStyle::with_template(&format!(
            "hvsim: pulling {reference} {{bar:30}} {{bytes}}/{{total_bytes}}"
        ))
        .expect("valid template"),
    );
    let mut fetched = (0usize, 0u64);
    let mut staged = Vec::new();
    for (i, d) in blobs().enumerate() {
        let digest = Digest::parse_at(d.digest().as_ref(), &at)?;
        let size = d.size();
        if store.blob_path(&digest).exists() {
            // Verified when it entered the store; verified again below.
            bar.inc(size);
            staged.push(Staged { path: store.blob_path(&digest), digest, size });
            continue;
        }
        let dest = scratch.path().join(format!("b{i}"));
        staged.push(fetch_blob(&mut session, &digest, size, &dest, &bar, &at).await?);
        fetched = (fetched.0 + 1, fetched.1 + size);
    }
    let config = staged.remove(0);
    let layers = staged.into_iter().map(|staged| FoundLayer { name: staged.digest.to_string(), staged }).collect();
    let mut names = vec![normalize_name(reference)];
    if names[0] != repo_digest {
        names.push(repo_digest.clone());
    }
    let found = Found { names: names.clone(), config, layers };
    bar.set_position(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template("hvsim: verifying layers {bar:30} {bytes}/{total_bytes}")
            .expect("static template"),
    );
    let mut record = found.verify_and_store(store, &at, &bar)?;
    bar.finish_and_clear();
    record.source = format!("pulled {reference} ({repo_digest}, manifest {manifest_digest})");
    record.repo_digest = Some(repo_digest.clone());
    store.put_image(&record, &names)?;
    Ok(Pulled { record, tags: names, repo_digest, blobs_fetched: fetched.0, bytes_fetched: fetched.1 })
}

/// The bytes a pull fetches at most, from its descriptors' (digest, size):
/// a sum that overflows, or a pull beyond
/// [`MAX_IMAGE_BYTES`] (hvsim's bound on an image, and so on a pull) is
/// refused before anything is fetched. (A size below zero does not parse.)
fn pull_size<'a>(blobs: impl Iterator<Item = (&'a str, u64)>, at: &str) -> Result<u64> {
    let mut total = 0u64;
    for (_, size) in blobs {
        total = total.checked_add(size).filter(|&t| t <= MAX_IMAGE_BYTES).ok_or_else(|| {
            invalid(at, format!("its blobs add up to more than an image may hold ({MAX_IMAGE_BYTES} bytes)"))
        })?;
    }
    Ok(total)
}

/// Downloads one blob into `dest`, hashing it as it arrives: it must hash
/// to `digest` and be `size` bytes (a registry that sends more is cut off
/// at once, not after filling the disk).
async fn fetch_blob(
    session: &mut Session<'_>,
    digest: &Digest,
    size: u64,
    dest: &std::path::Path,
    bar: &indicatif::ProgressBar,
    at: &str,
) -> Result<Staged> {
    if size > MAX_IMAGE_BYTES {
        return Err(invalid(at, format!("blob {digest} is {size} bytes, more than an image may hold")));
    }
    let mut response = session.blob(digest).await.map_err(|e| invalid(at, format!("blob {digest}: {e}")))?;
    if response.content_length().is_some_and(|n| n > size) {
        return Err(invalid(at, format!("blob {digest}: the registry sends more than its {size} bytes")));
    }
    let file = File::create(dest).map_err(io("staging a pulled blob", dest))?;
    let mut out = Hashing::new(std::io::BufWriter::new(file));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| invalid(at, format!("blob {digest}: the download broke off: {}", chain(&e))))?
    {
        if out.bytes() + chunk.len() as u64 > size {
            return Err(invalid(at, format!("blob {digest}: the registry sent more than its {size} bytes")));
        }
        out.write_all(&chunk).map_err(io("staging a pulled blob", dest))?;
        bar.inc(chunk.len() as u64);
    }
    out.flush().map_err(io("staging a pulled blob", dest))?;
    let (got, bytes, _) = out.finish();
    if bytes != size {
        return Err(invalid(at, format!("blob {digest}: {bytes} bytes arrived, its descriptor says {size}")));
    }
    if got != *digest {
        return Err(invalid(at, format!("blob {digest}: digest mismatch (what arrived hashes to {got})")));
    }
    Ok(Staged { path: dest.to_owned(), digest: got, size })
}

/// The user's credentials for the reference's registry, as `docker login`
/// left them; anonymous where there are none.
fn credentials(reference: &Reference) -> Result<Option<(String, String)>> {
    use docker_credential::{CredentialRetrievalError as E, DockerCredential};
    // Docker keeps Docker Hub's under its old index address.
    let server = match reference.registry() {
        "docker.io" => "https://index.docker.io/v1/",
        r => r,
    };
    match docker_credential::get_credential(server) {
        Ok(DockerCredential::UsernamePassword(user, password)) => Ok(Some((user, password))),
        Ok(DockerCredential::IdentityToken(_)) => Err(ImageError::Setup(format!(
            "the Docker config's credentials for {server} are an identity token, which hvsim cannot use; \
             log in with a user name and password or token (`docker login -u`)"
        ))),
        Err(E::ConfigNotFound | E::NoCredentialConfigured | E::ConfigReadError) => Ok(None),
        // A helper's failure quotes its output over several lines: one line here.
        Err(e) => Err(ImageError::Setup(format!(
            "the Docker config's credentials for {server}: {}",
            one_line(&e.to_string(), usize::MAX)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_is_bounded_in_all_and_its_sizes_summed_with_checks() {
        let at = "pulling x";
        let ok = pull_size([("a", 5), ("b", 7)].into_iter(), at).unwrap();
        assert_eq!(ok, 12);
        let err = |blobs: &[(&str, u64)]| pull_size(blobs.iter().copied(), at).unwrap_err().to_string();
        assert!(err(&[("a", u64::MAX), ("b", u64::MAX)]).contains("more than an image may hold"));
        assert!(
            err(&[("a", MAX_IMAGE_BYTES / 2), ("b", MAX_IMAGE_BYTES / 2 + 1)]).contains("more than an image may hold")
        );
    }

    #[test]
    fn references_are_what_docker_calls_them() {
        let r = parse_reference("redis").unwrap();
        assert_eq!((r.registry(), r.repository(), r.tag()), ("docker.io", "library/redis", Some("latest")));
        let r = parse_reference("127.0.0.1:5000/team/db:1.4").unwrap();
        assert_eq!((r.registry(), r.repository(), r.tag()), ("127.0.0.1:5000", "team/db", Some("1.4")));
        let d = Digest::of(b"x");
        let r = parse_reference(&format!("ghcr.io/org/app@{d}")).unwrap();
        assert_eq!(r.digest(), Some(d.to_string().as_str()));
        let e = parse_reference("no spaces/here").unwrap_err().to_string();
        assert!(e.starts_with("image no spaces/here: "), "{e}");
    }

    #[test]
    fn never_refuses_what_the_store_lacks_without_asking_a_registry() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::at(dir.path().to_owned()).unwrap();
        let e = ensure(&store, &["127.0.0.1:1/none:1".into()], PullPolicy::Never, &Access::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("127.0.0.1:1/none:1 is not in the image store") && e.contains("--pull never"), "{e}");
        // An unreachable registry is a one-line error naming it.
        let e = ensure(&store, &["127.0.0.1:1/none:1".into()], PullPolicy::Missing, &Access::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("pulling 127.0.0.1:1/none:1: ") && !e.contains('\n'), "{e}");
    }
}
