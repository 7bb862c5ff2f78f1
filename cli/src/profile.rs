//! `--profile-guest`: the options `run`, `replay` and `explore` share, and
//! what they write at the end (see `hvsim_vmm::profiler`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use hvsim_guest_image::linux;
use hvsim_vmm::profiler::report;
use hvsim_vmm::profiler::symbols::Symbols;
use hvsim_vmm::profiler::{GuestProfile, ProfilerConfig};

use crate::util::AtomicFile;

const DEFAULT_RATE: &str = "499";

#[derive(clap::Args, Clone, Debug)]
pub struct ProfileArgs {
    /// Sample the guest RATE times per second of wall time (default 499;
    /// at most 10000) and report where its time goes: PREFIX.folded,
    /// PREFIX.svg (a flame graph) and a top list on stderr. Sampling
    /// changes nothing the guest can see.
    #[arg(long, value_name = "RATE", num_args = 0..=1, default_missing_value = DEFAULT_RATE,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(ProfilerConfig::MAX_RATE_HZ)))]
    pub profile_guest: Option<u32>,
    /// Where --profile-guest writes: PREFIX.folded and PREFIX.svg.
    #[arg(long, value_name = "PREFIX", default_value = "hvsim-profile", requires = "profile_guest")]
    pub profile_out: PathBuf,
}

/// A profile being taken: how, and the kernel's symbols to name it with.
pub struct Profiling {
    pub config: ProfilerConfig,
    symbols: Option<Symbols>,
    out: PathBuf,
}

impl ProfileArgs {
    /// The profiler for a target (`linux`: hvsim's kernel, whose symbols
    /// name kernel frames and locate the running task), if asked for.
    pub fn start(&self, linux: bool) -> Result<Option<Profiling>> {
        let Some(rate_hz) = self.profile_guest else {
            return Ok(None);
        };
        let symbols = if linux {
            // The kernel the run boots, so that HVSIM_KERNEL is named right.
            let vmlinux = linux::vmlinux().context("cannot build the guest kernel")?;
            Some(Symbols::from_elf_file(&vmlinux)?)
        } else {
            None
        };
        let task = hvsim_vmm::guest_task::SYMBOL;
        if symbols.as_ref().is_some_and(|s| s.data(task).is_none()) {
            eprintln!("hvsim: warning: the guest kernel has no `{task}`: samples will not name their process");
        }
        Ok(Some(Profiling { config: ProfilerConfig { rate_hz }, symbols, out: self.profile_out.clone() }))
    }
}

impl Profiling {
    /// Writes the folded stacks and the flame graph, prints the top list.
    pub fn finish(&self, profile: &GuestProfile, title: &str) -> Result<()> {
        let folded = report::folded(profile, self.symbols.as_ref());
        let mut text = folded.join("\n");
        text.push('\n');
        let svg = report::flame_graph(&folded, title).map_err(anyhow::Error::msg)?;
        let folded_path = self.path("folded");
        let svg_path = self.path("svg");
        for (path, bytes) in [(&folded_path, text.as_bytes()), (&svg_path, &svg[..])] {
            let f = AtomicFile::create(path)?;
            std::fs::write(f.tmp_path(), bytes).with_context(|| format!("cannot write {}", path.display()))?;
            f.commit()?;
        }
        for line in report::top(profile, self.symbols.as_ref(), self.config.rate_hz, 8).lines() {
            eprintln!("hvsim: {line}");
        }
        eprintln!("hvsim: profile written to {} and {}", folded_path.display(), svg_path.display());
        Ok(())
    }

    fn path(&self, ext: &str) -> PathBuf {
        let mut name = self.out.clone().into_os_string();
        name.push(".");
        name.push(ext);
        name.into()
    }
}
