//! Options that describe a Linux target (shared by `run` and `explore`):
//! its command, memory and files, and the nodes that make it a simulated
//! multi-node system, with their disks and the fault plan.

use std::path::PathBuf;

use anyhow::{Context, Result};
use hvsim_guest_image::compose;
use hvsim_guest_image::container::{Container, Overrides};
use hvsim_guest_image::hash::file_hash;
use hvsim_guest_image::linux::GuestFile;
use hvsim_guest_image::oci::registry::{self, Access, PullPolicy};
use hvsim_guest_image::oci::store::Store;
use hvsim_guest_image::target::{default_mem, StartOptions, System, Target};
use hvsim_vmm::devices::virtio::MAX_NODES;

use crate::util;

/// A node name from an image name: its repository's last part
/// (`docker.io/library/redis:7` -> `redis`).
pub fn image_node_name(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    let name = last.split([':', '@']).next().unwrap_or(last);
    if name.is_empty() {
        "app".into()
    } else {
        name.to_owned()
    }
}

/// The system of `--image IMAGE`: one node running the image, with its own
/// command or `command` instead of its Cmd.
pub fn image_system(
    image: &str,
    command: Option<Vec<String>>,
    disk: u64,
    fault_plan: Option<String>,
) -> Result<System> {
    let o = Overrides { command, ..Overrides::default() };
    let c = Container::resolve(&Store::open()?, &image_node_name(image), image, o)?;
    Ok(System::with_containers(vec![c], disk, fault_plan)?)
}

/// The system of a compose project (`--compose FILE`), its images pulled
/// as `pull` says; the compose file is pinned by its bytes' hash.
pub fn compose_system(
    file: &std::path::Path,
    env_file: &[PathBuf],
    disk: u64,
    fault_plan: Option<String>,
    pull: PullPolicy,
    access: &Access,
) -> Result<System> {
    let (project, warnings) = compose::load(file, env_file)?;
    for w in warnings {
        eprintln!("hvsim: warning: {}: {w}", file.display());
    }
    let store = Store::open()?;
    let images: Vec<String> = project.services.iter().map(|s| s.image.clone()).collect();
    registry::ensure(&store, &images, pull, access)?;
    let mut system = System::with_containers(project.containers(&store)?, disk, fault_plan)?;
    system.project = project.name.clone().or_else(|| {
        let folder = file.canonicalize().ok()?.parent()?.file_name()?.to_string_lossy().into_owned();
        Some(folder)
    });
    system.sources =
        std::iter::once(file).chain(env_file.iter().map(PathBuf::as_path)).map(pin).collect::<Result<_>>()?;
    Ok(system)
}

/// The system of Kubernetes manifests (`--k8s PATH...`), its images pulled
/// as `pull` says; each manifest is pinned by its bytes' hash.
pub fn k8s_system(
    paths: &[PathBuf],
    disk: u64,
    fault_plan: Option<String>,
    pull: PullPolicy,
    access: &Access,
) -> Result<System> {
    let cluster = hvsim_guest_image::k8s::load(paths)?;
    let store = Store::open()?;
    registry::ensure(&store, &cluster.images(), pull, access)?;
    let mut system = System::with_containers(cluster.containers(&store)?, disk, fault_plan)?;
    // As for compose: the folder the manifests are in names the project.
    system.project = paths.first().and_then(|first| {
        let p = first.canonicalize().ok()?;
        let dir = if p.is_dir() { p } else { p.parent()?.to_owned() };
        Some(dir.file_name()?.to_string_lossy().into_owned())
    });
    system.sources = cluster.files.iter().map(|f| pin(f)).collect::<Result<_>>()?;
    system.services = cluster.services;
    Ok(system)
}

/// A source file, pinned by its bytes: its path as given and their SHA-256.
fn pin(file: &std::path::Path) -> Result<(PathBuf, String)> {
    Ok((file.to_owned(), file_hash(file)?))
}

