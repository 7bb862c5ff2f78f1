//! Discovery estimates: how much an exploration has likely not found yet,
//! from how often it found what it did (Böhme, "STADS: Software Testing as
//! Species Discovery", TOSEM 2018, after Chao's estimators for species
//! richness from incidence data).
//!
//! Each timeline is a sample; its species are the features its own branch
//! reached (an assertion's passing or failing hit, a guidance reached: what
//! the rarity scheduler counts, `schedule.rs`). From `n` timelines, the
//! features seen, and how many were reached by exactly one timeline
//! (singletons, `Q1`) and exactly two (doubletons, `Q2`):
//!
//! - the chance that the next timeline reaches a feature none has reached
//!   (Good-Turing, with Chao and Jost's correction for incidence data):
//!   `Q1/n · (n-1)Q1 / ((n-1)Q1 + 2 Q2)`;
//! - the features there are in all (Chao2): `S + (n-1)/n · Q1² / (2 Q2)`
//!   (`Q1(Q1-1)/2` for `Q2 = 0`), with Chao's 95% log-normal interval.
//!
//! What they assume: timelines are independent draws from one fixed
//! distribution of behaviours. An exploration breaks that on purpose (it
//! branches from snapshots where something new happened, and its scheduler
//! favours rare features), so the estimates are a guide to where an
//! exploration stands, not a guarantee: a behaviour no timeline can reach
//! without a fault rule that is switched off, or behind a draw never taken,
//! is invisible to them (docs/exploration.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The incidence counts the estimates come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Incidence {
    /// Timelines (samples).
    pub timelines: u64,
    /// Features reached by at least one.
    pub observed: u64,
    /// Features reached by exactly one, and by exactly two.
    pub singletons: u64,
    pub doubletons: u64,
}

/// An estimate and its 95% interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

impl Incidence {
    /// From each feature's count of timelines that reached it.
    pub fn of(timelines: u64, counts: impl IntoIterator<Item = u64>) -> Incidence {
        let mut i = Incidence { timelines, ..Incidence::default() };
        for c in counts {
            assert!(c <= timelines, "a feature reached by more timelines than ran");
            i.observed += u64::from(c > 0);
            i.singletons += u64::from(c == 1);
            i.doubletons += u64::from(c == 2);
        }
        i
    }

    /// The chance that the next timeline reaches a feature none has
    /// reached yet (0 before any timeline: nothing to go by).
    pub fn next_new(&self) -> Estimate {
        let (n, q1, q2) = (self.timelines as f64, self.singletons as f64, self.doubletons as f64);
        if self.timelines == 0 {
            return Estimate { value: 0.0, low: 0.0, high: 1.0 };
        }
        // Chao and Jost's factor; one timeline alone has none (0/0), nor
        // do counts without singletons.
        let factor = if n > 1.0 && q1 > 0.0 { (n - 1.0) * q1 / ((n - 1.0) * q1 + 2.0 * q2) } else { 1.0 };
        // Q1 is a count, about Poisson: each end of the interval is the
        // one-sided 95% bound of a Poisson mean given Q1. With no
        // singletons the upper is about 3/n: the rule of three, for an
        // event not seen in n tries. (A chance: with few timelines Q1/n
        // can pass 1.)
        let chance = |q: f64| (q / n * factor).min(1.0);
        Estimate { value: chance(q1), low: chance(poisson_bound(q1, -Z95)), high: chance(poisson_bound(q1, Z95)) }
    }

    /// The chance that at least one of the next `k` timelines reaches
    /// something new, taking each alike (`1 - (1 - p)^k`).
    pub fn new_within(&self, k: u64) -> Estimate {
        let p = self.next_new();
        let within = |p: f64| 1.0 - (1.0 - p).powf(k as f64);
        Estimate { value: within(p.value), low: within(p.low), high: within(p.high) }
    }

    /// The features there are in all, reached or not (Chao2).
    pub fn total(&self) -> Estimate {
        let s = self.observed as f64;
        if self.timelines < 2 || self.singletons == 0 {
            return Estimate { value: s, low: s, high: s };
        }
        let (n, q1, q2) = (self.timelines as f64, self.singletons as f64, self.doubletons as f64);
        let a = (n - 1.0) / n;
        let (value, var) = if q2 > 0.0 {
            let r = q1 / q2;
            (s + a * q1 * q1 / (2.0 * q2), q2 * (a / 2.0 * r.powi(2) + a * a * r.powi(3) + a * a / 4.0 * r.powi(4)))
        } else {
            let value = s + a * q1 * (q1 - 1.0) / 2.0;
            let var = a * q1 * (q1 - 1.0) / 2.0 + a * a * q1 * (2.0 * q1 - 1.0).powi(2) / 4.0
                - a * a * q1.powi(4) / (4.0 * value);
            (value, var.max(0.0))
        };
        let unseen = value - s;
        if unseen <= 0.0 {
            return Estimate { value, low: s, high: s };
        }
        let k = (1.96 * (1.0 + var / (unseen * unseen)).ln().sqrt()).exp();
        Estimate { value, low: s + unseen / k, high: s + unseen * k }
    }
}

