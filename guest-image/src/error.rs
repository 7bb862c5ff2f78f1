//! Errors of guest preparation: each says what failed and where.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{what} ({}): {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what} failed ({status}); its output is in {} — last lines:\n{tail}", log.display())]
    Command { what: String, status: String, log: PathBuf, tail: String },
    #[error("{0}")]
    Setup(String),
    /// Input that is malformed, unsafe or inconsistent: `at` says which file
    /// (and which entry of it), `why` what is wrong.
    #[error("{at}: {why}")]
    Invalid { at: String, why: String },
    #[error(transparent)]
    Machine(#[from] hvsim_vmm::Error),
}

pub type Result<T> = std::result::Result<T, ImageError>;

pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> ImageError {
    let path = path.into();
    move |source| ImageError::Io { what, path, source }
}

/// An [`ImageError::Invalid`] about `at`.
pub(crate) fn invalid(at: impl std::fmt::Display, why: impl Into<String>) -> ImageError {
    ImageError::Invalid { at: at.to_string(), why: why.into() }
}
