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
//! every branch from it, and nothing is sent twice (`sdk::histories`
//! gathers a timeline's). docs/checkers.md.

use std::collections::BTreeMap;

use hvsim_checkers::history::Event;
use serde_json::Value;

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
