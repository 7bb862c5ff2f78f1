//! Ledgers (Jepsen's bank checker): accounts whose balances clients move
//! money between, and reads of every balance at once. Transfers conserve
//! money, so every successful read must show the same total, and no
//! account may go below zero:
//!
//! ```text
//! {"process":0,"type":"invoke","f":"open","value":{"a":50,"b":50}}
//! {"process":0,"type":"ok","f":"open","value":{"a":50,"b":50}}
//! {"process":1,"type":"invoke","f":"transfer","value":{"from":"a","to":"b","amount":5}}
//! {"process":1,"type":"ok","f":"transfer","value":{"from":"a","to":"b","amount":5}}
//! {"process":2,"type":"invoke","f":"read","value":null}
//! {"process":2,"type":"ok","f":"read","value":{"a":45,"b":55}}
//! ```
//!
//! The total is the `open`'s (the balances the accounts were created
//! with), else the first successful read's. Against it, each successful
//! read that shows another total, a negative balance, or other accounts
//! than were opened is named. Transfers are counted (by outcome), not
//! replayed: a read sees some prefix of them, and any prefix conserves the
//! total. Without a successful read, nothing is known: undecided.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::history::{Event, EventType};

/// A read that breaks the ledger.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BadRead {
    /// Its completion's line.
    pub line: usize,
    pub total: i64,
    /// Accounts below zero, with their balance.
    pub negative: BTreeMap<String, i64>,
    /// Accounts read that were not opened, and opened ones not read.
    pub unexpected: Vec<String>,
    pub missing: Vec<String>,
}

/// What a ledger's history shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum LedgerVerdict {
    Valid {
        total: i64,
        reads: usize,
        transfers: Transfers,
    },
    Invalid {
        total: i64,
        reads: usize,
        transfers: Transfers,
        bad: Vec<BadRead>,
    },
    /// No read succeeded.
    Undecided {
        transfers: Transfers,
    },
}

/// Transfers by outcome.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Transfers {
    pub ok: usize,
    pub failed: usize,
    pub unknown: usize,
}

/// Balances from a read's or an open's value.
fn balances(v: &Value, line: usize) -> Result<BTreeMap<String, i64>> {
    let bad = || Error::Model { line, detail: format!("balances are an object of integers, not {v}") };
    v.as_object().ok_or_else(bad)?.iter().map(|(k, b)| b.as_i64().map(|b| (k.clone(), b)).ok_or_else(bad)).collect()
}

