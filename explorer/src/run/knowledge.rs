//! What messages taught an exploration: everything that decides whether a
//! message brings something new (an assertion state, a better guidance
//! watermark, a coverage edge) or a bug. The loop keeps the merged
//! knowledge; each worker judges its branch against a copy taken when the
//! branch's round began (`workers.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};

use hvsim_vmm::Machine;

use crate::record::assertions::Assertions;
use crate::record::bug::BugKind;
use crate::record::composer::ComposerTally;
use crate::record::coverage::{Coverage, FreshBits};
use crate::record::exploration::{Dropped, Garbage, Instrumentation, MAX_GUEST_KEYS};
use crate::record::sdk::{self, Demand, SdkMessage};

/// What was learned from messages, across every timeline.
#[derive(Clone, Debug, Default)]
pub(crate) struct Signals {
    /// The best value of each numeric guidance so far.
    pub(crate) numeric: HashMap<String, f64>,
    /// The best count of true conditions of each boolean guidance so far.
    pub(crate) boolean: HashMap<String, u64>,
    /// The values of each JSON guidance seen so far (at most
    /// [`MAX_JSON_VALUES`] each).
    pub(crate) json: HashMap<String, HashSet<String>>,
    pub(crate) coverage: Coverage,
    pub(crate) total: u64,
}

impl Signals {
    /// How many guidance ids are known.
    fn guidance(&self) -> usize {
        self.numeric.len() + self.boolean.len() + self.json.len()
    }

    fn has_guidance(&self, id: &str) -> bool {
        self.numeric.contains_key(id) || self.boolean.contains_key(id) || self.json.contains_key(id)
    }
}

/// Distinct values of one JSON guidance that count as progress.
const MAX_JSON_VALUES: usize = 1000;

/// What messages taught the exploration: everything that decides whether
/// a message brings something new. A worker judges its branch against a
/// copy taken when the branch's round began.
#[derive(Clone, Debug, Default)]
pub(crate) struct Knowledge {
    pub(crate) assertions: Assertions,
    pub(crate) signals: Signals,
    pub(crate) events: BTreeMap<String, u64>,
    pub(crate) composer: ComposerTally,
    pub(crate) garbage: Garbage,
    pub(crate) dropped: Dropped,
    pub(crate) instrumentation: Instrumentation,
}

/// SDKs a program may announce (a list, searched as it is).
const MAX_SDKS: usize = 100;

/// Whether a table of `len` keys that lacks the key takes it; if not, the
/// message is counted in `dropped` instead.
fn admits(len: usize, has: bool, dropped: &mut u64) -> bool {
    admits_within(len, has, MAX_GUEST_KEYS, dropped)
}

fn admits_within(len: usize, has: bool, max: usize, dropped: &mut u64) -> bool {
    let admitted = has || len < max;
    if !admitted {
        *dropped += 1;
    }
    admitted
}

/// What one message meant.
#[derive(Default)]
pub(crate) struct Outcome {
    pub new_signals: u64,
    /// Coverage edges never seen before (also counted in `new_signals`).
    pub new_edges: u64,
    pub bug: Option<BugKind>,
    pub setup_complete: bool,
    /// The feature the message reached, for the schedule's rarity: an
    /// assertion's passing or failing hit, a guidance.
    pub reached: Option<String>,
    /// What it reached is a step on: anything but a sometimes-type
    /// assertion's failing evaluation (what a draw point can stand after,
    /// `steer.rs`).
    pub onward: bool,
    /// A sometimes-type assertion (its id) reached without being satisfied.
    pub approached: Option<String>,
    /// A guidance (its id) whose best value this is.
    pub watermark: Option<String>,
    /// An SDK draw follows (its option count, if known).
    pub draw: Option<Option<u64>>,
    /// Something new that is progress: not only a sometimes-type
    /// assertion's first failing evaluation (`schedule.rs`).
    pub progress: bool,
}

