//! Errors of the VMM itself. Guest misbehaviour is *not* an error: it ends the
//! run with an [`crate::End`] reason. These are for the host side: KVM refusing
//! an ioctl, a bad configuration, an invariant the VMM broke.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open {path}: {err} (is KVM enabled, and may this user open it?)")]
    KvmUnavailable { path: String, err: io::Error },
    #[error("KVM {op} failed: {err}")]
    Kvm { op: &'static str, err: vmm_sys_util::errno::Error },
    #[error("host {0} failed: {1}")]
    Host(&'static str, io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("guest memory access at {addr:#x} (+{len}) failed: {detail}")]
    GuestMemory { addr: u64, len: usize, detail: String },
    #[error("writing the determinism log: {0}")]
    Log(io::Error),
    /// Another thread raised the machine's [`crate::Interrupt`]: the run
    /// stopped before its next guest entry.
    #[error("interrupted")]
    Interrupted,
}

pub type Result<T> = std::result::Result<T, Error>;

/// Attaches the name of a KVM operation to an errno.
pub(crate) trait KvmResultExt<T> {
    fn kvm(self, op: &'static str) -> Result<T>;
}

impl<T> KvmResultExt<T> for std::result::Result<T, vmm_sys_util::errno::Error> {
    fn kvm(self, op: &'static str) -> Result<T> {
        self.map_err(|err| Error::Kvm { op, err })
    }
}