/// Checks a history of `open`, `transfer` and `read` operations.
pub fn check(events: &[Event]) -> Result<LedgerVerdict> {
    let mut transfers = Transfers::default();
    let mut opened: Option<BTreeMap<String, i64>> = None;
    let mut reads: Vec<(usize, BTreeMap<String, i64>)> = Vec::new();
    let mut open_f: BTreeMap<u64, String> = BTreeMap::new();
    for e in events {
        match e.kind {
            EventType::Invoke => {
                if !matches!(e.f.as_str(), "open" | "transfer" | "read") {
                    return Err(Error::Model {
                        line: e.line,
                        detail: format!("a ledger knows open, transfer and read, not `{}`", e.f),
                    });
                }
                open_f.insert(e.process, e.f.clone());
            }
            kind => {
                let Some(f) = open_f.remove(&e.process) else {
                    return Err(Error::Malformed {
                        line: e.line,
                        detail: format!("process {} completes nothing", e.process),
                    });
                };
                match (f.as_str(), kind) {
                    ("transfer", EventType::Ok) => transfers.ok += 1,
                    ("transfer", EventType::Fail) => transfers.failed += 1,
                    ("transfer", _) => transfers.unknown += 1,
                    ("open", EventType::Ok) => opened = Some(balances(&e.value, e.line)?),
                    ("read", EventType::Ok) => reads.push((e.line, balances(&e.value, e.line)?)),
                    _ => {}
                }
            }
        }
    }
    transfers.unknown += open_f.values().filter(|f| *f == "transfer").count();
    let Some(expected) = opened.or_else(|| reads.first().map(|(_, b)| b.clone())) else {
        return Ok(LedgerVerdict::Undecided { transfers });
    };
    if reads.is_empty() {
        return Ok(LedgerVerdict::Undecided { transfers });
    }
    let total: i64 = expected.values().sum();
    let bad: Vec<BadRead> = reads
        .iter()
        .filter_map(|(line, b)| {
            let read = BadRead {
                line: *line,
                total: b.values().sum(),
                negative: b.iter().filter(|(_, &v)| v < 0).map(|(k, &v)| (k.clone(), v)).collect(),
                unexpected: b.keys().filter(|k| !expected.contains_key(*k)).cloned().collect(),
                missing: expected.keys().filter(|k| !b.contains_key(*k)).cloned().collect(),
            };
            let wrong = read.total != total
                || !read.negative.is_empty()
                || !read.unexpected.is_empty()
                || !read.missing.is_empty();
            wrong.then_some(read)
        })
        .collect();
    let reads = reads.len();
    Ok(if bad.is_empty() {
        LedgerVerdict::Valid { total, reads, transfers }
    } else {
        LedgerVerdict::Invalid { total, reads, transfers, bad }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    fn verdict(lines: &[&str]) -> LedgerVerdict {
        check(&parse(&lines.join("\n")).unwrap()).unwrap()
    }

    const OPEN: [&str; 2] = [
        r#"{"process":0,"type":"invoke","f":"open","value":{"a":50,"b":50}}"#,
        r#"{"process":0,"type":"ok","f":"open","value":{"a":50,"b":50}}"#,
    ];
    const MOVE: [&str; 2] = [
        r#"{"process":1,"type":"invoke","f":"transfer","value":{"from":"a","to":"b","amount":60}}"#,
        r#"{"process":1,"type":"ok","f":"transfer","value":{"from":"a","to":"b","amount":60}}"#,
    ];
    const READ: &str = r#"{"process":2,"type":"invoke","f":"read","value":null}"#;

    #[test]
    fn reads_must_keep_the_total_and_no_account_below_zero() {
        let ok = r#"{"process":2,"type":"ok","f":"read","value":{"a":45,"b":55}}"#;
        assert!(matches!(verdict(&[OPEN[0], OPEN[1], READ, ok]), LedgerVerdict::Valid { total: 100, reads: 1, .. }));
        // Money appeared: a transfer credited without its debit.
        let more = r#"{"process":2,"type":"ok","f":"read","value":{"a":50,"b":60}}"#;
        let LedgerVerdict::Invalid { bad, .. } = verdict(&[OPEN[0], OPEN[1], READ, more]) else { panic!() };
        assert_eq!((bad[0].line, bad[0].total), (4, 110));
        // An overdraft, the total kept.
        let overdrawn = r#"{"process":2,"type":"ok","f":"read","value":{"a":-10,"b":110}}"#;
        let LedgerVerdict::Invalid { bad, transfers, .. } =
            verdict(&[OPEN[0], OPEN[1], MOVE[0], MOVE[1], READ, overdrawn])
        else {
            panic!()
        };
        assert_eq!(bad[0].negative, BTreeMap::from([("a".to_owned(), -10)]));
        assert_eq!(transfers, Transfers { ok: 1, failed: 0, unknown: 0 });
        // An account lost.
        let lost = r#"{"process":2,"type":"ok","f":"read","value":{"a":100}}"#;
        let LedgerVerdict::Invalid { bad, .. } = verdict(&[OPEN[0], OPEN[1], READ, lost]) else { panic!() };
        assert_eq!(bad[0].missing, ["b"]);
        // Without a read, nothing is known.
        assert!(matches!(verdict(&[OPEN[0], OPEN[1], MOVE[0]]), LedgerVerdict::Undecided { .. }));
        // A generated ledger keeps its total; with one read's balance
        // changed, it does not.
        let text = crate::generate::ledger(200, 3);
        assert!(matches!(check(&parse(&text).unwrap()).unwrap(), LedgerVerdict::Valid { total: 500, .. }));
        let mut events = parse(&text).unwrap();
        let read = events.iter_mut().find(|e| e.f == "read" && e.kind == EventType::Ok).unwrap();
        read.value["a0"] = (read.value["a0"].as_i64().unwrap() + 1).into();
        let line = read.line;
        let LedgerVerdict::Invalid { bad, .. } = check(&events).unwrap() else { panic!() };
        assert_eq!((bad.len(), bad[0].line, bad[0].total), (1, line, 501));
        let e = check(&parse(r#"{"process":0,"type":"invoke","f":"deposit","value":1}"#).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not `deposit`"), "{e}");
    }
}
