//! Test Composer as the explorer sees it. Init's composer in the guest
//! (`guest-init/src/container/composer.rs`) runs a template's commands and
//! says what it ran on the SDK channel, as `hvsim_composer` events; each
//! command's result is also an always-assertion (`Test Composer: T/F exits
//! 0`), which is what makes a failing command a bug. Here those events
//! become a bug's [`Composition`] (which commands ran, where and when, in
//! its timeline) and the exploration's [`ComposerTally`].

use std::collections::BTreeMap;

use hvsim_abi::composer::Kind;
use hvsim_vmm::machine::Message;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The SDK message key.
pub const KEY: &str = "hvsim_composer";

/// The kind of Test Composer command `command` (`template/file`) is, by its
/// file's prefix.
pub fn kind(command: &str) -> Option<Kind> {
    Kind::of(command.rsplit('/').next().unwrap_or(command))
}

/// Whether `command` (`template/file`) is one of a template's checks, what
/// runs after the drivers with faults paused: `finally_` or `eventually_`.
pub fn is_check(command: &str) -> bool {
    matches!(kind(command), Some(Kind::Finally | Kind::Eventually))
}

/// The command (`template/file`) a property of init's composer stands for:
/// it makes each command's exit the assertion `Test Composer: T/F exits 0`
/// (guest-init/src/container/composer.rs).
pub fn command_of(property: &str) -> Option<&str> {
    property.strip_prefix("Test Composer: ")?.strip_suffix(" exits 0")
}

/// One `hvsim_composer` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComposerEvent {
    /// The timeline's template, chosen at setup complete.
    Template {
        template: String,
    },
    Start {
        run: u64,
        command: String,
        service: String,
    },
    /// `fault`: a fault took the command's node down while it ran;
    /// `stopped`: the composer stopped it (a driver, when an eventually
    /// command began or the composer wound down). Either way its status is
    /// context, not a failure.
    Exit {
        run: u64,
        command: String,
        service: String,
        status: i64,
        fault: bool,
        stopped: bool,
    },
    /// The composer wound down before the timeline's limit (`winddown.rs`):
    /// it stopped its running commands and goes on to its last check.
    WindDown,
}

impl ComposerEvent {
    /// The event in `body`, or why it is not one.
    pub fn parse(body: &Value) -> Result<ComposerEvent, String> {
        let text = |k: &str| body.get(k).and_then(Value::as_str).map(str::to_owned);
        let number = |k: &str| body.get(k).and_then(Value::as_u64);
        let bad = || format!("{KEY} event is not what init's composer sends: {body}");
        let command = || Some(format!("{}/{}", text("template")?, text("command")?));
        match text("event").as_deref() {
            Some("template") => Ok(ComposerEvent::Template { template: text("template").ok_or_else(bad)? }),
            Some("winddown") => Ok(ComposerEvent::WindDown),
            Some("start") => match (number("run"), command(), text("service")) {
                (Some(run), Some(command), Some(service)) => Ok(ComposerEvent::Start { run, command, service }),
                _ => Err(bad()),
            },
            Some("exit") => match (
                number("run"),
                command(),
                text("service"),
                body.get("status").and_then(Value::as_i64),
                body.get("fault").and_then(Value::as_bool),
            ) {
                (Some(run), Some(command), Some(service), Some(status), Some(fault)) => {
                    let stopped = body.get("stopped").and_then(Value::as_bool).unwrap_or(false);
                    Ok(ComposerEvent::Exit { run, command, service, status, fault, stopped })
                }
                _ => Err(bad()),
            },
            _ => Err(bad()),
        }
    }

    /// The event in an SDK line, if it is one.
    pub(crate) fn of(line: &[u8]) -> Option<ComposerEvent> {
        let v: Value = serde_json::from_slice(line).ok()?;
        ComposerEvent::parse(v.get(KEY)?).ok()
    }
}

/// One command of a timeline's composition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommandRun {
    /// Its number in the timeline (init counts from 1).
    pub run: u64,
    /// `template/file`.
    pub command: String,
    /// The service whose container ran it.
    pub service: String,
    pub started_ns: u64,
    /// `None` while it ran (at the failure).
    pub ended_ns: Option<u64>,
    pub status: Option<i64>,
    /// A fault took its node down while it ran.
    #[serde(default)]
    pub fault: bool,
    /// The composer stopped it.
    #[serde(default)]
    pub stopped: bool,
}

