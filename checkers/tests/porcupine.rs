//! The linearizability checker against an oracle nobody here wrote:
//! Porcupine's own test histories (tests/data/porcupine, unchanged) and the
//! answers its tests give. Each is converted into hvsim's history format
//! the way Porcupine's tests read it:
//!
//! - etcd (Jepsen logs of one register): a cas that completes `:fail` saw
//!   another value (an observation); a read that times out (`:fail :read
//!   :timed-out`) constrains nothing; a write or cas that times out
//!   (`:info`) may have happened (`info`), as may anything never completed.
//! - key-value (EDN lines): get, put and append per key; an operation
//!   without an `:ok` may have happened.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hvsim_checkers::history::{parse, Event};
use hvsim_checkers::linearizable::{check, Limits, Verdict};
use hvsim_checkers::model::operations;
use serde_json::{json, Value};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/porcupine").join(name)
}

/// Porcupine's answers (porcupine_test.go): the etcd histories it finds
/// linearizable; every other of 0..=102 but 95 it finds not.
const ETCD_LINEARIZABLE: [usize; 23] =
    [2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100, 101, 102];

fn line(process: u64, kind: &str, f: &str, key: Option<&str>, value: Value) -> String {
    json!({"process": process, "type": kind, "f": f, "key": key, "value": value}).to_string()
}

/// A Jepsen etcd log as an hvsim history.
fn etcd(n: usize) -> Vec<Event> {
    let text = std::fs::read_to_string(data(&format!("jepsen/etcd_{n:03}.log"))).unwrap();
    let mut out = Vec::new();
    // Each process's open operation: (f, invocation value).
    let mut open: std::collections::HashMap<u64, (String, Value)> = std::collections::HashMap::new();
    let number = |s: &str| -> Value { s.parse::<i64>().map_or(Value::Null, Value::from) };
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("INFO  jepsen.util - ") else { continue };
        // Tab-separated, or in some logs spaces; a cas's value has one.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let [process, kind, f, ref value @ ..] = fields[..] else { panic!("etcd_{n:03}: {l}") };
        let value = value.join(" ");
        let value = value.as_str();
        let process: u64 = process.trim().parse().unwrap();
        let f = f.trim_start_matches(':');
        let value = match value {
            "nil" | ":timed-out" => Value::Null,
            v if v.starts_with('[') => {
                let v: Vec<Value> = v.trim_matches(['[', ']']).split(' ').map(number).collect();
                Value::from(v)
            }
            v => number(v),
        };
        match kind {
            ":invoke" => {
                open.insert(process, (f.to_owned(), value.clone()));
                out.push(line(process, "invoke", f, None, value));
            }
            ":ok" => {
                open.remove(&process);
                out.push(line(process, "ok", f, None, value));
            }
            ":fail" if f == "cas" => {
                open.remove(&process);
                out.push(line(process, "fail", f, None, value));
            }
            // A read that timed out: it answered nothing.
            ":fail" => {
                open.remove(&process);
                out.push(line(process, "fail", f, None, Value::Null));
            }
            ":info" => {
                let (f, value) = open.remove(&process).unwrap();
                out.push(line(process, "info", &f, None, value));
            }
            k => panic!("etcd_{n:03}: {k} in {l}"),
        }
    }
    parse(&out.join("\n")).unwrap()
}

/// A Porcupine key-value history as an hvsim history.
fn kv(name: &str) -> Vec<Event> {
    let text = std::fs::read_to_string(data(&format!("kv/{name}.txt"))).unwrap();
    let mut out = Vec::new();
    for l in text.lines() {
        let mut process = 0;
        let (mut kind, mut f, mut key, mut value) = ("", "", "", Value::Null);
        for field in l.trim_matches(['{', '}']).split(", :") {
            let (name, v) = field.trim_start_matches(':').split_once(' ').unwrap();
            match name {
                "process" => process = v.parse().unwrap(),
                "type" => kind = v.trim_start_matches(':'),
                "f" => f = v.trim_start_matches(':'),
                "key" => key = v.trim_matches('"'),
                "value" if v == "nil" => value = Value::Null,
                "value" => value = Value::from(v.trim_matches('"')),
                _ => panic!("{name}: {l}"),
            }
        }
        // A get's invocation carries no value; a put's or append's completion
        // repeats its invocation's.
        out.push(line(process, kind, f, Some(key), value));
    }
    parse(&out.join("\n")).unwrap()
}

fn linearizable(events: &[Event], limits: Limits) -> Option<bool> {
    match check(&operations(events).unwrap(), limits).unwrap() {
        Verdict::Linearizable { .. } => Some(true),
        Verdict::NotLinearizable { .. } => Some(false),
        Verdict::Unknown { .. } => None,
    }
}

/// The default limits decide every history Porcupine's tests answer, and
/// agree with every answer.
#[test]
fn every_etcd_history_gets_porcupines_answer() {
    let (mut total, mut slowest) = (0.0, (0.0, 0));
    for n in (0..=102).filter(|&n| n != 95) {
        let expected = ETCD_LINEARIZABLE.contains(&n);
        let events = etcd(n);
        let t = Instant::now();
        assert_eq!(linearizable(&events, Limits::default()), Some(expected), "etcd_{n:03}");
        let s = t.elapsed().as_secs_f64();
        eprintln!("etcd_{n:03} {s:.6}");
        total += s;
        slowest = if s > slowest.0 { (s, n) } else { slowest };
    }
    eprintln!("102 etcd histories checked in {total:.3} s, the slowest etcd_{:03} in {:.3} s", slowest.1, slowest.0);
}

#[test]
fn every_key_value_history_gets_porcupines_answer() {
    for (name, expected) in [
        ("c01-ok", true),
        ("c01-bad", false),
        ("c10-ok", true),
        ("c10-bad", false),
        ("c50-ok", true),
        ("c50-bad", false),
    ] {
        let events = kv(name);
        let t = Instant::now();
        assert_eq!(linearizable(&events, Limits::default()), Some(expected), "{name}");
        eprintln!("{name} {:.6}", t.elapsed().as_secs_f64());
    }
}

/// The smallest case the issue names: a cas that returned false after a
/// write of its expected value has no place.
#[test]
fn a_cas_that_returned_false_is_an_observation() {
    let h = |cas_end: &str| {
        let events = [
            line(0, "invoke", "write", None, json!(1)),
            line(0, "ok", "write", None, json!(1)),
            line(1, "invoke", "cas", None, json!([1, 2])),
            line(1, cas_end, "cas", None, json!([1, 2])),
        ];
        parse(&events.join("\n")).unwrap()
    };
    assert_eq!(linearizable(&h("fail"), Limits::default()), Some(false));
    assert_eq!(linearizable(&h("ok"), Limits::default()), Some(true));
}
