//! The SDK protocol: JSON lines, one object with one top-level key each, in
//! the shapes the Antithesis SDKs emit (so programs instrumented for them
//! report to hvsim unchanged), plus hvsim's coverage extension. See
//! docs/sdk-protocol.md.
//!
//! Everything here is untrusted guest input: a line that is not what it
//! should be becomes [`SdkMessage::Garbage`] with the reason, never an error.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Lines longer than this are garbage (the channel itself allows 1 MiB).
pub const MAX_LINE: usize = 64 * 1024;

/// The kinds of assertion, as `display_type` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssertKind {
    Always,
    AlwaysOrUnreachable,
    Sometimes,
    Reachable,
    Unreachable,
    AlwaysGreaterThan,
    AlwaysGreaterThanOrEqualTo,
    AlwaysLessThan,
    AlwaysLessThanOrEqualTo,
    SometimesGreaterThan,
    SometimesGreaterThanOrEqualTo,
    SometimesLessThan,
    SometimesLessThanOrEqualTo,
    SometimesAll,
}

/// What an assertion demands of every hit, or of at least one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demand {
    /// Every hit must hold (`must_hit`: it must also be reached).
    Every { must_hit: bool },
    /// At least one hit must hold.
    Some,
    /// Must never be reached.
    Never,
}

impl AssertKind {
    fn from_display(display: &str) -> Option<AssertKind> {
        use AssertKind::*;
        Some(match display {
            "Always" => Always,
            "AlwaysOrUnreachable" => AlwaysOrUnreachable,
            "Sometimes" => Sometimes,
            "Reachable" => Reachable,
            "Unreachable" => Unreachable,
            "AlwaysGreaterThan" => AlwaysGreaterThan,
            "AlwaysGreaterThanOrEqualTo" => AlwaysGreaterThanOrEqualTo,
            "AlwaysLessThan" => AlwaysLessThan,
            "AlwaysLessThanOrEqualTo" => AlwaysLessThanOrEqualTo,
            "SometimesGreaterThan" => SometimesGreaterThan,
            "SometimesGreaterThanOrEqualTo" => SometimesGreaterThanOrEqualTo,
            "SometimesLessThan" => SometimesLessThan,
            "SometimesLessThanOrEqualTo" => SometimesLessThanOrEqualTo,
            "SometimesAll" => SometimesAll,
            _ => return None,
        })
    }

    pub fn demand(self) -> Demand {
        use AssertKind::*;
        match self {
            Always | AlwaysGreaterThan | AlwaysGreaterThanOrEqualTo | AlwaysLessThan | AlwaysLessThanOrEqualTo => {
                Demand::Every { must_hit: true }
            }
            AlwaysOrUnreachable => Demand::Every { must_hit: false },
            Sometimes | Reachable | SometimesGreaterThan | SometimesGreaterThanOrEqualTo | SometimesLessThan
            | SometimesLessThanOrEqualTo | SometimesAll => Demand::Some,
            Unreachable => Demand::Never,
        }
    }

    /// Whether a failing hit is a bug (the always-type kinds).
    pub fn failure_is_bug(self) -> bool {
        matches!(self.demand(), Demand::Every { .. } | Demand::Never)
    }
}

