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

/// `ioctl` on /dev/hvsim: the answer to the question this thread last
/// wrote to the file (`_IOR('h', 6, __u64)`, see the kernel patch "x86/hvsim:
/// a question and its answer in one exchange"); `ENODATA` if hvsim did not
/// answer it.
const HVSIM_IOC_ANSWER: libc::c_ulong = 0x8008_6806;

/// Asks hvsim a question (a control message, `hvsim_vmm::control`) through
/// /dev/hvsim and returns its answer. The kernel takes the answer in the
/// same exchange as the question, so no other reader of /dev/hvsim can
/// take it; a question hvsim did not answer is an error.
pub fn ask(question: &str) -> io::Result<[u8; 8]> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/hvsim")?;
    dev.write_all(question.as_bytes())?;
    let mut v = 0u64;
    // SAFETY: the ioctl writes one u64 into `v`.
    if unsafe { libc::ioctl(dev.as_raw_fd(), HVSIM_IOC_ANSWER, &mut v as *mut u64) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("hvsim did not answer {question}: {e}")));
    }
    Ok(v.to_le_bytes())
}

/// Sends one message (a line) on the channel.
pub fn send(message: &str) -> io::Result<()> {
    use std::io::Write;
    debug_assert!(!message.contains('\n'), "one line");
    let mut f = std::fs::OpenOptions::new().append(true).open(SDK_PATH)?;
    f.write_all(format!("{message}\n").as_bytes())
}
