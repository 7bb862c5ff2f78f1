//! Kubernetes manifests: the YAML a team applies with `kubectl apply -f`
//! (rendered: no Helm, no Kustomize), run as a single-node cluster would
//! run it, one node per pod, with hvsim's own container runtime (no
//! K3s: a control plane would cost minutes per start here, and bring its
//! own nondeterminism). docs/kubernetes.md says what each object and field
//! does, and where hvsim differs from `kubectl apply`.
//!
//! - `api`: the objects as serde reads them; a field hvsim does not know is
//!   an error that names it.
//! - here: documents into objects, workloads into pods (names, env, files,
//!   probes, order), Services into names and virtual addresses, and pods
//!   into containers.

pub mod api;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use sha2::{Digest as _, Sha256};

use crate::container::{
    contents_sha256, Check, Condition, Container, HealthCheck, Mount, Overrides, Restart, VirtualPort, VirtualService,
};
use crate::error::{invalid, io, ImageError, Result};
use crate::oci::store::Store;

/// The cluster domain Services' names end in.
pub const DOMAIN: &str = "cluster.local";

/// What the manifests run: one pod per node, in node order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cluster {
    pub pods: Vec<Pod>,
    /// Its ClusterIP Services, numbered by node as `pods` is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<VirtualService>,
    /// The manifest files read, in order.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

/// One pod: one node, its containers (the first is the node's: its status
/// is the pod's), and the init containers run to completion before them.
#[derive(Clone, Debug, Serialize)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    /// The workload it belongs to (`StatefulSet etcd`), or `Pod NAME`.
    pub owner: String,
    #[serde(flatten)]
    pub main: PodContainer,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<PodContainer>,
    /// Its second and later containers, run beside the first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sidecars: Vec<PodContainer>,
    pub restart: Restart,
    /// Pods it waits for (a StatefulSet's previous ordinal), and for what.
    pub depends: Vec<(String, Condition)>,
    pub hostname: String,
    /// The DNS names that resolve to it: its Services'.
    pub aliases: Vec<String>,
    /// The Services that select it, as a fault plan names them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
    /// `terminationGracePeriodSeconds`, when it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_grace_ms: Option<u64>,
    /// Its labels, which Services select.
    #[serde(skip)]
    labels: BTreeMap<String, String>,
    /// The headless Service that names it (a StatefulSet's `serviceName`,
    /// a pod's `subdomain`).
    #[serde(skip)]
    subdomain: Option<String>,
    /// Its containers' named ports, which a Service's `targetPort` may name.
    #[serde(skip)]
    named_ports: BTreeMap<String, u16>,
    /// Every port its containers declare.
    #[serde(skip)]
    ports: BTreeSet<u16>,
}

/// One of a pod's containers.
#[derive(Clone, Debug, Serialize)]
pub struct PodContainer {
    /// Its name in the pod.
    pub container: String,
    pub image: String,
    /// Kubernetes' `command` replaces the image's entrypoint, `args` its cmd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// `NAME=VALUE`, `envFrom` first, then `env`.
    pub env: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    pub mounts: Vec<PodMount>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<HealthCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness: Option<HealthCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub startup: Option<HealthCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
}

/// Who a pod is: what its containers are translated for.
struct PodId<'a> {
    name: &'a str,
    namespace: &'a str,
    /// Its node, which gives its address.
    node: usize,
    /// Its StatefulSet's volume claim templates.
    claims: &'a [&'a str],
}

impl PodId<'_> {
    fn ip(&self) -> String {
        format!("10.0.0.{}", self.node + 1)
    }
}

/// A pod's volume, as mounted.
#[derive(Clone, Debug, Serialize)]
pub enum PodMount {
    /// emptyDir, or a StatefulSet's claim: a directory on the node's disk,
    /// kept across container restarts (and for claims, crashes).
    Volume { name: String, target: String, read_only: bool },
    /// A ConfigMap's or Secret's keys as files (path below the target,
    /// mode, contents).
    Files { target: String, files: Vec<(String, u32, Vec<u8>)> },
    /// One of them, at the target (a `subPath`).
    File { target: String, mode: u32, data: Vec<u8> },
}

impl PodMount {
    /// The part of it at `sub` (a `subPath`): a directory of a volume
    /// (made if missing), or a ConfigMap's or Secret's file or directory.
    fn below(self, sub: &str) -> std::result::Result<PodMount, String> {
        match self {
            PodMount::Volume { name, target, read_only } => {
                Ok(PodMount::Volume { name: format!("{name}/{sub}"), target, read_only })
            }
            PodMount::Files { target, files } => {
                if let Some((_, mode, data)) = files.iter().find(|(path, _, _)| path == sub) {
                    return Ok(PodMount::File { target, mode: *mode, data: data.clone() });
                }
                let prefix = format!("{sub}/");
                let inside: Vec<_> = files
                    .into_iter()
                    .filter_map(|(path, mode, data)| Some((path.strip_prefix(&prefix)?.to_owned(), mode, data)))
                    .collect();
                if inside.is_empty() {
                    return Err(format!("{sub:?}: no such key or path in the volume"));
                }
                Ok(PodMount::Files { target, files: inside })
            }
            PodMount::File { .. } => unreachable!("a volume is made a file only by its subPath"),
        }
    }
}

/// Where an object came from, for errors: `file: document N (Kind name)`.
#[derive(Clone, Debug)]
struct Origin {
    file: String,
    document: usize,
    what: String,
}

impl Origin {
    fn err(&self, field: &str, why: impl std::fmt::Display) -> String {
        let at = if field.is_empty() { String::new() } else { format!("{field}: ") };
        format!("{}: document {} ({}): {at}{why}", self.file, self.document, self.what)
    }
}

enum Object {
    Pod(api::Pod),
    Workload(api::Workload),
    Service(api::Service),
    Data(api::Data),
    Namespace,
}

/// Reads the manifests at `paths` (files, or directories of `.yaml` and
/// `.yml` files, read in name order) into the cluster they make.
pub fn load(paths: &[PathBuf]) -> Result<Cluster> {
    let mut files = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(io("reading the manifests", p))?;
        if meta.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(io("reading the manifests", p))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            inside.sort();
            if inside.is_empty() {
                return Err(invalid(p.display(), "a directory with no .yaml or .yml file"));
            }
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    let mut texts = Vec::new();
    for f in &files {
        let text = hvsim_vmm::files::read_text(f).map_err(io("reading a manifest", f))?;
        texts.push((f.display().to_string(), text));
    }
    let mut cluster = translate(&texts).map_err(ImageError::Setup)?;
    cluster.files = files;
    Ok(cluster)
}

