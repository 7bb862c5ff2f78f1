//! A container to run on a node: resolved on the host from an image's
//! config and the user's overrides (a compose service, `--image`) the way
//! Docker resolves them, pinned to the image's id, and handed to the
//! guest's init (`hvsim_abi::container`; init's side is
//! guest-init/src/container/).

use std::path::{Path, PathBuf};

use hvsim_abi::container::{key, SEP};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::{invalid, io, ImageError, Result};
use crate::linux::RunFile;
use crate::oci::store::Store;
use crate::oci::Digest;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    #[default]
    No,
    Always,
    OnFailure,
    UnlessStopped,
}

impl Restart {
    pub fn parse(s: &str) -> std::result::Result<Restart, String> {
        // `on-failure:N` (a retry limit) is accepted; the limit is not kept.
        match s.split(':').next().unwrap_or(s) {
            "no" | "\"no\"" => Ok(Restart::No),
            "always" => Ok(Restart::Always),
            "on-failure" => Ok(Restart::OnFailure),
            "unless-stopped" => Ok(Restart::UnlessStopped),
            _ => Err(format!("restart policy {s:?} (no, always, on-failure or unless-stopped)")),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Restart::No => "no",
            Restart::Always => "always",
            Restart::OnFailure => "on-failure",
            Restart::UnlessStopped => "unless-stopped",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    ServiceStarted,
    ServiceHealthy,
    ServiceCompletedSuccessfully,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::ServiceStarted => "service_started",
            Condition::ServiceHealthy => "service_healthy",
            Condition::ServiceCompletedSuccessfully => "service_completed_successfully",
        }
    }
}

/// What is mounted into the container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Mount {
    /// A named volume: a directory on the node's disk, surviving restarts
    /// and crashes as the disk does.
    Volume { name: String, target: String, read_only: bool },
    /// A host file or directory, copied in (read-only unless said), its
    /// contents pinned by hash.
    Bind { host: PathBuf, sha256: String, target: String, read_only: bool },
}

/// What a health check does; serialized as `args` (a command, as records
/// have always said), `tcp` or `http`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// A command run in the container; exit status 0 passes.
    #[serde(rename = "args")]
    Exec(Vec<String>),
    /// A TCP connection to `addr` (`IP:PORT`) from the node that opens.
    Tcp { addr: String },
    /// `GET path` at `addr` from the node, with these headers (`Name:
    /// value`), answered 200 to 399.
    Http { addr: String, path: String, headers: Vec<String> },
}

/// Docker's `start_interval` when a check does not say (records written
/// before hvsim knew it).
fn docker_start_interval_ms() -> u64 {
    5_000
}

/// A health check or probe, on Docker's schedule (kubelet's is a case of
/// it: `start_interval` equal to the start period).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HealthCheck {
    #[serde(flatten)]
    pub check: Check,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub start_period_ms: u64,
    #[serde(default = "docker_start_interval_ms")]
    pub start_interval_ms: u64,
    pub retries: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Container {
    /// The node's name (the service, or `service-N` for replicas).
    pub name: String,
    /// The image as the user named it, and the image it resolved to.
    pub image: String,
    pub image_id: Digest,
    /// A pulled image's `host/repo@sha256:…`: a replay on a machine whose
    /// store lacks the image pulls exactly these bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_digest: Option<String>,
    pub hostname: String,
    /// More names that resolve to this node (a replicated service's name
    /// resolves to its first replica).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Names a fault plan may use for this node together with the others
    /// that have them: the Kubernetes Services that select its pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Entrypoint and command, resolved.
    pub args: Vec<String>,
    /// The image's environment with the user's merged over it.
    pub env: Vec<String>,
    pub workdir: String,
    /// As the image or the user says (`name`, `uid:gid`...): resolved in
    /// the container's /etc/passwd by init.
    pub user: String,
    pub restart: Restart,
    pub init: bool,
    pub mounts: Vec<Mount>,
    /// Nodes this one waits for, and for what.
    pub depends: Vec<(u16, Condition)>,
    /// Readiness: passing, the container is healthy.
    pub health: Option<HealthCheck>,
    /// Kubernetes' liveness probe: failing `retries` times in a row, the
    /// container is stopped, then restarted as its policy says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness: Option<HealthCheck>,
    /// Kubernetes' startup probe: until it passes, the other two wait;
    /// failing `retries` times in a row, the container is stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup: Option<HealthCheck>,
    /// A container a probe stops gets SIGTERM, then SIGKILL after this
    /// (10 s unless said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_grace_ms: Option<u64>,
    /// Containers run to completion, in order, before this one, each time
    /// its node starts (Kubernetes' `initContainers`); each shares its
    /// volumes, with a writable layer of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<Container>,
    /// The pod's other containers, run beside this one on its node,
    /// sharing its network and volumes (Kubernetes' second and later
    /// `containers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<Container>,
    /// What the container adds to the guest's RAM, as its compose service
    /// says (`mem_limit`); none: 64 MiB (`target::CONTAINER_MEM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
}

