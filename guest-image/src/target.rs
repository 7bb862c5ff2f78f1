//! What a run runs, as plain data (so a bug record names the exact target to
//! replay), and the one place that turns it into a machine ready to run:
//! `hvsim run`, `hvsim explore`, replays and benchmarks all start here.
//!
//! A raw guest starts from the run's seed. A Linux target boots (or restores
//! from the boot cache) the machine its shape describes, then receives what
//! is particular to the run: the seed, the command and files, the fault plan
//! and the disk image (see `Machine::begin_run`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hvsim_vmm::devices::virtio::VirtioSpec;
use hvsim_vmm::disk::Base;
use hvsim_vmm::faults::FaultPlan;
use hvsim_vmm::machine::{HostSettings, RunInputs};
use hvsim_vmm::profiler::ProfilerConfig;
use hvsim_vmm::{Machine, MachineConfig};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::composer::Composer;
use crate::container::{Container, VirtualService};
use crate::error::{ImageError, Result};
use crate::hash::file_hash;
use crate::host::Host;
use crate::linux::boot_cache::{BootCache, BootKind, BootReport, Shape, BOOT_SEED};
use crate::linux::{self, GuestFile, LinuxOptions, LinuxWork};
use crate::oci::rootfs::{self, RootFs};
use crate::oci::store::Store;
use crate::oci::Digest;
use crate::raw;

// One target per run or exploration: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    Raw {
        guest: String,
    },
    Linux {
        command: String,
        mem: usize,
        /// Host files copied into the guest, with the SHA-256 of their
        /// contents when the target was described (a replay refuses changed
        /// files).
        #[serde(default)]
        files: Vec<(GuestFile, String)>,
        /// Simulated nodes, their disks, and the faults injected.
        #[serde(default)]
        system: System,
        /// Keep the kernel's boot messages on the console.
        #[serde(default)]
        verbose_boot: bool,
    },
}

/// A simulated multi-node system inside the Linux guest (`--nodes`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct System {
    pub nodes: u16,
    /// Each node's disk size in bytes.
    pub disk_bytes: u64,
    /// The base image under every disk, with its SHA-256 (a replay refuses
    /// a changed image).
    pub disk_image: Option<(PathBuf, String)>,
    /// The fault plan's text: kept whole, so a bug record replays without
    /// the file. Ranges are resolved from the run's seed.
    pub fault_plan: Option<String>,
    /// The command every node runs, started again when a node restarts.
    #[serde(default)]
    pub node_cmd: Option<String>,
    /// A container per node (`--image`, `--compose`): node `i` runs
    /// `containers[i]` from its image, and the run lasts until they have
    /// all exited.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// With containers: each image disk's size (from the largest root file
    /// system, rounded up to a power of two so that similar projects share
    /// a machine shape). There is one image disk per image.
    #[serde(default)]
    pub image_bytes: u64,
    /// The Test Composer templates the containers hold (init runs them
    /// once setup is complete).
    #[serde(default)]
    pub composer: Composer,
    /// What the user calls it: a compose project's name (its `name:`, else
    /// its folder's), an image's name. Titles reports; decides nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The files it was described from (the compose file and its env
    /// files, the Kubernetes manifests), each with the SHA-256 of its bytes
    /// when the run was made: what a record was found from. The containers
    /// above are what runs; a replay needs none of these files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<(PathBuf, String)>,
    /// Kubernetes ClusterIP Services: addresses every node proxies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<VirtualService>,
}

