//! Snapshots kept in memory as a tree of page deltas.
//!
//! The root holds a full copy of RAM; every other node holds only the pages
//! that changed since its parent (found through the machine's dirty log).
//! Many branches from one parent therefore cost memory in proportion to
//! what each changed, and resetting the machine to any node copies back
//! only the pages that can differ: those dirtied since the machine's last
//! reset or snapshot, plus those in the deltas on the path between the
//! node the machine came from and the target.

use std::collections::{BTreeSet, HashMap};

use hvsim_vmm::machine::MachineSnapshot;
use hvsim_vmm::memory::PAGE_SIZE;
use hvsim_vmm::Machine;

/// A node of the tree.
pub type NodeId = usize;

struct Node {
    parent: Option<NodeId>,
    depth: usize,
    /// Pages that differ from the parent (the root: none; it is `base`).
    pages: HashMap<usize, Box<[u8]>>,
    machine: MachineSnapshot,
}

pub struct SnapshotTree {
    /// RAM at the root.
    base: Vec<u8>,
    nodes: Vec<Node>,
    /// The node whose RAM the machine holds, plus what its dirty log shows.
    current: NodeId,
}

/// What a reset did.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResetStats {
    pub pages_copied: usize,
}

impl SnapshotTree {
    /// Starts a tree with `machine`'s current state as the root (node 0),
    /// and turns on the machine's dirty log.
    pub fn new(machine: &mut Machine) -> hvsim_vmm::Result<SnapshotTree> {
        machine.enable_dirty_log()?;
        let snap = machine.capture()?;
        Ok(SnapshotTree {
            base: machine.ram().as_slice().to_vec(),
            nodes: vec![Node { parent: None, depth: 0, pages: HashMap::new(), machine: snap }],
            current: 0,
        })
    }

    pub fn root(&self) -> NodeId {
        0
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node the machine's state derives from.
    pub fn current(&self) -> NodeId {
        self.current
    }

    pub fn machine_snapshot(&self, id: NodeId) -> &MachineSnapshot {
        &self.nodes[id].machine
    }

    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        self.nodes[id].parent
    }

    /// Bytes of page contents the tree holds (root copy included).
    pub fn memory_bytes(&self) -> usize {
        self.base.len() + self.nodes.iter().map(|n| n.pages.len() * PAGE_SIZE).sum::<usize>()
    }

    /// Snapshots the machine as a child of the node it derives from; the
    /// machine continues from the new node.
    pub fn snapshot(&mut self, machine: &mut Machine) -> hvsim_vmm::Result<NodeId> {
        let dirty = machine.take_dirty_pages()?;
        let snap = machine.capture()?;
        let ram = machine.ram();
        let pages = dirty.into_iter().map(|p| (p, Box::from(ram.page(p)))).collect();
        let parent = self.current;
        let id = self.nodes.len();
        self.nodes.push(Node { parent: Some(parent), depth: self.nodes[parent].depth + 1, pages, machine: snap });
        tracing::debug!(node = id, parent, pages = self.nodes[id].pages.len(), "snapshot taken");
        self.current = id;
        Ok(id)
    }

    /// Puts `machine` back into node `target`'s state, RAM included.
    pub fn reset(&mut self, machine: &mut Machine, target: NodeId) -> hvsim_vmm::Result<ResetStats> {
        assert!(target < self.nodes.len(), "no snapshot node {target}");
        let mut touched: BTreeSet<usize> = machine.take_dirty_pages()?.into_iter().collect();
        // Pages in deltas between `current` and `target` may differ too.
        let (mut a, mut b) = (self.current, target);
        while a != b {
            let deeper = if self.nodes[a].depth >= self.nodes[b].depth { &mut a } else { &mut b };
            touched.extend(self.nodes[*deeper].pages.keys().copied());
            *deeper = self.nodes[*deeper].parent.expect("a non-root node has a parent");
        }
        let ram = machine.ram();
        for &page in &touched {
            ram.restore_page(page, self.page(target, page));
        }
        machine.reset_to(&self.nodes[target].machine)?;
        tracing::debug!(node = target, pages = touched.len(), "snapshot restored");
        self.current = target;
        Ok(ResetStats { pages_copied: touched.len() })
    }

    /// Page `page` as node `id` has it.
    pub fn page(&self, id: NodeId, page: usize) -> &[u8] {
        let mut n = Some(id);
        while let Some(i) = n {
            if let Some(bytes) = self.nodes[i].pages.get(&page) {
                return bytes;
            }
            n = self.nodes[i].parent;
        }
        &self.base[page * PAGE_SIZE..(page + 1) * PAGE_SIZE]
    }
}