/// What the user says over the image's config (`None`: the image's).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub entrypoint: Option<Vec<String>>,
    pub command: Option<Vec<String>>,
    /// `NAME=VALUE` each.
    pub environment: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub hostname: Option<String>,
    pub restart: Restart,
    pub init: bool,
    pub mounts: Vec<Mount>,
    pub depends: Vec<(u16, Condition)>,
    pub health: Option<HealthCheck>,
}

impl Container {
    /// Whether a probe decides when its pod is ready (a readiness or
    /// startup probe, on it or a container beside it).
    pub fn probed(&self) -> bool {
        std::iter::once(self).chain(&self.sidecars).any(|c| c.health.is_some() || c.startup.is_some())
    }

    /// Every container its node runs: its init containers, itself, and the
    /// containers beside it.
    pub fn all(&self) -> impl Iterator<Item = &Container> {
        self.init_containers.iter().chain([self]).chain(&self.sidecars)
    }

    /// The container `name` runs: `image` (from the store) with `o` over
    /// its config, as `docker run` would.
    pub fn resolve(store: &Store, name: &str, image: &str, o: Overrides) -> Result<Container> {
        let record = store.resolve(image)?;
        let config = store.config(&record)?;
        let c = config.config().clone().unwrap_or_default();
        // Docker: a new entrypoint drops the image's command too.
        let entrypoint = o.entrypoint.clone().unwrap_or_else(|| c.entrypoint().clone().unwrap_or_default());
        let command = match (&o.command, &o.entrypoint) {
            (Some(cmd), _) => cmd.clone(),
            (None, Some(_)) => Vec::new(),
            (None, None) => c.cmd().clone().unwrap_or_default(),
        };
        let args: Vec<String> = entrypoint.into_iter().chain(command).collect();
        if args.is_empty() {
            return Err(invalid(
                format!("service {name}"),
                format!("no command: image {image} has no Entrypoint or Cmd, and none is given"),
            ));
        }
        let mut env: Vec<String> = c.env().clone().unwrap_or_default();
        for e in &o.environment {
            // The compose parser gave bare names their values; hvsim's own
            // environment never reaches a container.
            let Some((k, v)) = e.split_once('=') else {
                return Err(invalid(format!("service {name}"), format!("environment entry {e:?} has no value")));
            };
            env.retain(|x| x.split_once('=').map_or(x.as_str(), |p| p.0) != k);
            env.push(format!("{k}={v}"));
        }
        let workdir = o.working_dir.clone().or_else(|| c.working_dir().clone()).filter(|w| !w.is_empty());
        let workdir = workdir.unwrap_or_else(|| "/".into());
        if !workdir.starts_with('/') {
            return Err(invalid(format!("service {name}"), format!("working directory {workdir:?} is not absolute")));
        }
        for s in args.iter().chain(&env).chain([&workdir]) {
            if s.contains('\0') {
                return Err(invalid(format!("service {name}"), format!("{s:?} holds a NUL byte")));
            }
        }
        Ok(Container {
            name: name.to_owned(),
            image: image.to_owned(),
            repo_digest: record.repo_digest.clone(),
            image_id: record.id,
            hostname: o.hostname.clone().unwrap_or_else(|| name.to_owned()),
            aliases: Vec::new(),
            groups: Vec::new(),
            args,
            env,
            workdir,
            user: o.user.clone().or_else(|| c.user().clone()).unwrap_or_default(),
            restart: o.restart,
            init: o.init,
            mounts: o.mounts,
            depends: o.depends,
            health: o.health,
            liveness: None,
            startup: None,
            stop_grace_ms: None,
            init_containers: Vec::new(),
            sidecars: Vec::new(),
            mem_bytes: None,
        })
    }

