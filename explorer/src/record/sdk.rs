//! The SDK protocol: JSON lines, one object with one top-level key each, in
//! the shapes the Antithesis SDKs emit (so programs instrumented for them
//! report to hvsim unchanged), plus hvsim's coverage extension. See
//! docs/sdk-protocol.md.
//!
//! Everything here is untrusted guest input: a line that is not what it
//! should be becomes [`SdkMessage::Garbage`] with the reason, never an error.

use hvsim_vmm::machine::Message;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::composer::{self, ComposerEvent};
use crate::record::history::{self, Histories, Recorded};

/// What an assertion is, as far as its verdict goes: Antithesis derives it
/// from `assert_type` and `must_hit` (`display_type` is only a name to show).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssertKind {
    /// `always`, must be hit.
    Always,
    /// `always`, need not be hit.
    AlwaysOrUnreachable,
    /// `sometimes`.
    Sometimes,
    /// `reachability`, must be hit.
    Reachable,
    /// `reachability`, must not be hit.
    Unreachable,
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
    /// The kind of an assertion of `assert_type` and `must_hit`.
    fn of(assert_type: &str, must_hit: bool) -> Option<AssertKind> {
        use AssertKind::*;
        Some(match (assert_type, must_hit) {
            ("always", true) => Always,
            ("always", false) => AlwaysOrUnreachable,
            ("sometimes", _) => Sometimes,
            ("reachability", true) => Reachable,
            ("reachability", false) => Unreachable,
            _ => return None,
        })
    }

    /// For messages without `assert_type` (older hvsim SDKs): the kind a
    /// `display_type` names.
    fn from_display(display: &str) -> Option<AssertKind> {
        use AssertKind::*;
        Some(match display {
            "AlwaysOrUnreachable" => AlwaysOrUnreachable,
            "Reachable" => Reachable,
            "Unreachable" => Unreachable,
            d if d.starts_with("Always") => Always,
            d if d.starts_with("Sometimes") => Sometimes,
            _ => return None,
        })
    }

    fn assert_type(self) -> &'static str {
        match self {
            AssertKind::Always | AssertKind::AlwaysOrUnreachable => "always",
            AssertKind::Sometimes => "sometimes",
            AssertKind::Reachable | AssertKind::Unreachable => "reachability",
        }
    }

    /// The `display_type` Antithesis's SDKs give this kind.
    pub fn display(self) -> &'static str {
        match self {
            AssertKind::Always => "Always",
            AssertKind::AlwaysOrUnreachable => "AlwaysOrUnreachable",
            AssertKind::Sometimes => "Sometimes",
            AssertKind::Reachable => "Reachable",
            AssertKind::Unreachable => "Unreachable",
        }
    }

    pub fn demand(self) -> Demand {
        match self {
            AssertKind::Always => Demand::Every { must_hit: true },
            AssertKind::AlwaysOrUnreachable => Demand::Every { must_hit: false },
            AssertKind::Sometimes | AssertKind::Reachable => Demand::Some,
            AssertKind::Unreachable => Demand::Never,
        }
    }

    /// Whether a hit with `condition` is a bug: an always-type hit that
    /// did not hold, or an unreachable point reached. Judged from the
    /// message alone, so every judge of one message agrees.
    pub fn fails(self, condition: bool) -> bool {
        match self.demand() {
            Demand::Every { .. } => !condition,
            Demand::Never => true,
            Demand::Some => false,
        }
    }

    /// Whether a failing hit is a bug (the always-type kinds).
    pub fn failure_is_bug(self) -> bool {
        matches!(self.demand(), Demand::Every { .. } | Demand::Never)
    }
}

