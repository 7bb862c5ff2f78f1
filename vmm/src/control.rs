//! The few guest messages the machine itself acts on, at the exit that
//! carries them (so that every execution of a timeline acts on them at the
//! same point): every message still goes on to whoever reads them (the
//! explorer), these are only also acted on.
//!
//! - `{"antithesis_setup": {"status": "complete", ...}}` (the SDKs'
//!   setup complete): drawn faults are armed (`faults/schedule.rs`), and a
//!   guest that asked for it (`hc::caps::SETUP`) gets `hc::event::SETUP`.
//! - `{"hvsim_faults": {"pause": "10s"}}` pauses every fault for that much
//!   virtual time (`"pause": null`: until resumed), what
//!   `$ANTITHESIS_STOP_FAULTS 10` does in hvsim's guest;
//!   `{"hvsim_faults": {"resume": true}}` ends a pause.
//!
//! Some are questions: their answer (8 bytes) is taken by the command right
//! after the message's `SEND`, `hc::op::ANSWER` (or a `RANDOM` of at most 8
//! bytes), and by nothing later, so no other reader can take it.
//!
//! - `{"hvsim_draw": {...}}`: the SDK draws a random value (the answer): a
//!   point where the explorer may choose the value
//!   (`Hypercall::choose_draw`, docs/sdk-protocol.md).
//! - `{"hvsim_buggify": {"name": "...", "fire": 0.25}}`: a buggify site is
//!   reached; the answer is 1 if it fires now, else 0 (`faults/buggify.rs`).
//!
//! - `{"hvsim_clock": {"want": "offset", "node": N}}` (or `{"want":
//!   "rate"}`): the guest's init applies a clock fault; the answer is node
//!   N's realtime offset in nanoseconds (or the machine's rate in parts per
//!   million), an `i64` (`faults/clock.rs`).
//!
//! - `{"hvsim_custom": {"index": 0, "node": 1, "status": 0}}`: init reports
//!   that a custom fault's command ended (its landing evidence).
//!
//! - `{"hvsim_composer_run": {"run": N}}`: init's Test Composer is about to
//!   start its command run N; the answer is 1 if the
//!   command may start, 0 if the timeline took it back (`faults::Vetoes`,
//!   `hvsim minimize`).
//!
//! - `{"hvsim_composer_template": {"templates": ["a", "b"]}}`: init's Test
//!   Composer is about to choose its template among these; the answer is
//!   the index of the one the explorer chose for this line of descent
//!   (`--schedule bandit`, `Machine::choose_template`), `u64::MAX` if it
//!   chose none (or none of these): the composer draws one itself.
//!
//! - `{"hvsim_composer_commands": {"commands": ["t/a.sh", "t/b.sh"]}}`:
//!   init's Test Composer is about to run its template's drivers and
//!   anytime commands, these; the answer is a mask of those switched on
//!   for this line of descent (bit i: command i; `Machine::choose_commands`),
//!   `u64::MAX` (every one) if the explorer chose none, none of these, or
//!   the list is longer than 64.
//!
//! - `{"hvsim_composer_budget": {}}`: init's Test Composer asks how long it
//!   may run drivers; the answer is the nanoseconds
//!   until it must wind down (stop its drivers and run its last check) so
//!   that the check ends before the timeline's limit, `u64::MAX` if never.
//!
//! Messages are untrusted: anything else, or a malformed one of these, is
//! not a control message (the explorer counts garbage).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    SetupComplete,
    /// Pause faults for this many nanoseconds (`None`: until resumed).
    PauseFaults(Option<u64>),
    ResumeFaults,
    /// An SDK draw follows.
    Draw,
    /// A buggify site is reached (its chance of firing, if the program
    /// gives one).
    Buggify {
        name: String,
        fire: Option<f64>,
    },
    /// The guest asks what its realtime clock should read.
    Clock(ClockWant),
    /// A custom fault's command ended.
    CustomDone,
    /// Test Composer asks whether its command run N may start.
    ComposerRun(u64),
    /// Test Composer asks how long until it winds down.
    ComposerBudget,
    /// Test Composer asks which of these templates to run.
    ComposerTemplate(Vec<String>),
    /// Test Composer asks which of these commands are switched on.
    ComposerCommands(Vec<String>),
}

/// What a clock question asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockWant {
    /// A node's realtime less true time, in nanoseconds.
    Offset(u16),
    /// The clock's rate, in parts per million off true.
    Rate,
}