/// The normal quantile of a one-sided 95% bound.
const Z95: f64 = 1.6449;

/// A one-sided bound of a Poisson mean given a count of `k`: the upper
/// (`z > 0`: half the chi-square quantile at 2k + 2 degrees of freedom)
/// or the lower (`z < 0`: at 2k), by Wilson and Hilferty's cube-root
/// approximation of the chi-square quantile (the upper within 1% of the
/// exact bound: 4.73 for 4.74 at one; the lower, a little low at small
/// counts, errs wide), and exactly at none.
fn poisson_bound(k: f64, z: f64) -> f64 {
    if k == 0.0 {
        // Exact: none seen, e^-m = 5% (the rule of three).
        return if z > 0.0 { 20f64.ln() } else { 0.0 };
    }
    let dof = if z > 0.0 { 2.0 * k + 2.0 } else { 2.0 * k };
    let a = 2.0 / (9.0 * dof);
    (dof * (1.0 - a + z * a.sqrt()).powi(3) / 2.0).max(0.0)
}

/// What the stop rule (`--until-saturated P`) asks: that the upper 95%
/// bound of the chance that the next timeline reaches something new fall
/// below `P`, once at least [`SATURATION_WINDOW`] twice over have run.
/// An upper bound, never the point estimate: with no feature reached by
/// one timeline only the estimate is 0 after any number of timelines,
/// while the bound is about 3/n (so `P = 0.01` waits for about 300).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Saturation {
    pub below: f64,
}

/// Where an exploration stands in discovery: the counts at its end, the
/// stop rule it was given, and the branch at which the rule ended it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Discovered {
    pub incidence: Incidence,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_saturated: Option<Saturation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated_at: Option<u64>,
}

impl Discovered {
    /// The estimates, as a report shows them.
    pub fn estimates(&self) -> Estimates {
        let i = self.incidence;
        Estimates {
            incidence: i,
            next_new: i.next_new(),
            window: SATURATION_WINDOW,
            new_within_window: i.new_within(SATURATION_WINDOW),
            total: i.total(),
            until_saturated: self.until_saturated,
            saturated_at: self.saturated_at,
        }
    }
}

/// The discovery estimates of an exploration, with their 95% intervals.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct Estimates {
    pub incidence: Incidence,
    /// The chance the next timeline reaches a feature none has.
    pub next_new: Estimate,
    /// The chance one of the next `window` timelines does.
    pub window: u64,
    pub new_within_window: Estimate,
    /// The features there are in all, reached or not (Chao2).
    pub total: Estimate,
    /// The stop rule given, and the branch at which it ended the
    /// exploration.
    pub until_saturated: Option<Saturation>,
    pub saturated_at: Option<u64>,
}

impl Estimates {
    /// One line for people.
    pub fn describe(&self) -> String {
        let i = &self.incidence;
        let pct = |e: &Estimate| format!("{:.1}% [{:.1}%, {:.1}%]", 100.0 * e.value, 100.0 * e.low, 100.0 * e.high);
        let mut line = format!(
            "{} feature(s) reached in {} timeline(s) ({} by one only, {} by two); the next timeline reaches \
             something new with chance {}, one of the next {} with {}; about {:.1} feature(s) in all [{:.1}, {:.1}]",
            i.observed,
            i.timelines,
            i.singletons,
            i.doubletons,
            pct(&self.next_new),
            self.window,
            pct(&self.new_within_window),
            self.total.value,
            self.total.low,
            self.total.high
        );
        if let (Some(rule), Some(at)) = (self.until_saturated, self.saturated_at) {
            line += &format!(
                "; ended by --until-saturated {} at branch {at} (the upper bound of the chance that the next \
                 timeline reaches something new fell below it)",
                rule.below
            );
        }
        line
    }
}

/// Timelines ahead the stop rule looks.
pub const SATURATION_WINDOW: u64 = 10;

