//! The boot cache on the raw `ready` guest, which boots to `READY` the way
//! hvsim's Linux does, in milliseconds (issue: "Linux targets start in about
//! a second: boot once, restore many"). A run whose booted machine came from
//! the cache is the same run as one that booted; the seed given at
//! `begin_run` decides what follows; concurrent misses boot once; corrupt
//! entries are rebuilt; the cache stays within its bound.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hvsim_guest_image::linux::boot_cache::{BootCache, BootKind, Shape, BOOT_SEED};
use hvsim_vmm::machine::{MachineSpec, RunInputs};
use hvsim_vmm::{End, Machine, MachineConfig, Stop, Vtime};

use common::kvm_available;

fn config() -> MachineConfig {
    common::raw_config("ready", BOOT_SEED)
}

/// A shape for the raw guest (the Linux one hashes kernel and initramfs).
fn shape(spec: &MachineSpec, tag: &str) -> Shape {
    Shape {
        model: hvsim_vmm::MODEL_ID.into(),
        snapshot_format: hvsim_snapshot::file::VERSION,
        kernel_sha256: tag.into(),
        initrd_sha256: String::new(),
        cmdline: String::new(),
        spec: spec.clone(),
        cpuid_sha256: String::new(),
        boot_seed: BOOT_SEED,
        epoch: 0,
        host_cpu: None,
    }
}

fn boot(config: &MachineConfig, boots: &AtomicUsize) -> hvsim_guest_image::Result<Machine> {
    boots.fetch_add(1, Ordering::SeqCst);
    let mut m = Machine::new(config)?;
    assert_eq!(m.run_until_ready(Vtime::from_secs(1))?, None, "the guest says READY");
    Ok(m)
}

/// Trace hash, memory hash and console of the run after `begin_run`.
fn run(mut m: Machine, seed: u64, work: &[u8]) -> (String, [u8; 32], String) {
    m.begin_run(RunInputs { seed, inbox: work.to_vec(), ..RunInputs::default() }).unwrap();
    assert_eq!(m.run_until(Vtime::from_secs(1)).unwrap(), Stop::Ended(End::Exit { status: 0 }));
    (m.trace_state().hash_hex(), m.ram().hash(), String::from_utf8_lossy(&m.console()).into_owned())
}

#[test]
fn a_cached_boot_is_the_same_run_and_the_seed_decides_the_rest() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = BootCache::at(dir.path().to_owned(), 1 << 30);
    let config = config();
    let shape = shape(&config.spec, "a");
    let boots = AtomicUsize::new(0);
    let get = || cache.get_or_boot(&shape, &config.host, || boot(&config, &boots)).unwrap();

    let (first, report) = get();
    assert_eq!(report.kind, BootKind::Saved);
    assert_eq!(report.key.as_deref(), Some(shape.key().as_str()));
    let cold = run(first, 7, b"hello");
    for _ in 0..2 {
        let (m, report) = get();
        assert_eq!(report.kind, BootKind::Cached);
        assert_eq!(run(m, 7, b"hello"), cold, "a restored boot runs exactly like the boot itself");
    }
    assert_eq!(boots.load(Ordering::SeqCst), 1, "booted once, restored twice");
    assert!(cold.2.contains("ready: inbox [hello]"), "{}", cold.2);

    let (m, _) = get();
    let other = run(m, 8, b"hello");
    let random = |console: &str| console.lines().find(|l| l.starts_with("ready: random")).unwrap().to_owned();
    assert_ne!(random(&other.2), random(&cold.2), "the run's seed decides the random bytes after READY");
    assert_ne!(other.0, cold.0);
    let (m, _) = get();
    let work = run(m, 7, b"other work");
    assert!(work.2.contains("ready: inbox [other work]"));
    assert_ne!(work.0, cold.0, "the work is part of the trace");

    // Without the cache (a cold boot) the run is the same too.
    let fresh = boot(&config, &boots).unwrap();
    assert_eq!(run(fresh, 7, b"hello"), cold);
}

#[test]
fn corrupt_entries_are_rebuilt_and_concurrent_misses_boot_once() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cache = BootCache::at(dir.path().to_owned(), 1 << 30);
    let config = config();
    let shape = shape(&config.spec, "b");
    let boots = AtomicUsize::new(0);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let (m, report) = cache.get_or_boot(&shape, &config.host, || boot(&config, &boots)).unwrap();
                    (report.kind, run(m, 3, b"x"))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(boots.load(Ordering::SeqCst), 1, "three concurrent misses boot once");
    assert_eq!(results.iter().filter(|r| r.0 == BootKind::Saved).count(), 1);
    assert!(results.iter().all(|r| r.1 == results[0].1), "every run is the same run");

    let path = dir.path().join(format!("{}.snap", shape.key()));
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let (m, report) = cache.get_or_boot(&shape, &config.host, || boot(&config, &boots)).unwrap();
    assert_eq!((report.kind, boots.load(Ordering::SeqCst)), (BootKind::Saved, 2), "a corrupt entry is booted again");
    assert_eq!(run(m, 3, b"x"), results[0].1);
    let (_, report) = cache.get_or_boot(&shape, &config.host, || boot(&config, &boots)).unwrap();
    assert_eq!(report.kind, BootKind::Cached, "and replaced");
}

#[test]
fn the_cache_keeps_to_its_bound_least_recently_used_first() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    let boots = AtomicUsize::new(0);
    let unbounded = BootCache::at(dir.path().to_owned(), u64::MAX);
    let shapes: Vec<Shape> = ["c", "d", "e"].iter().map(|t| shape(&config.spec, t)).collect();
    for s in &shapes[..2] {
        unbounded.get_or_boot(s, &config.host, || boot(&config, &boots)).unwrap();
        // Distinct last-use times, whatever the file system's resolution.
        std::thread::sleep(Duration::from_millis(20));
    }
    // Use "c" again: now "d" is the least recently used.
    let (_, r) = unbounded.get_or_boot(&shapes[0], &config.host, || boot(&config, &boots)).unwrap();
    assert_eq!(r.kind, BootKind::Cached);
    let entries = unbounded.entries().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].key, shapes[0].key(), "most recently used first");
    assert_eq!(entries[0].description.as_ref(), Some(&shapes[0]));
    let one = entries[0].bytes;

    // Room for two entries: saving a third evicts the least recently used.
    let bounded = BootCache::at(dir.path().to_owned(), 2 * one + one / 2);
    std::thread::sleep(Duration::from_millis(20));
    bounded.get_or_boot(&shapes[2], &config.host, || boot(&config, &boots)).unwrap();
    let keys: Vec<String> = bounded.entries().unwrap().into_iter().map(|e| e.key).collect();
    assert_eq!(keys, [shapes[2].key(), shapes[0].key()], "\"d\" was evicted");

    assert_eq!(bounded.clear().unwrap().0, 2);
    assert!(bounded.entries().unwrap().is_empty());
}
