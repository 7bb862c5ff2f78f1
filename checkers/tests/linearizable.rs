//! Linearizability verdicts on histories with known answers, and on
//! histories generated from a real atomic register (always linearizable)
//! with one answer corrupted (never).

use hvsim_checkers::{check_text, Limits, Verdict};
use proptest::prelude::*;

fn verdict(lines: &[&str]) -> Verdict {
    check_text(&lines.join("\n"), Limits::default()).unwrap()
}

fn linearizable(v: &Verdict) -> bool {
    matches!(v, Verdict::Linearizable { .. })
}

const W1: &str = r#"{"process":0,"type":"invoke","f":"write","value":1}"#;
const W1_OK: &str = r#"{"process":0,"type":"ok","f":"write","value":1}"#;
const R: &str = r#"{"process":1,"type":"invoke","f":"read","value":null}"#;
const R_NULL: &str = r#"{"process":1,"type":"ok","f":"read","value":null}"#;
const R_1: &str = r#"{"process":1,"type":"ok","f":"read","value":1}"#;

#[test]
fn a_read_concurrent_with_a_write_may_see_either_value() {
    assert!(linearizable(&verdict(&[W1, R, R_1, W1_OK])));
    assert!(linearizable(&verdict(&[W1, R, R_NULL, W1_OK])));
}

#[test]
fn a_read_after_a_write_completed_must_see_it() {
    let v = verdict(&[W1, W1_OK, R, R_NULL]);
    match v {
        Verdict::NotLinearizable { line, op, .. } => {
            assert_eq!(line, 3, "the stale read is the culprit: {op}");
            assert!(op.contains("read null"), "{op}");
        }
        v => panic!("a stale read is not linearizable: {v:?}"),
    }
}

#[test]
fn a_write_whose_outcome_is_unknown_may_or_may_not_have_happened() {
    let info = r#"{"process":0,"type":"info","f":"write","value":1}"#;
    assert!(linearizable(&verdict(&[W1, info, R, R_1])));
    assert!(linearizable(&verdict(&[W1, info, R, R_NULL])));
    // Never completed at all: the same.
    assert!(linearizable(&verdict(&[W1, R, R_1])));
    // But it cannot take effect before it was invoked.
    assert!(!linearizable(&verdict(&[R, R_1, W1])));
}

#[test]
fn failed_operations_did_not_happen_and_cas_needs_its_expected_value() {
    let fail = r#"{"process":0,"type":"fail","f":"write","value":1}"#;
    assert!(!linearizable(&verdict(&[W1, fail, R, R_1])));
    let cas = r#"{"process":2,"type":"invoke","f":"cas","value":[1,2]}"#;
    let cas_ok = r#"{"process":2,"type":"ok","f":"cas","value":[1,2]}"#;
    let r2 = r#"{"process":1,"type":"ok","f":"read","value":2}"#;
    assert!(linearizable(&verdict(&[W1, W1_OK, cas, cas_ok, R, r2])));
    // Before the write, the register held null: the cas could not succeed.
    assert!(!linearizable(&verdict(&[cas, cas_ok, W1, W1_OK])));
}

#[test]
fn keys_are_independent_objects() {
    let wx = r#"{"process":0,"type":"invoke","f":"write","key":"x","value":1}"#;
    let wx_ok = r#"{"process":0,"type":"ok","f":"write","key":"x","value":1}"#;
    let ry = r#"{"process":1,"type":"invoke","f":"read","key":"y","value":null}"#;
    let ry_null = r#"{"process":1,"type":"ok","f":"read","key":"y","value":null}"#;
    let ry_1 = r#"{"process":1,"type":"ok","f":"read","key":"y","value":1}"#;
    assert!(linearizable(&verdict(&[wx, wx_ok, ry, ry_null])));
    match verdict(&[wx, wx_ok, ry, ry_1]) {
        Verdict::NotLinearizable { key, .. } => assert_eq!(key.as_deref(), Some("y")),
        v => panic!("y was never written: {v:?}"),
    }
}

