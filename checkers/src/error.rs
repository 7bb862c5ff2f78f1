use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error("line {line}: not a history event: {detail}")]
    Parse { line: usize, detail: String },
    #[error("line {line}: {detail}")]
    Malformed { line: usize, detail: String },
    #[error("line {line}: {detail}")]
    Model { line: usize, detail: String },
}

pub type Result<T> = std::result::Result<T, Error>;
