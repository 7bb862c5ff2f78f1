//! What the explorer knows about each assertion: the catalog (including
//! assertions registered but never reached) and counts over every timeline
//! explored, from which each gets its verdict.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::record::composer;
use crate::record::sdk::{AssertKind, Assertion, Demand, Location};

/// The outcome for one assertion, over the whole exploration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Its demand was met.
    Held,
    /// An always-type hit did not hold, or an unreachable point was reached.
    Failed,
    /// It was never reached (and had to be, or it could not be judged).
    NeverReached,
    /// A sometimes-type assertion was reached but never held.
    SometimesNeverSatisfied,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Failed => "FAILED",
            Verdict::NeverReached => "never reached",
            Verdict::SometimesNeverSatisfied => "sometimes, never satisfied",
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AssertionRecord {
    pub id: String,
    pub message: String,
    pub kind: AssertKind,
    /// The SDK's name for it (e.g. `AlwaysGreaterThan`).
    #[serde(default)]
    pub display: String,
    pub location: Location,
    /// The SDK announced it before it was reached.
    pub registered: bool,
    pub hits: u64,
    /// Hits where the condition held.
    pub passes: u64,
    pub failures: u64,
    /// The first bug this assertion produced.
    pub bug: Option<String>,
}

impl AssertionRecord {
    /// Takes the description (kind, message, display name, location) of
    /// another report of the same id when it is the least of the two, so
    /// that a guest reporting one id in several ways is described the same
    /// whatever order its reports arrive in, in an exploration, across
    /// shards and in any grouping of a merge.
    pub fn describe_least(&mut self, kind: AssertKind, message: &str, display: &str, location: &Location) {
        let (held, seen) = (
            (self.kind, self.message.as_str(), self.display.as_str(), &self.location),
            (kind, message, display, location),
        );
        if seen < held {
            (self.kind, self.message, self.display, self.location) =
                (kind, message.to_owned(), display.to_owned(), location.clone());
        }
    }

    /// Whether it is a check a timeline is meant to reach: an `always`
    /// that must be hit, or a Test Composer `finally_` or `eventually_`
    /// command (whose "exits 0" need not be hit, so that it holds
    /// vacuously where the command never ran).
    pub fn is_check(&self) -> bool {
        match self.kind {
            AssertKind::Always => true,
            AssertKind::AlwaysOrUnreachable => composer_check(&self.id),
            _ => false,
        }
    }

    /// A Test Composer `finally_` or `eventually_` command's check.
    pub fn is_composer_check(&self) -> bool {
        self.kind == AssertKind::AlwaysOrUnreachable && composer_check(&self.id)
    }

    /// A check no timeline has evaluated yet.
    pub fn unevaluated(&self) -> bool {
        self.hits == 0 && self.is_check()
    }

    pub fn verdict(&self) -> Verdict {
        match self.kind.demand() {
            Demand::Every { must_hit } => {
                if self.failures > 0 {
                    Verdict::Failed
                } else if self.hits == 0 && must_hit {
                    Verdict::NeverReached
                } else {
                    Verdict::Held
                }
            }
            Demand::Some => {
                if self.passes > 0 {
                    Verdict::Held
                } else if self.hits > 0 {
                    Verdict::SometimesNeverSatisfied
                } else {
                    Verdict::NeverReached
                }
            }
            Demand::Never => {
                if self.hits > 0 {
                    Verdict::Failed
                } else {
                    Verdict::Held
                }
            }
        }
    }
}

/// Whether `id` is a Test Composer command that checks (`finally_`,
/// `eventually_`) rather than drives.
fn composer_check(id: &str) -> bool {
    composer::command_of(id).is_some_and(composer::is_check)
}

/// What happened when a message about an assertion arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The assertion reached a state (hit, held, failed) it never had before.
    pub new_state: bool,
    /// This hit is a bug.
    pub failed: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Assertions {
    pub by_id: BTreeMap<String, AssertionRecord>,
}

impl Assertions {
    pub fn observe(&mut self, a: &Assertion) -> Observed {
        let r = self.by_id.entry(a.id.clone()).or_insert_with(|| AssertionRecord {
            id: a.id.clone(),
            message: a.message.clone(),
            kind: a.kind,
            display: a.display.clone(),
            location: a.location.clone(),
            registered: false,
            hits: 0,
            passes: 0,
            failures: 0,
            bug: None,
        });
        r.describe_least(a.kind, &a.message, &a.display, &a.location);
        if !a.hit {
            r.registered = true;
            return Observed::default();
        }
        let failed = a.kind.fails(a.condition);
        let before = (r.hits > 0, r.passes > 0, r.failures > 0);
        r.hits += 1;
        if a.condition {
            r.passes += 1;
        }
        if failed {
            r.failures += 1;
        }
        let after = (r.hits > 0, r.passes > 0, r.failures > 0);
        Observed { new_state: before != after, failed }
    }

