//! `hvsim debug`: a shell in a node at a moment of a bug's timeline.
//!
//! The bug's timeline is replayed to the moment (`--at -100ms`: that long
//! before the failure), exactly as `hvsim replay` would; from there each
//! line typed runs with `/bin/sh -c` on the chosen node or service (the
//! guest's init runs it: `guest-init/src/debug.rs`), and its output comes
//! back. Virtual time stands still while a person reads and types; a
//! command runs the whole machine, every node, until it ends (or
//! `--command-limit` of virtual time passes): so a lease or timeout in the
//! system expires only as far as the commands themselves take virtual
//! time, never because someone paused to think. From the first command on,
//! the run is no longer the timeline's: what is typed changes it.
//!
//! With `--json`, stdout is JSON Lines: one object per command run (its
//! output collected) and a last one when the session ends.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use hvsim_explorer::document::{Document, Tag};
use hvsim_explorer::StartOptions;
use hvsim_guest_image::host::Host;
use hvsim_vmm::{Machine, Stop, Vtime};
use schemars::JsonSchema;
use serde::Serialize;

use super::replay;
use crate::util;

#[derive(clap::Args)]
pub struct Args {
    /// A bug record written by `hvsim explore` or `hvsim minimize`.
    bug: PathBuf,
    /// The moment: `-DURATION`, that long before the failure (e.g.
    /// -100ms), or a virtual time from the run's start (e.g. 1.5s).
    #[arg(long, default_value = "-100ms", allow_hyphen_values = true)]
    at: String,
    /// Where commands run: a compose service's name, or a node's number.
    /// Default: the first node (in a machine without nodes, beside init).
    #[arg(long)]
    node: Option<String>,
    /// Virtual time one command may run the machine for, at most.
    #[arg(long, value_parser = util::parse_duration, default_value = "10s")]
    command_limit: Duration,
    /// Debug even if the world the record comes from differs from this one.
    #[arg(long)]
    force: bool,
    /// Run the bug's target to its root even where the root was saved.
    #[arg(long)]
    fresh_root: bool,
}

/// One line of `hvsim debug --json` (JSON Lines): a command run, or the
/// session's end.
#[derive(Serialize, JsonSchema)]
pub struct DebugLine<'a> {
    schema: Tag<DebugLine<'static>>,
    #[serde(flatten)]
    line: JsonLine<'a>,
}

impl Document for DebugLine<'_> {
    const NAME: &'static str = "debug-line";
    const SCHEMA: &'static str = "hvsim-debug-line-v1";
    const ABOUT: &'static str = "one line of `hvsim debug --json`: a command run, or the session's end";
}

#[derive(Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
enum JsonLine<'a> {
    Command(&'a Ran<'a>),
    End {
        bug: &'a str,
        node: u16,
        service: Option<&'a str>,
        /// The moment debugged and where the session ended, in virtual ns.
        from_vtime_ns: u64,
        vtime_ns: u64,
        commands: u64,
        /// The machine ended during the last command (how).
        machine_ended: Option<String>,
    },
}

/// One command run: what `--json` reports of it.
#[derive(Serialize, JsonSchema)]
struct Ran<'a> {
    command: &'a str,
    node: u16,
    /// The compose service the node runs, if any.
    service: Option<&'a str>,
    /// Its stdout and stderr as the guest relayed them, one line each.
    output: Vec<String>,
    /// Null when it still ran after --command-limit, or the machine ended.
    status: Option<u64>,
    still_running: bool,
    machine_ended: Option<String>,
    /// Virtual time when it ended (or was left), and how long it ran.
    vtime_ns: u64,
    elapsed_ns: u64,
}

fn print_line(line: JsonLine) -> Result<()> {
    util::print_json_line(&DebugLine { schema: Tag::new(), line })
}

/// The virtual time `--at` names, given the failure's.
fn moment(at: &str, failure_ns: u64) -> Result<Vtime> {
    let (before, text) = match at.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, at),
    };
    let d = util::parse_duration(text).map_err(|e| anyhow::anyhow!("--at {at}: {e}"))?;
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if before && ns > failure_ns {
        bail!("--at {at}: the failure was at {failure_ns} ns of virtual time, less than that from the start");
    }
    Ok(Vtime(if before { failure_ns - ns } else { ns }))
}

