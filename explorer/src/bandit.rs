//! Fault rules chosen by what they found (`--schedule bandit`): a UCB1
//! bandit (Auer, Cesa-Bianchi and Fischer, 2002) over a fault plan's drawn
//! rules, layered on swarm testing (Groce et al., ISSTA 2012).
//!
//! Swarm switches each rule on with a coin per line of descent (a branch
//! from the root and everything that grows from it). Here the bandit picks
//! one rule that is surely on, the one with the best upper confidence
//! bound on its reward, and the coins decide the rest, so no rule starves.
//! A rule is pulled by every timeline whose line had it on, and rewarded
//! when one of its faults struck in that timeline and the timeline found
//! something new (a signal, a coverage edge, a bug): a rule whose faults
//! never strike, or strike and lead nowhere, loses its place. The choice
//! is made from merged knowledge and the explorer's seeded stream, kept in
//! the timeline (and so in a bug's record) and replayed: an exploration
//! stays a function of its seed, whatever the workers.

use hvsim_vmm::entropy::Stream;
use hvsim_vmm::faults::schedule::Rule;

use crate::exploration::RuleTally;
use crate::faults::FaultTally;

/// The bandit's arms: one per drawn rule.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bandit {
    arms: Vec<RuleTally>,
}

impl Bandit {
    /// Arms for a plan's `rules`; none when nothing is to be chosen (no
    /// swarm, or fewer than two rules).
    pub(crate) fn new(rules: &[Rule], swarm: bool) -> Bandit {
        if !swarm || rules.len() < 2 {
            return Bandit::default();
        }
        let arms = rules
            .iter()
            .map(|r| RuleTally {
                kind: r.kind.name().to_owned(),
                landing: r.kind.landing().to_owned(),
                ..Default::default()
            })
            .collect();
        Bandit { arms }
    }

    /// The rules a new line of descent switches on, if the bandit chooses:
    /// the best arm surely, the others by a fair coin each.
    pub(crate) fn choose(&mut self, stream: &mut Stream) -> Option<Vec<bool>> {
        if self.arms.is_empty() {
            return None;
        }
        let pulls: u64 = self.arms.iter().map(|a| a.pulls).sum();
        let score = |a: &RuleTally| {
            if a.pulls == 0 {
                return f64::INFINITY;
            }
            a.rewards as f64 / a.pulls as f64 + (2.0 * (pulls as f64).ln() / a.pulls as f64).sqrt()
        };
        // The first best (ties to the earlier rule: deterministic).
        let best = (0..self.arms.len()).fold(0, |b, i| if score(&self.arms[i]) > score(&self.arms[b]) { i } else { b });
        self.arms[best].chosen += 1;
        Some((0..self.arms.len()).map(|i| i == best || stream.chance(0.5)).collect())
    }

    /// A merged timeline whose line had rules `on`, whose faults struck as
    /// `faults` says, and which found something new or not.
    pub(crate) fn rewarded(&mut self, on: Option<&[bool]>, faults: &FaultTally, fruitful: bool) {
        let Some(on) = on else { return };
        assert!(self.arms.is_empty() || on.len() == self.arms.len(), "a choice for each rule");
        for (arm, _) in self.arms.iter_mut().zip(on).filter(|(_, &on)| on) {
            let struck = faults.drawn.get(&arm.landing).is_some_and(|&n| n > 0);
            arm.pulls += 1;
            arm.rewards += u64::from(fruitful && struck);
        }
    }

    /// Each arm's counts, for the report.
    pub(crate) fn tally(&self) -> Vec<RuleTally> {
        self.arms.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvsim_vmm::faults::schedule::DrawnKind;

    fn rules(kinds: &[DrawnKind]) -> Vec<Rule> {
        let plan = kinds
            .iter()
            .map(|k| format!("[[draw.fault]]\nkind = \"{}\"\nevery = \"1s\"\nduration = \"1s\"\n", k.name()))
            .collect::<String>();
        hvsim_vmm::faults::plan::FaultPlan::parse(&plan, 1, 3).unwrap().draw.rules
    }

    fn struck(landing: &str) -> FaultTally {
        FaultTally { drawn: [(landing.to_owned(), 1)].into(), ..FaultTally::default() }
    }

    /// Untried rules come first, in order; then the rule whose faults led
    /// somewhere new is chosen most, while the coins still switch the
    /// others on, and a rule that struck and found nothing loses its place.
    #[test]
    fn the_rule_that_finds_things_is_chosen_and_the_others_still_get_coins() {
        let mut b = Bandit::new(&rules(&[DrawnKind::Partition, DrawnKind::Kill, DrawnKind::Pause]), true);
        let mut stream = Stream::new(1, "test");
        for expected in 0..3 {
            let on = b.choose(&mut stream).unwrap();
            assert!(on[expected], "untried rule {expected} first: {on:?}");
            b.rewarded(Some(&[expected == 0, expected == 1, expected == 2]), &struck("node.kill"), true);
        }
        // Only kill's faults lead somewhere new.
        let mut others = [0, 0];
        for _ in 0..60 {
            let on = b.choose(&mut stream).unwrap();
            others[0] += u32::from(on[0]);
            others[1] += u32::from(on[2]);
            b.rewarded(Some(&on), &struck("node.kill"), true);
        }
        let t = b.tally();
        assert!(t[1].chosen > 45 && t[0].chosen + t[2].chosen < 15, "{t:?}");
        assert!(others.iter().all(|&n| n > 15 && n < 50), "coins switch the others: {others:?}");
        assert_eq!(t[1].rewards, t[1].pulls, "{t:?}");
        assert_eq!((t[0].rewards, t[2].rewards), (0, 0), "their faults never struck: {t:?}");
        // Nothing to choose without swarm, or with one rule.
        assert!(Bandit::new(&rules(&[DrawnKind::Partition, DrawnKind::Kill]), false).choose(&mut stream).is_none());
        assert!(Bandit::new(&rules(&[DrawnKind::Partition]), true).choose(&mut stream).is_none());
    }
}
