//! Fault rules and Test Composer templates chosen by what they found
//! (`--schedule bandit`): UCB1 bandits (Auer, Cesa-Bianchi and Fischer,
//! 2002) over a fault plan's drawn rules, layered on swarm testing (Groce
//! et al., ISSTA 2012), and over the target's templates.
//!
//! Swarm switches each rule on with a coin per line of descent (a branch
//! from the root and everything that grows from it). Here the bandit picks
//! one rule that is surely on, the one with the best upper confidence
//! bound on its reward, and the coins decide the rest, so no rule starves.
//! A rule is pulled by every timeline whose line had it on, and rewarded
//! when one of its faults struck in that timeline and the timeline found
//! something new (a signal, a coverage edge, a bug): a rule whose faults
//! never strike, or strike and lead nowhere, loses its place.
//!
//! A line runs one template, so there the bandit's choice is the whole
//! choice (UCB1's bound keeps trying the others, less and less often): a
//! template is pulled by every timeline of a line that ran it and rewarded
//! when the timeline found something new. Without the bandit, the composer
//! draws its template from the timeline's stream.
//!
//! The choices are made from merged knowledge and the explorer's seeded
//! stream, kept in the timeline (and so in a bug's record) and replayed:
//! an exploration stays a function of its seed, whatever the workers.

use hvsim_vmm::entropy::Stream;
use hvsim_vmm::faults::schedule::Rule;

use crate::exploration::{RuleTally, TemplateTally};
use crate::faults::FaultTally;
use crate::timeline::{LineChoice, Timeline};

/// The bandits' arms: one per drawn rule, one per template.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bandit {
    rules: Vec<RuleTally>,
    templates: Vec<TemplateTally>,
}

/// The arm with the best upper confidence bound on its reward, of arms
/// with these `(chosen, pulls, rewards)`: one never chosen first (a round
/// chooses for all its branches before any is merged), then one chosen
/// but not pulled yet; ties to the earlier (deterministic).
fn best(arms: &[(u64, u64, u64)]) -> usize {
    if let Some(fresh) = arms.iter().position(|&(chosen, _, _)| chosen == 0) {
        return fresh;
    }
    let pulls: u64 = arms.iter().map(|&(_, p, _)| p).sum();
    let score = |&(_, p, r): &(u64, u64, u64)| {
        if p == 0 {
            return f64::INFINITY;
        }
        r as f64 / p as f64 + (2.0 * (pulls as f64).ln() / p as f64).sqrt()
    };
    let scores: Vec<f64> = arms.iter().map(score).collect();
    (0..scores.len()).fold(0, |b, i| if scores[i] > scores[b] { i } else { b })
}

impl Bandit {
    /// Arms for a plan's `rules` (none without swarm, or for fewer than
    /// two rules) and for the target's `templates` (none for fewer than
    /// two): nothing to choose, no arms.
    pub(crate) fn new(rules: &[Rule], swarm: bool, templates: &[&str]) -> Bandit {
        let rules = if swarm && rules.len() >= 2 {
            rules
                .iter()
                .map(|r| RuleTally {
                    kind: r.kind.name().to_owned(),
                    landing: r.kind.landing().to_owned(),
                    ..Default::default()
                })
                .collect()
        } else {
            Vec::new()
        };
        let templates = if templates.len() >= 2 {
            templates.iter().map(|&t| TemplateTally { template: t.to_owned(), ..Default::default() }).collect()
        } else {
            Vec::new()
        };
        Bandit { rules, templates }
    }

    /// What a new line of descent runs, where the bandit chooses: the rules
    /// switched on (the best arm surely, the others by a fair coin each),
    /// and the template (the best arm).
    pub(crate) fn choose(&mut self, stream: &mut Stream) -> LineChoice {
        let mut choice = LineChoice::default();
        if !self.rules.is_empty() {
            let best = best(&self.rules.iter().map(|a| (a.chosen, a.pulls, a.rewards)).collect::<Vec<_>>());
            self.rules[best].chosen += 1;
            choice.rules = Some((0..self.rules.len()).map(|i| i == best || stream.chance(0.5)).collect());
        }
        if !self.templates.is_empty() {
            let best = best(&self.templates.iter().map(|a| (a.chosen, a.pulls, a.rewards)).collect::<Vec<_>>());
            self.templates[best].chosen += 1;
            choice.template = Some(self.templates[best].template.clone());
        }
        choice
    }

    /// A merged timeline (of a line the bandit chose for, or not), whose
    /// faults struck as `faults` says, and which found something new or not.
    pub(crate) fn rewarded(&mut self, timeline: &Timeline, faults: &FaultTally, fruitful: bool) {
        if let Some(on) = &timeline.rules_on {
            assert!(self.rules.is_empty() || on.len() == self.rules.len(), "a choice for each rule");
            for (arm, _) in self.rules.iter_mut().zip(on).filter(|(_, &on)| on) {
                let struck = faults.drawn.get(&arm.landing).is_some_and(|&n| n > 0);
                arm.pulls += 1;
                arm.rewards += u64::from(fruitful && struck);
            }
        }
        if let Some(arm) = timeline.template.as_ref().and_then(|t| self.templates.iter_mut().find(|a| &a.template == t))
        {
            arm.pulls += 1;
            arm.rewards += u64::from(fruitful);
        }
    }