pub fn main(args: Args, json: bool) -> Result<ExitCode> {
    let host = Host::open()?;
    let opened = replay::open(&args.bug, &host, args.force, args.fresh_root)?;
    let record = &opened.record;
    let at = moment(&args.at, record.at.vtime_ns)?;
    let names: Vec<String> = record.target.containers().iter().map(|c| c.name.clone()).collect();
    let node: u16 = match &args.node {
        None => 0,
        Some(n) => match (names.iter().position(|s| s == n), n.parse::<u16>()) {
            (Some(i), _) => i as u16,
            (None, Ok(i)) if names.is_empty() || usize::from(i) < names.len() => i,
            _ => bail!("--node {n}: no such node or service (the target's: {})", names.join(", ")),
        },
    };
    let service = names.get(usize::from(node)).map(String::as_str);
    let label = service.map_or_else(|| format!("node {node}"), str::to_owned);
    hvsim_guest_image::note!("hvsim debug: replaying {} to virtual time {at}", record.id);
    let (outcome, mut m) = hvsim_explorer::replay::replay(
        record,
        &host,
        &StartOptions::default(),
        Some(at),
        opened.root.as_ref(),
        &mut (),
    )?;
    if m.now() < at || m.state().ended.is_some() {
        bail!(
            "the replay of {} stopped at virtual time {}, short of {at} ({}): nothing to debug there",
            record.id,
            m.now(),
            outcome.observed.as_deref().unwrap_or("the timeline went elsewhere")
        );
    }
    eprintln!(
        "hvsim debug: {} ({}) at virtual time {} ({:?} before its failure), commands run in {label}.\n\
         From here the run is no longer deterministic: what you type changes it. Virtual time stands still \
         while you type; each command runs the whole machine until it ends (at most {:?} of virtual time). \
         `exit` or end of input leaves.",
        record.id,
        record.summary,
        m.now(),
        Duration::from_nanos(record.at.vtime_ns.saturating_sub(m.now().nanos())),
        args.command_limit,
    );
    let interactive = std::io::stdin().is_terminal();
    let from = m.now();
    let (mut commands, mut machine_ended) = (0, None);
    let mut lines = std::io::stdin().lock().lines();
    loop {
        if interactive {
            eprint!("debug {label} @ {:.6}s> ", m.now().nanos() as f64 / 1e9);
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next().transpose()? else { break };
        let command = line.trim();
        match command {
            "" => continue,
            "exit" | "quit" => break,
            _ => {}
        }
        let mut ran = run_command(&mut m, node, command, args.command_limit, !json)?;
        ran.service = service;
        commands += 1;
        if json {
            print_line(JsonLine::Command(&ran))?;
        }
        if ran.machine_ended.is_some() {
            machine_ended = ran.machine_ended;
            break;
        }
    }
    eprintln!("hvsim debug: session ended at virtual time {}", m.now());
    if json {
        print_line(JsonLine::End {
            bug: &record.id,
            node,
            service,
            from_vtime_ns: from.nanos(),
            vtime_ns: m.now().nanos(),
            commands,
            machine_ended,
        })?;
    }
    Ok(ExitCode::from(util::EXIT_OK))
}

/// Runs one command; its output is printed as it comes (`print`) or
/// collected into what it returns.
fn run_command<'a>(m: &mut Machine, node: u16, command: &'a str, limit: Duration, print: bool) -> Result<Ran<'a>> {
    let started = m.now();
    let mut output = Vec::new();
    let deadline = Vtime(started.nanos().saturating_add(u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX)));
    let prefix = format!("{}{node}]: ", hvsim_abi::linux::DEBUG_PREFIX);
    let mut told = m.console_complete_lines();
    let mut tell = |m: &Machine| {
        for (_, line) in m.console_lines_from(told) {
            if let Some(out) = String::from_utf8_lossy(&line).strip_prefix(&prefix) {
                if print {
                    println!("{out}");
                } else {
                    output.push(out.to_owned());
                }
            }
        }
        told = m.console_complete_lines();
        let _ = std::io::stdout().flush();
    };
    m.debug_command(node, command)?;
    m.set_stop_on_message(true);
    m.take_messages();
    let (status, still_running, machine_ended) = loop {
        let stop = m.run_until(deadline)?;
        tell(m);
        match stop {
            Stop::Message => {
                let done = m.take_messages().iter().find_map(|msg| debug_status(&msg.bytes));
                if let Some(status) = done {
                    eprintln!(
                        "[exit status {status}; virtual time {}, +{}]",
                        m.now(),
                        Vtime(m.now().nanos() - started.nanos())
                    );
                    break (Some(status), false, None);
                }
            }
            Stop::Deadline => {
                eprintln!("[still running after {limit:?} of virtual time: it goes on in the guest]");
                break (None, true, None);
            }
            Stop::Ended(end) => {
                eprintln!("[the machine ended: {}]", end.detail());
                break (None, false, Some(end.detail()));
            }
        }
    };
    Ok(Ran {
        command,
        node,
        service: None,
        output,
        status,
        still_running,
        machine_ended,
        vtime_ns: m.now().nanos(),
        elapsed_ns: m.now().nanos() - started.nanos(),
    })
}

/// The exit status in init's `{"hvsim_debug": {...}}`, if `bytes` is one.
fn debug_status(bytes: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    v.get("hvsim_debug")?.get("status")?.as_u64()
}
