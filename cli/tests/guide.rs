//! docs/getting-started.md and the README run as written and show what
//! their commands really print.
//!
//! Their `console` blocks are the commands: each `$ ` line (with
//! `\` continuations) runs with bash, in order, from one scratch directory
//! that holds `examples` (a link into the repository) and whose `hvsim` is
//! the binary under test. The lines after a command, up to the next `$ `,
//! are what it printed: each must be a line of its output (stdout or
//! stderr), where any run of digits stands for any other (times, sizes
//! and dates differ from run to run; a bug's id does not, and its hex
//! letters still must match) and `…` for any text (a path under the
//! user's home); a line that is only `…` stands for lines left out.
//! `$ echo $?` checks the previous command's exit status against the line
//! after it; any other command must exit 0.
//!
//! Running the guide takes about seven minutes here (two compose projects'
//! roots and explorations, a confirmation and a replay), so it is in the
//! slow suite (`ci/test.sh --slow`); the default suite checks that every
//! command names a subcommand and flags `hvsim --help` shows, and runs the
//! README's block (the main job on the demo, and the replay of its bug), so
//! that what the README shows cannot go stale.

mod common;

use std::path::Path;
use std::process::Command;

use common::{documents, kvm_available, linux_available, Helps};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
const GUIDE: &str = "docs/getting-started.md";

/// One command of the guide and what the guide shows it printing.
#[derive(Debug)]
struct Step {
    line: usize,
    command: String,
    shown: Vec<String>,
}

