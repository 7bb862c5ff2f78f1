//! `hvsim image`: the local store of container images
//! (`hvsim_guest_image::oci`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use hvsim_guest_image::oci::debian::{self, DebianImage};
use hvsim_guest_image::oci::load::load;
use hvsim_guest_image::oci::pack::RunConfig;
use hvsim_guest_image::oci::store::{ImageRecord, Store};
use serde_json::json;

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
    /// List the images in the store.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Remove tags or images (by name, id or id prefix), and every layer no
    /// other image uses.
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Show an image's config (entrypoint, cmd, env, working dir, user,
    /// ports) and its layers, as JSON.
    Inspect { name: String },
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
    },
}

pub fn main(args: Args) -> Result<ExitCode> {
    let store = Store::open()?;
    match args.what {
        What::Load { source, tag } => {
            for l in load(&store, &source, tag.as_deref())? {
                let names = if l.tags.is_empty() { "(untagged)".to_owned() } else { l.tags.join(", ") };
                println!(
                    "loaded {names}: id {}, {} layers, {}",
                    l.record.id.short(),
                    l.record.layers.len(),
                    size(&l.record)
                );
            }
        }
        What::Ls { json } => {
            let images = store.images()?;
            if json {
                let list: Vec<_> = images
                    .iter()
                    .map(|(r, tags)| json!({ "id": r.id, "tags": tags, "layers": r.layers.len(), "unpacked_bytes": unpacked(r) }))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&json!({ "store": store.dir(), "images": list }))?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("{} images in {}", images.len(), store.dir().display());
            for (r, tags) in &images {
                let names = if tags.is_empty() { "(untagged)".to_owned() } else { tags.join(", ") };
                println!("  {}  {:>3} layers  {:>10}  {names}", r.id.short(), r.layers.len(), size(r));
            }
        }
        What::Rm { names } => {
            for name in names {
                let r = store.remove(&name)?;
                for t in &r.untagged {
                    println!("untagged {t}");
                }
                if let Some(id) = r.deleted {
                    println!("deleted {id} ({:.1} MiB freed)", r.freed_bytes as f64 / (1 << 20) as f64);
                }
            }
        }
        What::Inspect { name } => {
            let r = store.resolve(&name)?;
            let config = store.config(&r)?;
            let tags: Vec<String> =
                store.images()?.into_iter().find(|(i, _)| i.id == r.id).map(|(_, t)| t).unwrap_or_default();
            let c = config.config().clone().unwrap_or_default();
            let rootfs = store.rootfs_path(&r.id);
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
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        What::Debian { name, packages, suite, cmd, redis, python_antithesis, paths } => {
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
            for l in load(&store, &built.archive, None)? {
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
