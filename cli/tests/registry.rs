//! `hvsim image pull` and the pulls of `--compose` against a real
//! registry: Debian's `docker-registry` (the CNCF distribution registry,
//! `registry:2`), on loopback, with images pushed by Debian's `skopeo`
//! (both installed by ci/test.sh). The image is the test suite's Redis
//! image, made by `hvsim image debian --redis`.
//!
//! Each test pulls into a store of its own (`HVSIM_CACHE_DIR`), so what
//! it finds there came from the registry.

mod common;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{hvsim, output, skipping};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A `docker-registry` serving on a free loopback port until dropped.
struct Registry {
    child: Child,
    addr: String,
    data: PathBuf,
}

/// How a test registry is reached.
#[derive(Default)]
struct Secured {
    /// (certificate, key) files: HTTPS instead of HTTP.
    tls: Option<(PathBuf, PathBuf)>,
    /// An htpasswd file: basic auth.
    htpasswd: Option<PathBuf>,
    /// (realm URL, certificate bundle): Docker's token auth, the tokens
    /// issued by the realm and signed by a key of the bundle's.
    token: Option<(String, PathBuf)>,
}

impl Registry {
    fn start(dir: &Path, secured: Secured) -> Registry {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let data = dir.join("registry-data");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            data.display()
        );
        if let Some((cert, key)) = &secured.tls {
            config += &format!("  tls:\n    certificate: {}\n    key: {}\n", cert.display(), key.display());
        }
        if let Some(h) = &secured.htpasswd {
            config += &format!("auth:\n  htpasswd:\n    realm: hvsim-test\n    path: {}\n", h.display());
        }
        if let Some((realm, bundle)) = &secured.token {
            config += &format!(
                "auth:\n  token:\n    realm: {realm}\n    service: hvsim-test\n    issuer: hvsim-test-issuer\n    rootcertbundle: {}\n",
                bundle.display()
            );
        }
        let file = dir.join("registry.yml");
        std::fs::write(&file, config).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("registry.log")).unwrap())
            .spawn()
            .expect("docker-registry starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { child, addr, data }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the registry and skopeo are here (ci/test.sh installs them).
fn tools_available() -> bool {
    for tool in ["docker-registry", "skopeo"] {
        if Command::new(tool).arg("--version").output().is_err() {
            skipping(&format!("{tool} is not installed (Debian's docker-registry and skopeo)"), false);
            return false;
        }
    }
    true
}

/// `skopeo copy SRC docker://DEST` with `more` options.
fn push(src: &str, dest: &str, more: &[&str]) {
    let o = Command::new("skopeo")
        .args(["--insecure-policy", "copy", "--quiet"])
        .args(more)
        .arg(src)
        .arg(format!("docker://{dest}"))
        .output()
        .unwrap();
    assert!(o.status.success(), "skopeo copy {src} {dest}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `hvsim ARGS` with the image store in `cache` (and `env`); its exit
/// status, its output as JSON (if it is JSON) and its stderr.
fn hvsim_in(cache: &Path, args: &[&str], env: &[(&str, &Path)]) -> (i32, Value, String) {
    let mut c = hvsim();
    c.env("HVSIM_CACHE_DIR", cache).env_remove("HVSIM_INSECURE_REGISTRIES").env_remove("HVSIM_REGISTRY_CA");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code().unwrap_or(-1), v, stderr)
}

/// The test Redis image's id and its OCI layout.
fn redis() -> (String, PathBuf) {
    let (_, layout) = common::redis_image();
    let o = output(&["image", "inspect", "hvsim-test/redis:bookworm"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    (v["id"].as_str().unwrap().to_owned(), PathBuf::from(layout))
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn blob(layout: &Path, digest: &str) -> PathBuf {
    layout.join("blobs/sha256").join(digest.trim_start_matches("sha256:"))
}

/// An OCI layout at `out` holding one image index of the Redis image for
/// `platforms`: `amd64` is the real image, any other architecture a copy
/// of it whose config says that architecture (the order is the index's).
fn multi_platform(layout: &Path, out: &Path, platforms: &[&str]) {
    std::fs::create_dir_all(out.join("blobs/sha256")).unwrap();
    for e in std::fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), out.join("blobs/sha256").join(e.file_name())).unwrap();
    }
    std::fs::copy(layout.join("oci-layout"), out.join("oci-layout")).unwrap();
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let amd64 = index["manifests"][0].clone();
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(blob(layout, amd64["digest"].as_str().unwrap())).unwrap()).unwrap();
    let put = |bytes: Vec<u8>| {
        let d = sha256(&bytes);
        std::fs::write(blob(out, &d), &bytes).unwrap();
        (d, bytes.len())
    };
    let mut entries = Vec::new();
    for arch in platforms {
        let (digest, size) = if *arch == "amd64" {
            (amd64["digest"].as_str().unwrap().to_owned(), amd64["size"].as_u64().unwrap() as usize)
        } else {
            let mut config: Value = serde_json::from_slice(
                &std::fs::read(blob(layout, manifest["config"]["digest"].as_str().unwrap())).unwrap(),
            )
            .unwrap();
            config["architecture"] = json!(arch);
            let (cd, cs) = put(serde_json::to_vec(&config).unwrap());
            let mut m = manifest.clone();
            m["config"]["digest"] = json!(cd);
            m["config"]["size"] = json!(cs);
            put(serde_json::to_vec(&m).unwrap())
        };
        entries.push(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest, "size": size,
            "platform": {"os": "linux", "architecture": arch},
        }));
    }
    let index_blob = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    });
    let (d, size) = put(serde_json::to_vec(&index_blob).unwrap());
    let top = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": d, "size": size,
            "annotations": {"org.opencontainers.image.ref.name": "1"},
        }],
    });
    std::fs::write(out.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
}