    /// The files init needs for this container on `node`: its description
    /// and the contents of its bind mounts, and its init containers'.
    /// `image_disk` says which image disk holds an image; `hosts` is
    /// /etc/hosts.
    pub fn inbox_files(&self, node: u16, image_disk: &dyn Fn(&Digest) -> u16, hosts: &str) -> Result<Vec<RunFile>> {
        let mut files = self.describe(&format!("{}/{node}", hvsim_abi::linux::CONTAINERS), image_disk, hosts)?;
        for (k, init) in self.init_containers.iter().enumerate() {
            let path = format!("{}/{node}.init{k}", hvsim_abi::linux::CONTAINERS);
            files.extend(init.describe(&path, image_disk, hosts)?);
        }
        for (k, other) in self.sidecars.iter().enumerate() {
            let path = format!("{}/{node}.c{}", hvsim_abi::linux::CONTAINERS, k + 1);
            files.extend(other.describe(&path, image_disk, hosts)?);
        }
        Ok(files)
    }

    /// Its description at `path` (`hvsim_abi::container`) and its bind
    /// mounts' contents below `path.binds`.
    fn describe(&self, path: &str, image_disk: &dyn Fn(&Digest) -> u16, hosts: &str) -> Result<Vec<RunFile>> {
        let mut files = Vec::new();
        let mut spec = Vec::new();
        let mut field = |k: &str, v: &str| {
            debug_assert!(!k.contains('\0') && !v.contains('\0'));
            spec.extend_from_slice(k.as_bytes());
            spec.push(0);
            spec.extend_from_slice(v.as_bytes());
            spec.push(0);
        };
        field(key::NAME, &self.name);
        field(key::HOSTNAME, &self.hostname);
        field(key::IMAGE_DISK, &image_disk(&self.image_id).to_string());
        for a in &self.args {
            field(key::ARG, a);
        }
        for e in &self.env {
            field(key::ENV, e);
        }
        field(key::WORKDIR, &self.workdir);
        field(key::USER, &self.user);
        field(key::RESTART, self.restart.as_str());
        field(key::INIT, if self.init { "1" } else { "0" });
        for (i, m) in self.mounts.iter().enumerate() {
            let (kind, source, target, ro) = match m {
                Mount::Volume { name, target, read_only } => ("volume", name.clone(), target, *read_only),
                Mount::Bind { host, sha256, target, read_only } => {
                    let dest = format!("{path}.binds/{i}");
                    let (got, bind_files) = bind_contents(host, &dest)?;
                    if got != *sha256 {
                        return Err(ImageError::Setup(format!(
                            "bind mount source {} changed since it was recorded (its SHA-256 differs)",
                            host.display()
                        )));
                    }
                    files.extend(bind_files);
                    ("file", dest, target, *read_only)
                }
            };
            field(key::MOUNT, &format!("{kind}{SEP}{source}{SEP}{target}{SEP}{}", u8::from(ro)));
        }
        for (dep, cond) in &self.depends {
            field(key::DEPENDS, &format!("{dep}{SEP}{}", cond.as_str()));
        }
        for (role, probe) in [("readiness", &self.health), ("liveness", &self.liveness), ("startup", &self.startup)] {
            let Some(h) = probe else { continue };
            field(key::PROBE, role);
            match &h.check {
                Check::Exec(args) => args.iter().for_each(|a| field(key::HEALTH_ARG, a)),
                Check::Tcp { addr } => field(key::HEALTH_TCP, addr),
                Check::Http { addr, path, headers } => {
                    field(key::HEALTH_HTTP, &format!("{addr}{SEP}{path}"));
                    headers.iter().for_each(|h| field(key::HEALTH_HTTP_HEADER, h));
                }
            }
            field(key::HEALTH_INTERVAL_MS, &h.interval_ms.to_string());
            field(key::HEALTH_TIMEOUT_MS, &h.timeout_ms.to_string());
            field(key::HEALTH_START_PERIOD_MS, &h.start_period_ms.to_string());
            field(key::HEALTH_START_INTERVAL_MS, &h.start_interval_ms.to_string());
            field(key::HEALTH_RETRIES, &h.retries.to_string());
        }
        if let Some(ms) = self.stop_grace_ms {
            field(key::STOP_GRACE_MS, &ms.to_string());
        }
        for init in &self.init_containers {
            field(key::INIT_CONTAINER, &init.name);
        }
        for other in &self.sidecars {
            field(key::SIDECAR, &other.name);
        }
        field(key::HOSTS, hosts);
        files.insert(0, (path.to_owned(), 0o644, spec));
        Ok(files)
    }
}