    /// Each arm's counts, for the report.
    pub(crate) fn tally(&self) -> (Vec<RuleTally>, Vec<TemplateTally>) {
        (self.rules.clone(), self.templates.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Point;
    use hvsim_vmm::faults::schedule::DrawnKind;

    fn rules(kinds: &[DrawnKind]) -> Vec<Rule> {
        let plan = kinds
            .iter()
            .map(|k| format!("[[draw.fault]]\nkind = \"{}\"\nevery = \"1s\"\nduration = \"1s\"\n", k.name()))
            .collect::<String>();
        hvsim_vmm::faults::plan::FaultPlan::parse(&plan, 1, 3).unwrap().draw.rules
    }

    fn with_rules(on: &[bool]) -> Timeline {
        Timeline { rules_on: Some(on.to_vec()), ..Timeline::at(Point { events: 0, vtime_ns: 0 }) }
    }

    fn struck(landing: &str) -> FaultTally {
        FaultTally { drawn: [(landing.to_owned(), 1)].into(), ..FaultTally::default() }
    }

    /// Untried rules come first, in order; then the rule whose faults led
    /// somewhere new is chosen most, while the coins still switch the
    /// others on, and a rule that struck and found nothing loses its place.
    #[test]
    fn the_rule_that_finds_things_is_chosen_and_the_others_still_get_coins() {
        let mut b = Bandit::new(&rules(&[DrawnKind::Partition, DrawnKind::Kill, DrawnKind::Pause]), true, &[]);
        let mut stream = Stream::new(1, "test");
        for expected in 0..3 {
            let on = b.choose(&mut stream).rules.unwrap();
            assert!(on[expected], "untried rule {expected} first: {on:?}");
            b.rewarded(&with_rules(&[expected == 0, expected == 1, expected == 2]), &struck("node.kill"), true);
        }
        // Only kill's faults lead somewhere new.
        let mut others = [0, 0];
        for _ in 0..60 {
            let on = b.choose(&mut stream).rules.unwrap();
            others[0] += u32::from(on[0]);
            others[1] += u32::from(on[2]);
            b.rewarded(&with_rules(&on), &struck("node.kill"), true);
        }
        let t = b.tally().0;
        assert!(t[1].chosen > 45 && t[0].chosen + t[2].chosen < 15, "{t:?}");
        assert!(others.iter().all(|&n| n > 15 && n < 50), "coins switch the others: {others:?}");
        assert_eq!(t[1].rewards, t[1].pulls, "{t:?}");
        assert_eq!((t[0].rewards, t[2].rewards), (0, 0), "their faults never struck: {t:?}");
        // Nothing to choose without swarm, or with one rule.
        let nothing = LineChoice::default();
        assert_eq!(
            Bandit::new(&rules(&[DrawnKind::Partition, DrawnKind::Kill]), false, &[]).choose(&mut stream),
            nothing
        );
        assert_eq!(Bandit::new(&rules(&[DrawnKind::Partition]), true, &["one"]).choose(&mut stream), nothing);
    }

    /// Templates: each one first, in order, even when a round chooses for
    /// all its branches before any is merged; then the one whose timelines
    /// keep finding something new is chosen most, and UCB1's bound still
    /// tries the others now and then.
    #[test]
    fn the_template_that_finds_things_is_chosen_most_and_the_others_still_tried() {
        let mut b = Bandit::new(&[], false, &["a", "b", "c"]);
        let mut stream = Stream::new(1, "test");
        let ran = |t: &str| Timeline { template: Some(t.to_owned()), ..Timeline::at(Point { events: 0, vtime_ns: 0 }) };
        let round: Vec<LineChoice> = (0..3).map(|_| b.choose(&mut stream)).collect();
        for (choice, expected) in round.iter().zip(["a", "b", "c"]) {
            assert_eq!((&choice.rules, choice.template.as_deref()), (&None, Some(expected)));
            b.rewarded(&ran(expected), &FaultTally::default(), true);
        }
        for _ in 0..60 {
            let t = b.choose(&mut stream).template.unwrap();
            // Two timelines a line: only b's find something new.
            for _ in 0..2 {
                b.rewarded(&ran(&t), &FaultTally::default(), t == "b");
            }
        }
        let t = b.tally().1;
        assert!(t[1].chosen > 40 && t[0].chosen >= 3 && t[2].chosen >= 3, "{t:?}");
        assert_eq!(t.iter().map(|a| a.pulls).sum::<u64>(), 3 + 120);
        assert_eq!(t[1].rewards, t[1].pulls, "{t:?}");
        assert_eq!((t[0].rewards, t[2].rewards), (1, 1), "only their first: {t:?}");
        // A timeline of a template the bandit has no arm for counts for none.
        b.rewarded(&ran("z"), &FaultTally::default(), true);
        assert_eq!(b.tally().1, t);
    }
}
