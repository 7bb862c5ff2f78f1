//! Where built guest artefacts live: outside the repository, shared by every
//! checkout on the machine, keyed by the hash of their inputs.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{io, Result};

/// `$HVSIM_CACHE_DIR`, else `$XDG_CACHE_HOME/hvsim`, else `~/.cache/hvsim`.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("HVSIM_CACHE_DIR") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("hvsim");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/hvsim")
}

/// An exclusive lock on `path` (created if needed), released on drop; so two
/// processes never build the same artefact at once.
pub struct Lock {
    _file: File,
}

impl Lock {
    pub fn acquire(path: &Path) -> Result<Lock> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("creating the cache directory", parent))?;
        }
        let file = File::create(path).map_err(io("creating a lock file", path))?;
        // SAFETY: flock on a descriptor we own; blocks until the lock is free.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io("locking", path)(std::io::Error::last_os_error()));
        }
        Ok(Lock { _file: file })
    }
}
