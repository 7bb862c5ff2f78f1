//! Fault rules and Test Composer templates and commands chosen by what
//! they found (`--schedule bandit`): UCB1 bandits (Auer, Cesa-Bianchi and
//! Fischer, 2002) over a fault plan's drawn rules and a template's drivers
//! and anytime commands, layered on swarm testing (Groce et al., ISSTA
//! 2012), and over the target's templates.
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
//! when the timeline found something new. Of its drivers and anytime
//! commands, the line switches some on as it does rules (the composer
//! picks only among those); one is rewarded when it ran in a timeline that
//! found something new. Without the bandit, the composer draws its
//! template from the timeline's stream and keeps every command.
//!
//! The choices are made from merged knowledge and the explorer's seeded
//! stream, kept in the timeline (and so in a bug's record) and replayed:
//! an exploration stays a function of its seed, whatever the workers.

use hvsim_vmm::entropy::Stream;
use hvsim_vmm::faults::schedule::Rule;

use hvsim_guest_image::composer::Composer;

use crate::record::exploration::{CommandTally, RuleTally, TemplateTally};
use crate::record::faults::FaultTally;
use crate::record::timeline::{LineChoice, Timeline};

/// The bandits' arms: one per drawn rule, one per template, one per
/// driver or anytime command.
#[derive(Clone, Debug, Default)]
pub(crate) struct Bandit {
    pub rules: Vec<RuleTally>,
    pub templates: Vec<TemplateTally>,
    pub commands: Vec<CommandTally>,
}