impl System {
    /// A system of one node per container, each node's disk `disk_bytes`
    /// (its container's writable layer and volumes). Builds the images'
    /// root file systems (cached in the image store).
    pub fn with_containers(containers: Vec<Container>, disk_bytes: u64, fault_plan: Option<String>) -> Result<System> {
        let store = Store::open()?;
        let rootfs = containers.iter().map(|c| container_rootfs(&store, c)).collect::<Result<Vec<_>>>()?;
        let mut largest = rootfs.iter().map(|r| r.fs_bytes).max().unwrap_or(0);
        for other in containers.iter().flat_map(|c| c.init_containers.iter().chain(&c.sidecars)) {
            largest = largest.max(container_rootfs(&store, other)?.fs_bytes);
        }
        let paths: Vec<&Path> = rootfs.iter().map(|r| r.path.as_path()).collect();
        let composer = Composer::discover(&containers, &paths)?;
        let nodes = u16::try_from(containers.len()).map_err(|_| ImageError::Setup("too many containers".into()))?;
        Ok(System {
            nodes,
            disk_bytes,
            disk_image: None,
            fault_plan,
            node_cmd: None,
            containers,
            image_bytes: largest.next_power_of_two().max(MIN_IMAGE_DISK),
            composer,
            project: None,
            sources: Vec::new(),
            services: Vec::new(),
        })
    }

    /// The devices: part of the machine's shape.
    pub fn virtio_spec(&self) -> VirtioSpec {
        let image_bytes = if self.containers.is_empty() { 0 } else { self.image_bytes };
        let image_disks = u16::try_from(self.image_disks().len()).expect("images are fewer than containers");
        VirtioSpec { nodes: self.nodes, disk_bytes: self.disk_bytes, image_bytes, image_disks, rng: true }
    }

    /// The containers whose images the image disks hold, one per image,
    /// in the order the containers (each after its init containers, and
    /// before the containers beside it) first name them: image disk `k`
    /// holds `image_disks()[k]`'s image.
    fn image_disks(&self) -> Vec<&Container> {
        let mut images: Vec<&Container> = Vec::new();
        for c in self.containers.iter().flat_map(Container::all) {
            if !images.iter().any(|i| i.image_id == c.image_id) {
                images.push(c);
            }
        }
        assert!(images.len() <= usize::from(u16::MAX), "images are fewer than containers");
        images
    }

    /// The image disk that holds image `id`.
    fn image_disk(images: &[&Container], id: &Digest) -> u16 {
        let k = images.iter().position(|c| c.image_id == *id).expect("every container's image has a disk");
        u16::try_from(k).expect("images are fewer than containers")
    }

    /// What the nodes' disks and containers need at the start of a run.
    fn disk_inputs(&self) -> Result<DiskInputs> {
        if self.containers.is_empty() {
            return Ok(DiskInputs { disk_base: self.disk_base()?, images: Vec::new(), files: Vec::new() });
        }
        let store = Store::open()?;
        let empty = rootfs::empty_ext4(&store, self.disk_bytes)?;
        let disk_base = Base::load(&empty.display().to_string()).map_err(ImageError::Setup)?;
        let hosts = crate::container::hosts(&self.containers, &self.services);
        let mut images = Vec::new();
        // Services of one image share its disk: it is read and hashed once.
        let holders = self.image_disks();
        for c in &holders {
            let fs = container_rootfs(&store, c)?;
            if fs.fs_bytes > self.image_bytes {
                return Err(ImageError::Setup(format!(
                    "the root file system of {} ({} bytes) outgrew its disk ({} bytes)",
                    c.image, fs.fs_bytes, self.image_bytes
                )));
            }
            images.push(Some(Base::load(&fs.path.display().to_string()).map_err(ImageError::Setup)?));
        }
        let mut files = Vec::new();
        for (node, c) in self.containers.iter().enumerate() {
            files.extend(c.inbox_files(node as u16, &|id| System::image_disk(&holders, id), &hosts)?);
        }
        if !self.composer.is_empty() {
            files.push(self.composer.run_file());
        }
        if !self.services.is_empty() {
            files.push(crate::container::services_file(&self.services, &self.containers));
        }
        Ok(DiskInputs { disk_base: Some(disk_base), images, files })
    }

