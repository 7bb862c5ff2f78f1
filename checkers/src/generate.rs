//! Histories of real objects, for benchmarks and tests: clients operate on
//! atomic registers (each operation takes effect at one instant between its
//! invocation and its completion), so every history made here is
//! linearizable. Deterministic from a seed.

use serde_json::{json, Value};

/// What the clients operate on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Object {
    /// One register: reads and writes.
    Register,
    /// One register: reads, writes and compare-and-sets (half of them
    /// expecting the value the register holds, so half succeed).
    Cas,
    /// A map of eight registers: reads and writes of random keys.
    Map,
    /// A lock: acquires (refused while another holds it) and releases by
    /// its holder.
    Lock,
}

impl Object {
    pub fn name(self) -> &'static str {
        match self {
            Object::Register => "register",
            Object::Cas => "cas-register",
            Object::Map => "key-value",
            Object::Lock => "lock",
        }
    }
}

/// splitmix64: a small, good, seeded stream.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One operation as generated: who, what, when.
struct Planned {
    process: usize,
    f: &'static str,
    key: Option<String>,
    /// A write's value, a cas's `[expected, new]`.
    arg: Value,
    invoke: u64,
    effect: u64,
    end: u64,
}

/// A lease history of `ops` acquires by five clients, with the virtual
/// times of a correct lease server: a 100 ms term, granted only once the
/// last holder has released it, and every holder releasing within its
/// term (counted from its request).
pub fn lease(ops: usize, seed: u64) -> String {
    const MS: u64 = 1_000_000;
    let mut rng = Rng(seed);
    let mut events: Vec<(u64, String)> = Vec::new();
    let mut event = |time: u64, process: u64, kind: &str, f: &str, value: Value| {
        let line = json!({"process": process, "type": kind, "f": f, "key": "l", "value": value, "time": time});
        events.push((time, line.to_string()));
    };
    let mut free_at = 0;
    let mut busy_until = [0u64; 5];
    for _ in 0..ops {
        // The client free soonest asks next (ties in a drawn order), after
        // up to 20 ms of thought: asks come in time order.
        let first = rng.below(5);
        let p = (0..5).map(|i| (first + i) % 5).min_by_key(|&p| busy_until[p as usize]).expect("five clients");
        let asked = busy_until[p as usize] + rng.below(20) * MS;
        let decided = asked + (1 + rng.below(5)) * MS;
        event(asked, p, "invoke", "acquire", json!(100));
        if decided >= free_at {
            let ok = decided + MS;
            event(ok, p, "ok", "acquire", json!(100));
            let release = (ok + (10 + rng.below(80)) * MS).min(asked + 99 * MS);
            event(release, p, "invoke", "release", Value::Null);
            event(release + MS, p, "ok", "release", Value::Null);
            free_at = release + MS;
            busy_until[p as usize] = release + 2 * MS;
        } else {
            event(decided + MS, p, "fail", "acquire", json!(100));
            busy_until[p as usize] = decided + 2 * MS;
        }
    }
    events.sort_by_key(|(time, _)| *time);
    events.into_iter().map(|(_, l)| l + "\n").collect()
}

/// A history of `ops` operations by `clients` concurrent clients, as JSON
/// lines.
pub fn history(object: Object, ops: usize, clients: usize, seed: u64) -> String {
    assert!(clients > 0, "a history needs a client");
    let mut rng = Rng(seed);
    // Each client: its operations one after another, with think time.
    let mut next_free = vec![0u64; clients];
    let mut planned = Vec::with_capacity(ops);
    for i in 0..ops {
        let process = i % clients;
        let invoke = next_free[process] + rng.below(3);
        let effect = invoke + rng.below(4);
        let end = effect + rng.below(4);
        next_free[process] = end + 1;
        let key = (object == Object::Map).then(|| format!("k{}", rng.below(8)));
        let (f, arg) = match (object, rng.below(3)) {
            (Object::Lock, 0) => ("release", Value::Null),
            (Object::Lock, _) => ("acquire", Value::Null),
            (_, 0) => ("read", Value::Null),
            (Object::Cas, 1) => ("cas", json!([rng.below(5), rng.below(5)])),
            _ => ("write", json!(rng.below(5))),
        };
        planned.push(Planned { process, f, key, arg, invoke, effect, end });
    }
    // What each operation saw: the registers as the effects leave them.
    let mut by_effect: Vec<usize> = (0..planned.len()).collect();
    by_effect.sort_by_key(|&i| (planned[i].effect, i));
    let mut registers: std::collections::BTreeMap<Option<String>, Value> = Default::default();
    let mut outcome: Vec<(&str, Value)> = vec![("ok", Value::Null); planned.len()];
    for i in by_effect {
        let p = &mut planned[i];
        let held = registers.entry(p.key.clone()).or_insert(Value::Null);
        outcome[i] = match p.f {
            "read" => ("ok", held.clone()),
            "write" => {
                *held = p.arg.clone();
                ("ok", p.arg.clone())
            }
            "acquire" if held.is_null() => {
                *held = json!(p.process);
                ("ok", Value::Null)
            }
            "release" if *held == json!(p.process) => {
                *held = Value::Null;
                ("ok", Value::Null)
            }
            // Held by another; a release by one who does not hold it is
            // refused and did not happen.
            "acquire" | "release" => ("fail", Value::Null),
            _ => {
                // Half the cases expect what the register holds.
                if p.arg[0] != *held && p.effect % 2 == 0 {
                    p.arg[0] = held.clone();
                }
                if p.arg[0] == *held {
                    *held = p.arg[1].clone();
                    ("ok", p.arg.clone())
                } else {
                    ("fail", p.arg.clone())
                }
            }
        };
    }
    // Invocations, then effects, then completions at the same tick.
    let mut events: Vec<(u64, String)> = Vec::with_capacity(2 * planned.len());
    for (p, (kind, value)) in planned.iter().zip(outcome) {
        let mut invoke = json!({"process": p.process, "type": "invoke", "f": p.f, "value": p.arg});
        let mut done = json!({"process": p.process, "type": kind, "f": p.f, "value": value});
        if let Some(k) = &p.key {
            invoke["key"] = k.clone().into();
            done["key"] = k.clone().into();
        }
        events.push((p.invoke * 4, invoke.to_string()));
        events.push((p.end * 4 + 2, done.to_string()));
    }
    events.sort_by_key(|(t, _)| *t);
    let mut text = events.into_iter().map(|(_, e)| e).collect::<Vec<_>>().join("\n");
    text.push('\n');
    text
}