/// Where an assertion is in the program's source.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
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
    /// The SDK's name for it (`display_type`, e.g. `AlwaysGreaterThan`).
    pub display: String,
    /// `false`: a registration (the SDK announcing the assertion exists).
    pub hit: bool,
    pub condition: bool,
    pub location: Location,
    pub details: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SdkMessage {
    Assert(Assertion),
    /// Numeric guidance: the value (`left - right`) the SDK wants maximised
    /// or minimised.
    Numeric {
        id: String,
        value: f64,
        maximize: bool,
    },
    /// Boolean guidance: how many of the named bools held; `maximize`:
    /// more is better (`sometimes_all`), else fewer (`always_some`).
    Boolean {
        id: String,
        true_count: u64,
        maximize: bool,
    },
    /// JSON guidance: any value; a value never seen before is progress.
    Json {
        id: String,
        value: Value,
    },
    /// Guidance announced before it is reached (`guidance_data: null`).
    GuidanceRegistered {
        id: String,
    },
    /// The system is up: the explorer's root snapshot goes here.
    SetupComplete {
        details: Value,
    },
    /// An edge-coverage report (hvsim extension; libvoidstar sends them).
    Coverage {
        edges: Vec<u64>,
    },
    /// An instrumented module: its edges are `base + 1 ..= base + edges`.
    CoverageModule {
        name: String,
        edges: u64,
        base: u64,
    },
    /// SDK identification (`antithesis_sdk`).
    SdkInfo(Value),
    /// What init's Test Composer ran (`crate::record::composer`).
    Composer(ComposerEvent),
    /// An SDK draw follows (`hvsim_draw`): a decision point whose value
    /// the explorer may choose; `options`: how many outcomes the program
    /// makes of it, if the SDK knows (`random_choice`).
    Draw {
        options: Option<u64>,
    },
    /// A buggify site is reached (`hvsim_buggify`): the VMM decides and
    /// counts (`hvsim_vmm::faults::buggify`).
    Buggify {
        name: String,
    },
    /// What init tells or asks the machine itself (`hvsim_clock`,
    /// `hvsim_custom`, `hvsim_faults`): the VMM acts on it
    /// (`hvsim_vmm::control`); nothing for the explorer.
    Machine,
    /// An operation of a recorded history (`send_event("hvsim_history",
    /// ...)`: `crate::record::history`).
    History(Recorded),
    /// `send_event`: any other single-key object.
    Event {
        name: String,
        details: Value,
    },
    /// Not a valid message; why.
    Garbage(String),
}

fn string(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Parses one line of the protocol (of any length: the channel carries
/// messages as long as the guest's RAM).
pub fn parse(line: &[u8]) -> SdkMessage {
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
            Some("complete") => {
                SdkMessage::SetupComplete { details: body.get("details").cloned().unwrap_or(Value::Null) }
            }
            other => SdkMessage::Garbage(format!("antithesis_setup with status {other:?}")),
        },
        "antithesis_sdk" => SdkMessage::SdkInfo(body.clone()),
        "hvsim_coverage" => match body.get("edges").and_then(Value::as_array) {
            Some(edges) if edges.iter().all(Value::is_u64) => {
                SdkMessage::Coverage { edges: edges.iter().filter_map(Value::as_u64).collect() }
            }
            _ => SdkMessage::Garbage("hvsim_coverage without a list of integer edges".into()),
        },
        "hvsim_coverage_module" => match (
            string(body, "name"),
            body.get("edges").and_then(Value::as_u64),
            body.get("base").and_then(Value::as_u64),
        ) {
            (Some(name), Some(edges), Some(base)) => SdkMessage::CoverageModule { name, edges, base },
            _ => SdkMessage::Garbage("hvsim_coverage_module without name, edges and base".into()),
        },
        "hvsim_draw" => match (body.as_object(), body.get("options")) {
            (Some(_), None | Some(Value::Null)) => SdkMessage::Draw { options: None },
            (Some(_), Some(n)) if n.as_u64().is_some_and(|n| n > 0) => SdkMessage::Draw { options: n.as_u64() },
            _ => SdkMessage::Garbage("hvsim_draw without an object with a positive options count".into()),
        },
        "hvsim_buggify" => match string(body, "name") {
            Some(name) => SdkMessage::Buggify { name },
            None => SdkMessage::Garbage("hvsim_buggify without a site name".into()),
        },
        history::KEY => history::parse(body).map_or_else(SdkMessage::Garbage, SdkMessage::History),
        composer::KEY => ComposerEvent::parse(body).map_or_else(SdkMessage::Garbage, SdkMessage::Composer),
        "hvsim_clock"
        | "hvsim_custom"
        | "hvsim_faults"
        | "hvsim_composer_run"
        | "hvsim_composer_template"
        | "hvsim_composer_commands" => SdkMessage::Machine,
        name => SdkMessage::Event { name: name.to_owned(), details: body.clone() },
    }
}

