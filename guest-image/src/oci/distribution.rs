//! The OCI distribution API, as much of it as a pull needs: the `/v2/`
//! check, manifests and indexes by tag or digest, blobs, and the two ways
//! registries ask for credentials (HTTP basic auth, and Docker's bearer
//! tokens from the realm a `WWW-Authenticate` challenge names).
//!
//! A registry is untrusted input, like a guest: every body hvsim reads
//! into memory is read with a bound it checks as the bytes arrive (a
//! manifest or index [`MAX_MANIFEST_BYTES`], a token response
//! [`MAX_TOKEN_BYTES`], an error body [`MAX_ERROR_BYTES`]) and within
//! [`DOCUMENT_TIMEOUT`], so an endless or trickling body ends in a one-line
//! error rather than in the kernel's OOM killer. Blobs are not read into
//! memory: the caller streams them to disk within their descriptor's size.
//! (hvsim used the `oci-client` crate until it read every body whole.)
//!
//! The parsers a registry's bytes reach — [`challenge`], [`token`],
//! [`error_text`], [`document`] — are plain functions, fuzzed by the
//! `registry` target (docs/fuzzing.md).

use std::path::PathBuf;
use std::time::Duration;

use oci_spec::distribution::Reference;
use oci_spec::image::{Arch, Descriptor, ImageIndex, ImageManifest, MediaType, Os};
use reqwest::{header, StatusCode};

use super::Digest;

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

/// Bound on a manifest or index: the distribution specification asks
/// registries to accept manifests of 4 MiB, and none larger need be.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Bound on a token service's answer (a token is a few KiB).
pub const MAX_TOKEN_BYTES: u64 = 1 << 20;
/// Bound on an error's body: only its first message is shown.
pub const MAX_ERROR_BYTES: u64 = 64 << 10;
/// Time a request whose body is read into memory may take in all; a blob
/// has none (it may be gigabytes), only the client's read timeout.
pub const DOCUMENT_TIMEOUT: Duration = Duration::from_secs(300);

/// Time an error's body may take: it only adds detail to the error.
const ERROR_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// What a pull accepts as a manifest, the image's and its index's, OCI's
/// and Docker's.
const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// A `WWW-Authenticate` challenge hvsim can answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    /// Docker's token auth: a token from `realm` for `service` and `scope`.
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// The challenge to answer among those a header offers (a bearer token
/// where offered, as Docker does), or why none can be.
pub fn challenge(header: &str) -> Result<Challenge, String> {
    let offered = http_auth::parse_challenges(header)
        .map_err(|e| format!("an unreadable WWW-Authenticate challenge ({})", one_line(&e.to_string(), 120)))?;
    let param = |c: &http_auth::ChallengeRef, name: &str| {
        c.params.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.to_unescaped())
    };
    if let Some(c) = offered.iter().find(|c| c.scheme.eq_ignore_ascii_case("bearer")) {
        let realm = param(c, "realm").ok_or("a bearer challenge without a realm")?;
        if !(realm.starts_with("https://") || realm.starts_with("http://")) {
            return Err(format!("a bearer challenge whose realm {:?} is not an HTTP URL", one_line(&realm, 120)));
        }
        return Ok(Challenge::Bearer { realm, service: param(c, "service"), scope: param(c, "scope") });
    }
    if offered.iter().any(|c| c.scheme.eq_ignore_ascii_case("basic")) {
        return Ok(Challenge::Basic);
    }
    let schemes: Vec<&str> = offered.iter().map(|c| c.scheme).collect();
    Err(format!("the registry asks for {} auth, which hvsim does not speak", one_line(&schemes.join(", "), 120)))
}

/// The token in a token service's answer (`token`, or OAuth's
/// `access_token`).
pub fn token(body: &[u8]) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        token: Option<String>,
        access_token: Option<String>,
    }
    let a: Answer = serde_json::from_slice(body).map_err(|e| format!("the token service's answer is not JSON: {e}"))?;
    let t = a.token.or(a.access_token).filter(|t| !t.is_empty()).ok_or("the token service's answer holds no token")?;
    // Sent back as a header value: nothing a header cannot hold.
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token service's token is not printable ASCII".into());
    }
    Ok(t)
}

/// An error response as one line: the distribution API's first
/// `{"errors":[{"code","message"}]}`, or the start of the body.
pub fn error_text(status: u16, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Errors {
        errors: Vec<Error>,
    }
    #[derive(serde::Deserialize)]
    struct Error {
        code: Option<String>,
        message: Option<String>,
    }
    let detail = match serde_json::from_slice::<Errors>(body) {
        Ok(e) => e
            .errors
            .first()
            .map(|e| [e.code.as_deref(), e.message.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(": "))
            .unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    };
    let detail = one_line(&detail, 200);
    if detail.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {detail}")
    }
}

