//! Where guest programs write SDK messages: `/run/hvsim/sdk` (exported to
//! commands as `HVSIM_SDK_OUTPUT` and `ANTITHESIS_SDK_LOCAL_OUTPUT`).
//!
//! It is the one file of the guest kernel's "hvsim" file system (patch
//! 0001), mounted at `/run/hvsim/channel`: every line written to it is one
//! message on hvsim's channel, sent by the kernel. Each open file keeps its
//! own line buffer, so lines of concurrent processes never mix and a line
//! may be of any length; it is a regular file, so SDKs may truncate it when
//! they open it; and what a process leaves unflushed in its stdio buffers
//! arrives when it exits.

use std::io;

/// Where SDKs write.
pub const SDK_PATH: &str = "/run/hvsim/sdk";
const CHANNEL: &str = "/run/hvsim/channel";
/// `$ANTITHESIS_STOP_FAULTS`, in the guest and in every container: this
/// init as `stop-faults SECONDS` (see `tools::stop_faults`).
pub const STOP_FAULTS: &str = "/run/hvsim/stop-faults";

/// Mounts the file system and links the SDK path to its file, and the
/// stop-faults command to this init.
pub fn setup() -> io::Result<()> {
    crate::sys::mount("hvsim", CHANNEL, "hvsim")?;
    std::os::unix::fs::symlink("channel/sdk", SDK_PATH)?;
    std::os::unix::fs::symlink("/init", STOP_FAULTS)
}

/// Asks hvsim a question (a control message, `hvsim_vmm::control`) through
/// /dev/hvsim; it answers with the next 8-byte read.
pub fn ask(question: &str) -> io::Result<[u8; 8]> {
    use std::io::{Read, Write};
    let mut dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/hvsim")?;
    dev.write_all(question.as_bytes())?;
    let mut v = [0; 8];
    dev.read_exact(&mut v)?;
    Ok(v)
}

/// Sends one message (a line) on the channel.
pub fn send(message: &str) -> io::Result<()> {
    use std::io::Write;
    debug_assert!(!message.contains('\n'), "one line");
    let mut f = std::fs::OpenOptions::new().append(true).open(SDK_PATH)?;
    f.write_all(format!("{message}\n").as_bytes())
}
