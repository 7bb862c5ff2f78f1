//! Reading a compose file: YAML into the [`Project`] model, key by key, so
//! that every key hvsim does not support gets a warning that names it and
//! every malformed value an error that names its place (`services.db.
//! healthcheck.retries`) and its line. Every value is interpolated first
//! (see `interpolate.rs`).

use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

use super::interpolate::{self, Variables};
use super::{HealthTest, Healthcheck, Project, Service, Volume};
use crate::container::{Condition, Restart};

/// Parses `text` (the compose file at `path`) with `vars` for its
/// variables; returns the project and the warnings about what it ignores.
pub fn parse(text: &str, path: &Path, vars: &Variables) -> Result<(Project, Vec<String>), String> {
    let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|e| match e.location() {
        Some(l) => format!("line {}: {}", l.line(), strip_location(&e.to_string())),
        None => e.to_string(),
    })?;
    // `<<: *anchor` merge keys, as Compose takes them.
    doc.apply_merge().map_err(|e| format!("merge keys (<<): {e}"))?;
    let mut p = Parser { text, vars, warnings: Vec::new() };
    p.interpolate(&mut doc, "")?;
    let project = p.project(&doc, path.parent().unwrap_or(Path::new(".")))?;
    Ok((project, p.warnings))
}

/// serde_yaml's messages end with "at line L column C"; the line is said
/// first instead.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

struct Parser<'a> {
    text: &'a str,
    vars: &'a Variables,
    warnings: Vec<String>,
}

type R<T> = Result<T, String>;

