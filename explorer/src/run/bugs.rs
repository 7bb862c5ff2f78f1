//! The bugs of one exploration: one record per bug id (the same failure
//! seen again is an occurrence, not a new bug), each first *found* and then
//! *confirmed* once its timeline has been executed again as many times as
//! asked (`--reexecute`).
//!
//! One rule for several failures in one timeline: the first is the bug;
//! whatever fails after it in that timeline (a service exiting with an
//! error, another assertion) is a consequence, kept in the bug's record
//! (`after`), never a bug of its own.

use std::collections::HashMap;

use hvsim_guest_image::world::World;

use crate::record::assertions::Assertions;
use crate::record::bug::{BugKind, BugRecord, Later};
use crate::record::story;
use crate::record::timeline::Timeline;
use crate::run::branch::Failure;
use crate::run::replay::ReplayOutcome;
use crate::Target;

/// What every bug record of one exploration shares.
pub(crate) struct BugContext<'a> {
    pub target: &'a Target,
    pub world: &'a World,
    pub seed: u64,
}

#[derive(Default)]
pub(crate) struct Bugs {
    /// In the order they were found.
    pub records: Vec<BugRecord>,
    by_id: HashMap<String, usize>,
    /// Re-executions that confirm a new bug.
    wanted: u32,
}

/// A timeline's first failure, as [`Bugs::record`] filed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Filed {
    /// Index into [`Bugs::records`].
    pub index: usize,
    /// A bug never seen before (otherwise one more occurrence of it).
    pub new: bool,
}

impl Bugs {
    pub fn new(wanted: u32) -> Bugs {
        Bugs { wanted, ..Bugs::default() }
    }

    /// Files the first failure of a timeline: a new bug, or one more
    /// occurrence of a known one. A new assertion bug is linked from its
    /// property.
    pub fn record(
        &mut self,
        kind: BugKind,
        timeline: Timeline,
        failure: &Failure,
        assertions: &mut Assertions,
        cx: &BugContext,
        branch: u64,
    ) -> Filed {
        let id = kind.id();
        if let Some(&index) = self.by_id.get(&id) {
            self.records[index].occurrences += 1;
            return Filed { index, new: false };
        }
        tracing::debug!(bug = %id, at = failure.at.events, "{}", kind.describe());
        if let BugKind::Assertion { id: assertion, .. } = &kind {
            link(assertions, assertion, &id);
        }
        let mut record = BugRecord::new(
            kind,
            failure.at,
            timeline,
            cx.target.clone(),
            cx.seed,
            branch,
            cx.world.clone(),
            failure.fingerprint.clone(),
            self.wanted,
        );
        assert_eq!(record.id, id);
        record.console_tail = failure.console_tail.clone();
        record.faults = failure.faults.clone();
        record.composer = failure.composer.clone();
        record.buggify = failure.buggify.clone();
        record.story = failure.story.clone();
        record.story.push(story::failure(failure.at.vtime_ns, &record.summary));
        if !failure.outside_seed.is_empty() {
            record.reached_from_outside(&failure.outside_seed);
        }
        let index = self.records.len();
        self.by_id.insert(id, index);
        self.records.push(record);
        Filed { index, new: true }
    }

    /// Something failed after `first` in the same timeline: kept in a new
    /// bug's record, and a failed property links to the bug it followed.
    pub fn later(&mut self, first: Filed, kind: &BugKind, later: Later, assertions: &mut Assertions) {
        let record = &mut self.records[first.index];
        if let BugKind::Assertion { id: assertion, .. } = kind {
            link(assertions, assertion, &record.id);
        }
        if first.new && record.after.len() < MAX_LATER {
            record.after.push(later);
        }
    }

    /// Counts a re-execution of bug `index`'s timeline; true if that
    /// confirmed it.
    pub fn reexecuted(&mut self, index: usize, outcome: &ReplayOutcome) -> bool {
        let record = &mut self.records[index];
        let was = record.reproduction.confirmed();
        outcome.count_in(record);
        !was && record.reproduction.confirmed()
    }
}

/// Consequences kept in one record: the first few tell the story.
const MAX_LATER: usize = 32;

fn link(assertions: &mut Assertions, assertion: &str, bug: &str) {
    if let Some(r) = assertions.by_id.get_mut(assertion) {
        r.bug.get_or_insert_with(|| bug.to_owned());
    }
}