/// How a service ended, as its node's init reported it on the console.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceState {
    pub name: String,
    pub node: u16,
    /// Its exit status; `None`: still running when the run ended (or
    /// never started).
    pub exit_status: Option<u8>,
}

/// Each container's state at the end of a run, from the console (init
/// says `hvsim-init: service NAME exited with status N` when a service is
/// done: not when it exits to be restarted).
pub fn service_states(containers: &[Container], console: &str) -> Vec<ServiceState> {
    containers
        .iter()
        .enumerate()
        .map(|(node, c)| {
            let done = format!("hvsim-init: service {} exited with status ", c.name);
            let exit_status = console
                .lines()
                .filter_map(|l| l.trim_end().strip_prefix(done.as_str()))
                .filter_map(|s| s.parse().ok())
                .next_back();
            ServiceState { name: c.name.clone(), node: node as u16, exit_status }
        })
        .collect()
}

/// /etc/hosts for `containers` (node `i` at 10.0.0.`i+1`): each name,
/// hostname and alias resolves to its node.
pub fn hosts(containers: &[Container], services: &[VirtualService]) -> String {
    let mut h = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    for (i, c) in containers.iter().enumerate() {
        let mut names = vec![c.name.as_str()];
        for n in std::iter::once(&c.hostname).chain(&c.aliases) {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
        h.push_str(&format!("10.0.0.{}\t{}\n", i + 1, names.join(" ")));
    }
    for s in services {
        h.push_str(&format!("{}\t{}\n", s.addr, s.names.join(" ")));
    }
    h
}

/// A Kubernetes ClusterIP Service: a virtual address on every node, where
/// init's proxy takes connections and relays each to one of the ready pods
/// behind it, in turn (guest-init's `container/proxy.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VirtualService {
    /// `namespace/name`, for messages.
    pub name: String,
    /// Its address, in 127.96.0.0/16: local in every node's namespace.
    pub addr: String,
    /// The DNS names that resolve to it.
    pub names: Vec<String>,
    pub ports: Vec<VirtualPort>,
    /// Its pods take connections once started, ready or not
    /// (`publishNotReadyAddresses`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub publish_not_ready: bool,
}

/// One port of a [`VirtualService`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VirtualPort {
    pub port: u16,
    /// The pods behind it, as (node, port on the pod).
    pub backends: Vec<(u16, u16)>,
    /// Nodes whose pod serves this port number itself: their proxy leaves
    /// it to the pod (a listener on the Service's address would keep a
    /// server listening on all addresses from binding it), so a connection
    /// from such a pod to the Service reaches the pod itself, if it
    /// listens on all addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own: Vec<u16>,
}

/// What init's proxies serve (`hvsim_abi::linux::SERVICES`): a pod is
/// ready when its readiness (or startup) probe passes, else once started.
pub fn services_file(services: &[VirtualService], containers: &[Container]) -> RunFile {
    let mut text = String::new();
    for s in services {
        for VirtualPort { port, backends, own } in &s.ports {
            text.push_str(&format!("{}:{port}", s.addr));
            for node in own {
                text.push_str(&format!(" !{node}"));
            }
            for (node, target) in backends {
                let c = &containers[usize::from(*node)];
                let probed = c.probed();
                let when = if probed && !s.publish_not_ready { "healthy" } else { "started" };
                text.push_str(&format!(" {node}:{target}:{when}"));
            }
            text.push('\n');
        }
    }
    (hvsim_abi::linux::SERVICES.to_owned(), 0o644, text.into_bytes())
}

/// Bytes a bind mount's source may hold in all: its files are copied into
/// the guest's memory at every start.
pub const MAX_BIND_BYTES: u64 = 4 << 30;

/// The SHA-256 of a bind mount's source (a file, or a directory's files
/// with their relative paths and modes), and its files as inbox entries
/// under `dest`. A symbolic link in a directory is read as the file it
/// names inside the directory; one that leaves it, or names a directory,
/// is refused, as is a source of more than [`MAX_BIND_BYTES`].
pub fn bind_contents(host: &Path, dest: &str) -> Result<(String, Vec<RunFile>)> {
    bind_contents_within(host, dest, MAX_BIND_BYTES)
}