/// Where an assertion is in the program's source.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub function: String,
    #[serde(default)]
    pub class: String,
    #[serde(default)]
    pub begin_line: u64,
    #[serde(default)]
    pub begin_column: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Assertion {
    pub id: String,
    pub message: String,
    pub kind: AssertKind,
    /// `false`: a registration (the SDK announcing the assertion exists).
    pub hit: bool,
    pub condition: bool,
    pub location: Location,
    pub details: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SdkMessage {
    Assert(Assertion),
    /// Numeric guidance: the value the SDK wants maximised or minimised.
    Numeric { id: String, value: f64, maximize: bool },
    /// Boolean guidance (sometimes_all): how many of the named bools held.
    Boolean { id: String, true_count: u64 },
    /// The system is up: the explorer's root snapshot goes here.
    SetupComplete { details: Value },
    /// An edge-coverage report (hvsim extension).
    Coverage { edges: Vec<u64> },
    /// SDK identification (`antithesis_sdk`).
    SdkInfo(Value),
    /// `send_event`: any other single-key object.
    Event { name: String, details: Value },
    /// Not a valid message; why.
    Garbage(String),
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Parses one line of the protocol.
pub fn parse(line: &[u8]) -> SdkMessage {
    if line.len() > MAX_LINE {
        return SdkMessage::Garbage(format!("line of {} bytes (limit {MAX_LINE})", line.len()));
    }
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return SdkMessage::Garbage(format!("not JSON: {e}")),
    };
    let Some(obj) = v.as_object().filter(|o| o.len() == 1) else {
        return SdkMessage::Garbage("not an object with exactly one key".into());
    };
    let (key, body) = obj.iter().next().expect("one entry");
    match key.as_str() {
        "antithesis_assert" => parse_assert(body),
        "antithesis_guidance" => parse_guidance(body),
        "antithesis_setup" => match string(body, "status").as_deref() {
            Some("complete") => SdkMessage::SetupComplete { details: body.get("details").cloned().unwrap_or(Value::Null) },
            other => SdkMessage::Garbage(format!("antithesis_setup with status {other:?}")),
        },
        "antithesis_sdk" => SdkMessage::SdkInfo(body.clone()),
        "hvsim_coverage" => match body.get("edges").and_then(Value::as_array) {
            Some(edges) if edges.iter().all(Value::is_u64) => {
                SdkMessage::Coverage { edges: edges.iter().filter_map(Value::as_u64).collect() }
            }
            _ => SdkMessage::Garbage("hvsim_coverage without a list of integer edges".into()),
        },
        name => SdkMessage::Event { name: name.to_owned(), details: body.clone() },
    }
}

fn parse_assert(body: &Value) -> SdkMessage {
    let display = string(body, "display_type").unwrap_or_default();
    let Some(kind) = AssertKind::from_display(&display) else {
        return SdkMessage::Garbage(format!("antithesis_assert with unknown display_type {display:?}"));
    };
    let message = string(body, "message").unwrap_or_default();
    let id = string(body, "id").filter(|s| !s.is_empty()).unwrap_or_else(|| message.clone());
    if id.is_empty() {
        return SdkMessage::Garbage("antithesis_assert without id or message".into());
    }
    let (Some(hit), Some(condition)) =
        (body.get("hit").and_then(Value::as_bool), body.get("condition").and_then(Value::as_bool))
    else {
        return SdkMessage::Garbage(format!("antithesis_assert {id:?} without boolean hit and condition"));
    };
    let location = body.get("location").cloned().and_then(|l| serde_json::from_value(l).ok()).unwrap_or_default();
    SdkMessage::Assert(Assertion {
        id,
        message,
        kind,
        hit,
        condition,
        location,
        details: body.get("details").cloned().unwrap_or(Value::Null),
    })
}

fn parse_guidance(body: &Value) -> SdkMessage {
    let id = string(body, "id").or_else(|| string(body, "message")).unwrap_or_default();
    if id.is_empty() {
        return SdkMessage::Garbage("antithesis_guidance without id".into());
    }
    let data = body.get("guidance_data").unwrap_or(&Value::Null);
    match string(body, "guidance_type").as_deref() {
        Some("numeric") => {
            let (Some(left), Some(right)) =
                (data.get("left").and_then(Value::as_f64), data.get("right").and_then(Value::as_f64))
            else {
                return SdkMessage::Garbage(format!("numeric guidance {id:?} without left and right"));
            };
            let maximize = body.get("maximize").and_then(Value::as_bool).unwrap_or(true);
            SdkMessage::Numeric { id, value: left - right, maximize }
        }
        Some("boolean") => {
            let true_count = data.as_object().map_or(0, |o| o.values().filter(|v| v.as_bool() == Some(true)).count());
            SdkMessage::Boolean { id, true_count: true_count as u64 }
        }
        other => SdkMessage::Garbage(format!("guidance {id:?} of unknown type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_line(display: &str, hit: bool, cond: bool) -> String {
        format!(
            r#"{{"antithesis_assert":{{"id":"x","message":"x","condition":{cond},"hit":{hit},"must_hit":true,"assert_type":"always","display_type":"{display}","location":{{"file":"a.c","function":"f","class":"","begin_line":3,"begin_column":1}},"details":{{"k":1}}}}}}"#
        )
    }

    #[test]
    fn antithesis_shaped_assertions_parse() {
        match parse(assert_line("AlwaysOrUnreachable", true, false).as_bytes()) {
            SdkMessage::Assert(a) => {
                assert_eq!((a.kind, a.hit, a.condition), (AssertKind::AlwaysOrUnreachable, true, false));
                assert_eq!(a.location.begin_line, 3);
                assert_eq!(a.details["k"], 1);
            }
            m => panic!("{m:?}"),
        }
    }

    #[test]
    fn every_kind_has_a_demand() {
        for d in ["Always", "Sometimes", "Reachable", "Unreachable", "SometimesAll", "AlwaysLessThanOrEqualTo"] {
            let SdkMessage::Assert(a) = parse(assert_line(d, false, false).as_bytes()) else { panic!("{d}") };
            let _ = a.kind.demand();
        }
        assert!(AssertKind::Unreachable.failure_is_bug());
        assert!(!AssertKind::Sometimes.failure_is_bug());
    }

    #[test]
    fn lifecycle_events_guidance_and_coverage() {
        assert!(matches!(parse(br#"{"antithesis_setup":{"status":"complete","details":null}}"#), SdkMessage::SetupComplete { .. }));
        assert_eq!(
            parse(br#"{"leader_elected":{"node":2}}"#),
            SdkMessage::Event { name: "leader_elected".into(), details: serde_json::json!({"node":2}) }
        );
        assert_eq!(
            parse(br#"{"antithesis_guidance":{"guidance_type":"numeric","id":"q","maximize":true,"guidance_data":{"left":7,"right":2}}}"#),
            SdkMessage::Numeric { id: "q".into(), value: 5.0, maximize: true }
        );
        assert_eq!(parse(br#"{"hvsim_coverage":{"edges":[3,9]}}"#), SdkMessage::Coverage { edges: vec![3, 9] });
    }

    #[test]
    fn garbage_is_classified_never_fatal() {
        for bad in [
            &b"not json"[..],
            b"[1,2]",
            b"{}",
            br#"{"a":1,"b":2}"#,
            br#"{"antithesis_assert":{"display_type":"Bogus"}}"#,
            br#"{"antithesis_assert":{"id":"x","display_type":"Always"}}"#,
            br#"{"antithesis_setup":{"status":"starting"}}"#,
            br#"{"hvsim_coverage":{"edges":["a"]}}"#,
            &[0xff, 0xfe],
        ] {
            assert!(matches!(parse(bad), SdkMessage::Garbage(_)), "{}", String::from_utf8_lossy(bad));
        }
        assert!(matches!(parse(&vec![b' '; MAX_LINE + 1]), SdkMessage::Garbage(_)));
    }
}