impl CommandRun {
    pub fn describe(&self) -> String {
        let ms = |ns: u64| ns as f64 / 1e6;
        let end = match (self.ended_ns, self.status) {
            (Some(end), Some(status)) => format!(
                "until {:.1} ms, exit status {status}{}",
                ms(end),
                if self.fault {
                    " (a fault took its node down meanwhile)"
                } else if self.stopped {
                    " (stopped by the composer)"
                } else {
                    ""
                }
            ),
            _ => "still running".to_owned(),
        };
        format!("{} in {}: from {:.1} ms, {end}", self.command, self.service, ms(self.started_ns))
    }
}

/// Which template a timeline ran, and its commands in the order they started.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Composition {
    pub template: String,
    pub runs: Vec<CommandRun>,
    /// When the composer wound down before the timeline's limit, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winddown_ns: Option<u64>,
}

impl Composition {
    /// The composition in a timeline's messages (all of them, from power-on);
    /// `None` without Test Composer.
    pub fn of<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Option<Composition> {
        let mut c: Option<Composition> = None;
        for m in messages {
            match ComposerEvent::of(&m.bytes) {
                Some(ComposerEvent::Template { template }) => {
                    c = Some(Composition { template, runs: Vec::new(), winddown_ns: None })
                }
                Some(ComposerEvent::WindDown) => {
                    if let Some(c) = &mut c {
                        c.winddown_ns = Some(m.vtime.nanos());
                    }
                }
                Some(ComposerEvent::Start { run, command, service }) => {
                    if let Some(c) = &mut c {
                        let started_ns = m.vtime.nanos();
                        c.runs.push(CommandRun {
                            run,
                            command,
                            service,
                            started_ns,
                            ended_ns: None,
                            status: None,
                            fault: false,
                            stopped: false,
                        });
                    }
                }
                Some(ComposerEvent::Exit { run, status, fault, stopped, .. }) => {
                    if let Some(r) = c.as_mut().and_then(|c| c.runs.iter_mut().find(|r| r.run == run)) {
                        r.ended_ns = Some(m.vtime.nanos());
                        r.status = Some(status);
                        r.fault = fault;
                        r.stopped = stopped;
                    }
                }
                None => {}
            }
        }
        c
    }

    /// One line per command (and the wind-down, where it came).
    pub fn describe(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.runs.iter().map(CommandRun::describe).collect();
        if let Some(at) = self.winddown_ns {
            let after = self.runs.iter().position(|r| r.started_ns > at).unwrap_or(lines.len());
            let what = "the composer wound down: running commands stopped, its last check next";
            lines.insert(after, format!("at {:.1} ms, {what}", at as f64 / 1e6));
        }
        lines
    }
}

/// What one command did over an exploration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommandTally {
    pub started: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Ended while a fault had taken its node down (neither).
    pub by_fault: u64,
    /// Stopped by the composer, for an eventually command or as it wound
    /// down (neither).
    #[serde(default)]
    pub stopped: u64,
    /// The longest it ran in a timeline, in virtual ns (a run the limit cut
    /// counts the time it had run): what the wind-down learns from.
    #[serde(default)]
    pub longest_ns: u64,
}

impl CommandTally {
    /// Runs that ended, however they ended.
    pub fn ended(&self) -> u64 {
        self.succeeded + self.failed + self.by_fault + self.stopped
    }
}

/// How the tally counts, for readers of the report.
pub const HOW_COUNTED: &str = "Each branch counts what happened after its snapshot: a command running when a \
     snapshot was taken ends once in every branch from it, so ends may outnumber starts.";

/// Test Composer over an exploration: how often each template was chosen
/// and what each command did, over the root run and every branch (each
/// branch counting what happened after its snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ComposerTally {
    pub templates: BTreeMap<String, u64>,
    pub commands: BTreeMap<String, CommandTally>,
    /// Timelines in which the composer wound down before the limit.
    #[serde(default)]
    pub winddowns: u64,
}

