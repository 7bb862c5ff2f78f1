//! A timeline's story: what happened in it, on one line of virtual time.
//!
//! The guest's output (each console line stamped with the virtual time it
//! began: `hvsim_vmm::devices::serial`), what init said of its services and
//! Test Composer, the SDK's messages, and every drawn fault as it struck and
//! ended. A bug record keeps the story up to its failure, so that it says
//! why, not only where; `hvsim replay` tells the same story as it
//! re-executes the timeline ([`Narrator`] serves both, so the two agree).
//!
//! All of it comes from the machine's own state (its console, its message
//! log, its fault schedule), which snapshots carry: a branch's story begins
//! at boot, not at the snapshot it was restored from.

use std::collections::{BTreeMap, BTreeSet};

use hvsim_vmm::Machine;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::sdk::{self, SdkMessage};

/// Output lines kept per source (a service, the kernel...).
pub const OUTPUT_LINES: usize = 20;
/// SDK messages kept (the last ones).
pub const SDK_ENTRIES: usize = 60;
/// Lines of init's own (services, Test Composer) kept.
pub const INIT_LINES: usize = 40;
/// Faults kept (the last ones): every one, in any real timeline.
pub const FAULT_ENTRIES: usize = 200;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum What {
    /// A line a program wrote (a service's, the kernel's).
    Output,
    /// What init said of the machine: a service healthy or restarted, a
    /// Test Composer command run.
    Init,
    /// A message on the SDK channel.
    Sdk,
    /// A drawn fault struck, or ended.
    Fault,
    /// The failure itself.
    Failure,
}

/// One thing that happened, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Entry {
    pub vtime_ns: u64,
    pub what: What,
    /// Who: a service's name, `kernel`, `init`, `sdk`, `faults`.
    pub source: String,
    pub text: String,
}

impl Entry {
    /// One line for a terminal: `  27.000s  faults  partition ... begins`.
    pub fn line(&self) -> String {
        format!("{:>10.3}s  {:<10} {}", self.vtime_ns as f64 / 1e9, self.source, self.text)
    }
}

/// Tells a machine's story as it runs: each call to [`Narrator::next`] says
/// what happened since the last.
#[derive(Clone, Debug, Default)]
pub struct Narrator {
    /// Complete console lines told.
    lines: usize,
    messages: usize,
    /// Fault episodes whose start, and whose end, were told.
    started: BTreeSet<u64>,
    ended: BTreeSet<u64>,
}

impl Narrator {
    /// What happened since the last call (since boot, the first time), in
    /// order of virtual time; `name` names a node.
    pub fn next(&mut self, m: &Machine, name: &dyn Fn(u16) -> String) -> Vec<Entry> {
        let mut out = Vec::new();
        for (vtime_ns, bytes) in m.console_lines_from(self.lines) {
            out.push(output_entry(vtime_ns, &String::from_utf8_lossy(&bytes)));
        }
        self.lines = self.lines.max(m.console_complete_lines());
        for msg in m.messages().iter_from(self.messages) {
            if let Some((source, mut text)) = sdk_text(&msg.bytes) {
                // The process that said it, where the guest kernel names it.
                if let Some(pid) = msg.sender {
                    text.push_str(&format!(" (pid {pid})"));
                }
                out.push(Entry { vtime_ns: msg.vtime.nanos(), what: What::Sdk, source, text });
            }
        }
        self.messages = m.messages().len();
        for e in m.state().devices.virtio.struck() {
            if self.started.insert(e.id) {
                let until = match e.end_ns {
                    u64::MAX => "stays down".to_owned(),
                    end => format!("until {:.3}s", end as f64 / 1e9),
                };
                let text = format!("{} {}: strikes ({until})", e.kind.name(), e.whom(name));
                out.push(Entry { vtime_ns: e.start_ns, what: What::Fault, source: "faults".into(), text });
            }
            if let Some(ended) = e.ended_ns {
                if self.ended.insert(e.id) {
                    let text = format!("{} {}: ends; it touched {}", e.kind.name(), e.whom(name), e.landed);
                    out.push(Entry { vtime_ns: ended, what: What::Fault, source: "faults".into(), text });
                }
            }
        }
        // Stable: at one time, output before messages before faults.
        out.sort_by_key(|e| e.vtime_ns);
        out
    }
}

/// The story of `m`'s run up to now, cut to the last [`OUTPUT_LINES`] of
/// each source, [`SDK_ENTRIES`] messages and [`INIT_LINES`] of init's.
pub fn of(m: &Machine, name: &dyn Fn(u16) -> String) -> Vec<Entry> {
    keep_last(Narrator::default().next(m, name))
}

/// The names of a target's nodes (its services' names in a compose
/// project), for [`name`].
pub fn nodes(target: &crate::Target) -> Vec<String> {
    target.containers().iter().map(|c| c.name.clone()).collect()
}

/// Node `n` as people know it, among `nodes`.
pub fn name(nodes: &[String], n: u16) -> String {
    nodes.get(usize::from(n)).cloned().unwrap_or_else(|| format!("node{n}"))
}

