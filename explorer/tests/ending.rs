//! How an exploration ends when something other than its budget ends it:
//! its interrupt raised from outside, or a host-side error (here, a bug's
//! record that cannot be written). What was merged until then is the
//! result, and `Exploration::ending` says why it stopped. KVM is needed.

use hvsim_explorer::bug::BugRecord;
use hvsim_explorer::{explore, Budget, Ending, ExploreConfig, Interrupt, Progress, Span, StartOptions, Target, Watch};
use hvsim_guest_image::host::Host;
use hvsim_vmm::Vtime;

fn host() -> Option<Host> {
    match Host::open() {
        Ok(h) => Some(h),
        Err(e) if std::env::var("HVSIM_REQUIRE_KVM").as_deref() == Ok("1") => panic!("HVSIM_REQUIRE_KVM=1: {e}"),
        Err(e) => {
            eprintln!("skipping KVM test: {e}");
            None
        }
    }
}

/// The demo, with a budget far beyond what these tests let it run.
fn demo(interrupt: &Interrupt, workers: usize) -> ExploreConfig {
    ExploreConfig {
        target: Target::Raw { guest: "demo".into() },
        seed: 1,
        budget: Budget { branches: Some(1_000_000), ..Budget::default() },
        span: Span::Slice(Vtime(5_000_000)),
        snapshot_every: None,
        snapshot_memory: u64::MAX,
        setup_limit: ExploreConfig::default_setup_limit(false),
        branch_from_snapshots: true,
        stop_at_first_bug: false,
        until_saturated: None,
        reexecutions: 3,
        start: StartOptions { interrupt: Some(interrupt.clone()), ..StartOptions::default() },
        batch: workers,
        workers,
        saved_roots: false,
        fresh_root: false,
        roots_dir: None,
        require_root: false,
        shard: Default::default(),
        policy: Default::default(),
        checkers: Vec::new(),
        claims: Vec::new(),
        likelihood: hvsim_explorer::LikelihoodParams::off(),
        winddown: hvsim_explorer::winddown::Winddown::Auto,
    }
}

/// Raises the interrupt once `after` branches are merged.
struct RaiseAfter {
    interrupt: Interrupt,
    after: u64,
}

impl Watch for RaiseAfter {
    fn progress(&mut self, p: Progress) {
        if let Progress::Branch(b) = p {
            if b.branches == self.after {
                self.interrupt.raise(2);
            }
        }
    }
}

#[test]
fn a_raised_interrupt_ends_the_exploration_between_exits() {
    let Some(host) = host() else { return };
    for workers in [1, 2] {
        let interrupt = Interrupt::new();
        let mut watch = RaiseAfter { interrupt: interrupt.clone(), after: 5 };
        let e = explore(&demo(&interrupt, workers), &host, &mut watch).unwrap();
        assert_eq!(e.ending, Ending::Interrupted { reason: 2 }, "{workers} worker(s)");
        // The round it was raised in is merged up to where its machines
        // stopped; no round starts after it.
        assert!((5..5 + workers as u64).contains(&e.branches), "{workers} worker(s): {} branches", e.branches);
    }
}

/// Cannot write bug records.
struct FullDisk;

impl Watch for FullDisk {
    fn bug(&mut self, record: &BugRecord) -> hvsim_explorer::Result<()> {
        Err(hvsim_explorer::ExploreError::Io {
            what: "writing a bug record",
            path: format!("bugs/{}.json", record.id).into(),
            source: std::io::Error::from_raw_os_error(28),
        })
    }
}

#[test]
fn a_host_side_error_ends_the_exploration_naming_what_failed() {
    let Some(host) = host() else { return };
    let interrupt = Interrupt::new();
    let e = explore(&demo(&interrupt, 2), &host, &mut FullDisk).unwrap();
    let Ending::Failed { during, error } = &e.ending else { panic!("{:?}", e.ending) };
    let bug = &e.bugs[0];
    assert_eq!(during, &format!("writing {}", bug.id));
    assert!(error.contains("No space left on device"), "{error}");
    assert!(e.branches < 1_000_000, "it stopped");
    // The bug it could not write is in the result, unconfirmed: the
    // error stopped its re-executions.
    assert_eq!(bug.summary, "assertion failed: the vault stays closed");
    assert!(!bug.reproduction.confirmed(), "{:?}", bug.reproduction);
    assert!(interrupt.raised(), "the explorer stopped its machines");
}

/// A raised interrupt reaches a guest that spins in user mode without
/// exits (where only the watchdog, here a minute, would force one): the
/// watchdog kicks it out within its poll, invisibly (no kick counted, the
/// run still replayable), and the run ends with `Interrupted`. This is what
/// makes `--time` and SIGINT hold inside a spinning branch.
#[test]
fn a_raised_interrupt_reaches_a_guest_spinning_without_exits() {
    let Some(host) = host() else { return };
    let interrupt = Interrupt::new();
    let start = StartOptions {
        watchdog: Some(Some(std::time::Duration::from_secs(60))),
        interrupt: Some(interrupt.clone()),
        ..StartOptions::default()
    };
    let mut machine = Target::Raw { guest: "spin".into() }.start(1, &host, &start).unwrap().machine;
    let raised = std::time::Instant::now();
    let raiser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        interrupt.raise(2);
    });
    let end = machine.run_until(Vtime(u64::MAX));
    raiser.join().unwrap();
    assert!(matches!(end, Err(hvsim_vmm::Error::Interrupted)), "{end:?}");
    let took = raised.elapsed();
    assert!(took < std::time::Duration::from_secs(30), "the interrupt waited for the watchdog: {took:?}");
    assert_eq!(machine.state().counters.watchdog_kicks, 0, "the interrupt's kick is not the watchdog's");
}
