//! The agent skills in docs/agents/ and the plan they fill in for
//! examples/compose/redis-set run as written: every command in their
//! `sh hvsim` blocks here, those in `sh hvsim-slow` blocks too under
//! `ci/test.sh --slow`; every flag any of them uses is in
//! `hvsim <command> --help`; the skills name every claim verdict and blame
//! class; the plan follows the template and names its manifest's claims.
//! So an agent following a skill literally runs today's CLI.
//!
//! A block's commands run one by one with bash, in order, from a scratch
//! directory that holds `docs` and `examples` (links into the repository)
//! and whose `hvsim` is the binary under test. `# exit: N` before a
//! command is its expected exit status (default 0).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::{documents, files_under, kvm_available, linux_available, Helps};
use hvsim_explorer::claims::{Blame, ClaimVerdict};
use hvsim_explorer::manifest::Manifest;
use sha2::{Digest, Sha256};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The files whose commands run, in the order they run, in one scratch
/// directory: the run skill's Redis commands triage the bug the plan's
/// exploration finds.
const FILES: [&str; 5] = [
    "docs/agents/README.md",
    "docs/agents/design-test-plan/SKILL.md",
    "docs/agents/plan-template.md",
    "examples/compose/redis-set/PLAN.md",
    "docs/agents/run-test-plan/SKILL.md",
];

const SKILLS: [&str; 2] = ["docs/agents/design-test-plan/SKILL.md", "docs/agents/run-test-plan/SKILL.md"];

