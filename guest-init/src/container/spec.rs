//! A node's container as init reads it from `CONTAINERS/<node>`
//! (`hvsim_abi::container`): untrusted bytes, parsed strictly.

use std::time::Duration;

use hvsim_abi::container::{fields, key, SEP};
use std::io;

use super::{bad, ctx, spec_path};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Restart {
    No,
    Always,
    OnFailure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Condition {
    Started,
    Healthy,
    CompletedSuccessfully,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum MountKind {
    /// A directory on the node's disk (a named volume).
    Volume,
    /// A file or directory the inbox delivered (a bind mount of the host's).
    File,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mount {
    pub(super) kind: MountKind,
    pub(super) source: String,
    pub(super) target: String,
    pub(super) read_only: bool,
}

/// What a health check does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// Runs a command in the container; passes if it exits 0.
    Exec(Vec<String>),
    /// Passes if a TCP connection to `ADDR:PORT` opens.
    Tcp(String),
    /// Passes if `GET path` at `ADDR:PORT` answers 200 to 399.
    Http { addr: String, path: String, headers: Vec<String> },
}

impl Default for Check {
    fn default() -> Check {
        Check::Exec(Vec::new())
    }
}

/// Which probe a health check is (Kubernetes' names; compose's
/// healthcheck is readiness).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Passing: the service is healthy (ready).
    Readiness,
    /// Failing `retries` times in a row: the container is stopped.
    Liveness,
    /// Until it passes once, the other probes wait; failing `retries` times
    /// in a row: the container is stopped.
    Startup,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Health {
    pub(super) check: Check,
    pub(super) interval: Duration,
    pub(super) timeout: Duration,
    pub(super) start_period: Duration,
    pub(super) start_interval: Duration,
    pub(super) retries: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Spec {
    pub(super) name: String,
    pub(super) hostname: String,
    pub(super) image_disk: u16,
    pub(super) args: Vec<String>,
    pub(super) env: Vec<String>,
    pub(super) workdir: String,
    pub(super) user: String,
    pub(super) restart: Restart,
    pub(super) init: bool,
    pub(super) mounts: Vec<Mount>,
    pub(super) depends: Vec<(u16, Condition)>,
    /// The probes, at most one of each role.
    pub(super) probes: Vec<(Role, Health)>,
    /// Between SIGTERM and SIGKILL when a probe stops the container.
    pub(super) stop_grace: Duration,
    /// Its init containers' names, run in this order before it.
    pub(super) init_containers: Vec<String>,
    /// The names of the pod's other containers, run beside it.
    pub(super) sidecars: Vec<String>,
    /// Where on the node's disk its writable layer is: empty for the
    /// node's container, `init<k>` for its init container `k`, `c<k>` for
    /// the pod's container `k` beside it.
    pub(super) layer: String,
    pub(super) hosts: String,
}

impl Spec {
    pub(super) fn parse(bytes: &[u8]) -> io::Result<Spec> {
        let mut s = Spec {
            name: String::new(),
            hostname: String::new(),
            image_disk: u16::MAX,
            args: Vec::new(),
            env: Vec::new(),
            workdir: "/".into(),
            user: String::new(),
            restart: Restart::No,
            init: false,
            mounts: Vec::new(),
            depends: Vec::new(),
            probes: Vec::new(),
            stop_grace: Duration::from_secs(10),
            init_containers: Vec::new(),
            sidecars: Vec::new(),
            layer: String::new(),
            hosts: String::new(),
        };
        // The probe the `health_*` fields describe: readiness until a
        // `probe` field says otherwise.
        let mut role = Role::Readiness;
        for field in fields(bytes) {
            let (k, v) = field.map_err(|at| bad(format!("malformed field at byte {at}")))?;
            match k {
                key::NAME => s.name = v.into(),
                key::HOSTNAME => s.hostname = v.into(),
                key::IMAGE_DISK => s.image_disk = v.parse().map_err(|_| bad(format!("image disk {v:?}")))?,
                key::ARG => s.args.push(v.into()),
                key::ENV => s.env.push(v.into()),
                key::WORKDIR => s.workdir = v.into(),
                key::USER => s.user = v.into(),
                key::RESTART => {
                    s.restart = match v {
                        "no" => Restart::No,
                        "always" | "unless-stopped" => Restart::Always,
                        "on-failure" => Restart::OnFailure,
                        _ => return Err(bad(format!("restart policy {v:?}"))),
                    }
                }
                key::INIT => s.init = v == "1",
                key::MOUNT => {
                    let p: Vec<&str> = v.split(SEP).collect();
                    let [kind, source, target, ro] = p[..] else { return Err(bad(format!("mount {v:?}"))) };
                    let kind = match kind {
                        // A volume's name, or a path inside one: never out of it.
                        "volume" if source.starts_with('/') || source.split('/').any(|c| c == ".." || c.is_empty()) => {
                            return Err(bad(format!("volume {source:?}")))
                        }
                        "volume" => MountKind::Volume,
                        "file" => MountKind::File,
                        _ => return Err(bad(format!("mount kind {kind:?}"))),
                    };
                    s.mounts.push(Mount { kind, source: source.into(), target: target.into(), read_only: ro == "1" });
                }
                key::DEPENDS => {
                    let (node, cond) = v.split_once(SEP).ok_or_else(|| bad(format!("dependency {v:?}")))?;
                    let node = node.parse().map_err(|_| bad(format!("dependency node {node:?}")))?;
                    let cond = match cond {
                        "service_started" => Condition::Started,
                        "service_healthy" => Condition::Healthy,
                        "service_completed_successfully" => Condition::CompletedSuccessfully,
                        _ => return Err(bad(format!("dependency condition {cond:?}"))),
                    };
                    s.depends.push((node, cond));
                }
                key::PROBE => {
                    role = match v {
                        "readiness" => Role::Readiness,
                        "liveness" => Role::Liveness,
                        "startup" => Role::Startup,
                        _ => return Err(bad(format!("probe {v:?}"))),
                    };
                    if s.probes.iter().any(|(r, _)| *r == role) {
                        return Err(bad(format!("a second {v} probe")));
                    }
                }
                key::STOP_GRACE_MS => s.stop_grace = ms(v)?,
                key::INIT_CONTAINER => s.init_containers.push(v.into()),
                key::SIDECAR => s.sidecars.push(v.into()),
                k if k.starts_with("health_") => health_field(probe(&mut s.probes, role), k, v)?,
                key::HOSTS => s.hosts = v.into(),
                _ => return Err(bad(format!("unknown field {k:?}"))),
            }
        }
        if s.name.is_empty() || s.args.is_empty() || s.image_disk == u16::MAX {
            return Err(bad("a container without a name, an image disk or a command".into()));
        }
        if s.probes.iter().any(|(_, h)| h.check == Check::Exec(Vec::new())) {
            return Err(bad("a health check without a command".into()));
        }
        Ok(s)
    }

    /// Its probe of `role`, if it has one.
    #[cfg(test)]
    pub(super) fn probe(&self, role: Role) -> Option<&Health> {
        self.probes.iter().find(|(r, _)| *r == role).map(|(_, h)| h)
    }

    pub(super) fn load(node: u16) -> io::Result<Spec> {
        Spec::parse(&std::fs::read(spec_path(node))?)
    }

    /// Another container of node `node`'s pod: `init<k>` (its init
    /// container `k`) or `c<k>` (its container `k` beside the first).
    pub(super) fn load_part(node: u16, layer: &str) -> io::Result<Spec> {
        let path = spec_path(node).with_extension(layer);
        let mut spec = Spec::parse(&std::fs::read(&path).map_err(ctx(&path.display().to_string()))?)?;
        spec.layer = layer.to_owned();
        Ok(spec)
    }

    /// Whether a probe decides when it is ready (a readiness probe, or a
    /// startup probe without one).
    pub(super) fn probed(&self) -> bool {
        self.probes.iter().any(|(r, _)| matches!(r, Role::Readiness | Role::Startup))
    }

    /// Its readiness marker in the pod's state directory.
    pub(super) fn ready_marker(&self) -> String {
        if self.layer.is_empty() {
            "ready".to_owned()
        } else {
            format!("ready.{}", self.layer)
        }
    }
}

/// The probe of `role`, made on its first field.
fn probe(probes: &mut Vec<(Role, Health)>, role: Role) -> &mut Health {
    if !probes.iter().any(|(r, _)| *r == role) {
        probes.push((role, Health::default()));
    }
    &mut probes.iter_mut().find(|(r, _)| *r == role).expect("just made").1
}

fn ms(v: &str) -> io::Result<Duration> {
    v.parse::<u64>().map(Duration::from_millis).map_err(|_| bad(format!("{v:?} is not milliseconds")))
}

/// One `health_*` field into the probe it describes.
fn health_field(h: &mut Health, k: &str, v: &str) -> io::Result<()> {
    let network = |h: &Health| !matches!(&h.check, Check::Exec(args) if args.is_empty());
    match k {
        key::HEALTH_ARG => match &mut h.check {
            Check::Exec(args) => args.push(v.into()),
            _ => return Err(bad("a health check with both a command and a connection".into())),
        },
        key::HEALTH_TCP | key::HEALTH_HTTP if network(h) => {
            return Err(bad("a health check with two commands or connections".into()))
        }
        key::HEALTH_TCP => h.check = Check::Tcp(v.into()),
        key::HEALTH_HTTP => {
            let (addr, path) = v.split_once(SEP).ok_or_else(|| bad(format!("HTTP check {v:?}")))?;
            h.check = Check::Http { addr: addr.into(), path: path.into(), headers: Vec::new() };
        }
        key::HEALTH_HTTP_HEADER => match &mut h.check {
            Check::Http { headers, .. } if !v.contains(['\r', '\n']) => headers.push(v.into()),
            _ => return Err(bad(format!("HTTP header {v:?} without an HTTP check, or with a line break"))),
        },
        key::HEALTH_INTERVAL_MS => h.interval = ms(v)?,
        key::HEALTH_TIMEOUT_MS => h.timeout = ms(v)?,
        key::HEALTH_START_PERIOD_MS => h.start_period = ms(v)?,
        key::HEALTH_START_INTERVAL_MS => h.start_interval = ms(v)?,
        key::HEALTH_RETRIES => h.retries = v.parse().map_err(|_| bad(format!("health retries {v:?}")))?,
        _ => return Err(bad(format!("unknown field {k:?}"))),
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::container) fn field(out: &mut Vec<u8>, k: &str, v: &str) {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }

    #[test]
    fn specs_parse() {
        let mut b = Vec::new();
        field(&mut b, key::NAME, "db");
        field(&mut b, key::IMAGE_DISK, "3");
        field(&mut b, key::ARG, "redis-server");
        field(&mut b, key::ARG, "--appendonly yes");
        field(&mut b, key::RESTART, "on-failure");
        field(&mut b, key::MOUNT, &format!("volume{SEP}data{SEP}/data{SEP}0"));
        field(&mut b, key::DEPENDS, &format!("2{SEP}service_healthy"));
        field(&mut b, key::HEALTH_ARG, "redis-cli");
        field(&mut b, key::HEALTH_INTERVAL_MS, "500");
        let s = Spec::parse(&b).unwrap();
        assert_eq!(s.args, ["redis-server", "--appendonly yes"]);
        assert_eq!(s.image_disk, 3);
        assert_eq!(s.restart, Restart::OnFailure);
        assert_eq!(
            s.mounts[0],
            Mount { kind: MountKind::Volume, source: "data".into(), target: "/data".into(), read_only: false }
        );
        assert_eq!(s.depends, [(2, Condition::Healthy)]);
        let ready = s.probe(Role::Readiness).unwrap();
        assert_eq!(
            (&ready.check, ready.interval),
            (&Check::Exec(vec!["redis-cli".into()]), Duration::from_millis(500))
        );
        assert_eq!(s.probe(Role::Liveness), None);
        for escape in ["../etc", "data/../../etc", "/etc", "data//x"] {
            let mut out = b.clone();
            field(&mut out, key::MOUNT, &format!("volume{SEP}{escape}{SEP}/x{SEP}0"));
            assert!(Spec::parse(&out).unwrap_err().to_string().contains("volume"), "{escape}");
        }
        let mut inside = b.clone();
        field(&mut inside, key::MOUNT, &format!("volume{SEP}data/conf{SEP}/etc/app{SEP}1"));
        assert_eq!(Spec::parse(&inside).unwrap().mounts[1].source, "data/conf");
        let mut unknown = b.clone();
        field(&mut unknown, "colour", "red");
        assert!(Spec::parse(&unknown).unwrap_err().to_string().contains("colour"));
        let mut no_cmd = Vec::new();
        field(&mut no_cmd, key::NAME, "x");
        field(&mut no_cmd, key::IMAGE_DISK, "0");
        assert!(Spec::parse(&no_cmd).is_err());
        let mut no_disk = Vec::new();
        field(&mut no_disk, key::NAME, "x");
        field(&mut no_disk, key::ARG, "true");
        assert!(Spec::parse(&no_disk).is_err());
        field(&mut no_disk, key::IMAGE_DISK, "0");
        assert!(Spec::parse(&no_disk).is_ok());
    }

    #[test]
    fn probes_parse_by_role_and_refuse_what_is_ambiguous() {
        let mut b = Vec::new();
        field(&mut b, key::NAME, "web-0");
        field(&mut b, key::IMAGE_DISK, "0");
        field(&mut b, key::ARG, "server");
        field(&mut b, key::PROBE, "liveness");
        field(&mut b, key::HEALTH_TCP, "10.0.0.1:80");
        field(&mut b, key::HEALTH_RETRIES, "2");
        field(&mut b, key::PROBE, "readiness");
        field(&mut b, key::HEALTH_HTTP, &format!("10.0.0.1:80{SEP}/ready"));
        field(&mut b, key::HEALTH_HTTP_HEADER, "X-Probe: 1");
        field(&mut b, key::INIT_CONTAINER, "migrate");
        let s = Spec::parse(&b).unwrap();
        let live = s.probe(Role::Liveness).unwrap();
        assert_eq!((&live.check, live.retries), (&Check::Tcp("10.0.0.1:80".into()), 2));
        let ready = &s.probe(Role::Readiness).unwrap().check;
        let want =
            Check::Http { addr: "10.0.0.1:80".into(), path: "/ready".into(), headers: vec!["X-Probe: 1".into()] };
        assert_eq!(ready, &want);
        assert_eq!((s.probe(Role::Startup), s.init_containers.as_slice()), (None, &["migrate".to_owned()][..]));
        // Each of these makes the description ambiguous: refused, named.
        for (k, v, why) in [
            (key::HEALTH_ARG, "true", "both a command and a connection"),
            (key::HEALTH_TCP, "10.0.0.1:81", "two commands or connections"),
            (key::HEALTH_HTTP_HEADER, "X: 1\r\nEvil: 2", "line break"),
            (key::PROBE, "liveness", "a second liveness probe"),
            (key::PROBE, "sideways", "probe \"sideways\""),
        ] {
            let mut more = b.clone();
            field(&mut more, k, v);
            let e = Spec::parse(&more).unwrap_err().to_string();
            assert!(e.contains(why), "{k}={v:?}: {e}");
        }
        let mut empty = b.clone();
        field(&mut empty, key::PROBE, "startup");
        field(&mut empty, key::HEALTH_RETRIES, "1");
        assert!(Spec::parse(&empty).unwrap_err().to_string().contains("without a command"));
    }
}
