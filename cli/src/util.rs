//! Small pieces shared by the subcommands.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hvsim_explorer::document::{self, Document};

/// The run completed normally: exit status 0, or the virtual-time limit.
pub const EXIT_OK: u8 = 0;
/// hvsim itself failed (bad input, no KVM, I/O error).
pub const EXIT_ERROR: u8 = 1;
/// The command line was wrong (unknown flag, bad value).
pub const EXIT_USAGE: u8 = 2;
/// The guest powered off with a non-zero status.
pub const EXIT_GUEST_STATUS: u8 = 3;
/// The run ended abnormally (guest error or panic, triple fault, KVM error...).
pub const EXIT_ABNORMAL: u8 = 4;
/// `hvsim replay BUG`: the bug did not reproduce.
pub const EXIT_NOT_REPRODUCED: u8 = 5;
/// `hvsim check`: the history is not linearizable.
pub const EXIT_NOT_LINEARIZABLE: u8 = 6;
/// `hvsim check`: undecided (the search reached its step limit).
pub const EXIT_UNDECIDED: u8 = 7;
/// `hvsim explore`: at least one bug was found (interrupted or not).
pub const EXIT_BUGS: u8 = 8;
/// `hvsim explore`: interrupted (SIGINT, SIGTERM) before its budget was
/// spent, without a bug.
pub const EXIT_INTERRUPTED: u8 = 9;
/// `hvsim explore --fail-on-unmet`: no bug, but a property was never
/// satisfied or never reached.
pub const EXIT_UNMET: u8 = 10;

/// Panics are bugs in hvsim; report them on one line, never with a backtrace.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("hvsim: internal error (a bug in hvsim, please report it): {msg}{at}");
    }));
}

/// Parses a seed: decimal or 0x-prefixed hex.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("seeds are 0 to {}, decimal or 0x hex", u64::MAX))
}

/// The longest duration any option takes: virtual time beyond it is
/// centuries of wall time for a busy guest, not a test.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a duration like `1h`, `250ms`, `3600s`: 0 to 365 days.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let range = "durations are 0s to 365d (e.g. 500ms, 10s, 1h)";
    let d = humantime::parse_duration(s).map_err(|e| format!("{e}; {range}"))?;
    if d > MAX_DURATION {
        return Err(range.into());
    }
    Ok(d)
}

/// Parses a size like `128M`, `1G`, `4096` (bytes), `512K`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let n = hvsim_vmm::faults::parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("`{s}` is too large"))
}

/// Prints `doc` on stdout as hvsim writes every JSON document
/// (`hvsim_explorer::document::json`: pretty, and checked against its
/// schema under `HVSIM_SCHEMA_CHECK=1`): what a command prints for the
/// global `--json`.
pub fn print_json<D: Document>(doc: &D) -> Result<()> {
    let bytes = document::json(doc).context("cannot print the result as JSON")?;
    print_bytes(&bytes)
}

/// Prints `doc` as one line of JSON Lines, at once (a command that prints
/// as it goes, such as `hvsim debug`); checked as [`print_json`] is.
pub fn print_json_line<D: Document>(doc: &D) -> Result<()> {
    let bytes = document::json_line(doc).context("cannot print a line of JSON")?;
    print_bytes(&bytes)
}

/// `bytes` and a newline on stdout, at once. A reader that went away (`|
/// head`) is no error: what it wanted, it read.
fn print_bytes(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("cannot write to stdout"),
        _ => Ok(()),
    }
}

/// A file that appears at `path` only when complete: written to a temporary
/// file in the same directory, renamed on [`AtomicFile::commit`].
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
}

impl AtomicFile {
    /// Refused at once if `path` is a directory: the run would otherwise
    /// fail only at its end, when the file is published.
    pub fn create(path: &Path) -> Result<AtomicFile> {
        if path.is_dir() {
            anyhow::bail!("cannot write {}: it is a directory", path.display());
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(".hvsim-")
            .tempfile_in(dir)
            .with_context(|| format!("cannot create a file in {}", dir.display()))?;
        Ok(AtomicFile { tmp, path: path.to_owned() })
    }

    pub fn tmp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// Publishes the file, readable by all as a file written with
    /// `std::fs::write` would be (temporary files are private).
    pub fn commit(self) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(self.tmp.path(), std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        // The persist error's text is its I/O error's: report that once.
        self.tmp
            .persist(&self.path)
            .map_err(|e| e.error)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds() {
        assert_eq!(parse_seed("42"), Ok(42));
        assert_eq!(parse_seed("0xff"), Ok(255));
        assert!(parse_seed("-1").is_err());
        assert!(parse_seed("banana").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("128M"), Ok(128 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert!(parse_size("12X").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn atomic_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let f = AtomicFile::create(&path).unwrap();
        std::fs::write(f.tmp_path(), b"x").unwrap();
        assert!(!path.exists());
        f.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
    }
}

/// A machine's exits per second of wall time, between one count and the
/// next: its activity, where virtual time may hardly move.
#[derive(Debug, Default)]
pub struct ExitRate {
    last: Option<(Instant, u64)>,
}

impl ExitRate {
    /// Takes `exits` (the machine's count now); the rate since the last
    /// count, if there was one.
    pub fn update(&mut self, exits: u64) -> Option<f64> {
        let now = Instant::now();
        let rate = self.last.map(|(then, before)| {
            exits.saturating_sub(before) as f64 / now.duration_since(then).as_secs_f64().max(1e-3)
        });
        self.last = Some((now, exits));
        rate
    }
}

/// A column of [`print_table`]: its header, and whether its cells are
/// numbers (right-aligned).
pub struct Column(pub &'static str, pub bool);

/// Prints `rows` under `columns`' headers, indented two spaces, cells
/// padded to their column's widest and separated by ` | `: how every
/// listing (`hvsim cache ls`, `hvsim image ls`) shows its table. The
/// last column is not padded. Nothing for no rows.
pub fn print_table(columns: &[Column], rows: &[Vec<String>]) {
    if rows.is_empty() {
        return;
    }
    assert!(rows.iter().all(|r| r.len() == columns.len()), "a row per column");
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).chain([columns[i].0.len()]).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let last = cells.len() - 1;
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| match (i == last, columns[i].1) {
                (true, _) => (*c).to_owned(),
                (false, true) => format!("{c:>w$}", w = widths[i]),
                (false, false) => format!("{c:<w$}", w = widths[i]),
            })
            .collect();
        println!("  {}", padded.join(" | "));
    };
    line(columns.iter().map(|c| c.0).collect());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}
