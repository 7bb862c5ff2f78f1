//! `hvsim image`: the local store of container images
//! (`hvsim_guest_image::oci`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_explorer::document::{Document, Tag};
use hvsim_guest_image::oci::debian::{self, Built, DebianImage};
use hvsim_guest_image::oci::load::{load, Loaded};
use hvsim_guest_image::oci::pack::RunConfig;
use hvsim_guest_image::oci::registry;
use hvsim_guest_image::oci::store::{ImageRecord, Layer, Store};
use hvsim_guest_image::oci::Digest;
use schemars::JsonSchema;
use serde::Serialize;

use crate::linux_args::RegistryArgs;
use crate::util::{print_json, print_table, Column};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Import images from a `docker save`/`podman save` archive or an OCI
    /// image layout directory.
    Load {
        /// The archive (tar, maybe gzip or zstd compressed) or directory.
        source: PathBuf,
        /// Name the image (the source must hold exactly one).
        #[arg(long)]
        tag: Option<String>,
    },
    /// Pull an image from a registry (OCI distribution API): by tag or
    /// digest, the linux/amd64 image of an index, with the credentials of
    /// `docker login` (docs/compose.md#registries).
    Pull {
        /// `redis:7`, `ghcr.io/org/app:1.4`, `host:5000/team/db@sha256:…`.
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// List the images in the store.
    Ls,
    /// Remove tags or images (by name, id or id prefix), and every layer no
    /// other image uses.
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Show an image's config (entrypoint, cmd, env, working dir, user,
    /// ports) and its layers, as JSON (with or without --json).
    Inspect { name: String },
    /// Make an image from Debian packages (with mmdebstrap; cached) and
    /// load it. `--redis`, `--postgres`, `--mariadb` and
    /// `--python-antithesis` make the test suite's images.
    Debian {
        /// The image's name.
        #[arg(required_unless_present = "preset", conflicts_with = "preset")]
        name: Option<String>,
        /// Packages to install (comma-separated).
        #[arg(long, value_delimiter = ',', required_unless_present = "preset", conflicts_with = "preset")]
        packages: Vec<String>,
        #[arg(long, default_value = "bookworm")]
        suite: String,
        /// The image's command (split as a shell would). Default: `bash`.
        #[arg(long, conflicts_with = "preset")]
        cmd: Option<String>,
        /// The test suite's image: bookworm with redis-server and redis-tools.
        #[arg(long, group = "preset")]
        redis: bool,
        /// The test suite's image: bookworm's PostgreSQL 15 with its
        /// cluster made, open to the network, and python3-psycopg2.
        #[arg(long, group = "preset")]
        postgres: bool,
        /// The test suite's image: bookworm's MariaDB 10.11 with its data
        /// directory made, open to the network, and python3-pymysql.
        #[arg(long, group = "preset")]
        mariadb: bool,
        /// The test suite's image: bookworm's python3, the official
        /// Antithesis Python SDK from PyPI, and a program using it.
        #[arg(long, group = "preset")]
        python_antithesis: bool,
        /// Also print where the docker-archive and OCI layout are.
        #[arg(long)]
        paths: bool,
    },
}

/// An image as `load`, `ls` and `debian` describe it with --json.
#[derive(Serialize, JsonSchema)]
struct ImageJson {
    id: Digest,
    tags: Vec<String>,
    layers: usize,
    unpacked_bytes: u64,
}

impl ImageJson {
    fn of(r: &ImageRecord, tags: &[String]) -> ImageJson {
        ImageJson { id: r.id.clone(), tags: tags.to_vec(), layers: r.layers.len(), unpacked_bytes: unpacked(r) }
    }
}

/// What `hvsim image load --json` and `hvsim image debian --json` print.
#[derive(Serialize, JsonSchema)]
pub struct ImagesLoaded {
    schema: Tag<ImagesLoaded>,
    loaded: Vec<ImageJson>,
    /// `debian`: the archive it loaded and its OCI layout.
    #[serde(flatten)]
    built: Option<BuiltJson>,
}

impl Document for ImagesLoaded {
    const NAME: &'static str = "image-load";
    const SCHEMA: &'static str = "hvsim-image-load-v1";
    const ABOUT: &'static str = "the images loaded: `hvsim image load --json`, `hvsim image debian --json`";
}

#[derive(Serialize, JsonSchema)]
struct BuiltJson {
    archive: PathBuf,
    layout: PathBuf,
    /// Made before (mmdebstrap did not run).
    cached: bool,
}

