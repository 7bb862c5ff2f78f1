//! Errors of exploration and replay (not findings: those are bugs).

#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    #[error("{0}")]
    Target(String),
    #[error(transparent)]
    Machine(#[from] hvsim_vmm::Error),
    #[error(transparent)]
    Start(#[from] hvsim_guest_image::ImageError),
    #[error("{what} ({}): {source}", path.display())]
    Io { what: &'static str, path: std::path::PathBuf, source: std::io::Error },
    /// What a replay's observer does besides following (`replay::Observer`).
    #[error("{0}")]
    Observer(String),
    #[error("bug file {}: {what}", path.display())]
    BugFile { path: std::path::PathBuf, what: String },
    /// A `--baseline` that cannot be read (`report/baseline.rs`).
    #[error("{0}")]
    Baseline(String),
    /// Explorations that cannot be merged, and why (`merge.rs`).
    #[error("{0}")]
    Merge(String),
    /// A document that could not be written (`document.rs`).
    #[error("{}: {source}", path.display())]
    Document { path: std::path::PathBuf, source: crate::record::document::DocumentError },
}

pub type Result<T> = std::result::Result<T, ExploreError>;