/// The entry that ends a bug's story: what failed, as the bug says it.
pub fn failure(vtime_ns: u64, what: &str) -> Entry {
    Entry { vtime_ns, what: What::Failure, source: "hvsim".into(), text: what.into() }
}

/// Keeps the last entries of each kind and source, in order.
pub fn keep_last(all: Vec<Entry>) -> Vec<Entry> {
    let mut left: BTreeMap<(What, &str), usize> = BTreeMap::new();
    let mut keep = vec![false; all.len()];
    for (i, e) in all.iter().enumerate().rev() {
        let (key, limit) = match e.what {
            What::Output => ((e.what, e.source.as_str()), OUTPUT_LINES),
            What::Init => ((e.what, ""), INIT_LINES),
            What::Sdk => ((e.what, ""), SDK_ENTRIES),
            What::Fault => ((e.what, ""), FAULT_ENTRIES),
            What::Failure => ((e.what, ""), usize::MAX),
        };
        let n = left.entry(key).or_insert(0);
        if *n < limit {
            *n += 1;
            keep[i] = true;
        }
    }
    all.into_iter().zip(keep).filter_map(|(e, k)| k.then_some(e)).collect()
}

/// A console line as an entry: a service's (`name | text`, as init relays
/// it), init's own (`hvsim-init: ...`), or the kernel's.
pub(crate) fn output_entry(vtime_ns: u64, line: &str) -> Entry {
    let line = line.trim_end_matches('\r');
    if let Some(text) = line.strip_prefix("hvsim-init: ") {
        return Entry { vtime_ns, what: What::Init, source: "init".into(), text: text.into() };
    }
    if let Some((service, text)) = line.split_once(" | ") {
        if !service.is_empty() && !service.contains(char::is_whitespace) && service.len() <= 64 {
            return Entry { vtime_ns, what: What::Output, source: service.into(), text: text.into() };
        }
    }
    let source = if line.starts_with('[') { "kernel" } else { "console" };
    Entry { vtime_ns, what: What::Output, source: source.into(), text: line.into() }
}

/// What an SDK message says, for people, and who says it; `None` for the
/// machinery (coverage, draws, buggify reached, SDK info).
fn sdk_text(bytes: &[u8]) -> Option<(String, String)> {
    let sdk = |t: String| Some(("sdk".to_owned(), t));
    match sdk::parse(bytes) {
        SdkMessage::Assert(a) if a.hit => {
            let verdict = if a.kind.fails(a.condition) { "FAILS" } else { "holds" };
            sdk(format!("{} {verdict}: {}", a.display, a.message))
        }
        SdkMessage::SetupComplete { .. } => sdk("setup complete".into()),
        SdkMessage::History(r) => {
            let e = &r.event;
            let key = e.key.as_deref().map(|k| format!(" {k}")).unwrap_or_default();
            let value = if e.value.is_null() { String::new() } else { format!(" {}", e.value) };
            sdk(format!("process {} {:?} {}{key}{value}", e.process, e.kind, e.f).to_lowercase())
        }
        SdkMessage::Event { name, details } => sdk(format!("event {name}: {details}")),
        SdkMessage::Garbage(why) => sdk(format!("garbage on the SDK channel: {why}")),
        SdkMessage::Composer(_) => None, // init says it on the console too
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_lines_are_told_by_who_wrote_them() {
        let e = output_entry(5, "r1 | 1:M 01 Jan 00:00:01.000 * Ready to accept connections");
        assert_eq!((e.what, e.source.as_str()), (What::Output, "r1"));
        assert!(e.text.starts_with("1:M"));
        let e = output_entry(5, "hvsim-init: service r1 is healthy");
        assert_eq!((e.what, e.source.as_str(), e.text.as_str()), (What::Init, "init", "service r1 is healthy"));
        assert_eq!(output_entry(5, "[    1.000000] Linux version").source, "kernel");
        assert_eq!(output_entry(5, "a line | with a bar").source, "console");
    }

    #[test]
    fn keep_last_keeps_the_last_of_each_source_in_order() {
        let entry =
            |t: u64, what: What, source: &str| Entry { vtime_ns: t, what, source: source.into(), text: String::new() };
        let mut all: Vec<Entry> = (0..50).map(|t| entry(t, What::Output, if t % 2 == 0 { "a" } else { "b" })).collect();
        all.push(entry(50, What::Fault, "faults"));
        all.push(entry(51, What::Failure, "hvsim"));
        let kept = keep_last(all);
        assert_eq!(kept.iter().filter(|e| e.source == "a").count(), OUTPUT_LINES);
        assert_eq!(kept.iter().filter(|e| e.source == "b").count(), OUTPUT_LINES);
        assert_eq!(kept.first().map(|e| e.vtime_ns), Some(10), "the first 10 lines are cut");
        assert!(kept.windows(2).all(|w| w[0].vtime_ns <= w[1].vtime_ns));
        assert_eq!(kept.last().map(|e| e.what), Some(What::Failure));
    }
}
