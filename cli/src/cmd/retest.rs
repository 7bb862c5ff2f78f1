//! `hvsim retest`: run a bug's decisions on the build it was found on and
//! on a changed one, and compare how often it fails
//! (`hvsim_explorer::retest`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use hvsim_explorer::document::{Document, Tag};
use hvsim_explorer::retest;
use hvsim_explorer::{ExploreConfig, StartOptions, Target};
use hvsim_guest_image::hash::file_hash;
use hvsim_guest_image::host::Host;
use hvsim_guest_image::linux::GuestFile;
use hvsim_guest_image::oci::registry::{Access, PullPolicy};
use schemars::JsonSchema;
use serde::Serialize;

use super::replay;
use crate::{linux_args, util};

#[derive(clap::Args)]
pub struct Args {
    /// A bug record written by `hvsim explore` or `hvsim minimize`.
    bug: PathBuf,
    /// The changed build: a host file to copy into the guest in place of
    /// the one at GUEST (or in addition), repeatable.
    #[arg(long, value_name = "HOST:GUEST", value_parser = GuestFile::parse)]
    guest_file: Vec<GuestFile>,
    /// The changed build: this compose project instead (its images from
    /// the store; the record's fault plan and disk size kept).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["image", "k8s"])]
    compose: Option<PathBuf>,
    /// The changed build: these Kubernetes manifests instead (files or
    /// directories; the record's fault plan and disk size kept).
    #[arg(long, value_name = "PATH", num_args = 1.., conflicts_with = "image")]
    k8s: Vec<PathBuf>,
    /// The changed build: this image instead, for a target of one image
    /// (`--image`); its own command.
    #[arg(long, value_name = "NAME")]
    image: Option<String>,
    /// Fresh runs on each build, besides the bug's own decisions.
    #[arg(long, default_value = "8", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    runs: u32,
    /// Retest even if the world the record comes from differs from this one.
    #[arg(long)]
    force: bool,
}

/// The record's target with the changes `args` asks for.
fn changed(before: &Target, args: &Args) -> Result<Target> {
    let mut after = before.clone();
    let Target::Linux { files, system, .. } = &mut after else {
        bail!("a built-in guest cannot be changed: retest needs a Linux target (--linux, --image, --compose, --k8s)");
    };
    for f in &args.guest_file {
        let hash = file_hash(&f.host).with_context(|| format!("--guest-file {}", f.host.display()))?;
        files.retain(|(old, _)| old.guest != f.guest);
        files.push((f.clone(), hash));
    }
    let (pull, access) = (PullPolicy::Missing, Access::from_env());
    if let Some(file) = &args.compose {
        *system = linux_args::compose_system(file, &[], system.disk_bytes, system.fault_plan.clone(), pull, &access)?;
    }
    if !args.k8s.is_empty() {
        *system = linux_args::k8s_system(&args.k8s, system.disk_bytes, system.fault_plan.clone(), pull, &access)?;
    }
    if let Some(image) = &args.image {
        if system.containers.len() != 1 {
            bail!("--image {image}: the bug's target runs {} containers, not one image", system.containers.len());
        }
        *system = crate::linux_args::image_system(image, None, system.disk_bytes, system.fault_plan.clone())?;
    }
    if after == *before {
        bail!("nothing changed: give the changed build (--guest-file, --compose, --k8s or --image)");
    }
    Ok(after)
}

/// What `hvsim retest --json` prints: how often each build failed, and
/// whether the change fixed the bug.
#[derive(Serialize, JsonSchema)]
pub struct RetestReport {
    schema: Tag<RetestReport>,
    retest: retest::Retest,
    /// No run of the changed build failed.
    fixed: bool,
}

impl Document for RetestReport {
    const NAME: &'static str = "retest";
    const SCHEMA: &'static str = "hvsim-retest-v1";
    const ABOUT: &'static str = "a bug's decisions run on its build and a changed one: `hvsim retest --json`";
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let opened = replay::open(&args.bug, &host, args.force, true)?;
    let record = &opened.record;
    let after = changed(&record.target, &args)?;
    let spinner = hvsim_guest_image::progress::spinner();
    spinner.set_style(
        indicatif::ProgressStyle::with_template("hvsim: retest [{elapsed}] {spinner} {msg}").expect("valid template"),
    );
    spinner.enable_steady_tick(std::time::Duration::from_millis(500));
    let runs = args.runs;
    let mut progress =
        |build: &str, k: u32| spinner.set_message(format!("{build} the change: run {k} of {}", runs + 1));
    let how = retest::Runs {
        host: &host,
        start: &StartOptions::default(),
        setup_limit: ExploreConfig::default_setup_limit(true),
        fresh: args.runs,
    };
    let result = retest::retest(record, &record.target, &after, &how, &mut progress);
    spinner.finish_and_clear();
    let r = result?;
    if json {
        util::print_json(&RetestReport { schema: Tag::new(), fixed: r.fixed(), retest: r.clone() })?;
    } else {
        println!(
            "{}: {}\n  before the change: {}\n  after the change:  {}\n  ({} to {} fresh runs failing)",
            r.bug,
            if r.fixed() { "no run of the changed build failed" } else { "the changed build still fails" },
            r.before.describe(),
            r.after.describe(),
            format_args!("{}/{}", r.before.hits, r.before.runs),
            format_args!("{}/{}", r.after.hits, r.after.runs),
        );
    }
    Ok(ExitCode::from(if r.fixed() { util::EXIT_OK } else { util::EXIT_BUGS }))
}
