//! Progress on stderr, the same for every long operation (kernel build,
//! image import, boot, exploration): a bar or spinner on a terminal; where
//! stderr is not one (a CI log, `2> file`), a one-line status at most every
//! [`status_every`]; nothing with `-q`.
//!
//! `-q` is the one process-wide setting here: the command line sets it
//! once at startup ([`set_quiet`]), before any work, and nothing changes it
//! after; every crate's bars and notes read it, which passing it through
//! every call that might one day show progress would not improve.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, TermLike};

static QUIET: OnceLock<bool> = OnceLock::new();

/// `-q`: no progress and no notes, only warnings, errors and results.
/// The first call decides.
pub fn set_quiet(quiet: bool) {
    let _ = QUIET.set(quiet);
}

pub fn quiet() -> bool {
    QUIET.get().copied().unwrap_or(false)
}

/// A note on stderr that a person watching wants and a log can do without
/// (`building the guest kernel`); silent with `-q`.
pub fn note(args: fmt::Arguments) {
    if !quiet() {
        eprintln!("{args}");
    }
}

/// `note!("...", ...)`: [`note`] with `format!`'s arguments.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => { $crate::progress::note(format_args!($($arg)*)) };
}

/// How often the status line is printed where stderr is not a terminal:
/// `HVSIM_STATUS_EVERY` seconds, 30 by default.
pub fn status_every() -> Duration {
    let secs = std::env::var("HVSIM_STATUS_EVERY").ok().and_then(|s| s.trim().parse::<f64>().ok());
    Duration::from_secs_f64(secs.filter(|s| s.is_finite() && *s > 0.0).unwrap_or(30.0))
}

/// Where bars draw (see the module's comment).
pub fn target() -> ProgressDrawTarget {
    if quiet() {
        ProgressDrawTarget::hidden()
    } else if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::term_like(Box::new(StatusLines::new(status_every())))
    }
}

/// A bar of `len` steps, drawing to [`target`].
pub fn bar(len: u64) -> ProgressBar {
    ProgressBar::with_draw_target(Some(len), target())
}

/// A spinner, drawing to [`target`].
pub fn spinner() -> ProgressBar {
    ProgressBar::with_draw_target(None, target())
}

/// A "terminal" that prints each frame indicatif draws as one plain line
/// on stderr, at most once per `every`, the first after `every`: what ends
/// sooner (or fails at once, with its one-line error) prints no status.
#[derive(Debug)]
struct StatusLines {
    every: Duration,
    state: Mutex<Frames>,
}

#[derive(Debug)]
struct Frames {
    /// The frame being drawn.
    frame: Vec<String>,
    /// When the last status line was printed (at first: when it began).
    last: Instant,
}

impl StatusLines {
    fn new(every: Duration) -> StatusLines {
        StatusLines { every, state: Mutex::new(Frames { frame: Vec::new(), last: Instant::now() }) }
    }

    fn frames(&self) -> std::sync::MutexGuard<'_, Frames> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `s` without terminal escape sequences or other control characters,
/// trimmed.
fn plain(s: &str) -> String {
    console::strip_ansi_codes(s).chars().filter(|c| !c.is_control()).collect::<String>().trim().to_owned()
}

impl TermLike for StatusLines {
    fn width(&self) -> u16 {
        // Wide: a status line is one line of a log, not a screen's row.
        400
    }

    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        // indicatif goes back up to draw the next frame over this one.
        self.frames().frame.clear();
        Ok(())
    }

    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.write_str(s)
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        let s = plain(s);
        if !s.is_empty() {
            self.frames().frame.push(s);
        }
        Ok(())
    }

    fn clear_line(&self) -> std::io::Result<()> {
        // Only ever done to erase the last frame before the next.
        self.frames().frame.clear();
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut f = self.frames();
        if f.frame.is_empty() || f.last.elapsed() < self.every {
            return Ok(());
        }
        let line = f.frame.join(" | ");
        f.last = Instant::now();
        f.frame.clear();
        let mut err = std::io::stderr().lock();
        writeln!(err, "{line}")?;
        err.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_are_dropped() {
        assert_eq!(plain("\u{1b}[32mhvsim\u{1b}[0m: 3/10 \u{1b}[2K"), "hvsim: 3/10");
    }

    #[test]
    fn frames_print_at_most_once_per_interval() {
        let t = StatusLines::new(Duration::from_millis(50));
        t.write_line("first").unwrap();
        t.flush().unwrap();
        assert_eq!(t.frames().frame, vec!["first".to_owned()], "held back within the first interval");
        std::thread::sleep(Duration::from_millis(60));
        t.move_cursor_up(1).unwrap();
        t.write_line("second").unwrap();
        t.flush().unwrap();
        assert!(t.frames().frame.is_empty(), "printed once the interval passed");
        t.write_line("third").unwrap();
        t.flush().unwrap();
        assert_eq!(t.frames().frame, vec!["third".to_owned()], "held back again");
    }
}