fn read(file: &str) -> String {
    let path = Path::new(ROOT).join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One command of a block, as an agent would type it.
#[derive(Debug)]
struct Cmd {
    file: &'static str,
    line: usize,
    text: String,
    exit: i32,
    slow: bool,
}

impl Cmd {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// The commands of `file`'s `sh hvsim` and `sh hvsim-slow` blocks, in
/// order. A line ending in `\` continues on the next; `#` lines are
/// comments, `# exit: N` gives the next command's exit status.
fn commands(file: &'static str) -> Vec<Cmd> {
    let text = read(file);
    let mut cmds = Vec::new();
    // Inside a fence: Some(Some(slow)) for a command block, Some(None) for another.
    let mut fence: Option<Option<bool>> = None;
    let mut exit: Option<i32> = None;
    let mut open: Option<Cmd> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        let Some(kind) = fence else {
            if let Some(info) = t.strip_prefix("```") {
                fence = Some(match info.trim() {
                    "sh hvsim" => Some(false),
                    "sh hvsim-slow" => Some(true),
                    _ => None,
                });
            }
            continue;
        };
        if t == "```" {
            assert!(open.is_none(), "{file}:{}: a block ends inside a command", i + 1);
            assert!(exit.is_none(), "{file}:{}: `# exit:` with no command after it", i + 1);
            fence = None;
            continue;
        }
        let Some(slow) = kind else { continue };
        if let Some(mut cmd) = open.take() {
            cmd.text.push('\n');
            cmd.text.push_str(line);
            if line.ends_with('\\') {
                open = Some(cmd);
            } else {
                cmds.push(cmd);
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        if let Some(n) = t.strip_prefix("# exit:") {
            exit = Some(n.trim().parse().unwrap_or_else(|e| panic!("{file}:{}: {t}: {e}", i + 1)));
            continue;
        }
        if t.starts_with('#') {
            continue;
        }
        let cmd = Cmd { file, line: i + 1, text: line.to_owned(), exit: exit.take().unwrap_or(0), slow };
        if line.ends_with('\\') {
            open = Some(cmd);
        } else {
            cmds.push(cmd);
        }
    }
    assert!(fence.is_none(), "{file}: a fence is never closed");
    cmds
}

fn all_commands() -> Vec<Cmd> {
    FILES.iter().flat_map(|f| commands(f)).collect()
}

/// Every Markdown file under docs/agents/ is one of FILES, so a new skill
/// cannot escape the test.
#[test]
fn every_skill_file_is_run() {
    let found = files_under(&Path::new(ROOT).join("docs/agents"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(ROOT).unwrap().to_string_lossy().into_owned());
    for f in found {
        assert!(FILES.contains(&f.as_str()), "{f} is not in FILES: its commands would never run");
    }
    for (file, least) in [(SKILLS[0], 3), (SKILLS[1], 6), ("examples/compose/redis-set/PLAN.md", 3)] {
        let n = commands(file).len();
        assert!(n >= least, "{file}: {n} commands in `sh hvsim` blocks; expected at least {least}");
    }
}

/// The words of a command line, split as a shell would, and cut at its
/// operators: the pipeline's and list's simple commands.
fn simple_commands(text: &str) -> Vec<Vec<String>> {
    let words = shell_words::split(&text.replace("\\\n", " ")).unwrap_or_else(|e| panic!("{text}: {e}"));
    let mut out = vec![Vec::new()];
    for w in words {
        if ["|", "||", "&&", ";"].contains(&w.as_str()) {
            out.push(Vec::new());
        } else {
            out.last_mut().unwrap().push(w);
        }
    }
    out.retain(|c| !c.is_empty());
    out
}

/// Every `hvsim` invocation of every block (the slow ones too, which this
/// suite does not run) names a subcommand that exists and only flags its
/// `--help` shows; and a quick block needs no Linux guest.
#[test]
fn every_flag_the_commands_use_is_in_the_help() {
    let mut helps = Helps::default();
    let mut checked = 0;
    for cmd in all_commands() {
        for words in simple_commands(&cmd.text) {
            if words[0] != "hvsim" {
                continue;
            }
            checked += 1;
            let path = helps.subcommand_path(&words[1..]);
            assert!(!path.is_empty(), "{}: `{}` names no subcommand", cmd.at(), cmd.text);
            let text = helps.of(&path);
            for w in &words[1..] {
                // `--at -100ms`: a value, not a flag.
                let flag = w.split('=').next().unwrap();
                if !flag.starts_with('-') || flag[1..].starts_with(|c: char| c.is_ascii_digit()) {
                    continue;
                }
                assert!(
                    documents(&text, flag),
                    "{}: `hvsim {}` has no {flag} (in `{}`); see `hvsim {} --help`",
                    cmd.at(),
                    path.join(" "),
                    cmd.text,
                    path.join(" ")
                );
            }
            if !cmd.slow {
                let linux = path[0] == "image"
                    || words.iter().any(|w| ["--compose", "--linux", "--image", "--guest-file"].contains(&w.as_str()));
                assert!(!linux, "{}: `{}` needs a Linux guest: put it in a `sh hvsim-slow` block", cmd.at(), cmd.text);
            }
        }
    }
    assert!(checked >= 15, "only {checked} hvsim commands found");
}

/// Every verdict, in a match that must list them all: a verdict added to
/// hvsim does not compile here until it is listed, and the skills name it.
fn verdicts() -> Vec<&'static str> {
    use ClaimVerdict::*;
    let all = [
        Pass,
        FailReproducible,
        FailFlaky,
        FailUnconfirmed,
        InconclusiveFaultsNotLanded,
        InconclusiveNeverReached,
        InconclusiveChecker,
        HarnessError,
    ];
    for (i, v) in all.iter().enumerate() {
        let listed = match v {
            Pass => 0,
            FailReproducible => 1,
            FailFlaky => 2,
            FailUnconfirmed => 3,
            InconclusiveFaultsNotLanded => 4,
            InconclusiveNeverReached => 5,
            InconclusiveChecker => 6,
            HarnessError => 7,
        };
        assert_eq!(listed, i);
    }
    all.map(ClaimVerdict::name).to_vec()
}

/// Every blame class, likewise.
fn blames() -> Vec<&'static str> {
    use Blame::*;
    let all = [System, Harness, Checker, Environment];
    for (i, b) in all.iter().enumerate() {
        let listed = match b {
            System => 0,
            Harness => 1,
            Checker => 2,
            Environment => 3,
        };
        assert_eq!(listed, i);
    }
    all.map(Blame::name).to_vec()
}

#[test]
fn the_skills_name_every_verdict_and_blame_class() {
    for file in [SKILLS[0], SKILLS[1], "docs/agents/plan-template.md"] {
        let text = read(file);
        for name in verdicts().into_iter().chain(blames()) {
            assert!(text.contains(&format!("`{name}`")), "{file} never names `{name}`");
        }
    }
}

/// Each skill has the front matter Claude Code reads: its folder's name
/// and a description.
#[test]
fn each_skill_has_a_name_and_a_description() {
    for file in SKILLS {
        let text = read(file);
        let front = text.strip_prefix("---\n").and_then(|t| t.split_once("\n---\n")).map(|(f, _)| f);
        let front = front.unwrap_or_else(|| panic!("{file}: no YAML front matter"));
        let field = |key: &str| front.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
        let folder = Path::new(file).parent().unwrap().file_name().unwrap().to_str().unwrap();
        assert_eq!(field("name:"), Some(folder), "{file}");
        // Claude Code's limits: a name of lowercase letters, digits and
        // hyphens; a description of at most 1024 characters, a plain YAML
        // scalar (": " or " #" would end it early).
        assert!(folder.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{file}");
        let description = field("description:").unwrap_or_else(|| panic!("{file}: no description"));
        assert!((50..=1024).contains(&description.len()), "{file}: description of {} characters", description.len());
        assert!(!description.contains(": ") && !description.contains(" #"), "{file}: quote the description");
    }
}

/// The plan has the template's sections, in order, and names every claim
/// of its manifest; the manifests the files use load; and every bug id the
/// files name is the content id of a failure they describe.
#[test]
fn the_plan_follows_the_template_and_names_its_manifests_claims() {
    let headings =
        |file: &str| -> Vec<String> { read(file).lines().filter(|l| l.starts_with("## ")).map(String::from).collect() };
    assert_eq!(headings("examples/compose/redis-set/PLAN.md"), headings("docs/agents/plan-template.md"));
    let plan = read("examples/compose/redis-set/PLAN.md");
    let m = Manifest::load(&Path::new(ROOT).join("examples/compose/redis-set/hvsim.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!m.claims.is_empty(), "the redis-set manifest states no claim");
    for c in &m.claims {
        assert!(plan.contains(&format!("`{}`", c.id)), "examples/compose/redis-set/PLAN.md never names `{}`", c.id);
    }
    let demo = Manifest::load(&Path::new(ROOT).join("docs/agents/demo/hvsim.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(demo.claims.len(), 1, "docs/agents/demo/hvsim.toml");
    // A bug's id: BUG- and 12 hex digits of the SHA-256 of its signature.
    let id = |signature: &str| format!("BUG-{}", &hex::encode(Sha256::digest(signature))[..12]);
    let known: BTreeSet<String> = ["checker:set", "assertion:the vault stays closed"].iter().map(|s| id(s)).collect();
    for file in FILES {
        let text = read(file);
        for (i, _) in text.match_indices("BUG-") {
            let hex: String = text[i + 4..].chars().take_while(char::is_ascii_hexdigit).collect();
            if hex.len() == 12 {
                assert!(known.contains(&format!("BUG-{hex}")), "{file}: BUG-{hex} is no failure's id here: {known:?}");
            }
        }
    }
}

/// A scratch directory to run commands in: `docs` and `examples` link to
/// the repository's (so the commands' relative paths resolve, and what
/// they write stays here), and `.bin/hvsim` is the binary under test.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["docs", "examples"] {
        std::os::unix::fs::symlink(Path::new(ROOT).join(name), dir.path().join(name)).unwrap();
    }
    std::fs::create_dir(dir.path().join(".bin")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hvsim"), dir.path().join(".bin/hvsim")).unwrap();
    dir
}

/// The last `n` lines of `bytes`.
fn tail(bytes: &[u8], n: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `cmds` in order in `dir`, each with bash, and checks each one's
/// exit status.
fn run_all(cmds: &[Cmd], dir: &Path) {
    let path = format!("{}:{}", dir.join(".bin").display(), std::env::var("PATH").unwrap_or_default());
    for cmd in cmds {
        eprintln!("{}: {}", cmd.at(), cmd.text);
        let started = std::time::Instant::now();
        let o = Command::new("bash")
            .arg("-c")
            .arg(&cmd.text)
            .current_dir(dir)
            .env("PATH", &path)
            .env(common::SCHEMA_CHECK, "1")
            .output()
            .expect("bash runs");
        eprintln!("  exit {:?} in {:.1?}", o.status.code(), started.elapsed());
        assert_eq!(
            o.status.code(),
            Some(cmd.exit),
            "{}: `{}` (expected exit {})\n--- stdout (end)\n{}\n--- stderr (end)\n{}",
            cmd.at(),
            cmd.text,
            cmd.exit,
            tail(&o.stdout, 40),
            tail(&o.stderr, 40)
        );
    }
}

/// The quick blocks, on the built-in demo and without a guest: seconds.
#[test]
fn the_quick_commands_run_as_written() {
    if !kvm_available() {
        return;
    }
    let cmds: Vec<Cmd> = all_commands().into_iter().filter(|c| !c.slow).collect();
    let dir = scratch();
    run_all(&cmds, dir.path());
}

/// Every block, the slow ones included, in order: the Redis image, the
/// plan's exploration finding its bug, and its triage and fix. About 40
/// minutes on the nested development host.
#[test]
#[ignore = "slow: the skills' and plan's Linux commands take about 40 minutes here (ci/test.sh --slow)"]
fn every_command_runs_as_written() {
    if !linux_available() {
        return;
    }
    let dir = scratch();
    run_all(&all_commands(), dir.path());
}
