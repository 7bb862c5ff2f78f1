//! Draws the explorer decides inside a timeline, not only at its start.
//!
//! A branch from a draw point (`schedule.rs`) gives the pending draw one
//! untried value. If that value leads nowhere and the program draws again
//! (programs that retry a chain of random choices do: the Rust SDK vault
//! starts again from its first gate), the branch steers the draws that
//! follow: it replays the point's *lead* — the values that opened the way
//! to it, oldest first — and then gives the point's next untried value,
//! attempt after attempt, until something new shows (then the branch goes
//! on as any other, and the draw after the novelty is a new decision point)
//! or its values run out.
//!
//! The way to a draw is the values of the draws before it that each led
//! somewhere (a passing hit or a guidance followed before the next draw,
//! new or not), whoever chose them (the stream's are seen before the guest
//! reads them, `Machine::pending_draw_value`). It is *exact*
//! when it starts where a way is known — the root (empty), a draw point
//! with an exact lead, an attempt the branch steered — and a *guess* when
//! it starts at a draw of the stream's after one that led nowhere (taken
//! as the first of a new attempt). Values given after a guessed lead go
//! back to the point whatever they did, so a wrong guess costs the
//! branch's time and never a value; a steered attempt that leads to
//! something new proves its way, and a point learns an exact lead from the
//! first timeline that passes its novelty along an exact way
//! (`Schedule::learn_leads`).
//!
//! Ways are kept per process, and only the draw point's process is
//! steered: the guest kernel names the process that sent each SDK message
//! (`Message::sender`), so another process's draws between two attempts
//! (a background task drawing every few milliseconds) neither take the
//! point's values nor count as a new attempt. A raw guest names none: its
//! draws are all one program's.
//!
//! Every steered draw starts a new segment of the timeline, with its own
//! seed and the value taken ([`Steer`]): the record holds it, and a replay
//! follows it as it follows a draw point's value.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// A process, as the guest kernel names the sender of a message (its
/// tgid); `None` where the guest does not say (a raw guest): then every
/// draw is taken to be one program's.
pub type Process = Option<u32>;

/// Whether a branch makes a decision point of its first draw, before
/// anything is new in it: a snapshot with no draw point after it yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FirstDraw {
    /// Not: the snapshot has its draw point already, or stands where
    /// nothing was new (an interval).
    #[default]
    Unarmed,
    /// The first draw of the process whose novelty the snapshot stands
    /// after, or the last to speak before it (`None`: of any process).
    Armed(Process),
}

/// The values that open the way to a draw point, oldest first: the draws
/// of one process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lead {
    pub values: Vec<u64>,
    /// Known to be the way (it starts where a way is known, and each of
    /// its values led on), not a guess.
    pub exact: bool,
    /// The process that draws them (and the point's draw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Process,
}

/// A draw steered inside a branch: the timeline's next segment starts
/// here, re-seeded from `seed`, with the draw taking `value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Steer {
    pub seed: u64,
    pub value: u64,
}

/// The seed of the `k`-th segment a branch of seed `seed` steers (`k` from
/// 1): a pure function of the branch's seed.
pub(crate) fn seed(branch_seed: u64, k: u64) -> u64 {
    crate::record::timeline::derived_seed(b"hvsim/steer/v1", branch_seed, k)
}

/// One process's way to its next draw (see the module's comment).
#[derive(Clone, Debug)]
struct Way {
    chain: Vec<u64>,
    exact: bool,
    /// Something led on from its last draw.
    led_somewhere: bool,
}

/// One branch's steering, as it runs: a small state machine fed the
/// branch's draws and progress, each with the process that made it.
#[derive(Debug)]
pub(crate) struct Steering {
    /// The lead replayed before each of `values`; `None`: not steering.
    lead: Option<Lead>,
    /// The process whose draws it steers: the draw point's.
    process: Process,
    /// The draw point's values still to give.
    values: VecDeque<u64>,
    /// Values given after a guessed lead: given back at the end.
    guessed: Vec<u64>,
    /// The attempt under way: the lead's values still to give, then
    /// `value`.
    plan: VecDeque<u64>,
    value: Option<u64>,
    /// The attempt under way gave its value: the way is proven if what
    /// follows is new.
    attempt_done: bool,
    /// Each process's way to its next draw; one not seen yet starts known
    /// and empty at the root, and as a guess anywhere else.
    ways: BTreeMap<Process, Way>,
    at_root: bool,
    /// Draws steered so far.
    steered: u64,
}

impl Steering {
    /// A branch from the root (`at_root`), or from a draw point given
    /// `draw` with its `lead`, or from any other snapshot; `values`: the
    /// point's untried values it may give inside its timeline.
    pub fn new(at_root: bool, draw: Option<u64>, lead: Option<Lead>, values: Vec<u64>) -> Steering {
        let process = lead.as_ref().and_then(|l| l.process);
        // At the root the ways are known (empty); at a draw point its
        // process's is its lead and the value; any other starts at its
        // process's next draw.
        let at_root = at_root && draw.is_none();
        let mut ways = BTreeMap::new();
        if let Some(v) = draw {
            let (chain, exact) = match &lead {
                Some(l) => (l.values.iter().copied().chain([v]).collect(), l.exact),
                None => (vec![v], false),
            };
            ways.insert(process, Way { chain, exact, led_somewhere: false });
        }
        Steering {
            lead: lead.filter(|_| draw.is_some() && !values.is_empty()),
            process,
            values: values.into(),
            guessed: Vec::new(),
            plan: VecDeque::new(),
            value: None,
            attempt_done: false,
            ways,
            at_root,
            steered: 0,
        }
    }

