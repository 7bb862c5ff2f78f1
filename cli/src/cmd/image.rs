//! `hvsim image`: the local store of container images
//! (`hvsim_guest_image::oci`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_guest_image::oci::debian::{self, Built, DebianImage};
use hvsim_guest_image::oci::load::{load, Loaded};
use hvsim_guest_image::oci::pack::RunConfig;
use hvsim_guest_image::oci::store::{ImageRecord, Store};
use hvsim_guest_image::oci::Digest;
use serde::Serialize;
use serde_json::json;

use crate::util::{self, print_json};

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
        #[command(flatten)]
        out: util::Json,
    },
    /// List the images in the store.
    Ls {
        #[command(flatten)]
        out: util::Json,
    },
    /// Remove tags or images (by name, id or id prefix), and every layer no
    /// other image uses.
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
        #[command(flatten)]
        out: util::Json,
    },
    /// Show an image's config (entrypoint, cmd, env, working dir, user,
    /// ports) and its layers, as JSON (with or without --json).
    Inspect {
        name: String,
        #[command(flatten)]
        out: util::Json,
    },
    /// Make an image from Debian packages (with mmdebstrap; cached) and
    /// load it. `--redis` makes the test suite's Redis image.
    Debian {
        /// The image's name.
        #[arg(required_unless_present_any = ["redis", "python_antithesis"])]
        name: Option<String>,
        /// Packages to install (comma-separated).
        #[arg(long, value_delimiter = ',', required_unless_present_any = ["redis", "python_antithesis"])]
        packages: Vec<String>,
        #[arg(long, default_value = "bookworm")]
        suite: String,
        /// The image's command (split as a shell would). Default: `bash`.
        #[arg(long)]
        cmd: Option<String>,
        /// The test suite's image: bookworm with redis-server and redis-tools.
        #[arg(long, conflicts_with_all = ["name", "packages", "cmd", "python_antithesis"])]
        redis: bool,
        /// The test suite's image: bookworm's python3, the official
        /// Antithesis Python SDK from PyPI, and a program using it.
        #[arg(long, conflicts_with_all = ["name", "packages", "cmd"])]
        python_antithesis: bool,
        /// Also print where the docker-archive and OCI layout are.
        #[arg(long)]
        paths: bool,
        /// (The paths are always in the JSON.)
        #[command(flatten)]
        out: util::Json,
    },
}

/// An image as `load`, `ls` and `debian` describe it with --json.
#[derive(Serialize)]
struct ImageJson<'a> {
    id: &'a Digest,
    tags: &'a [String],
    layers: usize,
    unpacked_bytes: u64,
}

impl<'a> ImageJson<'a> {
    fn of(r: &'a ImageRecord, tags: &'a [String]) -> ImageJson<'a> {
        ImageJson { id: &r.id, tags, layers: r.layers.len(), unpacked_bytes: unpacked(r) }
    }
}

/// What `load --json` and `debian --json` print.
#[derive(Serialize)]
struct LoadedJson<'a> {
    loaded: Vec<ImageJson<'a>>,
    /// `debian`: the archive it loaded and its OCI layout.
    #[serde(flatten)]
    built: Option<BuiltJson<'a>>,
}

#[derive(Serialize)]
struct BuiltJson<'a> {
    archive: &'a std::path::Path,
    layout: &'a std::path::Path,
    /// Made before (mmdebstrap did not run).
    cached: bool,
}

impl<'a> LoadedJson<'a> {
    fn of(loaded: &'a [Loaded], built: Option<&'a Built>) -> LoadedJson<'a> {
        LoadedJson {
            loaded: loaded.iter().map(|l| ImageJson::of(&l.record, &l.tags)).collect(),
            built: built.map(|b| BuiltJson { archive: &b.archive, layout: &b.layout, cached: !b.built }),
        }
    }
}

/// What `rm --json` prints for each name.
#[derive(Serialize)]
struct RemovedJson {
    name: String,
    untagged: Vec<String>,
    /// The image deleted (null: it keeps other tags).
    deleted: Option<Digest>,
    freed_bytes: u64,
}

pub fn main(args: Args) -> Result<ExitCode> {
    let store = Store::open()?;
    match args.what {
        What::Load { source, tag, out } => {
            let loaded = load(&store, &source, tag.as_deref())?;
            if out.json {
                print_json(&LoadedJson::of(&loaded, None))?;
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
        What::Ls { out } => {
            let images = store.images()?;
            if out.json {
                let list: Vec<_> = images.iter().map(|(r, tags)| ImageJson::of(r, tags)).collect();
                print_json(&json!({ "store": store.dir(), "images": list }))?;
                return Ok(ExitCode::SUCCESS);
            }
            println!("{} images in {}", images.len(), store.dir().display());
            for (r, tags) in &images {
                let names = if tags.is_empty() { "(untagged)".to_owned() } else { tags.join(", ") };
                println!("  {}  {:>3} layers  {:>10}  {names}", r.id.short(), r.layers.len(), size(r));
            }
        }
        What::Rm { names, out } => {
            let mut removed = Vec::new();
            for name in names {
                let r = store.remove(&name)?;
                if out.json {
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
            if out.json {
                print_json(&json!({ "removed": removed }))?;
            }
        }
        // Its output is JSON with or without --json.
        What::Inspect { name, out: _ } => {
            let r = store.resolve(&name)?;
            let config = store.config(&r)?;
            let tags: Vec<String> =
                store.images()?.into_iter().find(|(i, _)| i.id == r.id).map(|(_, t)| t).unwrap_or_default();
            let c = config.config().clone().unwrap_or_default();
            let rootfs = hvsim_guest_image::oci::rootfs::path(&store, &r.id);
            let doc = json!({
                "id": r.id,
                "tags": tags,
                "source": r.source,
                "platform": format!("{}/{}", config.os(), config.architecture()),
                "created": config.created(),
                "config": {
                    "entrypoint": c.entrypoint(),
                    "cmd": c.cmd(),
                    "env": c.env(),
                    "working_dir": c.working_dir(),
                    "user": c.user(),
                    "exposed_ports": c.exposed_ports(),
                    "volumes": c.volumes(),
                    "stop_signal": c.stop_signal(),
                },
                "layers": r.layers,
                "unpacked_bytes": unpacked(&r),
                "rootfs": rootfs.exists().then_some(rootfs),
            });
            print_json(&doc)?;
        }
        What::Debian { name, packages, suite, cmd, redis, python_antithesis, paths, out } => {
            let image = if redis {
                debian::redis()
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
                    run: RunConfig { cmd: Some(cmd), ..RunConfig::default() },
                }
            };
            let built = image.build()?;
            let loaded = load(&store, &built.archive, None)?;
            if out.json {
                print_json(&LoadedJson::of(&loaded, Some(&built)))?;
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
