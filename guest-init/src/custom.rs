//! Custom faults: a fault plan's own commands (a config reload, a leader
//! step-down through an admin API), which hvsim runs on a node at moments a
//! timeline draws (`hc::event::CUSTOM_BASE`). Init starts
//! `/init custom-fault I NODE`, which runs command `I` of
//! `hvsim_abi::linux::CUSTOM_FAULTS` with `/bin/sh -c` on the node: in its
//! container (all of its namespaces, its user and environment) if it runs
//! one, else in its network namespace as `hvsim-node` does. Its output goes
//! to the console, each line prefixed `custom[I] NODE:`, then its exit
//! status; and the status goes to hvsim on the SDK channel
//! (`{"hvsim_custom": {...}}`), the fault's landing evidence.

use std::io::{self, BufRead, BufReader, Read};
use std::process::ExitCode;

use crate::nodes;

/// Starts custom fault `index` on `node` (from init: reaped by its loop).
pub fn start(index: u32, node: u16) {
    let mut c = std::process::Command::new("/init");
    c.args(["custom-fault", &index.to_string(), &node.to_string()]);
    if let Err(e) = crate::command::spawn(&mut c) {
        eprintln!("hvsim-init: cannot start custom fault {index} on node {node}: {e}");
    }
}

fn command(index: usize) -> io::Result<String> {
    let all = std::fs::read(hvsim_abi::linux::CUSTOM_FAULTS)?;
    let command = all.split(|&b| b == 0).nth(index).filter(|c| !c.is_empty());
    command
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no custom fault {index} in the plan")))
}

/// `/init custom-fault I NODE`.
pub fn run(args: &[String]) -> ExitCode {
    let (Some(index), Some(node)) =
        (args.first().and_then(|i| i.parse::<u32>().ok()), args.get(1).and_then(|n| n.parse::<u16>().ok()))
    else {
        eprintln!("usage: /init custom-fault INDEX NODE");
        return ExitCode::from(2);
    };
    let label = format!("custom[{index}] node {node}");
    let status = match command(index as usize).and_then(|cmd| {
        println!("hvsim-init: {label}: running {cmd:?}");
        spawn(node, &cmd, &label)
    }) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("hvsim-init: {label}: cannot run: {e}");
            127
        }
    };
    println!("hvsim-init: {label}: exited with status {status}");
    let report = format!(r#"{{"hvsim_custom":{{"index":{index},"node":{node},"status":{status}}}}}"#);
    if let Err(e) = crate::sdk::send(&report) {
        eprintln!("hvsim-init: {label}: cannot report to hvsim: {e}");
    }
    ExitCode::SUCCESS
}

/// Runs `cmd` on `node`, relaying its output; its exit status.
pub(crate) fn spawn(node: u16, cmd: &str, label: &str) -> io::Result<u8> {
    let argv = ["/bin/sh".to_owned(), "-c".to_owned(), cmd.to_owned()];
    if std::path::Path::new(&format!("{}/{node}", hvsim_abi::linux::CONTAINERS)).exists() {
        let (pid, _pidfd, out, err) = crate::container::composer::spawn(node, &argv)?;
        relay(std::fs::File::from(out), std::fs::File::from(err), label);
        return Ok(crate::container::wait_status(pid));
    }
    if nodes::is_down(node) {
        return Err(io::Error::other("the node is down"));
    }
    let mut child = std::process::Command::new("/bin/hvsim-node")
        .arg(node.to_string())
        .args(&argv)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    relay(out, err, label);
    let status = child.wait()?;
    Ok(status
        .code()
        .map_or_else(|| 128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0) as u8, |c| c as u8))
}

/// Prints both streams' lines, prefixed, until both end.
pub(crate) fn relay(out: impl Read + Send + 'static, err: impl Read, label: &str) {
    let prefix = label.to_owned();
    let t = std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{prefix}: {line}");
        }
    });
    for line in BufReader::new(err).lines().map_while(Result::ok) {
        println!("{label}: {line}");
    }
    let _ = t.join();
}
