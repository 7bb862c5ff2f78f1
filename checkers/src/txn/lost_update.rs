//! Lost updates, named as Elle names them: two committed transactions
//! read the same version of a key and both then write it (append to it,
//! or write it). Whichever wrote second never saw the first's write, so
//! the first's update is lost to it: a read-modify-write that repeatable
//! read and snapshot isolation both forbid, and a special case of
//! G-single (the second writer's read precedes the first's write, which
//! precedes the second's). The cycle search finds the G-single too; this
//! says in the words a database's users know which key and version it
//! was.

use std::collections::BTreeMap;

use super::consistency::Anomaly;
use super::inference::Observation;
use super::transaction::{Mop, Scalar, Status, Txn};

/// Every key and version read by two or more committed transactions that
/// then wrote the key: one observation each, the transactions in order.
pub fn lost_updates(txns: &[Txn]) -> Vec<Observation> {
    let mut readers: BTreeMap<(&Scalar, &[Scalar]), Vec<usize>> = BTreeMap::new();
    for (t, txn) in txns.iter().enumerate() {
        if txn.status != Status::Ok {
            continue;
        }
        // Each key's external read (its first micro-operation on the key,
        // if a read), if the transaction writes the key after it.
        let mut first: BTreeMap<&Scalar, Option<&[Scalar]>> = BTreeMap::new();
        let mut wrote: Vec<&Scalar> = Vec::new();
        for mop in &txn.mops {
            match mop {
                Mop::Read { key, value: Some(v) } => {
                    first.entry(key).or_insert(Some(v.as_slice()));
                }
                Mop::Read { key, value: None } => {
                    first.entry(key).or_insert(None);
                }
                Mop::Append { key, .. } | Mop::Write { key, .. } => {
                    first.entry(key).or_insert(None);
                    if !wrote.contains(&key) {
                        wrote.push(key);
                    }
                }
            }
        }
        for key in wrote {
            if let Some(Some(version)) = first.get(key) {
                readers.entry((key, version)).or_default().push(t);
            }
        }
    }
    readers
        .into_iter()
        .filter(|(_, ts)| ts.len() > 1)
        .map(|((key, version), txns)| {
            let version: Vec<String> = version.iter().map(ToString::to_string).collect();
            let others: Vec<String> = txns[1..].iter().map(|t| format!("T{t}")).collect();
            // "T1 and T2 both", "T1 and 2 others (T2, T3) all" (the first
            // is named before this, as for every observation).
            let (others, lost) = match others.as_slice() {
                [one] => (format!("and {one} both"), "one update lost".to_owned()),
                more => (
                    format!("and {} others ({}) all", more.len(), more.join(", ")),
                    format!("{} updates lost", more.len()),
                ),
            };
            Observation {
                anomaly: Anomaly::LostUpdate,
                what: format!("{others} read {key} as [{}] and then wrote it: {lost}", version.join(" ")),
                txns,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;
    use crate::txn::transaction::{transactions, TxnModel};

    fn txns(lines: &[&str]) -> Vec<Txn> {
        transactions(TxnModel::ListAppend, &parse(&lines.join("\n")).unwrap()).unwrap()
    }

    #[test]
    fn two_read_modify_writes_of_one_version_lose_an_update() {
        let both = [
            r#"{"process":0,"type":"invoke","f":"txn","value":[["r","x",null],["append","x",1]]}"#,
            r#"{"process":1,"type":"invoke","f":"txn","value":[["r","x",null],["append","x",2]]}"#,
            r#"{"process":0,"type":"ok","f":"txn","value":[["r","x",[]],["append","x",1]]}"#,
            r#"{"process":1,"type":"ok","f":"txn","value":[["r","x",[]],["append","x",2]]}"#,
        ];
        let found = lost_updates(&txns(&both));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].txns, [0, 1]);
        assert_eq!(found[0].what, "and T1 both read x as [] and then wrote it: one update lost");
        // The second saw the first's append: no update lost.
        let after = [
            r#"{"process":0,"type":"invoke","f":"txn","value":[["r","x",null],["append","x",1]]}"#,
            r#"{"process":0,"type":"ok","f":"txn","value":[["r","x",[]],["append","x",1]]}"#,
            r#"{"process":1,"type":"invoke","f":"txn","value":[["r","x",null],["append","x",2]]}"#,
            r#"{"process":1,"type":"ok","f":"txn","value":[["r","x",[1]],["append","x",2]]}"#,
        ];
        assert!(lost_updates(&txns(&after)).is_empty());
        // Three read-modify-writes of one version: two updates lost.
        let three = [
            both[0],
            both[1],
            r#"{"process":2,"type":"invoke","f":"txn","value":[["r","x",null],["append","x",3]]}"#,
            both[2],
            both[3],
            r#"{"process":2,"type":"ok","f":"txn","value":[["r","x",[]],["append","x",3]]}"#,
        ];
        let found = lost_updates(&txns(&three));
        assert_eq!(
            (found[0].txns.as_slice(), found[0].what.as_str()),
            (&[0, 1, 2][..], "and 2 others (T1, T2) all read x as [] and then wrote it: 2 updates lost")
        );
        // A failed writer lost nothing; a read after one's own write is
        // not an external read.
        let failed = [
            both[0],
            both[1],
            both[2],
            r#"{"process":1,"type":"fail","f":"txn","value":[["r","x",null],["append","x",2]]}"#,
        ];
        assert!(lost_updates(&txns(&failed)).is_empty());
        let internal = [
            r#"{"process":0,"type":"invoke","f":"txn","value":[["append","x",1],["r","x",null]]}"#,
            r#"{"process":1,"type":"invoke","f":"txn","value":[["append","x",2],["r","x",null]]}"#,
            r#"{"process":0,"type":"ok","f":"txn","value":[["append","x",1],["r","x",[1]]]}"#,
            r#"{"process":1,"type":"ok","f":"txn","value":[["append","x",2],["r","x",[1,2]]]}"#,
        ];
        assert!(lost_updates(&txns(&internal)).is_empty());
    }
}
