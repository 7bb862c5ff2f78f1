//! A guest profile as people read it: folded stacks (one line per distinct
//! stack, root first: node, process, mode, then functions), a flame graph
//! of them, and a top list by node, process, mode, kernel function and user
//! image.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::symbols::Symbols;
use super::{Frame, GuestProfile, Mode, StackKey};

/// The frame standing for time the vCPU thread spent in the VMM.
const VMM_FRAME: &str = "[hvsim VMM]";

/// A kernel frame's function name, or its address.
fn kernel_name(symbols: Option<&Symbols>, addr: u64, is_return: bool) -> String {
    // A return address points after the call: look up the call itself.
    let at = if is_return { addr.wrapping_sub(1) } else { addr };
    match symbols.and_then(|s| s.function(at)) {
        Some(name) => name.to_owned(),
        None => format!("{addr:#x}"),
    }
}

/// The image a user frame lies in: its soname, or the process for the
/// program itself.
fn image_name<'a>(key: &'a StackKey, frame: &'a Frame) -> Option<&'a str> {
    match frame {
        Frame::User(_, Some(at)) => Some(at.soname.as_deref().unwrap_or(process_name(key))),
        _ => None,
    }
}

fn frame_name(key: &StackKey, symbols: Option<&Symbols>, frame: &Frame, is_return: bool) -> String {
    match frame {
        Frame::Kernel(addr) => kernel_name(symbols, *addr, is_return),
        Frame::User(_, Some(at)) => format!("{}+{:#x}", image_name(key, frame).expect("found"), at.offset),
        Frame::User(addr, None) => format!("{addr:#x}"),
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

/// Root-first frames of one stack: node, process, mode, then functions
/// (kernel) or image+offset (user).
fn frames(key: &StackKey, symbols: Option<&Symbols>) -> Vec<String> {
    let mode = match key.mode {
        Mode::Kernel => "[kernel]",
        Mode::User => "[user]",
    };
    let mut out = vec![node_name(key).to_owned(), process_name(key).to_owned(), mode.to_owned()];
    for (i, frame) in key.stack.iter().enumerate().rev() {
        out.push(frame_name(key, symbols, frame, i > 0));
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
/// kernel functions and user images the samples were in (self time).
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
    let mut by_image: BTreeMap<&str, u64> = BTreeMap::new();
    for (key, &k) in &profile.stacks {
        *by_node.entry(node_name(key)).or_default() += k;
        *by_process.entry((process_name(key), node_name(key))).or_default() += k;
        *by_mode.entry(key.mode).or_default() += k;
        match &key.stack[0] {
            Frame::Kernel(addr) => *by_function.entry(kernel_name(symbols, *addr, false)).or_default() += k,
            frame => *by_image.entry(image_name(key, frame).unwrap_or("[unknown]")).or_default() += k,
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
    if !by_image.is_empty() {
        line(&mut out, "user code", by_image.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
    }
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
    use super::super::images::ImageOffset;
    use super::super::Task;
    use super::*;

    fn profile() -> GuestProfile {
        let mut p = GuestProfile::default();
        let task = |node: &str, comm: &str| Task { node: node.into(), comm: comm.into() };
        let kernel = |addrs: &[u64]| addrs.iter().copied().map(Frame::Kernel).collect::<Vec<_>>();
        let libc = Some(ImageOffset { soname: Some("libc.so.6".into()), offset: 0x2a1c0 });
        let program = Some(ImageOffset { soname: None, offset: 0x1234 });
        let redis = task("db1", "redis-server");
        p.stacks.insert(StackKey { task: redis.clone(), mode: Mode::Kernel, stack: kernel(&[0x10, 0x21]) }, 3);
        let user = vec![Frame::User(0x7f00_0002_a1c0, libc), Frame::User(0x5555_0000_1234, program)];
        p.stacks.insert(StackKey { task: redis.clone(), mode: Mode::User, stack: user }, 1);
        p.stacks.insert(StackKey { task: redis, mode: Mode::User, stack: vec![Frame::User(0x4000, None)] }, 1);
        p.stacks.insert(StackKey { task: task("", "swapper"), mode: Mode::Kernel, stack: kernel(&[0x30]) }, 2);
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
                "db1;redis-server;[user];0x4000 1",
                "db1;redis-server;[user];redis-server+0x1234;libc.so.6+0x2a1c0 1",
            ]
        );
        let svg = flame_graph(&lines, "test").unwrap();
        assert!(String::from_utf8(svg).unwrap().contains("redis-server"));
    }

    #[test]
    fn top_shares_add_up() {
        let text = top(&profile(), None, 100, 5);
        assert!(text.starts_with("guest profile: 11 samples at 100 Hz: 7 in the guest, 4 in the VMM\n"), "{text}");
        assert!(text.contains("by node    db1 45.5%, [unknown-node] 18.2%"), "{text}");
        assert!(text.contains("by mode    kernel 45.5%, VMM 36.4%, user 18.2%"), "{text}");
        assert!(text.contains("user code  [unknown] 9.1%, libc.so.6 9.1%"), "{text}");
        assert!(text.contains("27.3%  0x10"), "{text}");
    }
}
