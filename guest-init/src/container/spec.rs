//! A node's container as init reads it from `CONTAINERS/<node>`
//! (`hvsim_abi::container`): untrusted bytes, parsed strictly.

use std::time::Duration;

use hvsim_abi::container::{fields, key, SEP};
use std::io;

use super::{bad, spec_path};

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

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Health {
    pub(super) args: Vec<String>,
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
    pub(super) health: Option<Health>,
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
            health: None,
            hosts: String::new(),
        };
        let ms = |v: &str| {
            v.parse::<u64>().map(Duration::from_millis).map_err(|_| bad(format!("{v:?} is not milliseconds")))
        };
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
                key::HEALTH_ARG => s.health.get_or_insert_with(Health::default).args.push(v.into()),
                key::HEALTH_INTERVAL_MS => s.health.get_or_insert_with(Health::default).interval = ms(v)?,
                key::HEALTH_TIMEOUT_MS => s.health.get_or_insert_with(Health::default).timeout = ms(v)?,
                key::HEALTH_START_PERIOD_MS => s.health.get_or_insert_with(Health::default).start_period = ms(v)?,
                key::HEALTH_START_INTERVAL_MS => s.health.get_or_insert_with(Health::default).start_interval = ms(v)?,
                key::HEALTH_RETRIES => {
                    s.health.get_or_insert_with(Health::default).retries =
                        v.parse().map_err(|_| bad(format!("health retries {v:?}")))?
                }
                key::HOSTS => s.hosts = v.into(),
                _ => return Err(bad(format!("unknown field {k:?}"))),
            }
        }
        if s.name.is_empty() || s.args.is_empty() || s.image_disk == u16::MAX {
            return Err(bad("a container without a name, an image disk or a command".into()));
        }
        if s.health.as_ref().is_some_and(|h| h.args.is_empty()) {
            return Err(bad("a health check without a command".into()));
        }
        Ok(s)
    }

    pub(super) fn load(node: u16) -> io::Result<Spec> {
        Spec::parse(&std::fs::read(spec_path(node))?)
    }
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
        assert_eq!(s.health.unwrap().interval, Duration::from_millis(500));
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
}
