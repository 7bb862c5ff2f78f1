//! Timelines: how to get from a machine's boot to any point the explorer
//! reached, as plain data a bug record can carry.
//!
//! A timeline is the root point (where the target reported setup complete)
//! followed by segments. Each segment re-seeds every entropy stream and runs
//! until the trace reaches a given number of events: the event count, not
//! virtual time, pins the point exactly (several exits may share a time).
//! A segment that starts at an SDK draw also says the value the draw took.

use hvsim_vmm::faults::Vetoes;
use hvsim_vmm::{End, Machine, Vtime};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Point {
    /// Trace events (exits) since boot.
    pub events: u64,
    /// Virtual time there, in nanoseconds (for people; `events` decides).
    pub vtime_ns: u64,
}

/// Where machine `m` stands now.
pub fn point(m: &Machine) -> Point {
    Point { events: m.trace_state().events, vtime_ns: m.now().nanos() }
}

/// Whether a run ending this way is a crash (a bug) rather than a finish.
pub fn is_crash(end: &End) -> bool {
    !matches!(end, End::Exit { status: 0 } | End::VtimeLimit)
}

/// How far a branch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Span {
    /// To the end of its timeline: until the guest ends, or the timeline
    /// has run `limit` of virtual time since the root.
    Whole { limit: Vtime },
    /// This much virtual time from its snapshot.
    Slice(Vtime),
}

impl Span {
    /// The option that set it and its value, as it is written on the
    /// command line (`--timeline-limit 20ms`, `--slice 500ms`).
    pub fn option(&self) -> String {
        let (option, t) = match self {
            Span::Whole { limit } => ("--timeline-limit", limit),
            Span::Slice(slice) => ("--slice", slice),
        };
        format!("{option} {}", humantime::format_duration(std::time::Duration::from_nanos(t.nanos())))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Segment {
    /// Every stream is re-seeded from this at the segment's start.
    pub seed: u64,
    /// The value the SDK draw pending at the segment's start takes (a
    /// segment from a draw point, `schedule.rs`); else the stream decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw: Option<u64>,
    pub until: Point,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Timeline {
    pub root: Point,
    pub segments: Vec<Segment>,
    /// Decisions of its seeds taken back from the root on: a minimized
    /// timeline's (`minimize.rs`); none in a timeline the explorer ran.
    #[serde(default, skip_serializing_if = "Vetoes::is_empty")]
    pub vetoes: Vetoes,
    /// When Test Composer winds down in it (virtual ns): decided by the
    /// explorer as the timeline left its root (`winddown.rs`), then the
    /// timeline's for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winddown_ns: Option<u64>,
    /// What the explorer chose for its line of descent, if it chose
    /// (its fields sit in the timeline's own object, as they always did).
    #[serde(flatten)]
    pub line: LineChoice,
}

// What the explorer chose (`bandit.rs`) for a line of descent leaving the
// root: decided as the timeline left its root, then the timeline's for
// good. One home for a branch's choice and a timeline's record of it.
// (Not a doc comment: flattened into `Timeline`, whose schema it would
// describe.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LineChoice {
    /// The drawn-fault rules its line of descent switched on, when the
    /// explorer chose them (`--schedule bandit`, `bandit.rs`) rather than
    /// swarm's coins: decided as the timeline left its root, then the
    /// timeline's for good.
    #[serde(rename = "rules_on", default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Vec<bool>>,
    /// The Test Composer template its line of descent runs, when the
    /// explorer chose it (`--schedule bandit`) rather than the composer's
    /// own draw: decided as the timeline left its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// The Test Composer drivers and anytime commands its line of descent
    /// switched on (`template/file`), when the explorer chose them
    /// (`--schedule bandit`): decided as the timeline left its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<Vec<String>>,
}

impl LineChoice {
    /// Each choice this one has, else `other`'s.
    fn or(self, other: LineChoice) -> LineChoice {
        LineChoice {
            rules: self.rules.or(other.rules),
            template: self.template.or(other.template),
            commands: self.commands.or(other.commands),
        }
    }
}

impl Timeline {
    /// The timeline of the root itself.
    pub fn at(root: Point) -> Timeline {
        Timeline {
            root,
            segments: Vec::new(),
            vetoes: Vetoes::default(),
            winddown_ns: None,
            line: LineChoice::default(),
        }
    }

    /// This timeline, winding down at `at` unless it already had its time
    /// (a branch from a snapshot inherits its timeline's).
    pub fn winding_down(mut self, at: Option<Vtime>) -> Timeline {
        self.winddown_ns = self.winddown_ns.or(at.map(Vtime::nanos));
        self
    }

    /// This timeline, with what the explorer chose for its line of descent
    /// (fault rules and commands switched on, a template), unless it
    /// already had them.
    pub(crate) fn of_line(mut self, line: LineChoice) -> Timeline {
        self.line = self.line.or(line);
        self
    }

    /// What the timeline decides at its root besides its seeds, applied to
    /// `m` standing there (or later on it): the decisions it takes back,
    /// when Test Composer winds down, and the fault rules the explorer
    /// chose for its line of descent.
    pub fn hold(&self, m: &mut Machine) {
        m.veto(&self.vetoes);
        if let Some(on) = &self.line.rules {
            m.choose_fault_rules(on);
        }
        if let Some(template) = &self.line.template {
            m.choose_template(template);
        }
        if let Some(on) = &self.line.commands {
            m.choose_commands(on);
        }
        if let Some(at) = self.winddown_ns {
            m.set_winddown(Vtime(at));
        }
    }
}

/// The seed of branch `branch` of an exploration with master seed `master`:
/// an exploration is itself a pure function of its master seed.
pub fn branch_seed(master: u64, branch: u64) -> u64 {
    derived_seed(b"hvsim/branch/v1", master, branch)
}

/// A seed derived from a seed and a count, under a domain of its own.
pub(crate) fn derived_seed(domain: &[u8], seed: u64, k: u64) -> u64 {
    let mut h = Sha256::new();
    h.update(domain);
    h.update(seed.to_le_bytes());
    h.update(k.to_le_bytes());
    u64::from_le_bytes(h.finalize()[..8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lines_choices_sit_in_the_timelines_own_object_as_records_always_had_them() {
        let line = LineChoice { rules: Some(vec![true, false]), template: Some("t".into()), commands: None };
        let t = Timeline::at(Point { events: 1, vtime_ns: 2 }).of_line(line.clone());
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["rules_on"], serde_json::json!([true, false]));
        assert_eq!((json["template"].as_str(), json.get("commands"), json.get("line")), (Some("t"), None, None));
        // A record written before the choice had its own type reads the same.
        let old = r#"{"root":{"events":1,"vtime_ns":2},"segments":[],"rules_on":[true,false],"template":"t"}"#;
        assert_eq!(serde_json::from_str::<Timeline>(old).unwrap(), t);
        // What a timeline already has is kept.
        let again = t.clone().of_line(LineChoice { template: Some("u".into()), ..LineChoice::default() });
        assert_eq!(again.line.template.as_deref(), Some("t"));
    }

    #[test]
    fn branch_seeds_are_distinct_and_stable() {
        assert_eq!(branch_seed(1, 2), branch_seed(1, 2));
        assert_ne!(branch_seed(1, 2), branch_seed(1, 3));
        assert_ne!(branch_seed(1, 2), branch_seed(2, 2));
    }
}