#[test]
fn malformed_histories_are_refused_with_their_line() {
    let e = check_text(&[W1, W1].join("\n"), Limits::default()).unwrap_err().to_string();
    assert!(e.starts_with("line 2: process 0 invokes while"), "{e}");
    let e = check_text(&[R_1].join("\n"), Limits::default()).unwrap_err().to_string();
    assert!(e.starts_with("line 1: process 1 completes nothing"), "{e}");
    // Lines are the file's, blank ones included.
    let e = check_text(&[W1, "", W1].join("\n"), Limits::default()).unwrap_err().to_string();
    assert!(e.starts_with("line 3: process 0 invokes while its operation at line 1 is open"), "{e}");
    let e = check_text("{\"process\": 0", Limits::default()).unwrap_err().to_string();
    assert!(e.starts_with("line 1: not a history event"), "{e}");
    let e = check_text(r#"{"process":0,"type":"invoke","f":"increment","value":1}"#, Limits::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("not `increment`"), "{e}");
}

#[test]
fn a_search_out_of_steps_says_unknown() {
    // Many concurrent writes and a read that no order explains: the search
    // must try every order of the writes (memoization cannot collapse them:
    // each placed set ends in another value).
    let mut lines = Vec::new();
    for p in 0..14 {
        lines.push(format!(r#"{{"process":{p},"type":"invoke","f":"write","value":{p}}}"#));
    }
    lines.push(r#"{"process":99,"type":"invoke","f":"read","value":null}"#.into());
    lines.push(r#"{"process":99,"type":"ok","f":"read","value":-1}"#.into());
    for p in 0..14 {
        lines.push(format!(r#"{{"process":{p},"type":"ok","f":"write","value":{p}}}"#));
    }
    let v = check_text(&lines.join("\n"), Limits { steps: 1000, ..Limits::default() }).unwrap();
    assert_eq!(v, Verdict::Unknown { key: None, steps: 1000, why: "the step limit".into() });
    let v = check_text(&lines.join("\n"), Limits { memo_bytes: 10_000, ..Limits::default() }).unwrap();
    assert!(matches!(&v, Verdict::Unknown { why, .. } if why == "the memory limit"), "{v:?}");
    let no_time = Limits { time: Some(std::time::Duration::ZERO), ..Limits::default() };
    let v = check_text(&lines.join("\n"), no_time).unwrap();
    assert!(matches!(&v, Verdict::Unknown { why, steps, .. } if why == "the time limit" && *steps == 4096), "{v:?}");
    assert!(matches!(check_text(&lines.join("\n"), Limits::default()).unwrap(), Verdict::NotLinearizable { .. }));
}

/// A history of a real atomic register: each operation takes effect at one
/// instant between its invocation and its completion. `plan` gives each
/// operation (write or read, the value written, when it is invoked, how
/// long until it takes effect, how long until it completes); each runs in
/// a process of its own.
fn real_register(plan: &[(bool, u8, u8, u8, u8)]) -> Vec<String> {
    // Times in quarters, so that an invocation, an effect and a completion
    // at the same tick come in that order.
    let ops: Vec<(bool, u8, u32, u32, u32)> = plan
        .iter()
        .map(|&(write, v, start, to_effect, to_end)| {
            let effect = u32::from(start) + u32::from(to_effect);
            (write, v, u32::from(start) * 4, effect * 4 + 1, (effect + u32::from(to_end)) * 4 + 2)
        })
        .collect();
    // What each read returns: the register as the effects leave it.
    let mut by_effect: Vec<usize> = (0..ops.len()).collect();
    by_effect.sort_by_key(|&i| (ops[i].3, i));
    let mut value = serde_json::Value::Null;
    let mut result = vec![serde_json::Value::Null; ops.len()];
    for i in by_effect {
        let (write, v, ..) = ops[i];
        if write {
            value = v.into();
        }
        result[i] = if write { v.into() } else { value.clone() };
    }
    let mut events: Vec<(u32, String)> = Vec::new();
    for (p, &(write, v, start, _, end)) in ops.iter().enumerate() {
        let f = if write { "write" } else { "read" };
        let asked = if write { serde_json::Value::from(v) } else { serde_json::Value::Null };
        events.push((start, serde_json::json!({"process": p, "type": "invoke", "f": f, "value": asked}).to_string()));
        events.push((end, serde_json::json!({"process": p, "type": "ok", "f": f, "value": result[p]}).to_string()));
    }
    events.sort_by_key(|(t, _)| *t);
    events.into_iter().map(|(_, e)| e).collect()
}

fn plans() -> impl Strategy<Value = Vec<(bool, u8, u8, u8, u8)>> {
    prop::collection::vec((any::<bool>(), 0u8..5, 0u8..30, 0u8..4, 0u8..4), 1..24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn histories_of_a_real_register_are_linearizable(plan in plans()) {
        let lines = real_register(&plan);
        let v = check_text(&lines.join("\n"), Limits::default()).unwrap();
        prop_assert!(linearizable(&v), "{v:?}\n{}", lines.join("\n"));
    }

    #[test]
    fn a_read_of_a_value_never_written_is_caught(plan in plans(), which in any::<prop::sample::Index>()) {
        let mut lines = real_register(&plan);
        let reads: Vec<usize> =
            (0..lines.len()).filter(|&i| lines[i].contains(r#""type":"ok""#) && lines[i].contains(r#""f":"read""#)).collect();
        prop_assume!(!reads.is_empty());
        let i = reads[which.index(reads.len())];
        let mut e: serde_json::Value = serde_json::from_str(&lines[i]).unwrap();
        e["value"] = 77.into();
        lines[i] = e.to_string();
        let v = check_text(&lines.join("\n"), Limits::default()).unwrap();
        prop_assert!(matches!(v, Verdict::NotLinearizable { .. }), "{v:?}\n{}", lines.join("\n"));
    }
}

fn op(process: u64, kind: &str, f: &str, value: &str) -> String {
    format!(r#"{{"process":{process},"type":"{kind}","f":"{f}","value":{value}}}"#)
}

/// New/old inversion: while a write of 1 is in flight, one read sees 1 and
/// a later read (begun after the first completed) sees the old value
/// again. Each read alone could be ordered either side of the write; only
/// the search over both orders shows that no single placement of the write
/// explains both.
#[test]
fn a_new_then_old_inversion_needs_the_search_to_refute() {
    let lines = [
        op(0, "invoke", "write", "1"),
        op(1, "invoke", "read", "null"),
        op(1, "ok", "read", "1"),
        op(2, "invoke", "read", "null"),
        op(2, "ok", "read", "null"),
        op(0, "ok", "write", "1"),
    ];
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let v = verdict(&refs);
    assert!(matches!(&v, Verdict::NotLinearizable { op, .. } if op.contains("read null")), "{v:?}");
    // The same reads in the other order (old, then new) are fine.
    let fine = [&refs[..1], &refs[3..5], &refs[1..3], &refs[5..]].concat();
    assert!(linearizable(&verdict(&fine)));
}

/// A chain of compare-and-sets issued concurrently: 0->1, 1->2, 2->3 all
/// acknowledged, invoked in the reverse of the order that explains them.
/// Only the order 0->1, 1->2, 2->3 works, and the search must find it
/// among the six; then a read of 3 is explained and a read of 1 after all
/// of them completed is not.
#[test]
fn a_cas_chain_is_ordered_by_the_search() {
    let mut lines = vec![op(9, "invoke", "write", "0"), op(9, "ok", "write", "0")];
    for (p, (from, to)) in [(3, (2, 3)), (2, (1, 2)), (1, (0, 1))] {
        lines.push(op(p, "invoke", "cas", &format!("[{from},{to}]")));
    }
    for (p, (from, to)) in [(1, (0, 1)), (3, (2, 3)), (2, (1, 2))] {
        lines.push(op(p, "ok", "cas", &format!("[{from},{to}]")));
    }
    let with_read = |v: &str| {
        let mut l = lines.clone();
        l.push(op(4, "invoke", "read", "null"));
        l.push(op(4, "ok", "read", v));
        l
    };
    let as_refs = |l: &[String]| verdict(&l.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(linearizable(&as_refs(&with_read("3"))));
    assert!(!linearizable(&as_refs(&with_read("1"))));
    // A chain with a gap (no cas 1->2) cannot reach 3.
    let broken: Vec<String> = with_read("3").into_iter().filter(|l| !l.contains("[1,2]")).collect();
    assert!(!linearizable(&as_refs(&broken)));
}

/// A lock as a register holding its holder: mutual exclusion is
/// linearizability against it. Two acquires that both succeeded without a
/// release between are not; a failed acquire while the lock is free is
/// not either; the same acquires overlapping a release are.
#[test]
fn a_lock_excludes_a_second_holder() {
    let ev = |p: u64, kind: &str, f: &str| format!(r#"{{"process":{p},"type":"{kind}","f":"{f}","key":"l"}}"#);
    let history = |lines: &[String]| check_text(&lines.join("\n"), Limits::default()).unwrap();
    let two = [ev(0, "invoke", "acquire"), ev(0, "ok", "acquire"), ev(1, "invoke", "acquire"), ev(1, "ok", "acquire")];
    assert!(!linearizable(&history(&two)));
    let handed = [
        ev(0, "invoke", "acquire"),
        ev(0, "ok", "acquire"),
        ev(0, "invoke", "release"),
        ev(1, "invoke", "acquire"),
        ev(0, "ok", "release"),
        ev(1, "ok", "acquire"),
    ];
    assert!(linearizable(&history(&handed)));
    // Released by one who never held it.
    assert!(!linearizable(&history(&[ev(1, "invoke", "release"), ev(1, "ok", "release")])));
    // Refused while nobody held it.
    assert!(!linearizable(&history(&[ev(0, "invoke", "acquire"), ev(0, "fail", "acquire")])));
    let refused =
        [ev(0, "invoke", "acquire"), ev(0, "ok", "acquire"), ev(1, "invoke", "acquire"), ev(1, "fail", "acquire")];
    assert!(linearizable(&history(&refused)));
}