    fn way_mut(&mut self, process: Process) -> &mut Way {
        let known = self.at_root;
        self.ways.entry(process).or_insert(Way { chain: Vec::new(), exact: known, led_somewhere: known })
    }

    fn way_of(&self, process: Process) -> Way {
        let known = self.at_root;
        self.ways.get(&process).cloned().unwrap_or(Way { chain: Vec::new(), exact: known, led_somewhere: known })
    }

    /// Something new showed: the branch stops steering (what it found is
    /// where the next decisions are).
    pub fn progress(&mut self) {
        if let Some(v) = self.value.take() {
            // Its attempt never reached it: later branches try it.
            self.values.push_front(v);
        }
        self.lead = None;
        self.plan.clear();
    }

    /// `process`'s last draw led somewhere: a passing hit or a guidance
    /// of its followed it, new or not (new coverage edges alone do not
    /// count: a failing try's first run shows some).
    pub fn onward(&mut self, process: Process) {
        let proven = process == self.process && self.attempt_done;
        if proven {
            // The attempt proves its lead: its values were real tries.
            self.guessed.clear();
            if let Some(l) = &mut self.lead {
                l.exact = true;
            }
        }
        let way = self.way_mut(process);
        way.exact |= proven;
        way.led_somewhere = true;
    }

    /// A draw by `process` the branch does not make a decision point of:
    /// the value to give it, if the branch steers it (else call
    /// [`Self::stream_draw`]). Only the point's process is steered: the
    /// values are tries of its draw, not of others'.
    pub fn draw(&mut self, process: Process) -> Option<u64> {
        if process != self.process {
            return None;
        }
        let lead = self.lead.as_ref()?;
        if self.plan.is_empty() && self.value.is_none() {
            let next = self.values.pop_front()?;
            self.plan = lead.values.iter().copied().collect();
            self.value = Some(next);
            let exact = lead.exact;
            let way = self.way_mut(process);
            way.chain.clear();
            way.exact = exact;
            self.attempt_done = false;
        }
        let value = match self.plan.pop_front() {
            Some(v) => v,
            None => {
                let v = self.value.take().expect("an attempt ends with the point's value");
                if !self.lead.as_ref().is_some_and(|l| l.exact) {
                    self.guessed.push(v);
                }
                self.attempt_done = true;
                v
            }
        };
        let way = self.way_mut(process);
        way.chain.push(value);
        way.led_somewhere = false;
        self.steered += 1;
        Some(value)
    }

    /// A draw by `process` the stream decides, taking `value` (`None`: not
    /// seen).
    pub fn stream_draw(&mut self, process: Process, value: Option<u64>) {
        if process == self.process {
            if self.plan.is_empty() && self.value.is_none() {
                // Out of values (or never steering): the stream decides from now on.
                self.lead = None;
            }
            self.attempt_done = false;
        }
        let way = self.way_mut(process);
        if !way.led_somewhere {
            // The last draw led nowhere: a new attempt starts here, maybe.
            way.chain.clear();
            way.exact = false;
        }
        way.led_somewhere = false;
        match value {
            Some(v) => way.chain.push(v),
            None => {
                way.chain.clear();
                way.exact = false;
            }
        }
    }

    /// The lead of a draw point armed at `process`'s draw now pending: its
    /// way here if its last draw led somewhere; else this draw is taken to
    /// start a new attempt (a guess, empty).
    pub fn lead(&self, process: Process) -> Lead {
        let way = self.way_of(process);
        if way.led_somewhere {
            Lead { values: way.chain, exact: way.exact, process }
        } else {
            Lead { values: Vec::new(), exact: false, process }
        }
    }

    /// `process`'s way to here, if it is exact: what draw points reached
    /// otherwise learn their lead from.
    pub fn way(&self, process: Process) -> Option<Lead> {
        let way = self.way_of(process);
        (way.led_somewhere && way.exact).then_some(Lead { values: way.chain, exact: true, process })
    }

    /// Draws steered so far (the `k` of the next one's [`seed`] is this + 1).
    pub fn steered(&self) -> u64 {
        self.steered
    }