    pub fn iter(&self) -> impl Iterator<Item = &AssertionRecord> {
        self.by_id.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composer_checks_are_its_finally_and_eventually_commands() {
        assert!(composer_check("Test Composer: main/finally_check.sh exits 0"));
        assert!(composer_check("Test Composer: t/eventually_x exits 0"));
        assert!(!composer_check("Test Composer: main/parallel_driver_a.sh exits 0"));
        assert!(!composer_check("Test Composer: main/first_setup.sh exits 0"));
        assert!(!composer_check("finally_check.sh"));
    }

    fn a(kind: AssertKind, hit: bool, condition: bool) -> Assertion {
        Assertion {
            id: "a".into(),
            message: "a".into(),
            kind,
            display: kind.display().into(),
            hit,
            condition,
            location: Location::default(),
            details: serde_json::Value::Null,
        }
    }

    fn verdict_after(kind: AssertKind, hits: &[(bool, bool)]) -> Verdict {
        let mut s = Assertions::default();
        for &(hit, cond) in hits {
            s.observe(&a(kind, hit, cond));
        }
        s.by_id["a"].verdict()
    }

    #[test]
    fn verdicts() {
        use AssertKind::*;
        use Verdict::*;
        let registered = [(false, false)];
        assert_eq!(verdict_after(Always, &registered), NeverReached);
        assert_eq!(verdict_after(AlwaysOrUnreachable, &registered), Held);
        assert_eq!(verdict_after(Sometimes, &registered), NeverReached);
        assert_eq!(verdict_after(Unreachable, &registered), Held);
        assert_eq!(verdict_after(Always, &[(true, true), (true, true)]), Held);
        assert_eq!(verdict_after(Always, &[(true, true), (true, false)]), Failed);
        assert_eq!(verdict_after(Sometimes, &[(true, false)]), SometimesNeverSatisfied);
        assert_eq!(verdict_after(Sometimes, &[(true, false), (true, true)]), Held);
        assert_eq!(verdict_after(Reachable, &[(true, true)]), Held);
        assert_eq!(verdict_after(Unreachable, &[(true, true)]), Failed);
        // Unreachable fails whatever condition it reports (Python SDK 0.2
        // reports true).
        assert_eq!(verdict_after(Unreachable, &[(true, false)]), Failed);
        assert_eq!(verdict_after(AlwaysOrUnreachable, &[(true, false)]), Failed);
    }

    #[test]
    fn new_states_and_failures() {
        let mut s = Assertions::default();
        assert_eq!(s.observe(&a(AssertKind::Always, false, false)), Observed::default());
        assert_eq!(s.observe(&a(AssertKind::Always, true, true)), Observed { new_state: true, failed: false });
        assert_eq!(s.observe(&a(AssertKind::Always, true, true)), Observed::default());
        assert_eq!(s.observe(&a(AssertKind::Always, true, false)), Observed { new_state: true, failed: true });
        assert_eq!(s.observe(&a(AssertKind::Always, true, false)), Observed { new_state: false, failed: true });
    }

    /// A guest that reports one id in two ways (kind, message, location) is
    /// described by the least of them, whichever came first: the record of
    /// an exploration does not depend on which branch was merged first.
    #[test]
    fn one_id_reported_two_ways_is_described_the_same_in_either_order() {
        let mut other = a(AssertKind::Sometimes, true, true);
        other.message = "said otherwise".into();
        other.location.begin_line = 9;
        let described = |first: &Assertion, then: &Assertion| {
            let mut s = Assertions::default();
            s.observe(first);
            s.observe(then);
            let r = &s.by_id["a"];
            (r.kind, r.message.clone(), r.location.begin_line, r.hits, r.passes, r.failures)
        };
        let always = a(AssertKind::Always, true, false);
        assert_eq!(described(&always, &other), described(&other, &always));
        assert_eq!(described(&always, &other), (AssertKind::Always, "a".into(), 0, 2, 1, 1));
    }
}
