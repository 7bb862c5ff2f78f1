//! When Test Composer winds down in a timeline: init's composer stops its
//! drivers and anytime commands and runs the template's last check
//! (`finally_`, else `eventually_`) early enough for the check to end
//! before the timeline's limit, so that every timeline the explorer judges
//! reaches its checks (Antithesis runs them after the drivers too).
//!
//! The explorer decides the time for each round of branches, from merged
//! knowledge only, so the worker count never changes it: the longest any
//! check took in earlier timelines of the exploration (a check the limit
//! cut counts with the time it had run, so a check that needs more gets
//! more in the next round), half as much again as margin, and a second for
//! the stopped commands to end; a quarter of the limit while no check has
//! run yet; never more than three quarters of it, so drivers always get a
//! share. The time goes into the timeline (bug records replay with it) and
//! into the machine, which answers init's question
//! (`Control::ComposerBudget`).

use hvsim_vmm::Vtime;

use crate::record::composer::{self, ComposerTally, Composition};
use crate::record::timeline::Span;

/// How the composer's wind-down is decided (`--composer-winddown`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Winddown {
    /// Learnt from the checks' durations (see the module's doc).
    #[default]
    Auto,
    /// This long before the timeline's limit.
    Before(Vtime),
    /// Never: drivers run until they end or the limit cuts them.
    Off,
}

/// Time for stopped commands to end before the check starts.
const GRACE: Vtime = Vtime(1_000_000_000);

impl Winddown {
    /// When a timeline leaving the root at `root` winds down, given what
    /// the exploration knows; `None` for timelines with no fixed end
    /// (slices) or with the wind-down off.
    pub fn at(self, span: Span, root: Vtime, known: &ComposerTally) -> Option<Vtime> {
        let Span::Whole { limit } = span else { return None };
        let limit = limit.nanos();
        let closing = match self {
            Winddown::Off => return None,
            Winddown::Before(d) => d.nanos(),
            Winddown::Auto => match longest_check(known) {
                Some(took) => took.saturating_add(took / 2).saturating_add(GRACE.nanos()),
                None => limit / 4,
            },
        }
        .min(limit / 4 * 3);
        Some(Vtime(root.nanos().saturating_add(limit - closing)))
    }
}

/// The longest any `finally_` or `eventually_` command ran so far.
fn longest_check(known: &ComposerTally) -> Option<u64> {
    known.commands.iter().filter(|(c, _)| composer::is_check(c)).map(|(_, t)| t.longest_ns).filter(|&ns| ns > 0).max()
}

/// How long each command of `composition` ran, for a timeline that ended
/// at `end`: a command still running then counts the time it had run.
pub fn durations(composition: &Composition, end: Vtime) -> Vec<(String, u64)> {
    let took = |r: &composer::CommandRun| r.ended_ns.unwrap_or(end.nanos()).saturating_sub(r.started_ns);
    composition.runs.iter().map(|r| (r.command.clone(), took(r))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::composer::CommandRun;

    const S: u64 = 1_000_000_000;

    fn whole(seconds: u64) -> Span {
        Span::Whole { limit: Vtime(seconds * S) }
    }

    fn tally(check_ns: u64, driver_ns: u64) -> ComposerTally {
        let mut t = ComposerTally::default();
        t.took("t/finally_check.sh", check_ns);
        t.took("t/parallel_driver_w.sh", driver_ns);
        t
    }

    #[test]
    fn a_quarter_of_the_limit_until_a_check_ran_then_what_checks_took() {
        let root = Vtime(5 * S);
        let none = ComposerTally::default();
        assert_eq!(Winddown::Auto.at(whole(60), root, &none), Some(Vtime(50 * S)), "45 s of drivers, 15 for the check");
        // Drivers' durations do not count; the check's, half again and a
        // second's grace.
        assert_eq!(Winddown::Auto.at(whole(60), root, &tally(2 * S, 50 * S)), Some(Vtime(61 * S)));
        // A check longer than the limit still leaves drivers a quarter.
        assert_eq!(Winddown::Auto.at(whole(60), root, &tally(100 * S, 0)), Some(Vtime(20 * S)));
        assert_eq!(Winddown::Before(Vtime(3 * S)).at(whole(60), root, &none), Some(Vtime(62 * S)));
        assert_eq!(Winddown::Off.at(whole(60), root, &tally(S, S)), None);
        assert_eq!(Winddown::Auto.at(Span::Slice(Vtime(S)), root, &none), None);
    }

    #[test]
    fn a_command_the_limit_cut_counts_the_time_it_ran() {
        let run = |command: &str, started_ns, ended_ns| CommandRun {
            run: 1,
            command: command.into(),
            service: "app".into(),
            started_ns,
            ended_ns,
            status: ended_ns.map(|_| 0),
            fault: false,
            stopped: false,
        };
        let c = Composition {
            template: "t".into(),
            runs: vec![run("t/parallel_driver_w.sh", 10, Some(40)), run("t/finally_check.sh", 50, None)],
            winddown_ns: None,
        };
        assert_eq!(
            durations(&c, Vtime(90)),
            [("t/parallel_driver_w.sh".to_owned(), 30), ("t/finally_check.sh".to_owned(), 40)]
        );
    }
}
