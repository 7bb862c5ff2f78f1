//! Snapshots kept in memory as a tree of page deltas.
//!
//! The root holds a full copy of RAM; every other node holds only the pages
//! that changed since its parent (found through the machine's dirty log).
//! Many branches from one parent therefore cost memory in proportion to
//! what each changed, and resetting a machine to any node copies back only
//! the pages that can differ: those dirtied since the machine's last reset
//! or snapshot, those of snapshots it took that are not in the tree yet,
//! and those in the deltas on the path between the node the machine came
//! from and the target.
//!
//! The tree is shared: several machines (the explorer's workers, each on
//! its own thread) reset to its nodes at once through `&self`, each with a
//! [`Cursor`] that says where that machine stands. A machine's snapshots
//! are first [`Delta`]s, taken through `&self`; [`SnapshotTree::insert`]
//! adds them later, in an order the caller chooses (the explorer's branch
//! order, which does not depend on which worker ran what).
//!
//! A node keeps only the pages whose contents differ from its parent's
//! (`insert` drops the rest of a delta: a page the dirty log reported but
//! that holds what it held), so what the tree holds is a function of the
//! snapshots' contents and lines of descent, not of how the machines got
//! there: its size ([`SnapshotTree::memory_bytes`]) can decide what to keep.
//! The size counts everything a node holds: its pages, and its machine
//! state, whose console, messages and disk sectors are shared along a
//! line of descent and counted once however many nodes hold them
//! ([`MachineSnapshot::holdings`]). A leaf can be evicted: its pages and
//! machine state go, and only the numbers of its pages stay, for machines
//! that derive from it to reset from.

use std::collections::{BTreeSet, HashMap};

use hvsim_vmm::machine::{HostSettings, MachineSnapshot};
use hvsim_vmm::memory::PAGE_SIZE;
use hvsim_vmm::Machine;

/// A node of the tree.
pub type NodeId = usize;

struct Node {
    parent: Option<NodeId>,
    depth: usize,
    /// Pages that differ from the parent (the root: none; it is `base`).
    pages: HashMap<usize, Box<[u8]>>,
    /// `None` once evicted.
    machine: Option<MachineSnapshot>,
    /// Of an evicted node, the pages it had: a machine that derives from
    /// it may differ from its parent in them.
    evicted_pages: Vec<usize>,
    children: usize,
}

impl Node {
    /// The pages in which this node may differ from its parent.
    fn page_numbers(&self) -> impl Iterator<Item = usize> + '_ {
        self.pages.keys().copied().chain(self.evicted_pages.iter().copied())
    }
}

pub struct SnapshotTree {
    /// RAM at the root.
    base: Vec<u8>,
    nodes: Vec<Node>,
    /// Allocations the live nodes' machine states share: identity -> (how
    /// many hold it, its bytes).
    shared: HashMap<usize, (usize, usize)>,
    /// Bytes of the live nodes' machine states, shared ones counted once.
    state_bytes: usize,
}

/// Where one machine stands: the node its state derives from, and the
/// pages its snapshots not yet in the tree changed since then (its dirty
/// log shows only what changed since its last snapshot).
#[derive(Debug)]
pub struct Cursor {
    node: NodeId,
    pending: BTreeSet<usize>,
}

impl Cursor {
    /// The node the machine's state derives from.
    pub fn node(&self) -> NodeId {
        self.node
    }
}

/// A snapshot not (yet) in the tree: what changed since the machine's
/// previous snapshot or reset, and everything else about the machine.
pub struct Delta {
    pages: HashMap<usize, Box<[u8]>>,
    machine: MachineSnapshot,
}

impl Delta {
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Bytes it holds: its pages and its machine state (what that shares
    /// with its line, the console and message logs, counted by the tree).
    pub fn bytes(&self) -> usize {
        self.pages.len() * PAGE_SIZE + self.machine.holdings().own
    }
}

/// What a reset did.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResetStats {
    pub pages_copied: usize,
}

impl SnapshotTree {
    /// Starts a tree with `machine`'s current state as the root (node 0),
    /// and turns on the machine's dirty log.
    pub fn new(machine: &mut Machine) -> hvsim_vmm::Result<(SnapshotTree, Cursor)> {
        machine.enable_dirty_log()?;
        let snap = machine.capture()?;
        let mut tree = SnapshotTree {
            base: machine.ram().as_slice().to_vec(),
            nodes: Vec::new(),
            shared: HashMap::new(),
            state_bytes: 0,
        };
        tree.hold(&snap);
        tree.nodes.push(Node {
            parent: None,
            depth: 0,
            pages: HashMap::new(),
            machine: Some(snap),
            evicted_pages: Vec::new(),
            children: 0,
        });
        Ok((tree, Cursor { node: 0, pending: BTreeSet::new() }))
    }

    /// Counts what a node's machine state holds.
    fn hold(&mut self, snap: &MachineSnapshot) {
        let holdings = snap.holdings();
        self.state_bytes += holdings.own;
        for (id, bytes) in holdings.shared {
            let (holders, _) = self.shared.entry(id).or_insert((0, bytes));
            if *holders == 0 {
                self.state_bytes += bytes;
            }
            *holders += 1;
        }
    }

    /// Stops counting what an evicted node's machine state held.
    fn release(&mut self, snap: &MachineSnapshot) {
        let holdings = snap.holdings();
        self.state_bytes -= holdings.own;
        for (id, _) in holdings.shared {
            let (holders, bytes) = self.shared.get_mut(&id).expect("held when the node was added");
            *holders -= 1;
            if *holders == 0 {
                self.state_bytes -= *bytes;
                self.shared.remove(&id);
            }
        }
    }