/// A ledger's history (`ledger.rs`): five accounts opened with 100 each,
/// then `ops` transfers (of up to 20, failed when the source cannot pay)
/// and reads of every balance by 5 clients, each taking effect in turn:
/// every read keeps the total.
pub fn ledger(ops: usize, seed: u64) -> String {
    let mut rng = Rng(seed);
    let mut balances: std::collections::BTreeMap<String, i64> = (0..5).map(|a| (format!("a{a}"), 100)).collect();
    let opened = json!(balances);
    let mut lines = vec![
        json!({"process": 0, "type": "invoke", "f": "open", "value": opened}).to_string(),
        json!({"process": 0, "type": "ok", "f": "open", "value": opened}).to_string(),
    ];
    for i in 0..ops {
        let process = i % 5;
        if rng.below(4) == 0 {
            lines.push(json!({"process": process, "type": "invoke", "f": "read", "value": null}).to_string());
            lines.push(json!({"process": process, "type": "ok", "f": "read", "value": balances}).to_string());
            continue;
        }
        let (from, to) = (format!("a{}", rng.below(5)), format!("a{}", rng.below(5)));
        let amount = 1 + rng.below(20) as i64;
        let value = json!({"from": from, "to": to, "amount": amount});
        lines.push(json!({"process": process, "type": "invoke", "f": "transfer", "value": value}).to_string());
        let kind = if balances[&from] >= amount {
            *balances.get_mut(&from).expect("an account") -= amount;
            *balances.get_mut(&to).expect("an account") += amount;
            "ok"
        } else {
            "fail"
        };
        lines.push(json!({"process": process, "type": kind, "f": "transfer", "value": value}).to_string());
    }
    lines.join("\n") + "\n"
}

/// A log's history (`log.rs`): `ops` appends by 5 clients, each taking
/// effect in turn (one in twenty failing, not appended), and a read of the
/// whole log every 2,000 operations and at the end: every read a prefix of
/// the next.
pub fn log(ops: usize, seed: u64) -> String {
    let mut rng = Rng(seed);
    let mut entries: Vec<u64> = Vec::new();
    let mut lines = Vec::new();
    for i in 0..ops {
        let process = i % 5;
        let value = i as u64;
        lines.push(json!({"process": process, "type": "invoke", "f": "append", "value": value}).to_string());
        let kind = if rng.below(20) == 0 { "fail" } else { "ok" };
        if kind == "ok" {
            entries.push(value);
        }
        lines.push(json!({"process": process, "type": kind, "f": "append", "value": value}).to_string());
        if (i + 1) % 2_000 == 0 || i + 1 == ops {
            lines.push(json!({"process": 5, "type": "invoke", "f": "read", "value": null}).to_string());
            lines.push(json!({"process": 5, "type": "ok", "f": "read", "value": entries}).to_string());
        }
    }
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;
    use crate::linearizable::{check, check_whole, Limits, Verdict};
    use crate::model::operations;

    #[test]
    fn generated_histories_are_linearizable_split_or_whole_memoized_or_not() {
        for object in [Object::Register, Object::Cas, Object::Map, Object::Lock] {
            for seed in 0..20 {
                let text = history(object, 40, 4, seed);
                let ops = operations(&parse(&text).unwrap()).unwrap();
                let split = check(&ops, Limits::default()).unwrap();
                assert!(matches!(split, Verdict::Linearizable { .. }), "{object:?} {seed}: {split:?}\n{text}");
                let (whole, _) = check_whole(&ops, Limits::default()).unwrap();
                assert!(matches!(whole, Verdict::Linearizable { .. }), "{object:?} {seed}: {whole:?}");
                let plain = Limits { memo: false, steps: 200_000, ..Limits::default() };
                let (plain, _) = check_whole(&ops, plain).unwrap();
                assert!(matches!(plain, Verdict::Linearizable { .. } | Verdict::Unknown { .. }), "{plain:?}");
            }
        }
        assert_eq!(history(Object::Cas, 30, 3, 7), history(Object::Cas, 30, 3, 7), "a seed, a history");
    }

    #[test]
    fn a_corrupted_generated_history_is_caught_split_or_whole() {
        let text = history(Object::Map, 60, 5, 3);
        let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let read = lines.iter_mut().find(|e| e["type"] == "ok" && e["f"] == "read").expect("a read to corrupt");
        read["value"] = 99.into();
        let bad = lines.iter().map(Value::to_string).collect::<Vec<_>>().join("\n");
        let ops = operations(&parse(&bad).unwrap()).unwrap();
        assert!(matches!(check(&ops, Limits::default()).unwrap(), Verdict::NotLinearizable { .. }));
        assert!(matches!(check_whole(&ops, Limits::default()).unwrap().0, Verdict::NotLinearizable { .. }));
    }
}