    /// The fault plan, resolved under the run's seed.
    pub fn faults(&self, seed: u64) -> Result<FaultPlan> {
        match &self.fault_plan {
            None => Ok(FaultPlan::default()),
            Some(text) => {
                let names: Vec<String> = self.containers.iter().map(|c| c.name.clone()).collect();
                let groups = node_groups(self.containers.iter().map(|c| &c.groups[..]));
                FaultPlan::parse_grouped(text, seed, self.nodes, &names, &groups)
                    .map_err(|e| ImageError::Setup(format!("fault plan: {e}")))
            }
        }
    }

    /// The disks' base image, refused if it changed since it was described.
    fn disk_base(&self) -> Result<Option<Base>> {
        let Some((path, hash)) = &self.disk_image else {
            return Ok(None);
        };
        let base = Base::load(&path.display().to_string()).map_err(ImageError::Setup)?;
        if base.sha256 != *hash {
            return Err(changed("disk image", path));
        }
        Ok(Some(base))
    }
}

/// The groups a fault plan may name, from each node's (in node order):
/// each group's name and its nodes.
pub(crate) fn node_groups<'a>(each_node: impl Iterator<Item = &'a [String]>) -> Vec<(String, Vec<u16>)> {
    let mut groups: Vec<(String, Vec<u16>)> = Vec::new();
    for (node, names) in each_node.enumerate() {
        let node = u16::try_from(node).expect("at most MAX_NODES nodes");
        for g in names {
            match groups.iter_mut().find(|(name, _)| name == g) {
                Some((_, nodes)) => nodes.push(node),
                None => groups.push((g.clone(), vec![node])),
            }
        }
    }
    groups
}

/// What a run's disks hold: the base image under every node's disk (with
/// containers, an empty file system), each node's image (a container's
/// root file system), and init's files describing the containers.
struct DiskInputs {
    disk_base: Option<Base>,
    images: Vec<Option<Base>>,
    files: Vec<linux::RunFile>,
}

/// How to start.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// Boot even if the boot cache holds the machine, and do not save it.
    pub cold_boot: bool,
    /// The watchdog (from the command line): `Some(None)` turns it off.
    pub watchdog: Option<Option<Duration>>,
    /// Sample the guest from the first instruction of the run on
    /// (`--profile-guest`; a boot is not profiled).
    pub profiler: Option<ProfilerConfig>,
    /// Raised from another thread, it stops the run (a boot finishes
    /// first: the boot cache keeps what it cost).
    pub interrupt: Option<hvsim_vmm::Interrupt>,
}

impl StartOptions {
    /// What the options ask of a machine about to run.
    pub fn prepare(&self, machine: &mut Machine) {
        if let Some(p) = &self.profiler {
            machine.enable_guest_profiler(*p);
        }
        if let Some(i) = &self.interrupt {
            machine.set_interrupt(i.clone());
        }
    }
}

/// A machine about to run its first instruction of the run.
pub struct Launch {
    pub machine: Machine,
    pub boot: BootReport,
}

fn changed(what: &str, path: &Path) -> ImageError {
    ImageError::Setup(format!("{what} {} changed since it was recorded (its SHA-256 differs)", path.display()))
}

impl Target {
    /// What reports are titled by: the raw guest; a compose project or an
    /// image by its name; else the program a one-line command runs, or
    /// `linux` for a script.
    pub fn name(&self) -> String {
        match self {
            Target::Raw { guest } => guest.clone(),
            Target::Linux { system, command, .. } => system.project.clone().unwrap_or_else(|| {
                // A script's first word names nothing.
                let script = command.contains(['\n', ';', '|', '&', '>', '<']);
                let program = command.split_whitespace().next().and_then(|w| w.rsplit('/').next());
                program.filter(|p| !p.is_empty() && !script).unwrap_or("linux").to_owned()
            }),
        }
    }

    pub fn is_linux(&self) -> bool {
        matches!(self, Target::Linux { .. })
    }

    /// Whether its containers hold Test Composer templates.
    pub fn has_composer(&self) -> bool {
        !self.templates().is_empty()
    }

    /// Its Test Composer templates' names, in order (none for most targets).
    pub fn templates(&self) -> Vec<&str> {
        self.composer().map_or(Vec::new(), Composer::templates)
    }

