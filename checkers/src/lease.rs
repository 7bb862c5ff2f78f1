//! Leases: a lock that expires. A client asks for the lease for a term; a
//! client told yes may act as its only holder until it releases it or, at
//! the latest, until the term has run from when it asked (a holder cannot
//! know when the grant happened, so it counts from its request). Whether
//! two clients ever believed they held it at once is a question of time,
//! not of order: a holder that was paused past its term, or a server whose
//! clock jumped and expired the lease early, breaks mutual exclusion
//! without any answer being out of order. So the history must carry each
//! event's virtual time (`time`, as hvsim stamps the events a guest
//! records through the SDK), which is true time whatever the nodes'
//! clocks read:
//!
//! ```text
//! {"process":1,"type":"invoke","f":"acquire","key":"l","value":1000,"time":2700000000}
//! {"process":1,"type":"ok","f":"acquire","key":"l","value":1000,"time":2710000000}
//! {"process":1,"type":"invoke","f":"release","key":"l","time":3420000000}
//! {"process":1,"type":"ok","f":"release","key":"l","time":3430000000}
//! ```
//!
//! An acquire's value is its term in milliseconds (or null: no term). A
//! holder's tenure runs from its acquire's `ok` to its next release's
//! invocation, or without one, to the end of its term (to the history's
//! end if it has none). A failed acquire was refused; an unknown one (
//! `info`) leaves its client not knowing, so not acting. Two tenures of
//! different processes on one lease that overlap are a violation, named
//! with both acquires and explained: either the first holder held past its
//! term (it was paused, or its clock ran slow), or the lease was granted
//! again before the first holder's term ran out (the server's fault: its
//! clock, or its protocol).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::history::{Event, EventType};

/// One holder's belief that it held a lease, in virtual time (ns).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tenure {
    pub process: u64,
    /// The acquire's invocation and `ok` lines.
    pub line: usize,
    /// When the holder asked, and its term (ms), if it gave one.
    pub asked: u64,
    pub term_ms: Option<u64>,
    /// From the acquire's `ok` to the release's invocation (or the term's
    /// end, or the history's).
    pub start: u64,
    pub end: u64,
    /// How long it held past its term.
    pub overstayed_ns: u64,
}

impl Tenure {
    /// When its term ran out, if it had one.
    fn term_end(&self) -> Option<u64> {
        self.term_ms.map(|t| self.asked.saturating_add(t.saturating_mul(1_000_000)))
    }
}

/// Two holders at once.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overlap {
    pub key: Option<String>,
    /// The earlier tenure, and the one that began while it lasted.
    pub first: Tenure,
    pub second: Tenure,
    /// How long both held it.
    pub overlap_ns: u64,
}

impl Overlap {
    /// Whose fault it looks like, in words.
    pub fn explanation(&self) -> String {
        let (a, b) = (&self.first, &self.second);
        if a.overstayed_ns > 0 {
            format!("process {} held it {} past its term", a.process, ms(a.overstayed_ns))
        } else if let Some(end) = a.term_end() {
            format!(
                "it was granted to process {} {} before process {}'s term ran out",
                b.process,
                ms(end.saturating_sub(b.start)),
                a.process
            )
        } else {
            format!("process {} took it while process {} held it (no term)", b.process, a.process)
        }
    }

