//! From a bug to its cause, on the built-in demo: the record's story and
//! `hvsim replay` telling it, a snapshot just before the failure, the
//! report as a browser lays it out on a desktop and on a phone, progress
//! in a log, and `-q`/`-v` on every command.

mod common;

use std::path::Path;
use std::process::Command;

use common::{explore_json, files_under, hvsim, kvm_available, latest, linux_available, output, read, subcommands};
use serde_json::{json, Value};

/// One exploration of the demo (it finds the vault's bug in a few dozen
/// branches); the report and the bug record's path.
fn demo(out: &Path) -> (Value, String) {
    let r = explore_json(&["--branches", "100"], out);
    let file = r["bugs"][0]["file"].as_str().expect("the demo's bug").to_owned();
    (r, file)
}

/// A record's id names the files commands write beside it (`minimize`:
/// `<id>.min.json`): one that is not a bug id is refused when the record is
/// read, with one line naming the file, and nothing is written anywhere.
#[test]
fn a_record_whose_id_is_a_path_is_refused_and_nothing_is_written() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bugs = dir.path().join("a/b/bugs");
    std::fs::create_dir_all(&bugs).unwrap();
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/corpus/bug_record/demo-bug-1.json");
    let mut record: Value = serde_json::from_str(&read(Path::new(corpus))).unwrap();
    record["id"] = "../../../escaped".into();
    let file = bugs.join("BUG-hostile.json");
    std::fs::write(&file, record.to_string()).unwrap();
    for command in ["minimize", "replay", "debug"] {
        let o = output(&[command, file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{command}: {err}");
        assert!(err.contains(&file.display().to_string()) && err.contains("is not BUG- and 12 hex digits"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{command}: {err}");
    }
    let written = files_under(dir.path());
    assert_eq!(written, [file], "nothing but the record");
}

/// The record's story is the timeline on one line of virtual time, ending
/// at the failure; `hvsim replay` tells it as it re-executes; and
/// `--snapshot-before` leaves the machine 1 ms before the failure, which
/// `hvsim replay --snapshot` resumes.
#[test]
fn a_record_tells_its_story_and_replay_tells_it_again_and_stops_before_the_failure() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, file) = demo(&dir.path().join("out"));
    let record: Value = serde_json::from_str(&read(Path::new(&file))).unwrap();
    let story = record["story"].as_array().unwrap();
    let last = story.last().unwrap();
    assert_eq!((last["what"].as_str(), last["text"].as_str()), (Some("failure"), record["summary"].as_str()));
    assert_eq!(last["vtime_ns"], record["at"]["vtime_ns"]);
    assert!(story.iter().any(|e| e["text"] == "Always FAILS: the vault stays closed"), "{story:#?}");
    assert!(story.iter().any(|e| e["text"] == "setup complete"), "{story:#?}");

    // Told as it goes: the same lines, then the verdict.
    let o = output(&["replay", &file]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.last().unwrap().contains("reproduced"), "{stdout}");
    let failing = lines.iter().position(|l| l.contains("sdk") && l.contains("Always FAILS: the vault stays closed"));
    assert!(failing.is_some_and(|i| i + 1 == lines.len() - 1), "the failing check is told last: {stdout}");
    // ... and nothing of it with -q; --log and --profile are honoured.
    let log = dir.path().join("replay.log");
    let o = output(&["replay", &file, "-q", "--log", log.to_str().unwrap(), "--profile"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1, "{o:?}");
    assert!(read(&log).starts_with("# hvsim determinism log v1"), "the replay's log");
    assert!(String::from_utf8_lossy(&o.stderr).contains("hvsim: profile: "), "{o:?}");
    // --vtime-limit stops it short: not reproduced.
    let o = output(&["replay", &file, "-q", "--vtime-limit", "5ms"]);
    assert_eq!(o.status.code(), Some(5), "{o:?}");

    // 1 ms before the failure: the demo's last stretch is one segment, so
    // resuming the snapshot reaches the same failing check.
    let snap = dir.path().join("before.snap");
    let o = output(&["replay", &file, "--snapshot-before", "1ms", "--save-snapshot", snap.to_str().unwrap(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    let at = record["at"]["vtime_ns"].as_u64().unwrap();
    assert_eq!(
        (v["vtime_ns"].as_u64(), v["before_failure_ns"].as_u64()),
        (Some(at - 1_000_000), Some(1_000_000)),
        "{v}"
    );
    assert!(snap.is_file());
    // A place it cannot be saved is refused in one line that names it.
    let o = output(&["replay", &file, "--snapshot-before", "0s", "--save-snapshot", "/nonexistent/dir/x.snap"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(1) && err.lines().count() == 1 && err.contains("/nonexistent/dir"), "{err}");
}

/// What the test's browser measures in the page, from its layout: whether
/// anything sticks out of the viewport (outside a box that scrolls on its
/// own), and the plots, their smallest text, and the tables.
const MEASURE: &str = r#"
function measure(doc, win) {
  const vw = doc.documentElement.clientWidth;
  const contained = (el) => el.parentElement.closest('.scroll, pre, svg') !== null;
  const over = [];
  for (const el of doc.body.querySelectorAll('*')) {
    if (contained(el)) continue;
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > vw + 1) over.push(el.tagName + '.' + el.className + ' right=' + Math.round(r.right));
  }
  const rect = (e) => { const r = e.getBoundingClientRect(); return [r.width, r.height]; };
  return { width: win.innerWidth, scrollWidth: doc.documentElement.scrollWidth, overflowing: over,
    plots: [...doc.querySelectorAll('svg.plot')].map(rect),
    plotText: Math.min(...[...doc.querySelectorAll('svg.plot text')].map(t => t.getBoundingClientRect().height)),
    ticks: doc.querySelectorAll('svg.plot text').length,
    tables: [...doc.querySelectorAll('table')].map(rect),
    story: doc.querySelectorAll('table.story tr').length };
}
"#;

/// The report at `width` CSS pixels, laid out by headless Chromium: the
/// page in an iframe of that width (the browser's own window has a
/// minimum width larger than a phone's), measured once loaded.
fn rendered(report: &Path, width: u32, dir: &Path) -> Value {
    let page = read(report);
    let escaped = page.replace('&', "&amp;").replace('"', "&quot;");
    let probe = format!(
        r#"<!DOCTYPE html><html><body style="margin:0"><iframe id="f" style="width:{width}px;height:6000px;border:0" srcdoc="{escaped}"></iframe>
<script>{MEASURE}
document.getElementById('f').addEventListener('load', function () {{
  const p = document.createElement('pre'); p.id = 'probe';
  p.textContent = JSON.stringify(measure(this.contentDocument, this.contentWindow));
  document.body.appendChild(p);
}});</script></body></html>"#
    );
    let file = dir.join(format!("probe-{width}.html"));
    std::fs::write(&file, probe).unwrap();
    let o = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,2000", "--virtual-time-budget=5000"])
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&o.stdout);
    let start = dom
        .find(r#"<pre id="probe">"#)
        .unwrap_or_else(|| panic!("no measurement: {}", String::from_utf8_lossy(&o.stderr)));
    let json = &dom[start + r#"<pre id="probe">"#.len()..];
    let json = &json[..json.find("</pre>").unwrap()];
    serde_json::from_str(&json.replace("&quot;", "\"").replace("&amp;", "&")).unwrap()
}

/// report.html at 1400 px and at a phone's 420 px: nothing overflows the
/// page sideways (wide tables scroll in their own box), the plots fill
/// their column with axes and ticks large enough to read, and the tables
/// and the bug's story are there.
#[test]
fn the_report_lays_out_on_a_desktop_and_on_a_phone() {
    if !kvm_available() {
        return;
    }
    hvsim_guest_image::linux::packages::ensure(&["chromium"]).expect("chromium installs");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    demo(&out);
    let report = latest(&out).join("report.html");
    let html = read(&report);
    assert!(!html.contains("<script"), "the report needs no script");
    assert!(html.contains(env!("CARGO_PKG_VERSION")) && html.contains("--branches 100"), "the header");
    for width in [1400, 420] {
        let m = rendered(&report, width, dir.path());
        assert_eq!(m["width"].as_u64(), Some(u64::from(width)), "{m}");
        assert_eq!(m["scrollWidth"].as_u64(), Some(u64::from(width)), "the page scrolls sideways at {width} px: {m}");
        assert_eq!(m["overflowing"].as_array().map(Vec::len), Some(0), "at {width} px: {m}");
        let plots = m["plots"].as_array().unwrap();
        assert!(plots.len() >= 2, "{m}");
        for p in plots {
            let (w, h) = (p[0].as_f64().unwrap(), p[1].as_f64().unwrap());
            // One column on a phone, two on a desktop (of 70em at most).
            let fill = if width == 420 { 0.85 * 420.0 - 32.0 } else { 400.0 };
            assert!(w >= fill && h > 0.3 * w, "a plot {w}x{h} at {width} px: {m}");
        }
        assert!(m["plotText"].as_f64() >= Some(11.0), "tick labels too small to read at {width} px: {m}");
        assert!(m["ticks"].as_u64() >= Some(16), "axes without ticks: {m}");
        assert!(m["tables"].as_array().unwrap().iter().all(|t| t[1].as_f64() > Some(0.0)), "{m}");
        assert!(m["story"].as_u64() >= Some(3), "the bug's story: {m}");
    }
}

/// Where stderr is not a terminal, a long exploration still says how far
/// it is: a one-line status at the interval asked (HVSIM_STATUS_EVERY); with
/// -q nothing but the result.
#[test]
fn progress_shows_in_a_log_as_status_lines_and_not_with_quiet() {
    if !kvm_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = hvsim()
        .args(["explore", "--branches", "100", "--reexecute", "0", "--likelihood-runs", "0"])
        .args(["--out", out.to_str().unwrap()])
        .env("HVSIM_STATUS_EVERY", "0.2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let status: Vec<&str> = err.lines().filter(|l| l.starts_with("hvsim: explore [")).collect();
    assert!(status.len() >= 2, "no status lines: {err}");
    assert!(status.iter().all(|l| l.contains("branches") && !l.contains('\u{1b}')), "{status:?}");
    let o = hvsim()
        .args(["explore", "-q", "--branches", "20", "--reexecute", "0", "--likelihood-runs", "0"])
        .args(["--out", out.to_str().unwrap()])
        .env("HVSIM_STATUS_EVERY", "0.1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("hvsim: explore ["), "{err}");
    assert!(err.contains("hvsim: explored 20 branches"), "the result still shows: {err}");
}

/// Every command, and every subcommand of `bench`, `image`, `cache`,
/// `kernel` and `snapshot`, takes -q and -v (and its help parses).
#[test]
fn every_command_takes_quiet_and_verbose() {
    let help = |args: &[&str]| {
        let o = output(args);
        assert!(o.status.success(), "hvsim {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let top = subcommands(&help(&["--help"]));
    assert!(top.len() >= 10, "{top:?}");
    let mut checked = 0;
    for c in &top {
        let text = help(&[c, "-q", "--help"]);
        assert!(text.contains("-q, --quiet") && text.contains("-v, --verbose"), "hvsim {c}: {text}");
        help(&[c, "-vv", "--help"]);
        for sub in subcommands(&text) {
            help(&[c, &sub, "-q", "--help"]);
            help(&[c, &sub, "-v", "--help"]);
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} subcommands");
    let o = output(&["-q", "-v", "doctor"]);
    assert_eq!(o.status.code(), Some(2), "-q and -v conflict: {o:?}");
}

/// Delta debugging over a timeline's decisions: `tests/guest/clockstep.c`
/// trusts the wall clock not to step back 500 ms; the plan draws small
/// clock bumps of its node every ~100 ms (harmless) and a large one now and
/// then (the bug). The first bug's record holds several faults; `hvsim
/// minimize` keeps only the large bump, and its record replays. `hvsim
/// debug` then reads the program's file at two moments before the failure,
/// and `hvsim retest` finds the fix (`clockstep_fixed.c`) fixes it.
#[test]
fn minimize_debug_and_retest_a_bug_of_clock_bumps() {
    if !linux_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = common::c_program(dir.path(), "clockstep", "/bin/clockstep");
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, CLOCK_BUMPS).unwrap();
    let args = [
        "--linux",
        "--nodes",
        "1",
        "--guest-file",
        &program,
        "--init-cmd",
        "hvsim-node 0 /bin/clockstep",
        "--fault-plan",
        plan.to_str().unwrap(),
        // Branch 1 of seed 1 finds it; the other three of its round would
        // only take time.
        "--branches",
        "1",
        "--seed",
        "1",
        // Minimize runs the bug again first, and fails if it does not show.
        "--reexecute",
        "0",
    ];
    let r = explore_json(&args, &dir.path().join("out"));
    let file = r["bugs"][0]["file"].as_str().expect("a bug").to_owned();
    let record: Value = serde_json::from_str(&read(Path::new(&file))).unwrap();
    let faults = record["faults"].as_array().unwrap();
    assert!(faults.len() >= 3, "too few faults to minimize: {faults:#?}");

    // Minimized from a copy that says something reached its run from
    // outside the seed: the minimized record says what reached its own
    // run (nothing), not what reached the original's.
    let edited = dir.path().join("edited").join(Path::new(&file).file_name().unwrap());
    std::fs::create_dir_all(edited.parent().unwrap()).unwrap();
    let mut outside = record.clone();
    outside["outside_seed"] = json!(["a watchdog-forced exit (written in by the test)"]);
    std::fs::write(&edited, outside.to_string()).unwrap();
    let o = output(&["minimize", edited.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let m = &v["minimization"];
    assert_eq!(m["one_minimal"], true, "{m}");
    assert_eq!(m["decisions"].as_u64(), Some(faults.len() as u64), "{m}");
    let kept = m["kept"].as_array().unwrap();
    assert_eq!(kept.len(), 1, "{m}");
    // The one kept is a large bump: the plan's second rule (2 to 3 s).
    let id = kept[0]["id"].as_u64().unwrap();
    let fault = faults.iter().find(|f| f["id"].as_u64() == Some(id)).unwrap();
    let offset = fault["effect"]["Clock"]["change"]["bump"]["offset_ns"].as_i64().unwrap();
    assert!(offset.unsigned_abs() >= 2_000_000_000, "{fault}");
    let min = v["file"].as_str().unwrap();
    let minimized: Value = serde_json::from_str(&read(Path::new(min))).unwrap();
    assert_eq!((minimized["id"].as_str(), minimized["replayable"].as_str()), (record["id"].as_str(), Some("verified")));
    assert_eq!(minimized.get("outside_seed"), None, "its own run's: {minimized}");
    assert_eq!(minimized["timeline"]["vetoes"]["faults"].as_array().map(Vec::len), Some(faults.len() - 1));
    let struck: Vec<u64> = minimized["faults"].as_array().unwrap().iter().filter_map(|f| f["id"].as_u64()).collect();
    assert_eq!(struck, vec![id], "only the kept fault struck");
    // Replayed from its own record, in a new process.
    common::replay_reproduces(min, &[]);

    // `hvsim debug` at two moments before the failure: the file the
    // program leaves holds an earlier reading at the earlier moment; a
    // command's status comes back; the run says it is no longer the
    // timeline's.
    let reading = |at: &str| -> u64 {
        let o = hvsim()
            .args(["debug", &file, "--at", at, "--node", "0"])
            .write_stdin("cat /tmp/clockstep.last\necho bye; exit 3\n")
            .output()
            .unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(err.contains("no longer deterministic") && err.contains("[exit status 3;"), "{err}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[1], "bye");
        lines[0].split_whitespace().next().unwrap().parse().unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let (early, late) = (reading("-45ms"), reading("-5ms"));
    assert!(0 < early && early < late && late < 150, "readings {early} then {late}");

    // `hvsim retest` with the fix (the lease on the monotonic clock): the
    // bug's decisions and fresh runs fail before the change, none after.
    let o = output(&["retest", &file, "--json"]);
    assert_eq!(o.status.code(), Some(1), "nothing changed is refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing changed"), "{o:?}");
    let fixed = common::c_program(dir.path(), "clockstep_fixed", "/bin/clockstep");
    let o = output(&["retest", &file, "--guest-file", &fixed, "--runs", "1", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    let (before, after) = (&v["retest"]["before"], &v["retest"]["after"]);
    assert_eq!(before["own_decisions"], true, "{v}");
    assert!(before["hits"].as_u64() >= Some(1), "{v}");
    assert_eq!((after["own_decisions"].as_bool(), after["hits"].as_u64()), (Some(false), Some(0)), "{v}");
    assert_eq!((v["fixed"].as_bool(), o.status.code()), (Some(true), Some(0)), "{v}");
}

/// Small bumps of node 0 every ~100 ms, and a 2-3 s one every ~0.7 s.
const CLOCK_BUMPS: &str = r#"
[draw]
swarm = false

[[draw.fault]]
kind = "bump"
every = ["80ms", "120ms"]
duration = "40ms"
offset = ["1ms", "50ms"]
targets = [[0]]

[[draw.fault]]
kind = "bump"
every = ["500ms", "900ms"]
duration = "200ms"
offset = ["2s", "3s"]
targets = [[0]]
"#;
