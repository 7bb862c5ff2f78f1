//! Returning to a draw that came before something new.
//!
//! A draw point (`schedule.rs`) is made of the first draw after something
//! new: the guess that the draw after progress decides the next step. That
//! guess fails where the draw that decides comes later — after another
//! process's draws, or seconds after the progress that led to it. There,
//! what shows which draw decides is what follows it: a `sometimes`-type
//! assertion evaluated for the first time, unsatisfied, right after a draw
//! is most likely guarded by that draw (`if !ok { continue }`).
//!
//! So when a branch sees such an assertion and the last draw before it
//! was one its stream decided (not a draw point, not a value the branch
//! steered), the explorer *returns to that draw*: a later branch, a
//! revisit, runs the same timeline again from the same snapshot — the same
//! seed, the same value at its start, the same steered draws — and stops
//! at that draw, before its value is consumed, where it takes a snapshot
//! that becomes a draw point. Branches from there try the draw's other
//! values in the very program state that drew it, instead of counting on
//! the program to draw again in the same state.
//!
//! A revisit re-runs a prefix of a timeline already merged: it finds
//! nothing new and counts as a branch (it is work done), but not as a
//! timeline of the discovery estimates, the bandit or the claims (it would
//! count the same features twice). Each branch asks for one revisit at most,
//! so revisits cost at most half of the branches. Exactness rests on
//! determinism: the same start and the same decisions reach the same draw,
//! and a revisit that does not (it would be a bug) ends without a node and
//! says so in the log.

use std::collections::BTreeMap;

use crate::run::steer::{Process, Steer};

/// Where a revisit stops, and how it gets there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Revisit {
    /// The draw to stop at: its place among the branch's draws (1 is the
    /// first draw after the branch's start).
    pub draw: u64,
    /// The draws the branch steered before it, by place, with the seed and
    /// value each took: the revisit takes them again.
    pub steers: Vec<(u64, Steer)>,
    /// The assertions first reached right after the draw: the draw point
    /// stands before them (what the schedule weighs it by).
    pub approached: Vec<String>,
    /// Stops before the draw where the branch reached a new feature that
    /// is progress: how much deeper than its start the draw point stands
    /// (the revisit finds nothing new on the way to say so).
    pub deeper: u32,
}

/// A branch's draws as it runs, and the revisit it asks for.
#[derive(Debug, Default)]
pub(crate) struct Draws {
    /// Draws so far (the branch's start draw not counted).
    count: u64,
    /// Each process's last draw, if its stream decided it (an assertion
    /// follows its own process's draw, whatever others drew meanwhile).
    last_streamed: BTreeMap<Process, Option<u64>>,
    steers: Vec<(u64, Steer)>,
    deeper: u32,
    wanted: Option<Revisit>,
}

impl Draws {
    /// Assertions reached for the first time without being satisfied,
    /// by `process` before its next draw: its draw before them is worth
    /// returning to, if the stream decided it (the first such, once per
    /// branch).
    pub fn approached(&mut self, process: Process, ids: &[String]) {
        if ids.is_empty() || self.wanted.is_some() {
            return;
        }
        if let Some(&Some(draw)) = self.last_streamed.get(&process) {
            let steers = self.steers.clone();
            self.wanted = Some(Revisit { draw, steers, approached: ids.to_vec(), deeper: self.deeper });
        }
    }

    /// A draw by `process` the guest is waiting on: its place; `decided`:
    /// made a draw point, or steered (`steer`).
    pub fn drawn(&mut self, process: Process, decided: bool, steer: Option<Steer>) -> u64 {
        self.count += 1;
        self.last_streamed.insert(process, (!decided && steer.is_none()).then_some(self.count));
        if let Some(s) = steer {
            self.steers.push((self.count, s));
        }
        self.count
    }

    /// A stop reached a new feature that is progress.
    pub fn deeper(&mut self) {
        self.deeper += 1;
    }

    /// The place the next draw will have.
    pub fn next(&self) -> u64 {
        self.count + 1
    }

    pub fn wanted(self) -> Option<Revisit> {
        self.wanted
    }
}

impl Revisit {
    /// The steered draw a revisit takes again at place `draw`.
    pub fn steer_at(&self, draw: u64) -> Option<Steer> {
        self.steers.iter().find(|(at, _)| *at == draw).map(|(_, s)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_draw_before_a_first_unsatisfied_assertion_is_revisited_if_its_stream_decided_it() {
        let mut d = Draws::default();
        // A draw point, then an assertion: nothing to return to.
        d.drawn(None, true, None);
        d.approached(None, &["a".into()]);
        assert_eq!(d.wanted, None);
        // A steered draw, then a streamed one, then an assertion.
        let s = Steer { seed: 7, value: 3 };
        d.drawn(None, false, Some(s));
        d.deeper();
        d.drawn(None, false, None);
        assert_eq!(d.next(), 4);
        d.approached(None, &[]);
        assert_eq!(d.wanted, None, "nothing reached");
        d.approached(None, &["b".into()]);
        d.drawn(None, false, None);
        d.approached(None, &["c".into()]);
        let r = d.wanted().unwrap();
        let first = Revisit { draw: 3, steers: vec![(2, s)], approached: vec!["b".into()], deeper: 1 };
        assert_eq!(r, first, "the first only");
        assert_eq!((r.steer_at(2), r.steer_at(3)), (Some(s), None));
    }

    #[test]
    fn an_assertion_returns_to_its_own_processs_draw() {
        let mut d = Draws::default();
        let (a, b) = (Some(1), Some(2));
        d.drawn(a, false, None);
        d.drawn(b, false, None);
        d.drawn(b, true, None);
        d.approached(b, &["b".into()]);
        assert_eq!(d.wanted, None, "b's last draw was a draw point");
        d.approached(a, &["a".into()]);
        assert_eq!(d.wanted().map(|r| r.draw), Some(1), "a's draw, before b's two");
    }
}
