//! Elle's own test histories (jepsen-io/elle, `test/elle/list_append_test.clj`
//! and `rw_register_test.clj`), converted to hvsim's history format in
//! `data/elle/`, each with the verdicts Elle's tests expect of it. Every
//! verdict hvsim's models can express must agree: valid or not at the
//! consistency models (or anomalies) the test asks for, every anomaly Elle
//! reports found by hvsim too (under its name here), and every model Elle
//! rules out ruled out. Where hvsim deliberately differs, the case is
//! listed in `DIFFERS` with why, and the test fails if it stops
//! differing. What was left out, and why, is in each case's `left_out`
//! (docs/checkers.md sums it up).

use std::collections::BTreeSet;

use hvsim_checkers::history::Event;
use hvsim_checkers::txn::consistency::implied;
use hvsim_checkers::txn::{check, Anomaly, Consistency, TxnModel, TxnOptions, TxnVerdict, Validity};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct Case {
    name: String,
    source: String,
    history: Vec<Value>,
    checks: Vec<Check>,
    left_out: Option<String>,
}

#[derive(Deserialize)]
struct Check {
    options: Opts,
    valid: Option<Value>,
    anomaly_types: Option<Vec<String>>,
    not: Option<Vec<String>>,
}

/// The options map Elle's test passed.
#[derive(Deserialize)]
struct Opts(serde_json::Map<String, Value>);

impl Opts {
    /// The models asked for: Elle's default, strict serializable, where
    /// the test passes none; nothing where it passes nil.
    fn models(&self) -> Vec<String> {
        match self.0.get("consistency-models") {
            None => vec!["strict-serializable".to_owned()],
            Some(v) => serde_json::from_value::<Option<Vec<String>>>(v.clone()).unwrap().unwrap_or_default(),
        }
    }

    fn anomalies(&self) -> Vec<String> {
        self.0.get("anomalies").and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
    }

    /// Elle's `wfr-keys?` (off unless asked).
    fn wfr(&self) -> bool {
        self.0.get("wfr-keys").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// Cases where hvsim's verdict differs from Elle's on purpose: (case
/// name, the Elle check's options as JSON, why).
const DIFFERS: &[(&str, &str)] = &[];

/// Elle's name for an anomaly, as hvsim names it; `None` for what hvsim
/// does not report (warnings, process-order variants it has no edges
/// for).
fn anomaly(elle: &str) -> Option<Anomaly> {
    let name = elle.replace("-item", "");
    let name = match name.as_str() {
        "G2" => "G2-item",
        "empty-transaction-graph" | "cycle-search-timeout" => return None,
        n if n.ends_with("-process") => return None,
        n => n,
    };
    let a = Anomaly::ALL.into_iter().find(|a| a.name() == name);
    assert!(a.is_some() || name == "cyclic-versions", "Elle's {elle} has no name here");
    a
}

fn model(elle: &str) -> Option<Consistency> {
    elle.parse().ok()
}

/// Elle's expected `valid?`: true, false, or unknown (which hvsim never
/// says for these: Elle's unknown comes from an empty dependency graph or
/// a timed-out search, neither of which leaves hvsim unsure).
fn expected_valid(v: &Value, types: &[String]) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ if types.iter().all(|t| t == "empty-transaction-graph") => Some(true),
        _ => None,
    }
}

fn run(model_kind: TxnModel, file: &str) -> (usize, usize) {
    let text = std::fs::read_to_string(format!("{}/tests/data/elle/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let cases: Vec<Case> = serde_json::from_str(&text).unwrap();
    let (mut compared, mut skipped) = (0, 0);
    let mut differing = Vec::new();
    for case in cases.iter().filter(|c| c.left_out.is_none()) {
        let events: Vec<Event> = case
            .history
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut e: Event = serde_json::from_value(e.clone()).unwrap();
                e.line = i + 1;
                e
            })
            .collect();
        for chk in &case.checks {
            let models = chk.options.models();
            let ours: Vec<Consistency> = models.iter().filter_map(|m| model(m)).collect();
            if ours.len() != models.len() {
                skipped += 1;
                continue;
            }
            let asked: BTreeSet<Anomaly> =
                chk.options.anomalies().iter().map(|a| anomaly(a).expect("an anomaly hvsim names")).collect();
            let verdicts: Vec<TxnVerdict> = ours
                .iter()
                .chain(ours.is_empty().then_some(&Consistency::ReadUncommitted))
                .map(|&m| {
                    let options = TxnOptions { writes_follow_reads: chk.options.wfr(), ..TxnOptions::new(m) };
                    check(model_kind, &events, options)
                        .unwrap_or_else(|e| panic!("{} ({}): {e}", case.name, case.source))
                })
                .collect();
            let found: BTreeSet<Anomaly> = verdicts.iter().flat_map(|v| v.found.keys().copied()).collect();
            let mut wrong = Vec::new();
            if let Some(valid) =
                chk.valid.as_ref().and_then(|v| expected_valid(v, chk.anomaly_types.as_deref().unwrap_or_default()))
            {
                let models_hold = ours.iter().zip(&verdicts).all(|(_, v)| v.verdict == Validity::Valid);
                let anomalies_absent = found.iter().all(|&a| implied(&BTreeSet::from([a])).is_disjoint(&asked));
                let hvsim = models_hold && anomalies_absent;
                if hvsim != valid {
                    wrong.push(format!("valid? Elle {valid}, hvsim {hvsim}"));
                }
            }
            for t in chk.anomaly_types.iter().flatten() {
                let Some(a) = anomaly(t) else { continue };
                if !implied(&found).contains(&a) {
                    wrong.push(format!("Elle reports {t}, hvsim found {found:?}"));
                }
            }
            let ruled_out: BTreeSet<Consistency> =
                hvsim_checkers::txn::Standing::of(&found, &[]).ruled_out.into_iter().collect();
            for m in chk.not.iter().flatten().filter_map(|m| model(m)) {
                if !ruled_out.contains(&m) {
                    wrong.push(format!("Elle rules out {m}, hvsim only {ruled_out:?}"));
                }
            }
            let options = serde_json::to_string(&chk.options.0).unwrap();
            let listed = DIFFERS.iter().any(|(n, o)| *n == case.name && *o == options);
            if wrong.is_empty() == listed {
                let summaries: Vec<String> = verdicts.iter().map(TxnVerdict::summary).collect();
                differing.push(format!(
                    "{} ({}) {options}: {}\n    hvsim: {}",
                    case.name,
                    case.source,
                    if listed { "listed in DIFFERS but agrees now".to_owned() } else { wrong.join("; ") },
                    summaries.join(" | ")
                ));
            }
            compared += 1;
        }
    }
    assert!(differing.is_empty(), "{} of Elle's checks disagree:\n{}", differing.len(), differing.join("\n"));
    (compared, skipped)
}

#[test]
fn list_append_agrees_with_elles_own_tests() {
    let (compared, skipped) = run(TxnModel::ListAppend, "list-append.json");
    eprintln!("list-append: {compared} of Elle's checks compared, {skipped} asking models hvsim lacks");
    assert!(compared >= 40, "{compared}");
}

#[test]
fn rw_register_agrees_with_elles_own_tests() {
    let (compared, skipped) = run(TxnModel::RwRegister, "rw-register.json");
    eprintln!("rw-register: {compared} of Elle's checks compared, {skipped} asking models hvsim lacks");
    assert!(compared >= 15, "{compared}");
}