/// The cluster the manifests (file name, text) make; an error names the
/// file, the document and the field.
pub fn translate(manifests: &[(String, String)]) -> std::result::Result<Cluster, String> {
    let mut objects = Vec::new();
    // As `kubectl apply` names objects: a second of one kind, name and
    // namespace would replace the first.
    let mut named = BTreeSet::new();
    for (file, text) in manifests {
        for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let origin = |what: String| Origin { file: file.clone(), document: i + 1, what };
            let value = Value::deserialize(doc).map_err(|e| origin("YAML".into()).err("", e))?;
            if value.is_null() {
                continue;
            }
            let kind = value.get("kind").and_then(Value::as_str).unwrap_or("").to_owned();
            let name = value.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).unwrap_or("?");
            let o = origin(format!("{kind} {name}"));
            let ns =
                value.get("metadata").and_then(|m| m.get("namespace")).and_then(Value::as_str).unwrap_or("default");
            if !named.insert((kind.clone(), ns.to_owned(), name.to_owned())) {
                return Err(o.err("metadata.name", format!("a second {kind} {name} in namespace {ns}")));
            }
            fn read<T: serde::de::DeserializeOwned>(v: Value, o: &Origin) -> std::result::Result<T, String> {
                serde_path_to_error::deserialize(v).map_err(|e| {
                    let why = e.inner().to_string();
                    // serde lists every field it knows; the docs do better.
                    let why = match why.find(", expected") {
                        Some(cut) if why.starts_with("unknown field") => {
                            format!("{}: not supported by hvsim (docs/kubernetes.md)", &why[..cut])
                        }
                        _ => why,
                    };
                    o.err(&e.path().to_string(), why)
                })
            }
            let object = match kind.as_str() {
                "Pod" => Object::Pod(read(value, &o)?),
                "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Job" => Object::Workload(read(value, &o)?),
                "Service" => Object::Service(read(value, &o)?),
                "ConfigMap" | "Secret" => Object::Data(read(value, &o)?),
                "Namespace" => {
                    let _: api::Namespace = read(value, &o)?;
                    Object::Namespace
                }
                "" => return Err(o.err("kind", "missing")),
                other => {
                    return Err(o.err(
                        "kind",
                        format!("{other} is not supported by hvsim: it runs workloads, Services, ConfigMaps and Secrets (docs/kubernetes.md)"),
                    ))
                }
            };
            objects.push((o, object));
        }
    }
    Translator::new(&objects)?.cluster(&objects)
}

/// A ConfigMap's or Secret's keys and values.
type Values = BTreeMap<String, Vec<u8>>;

struct Translator {
    /// By (namespace, kind, name).
    data: BTreeMap<(String, String, String), Values>,
}

fn namespace(m: &api::Meta) -> String {
    m.namespace.clone().unwrap_or_else(|| "default".into())
}

impl Translator {
    fn new(objects: &[(Origin, Object)]) -> std::result::Result<Translator, String> {
        let mut data = BTreeMap::new();
        for (o, object) in objects {
            let Object::Data(d) = object else { continue };
            let mut values: Values = BTreeMap::new();
            let secret = d.kind == "Secret";
            for (k, v) in &d.data {
                let bytes = if secret {
                    base64::engine::general_purpose::STANDARD
                        .decode(v.trim())
                        .map_err(|e| o.err(&format!("data.{k}"), format!("not base64: {e}")))?
                } else {
                    v.clone().into_bytes()
                };
                values.insert(k.clone(), bytes);
            }
            for (k, v) in &d.binary_data {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(v.trim())
                    .map_err(|e| o.err(&format!("binaryData.{k}"), format!("not base64: {e}")))?;
                values.insert(k.clone(), bytes);
            }
            for (k, v) in &d.string_data {
                values.insert(k.clone(), v.clone().into_bytes());
            }
            let key = (namespace(&d.metadata), d.kind.clone(), d.metadata.name.clone());
            data.insert(key, values);
        }
        Ok(Translator { data })
    }

    fn values(&self, ns: &str, kind: &str, name: &str) -> Option<&Values> {
        self.data.get(&(ns.to_owned(), kind.to_owned(), name.to_owned()))
    }

    fn cluster(&self, objects: &[(Origin, Object)]) -> std::result::Result<Cluster, String> {
        let mut pods: Vec<Pod> = Vec::new();
        for (o, object) in objects {
            match object {
                Object::Pod(p) => {
                    let ns = namespace(&p.metadata);
                    let owner = format!("Pod {}", p.metadata.name);
                    let id = PodId { name: &p.metadata.name, namespace: &ns, node: pods.len(), claims: &[] };
                    let mut pod = self.pod(o, "spec", &p.spec, &id, owner, Restart::Always)?;
                    pod.labels = p.metadata.labels.clone();
                    pod.subdomain = p.spec.subdomain.clone();
                    pods.push(pod);
                }
                Object::Workload(w) => {
                    let ns = namespace(&w.metadata);
                    let spec = &w.spec;
                    let template_labels = &spec.template.metadata.labels;
                    if let Some(s) = &spec.selector {
                        if s.match_labels.iter().any(|(k, v)| template_labels.get(k) != Some(v)) {
                            return Err(o.err("spec.selector.matchLabels", "does not match the template's labels"));
                        }
                    }
                    let name = &w.metadata.name;
                    // How many pods, and how many of them run at once (a
                    // Job's `parallelism`; all of a workload's otherwise).
                    let (replicas, parallel) = match w.kind.as_str() {
                        "DaemonSet" => (1, 1),
                        "Job" => {
                            let parallelism = spec.parallelism.unwrap_or(1);
                            if parallelism == 0 {
                                return Err(o.err("spec.parallelism", "0 suspends the Job: it would run no pod"));
                            }
                            // Without `completions`, a work queue: `parallelism`
                            // pods at once, done when they all are.
                            let pods = spec.completions.unwrap_or(parallelism);
                            if pods == 0 {
                                return Err(o.err("spec.completions", "0: the Job would run no pod"));
                            }
                            let pods = u16::try_from(pods).unwrap_or(u16::MAX);
                            (pods, u16::try_from(parallelism).unwrap_or(u16::MAX).min(pods))
                        }
                        _ => {
                            let n = spec.replicas.unwrap_or(1);
                            (n, n)
                        }
                    };
                    let ordered = w.kind == "StatefulSet" && spec.pod_management_policy.as_deref() != Some("Parallel");
                    let restart = match w.kind.as_str() {
                        "Job" => match spec.template.spec.restart_policy.as_deref() {
                            Some("OnFailure") => Restart::OnFailure,
                            Some("Never") => Restart::No,
                            _ => return Err(o.err("spec.template.spec.restartPolicy", "a Job's is OnFailure or Never")),
                        },
                        _ => Restart::Always,
                    };
                    let claims: Vec<&str> =
                        spec.volume_claim_templates.iter().map(|c| c.metadata.name.as_str()).collect();
                    for i in 0..replicas {
                        let pod_name = match w.kind.as_str() {
                            "StatefulSet" => format!("{name}-{i}"),
                            "Deployment" => {
                                format!(
                                    "{name}-{}-{}",
                                    suffix(&[&ns, name, "template"], 10),
                                    suffix(&[&ns, name, &i.to_string()], 5)
                                )
                            }
                            _ => format!("{name}-{}", suffix(&[&ns, name, &i.to_string()], 5)),
                        };
                        let owner = format!("{} {name}", w.kind);
                        let id = PodId { name: &pod_name, namespace: &ns, node: pods.len(), claims: &claims };
                        let mut pod = self.pod(o, "spec.template.spec", &spec.template.spec, &id, owner, restart)?;
                        // A Job's pods past its parallelism each start once
                        // one before it has succeeded (hvsim does not replace
                        // a failed pod: the Job fails with it).
                        if i >= parallel {
                            let before: &Pod = &pods[pods.len() - usize::from(parallel)];
                            pod.depends.push((before.name.clone(), Condition::ServiceCompletedSuccessfully));
                        }
                        if ordered && i > 0 {
                            let previous: &Pod = pods.last().expect("the previous ordinal");
                            // Ready: its readiness probe passes, or its
                            // startup probe passed, or it started.
                            let probed = std::iter::once(&previous.main)
                                .chain(&previous.sidecars)
                                .any(|c| c.readiness.is_some() || c.startup.is_some());
                            let wait = if probed { Condition::ServiceHealthy } else { Condition::ServiceStarted };
                            pod.depends.push((previous.name.clone(), wait));
                        }
                        pod.labels = template_labels.clone();
                        pod.subdomain = match w.kind.as_str() {
                            "StatefulSet" => spec.service_name.clone(),
                            _ => spec.template.spec.subdomain.clone(),
                        };
                        pods.push(pod);
                    }
                }
                Object::Service(_) | Object::Data(_) | Object::Namespace => {}
            }
        }
        if pods.is_empty() {
            return Err(
                "the manifests make no pod (no Pod, Deployment, ReplicaSet, StatefulSet, DaemonSet or Job)".into()
            );
        }
        let max = usize::from(hvsim_vmm::devices::virtio::MAX_NODES);
        if pods.len() > max {
            return Err(format!("{} pods; hvsim runs at most {max} (one node each)", pods.len()));
        }
        let mut seen = BTreeSet::new();
        for p in &pods {
            if !seen.insert(p.name.as_str()) {
                return Err(format!("two pods are named {} (in any namespace: a pod is a node, named once)", p.name));
            }
        }
        let services = self.services(objects, &mut pods)?;
        Ok(Cluster { pods, services, files: Vec::new() })
    }