    /// The draw point's values to give back to it, for later branches:
    /// those not given, and those given after a guessed lead.
    pub fn unused(&self) -> Vec<u64> {
        self.value.iter().chain(&self.values).chain(&self.guessed).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(values: &[u64]) -> Lead {
        Lead { values: values.to_vec(), exact: true, process: None }
    }

    fn guess(values: &[u64]) -> Lead {
        Lead { values: values.to_vec(), exact: false, process: None }
    }

    #[test]
    fn attempts_replay_the_lead_then_give_the_next_untried_value() {
        let mut s = Steering::new(false, Some(0), Some(exact(&[3, 5])), vec![1, 2, 3]);
        s.onward(None);
        assert_eq!(s.lead(None), exact(&[3, 5, 0]), "the branch's own value ends its way");
        let given: Vec<Option<u64>> = (0..7).map(|_| s.draw(None)).collect();
        assert_eq!(given, [Some(3), Some(5), Some(1), Some(3), Some(5), Some(2), Some(3)]);
        assert_eq!(s.unused(), [3], "3 was not given yet");
        assert_eq!(s.steered(), 7);
        // Novelty ends the steering, and the untried value goes back.
        s.onward(None);
        s.progress();
        assert_eq!(s.unused(), [3]);
        assert_eq!(s.way(None), Some(exact(&[3])), "the way to the novelty: the attempt's values");
        assert_eq!(s.draw(None), None, "later draws are the stream's");
    }

    #[test]
    fn the_streams_draws_extend_the_way_while_they_lead_somewhere() {
        let mut s = Steering::new(true, None, None, vec![]);
        assert_eq!((s.way(None), s.lead(None)), (Some(exact(&[])), exact(&[])), "at the root the way is known");
        s.stream_draw(None, Some(7));
        s.onward(None);
        s.stream_draw(None, Some(8));
        s.onward(None);
        assert_eq!(s.way(None), Some(exact(&[7, 8])), "each led somewhere");
        // After a draw that led nowhere, a draw is taken to start an attempt.
        s.stream_draw(None, Some(9));
        assert_eq!((s.way(None), s.lead(None)), (None, guess(&[])));
        s.stream_draw(None, Some(10));
        s.onward(None);
        s.stream_draw(None, Some(11));
        s.onward(None);
        assert_eq!((s.way(None), s.lead(None)), (None, guess(&[10, 11])));
        // Away from the root, the first draw is a guess too.
        assert_eq!(Steering::new(false, None, None, vec![]).lead(None), guess(&[]));
    }

    #[test]
    fn a_guessed_lead_spends_no_value_until_its_attempt_proves_it() {
        let mut s = Steering::new(false, Some(0), Some(guess(&[11])), vec![1, 2, 3]);
        assert_eq!((s.draw(None), s.draw(None)), (Some(11), Some(1)));
        assert_eq!(s.unused(), [2, 3, 1], "values given after a guess go back");
        // What follows the attempt is a step on: its lead is proven, and
        // the values it gave were real tries.
        s.onward(None);
        assert_eq!(s.unused(), [2, 3]);
        assert_eq!(s.way(None), Some(exact(&[11, 1])));
        assert_eq!((s.draw(None), s.draw(None)), (Some(11), Some(2)));
        assert_eq!(s.unused(), [3], "later attempts spend their values");
    }

    #[test]
    fn values_run_out_and_the_stream_takes_over() {
        let mut s = Steering::new(false, Some(0), Some(exact(&[])), vec![1]);
        assert_eq!(s.draw(None), Some(1));
        assert_eq!(s.draw(None), None);
        s.stream_draw(None, Some(42));
        assert_eq!(s.draw(None), None);
        assert_eq!(s.unused(), Vec::<u64>::new());
        assert_eq!(s.way(None), None, "the stream decided a draw after one that led nowhere");
        let mut blind = Steering::new(false, Some(4), None, vec![1, 2]);
        assert_eq!((blind.draw(None), blind.unused()), (None, vec![1, 2]), "no lead, no steering");
    }

    #[test]
    fn only_the_points_process_is_steered_and_each_process_has_its_own_way() {
        let (a, b) = (Some(10), Some(20));
        let lead = Lead { values: vec![3], exact: true, process: a };
        let mut s = Steering::new(false, Some(0), Some(lead), vec![1, 2]);
        // Another process's draws take the stream's values and spend none
        // of the point's, nor break its attempt.
        assert_eq!(s.draw(b), None);
        s.stream_draw(b, Some(5));
        assert_eq!((s.draw(a), s.draw(a)), (Some(3), Some(1)));
        assert_eq!(s.draw(b), None);
        s.stream_draw(b, Some(6));
        s.onward(b);
        assert_eq!(s.lead(b), Lead { values: vec![6], exact: false, process: b }, "b's own way, a guess");
        assert_eq!(s.unused(), [2], "b's progress proves nothing of a's attempt");
        s.onward(a);
        assert_eq!(s.way(a), Some(Lead { values: vec![3, 1], exact: true, process: a }));
        assert_eq!(s.way(b), None, "b's way started after a draw that led nowhere");
        assert_eq!(s.lead(None), Lead { values: vec![], exact: false, process: None });
    }

    #[test]
    fn seeds_follow_the_branch_seed_and_the_count() {
        assert_eq!(seed(7, 1), seed(7, 1));
        assert_ne!(seed(7, 1), seed(7, 2));
        assert_ne!(seed(7, 1), seed(8, 1));
    }
}