fn bind_contents_within(host: &Path, dest: &str, max_bytes: u64) -> Result<(String, Vec<RunFile>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = Vec::new();
    let mut total = 0u64;
    let mut read = |path: &Path, len: u64| -> Result<Vec<u8>> {
        if total.saturating_add(len) > max_bytes {
            return Err(ImageError::Setup(format!(
                "bind mount source {}: more than {max_bytes} bytes in all (its files go into guest memory)",
                host.display()
            )));
        }
        let data = hvsim_vmm::files::read_bounded(path, max_bytes - total)
            .map_err(io("reading a bind mount's source", path))?;
        total += data.len() as u64;
        Ok(data)
    };
    let meta = std::fs::metadata(host).map_err(io("reading a bind mount's source", host))?;
    if meta.is_dir() {
        let root = std::fs::canonicalize(host).map_err(io("reading a bind mount's source", host))?;
        let mut stack = vec![(host.to_owned(), String::new())];
        while let Some((dir, rel)) = stack.pop() {
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .map_err(io("reading a bind mount's source", &dir))?
                .collect::<std::io::Result<_>>()
                .map_err(io("reading a bind mount's source", &dir))?;
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let name = e.file_name().to_string_lossy().into_owned();
                let r = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                let path = e.path();
                let link = std::fs::symlink_metadata(&path).map_err(io("reading a bind mount's source", &path))?;
                let m = std::fs::metadata(&path).map_err(io("reading a bind mount's source", &path))?;
                if link.is_symlink() {
                    let to = std::fs::canonicalize(&path).map_err(io("reading a bind mount's source", &path))?;
                    if !to.starts_with(&root) || m.is_dir() {
                        return Err(ImageError::Setup(format!(
                            "bind mount source {}: {r} is a symbolic link to {}, {}",
                            host.display(),
                            to.display(),
                            if m.is_dir() { "a directory (not followed)" } else { "outside the source" }
                        )));
                    }
                }
                if m.is_dir() {
                    stack.push((path, r));
                } else if m.is_file() {
                    let data = read(&path, m.len())?;
                    files.push((format!("{dest}/{r}"), m.permissions().mode() & 0o777, data));
                }
            }
        }
        files.sort();
    } else {
        let data = read(host, meta.len())?;
        files.push((dest.to_owned(), meta.permissions().mode() & 0o777, data));
    }
    let sha256 = contents_sha256(
        files.iter().map(|(path, mode, data)| (path.strip_prefix(dest).unwrap_or(path), *mode, &data[..])),
    );
    Ok((sha256, files))
}

/// What a bind source's contents are pinned by: each file's path below the
/// source (`/a/b`; empty for a file), mode and bytes, in path order.
pub(crate) fn contents_sha256<'a>(files: impl IntoIterator<Item = (&'a str, u32, &'a [u8])>) -> String {
    let mut h = Sha256::new();
    for (path, mode, data) in files {
        h.update(path.as_bytes());
        h.update(mode.to_le_bytes());
        h.update((data.len() as u64).to_le_bytes());
        h.update(data);
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link to a file inside the source reads as that file; a link out of
    /// the source, or to a directory, is refused; so is a source larger in
    /// all than the bound.
    #[test]
    fn a_bind_source_stays_inside_itself_and_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let (src, outside) = (dir.path().join("src"), dir.path().join("secret"));
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a"), "aaaa").unwrap();
        std::fs::write(&outside, "key").unwrap();
        std::os::unix::fs::symlink("sub/a", src.join("b")).unwrap();
        let (_, files) = bind_contents(&src, "/m").unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["/m/b", "/m/sub/a"]);
        assert_eq!(files[0].2, b"aaaa");
        let e = bind_contents_within(&src, "/m", 7).unwrap_err().to_string();
        assert!(e.contains("more than 7 bytes in all"), "{e}");
        std::os::unix::fs::symlink(&outside, src.join("c")).unwrap();
        let e = bind_contents(&src, "/m").unwrap_err().to_string();
        assert!(e.contains("c is a symbolic link to") && e.contains("outside the source"), "{e}");
        std::fs::remove_file(src.join("c")).unwrap();
        std::os::unix::fs::symlink("sub", src.join("d")).unwrap();
        let e = bind_contents(&src, "/m").unwrap_err().to_string();
        assert!(e.contains("d is a symbolic link to") && e.contains("a directory (not followed)"), "{e}");
    }
}