    /// The pod `id` of `spec` (at `at` in its document).
    fn pod(
        &self,
        o: &Origin,
        at: &str,
        spec: &api::PodSpec,
        id: &PodId,
        owner: String,
        default_restart: Restart,
    ) -> std::result::Result<Pod, String> {
        if !valid_dns_label(id.name) {
            return Err(o.err(
                "metadata.name",
                format!("{:?}: a pod's name is a DNS label (a-z, 0-9, '-', at most 63)", id.name),
            ));
        }
        let Some(c) = spec.containers.first() else {
            return Err(o.err(&format!("{at}.containers"), "no container"));
        };
        // Names are unique across a pod's containers and init containers.
        let mut names = BTreeSet::new();
        for (field, list) in [("containers", &spec.containers), ("initContainers", &spec.init_containers)] {
            for (i, x) in list.iter().enumerate() {
                if !valid_dns_label(&x.name) || !names.insert(x.name.as_str()) {
                    return Err(o.err(
                        &format!("{at}.{field}[{i}].name"),
                        format!("{:?}: a DNS label, unique in the pod", x.name),
                    ));
                }
            }
        }
        for (k, v) in &spec.node_selector {
            let holds =
                matches!((k.as_str(), v.as_str()), ("kubernetes.io/os", "linux") | ("kubernetes.io/arch", "amd64"));
            if !holds {
                return Err(o.err(&format!("{at}.nodeSelector.{k}"), "cannot hold on hvsim's one node"));
            }
        }
        let restart = match spec.restart_policy.as_deref() {
            None => default_restart,
            Some("Always") => Restart::Always,
            Some("OnFailure") => Restart::OnFailure,
            Some("Never") => Restart::No,
            Some(other) => {
                return Err(o.err(&format!("{at}.restartPolicy"), format!("{other:?}: Always, OnFailure or Never")))
            }
        };
        let main = self.container(o, &format!("{at}.containers[0]"), spec, c, id)?;
        let mut init_containers = Vec::new();
        for (i, c) in spec.init_containers.iter().enumerate() {
            let at_i = format!("{at}.initContainers[{i}]");
            for (field, probe) in [
                ("readinessProbe", &c.readiness_probe),
                ("livenessProbe", &c.liveness_probe),
                ("startupProbe", &c.startup_probe),
            ] {
                if probe.is_some() {
                    return Err(o.err(&format!("{at_i}.{field}"), "an init container runs to completion: no probes"));
                }
            }
            if c.restart_policy.is_some() {
                return Err(o.err(&format!("{at_i}.restartPolicy"), "sidecar containers are not supported yet"));
            }
            init_containers.push(self.container(o, &at_i, spec, c, id)?);
        }
        let mut sidecars = Vec::new();
        for (i, c) in spec.containers.iter().enumerate().skip(1) {
            sidecars.push(self.container(o, &format!("{at}.containers[{i}]"), spec, c, id)?);
        }
        Ok(Pod {
            name: id.name.to_owned(),
            namespace: id.namespace.to_owned(),
            owner,
            main,
            init_containers,
            sidecars,
            restart,
            depends: Vec::new(),
            hostname: spec.hostname.clone().unwrap_or_else(|| id.name.to_owned()),
            aliases: Vec::new(),
            services: Vec::new(),
            stop_grace_ms: spec.termination_grace_period_seconds.map(|s| s * 1000),
            labels: BTreeMap::new(),
            subdomain: None,
            named_ports: spec
                .containers
                .iter()
                .flat_map(|c| &c.ports)
                .filter_map(|p| Some((p.name.clone()?, p.container_port)))
                .collect(),
            ports: spec.containers.iter().flat_map(|c| &c.ports).map(|p| p.container_port).collect(),
        })
    }

    /// Container `c` of pod `id` (at `at`).
    fn container(
        &self,
        o: &Origin,
        at: &str,
        spec: &api::PodSpec,
        c: &api::Container,
        id: &PodId,
    ) -> std::result::Result<PodContainer, String> {
        let probe = |field: &str, p: &Option<api::Probe>| {
            p.as_ref().map(|p| probe(o, &format!("{at}.{field}"), p, c, &id.ip())).transpose()
        };
        let readiness = probe("readinessProbe", &c.readiness_probe)?;
        let liveness = probe("livenessProbe", &c.liveness_probe)?;
        let startup = probe("startupProbe", &c.startup_probe)?;
        for (field, p) in [
            ("readinessProbe", &c.readiness_probe),
            ("livenessProbe", &c.liveness_probe),
            ("startupProbe", &c.startup_probe),
        ] {
            if p.as_ref().is_some_and(|p| p.success_threshold.is_some_and(|n| n != 1)) {
                let why = if field == "readinessProbe" {
                    "other than 1 is not supported yet"
                } else {
                    "must be 1 (as Kubernetes says)"
                };
                return Err(o.err(&format!("{at}.{field}.successThreshold"), why));
            }
        }
        let env = self.env(o, at, c, id.name, id.namespace, &id.ip())?;
        let vars: BTreeMap<&str, &str> = env.iter().filter_map(|e| e.split_once('=')).collect();
        let expand_all =
            |words: &Option<Vec<String>>| words.as_ref().map(|w| w.iter().map(|s| expand(s, &vars)).collect());
        let mut mounts = Vec::new();
        for (i, m) in c.volume_mounts.iter().enumerate() {
            let at_m = format!("{at}.volumeMounts[{i}]");
            let sub = match m.sub_path.as_deref() {
                None | Some("") => None,
                Some(p) if p.starts_with('/') || p.split('/').any(|c| c == ".." || c.is_empty()) => {
                    return Err(o.err(&format!("{at_m}.subPath"), format!("{p:?}: a relative path inside the volume")))
                }
                Some(p) => Some(p),
            };
            let volume = spec.volumes.iter().find(|v| v.name == m.name);
            let mount = match volume {
                None if id.claims.contains(&m.name.as_str()) => {
                    PodMount::Volume { name: m.name.clone(), target: m.mount_path.clone(), read_only: m.read_only }
                }
                None => return Err(o.err(&format!("{at_m}.name"), format!("no volume {:?} in the pod", m.name))),
                Some(v) => {
                    let pod_at = at.rsplit_once('.').map_or("", |(pod, _)| pod);
                    self.volume(o, &format!("{pod_at}.volumes"), v, id.namespace, m)?
                }
            };
            mounts.push(match sub {
                None => mount,
                Some(sub) => mount.below(sub).map_err(|e| o.err(&format!("{at_m}.subPath"), e))?,
            });
        }
        let mem_bytes = match c.resources.limits.get("memory") {
            None => None,
            Some(q) => Some(quantity(q).map_err(|e| o.err(&format!("{at}.resources.limits.memory"), e))?),
        };
        Ok(PodContainer {
            container: c.name.clone(),
            image: c.image.clone(),
            entrypoint: expand_all(&c.command),
            command: expand_all(&c.args),
            working_dir: c.working_dir.clone(),
            mounts,
            readiness,
            liveness,
            startup,
            mem_bytes,
            env,
        })
    }

