//! Pulling images from registries that speak the OCI distribution API
//! (Docker Hub, GHCR, Quay, Harbor, ECR, a `registry:2` of one's own).
//!
//! The protocol is the ORAS project's `oci-client`: tags and digests,
//! image indexes, anonymous, basic and bearer-token auth. hvsim adds what
//! a pull into its store needs:
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
use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use oci_client::client::{linux_amd64_resolver, Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::load::{check_layer_count, Found, FoundLayer, Staged};
use super::store::{ImageRecord, Store};
use super::{normalize_name, Digest, Hashing, MAX_DOCUMENT_BYTES, MAX_IMAGE_BYTES};
use crate::error::{invalid, io, ImageError, Result};

/// How hvsim reaches registries: set by `--insecure-registry` and
/// `--registry-ca`, or these variables (which a replay's pull reads).
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// Registries (`host[:port]`) spoken to in plain HTTP.
    pub insecure: Vec<String>,
    /// A PEM file of certificate authorities trusted besides the system's.
    pub ca_file: Option<PathBuf>,
}

/// Comma-separated registries spoken to in plain HTTP.
pub const INSECURE_ENV: &str = "HVSIM_INSECURE_REGISTRIES";
/// A PEM file of certificate authorities.
pub const CA_ENV: &str = "HVSIM_REGISTRY_CA";

impl Access {
    /// What the environment says (`--insecure-registry` and `--registry-ca`
    /// default to it too).
    pub fn from_env() -> Access {
        let insecure = std::env::var(INSECURE_ENV).unwrap_or_default();
        Access {
            insecure: insecure.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            ca_file: std::env::var_os(CA_ENV).filter(|v| !v.is_empty()).map(PathBuf::from),
        }
    }
}

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

/// Seconds a registry may take to accept a connection, and to send the
/// next bytes of a response, before the pull fails rather than hangs.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const READ_TIMEOUT: Duration = Duration::from_secs(120);

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
    let client = client(access)?;
    let auth = credentials(parsed)?;
    let fail = |e: oci_client::errors::OciDistributionError| invalid(&at, explain(e, parsed, access));
    client.auth(parsed, &auth, RegistryOperation::Pull).await.map_err(fail)?;
    let (manifest, manifest_digest, index_digest) =
        client.pull_image_manifest_and_list_digest(parsed, &auth).await.map_err(fail)?;
    let repo_digest = format!(
        "{}/{}@{}",
        parsed.registry(),
        parsed.repository(),
        Digest::parse_at(index_digest.as_deref().unwrap_or(&manifest_digest), &at)?
    );
    check_layer_count(manifest.layers.len(), &at)?;
    if u64::try_from(manifest.config.size).map_or(true, |n| n > MAX_DOCUMENT_BYTES) {
        return Err(invalid(
            &at,
            format!("its config is {} bytes; hvsim reads configs up to 16 MiB", manifest.config.size),
        ));
    }

    let total = pull_size(manifest.layers.iter().chain([&manifest.config]).map(|d| (d.digest.as_str(), d.size)), &at)?;
    let scratch = store.scratch()?;
    let bar = crate::progress::bar(total).with_style(
        indicatif::ProgressStyle::with_template(&format!(
            "hvsim: pulling {reference} {{bar:30}} {{bytes}}/{{total_bytes}}"
        ))
        .expect("valid template"),
    );
    let mut fetched = (0usize, 0u64);
    let mut staged = Vec::new();
    for (i, d) in [&manifest.config].into_iter().chain(&manifest.layers).enumerate() {
        let digest = Digest::parse_at(&d.digest, &at)?;
        let size = u64::try_from(d.size).map_err(|_| invalid(&at, format!("blob {digest} has size {}", d.size)))?;
        if store.blob_path(&digest).exists() {
            // Verified when it entered the store; verified again below.
            bar.inc(size);
            staged.push(Staged { path: store.blob_path(&digest), digest, size });
            continue;
        }
        let dest = scratch.path().join(format!("b{i}"));
        staged.push(fetch_blob(&client, parsed, d, &digest, size, &dest, &bar, &at).await?);
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
/// a size below zero, a sum that overflows, or a pull beyond
/// [`MAX_IMAGE_BYTES`] (hvsim's bound on an image, and so on a pull) is
/// refused before anything is fetched.
fn pull_size<'a>(blobs: impl Iterator<Item = (&'a str, i64)>, at: &str) -> Result<u64> {
    let mut total = 0u64;
    for (digest, size) in blobs {
        let size = u64::try_from(size).map_err(|_| invalid(at, format!("blob {digest} has size {size}")))?;
        total = total.checked_add(size).filter(|&t| t <= MAX_IMAGE_BYTES).ok_or_else(|| {
            invalid(at, format!("its blobs add up to more than an image may hold ({MAX_IMAGE_BYTES} bytes)"))
        })?;
    }
    Ok(total)
}

