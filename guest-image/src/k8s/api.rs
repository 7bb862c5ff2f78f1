//! The Kubernetes objects hvsim reads, as serde reads them: the fields of
//! each that hvsim runs, and those it accepts and ignores because on one
//! node they change nothing (labels' annotations, update strategies, image
//! pull policies...). Every other field is an error naming it
//! (`deny_unknown_fields`): a field hvsim would silently drop could be the
//! one the system depends on. What each field does is in
//! docs/kubernetes.md.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Meta {
    pub name: String,
    pub namespace: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub annotations: Option<IgnoredAny>,
}

/// A pod template's metadata: names come from the workload.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateMeta {
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub annotations: Option<IgnoredAny>,
    pub name: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pod {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    pub spec: PodSpec,
    pub status: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSpec {
    pub containers: Vec<Container>,
    #[serde(default)]
    pub init_containers: Vec<Container>,
    pub restart_policy: Option<String>,
    #[serde(default)]
    pub volumes: Vec<Volume>,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    /// Only `kubernetes.io/os: linux` and `kubernetes.io/arch: amd64`, which
    /// hvsim's one node has.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Between SIGTERM and SIGKILL when a probe stops a container.
    pub termination_grace_period_seconds: Option<u64>,
    // Accepted, changing nothing on one node without a control plane.
    pub dns_policy: Option<IgnoredAny>,
    pub security_context: Option<IgnoredAny>,
    pub service_account_name: Option<IgnoredAny>,
    pub automount_service_account_token: Option<IgnoredAny>,
    pub enable_service_links: Option<IgnoredAny>,
    pub tolerations: Option<IgnoredAny>,
    pub priority_class_name: Option<IgnoredAny>,
    pub image_pull_secrets: Option<IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Container {
    pub name: String,
    pub image: String,
    pub command: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    #[serde(default)]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub env_from: Vec<EnvFrom>,
    pub working_dir: Option<String>,
    #[serde(default)]
    pub volume_mounts: Vec<VolumeMount>,
    #[serde(default)]
    pub resources: Resources,
    pub readiness_probe: Option<Probe>,
    pub liveness_probe: Option<Probe>,
    pub startup_probe: Option<Probe>,
    /// Only an init container's, where `Always` makes it a sidecar.
    pub restart_policy: Option<String>,
    /// Informative, but for their names, which probes may use.
    #[serde(default)]
    pub ports: Vec<ContainerPort>,
    // Accepted: about pulling or the terminal.
    pub image_pull_policy: Option<IgnoredAny>,
    pub security_context: Option<IgnoredAny>,
    pub termination_message_path: Option<IgnoredAny>,
    pub termination_message_policy: Option<IgnoredAny>,
    pub stdin: Option<IgnoredAny>,
    pub tty: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: Option<String>,
    pub value_from: Option<EnvSource>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvSource {
    pub config_map_key_ref: Option<KeyRef>,
    pub secret_key_ref: Option<KeyRef>,
    pub field_ref: Option<FieldRef>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyRef {
    pub name: String,
    pub key: String,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRef {
    pub field_path: String,
    pub api_version: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvFrom {
    pub prefix: Option<String>,
    pub config_map_ref: Option<NameRef>,
    pub secret_ref: Option<NameRef>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NameRef {
    pub name: String,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeMount {
    pub name: String,
    pub mount_path: String,
    #[serde(default)]
    pub read_only: bool,
    pub sub_path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
    /// Requests schedule pods; with one node there is nothing to schedule.
    pub requests: Option<IgnoredAny>,
}

/// A quantity as written: `128Mi`, `1G`, or a plain number.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Quantity {
    Text(String),
    Number(f64),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Volume {
    pub name: String,
    pub empty_dir: Option<IgnoredAny>,
    pub config_map: Option<FilesSource>,
    pub secret: Option<FilesSource>,
    pub persistent_volume_claim: Option<IgnoredAny>,
}

/// A ConfigMap's or a Secret's keys as files.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FilesSource {
    /// `configMap.name`, or `secret.secretName`.
    #[serde(alias = "secretName")]
    pub name: String,
    pub items: Option<Vec<KeyToPath>>,
    pub default_mode: Option<Mode>,
    #[serde(default)]
    pub optional: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyToPath {
    pub key: String,
    pub path: String,
    pub mode: Option<Mode>,
}

/// A file mode: a number (`420`, or `0644` where YAML 1.1 reads it as
/// octal, as Kubernetes does), or the octal written as text.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(try_from = "ModeText")]
pub struct Mode(pub u32);

#[derive(Deserialize)]
#[serde(untagged)]
enum ModeText {
    Number(u32),
    Text(String),
}

impl TryFrom<ModeText> for Mode {
    type Error = String;
    fn try_from(m: ModeText) -> Result<Mode, String> {
        let bits = match m {
            ModeText::Number(n) => n,
            ModeText::Text(t) => {
                let digits = t.strip_prefix("0o").or_else(|| t.strip_prefix('0')).unwrap_or(&t);
                u32::from_str_radix(digits, 8).map_err(|_| format!("{t:?} is not an octal file mode"))?
            }
        };
        if bits > 0o777 {
            return Err(format!("mode {bits:#o}: at most 0777"));
        }
        Ok(Mode(bits))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Probe {
    pub exec: Option<ExecAction>,
    pub tcp_socket: Option<TcpSocketAction>,
    pub http_get: Option<HttpGetAction>,
    pub grpc: Option<IgnoredAny>,
    #[serde(default)]
    pub initial_delay_seconds: u64,
    pub period_seconds: Option<u64>,
    pub timeout_seconds: Option<u64>,
    pub failure_threshold: Option<u32>,
    pub success_threshold: Option<u32>,
    pub termination_grace_period_seconds: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TcpSocketAction {
    pub port: PortRef,
    pub host: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpGetAction {
    pub port: PortRef,
    pub path: Option<String>,
    pub host: Option<String>,
    pub scheme: Option<String>,
    #[serde(default)]
    pub http_headers: Vec<HttpHeader>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerPort {
    pub container_port: u16,
    pub name: Option<String>,
    pub protocol: Option<IgnoredAny>,
    /// Nothing outside the machine reaches it.
    pub host_port: Option<IgnoredAny>,
    pub host_ip: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecAction {
    pub command: Vec<String>,
}

/// Deployment, ReplicaSet, StatefulSet, DaemonSet and Job: a pod template
/// and how many pods it makes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    pub spec: WorkloadSpec,
    pub status: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSpec {
    pub replicas: Option<u16>,
    pub selector: Option<Selector>,
    pub template: Template,
    /// StatefulSet: the headless Service that names its pods.
    pub service_name: Option<String>,
    pub pod_management_policy: Option<String>,
    #[serde(default)]
    pub volume_claim_templates: Vec<ClaimTemplate>,
    /// Job: how many pods must succeed, and how many run at once.
    pub completions: Option<u32>,
    pub parallelism: Option<u32>,
    // Accepted, changing nothing for pods that start once.
    pub backoff_limit: Option<IgnoredAny>,
    pub ttl_seconds_after_finished: Option<IgnoredAny>,
    pub strategy: Option<IgnoredAny>,
    pub update_strategy: Option<IgnoredAny>,
    pub revision_history_limit: Option<IgnoredAny>,
    pub min_ready_seconds: Option<IgnoredAny>,
    pub progress_deadline_seconds: Option<IgnoredAny>,
    pub persistent_volume_claim_retention_policy: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Selector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Template {
    #[serde(default)]
    pub metadata: TemplateMeta,
    pub spec: PodSpec,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimTemplate {
    pub metadata: ClaimMeta,
    pub spec: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMeta {
    pub name: String,
    pub labels: Option<IgnoredAny>,
    pub annotations: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Service {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    pub spec: ServiceSpec,
    pub status: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceSpec {
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// `None` makes it headless.
    #[serde(rename = "clusterIP")]
    pub cluster_ip: Option<String>,
    /// Only `ClusterIP`: nothing outside the machine can reach it.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Its pods take connections before they are ready.
    pub publish_not_ready_addresses: Option<bool>,
    pub session_affinity: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServicePort {
    pub name: Option<String>,
    pub port: u16,
    pub target_port: Option<PortRef>,
    pub protocol: Option<String>,
    pub app_protocol: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PortRef {
    Number(u16),
    Name(String),
}

/// ConfigMap and Secret.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Data {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// ConfigMap's binary values and Secret's plain ones.
    #[serde(default)]
    pub binary_data: BTreeMap<String, String>,
    #[serde(default)]
    pub string_data: BTreeMap<String, String>,
    #[serde(rename = "type")]
    pub kind_of: Option<IgnoredAny>,
    pub immutable: Option<IgnoredAny>,
}

/// A Namespace: its name is what objects in it say.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespace {
    pub api_version: String,
    pub kind: String,
    pub metadata: Meta,
    pub spec: Option<IgnoredAny>,
    pub status: Option<IgnoredAny>,
}