impl Knowledge {
    pub(crate) fn process(&mut self, line: &[u8]) -> Outcome {
        let mut o = Outcome::default();
        let message = sdk::parse(line);
        let assertion = matches!(message, SdkMessage::Assert(_));
        match message {
            SdkMessage::Assert(a) => {
                let (len, has) = (self.assertions.by_id.len(), self.assertions.by_id.contains_key(&a.id));
                if !admits(len, has, &mut self.dropped.assertions) {
                    return o;
                }
                let seen = self.assertions.observe(&a);
                o.new_signals += u64::from(seen.new_state);
                o.progress = seen.new_state && (a.condition || a.kind.demand() != Demand::Some);
                if seen.failed {
                    o.bug = Some(BugKind::from_assertion(&a));
                }
                if a.hit {
                    o.reached = Some(format!("assert {} {}", if a.condition { "pass" } else { "fail" }, a.id));
                    o.onward = a.condition || a.kind.demand() != Demand::Some;
                    if !a.condition && a.kind.demand() == Demand::Some {
                        o.approached = Some(a.id.clone());
                    }
                }
            }
            SdkMessage::Numeric { id, .. } | SdkMessage::Boolean { id, .. } | SdkMessage::Json { id, .. }
                if !admits(self.signals.guidance(), self.signals.has_guidance(&id), &mut self.dropped.guidance) => {}
            SdkMessage::Numeric { id, value, maximize } => {
                let better = |old: f64| if maximize { value > old } else { value < old };
                o.reached = Some(format!("guidance {id}"));
                o.onward = true;
                let best = self.signals.numeric.entry(id.clone()).or_insert(f64::NAN);
                if best.is_nan() || better(*best) {
                    *best = value;
                    o.new_signals += 1;
                    o.watermark = Some(id);
                }
            }
            SdkMessage::Boolean { id, true_count, maximize } => {
                let better = |old: u64| {
                    if maximize {
                        true_count > old
                    } else {
                        true_count < old
                    }
                };
                o.reached = Some(format!("guidance {id}"));
                o.onward = true;
                let best = self.signals.boolean.get(&id).copied();
                if best.is_none_or(better) {
                    self.signals.boolean.insert(id.clone(), true_count);
                    o.new_signals += 1;
                    o.watermark = Some(id);
                }
            }
            SdkMessage::Json { id, value } => {
                o.reached = Some(format!("guidance {id}"));
                o.onward = true;
                let seen = self.signals.json.entry(id).or_default();
                if seen.len() < MAX_JSON_VALUES && seen.insert(value.to_string()) {
                    o.new_signals += 1;
                }
            }
            SdkMessage::GuidanceRegistered { .. } => {}
            SdkMessage::Coverage { edges } => {
                for e in edges {
                    o.new_edges += u64::from(self.signals.coverage.add_edge(e));
                }
                o.new_signals += o.new_edges;
            }
            SdkMessage::CoverageModule { name, edges, base } => {
                let modules = &mut self.instrumentation.coverage_modules;
                if admits(modules.len(), modules.contains_key(&name), &mut self.dropped.instrumentation) {
                    modules.insert(name, (edges, base));
                }
            }
            SdkMessage::SetupComplete { .. } => o.setup_complete = true,
            SdkMessage::Composer(e) => {
                let (len, has) = self.composer.holds(&e);
                if admits(len, has, &mut self.dropped.composer) {
                    self.composer.add(e);
                }
            }
            SdkMessage::Draw { options } => o.draw = Some(options),
            // Counted from the machine's table (`faults.rs`).
            SdkMessage::Buggify { .. } | SdkMessage::Machine => {}
            SdkMessage::Event { name, .. } => {
                if admits(self.events.len(), self.events.contains_key(&name), &mut self.dropped.events) {
                    *self.events.entry(name).or_insert(0) += 1;
                }
            }
            // Checked at the timeline's end (`checkers.rs`); counted here.
            SdkMessage::History(_) => *self.events.entry(crate::record::history::KEY.to_owned()).or_insert(0) += 1,
            SdkMessage::SdkInfo(info) => {
                let sdks = &mut self.instrumentation.sdks;
                let has = sdks.contains(&info);
                if admits_within(sdks.len(), has, MAX_SDKS, &mut self.dropped.instrumentation) && !has {
                    sdks.push(info);
                }
            }
            SdkMessage::Garbage(why) => {
                self.garbage.count += 1;
                if self.garbage.examples.len() < 10 {
                    self.garbage.examples.push(why);
                }
            }
        }
        self.signals.total += o.new_signals;
        if !assertion {
            o.progress = o.new_signals > 0;
        }
        o
    }