impl ImagesLoaded {
    fn of(loaded: &[Loaded], built: Option<&Built>) -> ImagesLoaded {
        ImagesLoaded {
            schema: Tag::new(),
            loaded: loaded.iter().map(|l| ImageJson::of(&l.record, &l.tags)).collect(),
            built: built.map(|b| BuiltJson { archive: b.archive.clone(), layout: b.layout.clone(), cached: !b.built }),
        }
    }
}

/// What `hvsim image pull --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct ImagePulled {
    schema: Tag<ImagePulled>,
    reference: String,
    /// `host/repo@sha256:…`: what the reference named when pulled; runs
    /// record it, and a replay pulls by it.
    repo_digest: String,
    image: ImageJson,
    /// Blobs downloaded and their bytes (layers the store had are not).
    blobs_fetched: usize,
    bytes_fetched: u64,
}

impl Document for ImagePulled {
    const NAME: &'static str = "image-pull";
    const SCHEMA: &'static str = "hvsim-image-pull-v1";
    const ABOUT: &'static str = "the image pulled: `hvsim image pull --json`";
}

/// What `hvsim image ls --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct ImageList {
    schema: Tag<ImageList>,
    store: PathBuf,
    images: Vec<ImageJson>,
}

impl Document for ImageList {
    const NAME: &'static str = "image-ls";
    const SCHEMA: &'static str = "hvsim-image-ls-v1";
    const ABOUT: &'static str = "the image store: `hvsim image ls --json`";
}

/// What `hvsim image rm --json` prints.
#[derive(Serialize, JsonSchema)]
pub struct ImagesRemoved {
    schema: Tag<ImagesRemoved>,
    removed: Vec<RemovedJson>,
}

impl Document for ImagesRemoved {
    const NAME: &'static str = "image-rm";
    const SCHEMA: &'static str = "hvsim-image-rm-v1";
    const ABOUT: &'static str = "what `hvsim image rm --json` untagged and deleted";
}

/// One name given to `rm`.
#[derive(Serialize, JsonSchema)]
struct RemovedJson {
    name: String,
    untagged: Vec<String>,
    /// The image deleted (null: it keeps other tags).
    deleted: Option<Digest>,
    freed_bytes: u64,
}

/// What `hvsim image inspect` prints (JSON with or without `--json`).
#[derive(Serialize, JsonSchema)]
pub struct ImageInspect {
    schema: Tag<ImageInspect>,
    id: Digest,
    tags: Vec<String>,
    /// Where it was loaded or pulled from.
    source: String,
    /// A pulled image's `host/repo@sha256:…`.
    #[serde(skip_serializing_if = "Option::is_none")]
    repo_digest: Option<String>,
    /// `os/architecture`.
    platform: String,
    created: Option<String>,
    config: ImageConfig,
    /// Bottom layer first.
    layers: Vec<Layer>,
    unpacked_bytes: u64,
    /// Its unpacked root, if made yet.
    rootfs: Option<PathBuf>,
}

impl Document for ImageInspect {
    const NAME: &'static str = "image-inspect";
    const SCHEMA: &'static str = "hvsim-image-inspect-v1";
    const ABOUT: &'static str = "one image, its run configuration and layers: `hvsim image inspect`";
}