fn one_line_error(code: i32, stderr: &str, says: &[&str]) {
    assert_ne!(code, 0, "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    for s in says {
        assert!(stderr.contains(s), "{s:?} in {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Tags, digests, gzip and zstd layers, an index resolved to linux/amd64,
/// layers not fetched twice, plain HTTP only when asked for, `--pull
/// never`, and a registry that serves corrupted bytes refused.
#[test]
fn an_image_pulled_by_tag_digest_or_index_is_the_image_pushed_and_corruption_is_refused() {
    if !tools_available() {
        return;
    }
    let (id, layout) = redis();
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(dir.path(), Secured::default());
    let r = &reg.addr;
    let src = format!("oci:{}", layout.display());
    push(&src, &format!("{r}/team/redis:7"), &["--dest-tls-verify=false"]);
    // zstd layers: recompressed into a layout of their own first (pushed
    // straight, skopeo would reuse the gzip blobs the registry has).
    let zstd_layout = dir.path().join("zstd");
    let o = Command::new("skopeo")
        .args(["--insecure-policy", "copy", "--quiet", "--dest-compress-format", "zstd", "--dest-compress"])
        .arg(&src)
        .arg(format!("oci:{}:1", zstd_layout.display()))
        .output()
        .unwrap();
    assert!(o.status.success(), "skopeo copy to zstd: {}", String::from_utf8_lossy(&o.stderr));
    push(&format!("oci:{}:1", zstd_layout.display()), &format!("{r}/team/redis:zstd"), &["--dest-tls-verify=false"]);
    let multi = dir.path().join("multi");
    multi_platform(&layout, &multi, &["arm64", "amd64"]);
    push(&format!("oci:{}:1", multi.display()), &format!("{r}/team/multi:1"), &["--dest-tls-verify=false", "--all"]);
    let arm = dir.path().join("arm");
    multi_platform(&layout, &arm, &["arm64"]);
    push(&format!("oci:{}:1", arm.display()), &format!("{r}/team/arm:1"), &["--dest-tls-verify=false", "--all"]);

    let cache = dir.path().join("cache");
    let insecure = ["--insecure-registry", r.as_str()];
    let pull = |reference: &str, more: &[&str]| {
        let mut args = vec!["image", "pull", "--json", reference];
        args.extend_from_slice(more);
        hvsim_in(&cache, &args, &[])
    };

    // HTTPS unless the registry is named insecure.
    let (code, _, stderr) = pull(&format!("{r}/team/redis:7"), &[]);
    one_line_error(code, &stderr, &[&format!("pulling {r}/team/redis:7"), &format!("--insecure-registry {r}")]);

    // By tag: the very image pushed, every blob fetched once.
    let (code, tagged, stderr) = pull(&format!("{r}/team/redis:7"), &insecure);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(tagged["image"]["id"], json!(id), "{tagged}");
    let layers = tagged["image"]["layers"].as_u64().unwrap();
    assert_eq!(tagged["blobs_fetched"], json!(layers + 1), "{tagged}");
    let repo_digest = tagged["repo_digest"].as_str().unwrap().to_owned();
    assert!(repo_digest.starts_with(&format!("{r}/team/redis@sha256:")), "{repo_digest}");
    let tags: Vec<&str> = tagged["image"]["tags"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tags, [format!("{r}/team/redis:7").as_str(), repo_digest.as_str()]);

    // Again: nothing fetched. By digest: the same image.
    let (code, again, _) = pull(&format!("{r}/team/redis:7"), &insecure);
    assert_eq!((code, &again["blobs_fetched"]), (0, &json!(0)), "{again}");
    let (code, by_digest, stderr) = pull(&repo_digest, &insecure);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(by_digest["image"]["id"], json!(id));

    // zstd layers: the same image (its diff_ids), other blobs.
    let (code, zstd, stderr) = pull(&format!("{r}/team/redis:zstd"), &insecure);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(zstd["image"]["id"], json!(id));
    assert_eq!(zstd["blobs_fetched"], json!(layers), "the config is shared, the layers are not: {zstd}");
    let (_, inspect, _) = hvsim_in(&cache, &["image", "inspect", &format!("{r}/team/redis:zstd")], &[]);
    assert!(inspect["layers"].as_array().unwrap().iter().all(|l| l["compression"] == "zstd"), "{inspect}");

    // An index: its linux/amd64 image, though arm64 comes first; the repo
    // digest is the index's.
    let (code, multi, stderr) = pull(&format!("{r}/team/multi:1"), &insecure);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(multi["image"]["id"], json!(id));
    let index_digest = sha256(
        &std::fs::read(blob(
            &dir.path().join("multi"),
            serde_json::from_slice::<Value>(&std::fs::read(dir.path().join("multi/index.json")).unwrap()).unwrap()
                ["manifests"][0]["digest"]
                .as_str()
                .unwrap(),
        ))
        .unwrap(),
    );
    assert_eq!(multi["repo_digest"], json!(format!("{r}/team/multi@{index_digest}")));
    let (code, _, stderr) = pull(&format!("{r}/team/arm:1"), &insecure);
    one_line_error(code, &stderr, &["linux/amd64"]);

    // A digest the registry does not have; a reference that is not one.
    let missing = format!("{r}/team/redis@{}", sha256(b"no such manifest"));
    let (code, _, stderr) = pull(&missing, &insecure);
    one_line_error(code, &stderr, &[&format!("pulling {missing}")]);
    let (code, _, stderr) = pull("Not A Reference", &insecure);
    one_line_error(code, &stderr, &["image Not A Reference"]);

    // --pull never: a compose project whose image the store lacks.
    let compose = dir.path().join("compose.yaml");
    std::fs::write(&compose, format!("services:\n  db:\n    image: {r}/team/other:1\n")).unwrap();
    let (code, _, stderr) = hvsim_in(&cache, &["run", "--compose", compose.to_str().unwrap(), "--pull", "never"], &[]);
    one_line_error(code, &stderr, &[&format!("{r}/team/other:1 is not in the image store"), "--pull never"]);

    // The registry serves a layer whose bytes changed on its disk: refused,
    // and the store gains nothing.
    let (_, v, _) = hvsim_in(&cache, &["image", "inspect", &format!("{r}/team/redis:7")], &[]);
    let layer = v["layers"][0]["blob"].as_str().unwrap().trim_start_matches("sha256:").to_owned();
    let stored = reg.data.join(format!("docker/registry/v2/blobs/sha256/{}/{layer}/data", &layer[..2]));
    let mut bytes = std::fs::read(&stored).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&stored, bytes).unwrap();
    let fresh = dir.path().join("fresh");
    let (code, _, stderr) =
        hvsim_in(&fresh, &["image", "pull", &format!("{r}/team/redis:7"), "--insecure-registry", r], &[]);
    one_line_error(code, &stderr, &[&format!("sha256:{layer}"), "digest"]);
    let (_, ls, _) = hvsim_in(&fresh, &["image", "ls", "--json"], &[]);
    assert_eq!(ls["images"], json!([]), "{ls}");
}

/// HTTPS with a private certificate authority (`--registry-ca`) and a
/// password: from `docker login`'s config.json, or from a credential
/// helper it names.
#[test]
fn a_private_registry_is_reached_with_its_ca_and_the_docker_login() {
    if !tools_available() {
        return;
    }
    if Command::new("openssl").arg("version").output().is_err() || Command::new("htpasswd").arg("-h").output().is_err()
    {
        skipping("openssl or htpasswd (Debian's apache2-utils) is not installed", false);
        return;
    }
    let (id, layout) = redis();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sh = |cmd: &str| {
        let o = Command::new("sh").arg("-c").arg(cmd).current_dir(d).output().unwrap();
        assert!(o.status.success(), "{cmd}: {}", String::from_utf8_lossy(&o.stderr));
    };
    // A CA, and the registry's certificate for 127.0.0.1 signed by it.
    sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=hvsim-test-ca");
    sh("openssl req -newkey rsa:2048 -nodes -keyout reg.key -out reg.csr -subj /CN=127.0.0.1");
    sh("printf 'subjectAltName=IP:127.0.0.1\\nbasicConstraints=CA:FALSE\\n' > ext.cnf \
        && openssl x509 -req -in reg.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out reg.pem -days 2 -extfile ext.cnf");
    sh("htpasswd -Bbn tester s3cret > htpasswd");
    let reg = Registry::start(
        d,
        Secured { tls: Some((d.join("reg.pem"), d.join("reg.key"))), htpasswd: Some(d.join("htpasswd")), token: None },
    );
    let r = &reg.addr;
    std::fs::create_dir_all(d.join("certs")).unwrap();
    std::fs::copy(d.join("ca.pem"), d.join("certs/ca.crt")).unwrap();
    push(
        &format!("oci:{}", layout.display()),
        &format!("{r}/private/redis:7"),
        &["--dest-cert-dir", d.join("certs").to_str().unwrap(), "--dest-creds", "tester:s3cret"],
    );

    let cache = d.join("cache");
    let reference = format!("{r}/private/redis:7");
    let empty = d.join("no-login");
    std::fs::create_dir_all(&empty).unwrap();
    let ca = d.join("ca.pem");
    let pull = |docker_config: &Path, more: &[&str], env: &[(&str, &Path)]| {
        let mut args = vec!["image", "pull", "--json", reference.as_str()];
        args.extend_from_slice(more);
        let mut env = env.to_vec();
        env.push(("DOCKER_CONFIG", docker_config));
        hvsim_in(&cache, &args, &env)
    };
    let with_ca = ["--registry-ca", ca.to_str().unwrap()];

    // The system's roots do not know the CA.
    let (code, _, stderr) = pull(&empty, &[], &[]);
    one_line_error(code, &stderr, &["--registry-ca"]);
    // Without credentials, refused.
    let (code, _, stderr) = pull(&empty, &with_ca, &[]);
    one_line_error(code, &stderr, &["docker login"]);
    // `docker login`'s config.json (an `auths` entry); the CA from the
    // environment, as a replay takes it.
    let login = d.join("login");
    std::fs::create_dir_all(&login).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("tester:s3cret");
    std::fs::write(login.join("config.json"), json!({"auths": {r.as_str(): {"auth": auth}}}).to_string()).unwrap();
    let (code, v, stderr) = pull(&login, &[], &[("HVSIM_REGISTRY_CA", &ca)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["image"]["id"], json!(id));

    // A credential helper named for the registry: Docker's protocol, `get`
    // with the server on stdin, the secret as JSON on stdout.
    let helpers = d.join("helpers");
    std::fs::create_dir_all(&helpers).unwrap();
    let helper = helpers.join("docker-credential-hvsimtest");
    std::fs::write(
        &helper,
        "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\n\
         printf '{\"ServerURL\":\"%s\",\"Username\":\"tester\",\"Secret\":\"s3cret\"}' \"$server\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let helped = d.join("helped");
    std::fs::create_dir_all(&helped).unwrap();
    std::fs::write(helped.join("config.json"), json!({"credHelpers": {r.as_str(): "hvsimtest"}}).to_string()).unwrap();
    std::fs::remove_dir_all(&cache).unwrap();
    let path = format!("{}:{}", helpers.display(), std::env::var("PATH").unwrap_or_default());
    let (code, v, stderr) = pull(&helped, &with_ca, &[("PATH", Path::new(&path))]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["image"]["id"], json!(id));
    assert_eq!(v["blobs_fetched"], json!(v["image"]["layers"].as_u64().unwrap() + 1));
}

/// Docker's token authentication, as Docker Hub, GHCR and Harbor use it:
/// the registry (its `auth.token`) answers 401 with a bearer challenge
/// naming a token service; hvsim asks that service for a pull token with
/// the user's `docker login` credentials and pulls with the token. The
/// token service is tests/tools/token_server.py (PyJWT); the registry
/// checks each token's signature, issuer, audience, expiry and scope.
#[test]
fn a_registry_with_token_auth_is_pulled_from_with_a_bearer_token() {
    if !tools_available() {
        return;
    }
    let python = "/usr/bin/python3";
    let has_jwt =
        Command::new(python).args(["-c", "import jwt, cryptography"]).output().is_ok_and(|o| o.status.success());
    if !has_jwt {
        skipping("Debian's python3-jwt and python3-cryptography are not installed", false);
        return;
    }
    let (id, layout) = redis();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let o = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "token.key", "-out", "token.pem"])
        .args(["-days", "2", "-subj", "/CN=hvsim-test-token"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "openssl: {}", String::from_utf8_lossy(&o.stderr));
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let issued = d.join("issued.log");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/token_server.py");
    let mut tokens = Command::new(python)
        .arg(&server)
        .arg(port.to_string())
        .args([d.join("token.key"), d.join("token.pem")])
        .args(["tester:s3cret", "hvsim-test-issuer"])
        .arg(&issued)
        .stderr(std::fs::File::create(d.join("token-server.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the token service did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let realm = format!("http://127.0.0.1:{port}/token");
    let reg = Registry::start(d, Secured { token: Some((realm, d.join("token.pem"))), ..Secured::default() });
    let r = &reg.addr;
    push(
        &format!("oci:{}", layout.display()),
        &format!("{r}/team/redis:7"),
        &["--dest-tls-verify=false", "--dest-creds", "tester:s3cret"],
    );
    std::fs::write(&issued, "").unwrap();

    let cache = d.join("cache");
    let reference = format!("{r}/team/redis:7");
    let pull = |docker_config: &Path| {
        hvsim_in(
            &cache,
            &["image", "pull", "--json", &reference, "--insecure-registry", r],
            &[("DOCKER_CONFIG", docker_config)],
        )
    };
    let nobody = d.join("nobody");
    std::fs::create_dir_all(&nobody).unwrap();
    let (code, _, stderr) = pull(&nobody);
    one_line_error(code, &stderr, &["docker login"]);
    let login = d.join("login");
    std::fs::create_dir_all(&login).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode("tester:s3cret");
    std::fs::write(login.join("config.json"), json!({"auths": {r.as_str(): {"auth": auth}}}).to_string()).unwrap();
    let (code, v, stderr) = pull(&login);
    let _ = tokens.kill();
    let _ = tokens.wait();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(v["image"]["id"], json!(id));
    let log = common::read(&issued);
    assert!(log.lines().any(|l| l == "tester repository:team/redis:pull"), "a pull token was issued: {log:?}");
}

/// A compose project whose image is in a registry: `hvsim explore` pulls
/// it (the store lacks it), the bug record names the repository digest
/// the service ran, and a replay on a store that lost the image pulls
/// exactly those bytes again and reproduces the bug.
#[test]
fn a_compose_project_pulls_its_image_and_a_replay_pulls_the_same_bytes_by_digest() {
    if !common::linux_available() || !tools_available() {
        return;
    }
    let (id, layout) = redis();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let reg = Registry::start(d, Secured::default());
    let r = &reg.addr;
    push(&format!("oci:{}", layout.display()), &format!("{r}/team/redis:7"), &["--dest-tls-verify=false"]);
    // A cache of its own for images, sharing the machine's kernel and boot
    // cache (nothing else there is the test's to change).
    let cache = d.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let real = hvsim_guest_image::cache::dir();
    for shared in ["kernel", "boot", "debian-images"] {
        if real.join(shared).exists() {
            std::os::unix::fs::symlink(real.join(shared), cache.join(shared)).unwrap();
        }
    }
    // The service runs the pulled Redis; the template's check asks it and
    // fails when it answers: a bug only the pulled image's server makes.
    let check = d.join("test/pulled");
    std::fs::create_dir_all(&check).unwrap();
    std::fs::write(
        check.join("finally_redis_answers.sh"),
        "#!/bin/sh\n[ \"$(redis-cli ping)\" = PONG ] && exit 1\nexit 0\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(check.join("finally_redis_answers.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let compose = d.join("compose.yaml");
    std::fs::write(
        &compose,
        format!(
            r#"services:
  db:
    image: {r}/team/redis:7
    entrypoint: ["sh", "-c", "redis-server --daemonize yes --save '' && until redis-cli ping; do sleep 0.1; done && echo '{{\"antithesis_setup\":{{\"status\":\"complete\",\"details\":null}}}}' > $$HVSIM_SDK_OUTPUT; exec sleep infinity"]
    volumes:
      - ./test:/opt/antithesis/test/v1:ro
"#
        ),
    )
    .unwrap();
    let out = d.join("out");
    let (code, report, stderr) = hvsim_in(
        &cache,
        &[
            "explore",
            "--json",
            "--compose",
            compose.to_str().unwrap(),
            "--branches",
            "1",
            "--reexecute",
            "1",
            "--likelihood-runs",
            "0",
            "--insecure-registry",
            r,
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 8, "a bug: {stderr}");
    assert!(stderr.contains(&format!("hvsim: pulled {r}/team/redis:7: {r}/team/redis@sha256:")), "{stderr}");
    let bug = report["bugs"][0]["file"].as_str().unwrap_or_else(|| panic!("a bug file in {report}")).to_owned();
    let record: Value = serde_json::from_str(&common::read(Path::new(&bug))).unwrap();
    let container = &record["target"]["system"]["containers"][0];
    assert_eq!(container["image_id"], json!(id), "{container}");
    let pinned = container["repo_digest"].as_str().unwrap_or_else(|| panic!("repo_digest in {container}")).to_owned();
    assert!(pinned.starts_with(&format!("{r}/team/redis@sha256:")), "{pinned}");

    // The store loses the image; the replay pulls it by digest (its
    // registry named insecure in the environment, as for any replay).
    let (code, _, stderr) = hvsim_in(&cache, &["image", "rm", &format!("{r}/team/redis:7"), &pinned], &[]);
    assert_eq!(code, 0, "{stderr}");
    let (_, ls, _) = hvsim_in(&cache, &["image", "ls", "--json"], &[]);
    assert_eq!(ls["images"], json!([]), "{ls}");
    let mut c = hvsim();
    c.env("HVSIM_CACHE_DIR", &cache).env("HVSIM_INSECURE_REGISTRIES", r);
    let o = c.args(["replay", "--json", &bug]).output().unwrap();
    let replay: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(replay["reproduced"], json!(true), "{replay} {}", String::from_utf8_lossy(&o.stderr));
    let (_, ls, _) = hvsim_in(&cache, &["image", "ls", "--json"], &[]);
    assert_eq!(ls["images"][0]["id"], json!(id), "{ls}");
    assert_eq!(ls["images"][0]["tags"], json!([pinned]), "{ls}");
}

/// What the hostile registry below answers to one request.
enum Reply {
    /// A status, headers and a body.
    Whole(&'static str, Vec<String>, Vec<u8>),
    /// A status and headers, then a chunked body of [`ENDLESS`] bytes, or
    /// until the client hangs up.
    Endless(&'static str, Vec<String>),
}

/// What an endless body sends before it gives up: far past every bound
/// hvsim sets, so a client that read it whole would see it end.
const ENDLESS: u64 = 96 << 20;

/// An HTTP/1.1 server on a free loopback port that answers each request's
/// path with `reply`, counting the body bytes it managed to send.
fn hostile(reply: fn(&str, &str) -> Reply) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::Ordering;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (here, counted) = (addr.clone(), sent.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (addr, sent) = (here.clone(), counted.clone());
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {}
                    let ok = match reply(&path, &addr) {
                        Reply::Whole(status, headers, body) => {
                            // A length of its own where the reply gives one.
                            let length = match headers.iter().any(|h| h.starts_with("Content-Length")) {
                                true => String::new(),
                                false => format!("Content-Length: {}\r\n", body.len()),
                            };
                            let head = format!("HTTP/1.1 {status}\r\n{}{length}\r\n", lines(&headers));
                            out.write_all(head.as_bytes()).and_then(|_| out.write_all(&body)).is_ok()
                        }
                        Reply::Endless(status, headers) => {
                            let head =
                                format!("HTTP/1.1 {status}\r\n{}Transfer-Encoding: chunked\r\n\r\n", lines(&headers));
                            let chunk = [b'{'; 64 << 10];
                            let mut ok = out.write_all(head.as_bytes()).is_ok();
                            while ok && sent.load(Ordering::Relaxed) < ENDLESS {
                                ok = write!(out, "{:x}\r\n", chunk.len())
                                    .and_then(|_| out.write_all(&chunk))
                                    .and_then(|_| out.write_all(b"\r\n"))
                                    .is_ok();
                                if ok {
                                    sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                                }
                            }
                            ok && out.write_all(b"0\r\n\r\n").is_ok()
                        }
                    };
                    if !ok {
                        return;
                    }
                }
            });
        }
    });
    fn lines(headers: &[String]) -> String {
        headers.iter().map(|h| format!("{h}\r\n")).collect()
    }
    (addr, sent)
}

/// A registry that never ends a body — a manifest, a token, an error — or
/// announces a terabyte, or sends a blob past its size: each pull ends at
/// once in one line naming the bound, having read a few MiB at most, where
/// a client that read bodies whole would grow until the kernel killed it.
#[test]
fn a_hostile_registrys_endless_bodies_end_the_pull_in_one_line() {
    type Case = (fn(&str, &str) -> Reply, &'static [&'static str]);
    let cases: [Case; 5] = [
        // An endless manifest.
        (
            |path, _| match path {
                "/v2/" => Reply::Whole("200 OK", vec![], vec![]),
                _ => Reply::Endless("200 OK", vec!["Content-Type: application/vnd.oci.image.manifest.v1+json".into()]),
            },
            &["manifest body is longer than 4194304 bytes"],
        ),
        // A manifest that announces a terabyte.
        (
            |path, _| match path {
                "/v2/" => Reply::Whole("200 OK", vec![], vec![]),
                _ => Reply::Whole("200 OK", vec!["Content-Length: 1099511627776".into()], vec![]),
            },
            &["manifest body is longer than 4194304 bytes"],
        ),
        // An endless token from the realm the challenge names.
        (
            |path, addr| match path {
                "/v2/" => Reply::Whole(
                    "401 Unauthorized",
                    vec![format!(r#"WWW-Authenticate: Bearer realm="http://{addr}/token",service="hostile""#)],
                    vec![],
                ),
                _ => Reply::Endless("200 OK", vec!["Content-Type: application/json".into()]),
            },
            &["token body is longer than 1048576 bytes"],
        ),
        // An endless error: its status, and the start of its body.
        (
            |path, _| match path {
                "/v2/" => Reply::Whole("200 OK", vec![], vec![]),
                _ => Reply::Endless("404 Not Found", vec![]),
            },
            &["HTTP 404: {{{{", "…"],
        ),
        // A blob that goes on past its descriptor's size.
        (
            |path, _| {
                let config = b"{}";
                match path {
                    "/v2/" => Reply::Whole("200 OK", vec![], vec![]),
                    p if p.contains("/manifests/") => Reply::Whole(
                        "200 OK",
                        vec!["Content-Type: application/vnd.oci.image.manifest.v1+json".into()],
                        json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                          "size": config.len(), "digest": sha256(config)},
                               "layers": []})
                        .to_string()
                        .into_bytes(),
                    ),
                    _ => Reply::Endless("200 OK", vec![]),
                }
            },
            &["the registry sent more than its 2 bytes"],
        ),
    ];
    for (i, (reply, says)) in cases.into_iter().enumerate() {
        let (addr, sent) = hostile(reply);
        let cache = tempfile::tempdir().unwrap();
        let reference = format!("{addr}/team/hostile:1");
        let started = Instant::now();
        let (code, _, stderr) =
            hvsim_in(cache.path(), &["image", "pull", &reference, "--insecure-registry", &addr], &[]);
        let mut says = says.to_vec();
        let at = format!("pulling {reference}");
        says.push(&at);
        one_line_error(code, &stderr, &says);
        let sent = sent.load(std::sync::atomic::Ordering::Relaxed);
        assert!(sent < 32 << 20, "case {i}: hvsim let the registry send {sent} bytes: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(60), "case {i} took {:?}", started.elapsed());
    }
}