/// A manifest as a pull uses it.
#[derive(Debug)]
pub enum Document {
    Image(Box<ImageManifest>),
    Index(Box<ImageIndex>),
}

/// Parses a manifest or an index, by the type the registry gave it, else
/// by its `mediaType`, else by its shape.
pub fn document(bytes: &[u8], content_type: Option<&str>) -> Result<Document, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Shape {
        media_type: Option<String>,
        manifests: Option<serde::de::IgnoredAny>,
    }
    let shape: Shape = serde_json::from_slice(bytes).map_err(|e| format!("a manifest that is not JSON: {e}"))?;
    let kind = content_type.map(|c| c.split(';').next().unwrap_or("").trim()).filter(|c| c.starts_with("application/"));
    let index = match kind.or(shape.media_type.as_deref()) {
        Some(t) if t == MediaType::ImageIndex.as_ref() || t == DOCKER_LIST => true,
        Some(t) if t == MediaType::ImageManifest.as_ref() || t == DOCKER_MANIFEST => false,
        Some(t) => return Err(format!("a manifest of type {}, which is not an image's", one_line(t, 120))),
        None => shape.manifests.is_some(),
    };
    if index {
        ImageIndex::from_reader(bytes)
            .map(|i| Document::Index(Box::new(i)))
            .map_err(|e| format!("an unreadable index: {e}"))
    } else {
        ImageManifest::from_reader(bytes)
            .map(|m| Document::Image(Box::new(m)))
            .map_err(|e| format!("an unreadable manifest: {e}"))
    }
}

/// The index's linux/amd64 image, or the platforms it has instead.
pub fn linux_amd64(index: &ImageIndex) -> Result<&Descriptor, String> {
    let amd64 = |d: &&Descriptor| {
        d.platform().as_ref().is_some_and(|p| *p.os() == Os::Linux && *p.architecture() == Arch::Amd64)
    };
    index.manifests().iter().find(amd64).ok_or_else(|| {
        let has: Vec<String> = index
            .manifests()
            .iter()
            .filter_map(|d| d.platform().as_ref().map(|p| format!("{}/{}", p.os(), p.architecture())))
            .collect();
        one_line(&format!("no linux/amd64 image (hvsim runs linux/amd64 images; it has {})", has.join(", ")), 300)
    })
}

/// What the `registry` fuzz target checks of a reply (its first line a
/// header, the rest a body): every parser answers, never panics, and what
/// it answers holds: an error's text is one line of bounded length, a
/// realm is an HTTP URL, a token fits in a header, a chosen image is
/// linux/amd64.
pub fn check_reply(data: &[u8]) {
    let (line, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let line = String::from_utf8_lossy(line);
    if let Ok(Challenge::Bearer { realm, .. }) = challenge(&line) {
        assert!(realm.starts_with("http://") || realm.starts_with("https://"), "{realm:?}");
    }
    if let Ok(t) = token(body) {
        assert!(!t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()), "{t:?}");
    }
    let text = error_text(404, body);
    assert!(!text.contains(['\n', '\r']) && text.chars().count() <= 220, "{text:?}");
    for content_type in [None, Some(line.as_ref())] {
        if let Ok(Document::Index(index)) = document(body, content_type) {
            if let Ok(d) = linux_amd64(&index) {
                let p = d.platform().as_ref().expect("chosen by its platform");
                assert!(*p.os() == Os::Linux && *p.architecture() == Arch::Amd64);
            }
        }
    }
}

/// At most `max` characters of `s`, on one line.
pub(super) fn one_line(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// A manifest as it arrived: its bytes, their digest, and the type the
/// registry said it is.
pub struct Fetched {
    pub bytes: Vec<u8>,
    pub digest: Digest,
    pub content_type: Option<String>,
}

enum Authorization {
    None,
    Basic,
    Bearer(String),
}

/// One repository of one registry, spoken to over one connection pool.
pub struct Session<'a> {
    http: reqwest::Client,
    /// `https://host[:port]` (`http://` for an insecure registry).
    base: String,
    registry: String,
    repository: String,
    /// User name and password from the user's Docker config.
    credentials: Option<(String, String)>,
    authorization: Authorization,
    access: &'a Access,
}