impl Parser<'_> {
    /// An error about the value at `path` (dotted), with the line of its
    /// key when it can be found.
    fn err(&self, path: &str, why: impl std::fmt::Display) -> String {
        match self.line_of(path) {
            Some(line) => format!("line {line}: {path}: {why}"),
            None => format!("{path}: {why}"),
        }
    }

    /// The line where the last key of `path` is, searching for each key in
    /// turn below the previous one's line (good enough for block-style
    /// YAML, which is what compose files are).
    fn line_of(&self, path: &str) -> Option<usize> {
        let lines: Vec<&str> = self.text.lines().collect();
        let mut from = 0;
        let mut found = None;
        for key in path.split('.') {
            let key = key.split('[').next().unwrap_or(key);
            let i = (from..lines.len()).find(|&i| {
                let t = lines[i].trim_start().trim_start_matches("- ");
                t.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with(':'))
                    || t.strip_prefix(&format!("\"{key}\"")).is_some_and(|r| r.trim_start().starts_with(':'))
            })?;
            found = Some(i + 1);
            from = i + 1;
        }
        found
    }

    fn warn(&mut self, path: &str, why: &str) {
        let w = match self.line_of(path) {
            Some(line) => format!("line {line}: {path}: {why}"),
            None => format!("{path}: {why}"),
        };
        self.warnings.push(w);
    }

    /// Interpolates every string value under `v` (at `path`); keys stay
    /// as written, as in Compose.
    fn interpolate(&self, v: &mut Value, path: &str) -> R<()> {
        match v {
            Value::String(s) => *s = interpolate::interpolate(s, self.vars).map_err(|e| self.err(path, e))?,
            Value::Sequence(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.interpolate(item, &format!("{path}[{i}]"))?;
                }
            }
            Value::Mapping(m) => {
                for (k, item) in m.iter_mut() {
                    let k = self.string(k, path)?;
                    self.interpolate(item, &if path.is_empty() { k } else { format!("{path}.{k}") })?;
                }
            }
            Value::Tagged(t) => self.interpolate(&mut t.value, path)?,
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
        Ok(())
    }

    /// `NAME=VALUE`, or a bare `NAME` given its variable's value.
    fn env_entry(&self, entry: String, path: &str) -> R<String> {
        if entry.contains('=') {
            return Ok(entry);
        }
        self.vars.resolve_bare(&entry).map_err(|e| self.err(path, e))
    }

    /// A compose byte value (`64m`, `1g`, `512mb`, a number of bytes).
    fn memory(&self, v: &Value, path: &str) -> R<u64> {
        let text = self.string(v, path)?;
        let bytes = hvsim_vmm::faults::parse_size(&text).map_err(|e| self.err(path, e))?;
        if bytes < 1 << 20 {
            return Err(self.err(path, format!("`{text}` is less than 1 MiB")));
        }
        Ok(bytes)
    }

    fn map<'v>(&self, v: &'v Value, path: &str) -> R<&'v Mapping> {
        v.as_mapping().ok_or_else(|| self.err(path, "expected a mapping"))
    }

    /// The entries of the mapping `v` at `path`, each as its key below
    /// `v` (dotted), its whole path and its value; the mappings at the keys
    /// `descend` names are walked into, their entries given in their place
    /// (`deploy`: `resources.limits.memory`), so one `match` reads a
    /// nested section.
    fn leaves<'v>(&self, v: &'v Value, path: &str, descend: &[&str]) -> R<Vec<(String, String, &'v Value)>> {
        let mut out = Vec::new();
        self.walk(v, "", path, descend, &mut out)?;
        Ok(out)
    }

    /// [`Self::leaves`] below `prefix`, in the document's order.
    fn walk<'v>(
        &self,
        v: &'v Value,
        prefix: &str,
        path: &str,
        descend: &[&str],
        out: &mut Vec<(String, String, &'v Value)>,
    ) -> R<()> {
        for (k, v) in self.map(v, path)? {
            let k = self.string(k, path)?;
            let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
            let at = format!("{path}.{k}");
            if descend.contains(&key.as_str()) {
                self.walk(v, &key, &at, descend, out)?;
            } else {
                out.push((key, at, v));
            }
        }
        Ok(())
    }

    fn string(&self, v: &Value, path: &str) -> R<String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            _ => Err(self.err(path, "expected a string")),
        }
    }

    /// A command: a list of words, or a string split as a shell would.
    fn words(&self, v: &Value, path: &str) -> R<Vec<String>> {
        match v {
            Value::Sequence(items) => {
                items.iter().enumerate().map(|(i, x)| self.string(x, &format!("{path}[{i}]"))).collect()
            }
            Value::Null => Ok(Vec::new()),
            _ => {
                let s = self.string(v, path)?;
                shell_words::split(&s).map_err(|e| self.err(path, format!("cannot split {s:?}: {e}")))
            }
        }
    }

    fn strings(&self, v: &Value, path: &str) -> R<Vec<String>> {
        match v {
            Value::Sequence(items) => {
                items.iter().enumerate().map(|(i, x)| self.string(x, &format!("{path}[{i}]"))).collect()
            }
            _ => Ok(vec![self.string(v, path)?]),
        }
    }

    fn project(&mut self, doc: &Value, dir: &Path) -> R<Project> {
        let top = self.map(doc, "(top level)")?;
        let mut project = Project { name: None, services: Vec::new(), volumes: Vec::new() };
        let mut services = None;
        for (k, v) in top {
            let k = self.string(k, "(top level)")?;
            match k.as_str() {
                "services" => services = Some(v),
                "name" => project.name = Some(self.string(v, "name")?),
                "version" => {} // obsolete, ignored by Compose too
                // Extension fields: where YAML anchors live; Compose ignores them.
                x if x.starts_with("x-") => {}
                "volumes" => {
                    if let Value::Mapping(m) = v {
                        for (name, _) in m {
                            project.volumes.push(self.string(name, "volumes")?);
                        }
                    }
                }
                "networks" => self.warn("networks", "ignored: every service is on one network, hvsim's switch"),
                other => self.warn(other, "not supported; ignored"),
            }
        }
        let services = services.ok_or_else(|| "the file has no `services`".to_owned())?;
        for (name, def) in self.map(services, "services")? {
            let name = self.string(name, "services")?;
            let path = format!("services.{name}");
            if !valid_name(&name) {
                return Err(self.err(
                    &path,
                    "a service name is letters, digits, `-`, `_` and `.`, starting with a letter or digit",
                ));
            }
            let s = self.service(&name, def, &path, dir)?;
            project.services.push(s);
        }
        if project.services.is_empty() {
            return Err("`services` is empty".into());
        }
        Ok(project)
    }

    fn service(&mut self, name: &str, def: &Value, path: &str, dir: &Path) -> R<Service> {
        let mut s = Service { name: name.to_owned(), replicas: 1, ..Service::default() };
        let m = self.map(def, path)?;
        for (k, v) in m {
            let k = self.string(k, path)?;
            let at = format!("{path}.{k}");
            match k.as_str() {
                "image" => s.image = self.string(v, &at)?,
                // `null`: the image's own, as if not given.
                "command" => s.command = (!v.is_null()).then(|| self.words(v, &at)).transpose()?,
                "entrypoint" => s.entrypoint = (!v.is_null()).then(|| self.words(v, &at)).transpose()?,
                "environment" => s.environment.extend(self.environment(v, &at)?),
                "env_file" => {
                    for (i, f) in self.env_files(v, &at)?.into_iter().enumerate() {
                        let file = dir.join(&f.0);
                        let at = format!("{at}[{i}]");
                        match hvsim_vmm::files::read_text(&file) {
                            Ok(text) => {
                                for line in interpolate::env_lines(&text) {
                                    s.env_file.push(self.env_entry(line, &at)?);
                                }
                            }
                            Err(e) if !f.1 && e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(e) => return Err(self.err(&at, format!("{}: {e}", file.display()))),
                        }
                    }
                }
                "working_dir" => s.working_dir = Some(self.string(v, &at)?),
                "user" => s.user = Some(self.string(v, &at)?),
                "hostname" => s.hostname = Some(self.string(v, &at)?),
                "container_name" => self.warn(&at, "ignored: a node is named after its service"),
                "depends_on" => s.depends_on = self.depends_on(v, &at)?,
                "healthcheck" => s.healthcheck = self.healthcheck(v, &at)?,
                "volumes" => {
                    for (i, item) in v.as_sequence().ok_or_else(|| self.err(&at, "expected a list"))?.iter().enumerate() {
                        s.volumes.push(self.volume(item, &format!("{at}[{i}]"), dir)?);
                    }
                }
                // Sizes the guest's RAM (`target::default_mem`); one kernel
                // shares it, so it is not a limit the container is held to.
                "mem_limit" => s.mem_bytes = Some(self.memory(v, &at)?),
                "restart" => s.restart = Restart::parse(&self.string(v, &at)?).map_err(|e| self.err(&at, e))?,
                "init" => s.init = v.as_bool().ok_or_else(|| self.err(&at, "expected true or false"))?,
                "deploy" => {
                    for (key, at, v) in self.leaves(v, &at, &["resources", "resources.limits"])? {
                        match key.as_str() {
                            "replicas" => {
                                let max = hvsim_vmm::devices::virtio::MAX_NODES;
                                let n = v.as_u64().filter(|n| (1..=u64::from(max)).contains(n));
                                s.replicas =
                                    n.ok_or_else(|| self.err(&at, format!("expected a number from 1 to {max}")))? as u16;
                            }
                            "resources.limits.memory" => s.mem_bytes = Some(self.memory(v, &at)?),
                            _ => self.warn(&at, "not supported; ignored"),
                        }
                    }
                }
                "build" => {
                    return Err(self.err(&at, "hvsim does not build images: build it, `docker save` it and `hvsim image load` it, then name it in `image`"))
                }
                "ports" | "expose" => self.warn(&at, "ignored: services reach each other directly on hvsim's network, and nothing outside the guest can reach them"),
                "networks" | "network_mode" => self.warn(&at, "ignored: every service is on one network, hvsim's switch"),
                "stop_signal" | "stop_grace_period" | "labels" | "logging" | "tty" | "stdin_open" | "cap_add" | "cap_drop"
                | "privileged" | "security_opt" | "ulimits" | "sysctls" | "cpus" | "platform" | "pull_policy" => {
                    self.warn(&at, "not supported; ignored")
                }
                _ => self.warn(&at, "not supported; ignored"),
            }
        }
        if s.image.is_empty() {
            return Err(self.err(path, "no `image` (hvsim runs images from its store: `hvsim image load`)"));
        }
        Ok(s)
    }

    fn environment(&self, v: &Value, path: &str) -> R<Vec<String>> {
        match v {
            Value::Mapping(m) => m
                .iter()
                .map(|(k, val)| {
                    let k = self.string(k, path)?;
                    let at = format!("{path}.{k}");
                    match val {
                        Value::Null => self.env_entry(k, &at),
                        _ => Ok(format!("{k}={}", self.string(val, &at)?)),
                    }
                })
                .collect(),
            Value::Sequence(items) => items
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let at = format!("{path}[{i}]");
                    self.env_entry(self.string(x, &at)?, &at)
                })
                .collect(),
            _ => Err(self.err(path, "expected a mapping or a list of NAME=VALUE")),
        }
    }

    /// `env_file` entries: (path, required).
    fn env_files(&self, v: &Value, path: &str) -> R<Vec<(String, bool)>> {
        let items: Vec<&Value> = match v {
            Value::Sequence(s) => s.iter().collect(),
            _ => vec![v],
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Mapping(m) => {
                    let at = format!("{path}[{i}]");
                    let p = m.get("path").ok_or_else(|| self.err(&at, "no `path`"))?;
                    let required = m.get("required").and_then(Value::as_bool).unwrap_or(true);
                    Ok((self.string(p, &at)?, required))
                }
                _ => Ok((self.string(item, &format!("{path}[{i}]"))?, true)),
            })
            .collect()
    }

    fn depends_on(&self, v: &Value, path: &str) -> R<Vec<(String, Condition)>> {
        match v {
            Value::Sequence(_) => {
                Ok(self.strings(v, path)?.into_iter().map(|n| (n, Condition::ServiceStarted)).collect())
            }
            Value::Mapping(m) => m
                .iter()
                .map(|(k, val)| {
                    let k = self.string(k, path)?;
                    let at = format!("{path}.{k}");
                    let cond = match val.get("condition") {
                        None => Condition::ServiceStarted,
                        Some(c) => match self.string(c, &at)?.as_str() {
                            "service_started" => Condition::ServiceStarted,
                            "service_healthy" => Condition::ServiceHealthy,
                            "service_completed_successfully" => Condition::ServiceCompletedSuccessfully,
                            other => {
                                return Err(self.err(&format!("{at}.condition"), format!("unknown condition {other:?}")))
                            }
                        },
                    };
                    Ok((k, cond))
                })
                .collect(),
            _ => Err(self.err(path, "expected a list or a mapping of services")),
        }
    }

    fn healthcheck(&mut self, v: &Value, path: &str) -> R<Option<Healthcheck>> {
        let m = self.map(v, path)?;
        let mut h = Healthcheck::default();
        for (k, val) in m {
            let k = self.string(k, path)?;
            let at = format!("{path}.{k}");
            match k.as_str() {
                "test" => {
                    h.test = match val {
                        Value::String(s) => HealthTest::Shell(s.clone()),
                        _ => {
                            let words = self.strings(val, &at)?;
                            match words.split_first() {
                                Some((first, rest)) if first == "CMD" => HealthTest::Exec(rest.to_vec()),
                                Some((first, rest)) if first == "CMD-SHELL" => HealthTest::Shell(rest.join(" ")),
                                Some((first, _)) if first == "NONE" => return Ok(None),
                                _ => {
                                    return Err(
                                        self.err(&at, "expected [\"CMD\", ...], [\"CMD-SHELL\", \"...\"] or a string")
                                    )
                                }
                            }
                        }
                    }
                }
                "interval" => h.interval_ms = self.duration(val, &at)?,
                "timeout" => h.timeout_ms = self.duration(val, &at)?,
                "start_period" => h.start_period_ms = self.duration(val, &at)?,
                "start_interval" => h.start_interval_ms = self.duration(val, &at)?,
                "retries" => {
                    h.retries = val
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| self.err(&at, "expected a number"))?
                }
                "disable" => {
                    if val.as_bool() == Some(true) {
                        return Ok(None);
                    }
                }
                _ => self.warn(&at, "not supported; ignored"),
            }
        }
        if matches!(h.test, HealthTest::None) {
            return Err(self.err(path, "no `test`"));
        }
        Ok(Some(h))
    }

    fn duration(&self, v: &Value, path: &str) -> R<u64> {
        let s = self.string(v, path)?;
        parse_go_duration(&s).ok_or_else(|| self.err(path, format!("{s:?} is not a duration (e.g. 1m30s, 500ms)")))
    }

    fn volume(&self, v: &Value, path: &str, dir: &Path) -> R<Volume> {
        let (source, target, read_only, bind) = match v {
            Value::String(s) => {
                let parts: Vec<&str> = s.split(':').collect();
                let (src, tgt, mode) = match parts[..] {
                    [t] => ("", t, ""),
                    [s, t] => (s, t, ""),
                    [s, t, m] => (s, t, m),
                    _ => return Err(self.err(path, format!("{s:?} is not SOURCE:TARGET[:MODE]"))),
                };
                let ro = mode.split(',').any(|m| m == "ro");
                let bind = src.starts_with(['.', '/', '~']);
                (src.to_owned(), tgt.to_owned(), ro, bind)
            }
            Value::Mapping(m) => {
                let get = |k: &str| m.get(k).map(|x| self.string(x, &format!("{path}.{k}"))).transpose();
                let kind = get("type")?.unwrap_or_else(|| "volume".into());
                let target = get("target")?.ok_or_else(|| self.err(path, "no `target`"))?;
                let ro = m.get("read_only").and_then(Value::as_bool).unwrap_or(false);
                match kind.as_str() {
                    "volume" | "bind" => (get("source")?.unwrap_or_default(), target, ro, kind == "bind"),
                    other => {
                        return Err(self.err(path, format!("volume type {other:?} is not supported (volume or bind)")))
                    }
                }
            }
            _ => return Err(self.err(path, "expected a string or a mapping")),
        };
        if !target.starts_with('/') {
            return Err(self.err(path, format!("target {target:?} is not an absolute path")));
        }
        if target.contains('\u{1f}') || source.contains('\u{1f}') {
            return Err(self.err(path, "a path with a control character"));
        }
        if bind {
            let host = if let Some(rest) = source.strip_prefix("~/") {
                Path::new(&std::env::var("HOME").unwrap_or_default()).join(rest)
            } else {
                dir.join(&source)
            };
            return Ok(Volume::Bind { host, target, read_only });
        }
        // An anonymous volume is a named one nobody else uses.
        let name = if source.is_empty() { format!("anonymous{}", target.replace('/', "_")) } else { source };
        if !valid_name(&name) {
            return Err(self.err(path, format!("volume name {name:?}")));
        }
        Ok(Volume::Named { name, target, read_only })
    }
}

