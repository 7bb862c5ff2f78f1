//! The task the guest kernel says is running. hvsim's kernel (patch 0004)
//! writes the running task's pid, tgid, name and UTS node name to the
//! page `hvsim_task` at every context switch; the boot loader finds the
//! page in vmlinux's symbols (`boot/linux.rs`) and the machine keeps its
//! address in its state. Two readers: the profiler names a sample's
//! process, and the run loop tags each SDK message with the process that
//! sent it (`Message::sender`), so the explorer can follow one process's
//! draws (`explorer/src/run/steer.rs`).

use crate::profiler::walk::AddressSpace;

/// The kernel symbol of the page.
pub const SYMBOL: &str = "hvsim_task";

/// The page's layout version this reader knows.
const VERSION: u32 = 1;

/// What the page says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningTask {
    /// The thread group: the process, in the kernel's first pid namespace
    /// (so unique across containers).
    pub tgid: u32,
    /// The process name (`comm`).
    pub comm: String,
    /// The simulated node (its UTS node name); empty before nodes exist.
    pub node: String,
}

/// Reads the page at guest-virtual `va`: version, pid, tgid, reserved (u32
/// each), comm[16], node[64]. `None` if it is not mapped or is not a
/// version this reader knows (the guest wrote something else there).
pub fn read(space: &AddressSpace<'_>, va: u64) -> Option<RunningTask> {
    let mut page = [0u8; 96];
    space.read_bytes(va, &mut page)?;
    let word = |i: usize| u32::from_le_bytes(page[i..i + 4].try_into().expect("4 bytes"));
    if word(0) != VERSION {
        return None;
    }
    Some(RunningTask { tgid: word(8), comm: c_string(&page[16..32]), node: c_string(&page[32..96]) })
}

/// A NUL-terminated (or full) guest string, made printable.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}