impl<'a> Session<'a> {
    /// A session with `reference`'s repository, authorized as the
    /// registry's `/v2/` asks.
    pub async fn open(
        reference: &Reference,
        access: &'a Access,
        credentials: Option<(String, String)>,
    ) -> Result<Session<'a>, String> {
        let registry = reference.resolve_registry().to_owned();
        let scheme = if access.insecure.contains(&registry) { "http" } else { "https" };
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("hvsim/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &access.ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("reading the registry CA file {}: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| format!("{}: not a PEM certificate file (--registry-ca)", ca.display()))?;
            http = http.tls_certs_merge(certs);
        }
        // reqwest's TLS takes its crypto from the process default, set once.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = http.build().map_err(|e| format!("starting the registry client: {}", chain(&e)))?;
        let mut session = Session {
            http,
            base: format!("{scheme}://{registry}"),
            registry,
            repository: reference.repository().to_owned(),
            credentials,
            authorization: Authorization::None,
            access,
        };
        let v2 = format!("{}/v2/", session.base);
        session.get(&v2, None, Some(DOCUMENT_TIMEOUT)).await?;
        Ok(session)
    }

    /// The manifest or index `name` (a tag or a digest) names.
    pub async fn manifest(&mut self, name: &str) -> Result<Fetched, String> {
        let url = format!("{}/v2/{}/manifests/{name}", self.base, self.repository);
        let response = self.get(&url, Some(MANIFEST_TYPES), Some(DOCUMENT_TIMEOUT)).await?;
        let content_type =
            response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let bytes = bounded(response, MAX_MANIFEST_BYTES, "manifest").await?;
        Ok(Fetched { digest: Digest::of(&bytes), bytes, content_type })
    }

    /// The response whose body is blob `digest`, to be streamed.
    pub async fn blob(&mut self, digest: &Digest) -> Result<reqwest::Response, String> {
        let url = format!("{}/v2/{}/blobs/{digest}", self.base, self.repository);
        self.get(&url, None, None).await
    }

    /// GETs `url` with the session's authorization; a 401 is answered once
    /// (a token may also expire during a long pull) and the request sent
    /// again. Anything but success is an error, its body read with a bound.
    async fn get(
        &mut self,
        url: &str,
        accept: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, String> {
        let mut answered = false;
        loop {
            let mut request = self.http.get(url);
            if let Some(a) = accept {
                request = request.header(header::ACCEPT, a);
            }
            if let Some(t) = timeout {
                request = request.timeout(t);
            }
            request = match (&self.authorization, &self.credentials) {
                (Authorization::Bearer(t), _) => request.bearer_auth(t),
                (Authorization::Basic, Some((user, password))) => request.basic_auth(user, Some(password)),
                _ => request,
            };
            let response = request.send().await.map_err(|e| self.transport(&e))?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            if status == StatusCode::UNAUTHORIZED && !answered {
                let header = response.headers().get(header::WWW_AUTHENTICATE).and_then(|v| v.to_str().ok());
                if let Some(h) = header.map(str::to_owned) {
                    answered = true;
                    self.authorize(&h).await?;
                    continue;
                }
            }
            let text = error_text(status.as_u16(), &head(response).await);
            return Err(match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => format!(
                    "{text} (log in with `docker login {}`, or name a credential helper in the Docker config)",
                    self.registry
                ),
                _ => text,
            });
        }
    }

    /// Answers a challenge: basic auth with the user's credentials, or a
    /// bearer token for this repository from the realm it names.
    async fn authorize(&mut self, header: &str) -> Result<(), String> {
        match challenge(header)? {
            Challenge::Basic if self.credentials.is_some() => self.authorization = Authorization::Basic,
            Challenge::Basic => {
                return Err(format!(
                    "the registry asks for a password (log in with `docker login {}`, or name a credential helper in the Docker config)",
                    self.registry
                ))
            }
            Challenge::Bearer { realm, service, scope } => {
                let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
                let mut request = self.http.get(&realm).timeout(DOCUMENT_TIMEOUT).query(&[("scope", scope.as_str())]);
                if let Some(s) = &service {
                    request = request.query(&[("service", s.as_str())]);
                }
                if let Some((user, password)) = &self.credentials {
                    request = request.basic_auth(user, Some(password));
                }
                let response = request.send().await.map_err(|e| format!("the token service: {}", self.transport(&e)))?;
                let status = response.status();
                if !status.is_success() {
                    return Err(format!(
                        "the token service refused: {} (log in with `docker login {}`, or name a credential helper in the Docker config)",
                        error_text(status.as_u16(), &head(response).await),
                        self.registry
                    ));
                }
                let body = bounded(response, MAX_TOKEN_BYTES, "token").await?;
                self.authorization = Authorization::Bearer(token(&body)?);
            }
        }
        Ok(())
    }

    /// A request that did not get an answer, as one line, with what to try
    /// where hvsim knows.
    fn transport(&self, e: &reqwest::Error) -> String {
        let text = chain(e);
        let local = self.registry.starts_with("localhost") || self.registry.starts_with("127.");
        if text.contains("certificate") || text.contains("UnknownIssuer") {
            format!("{text} (a registry with a private CA: --registry-ca FILE)")
        } else if e.is_connect() || e.is_request() {
            if local && !self.access.insecure.contains(&self.registry) {
                format!("{text} (a registry that speaks plain HTTP: --insecure-registry {})", self.registry)
            } else {
                text
            }
        } else {
            text
        }
    }
}