fn valid_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.len() <= 63
}

/// A Go duration (`1m30s`, `500ms`, `2h`, `1.5s`) in milliseconds.
pub fn parse_go_duration(s: &str) -> Option<u64> {
    let mut rest = s.trim();
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let ms = match &rest[..unit_end] {
            "ns" => 1e-6,
            "us" | "µs" => 1e-3,
            "ms" => 1.0,
            "s" => 1e3,
            "m" => 60e3,
            "h" => 3600e3,
            _ => return None,
        };
        total += n * ms;
        rest = &rest[unit_end..];
    }
    Some(total.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("1m30s"), Some(90_000));
        assert_eq!(parse_go_duration("500ms"), Some(500));
        assert_eq!(parse_go_duration("1.5s"), Some(1500));
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("5 parsecs"), None);
    }

    /// Anchors in `x-` extension fields, merged into services: what
    /// Compose files use to share a service's definition.
    #[test]
    fn extension_fields_are_ignored_and_their_anchors_serve() {
        let text = "x-common: &common\n  image: busybox\n  command: sleep 1\nservices:\n  a: *common\n  b:\n    <<: *common\n    command: sleep 2\n";
        let (p, warnings) = parse(text, Path::new("/p/compose.yaml"), &Variables::default()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let names: Vec<&str> = p.services.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
