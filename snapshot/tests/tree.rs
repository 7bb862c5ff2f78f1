//! In-process resets through the snapshot tree give exactly what a fresh
//! restore gives, however often they are repeated and whichever node they go
//! to (issue: "Whole-VM snapshots", must-hold 3).

use std::time::Duration;

use hvsim_guest_image::raw;
use hvsim_snapshot::{file, SnapshotTree};
use hvsim_vmm::host::{open_kvm, HostProfile};
use hvsim_vmm::machine::HostSettings;
use hvsim_vmm::{Machine, MachineConfig, Stop, Vtime};

fn kvm_available() -> bool {
    match std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm") {
        Ok(_) => true,
        Err(e) => {
            if std::env::var("HVSIM_REQUIRE_KVM").as_deref() == Ok("1") {
                panic!("HVSIM_REQUIRE_KVM=1 but /dev/kvm cannot be opened: {e}");
            }
            eprintln!("skipping KVM test: /dev/kvm cannot be opened: {e}");
            false
        }
    }
}

fn machine(guest: &str, seed: u64) -> (Machine, HostSettings) {
    let host = HostProfile::detect(&open_kvm().unwrap());
    let probes = raw::probes::HostProbes::run(&host).unwrap();
    let mut config = MachineConfig::raw(raw::find(guest).unwrap().build(), seed, &host);
    config.spec.ram_size = 4 << 20;
    probes.configure(&mut config.host);
    config.host.watchdog = Some(Duration::from_secs(5));
    (Machine::new(&config).unwrap(), config.host)
}

/// Trace hash, memory hash and console after running to `until`.
fn result(m: &mut Machine, until: Vtime) -> (String, [u8; 32], Vec<u8>) {
    let stop = m.run_until(until).unwrap();
    assert!(matches!(stop, Stop::Deadline | Stop::Ended(_)), "{stop:?}");
    (m.trace_state().hash_hex(), m.ram().hash(), m.console().to_vec())
}

const AT: Vtime = Vtime(1_000_000);
const BRANCH_END: Vtime = Vtime(1_100_000);

#[test]
fn a_thousand_resets_equal_a_fresh_restore() {
    if !kvm_available() {
        return;
    }
    let (mut m, host) = machine("timer", 1);
    assert_eq!(m.run_until(AT).unwrap(), Stop::Deadline);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("root.snap");
    file::save(&path, &mut m, "timer", 1, &Default::default()).unwrap();
    let (tree, mut at) = SnapshotTree::new(&mut m).unwrap();

    let mut fresh = file::load(&path).unwrap().restore(&host).unwrap();
    let expected = result(&mut fresh, BRANCH_END);
    assert!(fresh.trace_state().events > AT.0 / 1000 + 50, "the branch must do real work");

    for i in 0..1000 {
        let stats = tree.reset(&mut at, &mut m, tree.root()).unwrap();
        let got = result(&mut m, BRANCH_END);
        assert!(got == expected, "reset {i} (copied {} pages) diverged from a fresh restore", stats.pages_copied);
    }
}

#[test]
fn resets_between_sibling_branches_are_exact() {
    if !kvm_available() {
        return;
    }
    // The entropy guest's output depends on its stream, so re-seeding after
    // the root gives two different branches.
    let (mut m, _) = machine("entropy", 3);
    let (mut tree, mut at) = SnapshotTree::new(&mut m).unwrap();
    let root = tree.root();
    let end = Vtime::from_secs(1);

    m.reseed(10).unwrap();
    assert_eq!(m.run_until(Vtime(20_000)).unwrap(), Stop::Deadline);
    let a = tree.snapshot(&mut at, &mut m).unwrap();
    let from_a = result(&mut m, end);

    tree.reset(&mut at, &mut m, root).unwrap();
    m.reseed(20).unwrap();
    assert_eq!(m.run_until(Vtime(20_000)).unwrap(), Stop::Deadline);
    let b = tree.snapshot(&mut at, &mut m).unwrap();
    let from_b = result(&mut m, end);
    assert_ne!(from_a.2, from_b.2, "different seeds must give different output");
    assert_eq!((tree.parent(a), tree.parent(b)), (Some(root), Some(root)));

    for _ in 0..5 {
        tree.reset(&mut at, &mut m, a).unwrap();
        assert!(result(&mut m, end) == from_a);
        tree.reset(&mut at, &mut m, b).unwrap();
        assert!(result(&mut m, end) == from_b);
    }
    // Memory kept: the root's copy plus a few delta pages, not two more copies.
    assert!(tree.memory_bytes() < (4 << 20) + 64 * 4096, "{}", tree.memory_bytes());
}