/// A response's body, refused as soon as it passes `max` bytes (or says
/// it will).
async fn bounded(mut response: reqwest::Response, max: u64, what: &str) -> Result<Vec<u8>, String> {
    let too_long = || format!("the registry's {what} body is longer than {max} bytes, more than hvsim reads");
    if response.content_length().is_some_and(|n| n > max) {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("the {what} broke off: {}", chain(&e)))? {
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The first [`MAX_ERROR_BYTES`] of an error's body (the rest is dropped
/// with the connection); what arrived before it broke off, if it did.
/// An error's body is waited for [`ERROR_TIMEOUT`] at most.
async fn head(mut response: reqwest::Response) -> Vec<u8> {
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = MAX_ERROR_BYTES as usize - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() == MAX_ERROR_BYTES as usize {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_TIMEOUT, read).await;
    body
}

/// An error and its sources, on one line.
pub(super) fn chain(e: &dyn std::error::Error) -> String {
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
    one_line(&s, 500)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_is_answered_before_a_basic_one() {
        let c = challenge(r#"Basic realm="x", Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull""#)
            .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull".into())
            }
        );
        assert_eq!(challenge(r#"Basic realm="Registry Realm""#).unwrap(), Challenge::Basic);
        assert!(challenge(r#"Bearer service="x""#).unwrap_err().contains("without a realm"));
        assert!(challenge(r#"Bearer realm="file:///etc/passwd""#).unwrap_err().contains("not an HTTP URL"));
        assert!(challenge(r#"Negotiate abc"#).unwrap_err().contains("Negotiate"));
        assert!(challenge("\"\"\"").is_err());
    }

    #[test]
    fn tokens_errors_and_documents_are_read_or_refused_in_one_line() {
        assert_eq!(token(br#"{"token":"abc.def","expires_in":300}"#).unwrap(), "abc.def");
        assert_eq!(token(br#"{"access_token":"xyz"}"#).unwrap(), "xyz");
        assert!(token(br#"{"token":""}"#).unwrap_err().contains("no token"));
        assert!(token(b"{\"token\":\"a\\nb\"}").unwrap_err().contains("printable"));
        assert!(token(b"<html>").unwrap_err().contains("not JSON"));

        let e = error_text(404, br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest\nunknown"}]}"#);
        assert_eq!(e, "HTTP 404: MANIFEST_UNKNOWN: manifest unknown");
        assert_eq!(error_text(500, b""), "HTTP 500");
        let long = error_text(502, "<html>\n".repeat(1000).as_bytes());
        assert!(!long.contains('\n') && long.chars().count() < 220, "{long}");

        let image = br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
            "config":{"mediaType":"application/vnd.docker.container.image.v1+json","size":7,"digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},"layers":[]}"#;
        assert!(matches!(document(image, None), Ok(Document::Image(_))));
        let list = br#"{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":7,
            "digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","platform":{"os":"linux","architecture":"arm64"}}]}"#;
        let Ok(Document::Index(index)) = document(list, Some("application/vnd.oci.image.index.v1+json; charset=utf-8"))
        else {
            panic!("an index")
        };
        assert!(linux_amd64(&index).unwrap_err().contains("it has linux/arm64"));
        assert!(document(image, Some("application/vnd.oci.image.index.v1+json"))
            .unwrap_err()
            .contains("unreadable index"));
        assert!(document(br#"{"mediaType":"application/vnd.cncf.helm.config.v1+json"}"#, None)
            .unwrap_err()
            .contains("not an image's"));
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// The `registry` fuzz target's corpus and regressions, replayed; the
    /// corpus's real replies are read as what they are.
    #[test]
    fn fuzz_corpus_and_regressions_of_registry_replies() {
        let inputs = fuzz_inputs("registry");
        assert!(inputs.len() >= 9);
        for (path, data) in &inputs {
            check_reply(data);
            let name = path.file_name().unwrap().to_string_lossy();
            let (line, body) = std::str::from_utf8(data).unwrap().split_once('\n').unwrap();
            match name.as_ref() {
                "docker-hub-token" | "ghcr-token" => {
                    assert!(matches!(challenge(line), Ok(Challenge::Bearer { .. })));
                    assert!(token(body.as_bytes()).is_ok());
                }
                "oci-index" => {
                    let Ok(Document::Index(i)) = document(body.as_bytes(), None) else { panic!("{name}") };
                    assert_eq!(linux_amd64(&i).unwrap().size(), 1235);
                }
                "docker-manifest" => assert!(matches!(document(body.as_bytes(), Some(line)), Ok(Document::Image(_)))),
                "manifest-unknown" => {
                    assert_eq!(error_text(404, body.as_bytes()), "HTTP 404: MANIFEST_UNKNOWN: manifest unknown")
                }
                _ => {}
            }
        }
    }
}
