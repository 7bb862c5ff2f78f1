//! The snapshot tree kept within its memory budget between rounds. Within
//! a round, each branch holds its snapshots within its share of what the
//! budget had left (`BranchJob::memory_share`): past it, it takes no more
//! interval or draw snapshots; snapshots of what is new to the
//! exploration are always taken, and evicted here if need be.

use crate::run::state::State;
use crate::run::workers::Shared;

/// Keeps the snapshot tree within its budget, between rounds: evicts the
/// leaves the schedule values least (`Schedule::evict`), and the deltas
/// that only led to them. Decided from the tree's contents and the
/// schedule alone, so it never changes with the workers or the host.
pub(crate) fn evict(state: &mut State, shared: &Shared) {
    let mut tree = shared.tree.write().unwrap_or_else(|e| e.into_inner());
    let bytes = tree.memory_bytes() as u64;
    state.tree.peak_bytes = state.tree.peak_bytes.max(bytes);
    let root = tree.root();
    while tree.memory_bytes() as u64 > state.tree.budget_bytes {
        let Some(victim) = state.schedule.evict(&|id| id != root && tree.is_leaf(id)) else { break };
        tree.evict(victim);
        state.tree.evicted += 1;
        // Deltas that were only on the way to it.
        let mut up = tree.parent(victim);
        while let Some(id) = up.filter(|&id| id != root && tree.is_leaf(id)) {
            if state.schedule.holds(id) {
                break;
            }
            tree.evict(id);
            up = tree.parent(id);
        }
    }
    state.tree.bytes = tree.memory_bytes() as u64;
    state.tree.state_bytes = tree.state_bytes() as u64;
}
