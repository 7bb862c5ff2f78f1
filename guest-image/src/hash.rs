//! SHA-256 of the host files a run reads: how targets pin their inputs
//! (`inputs.rs`) and how the kernel's source and build are checked.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{io, Result};

/// SHA-256 (hex) of a host file, read in chunks (kernel sources and disk
/// images are large).
pub fn file_hash(path: &Path) -> Result<String> {
    let mut f = hvsim_vmm::files::open_regular(path).map_err(io("reading a file of the run", path))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(io("reading a file of the run", path))?;
    Ok(hex::encode(h.finalize()))
}