/// The arm with the best upper confidence bound on its reward, of arms
/// with these `(chosen, pulls, rewards)`: one never chosen first (a round
/// chooses for all its branches before any is merged), then one chosen
/// but not pulled yet; ties to the earlier (deterministic).
fn best(arms: impl IntoIterator<Item = (u64, u64, u64)>) -> usize {
    let arms: Vec<(u64, u64, u64)> = arms.into_iter().collect();
    assert!(!arms.is_empty(), "a choice among none");
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
    /// two rules), for the target's templates (none for fewer than two)
    /// and for their drivers and anytime commands (a line chooses among
    /// its template's, if it has two or more).
    pub(crate) fn new(rules: &[Rule], swarm: bool, composer: Option<&Composer>) -> Bandit {
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
        let templates = composer.map_or(Vec::new(), Composer::templates);
        let templates = if templates.len() >= 2 {
            templates.iter().map(|&t| TemplateTally { template: t.to_owned(), ..Default::default() }).collect()
        } else {
            Vec::new()
        };
        // Only templates with two or more: a template's last is never off.
        let switchable = composer.map_or(Vec::new(), Composer::switchable);
        let several = |t: &str| switchable.iter().filter(|(of, _)| *of == t).count() >= 2;
        let commands = switchable
            .iter()
            .filter(|(template, _)| several(template))
            .map(|(template, command)| CommandTally {
                command: command.clone(),
                template: (*template).to_owned(),
                ..Default::default()
            })
            .collect();
        Bandit { rules, templates, commands }
    }

    /// What a new line of descent runs, where the bandit chooses: the rules
    /// switched on (the best arm surely, the others by a fair coin each),
    /// the template (the best arm), and of its commands those switched on
    /// (as the rules).
    pub(crate) fn choose(&mut self, stream: &mut Stream) -> LineChoice {
        let mut choice = LineChoice::default();
        if !self.rules.is_empty() {
            let best = best(self.rules.iter().map(|a| (a.chosen, a.pulls, a.rewards)));
            self.rules[best].chosen += 1;
            choice.rules = Some((0..self.rules.len()).map(|i| i == best || stream.chance(0.5)).collect());
        }
        if !self.templates.is_empty() {
            let best = best(self.templates.iter().map(|a| (a.chosen, a.pulls, a.rewards)));
            self.templates[best].chosen += 1;
            choice.template = Some(self.templates[best].template.clone());
        }
        // The line's template's commands (with one template, all of them;
        // none if it has fewer than two).
        let mine: Vec<usize> = (0..self.commands.len())
            .filter(|&i| choice.template.as_ref().is_none_or(|t| &self.commands[i].template == t))
            .collect();
        if !mine.is_empty() {
            let best = mine[best(mine.iter().map(|&i| &self.commands[i]).map(|a| (a.chosen, a.pulls, a.rewards)))];
            self.commands[best].chosen += 1;
            let on = mine.into_iter().filter(|&i| i == best || stream.chance(0.5));
            choice.commands = Some(on.map(|i| self.commands[i].command.clone()).collect());
        }
        choice
    }

    /// A merged timeline (of a line the bandit chose for, or not), whose
    /// faults struck as `faults` says, in which the commands `ran` ran,
    /// and which found something new or not.
    pub(crate) fn rewarded(&mut self, timeline: &Timeline, faults: &FaultTally, ran: &[&str], fruitful: bool) {
        if let Some(on) = &timeline.line.rules {
            assert!(self.rules.is_empty() || on.len() == self.rules.len(), "a choice for each rule");
            for (arm, _) in self.rules.iter_mut().zip(on).filter(|(_, &on)| on) {
                let struck = faults.drawn.get(&arm.landing).is_some_and(|&n| n > 0);
                arm.pulls += 1;
                arm.rewards += u64::from(fruitful && struck);
            }
        }
        if let Some(arm) =
            timeline.line.template.as_ref().and_then(|t| self.templates.iter_mut().find(|a| &a.template == t))
        {
            arm.pulls += 1;
            arm.rewards += u64::from(fruitful);
        }
        for arm in self
            .commands
            .iter_mut()
            .filter(|a| timeline.line.commands.as_ref().is_some_and(|on| on.contains(&a.command)))
        {
            arm.pulls += 1;
            arm.rewards += u64::from(fruitful && ran.contains(&arm.command.as_str()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::timeline::Point;
    use hvsim_vmm::faults::schedule::DrawnKind;

    fn rules(kinds: &[DrawnKind]) -> Vec<Rule> {
        let plan = kinds
            .iter()
            .map(|k| format!("[[draw.fault]]\nkind = \"{}\"\nevery = \"1s\"\nduration = \"1s\"\n", k.name()))
            .collect::<String>();
        hvsim_vmm::faults::plan::FaultPlan::parse(&plan, 1, 3).unwrap().draw.rules
    }

    fn composer(commands: &[(&str, &str)]) -> Composer {
        let c = commands.iter().map(|&(template, file)| hvsim_guest_image::composer::TestCommand {
            template: template.to_owned(),
            file: file.to_owned(),
            nodes: vec![0],
        });
        Composer { commands: c.collect() }
    }

    fn with_rules(on: &[bool]) -> Timeline {
        Timeline {
            line: LineChoice { rules: Some(on.to_vec()), ..LineChoice::default() },
            ..Timeline::at(Point { events: 0, vtime_ns: 0 })
        }
    }

    fn struck(landing: &str) -> FaultTally {
        FaultTally { drawn: [(landing.to_owned(), 1)].into(), ..FaultTally::default() }
    }

    /// Untried rules come first, in order; then the rule whose faults led
    /// somewhere new is chosen most, while the coins still switch the
    /// others on, and a rule that struck and found nothing loses its place.
    #[test]
    fn the_rule_that_finds_things_is_chosen_and_the_others_still_get_coins() {
        let mut b = Bandit::new(&rules(&[DrawnKind::Partition, DrawnKind::Kill, DrawnKind::Pause]), true, None);
        let mut stream = Stream::new(1, "test");
        for expected in 0..3 {
            let on = b.choose(&mut stream).rules.unwrap();
            assert!(on[expected], "untried rule {expected} first: {on:?}");
            b.rewarded(&with_rules(&[expected == 0, expected == 1, expected == 2]), &struck("node.kill"), &[], true);
        }
        // Only kill's faults lead somewhere new.
        let mut others = [0, 0];
        for _ in 0..60 {
            let on = b.choose(&mut stream).rules.unwrap();
            others[0] += u32::from(on[0]);
            others[1] += u32::from(on[2]);
            b.rewarded(&with_rules(&on), &struck("node.kill"), &[], true);
        }
        let t = b.rules.clone();
        assert!(t[1].chosen > 45 && t[0].chosen + t[2].chosen < 15, "{t:?}");
        assert!(others.iter().all(|&n| n > 15 && n < 50), "coins switch the others: {others:?}");
        assert_eq!(t[1].rewards, t[1].pulls, "{t:?}");
        assert_eq!((t[0].rewards, t[2].rewards), (0, 0), "their faults never struck: {t:?}");
        // Nothing to choose without swarm, or with one rule.
        let nothing = LineChoice::default();
        assert_eq!(
            Bandit::new(&rules(&[DrawnKind::Partition, DrawnKind::Kill]), false, None).choose(&mut stream),
            nothing
        );
        let one = composer(&[("one", "parallel_driver_a.sh"), ("one", "finally_check.sh")]);
        assert_eq!(Bandit::new(&rules(&[DrawnKind::Partition]), true, Some(&one)).choose(&mut stream), nothing);
    }

    /// Templates: each one first, in order, even when a round chooses for
    /// all its branches before any is merged; then the one whose timelines
    /// keep finding something new is chosen most, and UCB1's bound still
    /// tries the others now and then.
    #[test]
    fn the_template_that_finds_things_is_chosen_most_and_the_others_still_tried() {
        let drivers =
            composer(&[("a", "parallel_driver_x.sh"), ("b", "parallel_driver_x.sh"), ("c", "serial_driver_y.sh")]);
        let mut b = Bandit::new(&[], false, Some(&drivers));
        let mut stream = Stream::new(1, "test");
        let ran = |t: &str| Timeline {
            line: LineChoice { template: Some(t.to_owned()), ..LineChoice::default() },
            ..Timeline::at(Point { events: 0, vtime_ns: 0 })
        };
        let round: Vec<LineChoice> = (0..3).map(|_| b.choose(&mut stream)).collect();
        for (choice, expected) in round.iter().zip(["a", "b", "c"]) {
            assert_eq!((&choice.rules, choice.template.as_deref()), (&None, Some(expected)));
            b.rewarded(&ran(expected), &FaultTally::default(), &[], true);
        }
        for _ in 0..60 {
            let t = b.choose(&mut stream).template.unwrap();
            // Two timelines a line: only b's find something new.
            for _ in 0..2 {
                b.rewarded(&ran(&t), &FaultTally::default(), &[], t == "b");
            }
        }
        let t = b.templates.clone();
        assert!(t[1].chosen > 40 && t[0].chosen >= 3 && t[2].chosen >= 3, "{t:?}");
        assert_eq!(t.iter().map(|a| a.pulls).sum::<u64>(), 3 + 120);
        assert_eq!(t[1].rewards, t[1].pulls, "{t:?}");
        assert_eq!((t[0].rewards, t[2].rewards), (1, 1), "only their first: {t:?}");
        // A timeline of a template the bandit has no arm for counts for none.
        b.rewarded(&ran("z"), &FaultTally::default(), &[], true);
        assert_eq!(b.templates, t);
        assert!(b.commands.is_empty(), "one command a template: nothing to switch off");
    }

    /// Commands: a line switches on its template's drivers and anytime
    /// commands as it does rules, the best surely and the others by coins;
    /// one is rewarded only when it ran in a timeline that found something
    /// new. Setup and checks are never switched off, nor chosen.
    #[test]
    fn the_command_that_finds_things_is_switched_on_and_the_others_by_coins() {
        let c = composer(&[
            ("t", "anytime_probe.sh"),
            ("t", "finally_check.sh"),
            ("t", "first_setup.sh"),
            ("t", "parallel_driver_a.sh"),
            ("t", "parallel_driver_b.sh"),
        ]);
        let mut b = Bandit::new(&[], false, Some(&c));
        let names = ["t/anytime_probe.sh", "t/parallel_driver_a.sh", "t/parallel_driver_b.sh"];
        assert_eq!(b.commands.iter().map(|a| a.command.as_str()).collect::<Vec<_>>(), names);
        let mut stream = Stream::new(1, "test");
        let timeline = |on: &[String]| Timeline {
            line: LineChoice { commands: Some(on.to_vec()), ..LineChoice::default() },
            ..Timeline::at(Point { events: 0, vtime_ns: 0 })
        };
        let mut coins = [0, 0];
        for k in 0..60 {
            let choice = b.choose(&mut stream);
            assert_eq!((&choice.rules, &choice.template), (&None, &None));
            let on = choice.commands.expect("three commands to choose among");
            if k < 3 {
                assert!(on.contains(&names[k].to_owned()), "each first, in order: {on:?}");
            }
            coins[0] += u32::from(on.iter().any(|c| c == names[0]));
            coins[1] += u32::from(on.iter().any(|c| c == names[1]));
            // The drivers on run (the probe never does); only driver b's
            // runs find something new.
            let ran: Vec<&str> = on.iter().map(String::as_str).filter(|&c| c != names[0]).collect();
            b.rewarded(&timeline(&on), &FaultTally::default(), &ran, on.iter().any(|c| c == names[2]));
        }
        let t = &b.commands;
        // The probe never runs: after its first line it loses its place. A
        // runs beside b in most lines (b is surely on in most), so swarm's
        // credit goes to both, b's more.
        assert!(t[0].chosen == 1 && t[2].chosen > t[1].chosen, "{t:?}");
        assert_eq!(t[2].rewards, t[2].pulls, "{t:?}");
        assert_eq!(t[0].rewards, 0, "the probe never ran: {t:?}");
        assert!(t[1].rewards > 0 && t[1].rewards < t[1].pulls, "a ran beside b only sometimes: {t:?}");
        assert!(coins.iter().all(|&n| n > 15 && n < 50), "coins switch the others: {coins:?}");
    }
}