    /// Its Test Composer commands, if it has any place for them.
    pub fn composer(&self) -> Option<&Composer> {
        match self {
            Target::Linux { system, .. } => Some(&system.composer),
            Target::Raw { .. } => None,
        }
    }

    /// The containers its nodes run (none for most targets).
    pub fn containers(&self) -> &[Container] {
        match self {
            Target::Linux { system, .. } => &system.containers,
            Target::Raw { .. } => &[],
        }
    }

    /// The machine of this target at the start of a run with seed `seed`.
    pub fn start(&self, seed: u64, host: &Host, opts: &StartOptions) -> Result<Launch> {
        let started = Instant::now();
        let settings = host.settings(self.is_linux(), opts.watchdog);
        match self {
            Target::Raw { guest } => {
                let g = raw::find(guest).ok_or_else(|| {
                    let names: Vec<_> = raw::GUESTS.iter().map(|g| g.name).collect();
                    ImageError::Setup(format!("no built-in guest `{guest}` (there are: {})", names.join(", ")))
                })?;
                let mut config = MachineConfig::raw(g.build(), seed, &host.profile);
                config.host = settings;
                let mut machine = Machine::new(&config)?;
                opts.prepare(&mut machine);
                let boot =
                    BootReport { kind: BootKind::Direct, wall_ms: started.elapsed().as_millis() as u64, key: None };
                Ok(Launch { machine, boot })
            }
            Target::Linux { command, mem, files, system, verbose_boot } => {
                // The run's inputs first: a changed file fails before a boot.
                let DiskInputs { disk_base, images, files: extra_files } = system.disk_inputs()?;
                let mut work = LinuxWork {
                    command: command.clone(),
                    node_command: system.node_cmd.clone(),
                    files: vec![],
                    extra_files,
                };
                for (f, hash) in files {
                    if file_hash(&f.host)? != *hash {
                        return Err(changed("guest file", &f.host));
                    }
                    work.files.push(f.clone());
                }
                let faults = system.faults(seed)?;
                if !faults.draw.custom.is_empty() {
                    let commands: Vec<u8> = faults.draw.custom.iter().flat_map(|c| c.bytes().chain([0])).collect();
                    work.extra_files.push((hvsim_abi::linux::CUSTOM_FAULTS.to_owned(), 0o644, commands));
                }
                let inputs = RunInputs {
                    seed,
                    inbox: work.inbox()?,
                    faults,
                    disk_base,
                    images,
                    announce_setup: !system.composer.is_empty(),
                };
                let config = linux_boot(*mem, system, *verbose_boot, host, settings.clone())?;
                let (mut machine, boot) = if opts.cold_boot {
                    let machine = linux::boot_to_ready(&config)?;
                    (
                        machine,
                        BootReport { kind: BootKind::Cold, wall_ms: started.elapsed().as_millis() as u64, key: None },
                    )
                } else {
                    let shape = Shape::of(&config)?;
                    BootCache::open()?.get_or_boot(&shape, &settings, || linux::boot_to_ready(&config))?
                };
                machine.begin_run(inputs)?;
                opts.prepare(&mut machine);
                Ok(Launch { machine, boot })
            }
        }
    }
}

/// The machine a Linux target boots: the same for every run of its shape.
pub fn linux_boot(
    mem: usize,
    system: &System,
    verbose_boot: bool,
    host: &Host,
    settings: HostSettings,
) -> Result<MachineConfig> {
    let image = linux::prepare(&LinuxOptions {
        nested_workarounds: host.profile.nested_pvm,
        verbose: verbose_boot,
        cpuid_virtualized: host.probes.cpuid_virtualized,
    })?;
    let mut config = MachineConfig::linux(image, BOOT_SEED, mem, &host.profile);
    config.spec.virtio = system.virtio_spec();
    config.host = settings;
    Ok(config)
}

