//! A compose project's services as guest init tells of them on the console
//! (guest-init/src/container/mod.rs): each service's output, relayed as
//! `name | text`, and init's word when one exits for good (`hvsim-init:
//! service NAME exited with status N`; one that restarts says more). The
//! root's setup reads it to name the cause when a service dies before the
//! system is ready, rather than wait for a setup complete that cannot come;
//! a branch reads it to tell a service that died in its timeline with no
//! fault to explain it (the harness's failure, not the system's).

use std::collections::{BTreeMap, VecDeque};

use hvsim_vmm::Machine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::story::{self, What};

/// Lines of a service's output kept, its last.
pub const LAST_LINES: usize = 12;
/// Bytes of one output line kept (a guest's line may be any length).
const LINE_BYTES: usize = 240;
/// Services followed at most (a guest may name any number).
const SERVICES: usize = 256;
/// Console lines read before a timeline's root, for the last output of a
/// service that exits in the timeline.
const CONTEXT_LINES: usize = 256;

/// A service that exited, and will not be restarted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ServiceExit {
    pub service: String,
    pub status: u32,
    /// Virtual time at which init told it (ns).
    pub vtime_ns: u64,
    /// What the service wrote last (stdout and stderr), oldest first.
    pub last_output: Vec<String>,
}

impl ServiceExit {
    /// One line for an exit before setup complete: which service, how,
    /// when, and the cause where its output names one hvsim can act on.
    pub fn describe(&self) -> String {
        self.words("before setup complete")
    }

    /// One line for an exit in a timeline, after setup complete, that no
    /// fault explains.
    pub fn describe_in_timeline(&self) -> String {
        self.words("in a timeline where no fault had struck")
    }

    fn words(&self, when: &str) -> String {
        // strerror(ENOSPC), as a C library and most runtimes print it.
        let full = self.last_output.iter().any(|l| l.contains("No space left on device"));
        format!(
            "service {} exited with status {} at {:.3} s of virtual time, {when}{}",
            self.service,
            self.status,
            self.vtime_ns as f64 / 1e9,
            if full { ", its disk full (No space left on device: raise --disk-size)" } else { "" }
        )
    }
}

/// Where a service stands, as init's lines tell it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceState {
    /// Not started yet (waiting for what it depends on, or for init).
    Waiting,
    Started,
    Healthy,
    Unhealthy,
    /// Exited, and init starts it again.
    Restarting {
        status: u32,
    },
    /// Exited for good.
    Exited {
        status: u32,
    },
    /// Never started: a service it depends on failed.
    NotStarted,
}

impl std::fmt::Display for ServiceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceState::Waiting => f.write_str("waiting"),
            ServiceState::Started => f.write_str("started"),
            ServiceState::Healthy => f.write_str("healthy"),
            ServiceState::Unhealthy => f.write_str("unhealthy"),
            ServiceState::Restarting { status } => write!(f, "exited with status {status}, restarting"),
            ServiceState::Exited { status } => write!(f, "exited with status {status}"),
            ServiceState::NotStarted => f.write_str("not started"),
        }
    }
}

/// A service as progress shows it: its state and the last line it wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceView {
    pub name: String,
    pub state: ServiceState,
    pub last_line: Option<String>,
}

/// Follows the console as a run goes on.
#[derive(Debug, Default)]
pub struct Services {
    /// Complete console lines read.
    lines: usize,
    /// The first line whose exits are told (those before it only give
    /// services their last output).
    tell_from: usize,
    last: BTreeMap<String, VecDeque<String>>,
    states: BTreeMap<String, ServiceState>,
    /// Console lines read and not yet taken (`take_lines`), when streaming.
    streaming: Option<Vec<String>>,
}

impl Services {
    /// Follows the console from its line `line` (a timeline's root): exits
    /// from there on, with what the services wrote shortly before as part
    /// of their last output.
    pub fn from_line(line: usize) -> Services {
        Services { lines: line.saturating_sub(CONTEXT_LINES), tell_from: line, ..Services::default() }
    }

    /// Follows the services `names` (those a project declares), each
    /// waiting until init starts it; with `stream`, keeps every console
    /// line read for [`take_lines`](Self::take_lines).
    pub fn of(names: &[String], stream: bool) -> Services {
        let states = names.iter().take(SERVICES).map(|n| (n.clone(), ServiceState::Waiting)).collect();
        Services { states, streaming: stream.then(Vec::new), ..Services::default() }
    }

    /// Every service seen, declared or named on the console, with its
    /// state and last line.
    pub fn views(&self) -> Vec<ServiceView> {
        let names: std::collections::BTreeSet<&String> = self.states.keys().chain(self.last.keys()).collect();
        names
            .into_iter()
            .filter(|n| self.states.contains_key(*n) || !matches!(n.as_str(), "kernel" | "console"))
            .map(|n| ServiceView {
                name: n.clone(),
                state: self.states.get(n).cloned().unwrap_or(ServiceState::Started),
                last_line: self.last.get(n).and_then(|l| l.back().cloned()),
            })
            .collect()
    }