    /// Test Composer's command `command` ran `ns` in a timeline.
    pub(crate) fn composer_took(&mut self, command: &str, ns: u64) {
        let commands = &self.composer.commands;
        if admits(commands.len(), commands.contains_key(command), &mut self.dropped.composer) {
            self.composer.took(command, ns);
        }
    }

    /// Edges the guest's coverage map shows that no timeline reached before
    /// (counted as signals).
    pub(crate) fn new_coverage(&mut self, m: &Machine) -> FreshBits {
        let fresh = m.coverage_map().map(|map| self.signals.coverage.merge_map(map)).unwrap_or_default();
        self.signals.total += fresh.count();
        fresh
    }

    /// Adds coverage a worker found; returns how many edges are new here.
    pub(crate) fn merge_coverage(&mut self, fresh: &FreshBits) -> u64 {
        let new = self.signals.coverage.merge_bits(fresh);
        self.signals.total += new;
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that makes up a new assertion id, guidance id and event
    /// name in every message fills each table to its bound and no further:
    /// the rest is counted, and keys already known still count.
    #[test]
    fn names_made_up_without_end_fill_each_table_to_its_bound() {
        let mut k = Knowledge::default();
        let assertion = |id: &str| {
            format!(
                r#"{{"antithesis_assert":{{"id":"{id}","message":"{id}","condition":true,"hit":true,"must_hit":true,"assert_type":"always","display_type":"Always","location":{{"file":"a.c","function":"f","class":"","begin_line":1,"begin_column":0}},"details":null}}}}"#
            )
        };
        let guidance = |id: &str, left: u64| {
            format!(
                r#"{{"antithesis_guidance":{{"id":"{id}","message":"{id}","guidance_type":"numeric","maximize":true,"hit":true,"guidance_data":{{"left":{left},"right":0}}}}}}"#
            )
        };
        let extra = 25;
        for i in 0..MAX_GUEST_KEYS + extra {
            k.process(assertion(&format!("a{i}")).as_bytes());
            k.process(guidance(&format!("g{i}"), 1).as_bytes());
            k.process(format!(r#"{{"e{i}":{{}}}}"#).as_bytes());
            k.process(format!(r#"{{"hvsim_composer":{{"event":"template","template":"t{i}"}}}}"#).as_bytes());
        }
        for i in 0..MAX_SDKS + extra {
            k.process(format!(r#"{{"antithesis_sdk":{{"language":{{"name":"C{i}","version":""}},"sdk_version":"0","protocol_version":"1.0.0"}}}}"#).as_bytes());
        }
        assert_eq!(k.assertions.by_id.len(), MAX_GUEST_KEYS);
        assert_eq!(k.signals.guidance(), MAX_GUEST_KEYS);
        assert_eq!(k.events.len(), MAX_GUEST_KEYS);
        assert_eq!(k.composer.templates.len(), MAX_GUEST_KEYS);
        assert_eq!(k.instrumentation.sdks.len(), MAX_SDKS);
        let extra = extra as u64;
        let all =
            Dropped { assertions: extra, guidance: extra, events: extra, composer: extra, instrumentation: extra };
        assert_eq!(k.dropped, all);
        // Known keys are still judged: a better watermark is new.
        assert_eq!(k.process(guidance("g0", 2).as_bytes()).new_signals, 1);
        assert_eq!(k.process(assertion("a0").as_bytes()).new_signals, 0);
        assert_eq!(k.dropped.guidance, extra);
    }
}
