//! The checks no timeline evaluated, and why: an `always` property that
//! must be hit and never was, and a Test Composer `finally_` or
//! `eventually_` command that never ran (its "exits 0" property holds
//! vacuously, so it would otherwise read as held). A report, findings and
//! hvsim's stderr open with these: an exploration that never checked what
//! it was meant to check found nothing, whatever its bug count says.

use hvsim_abi::composer::Kind;
use schemars::JsonSchema;
use serde::Serialize;

use crate::record::composer;
use crate::record::exploration::{Ending, Exploration};

/// The checks no timeline evaluated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Unevaluated {
    /// Each property, as its assertion names it.
    pub properties: Vec<String>,
    /// Why the timelines did not reach them, as far as the exploration can
    /// tell (they all ended alike), and what to change.
    pub why: String,
}

/// The checks no timeline of `exp` evaluated, if any.
pub fn unevaluated(exp: &Exploration) -> Option<Unevaluated> {
    let properties: Vec<String> =
        exp.assertions.by_id.values().filter(|a| a.unevaluated()).map(|a| a.message.clone()).collect();
    (!properties.is_empty()).then(|| Unevaluated { properties, why: why(exp) })
}

/// Why the exploration's timelines did not reach its checks, from how they
/// ended (or a service that died in them), and what to change.
fn why(exp: &Exploration) -> String {
    let t = exp.timelines;
    let n = t.ended + t.at_limit;
    if let Some(exit) = &exp.root.setup_failed {
        return format!(
            "{}, so no timeline ran: read what it wrote last (findings.md) and fix the service or what it \
             lacked (a full disk: --disk-size; memory: --mem)",
            exit.describe()
        );
    }
    if !exp.root.setup_complete && matches!(exp.ending, Ending::Interrupted { .. }) {
        return "the exploration was interrupted during setup, before any timeline ran".into();
    }
    if !exp.root.setup_complete && matches!(exp.ending, Ending::TimeSpent { .. }) {
        return "the time budget (--time) was spent during setup, before any timeline ran: raise it".into();
    }
    if !exp.root.setup_complete {
        return "setup complete was never reported, so the root was taken at the setup limit: report it when the \
                system is ready (the SDK's setup_complete), or raise --setup-limit"
            .into();
    }
    if n == 0 {
        return "no timeline ran: the budget ended at the root".into();
    }
    if let Some(exit) = &exp.harness.service_exit {
        return format!(
            "the {} (in {} of {n} timelines a service or command of the harness failed): read what it wrote \
             last (findings.md) and fix the service or what it lacked",
            exit.describe_in_timeline(),
            exp.harness.timelines
        );
    }
    let limit = exp.span.option();
    let drivers = exp
        .composer
        .commands
        .iter()
        .filter(|(c, _)| composer::kind(c).is_some_and(Kind::is_driver))
        .fold((0, 0), |(started, ended), (_, c)| (started + c.started, ended + c.ended()));
    let running = match drivers {
        (0, _) => String::new(),
        (started, ended) => {
            format!(", with Test Composer's drivers still running ({ended} of {started} started had ended)")
        }
    };
    let change = match (drivers.0, exp.composer.winddowns) {
        (0, _) => "raise --timeline-limit, or shorten what runs before the check".to_owned(),
        (_, 0) => "let Test Composer wind down before the limit (--composer-winddown auto), or raise \
                   --timeline-limit"
            .to_owned(),
        (_, w) => {
            format!("the composer wound down in {w} of them, but the check did not end in time: raise --timeline-limit")
        }
    };
    if t.ended == 0 {
        format!("every timeline ({n}) ran into {limit} before it ended{running}: {change}")
    } else if t.at_limit > 0 {
        format!(
            "{} of {n} timelines ran into {limit}{running}, and the {} that ended never reached it",
            t.at_limit, t.ended
        )
    } else {
        format!("all {n} timelines ran to their end without reaching it")
    }
}