/// What a container adds to the guest's RAM unless its compose service
/// says (`mem_limit`): room for a small service. One kernel shares the RAM
/// among all containers, so a service that needs more takes it from the
/// others' unused share; a project of many small services needs little.
pub const CONTAINER_MEM: u64 = 64 << 20;

/// What each node asks of the guest kernel's RAM: a network namespace, a
/// NIC's receive buffers, a disk's queue and init's holder process come to
/// about 1 MiB a node (145 MiB in use once 128 nodes are set up, measured
/// here); twice that leaves room for what the node runs.
pub const NODE_MEM: u64 = 2 << 20;

/// Guest RAM of a Linux target unless the user says (`--mem`): 128 MiB
/// for hvsim's init, or more for many nodes, and each container's share.
/// Sized to the project rather than generous because the guest kernel
/// initialises every page of its RAM at boot, emulated on nested hosts.
pub fn default_mem(system: &System) -> usize {
    let nodes = (128 << 20).max(NODE_MEM * u64::from(system.nodes));
    // A pod's containers run at once (its init containers before them).
    let containers: u64 = system
        .containers
        .iter()
        .flat_map(|c| std::iter::once(c).chain(&c.sidecars))
        .map(|c| c.mem_bytes.unwrap_or(CONTAINER_MEM))
        .sum();
    usize::try_from(nodes + containers).unwrap_or(usize::MAX)
}

/// Images whose root file systems are smaller share this image disk size.
const MIN_IMAGE_DISK: u64 = 256 << 20;

