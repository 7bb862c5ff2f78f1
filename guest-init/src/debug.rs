//! `hvsim debug`: a person's shell command, run at a moment of a bug's
//! timeline (`hc::event::DEBUG`). Init reads the command from the inbox and
//! starts `/init debug NODE CMD`, which runs it with `/bin/sh -c` on the
//! node as a custom fault's command runs (`custom.rs`), or, in a machine
//! without nodes, beside init; its output goes to the console, each line
//! prefixed `debug[NODE]: `, and its exit status to hvsim on the SDK
//! channel (`{"hvsim_debug": {...}}`), which tells hvsim the command ended.

use std::process::ExitCode;

/// Starts the command waiting in the inbox on `node` (`is_node`: the
/// machine has that node; else it runs beside init).
pub fn start(node: u16, is_node: bool) {
    let command = match crate::work::read_rest() {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            eprintln!("hvsim-init: debug: cannot read the command: {e}");
            return;
        }
    };
    let target = if is_node { node.to_string() } else { "-".to_owned() };
    let mut c = std::process::Command::new("/init");
    c.args(["debug", &target, &command]);
    if let Err(e) = crate::command::spawn(&mut c) {
        eprintln!("hvsim-init: debug: cannot start {command:?}: {e}");
        report(node, 127);
    }
}

/// `/init debug NODE|- CMD`.
pub fn run(args: &[String]) -> ExitCode {
    let (Some(target), Some(command)) = (args.first(), args.get(1)) else {
        eprintln!("usage: /init debug NODE|- CMD");
        return ExitCode::from(2);
    };
    let node = target.parse::<u16>().ok();
    let label = format!("{}{}]", hvsim_abi::linux::DEBUG_PREFIX, node.unwrap_or(0));
    let ran = match node {
        Some(node) => crate::custom::spawn(node, command, &label),
        None => beside_init(command, &label),
    };
    let status = ran.unwrap_or_else(|e| {
        println!("{label}: cannot run: {e}");
        127
    });
    report(node.unwrap_or(0), status);
    ExitCode::SUCCESS
}

/// Runs `command` with `/bin/sh -c` in init's own namespaces.
fn beside_init(command: &str, label: &str) -> std::io::Result<u8> {
    use std::process::Stdio;
    let mut child = std::process::Command::new("/bin/sh")
        .args(["-c", command])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (out, err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    crate::custom::relay(out, err, label);
    Ok(child.wait()?.code().map_or(128, |c| c as u8))
}

fn report(node: u16, status: u8) {
    let message = format!(r#"{{"hvsim_debug":{{"node":{node},"status":{status}}}}}"#);
    if let Err(e) = crate::sdk::send(&message) {
        eprintln!("hvsim-init: debug: cannot report to hvsim: {e}");
    }
}
