//! A guest profile as people read it: folded stacks (one line per distinct
//! stack, root first: node, process, mode, then functions), a flame graph
//! of them, and a top list by node, process, mode and kernel function.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::symbols::Symbols;
use super::{GuestProfile, Mode, StackKey};

/// The frame standing for time the vCPU thread spent in the VMM.
const VMM_FRAME: &str = "[hvsim VMM]";

fn frame_name(symbols: Option<&Symbols>, addr: u64, is_return: bool) -> String {
    // A return address points after the call: look up the call itself.
    let at = if is_return { addr.wrapping_sub(1) } else { addr };
    match symbols.and_then(|s| s.function(at)) {
        Some(name) => name.to_owned(),
        None => format!("{addr:#x}"),
    }
}

fn node_name(key: &StackKey) -> &str {
    if key.task.node.is_empty() {
        "[unknown-node]"
    } else {
        &key.task.node
    }
}

fn process_name(key: &StackKey) -> &str {
    if key.task.comm.is_empty() {
        "[unknown-process]"
    } else {
        &key.task.comm
    }
}

/// Root-first frames of one stack. User stacks collapse to `[user]`: user
/// programs are not symbolized (yet), and their raw addresses would split
/// one program's time into thousands of one-sample stacks.
fn frames(key: &StackKey, symbols: Option<&Symbols>) -> Vec<String> {
    let mut out = vec![node_name(key).to_owned(), process_name(key).to_owned()];
    match key.mode {
        Mode::User => out.push("[user]".into()),
        Mode::Kernel => {
            out.push("[kernel]".into());
            for (i, &addr) in key.stack.iter().enumerate().rev() {
                out.push(frame_name(symbols, addr, i > 0));
            }
        }
    }
    out
}

/// Folded stacks (Brendan Gregg's format, inferno's input), sorted.
pub fn folded(profile: &GuestProfile, symbols: Option<&Symbols>) -> Vec<String> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (key, &n) in &profile.stacks {
        // Frame names must not contain the separator.
        let line: Vec<String> = frames(key, symbols).into_iter().map(|f| f.replace([';', ' '], "_")).collect();
        *counts.entry(line.join(";")).or_default() += n;
    }
    if profile.vmm_ticks > 0 {
        counts.insert(VMM_FRAME.into(), profile.vmm_ticks);
    }
    counts.into_iter().map(|(stack, n)| format!("{stack} {n}")).collect()
}

/// A flame graph of folded stacks, as SVG.
pub fn flame_graph(folded: &[String], title: &str) -> Result<Vec<u8>, String> {
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = "samples".into();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.iter().map(String::as_str), &mut svg)
        .map_err(|e| format!("drawing the flame graph: {e}"))?;
    Ok(svg)
}

/// The top list: shares of all samples by node, process, mode, and the
/// kernel functions the samples were in (self time).
pub fn top(profile: &GuestProfile, symbols: Option<&Symbols>, rate_hz: u32, n: usize) -> String {
    let guest = profile.samples();
    let total = guest + profile.vmm_ticks;
    let mut out = format!(
        "guest profile: {total} samples at {rate_hz} Hz: {guest} in the guest, {} in the VMM{}\n",
        profile.vmm_ticks,
        if profile.failed > 0 { format!(", {} unreadable", profile.failed) } else { String::new() }
    );
    if total == 0 {
        return out;
    }
    let pct = |k: u64| 100.0 * k as f64 / total as f64;
    let mut by_node: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_process: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    let mut by_mode: BTreeMap<Mode, u64> = BTreeMap::new();
    let mut by_function: BTreeMap<String, u64> = BTreeMap::new();
    for (key, &k) in &profile.stacks {
        *by_node.entry(node_name(key)).or_default() += k;
        *by_process.entry((process_name(key), node_name(key))).or_default() += k;
        *by_mode.entry(key.mode).or_default() += k;
        if key.mode == Mode::Kernel {
            *by_function.entry(frame_name(symbols, key.stack[0], false)).or_default() += k;
        }
    }
    let line = |out: &mut String, label: &str, items: Vec<(String, u64)>| {
        let mut items = items;
        items.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let shown: Vec<String> = items.iter().take(n).map(|(name, k)| format!("{name} {:.1}%", pct(*k))).collect();
        let _ = writeln!(out, "  {label:<10} {}", shown.join(", "));
    };
    line(&mut out, "by node", by_node.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    line(&mut out, "by process", by_process.into_iter().map(|((c, node), v)| (format!("{c} ({node})"), v)).collect());
    let mut modes: Vec<(String, u64)> =
        by_mode.into_iter().map(|(m, v)| (if m == Mode::Kernel { "kernel" } else { "user" }.to_owned(), v)).collect();
    modes.push(("VMM".into(), profile.vmm_ticks));
    line(&mut out, "by mode", modes);
    let mut functions: Vec<(String, u64)> = by_function.into_iter().collect();
    functions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let _ = writeln!(out, "  kernel functions (self):");
    for (name, k) in functions.iter().take(n) {
        let _ = writeln!(out, "    {:>5.1}%  {name}", pct(*k));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Task;
    use super::*;

    fn profile() -> GuestProfile {
        let mut p = GuestProfile::default();
        let task = |node: &str, comm: &str| Task { node: node.into(), comm: comm.into() };
        p.stacks.insert(StackKey { task: task("db1", "redis-server"), mode: Mode::Kernel, stack: vec![0x10, 0x21] }, 3);
        p.stacks.insert(StackKey { task: task("db1", "redis-server"), mode: Mode::User, stack: vec![0x4000] }, 1);
        p.stacks.insert(StackKey { task: task("", "swapper"), mode: Mode::Kernel, stack: vec![0x30] }, 2);
        p.vmm_ticks = 4;
        p
    }

    #[test]
    fn folds_root_first_with_return_addresses_looked_up_at_the_call() {
        let lines = folded(&profile(), None);
        assert_eq!(
            lines,
            vec![
                "[hvsim VMM] 4",
                "[unknown-node];swapper;[kernel];0x30 2",
                "db1;redis-server;[kernel];0x21;0x10 3",
                "db1;redis-server;[user] 1",
            ]
        );
        let svg = flame_graph(&lines, "test").unwrap();
        assert!(String::from_utf8(svg).unwrap().contains("redis-server"));
    }

    #[test]
    fn top_shares_add_up() {
        let text = top(&profile(), None, 100, 5);
        assert!(text.starts_with("guest profile: 10 samples at 100 Hz: 6 in the guest, 4 in the VMM\n"), "{text}");
        assert!(text.contains("by node    db1 40.0%, [unknown-node] 20.0%"), "{text}");
        assert!(text.contains("by mode    kernel 50.0%, VMM 40.0%, user 10.0%"), "{text}");
        assert!(text.contains("30.0%  0x10"), "{text}");
    }
}