/// The top-level keys of control messages.
const SETUP: &str = "antithesis_setup";
const FAULTS: &str = "hvsim_faults";
const DRAW: &str = "hvsim_draw";
const BUGGIFY: &str = "hvsim_buggify";
const CLOCK: &str = "hvsim_clock";
const CUSTOM: &str = "hvsim_custom";
const COMPOSER_RUN: &str = "hvsim_composer_run";
const COMPOSER_BUDGET: &str = "hvsim_composer_budget";
const COMPOSER_TEMPLATE: &str = "hvsim_composer_template";
const COMPOSER_COMMANDS: &str = "hvsim_composer_commands";

/// What `message` asks of the machine, if anything. Only a message that
/// starts with one of the control keys is parsed at all.
pub fn recognize(message: &[u8]) -> Option<Control> {
    let text = std::str::from_utf8(message).ok()?.trim_start();
    let key = text.strip_prefix('{')?.trim_start();
    let keys = [
        SETUP,
        FAULTS,
        DRAW,
        BUGGIFY,
        CLOCK,
        CUSTOM,
        COMPOSER_RUN,
        COMPOSER_BUDGET,
        COMPOSER_TEMPLATE,
        COMPOSER_COMMANDS,
    ];
    if !keys.iter().any(|k| key.starts_with(&format!("\"{k}\""))) {
        return None;
    }
    let value: Value = serde_json::from_str(text).ok()?;
    let object = value.as_object().filter(|o| o.len() == 1)?;
    if object.get(DRAW).is_some_and(Value::is_object) {
        return Some(Control::Draw);
    }
    if let Some(site) = object.get(BUGGIFY) {
        let name = site.get("name")?.as_str()?.to_owned();
        let fire = match site.get("fire") {
            None | Some(Value::Null) => None,
            Some(p) => Some(p.as_f64().filter(|p| (0.0..=1.0).contains(p))?),
        };
        return Some(Control::Buggify { name, fire });
    }
    if object.get(COMPOSER_BUDGET).is_some_and(Value::is_object) {
        return Some(Control::ComposerBudget);
    }
    let names = |list: &Value| -> Option<Vec<String>> {
        list.as_array()?.iter().map(|n| n.as_str().map(str::to_owned)).collect()
    };
    if let Some(ask) = object.get(COMPOSER_TEMPLATE) {
        return names(ask.get("templates")?).map(Control::ComposerTemplate);
    }
    if let Some(ask) = object.get(COMPOSER_COMMANDS) {
        return names(ask.get("commands")?).map(Control::ComposerCommands);
    }
    if let Some(ask) = object.get(COMPOSER_RUN) {
        return Some(Control::ComposerRun(ask.get("run")?.as_u64()?));
    }
    if let Some(done) = object.get(CUSTOM) {
        let fields = ["index", "node", "status"];
        return fields.iter().all(|f| done.get(f).is_some_and(Value::is_u64)).then_some(Control::CustomDone);
    }
    if let Some(clock) = object.get(CLOCK) {
        return match clock.get("want")?.as_str()? {
            "offset" => {
                let node = u16::try_from(clock.get("node")?.as_u64()?).ok()?;
                Some(Control::Clock(ClockWant::Offset(node)))
            }
            "rate" => Some(Control::Clock(ClockWant::Rate)),
            _ => None,
        };
    }
    if let Some(setup) = object.get(SETUP) {
        return (setup.get("status")?.as_str()? == "complete").then_some(Control::SetupComplete);
    }
    let faults = object.get(FAULTS)?.as_object().filter(|o| o.len() == 1)?;
    match (faults.get("pause"), faults.get("resume")) {
        (Some(Value::Null), None) => Some(Control::PauseFaults(None)),
        (Some(Value::String(d)), None) => {
            let d = humantime::parse_duration(d).ok()?;
            Some(Control::PauseFaults(Some(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))))
        }
        (Some(Value::Number(n)), None) => {
            let seconds = n.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?;
            Some(Control::PauseFaults(Some((seconds * 1e9).min(u64::MAX as f64) as u64)))
        }
        (None, Some(Value::Bool(true))) => Some(Control::ResumeFaults),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_and_everything_else() {
        let r = |s: &str| recognize(s.as_bytes());
        assert_eq!(r(r#"{"antithesis_setup":{"status":"complete","details":null}}"#), Some(Control::SetupComplete));
        assert_eq!(
            r(r#" { "antithesis_setup" : {"details":{"n":3},"status":"complete"}}"#),
            Some(Control::SetupComplete)
        );
        assert_eq!(r(r#"{"antithesis_setup":{"status":"starting"}}"#), None);
        assert_eq!(r(r#"{"hvsim_faults":{"pause":"1.5s"}}"#), Some(Control::PauseFaults(Some(1_500_000_000))));
        assert_eq!(r(r#"{"hvsim_faults":{"pause":2}}"#), Some(Control::PauseFaults(Some(2_000_000_000))));
        assert_eq!(r(r#"{"hvsim_faults":{"pause":null}}"#), Some(Control::PauseFaults(None)));
        assert_eq!(r(r#"{"hvsim_faults":{"resume":true}}"#), Some(Control::ResumeFaults));
        assert_eq!(r(r#"{"hvsim_draw":{}}"#), Some(Control::Draw));
        assert_eq!(r(r#"{"hvsim_draw":{"options":8}}"#), Some(Control::Draw));
        assert_eq!(r(r#"{"hvsim_draw":7}"#), None);
        assert_eq!(r(r#"{"hvsim_buggify":{"name":"a"}}"#), Some(Control::Buggify { name: "a".into(), fire: None }));
        assert_eq!(
            r(r#"{"hvsim_buggify":{"name":"a","fire":0.5}}"#),
            Some(Control::Buggify { name: "a".into(), fire: Some(0.5) })
        );
        assert_eq!(r(r#"{"hvsim_buggify":{"name":"a","fire":2}}"#), None);
        assert_eq!(r(r#"{"hvsim_buggify":{"fire":0.5}}"#), None);
        assert_eq!(r(r#"{"hvsim_clock":{"want":"offset","node":2}}"#), Some(Control::Clock(ClockWant::Offset(2))));
        assert_eq!(r(r#"{"hvsim_clock":{"want":"offset"}}"#), None);
        assert_eq!(r(r#"{"hvsim_clock":{"want":"offset","node":70000}}"#), None);
        assert_eq!(r(r#"{"hvsim_clock":{"want":"rate"}}"#), Some(Control::Clock(ClockWant::Rate)));
        assert_eq!(r(r#"{"hvsim_clock":{"want":"time"}}"#), None);
        assert_eq!(r(r#"{"hvsim_custom":{"index":0,"node":1,"status":3}}"#), Some(Control::CustomDone));
        assert_eq!(r(r#"{"hvsim_composer_run":{"run":7}}"#), Some(Control::ComposerRun(7)));
        assert_eq!(r(r#"{"hvsim_composer_run":{"run":-1}}"#), None);
        assert_eq!(r(r#"{"hvsim_composer_budget":{}}"#), Some(Control::ComposerBudget));
        assert_eq!(r(r#"{"hvsim_composer_budget":1}"#), None);
        assert_eq!(
            r(r#"{"hvsim_composer_template":{"templates":["a","b"]}}"#),
            Some(Control::ComposerTemplate(vec!["a".into(), "b".into()]))
        );
        assert_eq!(r(r#"{"hvsim_composer_template":{"templates":["a",1]}}"#), None);
        assert_eq!(r(r#"{"hvsim_composer_template":{}}"#), None);
        assert_eq!(
            r(r#"{"hvsim_composer_commands":{"commands":["t/a.sh"]}}"#),
            Some(Control::ComposerCommands(vec!["t/a.sh".into()]))
        );
        assert_eq!(r(r#"{"hvsim_composer_commands":{"commands":"t/a.sh"}}"#), None);
        assert_eq!(r(r#"{"hvsim_custom":{"index":0,"node":1}}"#), None);
        for other in [
            r#"{"hvsim_faults":{"pause":-1}}"#,
            r#"{"hvsim_faults":{"pause":"soon"}}"#,
            r#"{"hvsim_faults":{"pause":"1s","resume":true}}"#,
            r#"{"hvsim_faults":{"pause":"1s"},"x":1}"#,
            r#"{"antithesis_assert":{"id":"antithesis_setup"}}"#,
            r#"{"antithesis_setup":"#,
            "not json",
            "",
        ] {
            assert_eq!(r(other), None, "{other}");
        }
        assert_eq!(recognize(&[0xff, 0xfe]), None);
    }
}