/// The root file system of a container's image (pinned by id), built if
/// it is not cached.
fn container_rootfs(store: &Store, c: &Container) -> Result<RootFs> {
    let record = match (store.resolve(&c.image_id.to_string()), &c.repo_digest) {
        (Ok(record), _) => record,
        // Pulled when the run was made: the same bytes, by digest.
        (Err(_), Some(pinned)) => {
            let pulled = crate::oci::registry::pull(store, pinned, &crate::oci::registry::Access::from_env())?;
            if pulled.record.id != c.image_id {
                return Err(ImageError::Setup(format!(
                    "{pinned} is image {} now; the run used {}",
                    pulled.record.id, c.image_id
                )));
            }
            pulled.record
        }
        (Err(_), None) => {
            return Err(ImageError::Setup(format!(
                "image {} ({}) is not in the image store any more (`hvsim image load` it)",
                c.image, c.image_id
            )))
        }
    };
    if rootfs::path(store, &record.id).exists() {
        return rootfs::build(store, &record);
    }
    let what = format!("the root file system of {} ({})", c.image, record.id.short());
    let spinner = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("hvsim: building {msg} [{elapsed}] {spinner}").expect("valid template"),
    );
    if spinner.is_hidden() {
        crate::note!("hvsim: building {what}");
    } else {
        spinner.set_message(what);
        spinner.enable_steady_tick(std::time::Duration::from_millis(250));
    }
    let built = rootfs::build(store, &record);
    spinner.finish_and_clear();
    built
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_is_titled_by_its_project_or_its_program() {
        let linux = |command: &str, project: Option<&str>| Target::Linux {
            command: command.into(),
            mem: 128 << 20,
            files: Vec::new(),
            system: System { project: project.map(str::to_owned), ..System::default() },
            verbose_boot: false,
        };
        assert_eq!(Target::Raw { guest: "demo".into() }.name(), "demo");
        assert_eq!(linux("/bin/family slow-stages", None).name(), "family");
        assert_eq!(linux("true", Some("getting-started")).name(), "getting-started");
        assert_eq!(linux("mkfifo /tmp/p\necho hi > /tmp/p", None).name(), "linux", "a script");
        assert_eq!(linux("", None).name(), "linux");
    }

    #[test]
    fn targets_recorded_before_nodes_existed_still_load() {
        let old = r#"{"kind":"linux","command":"true","mem":134217728,"files":[]}"#;
        let t: Target = serde_json::from_str(old).unwrap();
        assert!(matches!(t, Target::Linux { system, verbose_boot: false, .. } if system == System::default()));
        let with = Target::Linux {
            command: "true".into(),
            mem: 1 << 27,
            files: vec![],
            system: System {
                nodes: 2,
                disk_bytes: 1 << 20,
                disk_image: None,
                fault_plan: Some("[network]\ndrop = 0.1\n".into()),
                node_cmd: Some("serve".into()),
                ..System::default()
            },
            verbose_boot: false,
        };
        let back: Target = serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back, with, "the fault plan's text travels with a bug record");
    }

    /// Containers of one image share its disk: the machine has one image
    /// disk per image, numbered in the order the containers name them.
    #[test]
    fn containers_of_one_image_share_its_disk() {
        let container = |name: &str, image: &str| Container {
            repo_digest: None,
            name: name.into(),
            image: image.into(),
            image_id: Digest::of(image.as_bytes()),
            hostname: name.into(),
            aliases: vec![],
            groups: vec![],
            args: vec!["true".into()],
            env: vec![],
            workdir: "/".into(),
            user: String::new(),
            restart: Default::default(),
            init: false,
            mounts: vec![],
            depends: vec![],
            health: None,
            liveness: None,
            startup: None,
            stop_grace_ms: None,
            init_containers: vec![],
            sidecars: vec![],
            mem_bytes: None,
        };
        let images = ["redis", "app", "redis", "redis", "proxy"];
        let system = System {
            nodes: images.len() as u16,
            disk_bytes: 1 << 20,
            containers: images.iter().enumerate().map(|(i, im)| container(&format!("s{i}"), im)).collect(),
            image_bytes: 1 << 20,
            ..System::default()
        };
        let disks = |system: &System| {
            let holders = system.image_disks();
            system.containers.iter().map(|c| System::image_disk(&holders, &c.image_id)).collect::<Vec<_>>()
        };
        assert_eq!(disks(&system), [0, 1, 0, 0, 2]);
        // An init container's image is named before its container's.
        let mut with_init = system.clone();
        with_init.containers[1].init_containers.push(container("migrate", "tools"));
        assert_eq!(disks(&with_init), [0, 2, 0, 0, 3]);
        assert_eq!(with_init.image_disks()[1].image, "tools");
        with_init.containers[0].sidecars.push(container("exporter", "metrics"));
        assert_eq!(disks(&with_init), [0, 3, 0, 0, 4]);
        assert_eq!(with_init.image_disks()[1].image, "metrics");
        let spec = system.virtio_spec();
        assert_eq!((spec.image_disks, spec.devices()), (3, 2 * 5 + 3 + 1));
        spec.check().unwrap();
        assert_eq!(System { nodes: 2, ..System::default() }.virtio_spec().image_disks, 0);

        // RAM: init's 128 MiB, then each container's share, 64 MiB unless
        // its service says.
        let mut system = system;
        assert_eq!(default_mem(&system), (128 + 5 * 64) << 20);
        system.containers[1].mem_bytes = Some(1 << 30);
        assert_eq!(default_mem(&system), (128 + 4 * 64 + 1024) << 20);
        assert_eq!(default_mem(&System { nodes: 64, ..System::default() }), 128 << 20, "nodes without containers");
        assert_eq!(default_mem(&System { nodes: 128, ..System::default() }), 256 << 20, "2 MiB a node");
    }

    #[test]
    fn changed_inputs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        std::fs::write(&img, b"one").unwrap();
        let hash = file_hash(&img).unwrap();
        let system = System { nodes: 1, disk_bytes: 4096, disk_image: Some((img.clone(), hash)), ..System::default() };
        assert_eq!(system.disk_base().unwrap().unwrap().bytes.as_slice(), b"one");
        std::fs::write(&img, b"two").unwrap();
        let e = system.disk_base().unwrap_err().to_string();
        assert!(e.contains("disk image") && e.contains("changed"), "{e}");
        let bad = System { fault_plan: Some("[network]\ndrop = 2.0\n".into()), ..System::default() };
        assert!(bad.faults(1).unwrap_err().to_string().starts_with("fault plan: "));
    }
}