    /// The container's environment: `envFrom` (in order), then `env` (each
    /// may use the ones before it as `$(NAME)`).
    fn env(
        &self,
        o: &Origin,
        at: &str,
        c: &api::Container,
        pod: &str,
        ns: &str,
        ip: &str,
    ) -> std::result::Result<Vec<String>, String> {
        let mut env: Vec<(String, String)> = Vec::new();
        let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
            env.retain(|(x, _)| *x != k);
            env.push((k, v));
        };
        for (i, from) in c.env_from.iter().enumerate() {
            let at_f = format!("{at}.envFrom[{i}]");
            let (kind, r) = match (&from.config_map_ref, &from.secret_ref) {
                (Some(r), None) => ("ConfigMap", r),
                (None, Some(r)) => ("Secret", r),
                _ => return Err(o.err(&at_f, "one of configMapRef and secretRef")),
            };
            let Some(values) = self.values(ns, kind, &r.name) else {
                if r.optional {
                    continue;
                }
                return Err(o.err(&at_f, format!("no {kind} {:?} in namespace {ns}", r.name)));
            };
            for (k, v) in values {
                let k = format!("{}{k}", from.prefix.as_deref().unwrap_or(""));
                set(&mut env, k, String::from_utf8_lossy(v).into_owned());
            }
        }
        for (i, e) in c.env.iter().enumerate() {
            let at_e = format!("{at}.env[{i}]");
            let value = match (&e.value, &e.value_from) {
                (Some(v), None) => {
                    let vars: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    expand(v, &vars)
                }
                (None, None) => String::new(),
                (None, Some(src)) => match (&src.config_map_key_ref, &src.secret_key_ref, &src.field_ref) {
                    (Some(r), None, None) | (None, Some(r), None) => {
                        let kind = if src.config_map_key_ref.is_some() { "ConfigMap" } else { "Secret" };
                        match self.values(ns, kind, &r.name).and_then(|vs| vs.get(&r.key)) {
                            Some(v) => String::from_utf8_lossy(v).into_owned(),
                            None if r.optional => continue,
                            None => {
                                return Err(o.err(
                                    &format!("{at_e}.valueFrom"),
                                    format!("no key {:?} in {kind} {:?} (namespace {ns})", r.key, r.name),
                                ))
                            }
                        }
                    }
                    (None, None, Some(f)) => match f.field_path.as_str() {
                        "metadata.name" => pod.to_owned(),
                        "metadata.namespace" => ns.to_owned(),
                        "status.podIP" | "status.hostIP" => ip.to_owned(),
                        "spec.nodeName" => "hvsim".to_owned(),
                        other => {
                            return Err(o.err(
                                &format!("{at_e}.valueFrom.fieldRef.fieldPath"),
                                format!("{other:?} is not supported (metadata.name, metadata.namespace, status.podIP, status.hostIP, spec.nodeName are)"),
                            ))
                        }
                    },
                    _ => return Err(o.err(&format!("{at_e}.valueFrom"), "one of configMapKeyRef, secretKeyRef and fieldRef")),
                },
                (Some(_), Some(_)) => return Err(o.err(&at_e, "both value and valueFrom")),
            };
            set(&mut env, e.name.clone(), value);
        }
        Ok(env.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
    }