    /// Its name among a judgement's anomalies: the two acquires' lines.
    pub fn name(&self) -> String {
        let key = serde_json::Value::from(self.key.clone());
        format!("two holders {key} at lines {} and {}", self.first.line, self.second.line)
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

/// What a lease history shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum LeaseVerdict {
    Valid {
        tenures: usize,
        leases: usize,
    },
    Invalid {
        tenures: usize,
        leases: usize,
        overlaps: Vec<Overlap>,
    },
    /// No acquire succeeded: nobody held anything.
    Undecided {
        acquires: usize,
    },
}

/// An acquire that succeeded and has not been released yet.
struct Held {
    key: Option<String>,
    tenure: Tenure,
}

/// Checks a history of `acquire` and `release` operations.
pub fn check(events: &[Event]) -> Result<LeaseVerdict> {
    let mut open: HashMap<u64, &Event> = HashMap::new();
    let mut held: HashMap<(u64, Option<String>), Held> = HashMap::new();
    let mut tenures: BTreeMap<Option<String>, Vec<Tenure>> = BTreeMap::new();
    let mut acquires = 0;
    let mut last = 0;
    for e in events {
        let Some(time) = e.time else {
            return Err(Error::Model {
                line: e.line,
                detail: "a lease history needs each event's virtual time (`time`, as hvsim stamps SDK events)".into(),
            });
        };
        last = last.max(time);
        match e.kind {
            EventType::Invoke => {
                match e.f.as_str() {
                    "acquire" => acquires += 1,
                    // A holder stops acting as one when it asks to release.
                    "release" => {
                        if let Some(h) = held.remove(&(e.process, e.key.clone())) {
                            let mut t = h.tenure;
                            t.end = time.max(t.start);
                            tenures.entry(h.key).or_default().push(t);
                        }
                    }
                    f => {
                        return Err(Error::Model {
                            line: e.line,
                            detail: format!("a lease knows acquire and release, not `{f}`"),
                        })
                    }
                }
                open.insert(e.process, e);
            }
            kind => {
                let Some(invoke) = open.remove(&e.process) else {
                    return Err(Error::Malformed {
                        line: e.line,
                        detail: format!("process {} completes nothing", e.process),
                    });
                };
                if invoke.f != "acquire" || kind != EventType::Ok {
                    continue;
                }
                let term_ms = match &invoke.value {
                    serde_json::Value::Null => None,
                    v => Some(v.as_u64().ok_or_else(|| Error::Model {
                        line: invoke.line,
                        detail: format!("an acquire's value is its term in milliseconds, not {v}"),
                    })?),
                };
                let tenure = Tenure {
                    process: e.process,
                    line: e.line,
                    asked: invoke.time.unwrap_or(time),
                    term_ms,
                    start: time,
                    end: u64::MAX,
                    overstayed_ns: 0,
                };
                // Acquiring again while holding renews: one tenure.
                held.entry((e.process, invoke.key.clone()))
                    .and_modify(|h| {
                        h.tenure.asked = tenure.asked;
                        h.tenure.term_ms = term_ms;
                    })
                    .or_insert(Held { key: invoke.key.clone(), tenure });
            }
        }
    }
    // Holders that never released held to the end of their term.
    for h in held.into_values() {
        let mut t = h.tenure;
        t.end = t.term_end().unwrap_or(last).max(t.start);
        tenures.entry(h.key).or_default().push(t);
    }
    let count: usize = tenures.values().map(Vec::len).sum();
    if count == 0 {
        return Ok(LeaseVerdict::Undecided { acquires });
    }
    let leases = tenures.len();
    let mut overlaps = Vec::new();
    for (key, mut ts) in tenures {
        for t in &mut ts {
            t.overstayed_ns = t.term_end().map_or(0, |end| t.end.saturating_sub(end));
            debug_assert!(t.start <= t.end);
        }
        ts.sort_by_key(|t| (t.start, t.end, t.line));
        // A sweep: tenures that may still overlap what starts next.
        let mut live: Vec<&Tenure> = Vec::new();
        for t in &ts {
            live.retain(|l| l.end > t.start);
            for l in &live {
                let overlap_ns = l.end.min(t.end) - t.start;
                if l.process != t.process && overlap_ns > 0 {
                    overlaps.push(Overlap { key: key.clone(), first: (*l).clone(), second: t.clone(), overlap_ns });
                }
            }
            if t.end > t.start {
                live.push(t);
            }
        }
    }
    Ok(if overlaps.is_empty() {
        LeaseVerdict::Valid { tenures: count, leases }
    } else {
        LeaseVerdict::Invalid { tenures: count, leases, overlaps }
    })
}

/// The overlaps' names, for a judgement.
pub fn anomalies(v: &LeaseVerdict) -> BTreeSet<String> {
    match v {
        LeaseVerdict::Invalid { overlaps, .. } => overlaps.iter().map(Overlap::name).collect(),
        _ => BTreeSet::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::parse;

    fn op(process: u64, f: &str, kind: &str, value: &str, ms: u64) -> String {
        format!(
            r#"{{"process":{process},"type":"{kind}","f":"{f}","key":"l","value":{value},"time":{}}}"#,
            ms * 1_000_000
        )
    }

    /// Process 1 holds from 10 ms for a 100 ms term and releases at
    /// `release` ms; process 2 is granted it at `grant` ms and releases at
    /// 300.
    fn two_holders(release: u64, grant: u64) -> LeaseVerdict {
        let mut lines = [
            op(1, "acquire", "invoke", "100", 0),
            op(1, "acquire", "ok", "100", 10),
            op(2, "acquire", "invoke", "100", grant - 5),
            op(2, "acquire", "ok", "100", grant),
            op(1, "release", "invoke", "null", release),
            op(1, "release", "ok", "null", release + 1),
            op(2, "release", "invoke", "null", 300),
            op(2, "release", "ok", "null", 301),
        ];
        lines.sort_by_key(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["time"].as_u64());
        check(&parse(&lines.join("\n")).unwrap()).unwrap()
    }

    #[test]
    fn tenures_that_overlap_in_time_are_named_and_explained() {
        // A hand-over: released at 60, granted again at 120.
        assert_eq!(two_holders(60, 120), LeaseVerdict::Valid { tenures: 2, leases: 1 });
        // The holder paused past its term: released at 150 (term ended at
        // 100), the next holder granted at 120.
        let LeaseVerdict::Invalid { overlaps, .. } = two_holders(150, 120) else { panic!() };
        assert_eq!(overlaps.len(), 1);
        let o = &overlaps[0];
        assert_eq!((o.first.process, o.second.process, o.overlap_ns), (1, 2, 30_000_000));
        assert_eq!(o.explanation(), "process 1 held it 50.0 ms past its term");
        assert_eq!(o.name(), r#"two holders "l" at lines 2 and 4"#);
        // The server granted it early (its clock jumped): the first
        // holder is within its term (release at 90) when the second is
        // granted at 70.
        let LeaseVerdict::Invalid { overlaps, .. } = two_holders(90, 70) else { panic!() };
        assert_eq!(overlaps[0].explanation(), "it was granted to process 2 30.0 ms before process 1's term ran out");
        assert_eq!(overlaps[0].overlap_ns, 20_000_000);
    }

    #[test]
    fn unreleased_holders_hold_to_their_term_and_refusals_hold_nothing() {
        let lines = [
            op(1, "acquire", "invoke", "100", 0),
            op(1, "acquire", "ok", "100", 10),
            op(2, "acquire", "invoke", "100", 50),
            op(2, "acquire", "fail", "100", 55),
            op(3, "acquire", "invoke", "100", 60),
            op(3, "acquire", "info", "100", 65),
            op(4, "acquire", "invoke", "100", 101),
            op(4, "acquire", "ok", "100", 102),
        ];
        let v = check(&parse(&lines.join("\n")).unwrap()).unwrap();
        assert_eq!(v, LeaseVerdict::Valid { tenures: 2, leases: 1 });
        // Granted to 4 at 99: within 1's term, which had no release.
        let mut early = lines.clone();
        early[6] = op(4, "acquire", "invoke", "100", 98);
        early[7] = op(4, "acquire", "ok", "100", 99);
        let LeaseVerdict::Invalid { overlaps, .. } = check(&parse(&early.join("\n")).unwrap()).unwrap() else {
            panic!()
        };
        assert_eq!((overlaps[0].first.process, overlaps[0].second.process), (1, 4));
        // Nothing acquired: undecided; no times: refused with the line.
        let v = check(&parse(&lines[2..4].join("\n")).unwrap()).unwrap();
        assert_eq!(v, LeaseVerdict::Undecided { acquires: 1 });
        let e = check(&parse(r#"{"process":0,"type":"invoke","f":"acquire","value":5}"#).unwrap()).unwrap_err();
        assert!(e.to_string().contains("virtual time"), "{e}");
    }

    #[test]
    fn generated_leases_are_valid_and_one_early_grant_is_caught() {
        let text = crate::generate::lease(2_000, 7);
        let events = parse(&text).unwrap();
        let LeaseVerdict::Valid { tenures, .. } = check(&events).unwrap() else { panic!() };
        assert!(tenures > 100, "{tenures}");
        // Move one grant (invocation and ok) back into the previous
        // holder's tenure, another process's.
        let mut events = events;
        let oks: Vec<usize> =
            (0..events.len()).filter(|&i| events[i].f == "acquire" && events[i].kind == EventType::Ok).collect();
        let (prev, next) =
            oks.windows(2).map(|w| (w[0], w[1])).find(|&(a, b)| events[a].process != events[b].process).unwrap();
        let t = events[prev].time.unwrap() + 1;
        let invoke = (0..next).rev().find(|&i| events[i].process == events[next].process).unwrap();
        events[invoke].time = Some(t - 1);
        events[next].time = Some(t);
        let LeaseVerdict::Invalid { overlaps, .. } = check(&events).unwrap() else { panic!() };
        assert_eq!(overlaps.len(), 1);
        assert_eq!(overlaps[0].second.line, events[next].line);
    }
}