    /// The console lines read since the last call (with `stream` only).
    pub fn take_lines(&mut self) -> Vec<String> {
        self.streaming.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// The services that exited for good in the console's lines since the
    /// last call.
    pub fn exited(&mut self, m: &Machine) -> Vec<ServiceExit> {
        let mut out = Vec::new();
        let first = self.lines;
        for (i, (vtime_ns, bytes)) in m.console_lines_from(first).enumerate() {
            let line = String::from_utf8_lossy(&bytes);
            if let Some(lines) = &mut self.streaming {
                lines.push(truncate(line.trim_end().to_owned()));
            }
            let e = story::output_entry(vtime_ns, &line);
            if e.what == What::Init {
                if let Some((service, state)) = state_line(&e.text) {
                    if self.states.contains_key(service) || self.states.len() < SERVICES {
                        self.states.insert(service.to_owned(), state);
                    }
                }
            }
            match e.what {
                What::Output if self.last.contains_key(&e.source) || self.last.len() < SERVICES => {
                    let lines = self.last.entry(e.source).or_default();
                    if lines.len() == LAST_LINES {
                        lines.pop_front();
                    }
                    lines.push_back(truncate(e.text));
                }
                What::Init if first + i >= self.tell_from => {
                    if let Some((service, status)) = exit_line(&e.text) {
                        let last_output =
                            self.last.get(service).map(|l| l.iter().cloned().collect()).unwrap_or_default();
                        out.push(ServiceExit { service: service.to_owned(), status, vtime_ns, last_output });
                    }
                }
                _ => {}
            }
        }
        self.lines = self.lines.max(m.console_complete_lines());
        out
    }
}

/// `line` cut to [`LINE_BYTES`], on a character.
pub(crate) fn truncate(mut line: String) -> String {
    if line.len() > LINE_BYTES {
        let mut end = LINE_BYTES;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

/// The service and status of init's line for a service that exited for
/// good (the text after `hvsim-init: `).
fn exit_line(text: &str) -> Option<(&str, u32)> {
    match state_line(text)? {
        (service, ServiceState::Exited { status }) => Some((service, status)),
        _ => None,
    }
}

/// The state init's line (the text after `hvsim-init: `) gives a service.
fn state_line(text: &str) -> Option<(&str, ServiceState)> {
    let rest = text.strip_prefix("service ")?;
    // "SERVICE not started: ... exited with status N" is no exit: a name
    // has no spaces.
    if let Some((service, after)) =
        rest.split_once(" exited with status ").filter(|(s, _)| !s.contains(char::is_whitespace))
    {
        // "...; restarting it in N ms" is not an end.
        return Some(match after.split_once(';') {
            Some((status, _)) => (service, ServiceState::Restarting { status: status.parse().ok()? }),
            None => (service, ServiceState::Exited { status: after.parse().ok()? }),
        });
    }
    let (service, what) = rest.split_once(' ')?;
    let state = match what {
        "started" => ServiceState::Started,
        "is healthy" => ServiceState::Healthy,
        "is unhealthy" => ServiceState::Unhealthy,
        w if w.starts_with("not started") => ServiceState::NotStarted,
        _ => return None,
    };
    Some((service, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words parsed here are the ones guest init prints.
    #[test]
    fn init_says_what_is_parsed() {
        let init = include_str!("../../../guest-init/src/container/mod.rs");
        // A node's own container says `service`; the containers beside it
        // say `container`, and are not services here.
        assert!(init.contains(r#"Part::Service => "service""#));
        assert!(init.contains(r#""hvsim-init: {label} {} exited with status {status}""#));
        assert!(init.contains(r#""hvsim-init: {label} {} exited with status {status}; restarting it"#));
        assert_eq!(exit_line("container web-0/exporter exited with status 1"), None);
        assert_eq!(exit_line("service db exited with status 1"), Some(("db", 1)));
        assert_eq!(exit_line("service db exited with status 1; restarting it in 100 ms (restart 1)"), None);
        assert_eq!(exit_line("service db is healthy"), None);
        assert_eq!(exit_line("composer: main/x exited with status 2"), None);
        assert_eq!(exit_line("service db not started: the service on node 0 it depends on exited with status 1"), None);
        for said in [
            r#""hvsim-init: {} {} started", part.label()"#,
            r#""hvsim-init: service {} is healthy""#,
            r#""hvsim-init: service {} is unhealthy""#,
            r#""hvsim-init: service {} not started: the service on node {dep} it depends on"#,
        ] {
            assert!(
                init.contains(said) || include_str!("../../../guest-init/src/container/health.rs").contains(said),
                "{said}"
            );
        }
        let states = [
            ("service db started", ServiceState::Started),
            ("service db is healthy", ServiceState::Healthy),
            ("service db is unhealthy", ServiceState::Unhealthy),
            (
                "service db exited with status 1; restarting it in 100 ms (restart 1)",
                ServiceState::Restarting { status: 1 },
            ),
            ("service db exited with status 3", ServiceState::Exited { status: 3 }),
            (
                "service db not started: the service on node 0 it depends on exited with status 1",
                ServiceState::NotStarted,
            ),
        ];
        for (text, state) in states {
            assert_eq!(state_line(text), Some(("db", state)), "{text}");
        }
        assert_eq!(state_line("service db: health check failed (exit 1; 2 in a row)"), None);
        assert_eq!(state_line("composer: template main"), None);
    }

    #[test]
    fn a_full_disk_is_named_as_the_cause() {
        let mut exit = ServiceExit { service: "db".into(), status: 1, vtime_ns: 4_000_000, last_output: vec![] };
        assert_eq!(
            exit.describe(),
            "service db exited with status 1 at 0.004 s of virtual time, before setup complete"
        );
        exit.last_output.push("dd: error writing '/x': No space left on device".into());
        assert!(exit.describe().ends_with(", its disk full (No space left on device: raise --disk-size)"));
    }

    #[test]
    fn long_lines_are_cut_on_a_character() {
        let cut = truncate("é".repeat(LINE_BYTES));
        assert!(cut.len() <= LINE_BYTES + '…'.len_utf8() && cut.ends_with('…'), "{cut}");
        assert_eq!(truncate("short".into()), "short");
    }
}
