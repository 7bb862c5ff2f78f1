//! Reading the files users name: snapshots, bug records, fault plans,
//! compose and env files, logs, disk images, kernels, files for the guest.
//! Each must be a regular file, and is refused before it is opened
//! otherwise: opening a FIFO blocks until someone writes to it, and a
//! device such as `/dev/zero` never ends. Files read whole are bounded by
//! what their kind can be, checked before a byte is read (and again while
//! reading, as a file may grow).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The most a text document hvsim reads (a fault plan, a compose or env
/// file, a bug record) may hold: far more than any real one.
pub const MAX_TEXT_BYTES: u64 = 16 << 20;

/// Opens `path` (after symbolic links) for reading if it is a regular file.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a regular file but {}", kind(&meta))));
    }
    File::open(path)
}

/// All of the regular file `path`, if it holds at most `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    if len > limit {
        return Err(too_large(len, limit));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64, limit));
    }
    Ok(bytes)
}

/// All of the text file `path`, if it holds at most [`MAX_TEXT_BYTES`].
pub fn read_text(path: &Path) -> io::Result<String> {
    String::from_utf8(read_bounded(path, MAX_TEXT_BYTES)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not UTF-8 text ({})", e.utf8_error())))
}

fn too_large(len: u64, limit: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{len} bytes, more than such a file can hold ({limit})"))
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_within_their_bound_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plan.toml");
        std::fs::write(&file, "[network]\n").unwrap();
        assert_eq!(read_text(&file).unwrap(), "[network]\n");
        assert_eq!(read_bounded(&file, 10).unwrap().len(), 10);
        let err = read_bounded(&file, 9).unwrap_err().to_string();
        assert_eq!(err, "10 bytes, more than such a file can hold (9)");

        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Refused without opening it: an open would wait for a writer.
        assert_eq!(read_text(&fifo).unwrap_err().to_string(), "not a regular file but a FIFO");
        assert_eq!(read_text(dir.path()).unwrap_err().to_string(), "not a regular file but a directory");
        assert_eq!(
            read_text(Path::new("/dev/zero")).unwrap_err().to_string(),
            "not a regular file but a character device"
        );
        assert_eq!(read_text(&dir.path().join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);

        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(read_text(&file).unwrap_err().to_string().starts_with("not UTF-8 text"));
    }
}