/// Downloads one blob into `dest`, hashing it as it arrives: it must hash
/// to `digest` and be `size` bytes (a registry that sends more is cut off
/// at once, not after filling the disk).
#[allow(clippy::too_many_arguments)]
async fn fetch_blob(
    client: &Client,
    reference: &Reference,
    d: &OciDescriptor,
    digest: &Digest,
    size: u64,
    dest: &std::path::Path,
    bar: &indicatif::ProgressBar,
    at: &str,
) -> Result<Staged> {
    if size > MAX_IMAGE_BYTES {
        return Err(invalid(at, format!("blob {digest} is {size} bytes, more than an image may hold")));
    }
    let mut stream = client
        .pull_blob_stream(reference, d)
        .await
        .map_err(|e| invalid(at, format!("blob {digest}: {}", chain(&e))))?;
    let file = File::create(dest).map_err(io("staging a pulled blob", dest))?;
    let mut out = Hashing::new(std::io::BufWriter::new(file));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| invalid(at, format!("blob {digest}: the download broke off: {e}")))?;
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

fn client(access: &Access) -> Result<Client> {
    let mut extra_root_certificates = Vec::new();
    if let Some(ca) = &access.ca_file {
        let data = std::fs::read(ca).map_err(io("reading the registry CA file", ca))?;
        if !data.windows(11).any(|w| w == b"-----BEGIN ") {
            return Err(invalid(ca.display(), "not a PEM certificate file (--registry-ca)"));
        }
        extra_root_certificates.push(Certificate { encoding: CertificateEncoding::Pem, data });
    }
    // reqwest's TLS takes its crypto from the process default, set once.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(access.insecure.clone()),
        extra_root_certificates,
        platform_resolver: Some(Box::new(linux_amd64_resolver)),
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(READ_TIMEOUT),
        user_agent: concat!("hvsim/", env!("CARGO_PKG_VERSION")),
        ..ClientConfig::default()
    }))
}

/// The user's credentials for the reference's registry, as `docker login`
/// left them; anonymous where there are none.
fn credentials(reference: &Reference) -> Result<RegistryAuth> {
    use docker_credential::{CredentialRetrievalError as E, DockerCredential};
    // Docker keeps Docker Hub's under its old index address.
    let server = match reference.registry() {
        "docker.io" => "https://index.docker.io/v1/",
        r => r,
    };
    match docker_credential::get_credential(server) {
        Ok(DockerCredential::UsernamePassword(user, password)) => Ok(RegistryAuth::Basic(user, password)),
        Ok(DockerCredential::IdentityToken(_)) => Err(ImageError::Setup(format!(
            "the Docker config's credentials for {server} are an identity token, which hvsim cannot use; \
             log in with a user name and password or token (`docker login -u`)"
        ))),
        Err(E::ConfigNotFound | E::NoCredentialConfigured | E::ConfigReadError) => Ok(RegistryAuth::Anonymous),
        // A helper's failure quotes its output over several lines: one line here.
        Err(e) => Err(ImageError::Setup(format!(
            "the Docker config's credentials for {server}: {}",
            e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
        ))),
    }
}

/// A registry error as one line, with what to try where hvsim knows.
fn explain(e: oci_client::errors::OciDistributionError, r: &Reference, access: &Access) -> String {
    use oci_client::errors::OciDistributionError as E;
    let registry = r.resolve_registry();
    let text = chain(&e);
    match e {
        E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => {
            format!("{text} (log in with `docker login {registry}`, or name a credential helper in the Docker config)")
        }
        E::ImageManifestNotFoundError(_) => format!("{text} (hvsim runs linux/amd64 images)"),
        _ if text.contains("certificate") || text.contains("UnknownIssuer") => {
            format!("{text} (a registry with a private CA: --registry-ca FILE)")
        }
        _ if text.contains("error sending request")
            && !access.insecure.iter().any(|i| i == registry)
            && (registry.starts_with("localhost") || registry.starts_with("127.")) =>
        {
            format!("{text} (a registry that speaks plain HTTP: --insecure-registry {registry})")
        }
        _ => text,
    }
}

/// An error and its sources, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let t = inner.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_is_bounded_in_all_and_its_sizes_summed_with_checks() {
        let at = "pulling x";
        let ok = pull_size([("a", 5), ("b", 7)].into_iter(), at).unwrap();
        assert_eq!(ok, 12);
        let err = |blobs: &[(&str, i64)]| pull_size(blobs.iter().copied(), at).unwrap_err().to_string();
        assert!(err(&[("a", -1)]).contains("blob a has size -1"));
        assert!(err(&[("a", i64::MAX), ("b", i64::MAX), ("c", i64::MAX)]).contains("more than an image may hold"));
        assert!(err(&[("a", (MAX_IMAGE_BYTES / 2) as i64), ("b", (MAX_IMAGE_BYTES / 2 + 1) as i64)])
            .contains("more than an image may hold"));
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