#[derive(clap::Args, Clone, Debug)]
pub struct LinuxArgs {
    /// Run a container image from the store (`hvsim image load`) as one
    /// node, with its own entrypoint and command (or --image-cmd); the run
    /// ends when the container exits, with its status.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["init_cmd", "nodes", "guest_file", "node_cmd", "disk_image"])]
    pub image: Option<String>,
    /// Run a docker-compose project: a node per service (and replica), each
    /// running its image from the store; the run ends when every service
    /// has exited (see docs/compose.md).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["image", "init_cmd", "nodes", "guest_file", "node_cmd", "disk_image"])]
    pub compose: Option<PathBuf>,
    /// Run Kubernetes manifests (files, or directories of .yaml files, each
    /// of one or more documents; repeatable): a node per pod, each running
    /// its image from the store (see docs/kubernetes.md).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["compose", "image", "init_cmd", "nodes", "guest_file", "node_cmd", "disk_image"])]
    pub k8s: Vec<PathBuf>,
    /// With --compose: a file of NAME=VALUE lines, the variables the compose
    /// file's ${VAR} and bare environment NAMEs take (repeatable, later
    /// wins). Without it, the project's .env if there is one. hvsim never
    /// takes them from its own environment (docs/compose.md).
    #[arg(long, value_name = "FILE", requires = "compose")]
    pub env_file: Vec<PathBuf>,
    /// With --image: the command, replacing the image's Cmd as `docker run
    /// IMAGE CMD...` does (split into words as a shell would).
    #[arg(long, value_name = "CMD", requires = "image")]
    pub image_cmd: Option<String>,
    /// With --linux: the shell command init runs; its exit status ends the
    /// run (report through the SDK to explore it). Default: `true`.
    #[arg(long, requires = "linux")]
    pub init_cmd: Option<String>,
    /// Guest RAM (e.g. 128M, 1G). Default: 128M (2M a node past 64 nodes),
    /// and 64M per container or what its compose `mem_limit` says.
    #[arg(long, value_parser = util::parse_size, requires = "linux_target")]
    pub mem: Option<usize>,
    /// With --linux: copy a host file into the guest (repeatable).
    #[arg(long, value_name = "HOST:GUEST", value_parser = GuestFile::parse, requires = "linux")]
    pub guest_file: Vec<GuestFile>,
    /// Boot the guest even if the boot cache holds it (and do not save it
    /// there).
    #[arg(long, requires = "linux_target")]
    pub cold_boot: bool,
    /// With --compose or --image: pull the images the store lacks
    /// (`missing`), every image from its registry (`always`), or none
    /// (`never`), as `docker compose --pull` does.
    #[arg(long, value_name = "WHEN", default_value = "missing", value_parser = parse_pull)]
    pub pull: PullPolicy,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub nodes: NodeArgs,
}

fn parse_pull(s: &str) -> std::result::Result<PullPolicy, String> {
    match s {
        "missing" => Ok(PullPolicy::Missing),
        "always" => Ok(PullPolicy::Always),
        "never" => Ok(PullPolicy::Never),
        _ => Err("missing, always or never".into()),
    }
}

/// How hvsim reaches registries (`hvsim image pull`, and the pulls of
/// --compose and --image). The environment variables serve `hvsim replay`,
/// which pulls a recorded image by digest if the store lost it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RegistryArgs {
    /// A registry (`host[:port]`) spoken to in plain HTTP, not HTTPS
    /// (repeatable).
    #[arg(long, value_name = "HOST", env = registry::INSECURE_ENV, value_delimiter = ',')]
    pub insecure_registry: Vec<String>,
    /// A PEM file of certificate authorities to trust besides the system's,
    /// for registries with a private CA.
    #[arg(long, value_name = "FILE", env = registry::CA_ENV)]
    pub registry_ca: Option<PathBuf>,
}

impl RegistryArgs {
    pub fn access(&self) -> Access {
        Access { insecure: self.insecure_registry.clone(), ca_file: self.registry_ca.clone() }
    }
}

impl LinuxArgs {
    /// Whether these options describe a Linux target without `--linux`.
    pub fn implies_linux(&self) -> bool {
        self.image.is_some() || self.compose.is_some() || !self.k8s.is_empty()
    }