    fn volume(
        &self,
        o: &Origin,
        at: &str,
        v: &api::Volume,
        ns: &str,
        m: &api::VolumeMount,
    ) -> std::result::Result<PodMount, String> {
        let at = format!("{at}[{}]", v.name);
        let (kind, source) = match (&v.empty_dir, &v.config_map, &v.secret, &v.persistent_volume_claim) {
            (Some(_), None, None, None) => {
                return Ok(PodMount::Volume {
                    name: v.name.clone(),
                    target: m.mount_path.clone(),
                    read_only: m.read_only,
                })
            }
            (None, Some(s), None, None) => ("ConfigMap", s),
            (None, None, Some(s), None) => ("Secret", s),
            (None, None, None, Some(_)) => {
                return Err(o.err(
                    &format!("{at}.persistentVolumeClaim"),
                    "not supported: hvsim provisions no volumes (a StatefulSet's volumeClaimTemplates are)",
                ))
            }
            _ => return Err(o.err(&at, "one of emptyDir, configMap, secret (others are not supported)")),
        };
        let values = match self.values(ns, kind, &source.name) {
            Some(vs) => vs.clone(),
            None if source.optional => Values::new(),
            None => return Err(o.err(&at, format!("no {kind} {:?} in namespace {ns}", source.name))),
        };
        let mode = source.default_mode.map_or(0o644, |m| m.0);
        let files = match &source.items {
            None => values.into_iter().map(|(k, v)| (k, mode, v)).collect(),
            Some(items) => {
                let mut files = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let Some(v) = values.get(&item.key) else {
                        return Err(o.err(
                            &format!("{at}.items[{i}].key"),
                            format!("no key {:?} in {kind} {:?}", item.key, source.name),
                        ));
                    };
                    if item.path.starts_with('/') || item.path.split('/').any(|c| c == "..") {
                        return Err(o.err(&format!("{at}.items[{i}].path"), "a relative path inside the mount"));
                    }
                    files.push((item.path.clone(), item.mode.map_or(mode, |m| m.0), v.clone()));
                }
                files
            }
        };
        Ok(PodMount::Files { target: m.mount_path.clone(), files })
    }

    /// Services: a ClusterIP Service's names resolve to its virtual
    /// address, which every node proxies to its ready pods; a headless
    /// Service's to its first pod, and to each pod it names (`subdomain`).
    fn services(
        &self,
        objects: &[(Origin, Object)],
        pods: &mut [Pod],
    ) -> std::result::Result<Vec<VirtualService>, String> {
        let services: Vec<(&Origin, &api::Service)> = objects
            .iter()
            .filter_map(|(o, x)| match x {
                Object::Service(s) => Some((o, s)),
                _ => None,
            })
            .collect();
        // A short name (`svc`) resolves where only one namespace has it.
        let mut namespaces_of: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for (_, s) in &services {
            namespaces_of.entry(s.metadata.name.as_str()).or_default().insert(namespace(&s.metadata));
        }
        let selects = |s: &api::Service, pod: &Pod| {
            pod.namespace == namespace(&s.metadata) && s.spec.selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
        };
        // A port a Service sends to a pod: its target, on that pod.
        let target = |p: &api::ServicePort, pod: &Pod| match &p.target_port {
            None => Some(p.port),
            Some(api::PortRef::Number(n)) => Some(*n),
            Some(api::PortRef::Name(n)) => pod.named_ports.get(n).copied(),
        };
        // The ports each pod serves itself: those it declares, and those
        // any Service sends to it. A proxy must not hold them on its node.
        let served: Vec<BTreeSet<u16>> = pods
            .iter()
            .map(|pod| {
                let sent = services.iter().filter(|(_, s)| selects(s, pod)).flat_map(|(_, s)| &s.spec.ports);
                pod.ports.iter().copied().chain(sent.filter_map(|p| target(p, pod))).collect()
            })
            .collect();
        let mut virtual_services = Vec::new();
        for (o, s) in services {
            let ns = namespace(&s.metadata);
            let name = &s.metadata.name;
            if !valid_dns_label(name) {
                return Err(o.err("metadata.name", "a Service's name is a DNS label (a-z, 0-9, '-', at most 63)"));
            }
            match s.spec.kind.as_deref() {
                None | Some("ClusterIP") => {}
                Some(other) => {
                    return Err(
                        o.err("spec.type", format!("{other}: only ClusterIP (nothing outside the machine reaches it)"))
                    )
                }
            }
            if s.spec.selector.is_empty() {
                return Err(o.err("spec.selector", "a Service without a selector (its own endpoints) is not supported"));
            }
            if let Some(a) = s.spec.session_affinity.as_deref().filter(|a| *a != "None") {
                return Err(o.err("spec.sessionAffinity", format!("{a}: not supported yet (None is)")));
            }
            let headless = match s.spec.cluster_ip.as_deref() {
                Some("None") => true,
                None | Some("") => false,
                Some(ip) => {
                    return Err(
                        o.err("spec.clusterIP", format!("{ip}: hvsim assigns addresses (leave it out, or None)"))
                    )
                }
            };
            let selected: Vec<usize> = (0..pods.len()).filter(|&i| selects(s, &pods[i])).collect();
            let Some(&first) = selected.first() else {
                return Err(o.err("spec.selector", "selects no pod"));
            };
            let mut names =
                vec![format!("{name}.{ns}.svc.{DOMAIN}"), format!("{name}.{ns}.svc"), format!("{name}.{ns}")];
            // The short name, unless another namespace's Service or a pod
            // (a node, which its name resolves to) has it: a headless
            // Service's first pod may, its name resolving there anyway.
            let pod_named = pods
                .iter()
                .enumerate()
                .any(|(i, p)| (p.name == *name || p.hostname == *name) && !(headless && i == first));
            if namespaces_of[name.as_str()].len() == 1 && !pod_named {
                names.push(name.clone());
            }
            // In a fault plan, `svc.ns` and (where no other namespace has
            // it) `svc` name every pod the Service selects.
            for &i in &selected {
                pods[i].services.push(format!("{name}.{ns}"));
                if namespaces_of[name.as_str()].len() == 1 {
                    pods[i].services.push(name.clone());
                }
            }
            if headless {
                pods[first].aliases.extend(names);
                for &i in &selected {
                    if pods[i].subdomain.as_deref() == Some(name.as_str()) {
                        let host = pods[i].hostname.clone();
                        pods[i].aliases.extend([
                            format!("{host}.{name}.{ns}.svc.{DOMAIN}"),
                            format!("{host}.{name}.{ns}.svc"),
                            format!("{host}.{name}.{ns}"),
                            format!("{host}.{name}"),
                        ]);
                    }
                }
                continue;
            }
            let mut ports = Vec::new();
            for (i, p) in s.spec.ports.iter().enumerate() {
                if let Some(proto) = p.protocol.as_deref().filter(|p| *p != "TCP") {
                    return Err(o.err(
                        &format!("spec.ports[{i}].protocol"),
                        format!("{proto}: a ClusterIP Service's ports are TCP (a headless Service's may be any)"),
                    ));
                }
                // A named targetPort is each pod's own port of that name; a
                // pod without one is not behind this port.
                let backends = selected.iter().filter_map(|&k| Some((k as u16, target(p, &pods[k])?))).collect();
                let own = (0..pods.len()).filter(|&n| served[n].contains(&p.port)).map(|n| n as u16).collect();
                ports.push(VirtualPort { port: p.port, backends, own });
            }
            let k = virtual_services.len() + 1;
            virtual_services.push(VirtualService {
                name: format!("{ns}/{name}"),
                addr: format!("127.96.{}.{}", k / 256, k % 256),
                names,
                ports,
                publish_not_ready: s.spec.publish_not_ready_addresses.unwrap_or(false),
            });
        }
        Ok(virtual_services)
    }
}

/// A probe of container `c` (address `ip`) as a health check on kubelet's
/// schedule: the first check after `initialDelaySeconds`, then one each
/// `periodSeconds`; `failureThreshold` failures in a row fail it.
fn probe(
    o: &Origin,
    at: &str,
    p: &api::Probe,
    c: &api::Container,
    ip: &str,
) -> std::result::Result<HealthCheck, String> {
    // A named port is one of the container's.
    let port = |at: &str, r: &api::PortRef| match r {
        api::PortRef::Number(n) => Ok(*n),
        api::PortRef::Name(name) => c
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| o.err(&format!("{at}.port"), format!("no port named {name:?} in the container"))),
    };
    let host = |at: &str, h: &Option<String>| match h.as_deref() {
        None => Ok(ip.to_owned()),
        Some(h) if h == ip => Ok(ip.to_owned()),
        Some(_) => Err(o.err(&format!("{at}.host"), "only the pod's own address (leave it out)")),
    };
    let check = match (&p.exec, &p.tcp_socket, &p.http_get, &p.grpc) {
        (Some(exec), None, None, None) => Check::Exec(exec.command.clone()),
        (None, Some(t), None, None) => {
            let at = format!("{at}.tcpSocket");
            Check::Tcp { addr: format!("{}:{}", host(&at, &t.host)?, port(&at, &t.port)?) }
        }
        (None, None, Some(h), None) => {
            let at = format!("{at}.httpGet");
            if h.scheme.as_deref().is_some_and(|s| s != "HTTP") {
                return Err(o.err(&format!("{at}.scheme"), "only HTTP is supported"));
            }
            let path = h.path.clone().unwrap_or_else(|| "/".into());
            if !path.starts_with('/') || path.contains(char::is_whitespace) {
                return Err(o.err(&format!("{at}.path"), format!("{path:?}: an absolute path without spaces")));
            }
            let mut headers = Vec::new();
            for (i, hd) in h.http_headers.iter().enumerate() {
                let clean = |t: &str| !t.is_empty() && !t.contains(['\r', '\n', '\0']);
                if !clean(&hd.name) || hd.name.contains(':') || hd.value.contains(['\r', '\n', '\0']) {
                    return Err(o.err(&format!("{at}.httpHeaders[{i}]"), "a header name and value on one line"));
                }
                headers.push(format!("{}: {}", hd.name, hd.value));
            }
            Check::Http { addr: format!("{}:{}", host(&at, &h.host)?, port(&at, &h.port)?), path, headers }
        }
        (None, None, None, Some(_)) => return Err(o.err(&format!("{at}.grpc"), "not supported yet")),
        _ => return Err(o.err(at, "exactly one of exec, tcpSocket, httpGet")),
    };
    if p.termination_grace_period_seconds.is_some() {
        return Err(o.err(&format!("{at}.terminationGracePeriodSeconds"), "not supported (the pod's is)"));
    }
    let period_ms = p.period_seconds.unwrap_or(10).max(1) * 1000;
    let delay_ms = p.initial_delay_seconds * 1000;
    Ok(HealthCheck {
        check,
        interval_ms: period_ms,
        timeout_ms: p.timeout_seconds.unwrap_or(1).max(1) * 1000,
        // Failures before the delay do not count, and none happen: the
        // first check is at the delay.
        start_period_ms: delay_ms,
        start_interval_ms: delay_ms,
        retries: p.failure_threshold.unwrap_or(3).max(1),
    })
}