/// The image's run configuration, as its OCI config gives it.
#[derive(Serialize, JsonSchema)]
struct ImageConfig {
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    env: Option<Vec<String>>,
    working_dir: Option<String>,
    user: Option<String>,
    exposed_ports: Option<Vec<String>>,
    volumes: Option<Vec<String>>,
    stop_signal: Option<String>,
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let store = Store::open()?;
    match args.what {
        What::Load { source, tag } => {
            let loaded = load(&store, &source, tag.as_deref())?;
            if json {
                print_json(&ImagesLoaded::of(&loaded, None))?;
                return Ok(ExitCode::SUCCESS);
            }
            for l in loaded {
                let names = if l.tags.is_empty() { "(untagged)".to_owned() } else { l.tags.join(", ") };
                println!(
                    "loaded {names}: id {}, {} layers, {}",
                    l.record.id.short(),
                    l.record.layers.len(),
                    size(&l.record)
                );
            }
        }
        What::Pull { reference, registry } => {
            let p = registry::pull(&store, &reference, &registry.access())?;
            if json {
                print_json(&ImagePulled {
                    schema: Tag::new(),
                    reference,
                    repo_digest: p.repo_digest,
                    image: ImageJson::of(&p.record, &p.tags),
                    blobs_fetched: p.blobs_fetched,
                    bytes_fetched: p.bytes_fetched,
                })?;
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "pulled {reference}: id {}, {} layers, {} ({} blobs, {:.1} MiB downloaded)\n  {}",
                p.record.id.short(),
                p.record.layers.len(),
                size(&p.record),
                p.blobs_fetched,
                p.bytes_fetched as f64 / (1 << 20) as f64,
                p.repo_digest
            );
        }
        What::Ls => {
            let images = store.images()?;
            if json {
                let images = images.iter().map(|(r, tags)| ImageJson::of(r, tags)).collect();
                print_json(&ImageList { schema: Tag::new(), store: store.dir().to_owned(), images })?;
                return Ok(ExitCode::SUCCESS);
            }
            println!("{} images in {}", images.len(), store.dir().display());
            let rows: Vec<Vec<String>> = images
                .iter()
                .map(|(r, tags)| {
                    let names = if tags.is_empty() { "(untagged)".to_owned() } else { tags.join(", ") };
                    vec![r.id.short().to_string(), r.layers.len().to_string(), size(r), names]
                })
                .collect();
            let columns = [Column("id", false), Column("layers", true), Column("size", true), Column("tags", false)];
            print_table(&columns, &rows);
        }
        What::Rm { names } => {
            let mut removed = Vec::new();
            for name in names {
                let r = store.remove(&name)?;
                if json {
                    removed.push(RemovedJson {
                        name,
                        untagged: r.untagged,
                        deleted: r.deleted,
                        freed_bytes: r.freed_bytes,
                    });
                    continue;
                }
                for t in &r.untagged {
                    println!("untagged {t}");
                }
                if let Some(id) = r.deleted {
                    println!("deleted {id} ({:.1} MiB freed)", r.freed_bytes as f64 / (1 << 20) as f64);
                }
            }
            if json {
                print_json(&ImagesRemoved { schema: Tag::new(), removed })?;
            }
        }
        // Its output is JSON with or without --json.
        What::Inspect { name } => {
            let r = store.resolve(&name)?;
            let config = store.config(&r)?;
            let tags: Vec<String> =
                store.images()?.into_iter().find(|(i, _)| i.id == r.id).map(|(_, t)| t).unwrap_or_default();
            let c = config.config().clone().unwrap_or_default();
            let rootfs = hvsim_guest_image::oci::rootfs::path(&store, &r.id);
            let doc = ImageInspect {
                schema: Tag::new(),
                id: r.id.clone(),
                tags,
                source: r.source.clone(),
                repo_digest: r.repo_digest.clone(),
                platform: format!("{}/{}", config.os(), config.architecture()),
                created: config.created().clone(),
                config: ImageConfig {
                    entrypoint: c.entrypoint().clone(),
                    cmd: c.cmd().clone(),
                    env: c.env().clone(),
                    working_dir: c.working_dir().clone(),
                    user: c.user().clone(),
                    exposed_ports: c.exposed_ports().clone(),
                    volumes: c.volumes().clone(),
                    stop_signal: c.stop_signal().clone(),
                },
                layers: r.layers.clone(),
                unpacked_bytes: unpacked(&r),
                rootfs: rootfs.exists().then_some(rootfs),
            };
            print_json(&doc)?;
        }
        What::Debian { name, packages, suite, cmd, redis, postgres, mariadb, python_antithesis, paths } => {
            let image = if redis {
                debian::redis()
            } else if postgres {
                debian::postgres()
            } else if mariadb {
                debian::mariadb()
            } else if python_antithesis {
                debian::python_antithesis()
            } else {
                let cmd = match cmd {
                    Some(c) => shell_words::split(&c).with_context(|| format!("--cmd {c:?}"))?,
                    None => vec!["bash".into()],
                };
                DebianImage {
                    name: name.expect("clap requires a name"),
                    suite,
                    packages,
                    pip: vec![],
                    files: vec![],
                    customize: vec![],
                    run: RunConfig { cmd: Some(cmd), ..RunConfig::default() },
                }
            };
            let built = image.build()?;
            let loaded = load(&store, &built.archive, None)?;
            if json {
                print_json(&ImagesLoaded::of(&loaded, Some(&built)))?;
                return Ok(ExitCode::SUCCESS);
            }
            for l in loaded {
                println!("loaded {}: id {}, {}", l.tags.join(", "), l.record.id.short(), size(&l.record));
            }
            if paths {
                println!("docker-archive: {}", built.archive.display());
                println!("OCI layout: {}", built.layout.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn unpacked(r: &ImageRecord) -> u64 {
    r.layers.iter().map(|l| l.unpacked).sum()
}

fn size(r: &ImageRecord) -> String {
    format!("{:.1} MiB", unpacked(r) as f64 / (1 << 20) as f64)
}