#[test]
fn machines_sharing_a_tree_reach_each_others_snapshots() {
    if !kvm_available() {
        return;
    }
    let (mut m, host) = machine("entropy", 3);
    let (mut tree, mut at) = SnapshotTree::new(&mut m).unwrap();
    let root = tree.root();
    let (mut other, mut other_at) = tree.machine_at_root(&host).unwrap();
    let end = Vtime::from_secs(1);

    // A second machine made from the root runs as the first does.
    m.reseed(10).unwrap();
    other.reseed(10).unwrap();
    let straight = result(&mut m, end);
    assert!(result(&mut other, end) == straight, "a machine at the root runs as the root's machine");

    // Two snapshots taken on `other` as deltas, added to the tree later.
    tree.reset(&mut other_at, &mut other, root).unwrap();
    other.reseed(20).unwrap();
    assert_eq!(other.run_until(Vtime(20_000)).unwrap(), Stop::Deadline);
    let first = tree.capture(&mut other_at, &mut other).unwrap();
    let from_first = result(&mut other, Vtime(40_000));
    let second = tree.capture(&mut other_at, &mut other).unwrap();
    let from_second = result(&mut other, end);
    assert!(first.pages() > 0 && second.pages() > 0, "each delta holds what changed");
    let a = tree.insert(root, first);
    let b = tree.insert(a, second);
    assert_eq!((tree.parent(a), tree.parent(b)), (Some(root), Some(a)));

    // The first machine goes to them, and `other` (its snapshots' pages
    // still pending in its cursor) goes back to them too.
    for _ in 0..3 {
        tree.reset(&mut at, &mut m, b).unwrap();
        assert!(result(&mut m, end) == from_second);
        tree.reset(&mut other_at, &mut other, a).unwrap();
        assert!(result(&mut other, Vtime(40_000)) == from_first);
        tree.reset(&mut at, &mut m, a).unwrap();
        assert!(result(&mut m, Vtime(40_000)) == from_first);
        tree.reset(&mut other_at, &mut other, root).unwrap();
        other.reseed(10).unwrap();
        assert!(result(&mut other, end) == straight);
    }
}

/// A leaf can be evicted: its memory goes, the nodes it derives from stay
/// exact, and a machine that stood on it resets anywhere exactly. A node
/// keeps only pages that differ from its parent's, so a snapshot of an
/// unchanged machine holds no page.
#[test]
fn evicted_leaves_free_their_pages_and_resets_stay_exact() {
    if !kvm_available() {
        return;
    }
    let (mut m, _) = machine("entropy", 3);
    let (mut tree, mut at) = SnapshotTree::new(&mut m).unwrap();
    let root = tree.root();
    let end = Vtime::from_secs(1);
    m.reseed(10).unwrap();
    assert_eq!(m.run_until(Vtime(20_000)).unwrap(), Stop::Deadline);
    let a = tree.snapshot(&mut at, &mut m).unwrap();
    let from_a = result(&mut m, end);
    tree.reset(&mut at, &mut m, a).unwrap();
    let same = tree.snapshot(&mut at, &mut m).unwrap();
    assert_eq!(tree.parent(same), Some(a));
    let pages = |tree: &SnapshotTree| tree.memory_bytes() - tree.state_bytes();
    let with_same = pages(&tree);
    assert!(!tree.is_leaf(a) && tree.is_leaf(same));
    m.reseed(30).unwrap();
    assert_eq!(m.run_until(Vtime(40_000)).unwrap(), Stop::Deadline);
    let b = tree.snapshot(&mut at, &mut m).unwrap();
    result(&mut m, end);
    let before = tree.memory_bytes();
    assert!(before > with_same, "b's pages");
    // The machine stands on b (its last snapshot), which goes.
    tree.evict(b);
    assert!(!tree.is_live(b) && tree.memory_bytes() < before);
    tree.evict(same);
    assert!(tree.is_leaf(a), "a lost its last child");
    assert_eq!(pages(&tree), with_same, "a snapshot of an unchanged machine held no page");
    for _ in 0..3 {
        tree.reset(&mut at, &mut m, a).unwrap();
        assert!(result(&mut m, end) == from_a);
        tree.reset(&mut at, &mut m, root).unwrap();
        m.reseed(10).unwrap();
        assert_eq!(m.run_until(Vtime(20_000)).unwrap(), Stop::Deadline);
    }
}