impl ComposerTally {
    pub fn add(&mut self, e: ComposerEvent) {
        match e {
            ComposerEvent::Template { template } => *self.templates.entry(template).or_default() += 1,
            ComposerEvent::Start { command, .. } => self.commands.entry(command).or_default().started += 1,
            ComposerEvent::Exit { command, status, fault, stopped, .. } => {
                let t = self.commands.entry(command).or_default();
                match (fault, stopped, status) {
                    (true, _, _) => t.by_fault += 1,
                    (false, true, _) => t.stopped += 1,
                    (false, false, 0) => t.succeeded += 1,
                    (false, false, _) => t.failed += 1,
                }
            }
            ComposerEvent::WindDown => self.winddowns += 1,
        }
    }

    /// Command `command` ran `ns` in a timeline.
    pub fn took(&mut self, command: &str, ns: u64) {
        let t = self.commands.entry(command.to_owned()).or_default();
        t.longest_ns = t.longest_ns.max(ns);
    }

    /// The size of the table `e` would add to, and whether it names a key
    /// the table has (for the bound on guest-named tables).
    pub fn holds(&self, e: &ComposerEvent) -> (usize, bool) {
        match e {
            ComposerEvent::Template { template } => (self.templates.len(), self.templates.contains_key(template)),
            ComposerEvent::Start { command, .. } | ComposerEvent::Exit { command, .. } => {
                (self.commands.len(), self.commands.contains_key(command))
            }
            ComposerEvent::WindDown => (0, true),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.templates.is_empty() && self.commands.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvsim_vmm::Vtime;

    fn msg(ms: u64, s: &str) -> Message {
        Message { vtime: Vtime(ms * 1_000_000), bytes: s.as_bytes().to_vec(), sender: None }
    }

    #[test]
    fn a_timeline_s_composition_and_tally() {
        let lines = [
            msg(1, r#"{"hvsim_composer":{"event":"template","template":"t"}}"#),
            msg(2, r#"{"hvsim_composer":{"event":"start","run":1,"template":"t","command":"first_a","service":"db"}}"#),
            msg(
                3,
                r#"{"hvsim_composer":{"event":"exit","run":1,"template":"t","command":"first_a","service":"db","status":0,"fault":false}}"#,
            ),
            msg(
                4,
                r#"{"hvsim_composer":{"event":"start","run":2,"template":"t","command":"parallel_driver_w","service":"c"}}"#,
            ),
            msg(5, r#"{"antithesis_setup":{"status":"complete"}}"#),
            msg(
                6,
                r#"{"hvsim_composer":{"event":"start","run":3,"template":"t","command":"parallel_driver_w","service":"c"}}"#,
            ),
            msg(
                7,
                r#"{"hvsim_composer":{"event":"exit","run":3,"template":"t","command":"parallel_driver_w","service":"c","status":1,"fault":false}}"#,
            ),
        ];
        let c = Composition::of(&lines).expect("a composition");
        assert_eq!(c.template, "t");
        let runs: Vec<_> = c.runs.iter().map(|r| (r.run, r.started_ns / 1_000_000, r.status)).collect();
        assert_eq!(runs, [(1, 2, Some(0)), (2, 4, None), (3, 6, Some(1))]);
        assert!(c.describe()[1].ends_with("still running"), "{:?}", c.describe());
        assert_eq!(Composition::of(&lines[4..5]), None);

        let mut t = ComposerTally::default();
        lines.iter().filter_map(|m| ComposerEvent::of(&m.bytes)).for_each(|e| t.add(e));
        assert_eq!(t.templates["t"], 1);
        let w = t.commands["t/parallel_driver_w"];
        assert_eq!((w.started, w.succeeded, w.failed, w.by_fault), (2, 0, 1, 0));
    }

    #[test]
    fn malformed_events_are_refused() {
        for body in [
            r#"{"event":"start","run":1,"template":"t"}"#,
            r#"{"event":"exit","run":1,"template":"t","command":"c","service":"s","status":"0","fault":false}"#,
            r#"{"event":"dance"}"#,
            r#"[]"#,
        ] {
            let v: Value = serde_json::from_str(body).unwrap();
            assert!(ComposerEvent::parse(&v).is_err(), "{body}");
        }
    }
}
