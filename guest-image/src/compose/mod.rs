//! Compose projects: a docker-compose file (the subset of the Compose
//! Specification real projects use, see docs/compose.md) turned into one
//! container per node.
//!
//! - `parse`: the YAML, key by key, with warnings for what is ignored;
//! - `interpolate`: variables (`${VAR:-default}`, bare `NAME`s), from env
//!   files only;
//! - here: the project model, its checks (names, dependencies, cycles),
//!   and the nodes it becomes (a node per service, or per replica).

pub mod interpolate;
pub mod parse;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::container::{bind_contents, Check, Condition, Container, HealthCheck, Mount, Overrides, Restart};
use crate::error::{invalid, io, Result};
use crate::oci::store::Store;
pub use interpolate::Variables;

/// A compose file's project.
#[derive(Clone, Debug, Default)]
pub struct Project {
    pub name: Option<String>,
    /// In the file's order: node numbers follow it.
    pub services: Vec<Service>,
    /// Top-level named volumes.
    pub volumes: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Service {
    pub name: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    /// From `env_file`, then `environment` (which wins): `NAME=VALUE` each,
    /// bare names given their variables' values.
    pub env_file: Vec<String>,
    pub environment: Vec<String>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
    pub hostname: Option<String>,
    pub depends_on: Vec<(String, Condition)>,
    pub healthcheck: Option<Healthcheck>,
    pub volumes: Vec<Volume>,
    pub restart: Restart,
    pub init: bool,
    pub replicas: u16,
    /// `mem_limit` or `deploy.resources.limits.memory`: what the service
    /// adds to the guest's RAM, each replica.
    pub mem_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub enum HealthTest {
    #[default]
    None,
    Exec(Vec<String>),
    Shell(String),
}

#[derive(Clone, Debug)]
pub struct Healthcheck {
    pub test: HealthTest,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub start_period_ms: u64,
    /// Between checks during the start period, until the first passes.
    pub start_interval_ms: u64,
    pub retries: u32,
}

impl Default for Healthcheck {
    /// Docker's defaults.
    fn default() -> Healthcheck {
        Healthcheck {
            test: HealthTest::None,
            interval_ms: 30_000,
            timeout_ms: 30_000,
            start_period_ms: 0,
            start_interval_ms: 5_000,
            retries: 3,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Volume {
    Named { name: String, target: String, read_only: bool },
    Bind { host: PathBuf, target: String, read_only: bool },
}

/// Reads and checks the compose file at `path`, its variables taken from
/// `env_files` (or else the project's `.env`: see [`Variables::files_for`]);
/// returns the project and warnings about what hvsim ignores in it.
pub fn load(path: &Path, env_files: &[PathBuf]) -> Result<(Project, Vec<String>)> {
    let vars = Variables::from_files(&Variables::files_for(path, env_files))?;
    let text = hvsim_vmm::files::read_text(path).map_err(io("reading the compose file", path))?;
    parse_checked(&text, path, &vars).map_err(|why| invalid(path.display(), why))
}

/// Parses and checks the text of the compose file at `path` (which only
/// places its relative paths): what [`load`] does once the file is read.
pub fn parse_checked(text: &str, path: &Path, vars: &Variables) -> std::result::Result<(Project, Vec<String>), String> {
    let (project, warnings) = parse::parse(text, path, vars)?;
    project.check()?;
    Ok((project, warnings))
}

impl Project {
    /// Every dependency names a service, `service_healthy` ones have a
    /// health check, and there is no cycle.
    fn check(&self) -> std::result::Result<(), String> {
        let by_name: BTreeMap<&str, &Service> = self.services.iter().map(|s| (s.name.as_str(), s)).collect();
        if by_name.len() != self.services.len() {
            return Err("two services have the same name".into());
        }
        let nodes: usize = self.services.iter().map(|s| usize::from(s.replicas)).sum();
        if nodes > usize::from(hvsim_vmm::devices::virtio::MAX_NODES) {
            return Err(format!(
                "{nodes} nodes (services and replicas); hvsim supports at most {}",
                hvsim_vmm::devices::virtio::MAX_NODES
            ));
        }
        for s in &self.services {
            for (dep, cond) in &s.depends_on {
                let Some(d) = by_name.get(dep.as_str()) else {
                    return Err(format!("services.{}.depends_on: no service {dep:?}", s.name));
                };
                if *cond == Condition::ServiceHealthy && d.healthcheck.is_none() {
                    return Err(format!(
                        "services.{}.depends_on.{dep}: condition service_healthy, but {dep} has no healthcheck",
                        s.name
                    ));
                }
            }
        }
        // Depth-first search for a cycle.
        fn visit<'a>(
            s: &'a str,
            by_name: &BTreeMap<&str, &'a Service>,
            state: &mut BTreeMap<&'a str, bool>,
            path: &mut Vec<&'a str>,
        ) -> std::result::Result<(), String> {
            match state.get(s) {
                Some(true) => return Ok(()),
                Some(false) => {
                    path.push(s);
                    return Err(format!("depends_on has a cycle: {}", path.join(" -> ")));
                }
                None => {}
            }
            state.insert(s, false);
            path.push(s);
            for (dep, _) in &by_name[s].depends_on {
                visit(dep, by_name, state, path)?;
            }
            path.pop();
            state.insert(s, true);
            Ok(())
        }
        let mut state = BTreeMap::new();
        for s in &self.services {
            visit(&s.name, &by_name, &mut state, &mut Vec::new())?;
        }
        Ok(())
    }

    /// The node names, in node order: each service, or `service-N` for
    /// each of its replicas.
    pub fn node_names(&self) -> Vec<String> {
        self.services.iter().flat_map(replica_names).collect()
    }

    /// One container per node, resolved against the image store.
    pub fn containers(&self, store: &Store) -> Result<Vec<Container>> {
        let names = self.node_names();
        let nodes_of = |service: &str| -> Vec<u16> {
            let s = self.services.iter().find(|s| s.name == service).expect("checked");
            replica_names(s).iter().map(|n| names.iter().position(|x| x == n).expect("a node") as u16).collect()
        };
        let mut out = Vec::new();
        for s in &self.services {
            let depends: Vec<(u16, Condition)> =
                s.depends_on.iter().flat_map(|(d, c)| nodes_of(d).into_iter().map(move |n| (n, *c))).collect();
            let mut mounts = Vec::new();
            for v in &s.volumes {
                mounts.push(match v {
                    Volume::Named { name, target, read_only } => {
                        Mount::Volume { name: name.clone(), target: target.clone(), read_only: *read_only }
                    }
                    Volume::Bind { host, target, read_only } => {
                        let (sha256, _) = bind_contents(host, "")?;
                        Mount::Bind { host: host.clone(), sha256, target: target.clone(), read_only: *read_only }
                    }
                });
            }
            let health = s.healthcheck.as_ref().map(|h| HealthCheck {
                check: Check::Exec(match &h.test {
                    HealthTest::Exec(a) => a.clone(),
                    HealthTest::Shell(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
                    HealthTest::None => unreachable!("parse refuses a health check without a test"),
                }),
                interval_ms: h.interval_ms,
                timeout_ms: h.timeout_ms,
                start_period_ms: h.start_period_ms,
                start_interval_ms: h.start_interval_ms,
                retries: h.retries,
            });
            for node_name in replica_names(s) {
                let o = Overrides {
                    entrypoint: s.entrypoint.clone(),
                    command: s.command.clone(),
                    environment: s.env_file.iter().chain(&s.environment).cloned().collect(),
                    working_dir: s.working_dir.clone(),
                    user: s.user.clone(),
                    hostname: if s.replicas > 1 { Some(node_name.clone()) } else { s.hostname.clone() },
                    restart: s.restart,
                    init: s.init,
                    mounts: mounts.clone(),
                    depends: depends.clone(),
                    health: health.clone(),
                };
                let mut c = Container::resolve(store, &node_name, &s.image, o)?;
                c.mem_bytes = s.mem_bytes;
                // The service's name resolves to its first replica.
                if s.replicas > 1 && node_name.ends_with("-1") {
                    c.aliases.push(s.name.clone());
                }
                out.push(c);
            }
        }
        Ok(out)
    }
}

fn replica_names(s: &Service) -> Vec<String> {
    if s.replicas <= 1 {
        vec![s.name.clone()]
    } else {
        (1..=s.replicas).map(|i| format!("{}-{i}", s.name)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(yaml: &str) -> std::result::Result<(Project, Vec<String>), String> {
        project_with(yaml, &Variables::of(&[("B", "from the env file")]))
    }

    fn project_with(yaml: &str, vars: &Variables) -> std::result::Result<(Project, Vec<String>), String> {
        let (p, w) = parse::parse(yaml, Path::new("/nonexistent/compose.yaml"), vars)?;
        p.check()?;
        Ok((p, w))
    }

    #[test]
    fn the_subset_real_projects_use() {
        let (p, warnings) = project(
            r#"
services:
  db:
    image: redis:7
    command: redis-server --appendonly yes
    environment:
      A: "1"
      B:
    healthcheck:
      test: ["CMD", "redis-cli", "ping"]
      interval: 1s
      retries: 5
      start_period: 1m
      start_interval: 200ms
    volumes:
      - data:/data
      - /tmp:/host-tmp:ro
    restart: on-failure
    ports: ["6379:6379"]
  client:
    image: redis:7
    entrypoint: ["sh", "-c"]
    command: ["echo hi"]
    environment: ["C=3"]
    depends_on:
      db:
        condition: service_healthy
    deploy:
      replicas: 2
      resources:
        limits:
          memory: 32m
    mem_limit: 48mb
volumes:
  data: {}
"#,
        )
        .unwrap();
        assert_eq!(p.node_names(), ["db", "client-1", "client-2"]);
        let db = &p.services[0];
        assert_eq!(db.command.as_deref().unwrap(), ["redis-server", "--appendonly", "yes"]);
        assert_eq!(db.environment, ["A=1", "B=from the env file"]);
        let h = db.healthcheck.as_ref().unwrap();
        assert_eq!((h.interval_ms, h.timeout_ms, h.retries), (1000, 30_000, 5));
        assert_eq!((h.start_period_ms, h.start_interval_ms), (60_000, 200));
        assert!(
            matches!(&db.volumes[0], Volume::Named { name, target, read_only: false } if name == "data" && target == "/data")
        );
        assert!(matches!(&db.volumes[1], Volume::Bind { read_only: true, .. }));
        assert_eq!(db.restart, Restart::OnFailure);
        assert_eq!(p.services[1].depends_on, [("db".to_owned(), Condition::ServiceHealthy)]);
        // The later key wins, as in the YAML a reader sees.
        assert_eq!((db.mem_bytes, p.services[1].mem_bytes), (None, Some(48 << 20)));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("line 19: services.db.ports: ignored"), "{warnings:?}");
    }

    /// examples/compose/redis-tree, the largest example: 64 services
    /// (a Redis primary, three mids, 59 leaves, a client), each server's
    /// share of RAM from its `mem_limit`, and a fault plan whose `among`
    /// names every server and not the client.
    #[test]
    fn the_largest_example_is_sixty_four_services() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/compose/redis-tree");
        let path = dir.join("compose.yaml");
        let (p, warnings) =
            parse_checked(&std::fs::read_to_string(&path).unwrap(), &path, &Variables::default()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let names = p.node_names();
        assert_eq!(names.len(), 64);
        let servers: Vec<&Service> = p.services.iter().filter(|s| s.name != "client").collect();
        assert_eq!(servers.len(), 1 + 3 + 59);
        assert!(servers.iter().all(|s| s.mem_bytes == Some(32 << 20)), "every server asks 32 MiB");
        let leaf = |k: usize| p.services.iter().find(|s| s.name == format!("l{k:02}")).unwrap();
        assert_eq!(leaf(1).depends_on, [("m1".to_owned(), Condition::ServiceStarted)]);
        assert_eq!(leaf(59).depends_on, [("m2".to_owned(), Condition::ServiceStarted)]);
        let plan = std::fs::read_to_string(dir.join("partitions.toml")).unwrap();
        let among: Vec<String> = plan
            .split("among = [")
            .nth(1)
            .and_then(|rest| rest.split(']').next())
            .unwrap()
            .split(',')
            .map(|n| n.trim().trim_matches('"').to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        let server_names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
        assert_eq!(among, server_names, "the plan cuts among every server, and only them");
    }

    #[test]
    fn mistakes_are_one_line_errors_with_the_line() {
        let cases = [
            ("services:\n  a:\n    image: x\n   bad indent: 1\n", "line 4"),
            ("services:\n  a:\n    image: x\n    depends_on: [b]\n", "services.a.depends_on: no service \"b\""),
            ("services:\n  a:\n    image: x\n    healthcheck:\n      retries: many\n      test: [\"CMD\", \"true\"]\n", "line 5: services.a.healthcheck.retries: expected a number"),
            ("services:\n  a:\n    build: .\n", "line 3: services.a.build: hvsim does not build images"),
            ("services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n", "cycle: a -> b -> a"),
            ("services:\n  a:\n    image: x\n  b:\n    image: x\n    depends_on:\n      a: {condition: service_healthy}\n", "a has no healthcheck"),
            ("services:\n  a:\n    command: x\n", "services.a: no `image`"),
            ("version: '3'\n", "no `services`"),
            ("services:\n  a:\n    image: x\n    mem_limit: lots\n", "line 4: services.a.mem_limit: `lots`: unknown size unit"),
            ("services:\n  a:\n    image: x\n    mem_limit: 4k\n", "less than 1 MiB"),
            ("services:\n  a:\n    image: x\n    deploy:\n      replicas: 129\n", "expected a number from 1 to 128"),
        ];
        for (yaml, want) in cases {
            let e = project(yaml).unwrap_err();
            assert!(e.contains(want), "{yaml:?}: {e:?} should say {want:?}");
            assert!(!e.contains('\n'), "one line: {e:?}");
        }
    }

    /// docs/compose.md's rules for commands and variables, one by one.
    #[test]
    fn null_commands_variables_and_bare_names_follow_the_rules() {
        let vars = Variables::of(&[("TAG", "7"), ("PORT", "6380"), ("EMPTY", ""), ("SECRET", "s3")]);
        let one = |service: &str| -> std::result::Result<Service, String> {
            let (p, _) = project_with(&format!("services:\n  a:\n    image: redis\n{service}"), &vars)?;
            Ok(p.services.into_iter().next().unwrap())
        };
        // `null` means the image's own; an empty list, none.
        let a = one("    command: null\n    entrypoint: ~\n").unwrap();
        assert_eq!((a.command, a.entrypoint), (None, None));
        assert_eq!(one("    command: []\n").unwrap().command, Some(vec![]));
        // Every value is interpolated; keys are not; $$ is a $.
        let a = one("    command: redis-server --port ${PORT} --tag $TAG --x ${MISSING:-d} --y $$HOME\n").unwrap();
        assert_eq!(a.command.unwrap(), ["redis-server", "--port", "6380", "--tag", "7", "--x", "d", "--y", "$HOME"]);
        let a = one("    environment:\n      LEVEL: ${EMPTY:-info}\n      ${TAG}: x\n").unwrap();
        assert_eq!(a.environment, ["LEVEL=info", "${TAG}=x"]);
        let (p, _) = project_with("services:\n  a:\n    image: redis:${TAG}\n", &vars).unwrap();
        assert_eq!(p.services[0].image, "redis:7");
        // A bare name takes the variable's value, in either form.
        assert_eq!(one("    environment: [SECRET, A=1]\n").unwrap().environment, ["SECRET=s3", "A=1"]);
        assert_eq!(one("    environment:\n      SECRET:\n").unwrap().environment, ["SECRET=s3"]);
        // What has no value is refused, with its line, never taken from
        // hvsim's own environment (which has PATH).
        for (service, line, at) in [
            ("    command: echo $PATH\n", 4, "services.a.command"),
            ("    environment: [PATH]\n", 4, "services.a.environment[0]"),
            ("    environment:\n      PATH:\n", 5, "services.a.environment.PATH"),
            ("    healthcheck:\n      test: [\"CMD\", \"${NOPE:?say so}\"]\n", 5, "services.a.healthcheck.test[1]"),
        ] {
            let e = one(service).unwrap_err();
            assert!(e.starts_with(&format!("line {line}: {at}: ")), "{service:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn env_file_bare_names_are_resolved_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("svc.env"), "A=1\nSECRET\n").unwrap();
        let compose = dir.path().join("compose.yaml");
        std::fs::write(&compose, "services:\n  a:\n    image: redis\n    env_file: svc.env\n").unwrap();
        let vars_file = dir.path().join("vars.env");
        std::fs::write(&vars_file, "SECRET=from vars.env\n").unwrap();
        let (p, _) = load(&compose, std::slice::from_ref(&vars_file)).unwrap();
        assert_eq!(p.services[0].env_file, ["A=1", "SECRET=from vars.env"]);
        let e = load(&compose, &[]).unwrap_err().to_string();
        assert!(e.contains("line 4: services.a.env_file[0]: `SECRET` takes its value from a variable"), "{e}");
        // The project's .env serves when no env file is given.
        std::fs::write(dir.path().join(".env"), "SECRET=from .env\n").unwrap();
        assert_eq!(load(&compose, &[]).unwrap().0.services[0].env_file, ["A=1", "SECRET=from .env"]);
        let e = load(&compose, &[dir.path().join("missing.env")]).unwrap_err().to_string();
        assert!(e.contains("missing.env"), "{e}");
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `compose` fuzz target does, over its corpus and
    /// regressions; every seed (real compose files) parses and checks.
    #[test]
    fn fuzz_corpus_and_regressions_parse_or_fail_cleanly() {
        let inputs = fuzz_inputs("compose");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let Ok(text) = std::str::from_utf8(&data) else { continue };
            let parsed = parse_checked(text, Path::new("/nonexistent/hvsim-fuzz/compose.yaml"), &Variables::default());
            match parsed {
                Ok((p, _)) => {
                    let _ = p.node_names();
                }
                Err(e) => assert!(!file.iter().any(|c| c == "corpus"), "{}: {e}", file.display()),
            }
        }
    }
}