    /// Another machine, in the root's state, run with `host`'s settings.
    pub fn machine_at_root(&self, host: &HostSettings) -> hvsim_vmm::Result<(Machine, Cursor)> {
        let mut machine = Machine::restore(self.machine_snapshot(0), host)?;
        let ram = machine.ram();
        assert_eq!(ram.pages() * PAGE_SIZE, self.base.len(), "a machine of the root's shape");
        for (page, bytes) in self.base.chunks_exact(PAGE_SIZE).enumerate() {
            ram.restore_page(page, bytes);
        }
        machine.enable_dirty_log()?;
        Ok((machine, Cursor { node: 0, pending: BTreeSet::new() }))
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

    pub fn machine_snapshot(&self, id: NodeId) -> &MachineSnapshot {
        self.nodes[id].machine.as_ref().unwrap_or_else(|| panic!("snapshot node {id} was evicted"))
    }

    /// Whether node `id` holds a snapshot (it was not evicted).
    pub fn is_live(&self, id: NodeId) -> bool {
        self.nodes[id].machine.is_some()
    }

    /// Whether node `id` is live and no live node derives from it.
    pub fn is_leaf(&self, id: NodeId) -> bool {
        self.is_live(id) && self.nodes[id].children == 0
    }

    /// Drops leaf `id`'s pages and state (not the root's). Its parent is a
    /// leaf again if `id` was its last child.
    pub fn evict(&mut self, id: NodeId) {
        assert!(id != self.root() && self.is_leaf(id), "only a leaf other than the root is evicted");
        let node = &mut self.nodes[id];
        node.evicted_pages = node.pages.drain().map(|(p, _)| p).collect();
        node.evicted_pages.sort_unstable();
        let snap = node.machine.take().expect("a leaf is live");
        let parent = node.parent.expect("a non-root node has a parent");
        self.nodes[parent].children -= 1;
        self.release(&snap);
        tracing::debug!(node = id, "snapshot evicted");
    }

    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        self.nodes[id].parent
    }

    /// Bytes the tree holds: page contents (root copy included) and the
    /// live nodes' machine states (see the module's comment).
    pub fn memory_bytes(&self) -> usize {
        self.base.len() + self.nodes.iter().map(|n| n.pages.len() * PAGE_SIZE).sum::<usize>() + self.state_bytes
    }

    /// Of [`SnapshotTree::memory_bytes`], the machine states' share.
    pub fn state_bytes(&self) -> usize {
        self.state_bytes
    }

    /// Snapshots the machine as a child of the node it derives from; the
    /// machine continues from the new node.
    pub fn snapshot(&mut self, cursor: &mut Cursor, machine: &mut Machine) -> hvsim_vmm::Result<NodeId> {
        assert!(cursor.pending.is_empty(), "the machine has snapshots outside the tree");
        let delta = self.capture(cursor, machine)?;
        let id = self.insert(cursor.node, delta);
        *cursor = Cursor { node: id, pending: BTreeSet::new() };
        Ok(id)
    }

    /// Snapshots the machine without adding it to the tree: the delta is
    /// relative to the machine's previous snapshot (a delta before it) or,
    /// if it took none since, the node it was reset to.
    pub fn capture(&self, cursor: &mut Cursor, machine: &mut Machine) -> hvsim_vmm::Result<Delta> {
        let dirty = machine.take_dirty_pages()?;
        let snap = machine.capture()?;
        let ram = machine.ram();
        cursor.pending.extend(&dirty);
        let pages = dirty.into_iter().map(|p| (p, Box::from(ram.page(p)))).collect();
        Ok(Delta { pages, machine: snap })
    }

    /// Adds `delta` as a child of `parent` (which must be the node or delta
    /// it was captured after), keeping only the pages that differ from the
    /// parent's.
    pub fn insert(&mut self, parent: NodeId, delta: Delta) -> NodeId {
        assert!(self.is_live(parent), "no live snapshot node {parent}");
        let id = self.nodes.len();
        let depth = self.nodes[parent].depth + 1;
        let Delta { mut pages, machine } = delta;
        pages.retain(|&p, bytes| self.page(parent, p) != &bytes[..]);
        tracing::debug!(node = id, parent, pages = pages.len(), "snapshot taken");
        self.nodes[parent].children += 1;
        self.hold(&machine);
        self.nodes.push(Node {
            parent: Some(parent),
            depth,
            pages,
            machine: Some(machine),
            evicted_pages: Vec::new(),
            children: 0,
        });
        id
    }

    /// Puts `machine` (standing at `cursor`) back into node `target`'s
    /// state, RAM included.
    pub fn reset(&self, cursor: &mut Cursor, machine: &mut Machine, target: NodeId) -> hvsim_vmm::Result<ResetStats> {
        assert!(self.is_live(target), "no live snapshot node {target}");
        let mut touched: BTreeSet<usize> = machine.take_dirty_pages()?.into_iter().collect();
        touched.append(&mut cursor.pending);
        // Pages in deltas between the cursor's node and `target` may differ too.
        let (mut a, mut b) = (cursor.node, target);
        while a != b {
            let deeper = if self.nodes[a].depth >= self.nodes[b].depth { &mut a } else { &mut b };
            touched.extend(self.nodes[*deeper].page_numbers());
            *deeper = self.nodes[*deeper].parent.expect("a non-root node has a parent");
        }
        let ram = machine.ram();
        for &page in &touched {
            ram.restore_page(page, self.page(target, page));
        }
        machine.pages_restored()?;
        machine.reset_to(self.machine_snapshot(target))?;
        tracing::debug!(node = target, pages = touched.len(), "snapshot restored");
        cursor.node = target;
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