    /// The Linux-only options given, by flag name.
    fn given(&self) -> Vec<&'static str> {
        let n = &self.nodes;
        [
            ("--init-cmd", self.init_cmd.is_some()),
            ("--image-cmd", self.image_cmd.is_some()),
            ("--mem", self.mem.is_some()),
            ("--guest-file", !self.guest_file.is_empty()),
            ("--cold-boot", self.cold_boot),
            ("--nodes", n.nodes > 0),
            ("--fault-plan", n.fault_plan.is_some()),
            ("--disk-size", n.disk_size != DEFAULT_DISK_BYTES),
            ("--disk-image", n.disk_image.is_some()),
            ("--node-cmd", n.node_cmd.is_some()),
            ("--pull", self.pull != PullPolicy::Missing),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// Refuses Linux-only options given with a raw guest: they would do
    /// nothing, and silently doing nothing misleads.
    pub fn refuse_for_raw_guest(&self, guest: &str, more: &[(&'static str, bool)]) -> Result<()> {
        let mut given = self.given();
        given.extend(more.iter().filter(|(_, g)| *g).map(|(flag, _)| *flag));
        if !given.is_empty() {
            anyhow::bail!(
                "{} {} only to Linux targets (--linux, --image, --compose, --k8s), not to the raw guest `{guest}`",
                given.join(", "),
                if given.len() == 1 { "applies" } else { "apply" }
            );
        }
        Ok(())
    }

    /// The target these options describe (reads and hashes its files).
    pub fn target(&self, verbose_boot: bool) -> Result<Target> {
        let files = self
            .guest_file
            .iter()
            .map(|f| Ok((f.clone(), file_hash(&f.host)?)))
            .collect::<hvsim_guest_image::Result<Vec<_>>>()?;
        let disk = self.nodes.disk_size as u64;
        let access = self.registry.access();
        let system = if let Some(file) = &self.compose {
            compose_system(file, &self.env_file, disk, self.nodes.fault_plan_text()?, self.pull, &access)?
        } else if !self.k8s.is_empty() {
            k8s_system(&self.k8s, disk, self.nodes.fault_plan_text()?, self.pull, &access)?
        } else if let Some(image) = &self.image {
            let command = match &self.image_cmd {
                None => None,
                Some(c) => Some(shell_words::split(c).with_context(|| format!("--image-cmd {c:?}"))?),
            };
            registry::ensure(&Store::open()?, std::slice::from_ref(image), self.pull, &access)?;
            let mut system = image_system(image, command, disk, self.nodes.fault_plan_text()?)?;
            system.project = Some(image_node_name(image));
            system
        } else {
            self.nodes.system()?
        };
        if let Some(path) = &self.nodes.fault_plan {
            if system.nodes == 0 {
                anyhow::bail!(
                    "--fault-plan {}: a fault plan needs nodes (--nodes, --image, --compose or --k8s)",
                    path.display()
                );
            }
            // Checked now against the nodes (and their names), for an error
            // that names the file.
            system.faults(0).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
        let mem = self.mem.unwrap_or_else(|| default_mem(&system));
        hvsim_vmm::memory::check_size(mem).map_err(|e| anyhow::anyhow!("--mem: {e}"))?;
        hvsim_vmm::host::ensure_memory_for(mem, 1, self.mem_said()).map_err(|e| anyhow::anyhow!(e))?;
        system.virtio_spec().check().map_err(|e| anyhow::anyhow!("--disk-size: {e}"))?;
        let command = self.init_cmd.clone().unwrap_or_else(|| "true".into());
        Ok(Target::Linux { command, mem, files, system, verbose_boot })
    }

    /// Where the guest's RAM size comes from, for an error about it.
    pub fn mem_said(&self) -> &'static str {
        if self.mem.is_some() {
            "--mem"
        } else {
            "by default 128 MiB (2 MiB a node past 64), and 64 MiB per container or its compose `mem_limit`"
        }
    }

    pub fn start_options(&self, watchdog: Option<Option<std::time::Duration>>) -> StartOptions {
        StartOptions { cold_boot: self.cold_boot, watchdog, ..StartOptions::default() }
    }
}

/// `--disk-size`'s default: what real databases start in (PostgreSQL's
/// data directory with its first WAL segments, MySQL's redo logs, etcd's
/// preallocated WAL). It costs nothing until written: the disk keeps only
/// the sectors the guest wrote, and its empty file system is trimmed.
const DEFAULT_DISK_BYTES: usize = 1 << 30;

#[derive(clap::Args, Clone, Debug)]
pub struct NodeArgs {
    /// With --linux: nodes to simulate. Each gets a NIC on hvsim's switch,
    /// its own network namespace with address 10.0.0.<node+1>, and a disk
    /// (run a command on node I with `hvsim-node I CMD...` in the guest).
    #[arg(long, default_value_t = 0, requires = "linux",
          value_parser = clap::value_parser!(u16).range(0..=i64::from(MAX_NODES)))]
    pub nodes: u16,
    /// With --nodes or containers: the fault plan to inject (TOML; see
    /// examples/faults/). Compose projects may name services for nodes.
    #[arg(long, value_name = "FILE")]
    pub fault_plan: Option<PathBuf>,
    /// With --nodes or containers: each node's disk size (sparse: what the
    /// guest never wrote costs nothing).
    #[arg(long, default_value = "1G", value_parser = util::parse_size)]
    pub disk_size: usize,
    /// With --nodes: a raw disk image every node's disk starts from
    /// (read-only; writes go to a per-node overlay in memory).
    #[arg(long, value_name = "FILE", requires = "nodes")]
    pub disk_image: Option<PathBuf>,
    /// With --nodes: a shell command every node runs as its service
    /// (`HVSIM_NODE` says which), started when the run starts and again
    /// whenever a crashed node restarts.
    #[arg(long, value_name = "CMD", requires = "nodes")]
    pub node_cmd: Option<String>,
}

impl NodeArgs {
    /// The fault plan's text.
    fn fault_plan_text(&self) -> Result<Option<String>> {
        let Some(path) = &self.fault_plan else {
            return Ok(None);
        };
        let text =
            hvsim_vmm::files::read_text(path).with_context(|| format!("cannot read fault plan {}", path.display()))?;
        Ok(Some(text))
    }

    /// The system these options describe (reads the plan, hashes the image).
    pub fn system(&self) -> Result<System> {
        let fault_plan = self.fault_plan_text()?;
        let disk_image = match &self.disk_image {
            None => None,
            Some(p) => {
                let hash = file_hash(p)?;
                let len =
                    std::fs::metadata(p).with_context(|| format!("cannot read disk image {}", p.display()))?.len();
                if len > self.disk_size as u64 {
                    anyhow::bail!(
                        "disk image {} ({len} bytes) is larger than --disk-size ({} bytes)",
                        p.display(),
                        self.disk_size
                    );
                }
                Some((p.clone(), hash))
            }
        };
        Ok(System {
            nodes: self.nodes,
            disk_bytes: self.disk_size as u64,
            disk_image,
            fault_plan,
            node_cmd: self.node_cmd.clone(),
            ..System::default()
        })
    }
}