/// `$(NAME)` replaced by a variable defined before it; `$$(NAME)` is
/// `$(NAME)`; an undefined one is left as written (as Kubernetes does).
fn expand(s: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(escaped) = after.strip_prefix("$(") {
            out.push_str("$(");
            rest = escaped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) if vars.contains_key(&inner[..end]) => {
                    out.push_str(vars[&inner[..end]]);
                    rest = &inner[end + 1..];
                }
                _ => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A memory quantity in bytes: `128Mi`, `1Gi`, `500M`, `1e9`, `268435456`.
fn quantity(q: &api::Quantity) -> std::result::Result<u64, String> {
    let text = match q {
        api::Quantity::Number(n) => n.to_string(),
        api::Quantity::Text(t) => t.trim().to_owned(),
    };
    let units: [(&str, f64); 10] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("k", 1e3),
        ("K", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("", 1.0),
    ];
    let (number, scale) = units
        .iter()
        .find_map(|(u, s)| text.strip_suffix(u).filter(|n| !n.is_empty()).map(|n| (n, *s)))
        .ok_or_else(|| format!("{text:?} is not a quantity (e.g. 128Mi)"))?;
    let n: f64 = number.parse().map_err(|_| format!("{text:?} is not a quantity (e.g. 128Mi)"))?;
    let bytes = n * scale;
    if !(bytes >= (1 << 20) as f64 && bytes < (1u64 << 40) as f64) {
        return Err(format!("{text:?}: from 1Mi to 1Ti"));
    }
    Ok(bytes as u64)
}

/// Whether `s` is a DNS label, as Kubernetes names pods and Services.
fn valid_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A name suffix as Kubernetes' generated names have (its alphabet, no
/// vowels), derived from the object's identity: the same manifests name
/// their pods the same way in every run and every replay.
fn suffix(parts: &[&str], len: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().take(len).map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
}

impl Cluster {
    /// The images its pods run.
    pub fn images(&self) -> Vec<String> {
        let containers = self.pods.iter().flat_map(|p| p.init_containers.iter().chain([&p.main]).chain(&p.sidecars));
        containers.map(|c| c.image.clone()).collect()
    }

    /// One container per pod, resolved against the image store; a
    /// ConfigMap's or Secret's files are written once, by their hash, under
    /// the cache (`k8s/`), and bound from there.
    pub fn containers(&self, store: &Store) -> Result<Vec<Container>> {
        let mut out = Vec::new();
        for p in &self.pods {
            let depends = p
                .depends
                .iter()
                .map(|(name, c)| (self.pods.iter().position(|q| q.name == *name).expect("a pod") as u16, *c))
                .collect();
            let mut c = p.main.resolve(store, &p.name, p, depends)?;
            for init in &p.init_containers {
                c.init_containers.push(init.resolve(
                    store,
                    &format!("{}/{}", p.name, init.container),
                    p,
                    Vec::new(),
                )?);
            }
            for other in &p.sidecars {
                c.sidecars.push(other.resolve(store, &format!("{}/{}", p.name, other.container), p, Vec::new())?);
            }
            c.aliases = p.aliases.clone();
            c.groups = p.services.clone();
            c.stop_grace_ms = p.stop_grace_ms;
            out.push(c);
        }
        Ok(out)
    }
}

impl PodContainer {
    /// This container of `pod` as the node's init runs it, named `name`.
    fn resolve(&self, store: &Store, name: &str, pod: &Pod, depends: Vec<(u16, Condition)>) -> Result<Container> {
        let mut mounts = Vec::new();
        for m in &self.mounts {
            mounts.push(match m {
                PodMount::Volume { name, target, read_only } => {
                    Mount::Volume { name: name.clone(), target: target.clone(), read_only: *read_only }
                }
                PodMount::Files { target, files } => {
                    let (host, sha256) = files_dir(files)?;
                    Mount::Bind { host, sha256, target: target.clone(), read_only: true }
                }
                PodMount::File { target, mode, data } => {
                    let (dir, _) = files_dir(&[("file".to_owned(), *mode, data.clone())])?;
                    let sha256 = contents_sha256([("", *mode, &data[..])]);
                    Mount::Bind { host: dir.join("file"), sha256, target: target.clone(), read_only: true }
                }
            });
        }
        let o = Overrides {
            entrypoint: self.entrypoint.clone(),
            command: self.command.clone(),
            environment: self.env.clone(),
            working_dir: self.working_dir.clone(),
            user: None,
            hostname: Some(pod.hostname.clone()),
            restart: pod.restart,
            init: false,
            mounts,
            depends,
            health: self.readiness.clone(),
        };
        let mut c = Container::resolve(store, name, &self.image, o)?;
        c.liveness = self.liveness.clone();
        c.startup = self.startup.clone();
        c.mem_bytes = self.mem_bytes;
        Ok(c)
    }
}

/// The directory holding `files` (written once: named by their hash), and
/// that hash, which is the one its bind mount is pinned by.
fn files_dir(files: &[(String, u32, Vec<u8>)]) -> Result<(PathBuf, String)> {
    use std::os::unix::fs::PermissionsExt;
    let mut below: Vec<(String, u32, &[u8])> =
        files.iter().map(|(path, mode, data)| (format!("/{path}"), *mode, &data[..])).collect();
    below.sort();
    let sha256 = contents_sha256(below.iter().map(|(path, mode, data)| (path.as_str(), *mode, *data)));
    let root = crate::cache::dir().join("k8s");
    let dir = root.join(&sha256);
    if dir.is_dir() {
        return Ok((dir, sha256));
    }
    std::fs::create_dir_all(&root).map_err(io("creating the cache", &root))?;
    let tmp = tempfile::tempdir_in(&root).map_err(io("creating the cache", &root))?;
    for (path, mode, data) in files {
        let f = tmp.path().join(path);
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent).map_err(io("writing a ConfigMap's files", parent))?;
        }
        std::fs::write(&f, data).map_err(io("writing a ConfigMap's files", &f))?;
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(*mode))
            .map_err(io("writing a ConfigMap's files", &f))?;
    }
    let kept = tmp.keep();
    // Another process may have written the same files first: theirs stay.
    if std::fs::rename(&kept, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&kept);
    }
    Ok((dir, sha256))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/k8s/testdata").join(name)
    }

    fn one(yaml: &str) -> std::result::Result<Cluster, String> {
        translate(&[("m.yaml".to_owned(), yaml.to_owned())])
    }

    /// What init receives from each manifest set, as a golden file (write
    /// it again with HVSIM_WRITE_GOLDEN=1 after a change meant to alter it,
    /// and read the diff).
    #[test]
    fn manifests_translate_to_the_pods_their_golden_files_hold() {
        for name in ["statefulset", "deployment"] {
            let yaml = testdata(&format!("{name}.yaml"));
            let text = std::fs::read_to_string(&yaml).unwrap();
            let cluster = translate(&[(format!("{name}.yaml"), text)]).unwrap();
            let got = serde_json::to_string_pretty(&cluster).unwrap() + "\n";
            let golden = testdata(&format!("{name}.json"));
            if std::env::var_os("HVSIM_WRITE_GOLDEN").is_some() {
                std::fs::write(&golden, &got).unwrap();
            }
            let want = std::fs::read_to_string(&golden).unwrap_or_default();
            assert!(got == want, "{name}: translation differs from {}:\n{got}", golden.display());
        }
    }

    #[test]
    fn a_statefulset_is_named_configured_and_ordered_as_kubernetes_does() {
        let text = std::fs::read_to_string(testdata("statefulset.yaml")).unwrap();
        let c = translate(&[("s.yaml".into(), text)]).unwrap();
        let names: Vec<&str> = c.pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["web-0", "web-1"]);
        let web1 = &c.pods[1];
        for want in
            ["POD_NAME=web-1", "POD_IP=10.0.0.2", "GREETING=hello", "URL=http://web-1.web:8080", "WEB_TOKEN=s3cr3t"]
        {
            assert!(web1.main.env.iter().any(|e| e == want), "{want} in {:?}", web1.main.env);
        }
        assert_eq!(web1.main.command.as_deref(), Some(&["echo web-1 says hello; exec sleep infinity".to_owned()][..]));
        assert!(web1.aliases.contains(&"web-1.web.default.svc.cluster.local".to_owned()), "{:?}", web1.aliases);
        assert!(c.pods[0].aliases.contains(&"web.default.svc.cluster.local".to_owned()));
        // OrderedReady: web-1 waits for web-0 to be ready.
        assert_eq!(web1.depends, [("web-0".to_owned(), Condition::ServiceHealthy)]);
        assert_eq!(web1.main.mem_bytes, Some(96 << 20));
        let files = web1.main.mounts.iter().find_map(|m| match m {
            PodMount::Files { target, files } if target == "/etc/web" => Some(files),
            _ => None,
        });
        assert_eq!(files.unwrap(), &[("app.conf".to_owned(), 0o644, b"port=8080\n".to_vec())]);
    }

    /// What hvsim cannot do as Kubernetes would is refused with the file,
    /// the document and the field, never dropped.
    #[test]
    fn what_hvsim_does_not_run_is_refused_naming_file_document_and_field() {
        let pod = |spec: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: c\n    image: i\n{spec}"
            )
        };
        let cases = [
            (pod("  hostNetwork: true\n"), "document 1 (Pod p): spec.hostNetwork: unknown field `hostNetwork`: not supported"),
            (pod("    livenessProbe: {grpc: {port: 1}}\n"), "spec.containers[0].livenessProbe.grpc: not supported yet"),
            (pod("    readinessProbe: {tcpSocket: {port: web}}\n"), "spec.containers[0].readinessProbe.tcpSocket.port: no port named \"web\""),
            (pod("    readinessProbe: {httpGet: {port: 1, scheme: HTTPS}}\n"), "readinessProbe.httpGet.scheme: only HTTP"),
            (pod("    readinessProbe: {tcpSocket: {port: 1, host: 10.9.9.9}}\n"), "readinessProbe.tcpSocket.host: only the pod's own address"),
            (
                pod("    startupProbe: {exec: {command: [a]}, tcpSocket: {port: 1}}\n"),
                "spec.containers[0].startupProbe: exactly one of exec, tcpSocket, httpGet",
            ),
            (pod("    livenessProbe: {exec: {command: [a]}, successThreshold: 2}\n"), "livenessProbe.successThreshold: must be 1"),
            (
                pod("  initContainers: [{name: i, image: i, readinessProbe: {exec: {command: [a]}}}]\n"),
                "spec.initContainers[0].readinessProbe: an init container runs to completion",
            ),
            (
                pod("  initContainers: [{name: i, image: i, restartPolicy: Always}]\n"),
                "spec.initContainers[0].restartPolicy: sidecar containers are not supported yet",
            ),
            (
                pod("  initContainers: [{name: i, image: i}, {name: i, image: j}]\n"),
                "spec.initContainers[1].name: \"i\": a DNS label, unique in the pod",
            ),
            (pod("  - name: c\n    image: j\n"), "spec.containers[1].name: \"c\": a DNS label, unique in the pod"),
            (pod("  nodeSelector: {disk: ssd}\n"), "spec.nodeSelector.disk: cannot hold"),
            (
                pod("    volumeMounts: [{name: v, mountPath: /v, subPath: ../x}]\n  volumes: [{name: v, emptyDir: {}}]\n"),
                "spec.containers[0].volumeMounts[0].subPath: \"../x\": a relative path inside the volume",
            ),
            (
                "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  parallelism: 0\n  template:\n    spec: {restartPolicy: Never, containers: [{name: c, image: i}]}\n".to_owned(),
                "document 1 (Job j): spec.parallelism: 0 suspends the Job",
            ),
            (
                "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: x}\n".to_owned(),
                "document 1 (Ingress x): kind: Ingress is not supported",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec: {containers: [{name: c, image: i}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {a: b}, ports: [{port: 53, protocol: UDP}]}\n".to_owned(),
                "document 2 (Service s): spec.ports[0].protocol: UDP: a ClusterIP Service's ports are TCP",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec: {containers: [{name: c, image: i}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {a: b}, clusterIP: 10.96.0.10}\n".to_owned(),
                "document 2 (Service s): spec.clusterIP: 10.96.0.10: hvsim assigns addresses",
            ),
            (
                "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec: {containers: [{name: c, image: i}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {selector: {a: b}, sessionAffinity: ClientIP}\n".to_owned(),
                "document 2 (Service s): spec.sessionAffinity: ClientIP: not supported yet",
            ),
            (
                pod("    env: [{name: A, valueFrom: {configMapKeyRef: {name: nope, key: k}}}]\n"),
                "spec.containers[0].env[0].valueFrom: no key \"k\" in ConfigMap \"nope\"",
            ),
        ];
        for (yaml, want) in cases {
            let e = one(&yaml).unwrap_err();
            assert!(e.starts_with("m.yaml: document ") && e.contains(want), "{want:?} in {e:?}");
        }
    }

    /// The etcd example's fault plan names its pods and its Service, which
    /// stands for the three members.
    #[test]
    fn the_etcd_examples_fault_plan_names_its_pods_and_its_service() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        let c = load(&[root.join("examples/k8s/etcd")]).unwrap();
        let names: Vec<String> = c.pods.iter().map(|p| p.name.clone()).collect();
        let groups = crate::target::node_groups(c.pods.iter().map(|p| &p.services[..]));
        let etcd = groups.iter().find(|(g, _)| g == "etcd").map(|(_, nodes)| nodes.clone());
        // Node 0 is the client (client.yaml comes first).
        assert_eq!(etcd, Some(vec![1, 2, 3]), "{groups:?}");
        let text = std::fs::read_to_string(root.join("examples/k8s/etcd/faults.toml")).unwrap();
        let plan = hvsim_vmm::faults::FaultPlan::parse_grouped(&text, 1, names.len() as u16, &names, &groups);
        assert!(plan.is_ok(), "{plan:?}");
    }

    /// A Service's port is left to the pods that serve that port number
    /// themselves (a server listening on all addresses would otherwise
    /// find it taken by the proxy): its own, those it is sent to by
    /// another Service, and those a pod declares.
    #[test]
    fn a_proxy_leaves_a_port_to_the_pods_that_serve_it() {
        let pod = |name: &str, app: &str, ports: &str| {
            format!("---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {{app: {app}}}}}\nspec: {{containers: [{{name: c, image: i, ports: [{ports}]}}]}}\n")
        };
        let service = |name: &str, app: &str, port: u16, target: u16| {
            format!("---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec: {{selector: {{app: {app}}}, ports: [{{port: {port}, targetPort: {target}}}]}}\n")
        };
        let yaml = [
            pod("cache", "cache", ""),
            pod("store", "store", ""),
            pod("other", "other", "{containerPort: 6379}"),
            pod("client", "client", ""),
            service("cache", "cache", 6379, 6379),
            service("store", "store", 6380, 6379),
        ]
        .concat();
        let c = one(&yaml).unwrap();
        let own: Vec<&[u16]> = c.services.iter().map(|s| &s.ports[0].own[..]).collect();
        // cache's 6379 is served by cache itself, by store (sent 6379 by
        // its Service) and by other (declared); store's 6380 by no one.
        assert_eq!(own, [&[0, 1, 2][..], &[][..]]);
    }

    #[test]
    fn quantities_and_references_read_as_kubernetes_reads_them() {
        let q = |s: &str| quantity(&api::Quantity::Text(s.into()));
        assert_eq!(q("128Mi"), Ok(128 << 20));
        assert_eq!(q("1Gi"), Ok(1 << 30));
        assert_eq!(q("500M"), Ok(500_000_000));
        assert!(q("12x").is_err() && q("1Ki").is_err());
        let vars = BTreeMap::from([("A", "1")]);
        assert_eq!(expand("$(A)-$$(A)-$(B)-$", &vars), "1-$(A)-$(B)-$");
        // File modes as YAML 1.1 and Kubernetes read them.
        let mode = |y: &str| serde_yaml_ng::from_str::<api::Mode>(y).map(|m| m.0).map_err(|e| e.to_string());
        assert_eq!((mode("0755"), mode("420"), mode("\"0o600\"")), (Ok(0o755), Ok(0o644), Ok(0o600)));
        assert!(mode("0999").is_err() && mode("4096").is_err());
    }

    /// The examples' manifests carry the compose examples' Test Composer
    /// templates as ConfigMaps: the same files, byte for byte.
    #[test]
    fn the_examples_configmaps_hold_the_compose_examples_templates() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
        for (k8s, compose) in [("etcd", "etcd/test"), ("getting-started", "getting-started/test")] {
            let c = load(&[root.join("examples/k8s").join(k8s)]).unwrap();
            let files: Vec<&(String, u32, Vec<u8>)> = c
                .pods
                .iter()
                .flat_map(|p| &p.main.mounts)
                .filter_map(|m| match m {
                    PodMount::Files { target, files } if target == "/opt/antithesis/test/v1" => Some(files),
                    _ => None,
                })
                .flatten()
                .collect();
            assert!(!files.is_empty(), "{k8s}: a template");
            for (path, mode, data) in files {
                let original = root.join("examples/compose").join(compose).join(path);
                assert_eq!(
                    data,
                    &std::fs::read(&original).unwrap(),
                    "{k8s}: {path} differs from {}",
                    original.display()
                );
                assert_eq!(*mode, 0o755, "{k8s}: {path} is run");
            }
        }
    }

    proptest::proptest! {
        /// However Services and workloads are named across namespaces, every
        /// pod has its own name and every DNS name resolves to one pod.
        #[test]
        fn pod_names_and_dns_names_are_unique(
            sets in proptest::collection::vec((0..3usize, 0..4usize, 1..4u16, proptest::bool::ANY), 1..6),
            pods in proptest::collection::vec(0..4usize, 0..3),
        ) {
            let mut yaml = String::new();
            // Bare pods named as Services may be.
            for (i, name) in pods.iter().enumerate() {
                yaml += &format!(
                    "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: s{name}, labels: {{bare: b{i}}}}}\nspec: {{containers: [{{name: c, image: i}}]}}\n"
                );
            }
            for (i, (ns, name, replicas, stateful)) in sets.iter().enumerate() {
                let (ns, name) = (format!("ns{ns}"), format!("s{name}"));
                let kind = if *stateful { "StatefulSet" } else { "Deployment" };
                // Each workload its own label, and a Service selecting it
                // (headless for a StatefulSet), named as the workload.
                yaml += &format!(
                    "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{{}selector: {{w: w{i}}}, ports: [{{port: 80}}]}}\n",
                    if *stateful { "clusterIP: None, " } else { "" }
                );
                yaml += &format!(
                    "---\napiVersion: apps/v1\nkind: {kind}\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  serviceName: {name}\n  replicas: {replicas}\n  template:\n    metadata: {{labels: {{w: w{i}}}}}\n    spec: {{containers: [{{name: c, image: i}}]}}\n"
                );
            }
            match one(&yaml) {
                Ok(c) => {
                    let mut names = BTreeSet::new();
                    for p in &c.pods {
                        proptest::prop_assert!(names.insert(p.name.clone()), "pod {} twice", p.name);
                    }
                    // Each name resolves to one address: a pod's, or a
                    // Service's virtual one.
                    let mut dns = BTreeMap::new();
                    for (i, p) in c.pods.iter().enumerate() {
                        for n in [&p.name, &p.hostname].into_iter().chain(&p.aliases) {
                            let before = dns.insert(n.clone(), format!("10.0.0.{}", i + 1));
                            proptest::prop_assert!(before.is_none() || before == Some(format!("10.0.0.{}", i + 1)), "{n} names {before:?} and pod {i}");
                        }
                    }
                    let mut addrs = BTreeSet::new();
                    for s in &c.services {
                        proptest::prop_assert!(addrs.insert(s.addr.clone()), "{} twice", s.addr);
                        for n in &s.names {
                            let before = dns.insert(n.clone(), s.addr.clone());
                            proptest::prop_assert!(before.is_none(), "{n} names {before:?} and Service {}", s.name);
                        }
                    }
                }
                // Two workloads of one name in one namespace, or across
                // namespaces (a pod is a node, named once): refused.
                Err(e) => proptest::prop_assert!(
                    e.contains("two pods are named") || e.contains("metadata.name: a second"),
                    "{e}"
                ),
            }
        }
    }
}