fn parse_assert(body: &Value) -> SdkMessage {
    let display = string(body, "display_type").unwrap_or_default();
    let must_hit = body.get("must_hit").and_then(Value::as_bool);
    let kind = match (string(body, "assert_type"), must_hit) {
        (Some(t), Some(must_hit)) => AssertKind::of(&t, must_hit),
        // Without must_hit, the display type settles it.
        (Some(t), None) => AssertKind::from_display(&display).filter(|k| k.assert_type() == t),
        (None, _) => AssertKind::from_display(&display),
    };
    let Some(kind) = kind else {
        return SdkMessage::Garbage(format!(
            "antithesis_assert with assert_type {:?}, must_hit {must_hit:?} and display_type {display:?}",
            string(body, "assert_type")
        ));
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
        display: if display.is_empty() { kind.display().to_owned() } else { display },
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
    let hit = body.get("hit").and_then(Value::as_bool).unwrap_or(true);
    let maximize = body.get("maximize").and_then(Value::as_bool).unwrap_or(true);
    let kind = string(body, "guidance_type");
    if !matches!(kind.as_deref(), Some("numeric" | "boolean" | "json")) {
        return SdkMessage::Garbage(format!("guidance {id:?} of unknown type {kind:?}"));
    }
    // SDKs announce guidance with no data before it is reached.
    if !hit || data.is_null() {
        return SdkMessage::GuidanceRegistered { id };
    }
    match kind.as_deref() {
        Some("numeric") => {
            let (Some(left), Some(right)) =
                (data.get("left").and_then(Value::as_f64), data.get("right").and_then(Value::as_f64))
            else {
                return SdkMessage::Garbage(format!("numeric guidance {id:?} without left and right"));
            };
            SdkMessage::Numeric { id, value: left - right, maximize }
        }
        Some("boolean") => match data.as_object() {
            Some(o) => {
                let true_count = o.values().filter(|v| v.as_bool() == Some(true)).count() as u64;
                SdkMessage::Boolean { id, true_count, maximize }
            }
            None => SdkMessage::Garbage(format!("boolean guidance {id:?} whose data is not an object")),
        },
        _ => SdkMessage::Json { id, value: data.clone() },
    }
}

/// Every history recorded in `messages` (a machine's whole run), by name,
/// each event stamped with its message's virtual time and numbered from 1
/// in its history (the `line` the checkers' explanations cite).
pub fn histories<'a>(messages: impl IntoIterator<Item = &'a Message>) -> Histories {
    let mut out = Histories::new();
    for m in messages {
        // Cheap test first: most messages are not history events.
        if !m.bytes.windows(history::KEY.len()).any(|w| w == history::KEY.as_bytes()) {
            continue;
        }
        if let SdkMessage::History(Recorded { history, mut event }) = parse(&m.bytes) {
            let events = out.entry(history).or_default();
            event.time = Some(m.vtime.nanos());
            event.line = events.len() + 1;
            events.push(event);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_line(display: &str, hit: bool, cond: bool) -> String {
        format!(
            r#"{{"antithesis_assert":{{"id":"x","message":"x","condition":{cond},"hit":{hit},"must_hit":false,"assert_type":"always","display_type":"{display}","location":{{"file":"a.c","function":"f","class":"","begin_line":3,"begin_column":1}},"details":{{"k":1}}}}}}"#
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

    /// The meaning comes from assert_type and must_hit, as the official SDKs
    /// set them (their rich assertions say only "Always" or "Sometimes").
    #[test]
    fn kinds_come_from_assert_type_and_must_hit() {
        let line = |t: &str, must_hit: &str, display: &str| {
            format!(
                r#"{{"antithesis_assert":{{"assert_type":{t},"condition":false,"details":null,"display_type":"{display}","hit":true,"id":"x","location":{{}},"message":"x"{must_hit}}}}}"#
            )
        };
        for (t, must_hit, display, kind) in [
            (r#""always""#, r#","must_hit":true"#, "Always", AssertKind::Always),
            (r#""always""#, r#","must_hit":false"#, "AlwaysOrUnreachable", AssertKind::AlwaysOrUnreachable),
            (r#""sometimes""#, r#","must_hit":true"#, "Sometimes", AssertKind::Sometimes),
            (r#""reachability""#, r#","must_hit":true"#, "Reachable", AssertKind::Reachable),
            (r#""reachability""#, r#","must_hit":false"#, "Unreachable", AssertKind::Unreachable),
            // The display type does not decide, even when it disagrees.
            (r#""always""#, r#","must_hit":true"#, "Whatever the SDK calls it", AssertKind::Always),
            (r#""sometimes""#, r#","must_hit":true"#, "SometimesGreaterThan", AssertKind::Sometimes),
            // Without must_hit, the display type settles it.
            (r#""reachability""#, "", "Unreachable", AssertKind::Unreachable),
            // Without assert_type (older hvsim SDKs), the display type.
            ("null", r#","must_hit":true"#, "AlwaysLessThanOrEqualTo", AssertKind::Always),
        ] {
            match parse(line(t, must_hit, display).as_bytes()) {
                SdkMessage::Assert(a) => {
                    assert_eq!((a.kind, a.display.as_str()), (kind, display), "{t} {must_hit} {display}")
                }
                m => panic!("{t} {must_hit} {display}: {m:?}"),
            }
        }
        assert!(AssertKind::Unreachable.failure_is_bug());
        assert!(!AssertKind::Sometimes.failure_is_bug());
        assert!(matches!(
            parse(line(r#""eventually""#, r#","must_hit":true"#, "Always").as_bytes()),
            SdkMessage::Garbage(_)
        ));
    }

    /// Guidance as the official SDKs send it: registrations with null data,
    /// minimizing numeric guidance, always_some's "want none" booleans.
    #[test]
    fn guidance_in_every_shape() {
        assert_eq!(
            parse(br#"{"antithesis_guidance":{"guidance_data":null,"guidance_type":"numeric","hit":false,"id":"x positive","location":{},"maximize":false,"message":"x positive"}}"#),
            SdkMessage::GuidanceRegistered { id: "x positive".into() }
        );
        assert_eq!(
            parse(br#"{"antithesis_guidance":{"guidance_data":{"left":5,"right":0},"guidance_type":"numeric","hit":true,"id":"x positive","location":{},"maximize":false,"message":"x positive"}}"#),
            SdkMessage::Numeric { id: "x positive".into(), value: 5.0, maximize: false }
        );
        assert_eq!(
            parse(br#"{"antithesis_guidance":{"guidance_data":{"a":true,"b":false},"guidance_type":"boolean","hit":true,"id":"some","maximize":false,"message":"some"}}"#),
            SdkMessage::Boolean { id: "some".into(), true_count: 1, maximize: false }
        );
        assert_eq!(
            parse(br#"{"antithesis_guidance":{"guidance_data":{"phase":3},"guidance_type":"json","hit":true,"id":"j","maximize":true,"message":"j"}}"#),
            SdkMessage::Json { id: "j".into(), value: serde_json::json!({"phase":3}) }
        );
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
            br#"{"hvsim_draw":{"options":0}}"#,
            br#"{"hvsim_draw":3}"#,
            br#"{"antithesis_guidance":{"guidance_type":"numeric","id":"q","hit":true,"guidance_data":{"left":1}}}"#,
            br#"{"antithesis_guidance":{"guidance_type":"telepathy","id":"q","hit":true,"guidance_data":{}}}"#,
            &[0xff, 0xfe],
        ] {
            assert!(matches!(parse(bad), SdkMessage::Garbage(_)), "{}", String::from_utf8_lossy(bad));
        }
    }

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// What the `sdk` fuzz target does, over its corpus and regressions;
    /// every seed (the protocol's examples) is a message, not garbage.
    #[test]
    fn fuzz_corpus_and_regressions_parse_without_panics() {
        let inputs = fuzz_inputs("sdk");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let m = parse(&data);
            if let SdkMessage::Assert(a) = &m {
                let _ = (a.kind.display(), a.kind.demand(), a.kind.failure_is_bug());
            }
            if file.iter().any(|c| c == "corpus") {
                assert!(!matches!(m, SdkMessage::Garbage(_)), "{}: {m:?}", file.display());
            }
        }
    }

    #[test]
    fn history_events_are_stamped_and_numbered_per_history() {
        use hvsim_vmm::Vtime;
        let msg = |t: u64, s: &str| Message { vtime: Vtime(t), bytes: s.as_bytes().to_vec(), sender: None };
        let messages = [
            msg(5, r#"{"hvsim_history":{"process":0,"type":"invoke","f":"add","value":1}}"#),
            msg(6, r#"{"antithesis_setup":{"status":"complete"}}"#),
            msg(7, r#"{"hvsim_history":{"process":0,"type":"invoke","f":"write","value":1,"history":"reg"}}"#),
            msg(9, r#"{"hvsim_history":{"process":0,"type":"ok","f":"add","value":1}}"#),
            msg(10, r#"{"hvsim_history":{"process":"zero","type":"ok"}}"#),
        ];
        let h = histories(&messages);
        assert_eq!(h.len(), 2);
        let unnamed = &h[&None];
        assert_eq!(unnamed.iter().map(|e| (e.time, e.line)).collect::<Vec<_>>(), [(Some(5), 1), (Some(9), 2)]);
        assert_eq!(h[&Some("reg".to_owned())][0].f, "write");
        assert!(matches!(parse(&messages[4].bytes), SdkMessage::Garbage(_)));
    }
}