impl Saturation {
    /// Whether `i` says the exploration is saturated.
    pub fn reached(&self, i: &Incidence) -> bool {
        i.timelines >= 2 * SATURATION_WINDOW && i.next_new().high < self.below
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn estimates_match_their_formulas_on_known_counts() {
        // 10 timelines; features reached by 1, 1, 1, 1, 2, 2, 5, 7, 9, 10.
        let i = Incidence::of(10, [1, 1, 1, 1, 2, 2, 5, 7, 9, 10, 0]);
        assert_eq!(i, Incidence { timelines: 10, observed: 10, singletons: 4, doubletons: 2 });
        // Q1/n (n-1)Q1/((n-1)Q1 + 2Q2) = 0.4 · 36/40.
        assert!(close(i.next_new().value, 0.36), "{:?}", i.next_new());
        // S + (n-1)/n Q1²/(2Q2) = 10 + 0.9 · 16/4.
        let t = i.total();
        assert!(close(t.value, 13.6), "{t:?}");
        assert!(t.low > 10.0 && t.low < 13.6 && t.high > 13.6, "{t:?}");
        // Every feature reached twice or more: nothing new expected, and
        // the rule of three bounds it (3/n).
        let i = Incidence::of(30, [2, 3, 30]);
        assert_eq!(i.next_new().value, 0.0);
        assert!((i.next_new().high - 0.1).abs() < 0.001, "{:?}", i.next_new());
        // One singleton: Poisson's upper 95% bound for a count of one is
        // 4.74.
        let i = Incidence::of(100, [1, 3, 100]);
        assert!((i.next_new().high - 0.0474).abs() < 0.0005, "{:?}", i.next_new());
        assert_eq!(i.total().value, 3.0);
        // No doubletons: the bias-corrected form, S + (n-1)/n Q1(Q1-1)/2.
        let i = Incidence::of(5, [1, 1, 1, 5]);
        assert!(close(i.total().value, 4.0 + 0.8 * 3.0), "{:?}", i.total());
        assert!(close(i.next_new().value, 3.0 / 5.0));
        // Nothing run yet: no estimate to speak of; one timeline: every
        // feature it reached is a singleton, and the next is all new.
        assert_eq!(Incidence::default().next_new().value, 0.0);
        let one = Incidence::of(1, [1, 1]);
        assert_eq!((one.next_new().value, one.new_within(10).value, one.total().value), (1.0, 1.0, 2.0));
        // Every estimate is a number, whatever the counts.
        for n in 0..6 {
            for counts in [vec![], vec![1], vec![1, 1, 2], vec![2, 2], vec![n; 3]] {
                let i = Incidence::of(n.max(counts.iter().copied().max().unwrap_or(0)), counts);
                for e in [i.next_new(), i.new_within(10), i.total()] {
                    assert!(e.value.is_finite() && e.low.is_finite() && e.high.is_finite(), "{i:?}: {e:?}");
                    assert!(e.low <= e.value && e.value <= e.high, "{i:?}: {e:?}");
                }
            }
        }
    }

    #[test]
    fn the_window_compounds_the_chance_and_the_rule_waits_for_enough_timelines() {
        let i = Incidence::of(40, [1, 2, 2, 40]);
        let p = i.next_new().value;
        assert!(close(i.new_within(10).value, 1.0 - (1.0 - p).powi(10)));
        let rule = Saturation { below: 0.5 };
        assert!(rule.reached(&i), "{:?}", i.next_new());
        assert!(!Saturation { below: 0.05 }.reached(&i));
        // Too few timelines to go by, however quiet.
        assert!(!rule.reached(&Incidence::of(19, [19])));
        assert!(rule.reached(&Incidence::of(20, [20])));
    }

    /// The rule goes by the upper bound, never the point estimate: with no
    /// singletons the estimate is 0 at once, but P = 0.01 waits for the
    /// rule of three, 3/n < 0.01, about 300 timelines.
    #[test]
    fn the_rule_waits_for_the_upper_bound_not_the_point_estimate() {
        let rule = Saturation { below: 0.01 };
        let quiet = |n| Incidence::of(n, [n, n / 2, 2]);
        assert_eq!(quiet(117).next_new().value, 0.0);
        assert!(!rule.reached(&quiet(117)) && !rule.reached(&quiet(299)), "{:?}", quiet(299).next_new());
        assert!(rule.reached(&quiet(301)), "{:?}", quiet(301).next_new());
        // A singleton more keeps it going: Poisson's bound for one, 4.74/n.
        let one = |n| Incidence::of(n, [n, 1]);
        assert!(!rule.reached(&one(460)) && rule.reached(&one(480)), "{:?}", one(480).next_new());
    }
}
