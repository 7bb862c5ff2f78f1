//! The target as a report names it: a few lines a person reads first (the
//! services and their images, the nodes and their command, the fault
//! plan's rules one line each), the whole description (every argument,
//! environment variable and the plan's text) folded away below them.

use crate::Target;

/// At most this many characters of a command or rule on one line.
const LINE: usize = 120;

/// `target` in a few lines, one thing each.
pub fn brief(target: &Target) -> Vec<String> {
    let Target::Linux { command, mem, files, system, .. } = target else {
        return vec![format!("raw guest `{}`", target.name())];
    };
    let mut lines = Vec::new();
    if system.containers.is_empty() {
        let nodes = match system.nodes {
            0 => String::new(),
            1 => ", 1 node".to_owned(),
            n => format!(", {n} nodes"),
        };
        lines.push(format!("Linux, {} MiB{nodes}", mem >> 20));
        if let Some(cmd) = &system.node_cmd {
            lines.push(format!("each node runs: {}", one_line(cmd)));
        }
        lines.push(format!("init runs: {}", one_line(command)));
    } else {
        for c in &system.containers {
            lines.push(format!("service {}: image {}", c.name, c.image));
        }
    }
    if !files.is_empty() {
        let guest: Vec<&str> = files.iter().map(|(f, _)| f.guest.as_str()).collect();
        lines.push(format!("files: {}", one_line(&guest.join(", "))));
    }
    let templates = system.composer.templates();
    if !templates.is_empty() {
        lines.push(format!("Test Composer templates: {}", templates.join(", ")));
    }
    if let Some(plan) = &system.fault_plan {
        lines.extend(plan_rules(plan).into_iter().map(|r| format!("fault plan: {r}")));
    }
    lines
}

/// The fault plan's rules, one line each (tables and settings in name
/// order): every table's settings, and each entry of a list of tables
/// (`[[draw.fault]]`, `[[crash]]`) on its own.
/// A plan that is not TOML (it was checked when the run began) is named
/// as such.
fn plan_rules(text: &str) -> Vec<String> {
    let Ok(table) = text.parse::<toml::Table>() else {
        return vec!["(not TOML; the full description below has its text)".to_owned()];
    };
    let mut out = Vec::new();
    rules(&table, "", &mut out);
    out
}

fn rules(table: &toml::Table, at: &str, out: &mut Vec<String>) {
    let name = |key: &str| if at.is_empty() { key.to_owned() } else { format!("{at}.{key}") };
    let settings: Vec<String> =
        table.iter().filter(|(_, v)| !is_tables(v)).map(|(k, v)| format!("{k} {}", value(v))).collect();
    if !settings.is_empty() {
        out.push(one_line(&format!("{}: {}", if at.is_empty() { "(top)" } else { at }, settings.join(", "))));
    }
    for (k, v) in table {
        match v {
            toml::Value::Table(t) => rules(t, &name(k), out),
            toml::Value::Array(a) if is_tables(v) => {
                for t in a.iter().filter_map(toml::Value::as_table) {
                    rules(t, &name(k), out);
                }
            }
            _ => {}
        }
    }
}

/// A table, or a list of tables: a rule of its own, not a setting.
fn is_tables(v: &toml::Value) -> bool {
    match v {
        toml::Value::Table(_) => true,
        toml::Value::Array(a) => !a.is_empty() && a.iter().all(toml::Value::is_table),
        _ => false,
    }
}

/// A setting's value as a person writes it: strings bare, lists bracketed.
fn value(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(a) => format!("[{}]", a.iter().map(value).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// `s` on one line of at most [`LINE`] characters.
fn one_line(s: &str) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= LINE {
        return flat;
    }
    let cut: String = flat.chars().take(LINE - 3).collect();
    format!("{cut}...")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_a_line_per_rule() {
        let plan = "[network]\ndrop = 0.3\n\n[draw]\nswarm = false\n\n[[draw.fault]]\nkind = \"partition\"\n\
                    every = [\"10ms\", \"80ms\"]\ntargets = [\"one\", \"majority\"]\n\n[[draw.fault]]\nkind = \"kill\"\n\
                    targets = [[\"store\"]]\n";
        assert_eq!(
            plan_rules(plan),
            [
                "draw: swarm false",
                "draw.fault: every [10ms, 80ms], kind partition, targets [one, majority]",
                "draw.fault: kind kill, targets [[store]]",
                "network: drop 0.3",
            ]
        );
        assert_eq!(plan_rules("not = [toml"), ["(not TOML; the full description below has its text)"]);
    }

    #[test]
    fn a_raw_guest_is_its_name_and_a_long_command_is_cut() {
        assert_eq!(brief(&Target::Raw { guest: "demo".into() }), ["raw guest `demo`"]);
        let long = "echo a\n".repeat(40);
        let line = one_line(&long);
        assert!(line.ends_with("...") && line.chars().count() == LINE && !line.contains('\n'), "{line}");
    }
}