/// A document's commands, in order.
fn steps(text: &str, doc: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_console = false;
    let mut continued = false;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```") {
            in_console = !in_console && info.trim() == "console";
            continued = false;
            continue;
        }
        if !in_console {
            continue;
        }
        if continued {
            let step = steps.last_mut().expect("a continuation follows a command");
            step.command.push('\n');
            step.command.push_str(line);
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step { line: i + 1, command: command.to_owned(), shown: Vec::new() });
        } else {
            let step = steps.last_mut().unwrap_or_else(|| panic!("{doc}:{}: output before any command", i + 1));
            if !line.trim().is_empty() {
                step.shown.push(line.trim().to_owned());
            }
            continue;
        }
        continued = line.ends_with('\\');
    }
    assert!(!in_console, "{doc}: a console block is never closed");
    steps
}

/// Whether `line` of real output is `shown`, where any run of digits in
/// either stands for any other and `…` in `shown` for any text.
fn matches(shown: &str, line: &str) -> bool {
    let squash = |s: &str| -> String {
        let mut out = String::with_capacity(s.len());
        for c in s.trim().chars() {
            if c.is_ascii_digit() {
                if !out.ends_with('#') {
                    out.push('#');
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    let line = squash(line);
    let shown = squash(shown);
    let mut parts = shown.split('…');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else { return rest.is_empty() };
    for part in parts {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[test]
fn the_comparison_frees_digits_and_elisions_and_nothing_else() {
    assert!(matches("explored 6 branches in 41.2s", "explored 6 branches in 9.0s"));
    assert!(matches("out/20261129T164123Z-x/report.html", "out/20251101T000000Z-x/report.html"));
    assert!(matches("archive: …/redis.tar", "archive: /home/me/.cache/redis.tar"));
    assert!(matches("a … c … e", "a b c d e"));
    assert!(!matches("a … c … e", "a b d e"));
    assert!(!matches("archive: …/redis.tar", "archive: /home/me/.cache/redis.tar.partial"));
    assert!(!matches("BUG-8196b34867e0", "BUG-8196b34867ea"));
    assert!(!matches("1 bug(s)", "1 bugs"));
    assert!(!matches("reproduced", "did not reproduce"));
}

#[test]
fn the_guide_has_the_commands_it_walks_through() {
    let text = std::fs::read_to_string(Path::new(ROOT).join(GUIDE)).unwrap();
    let steps = steps(&text, GUIDE);
    for needed in ["hvsim image", "hvsim explore --compose", "hvsim replay"] {
        assert!(steps.iter().any(|s| s.command.starts_with(needed)), "{GUIDE} never runs `{needed}`");
    }
    for s in &steps {
        assert!(!s.shown.is_empty(), "{GUIDE}:{}: `{}` shows no output", s.line, s.command);
    }
}

/// Every `hvsim` command of the guide names a subcommand that exists and
/// only flags its `--help` shows.
#[test]
fn every_hvsim_command_of_the_guide_is_in_the_help() {
    let text = std::fs::read_to_string(Path::new(ROOT).join(GUIDE)).unwrap();
    let mut checked = 0;
    let mut helps = Helps::default();
    for step in steps(&text, GUIDE) {
        let words = shell_words::split(&step.command.replace("\\\n", " ")).unwrap();
        if words.first().map(String::as_str) != Some("hvsim") {
            continue;
        }
        let path = helps.subcommand_path(&words[1..]);
        let text = helps.of(&path);
        for flag in words[1..].iter().filter(|w| w.starts_with("--")) {
            let flag = flag.split('=').next().unwrap();
            assert!(documents(&text, flag), "{GUIDE}:{}: `hvsim {}` has no {flag}", step.line, path.join(" "));
        }
        checked += 1;
    }
    assert!(checked >= 3, "{GUIDE}: only {checked} hvsim commands");
}

/// Every command of the guide, run as a user would, with what it printed.
#[test]
#[ignore = "slow: two compose projects explored and a bug replayed take about seven minutes here (ci/test.sh --slow)"]
fn the_getting_started_guide_runs_as_written_and_prints_what_it_shows() {
    if !linux_available() {
        return;
    }
    run_document(GUIDE);
}

/// The README's main job and the replay of its bug, as the README shows
/// them.
#[test]
fn the_readme_shows_what_its_main_job_prints() {
    if !kvm_available() {
        return;
    }
    let text = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let commands: Vec<String> = steps(&text, "README.md").into_iter().map(|s| s.command).collect();
    assert!(commands.first().is_some_and(|c| c == "hvsim explore"), "the README shows the main job: {commands:?}");
    run_document("README.md");
}

/// Runs each command of `doc`'s console blocks, as a user would, and checks
/// it printed what the document shows.
fn run_document(doc: &str) {
    let text = std::fs::read_to_string(Path::new(ROOT).join(doc)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(Path::new(ROOT).join("examples"), dir.path().join("examples")).unwrap();
    std::fs::create_dir(dir.path().join(".bin")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hvsim"), dir.path().join(".bin/hvsim")).unwrap();
    let path = format!("{}:{}", dir.path().join(".bin").display(), std::env::var("PATH").unwrap_or_default());
    let mut last_status: Option<i32> = None;
    for step in steps(&text, doc) {
        let at = format!("{doc}:{}", step.line);
        if step.command == "echo $?" {
            let want = step.shown.first().unwrap_or_else(|| panic!("{at}: `echo $?` shows no status"));
            assert_eq!(last_status.map(|s| s.to_string()).as_deref(), Some(want.as_str()), "{at}: exit status");
            last_status = Some(0);
            continue;
        }
        if let Some(status) = last_status.filter(|&s| s != 0) {
            panic!("{at}: the command before exited {status}, and the guide does not show it with `echo $?`");
        }
        eprintln!("{at}: $ {}", step.command);
        let started = std::time::Instant::now();
        let o = Command::new("bash")
            .arg("-c")
            .arg(&step.command)
            .current_dir(dir.path())
            .env("PATH", &path)
            .env(common::SCHEMA_CHECK, "1")
            .output()
            .expect("bash runs");
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        eprintln!("  exit {:?} in {:.1?}", o.status.code(), started.elapsed());
        let printed: Vec<&str> = stdout.lines().chain(stderr.lines()).collect();
        for shown in step.shown.iter().filter(|l| *l != "…") {
            assert!(
                printed.iter().any(|l| matches(shown, l)),
                "{at}: `{}` did not print\n  {shown}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
                step.command
            );
        }
        last_status = o.status.code();
    }
    if let Some(status) = last_status.filter(|&s| s != 0) {
        panic!("{doc}: the last command exited {status}");
    }
}
