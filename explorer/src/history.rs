//! Histories recorded through the SDK: each operation a client invokes,
//! and how it completed, sent as an event with the fixed name
//! `hvsim_history` (Antithesis `send_event("hvsim_history", {...})`, or the
//! JSON line `{"hvsim_history": {...}}` written to the SDK channel), in
//! Jepsen's vocabulary:
//!
//! ```text
//! {"hvsim_history": {"process": 0, "type": "invoke", "f": "add", "key": "s", "value": 7}}
//! {"hvsim_history": {"process": 0, "type": "ok",     "f": "add", "key": "s", "value": 7}}
//! ```
//!
//! `history` (optional) names one history of several, for the manifest's
//! checkers to pick. hvsim stamps each event with the virtual time its
//! message arrived (`time`, ns). The machine keeps every message of its
//! run in its state, snapshots included, so a timeline's history is its
//! whole line of descent: what was recorded before a snapshot belongs to
//! every branch from it, and nothing is sent twice. docs/checkers.md.

use std::collections::BTreeMap;

use hvsim_checkers::history::Event;
use hvsim_vmm::machine::Message;
use serde_json::Value;

use crate::sdk::{self, SdkMessage};

/// The SDK event name.
pub const KEY: &str = "hvsim_history";

/// One event of a recorded history.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Which history (`None`: the unnamed one).
    pub history: Option<String>,
    pub event: Event,
}

/// Parses the body of an `hvsim_history` message.
pub fn parse(body: &Value) -> Result<Recorded, String> {
    let history = match body.get("history") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(format!("{KEY} with a history name that is not a string: {other}")),
    };
    let event: Event = serde_json::from_value(body.clone()).map_err(|e| format!("{KEY} event: {e}"))?;
    Ok(Recorded { history, event })
}

/// A timeline's histories, by name (`None`: the unnamed one).
pub type Histories = BTreeMap<Option<String>, Vec<Event>>;

/// Every history recorded in `messages` (a machine's whole run), by name,
/// each event stamped with its message's virtual time and numbered from 1
/// in its history (the `line` the checkers' explanations cite).
pub fn of(messages: &[Message]) -> Histories {
    let mut out = Histories::new();
    for m in messages {
        // Cheap test first: most messages are not history events.
        if !contains(&m.bytes, KEY.as_bytes()) {
            continue;
        }
        if let SdkMessage::History(Recorded { history, mut event }) = sdk::parse(&m.bytes) {
            let events = out.entry(history).or_default();
            event.time = Some(m.vtime.nanos());
            event.line = events.len() + 1;
            events.push(event);
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvsim_vmm::Vtime;

    #[test]
    fn events_are_stamped_and_numbered_per_history() {
        let msg = |t: u64, s: &str| Message { vtime: Vtime(t), bytes: s.as_bytes().to_vec() };
        let messages = [
            msg(5, r#"{"hvsim_history":{"process":0,"type":"invoke","f":"add","value":1}}"#),
            msg(6, r#"{"antithesis_setup":{"status":"complete"}}"#),
            msg(7, r#"{"hvsim_history":{"process":0,"type":"invoke","f":"write","value":1,"history":"reg"}}"#),
            msg(9, r#"{"hvsim_history":{"process":0,"type":"ok","f":"add","value":1}}"#),
            msg(10, r#"{"hvsim_history":{"process":"zero","type":"ok"}}"#),
        ];
        let h = of(&messages);
        assert_eq!(h.len(), 2);
        let unnamed = &h[&None];
        assert_eq!(unnamed.iter().map(|e| (e.time, e.line)).collect::<Vec<_>>(), [(Some(5), 1), (Some(9), 2)]);
        assert_eq!(h[&Some("reg".to_owned())][0].f, "write");
        assert!(matches!(sdk::parse(&messages[4].bytes), SdkMessage::Garbage(_)));
    }
}
