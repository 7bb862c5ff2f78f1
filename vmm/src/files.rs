//! Reading the files users name: snapshots, bug records, fault plans,
//! compose and env files, logs, disk images, kernels, files for the guest.
//! Each must be a regular file, and is refused before it is opened
//! otherwise: opening a FIFO blocks until someone writes to it, and a
//! device such as `/dev/zero` never ends. Files read whole are bounded by
//! what their kind can be, checked before a byte is read (and again while
//! reading, as a file may grow).
//!
//! And publishing the files results live in ([`publish`]): whole or not at
//! all, and on disk before anyone is told they are there.

use std::fs::File;
use std::io::{self, Read, Write};
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

/// Writes `bytes` to `path` so that it appears whole or not at all, and
/// stays after a crash of the host: into a uniquely named temporary file
/// beside it (so two writers never share one), synced, renamed over
/// `path`, and the directory synced. Readable by all, as `std::fs::write`
/// would leave it.
pub fn publish(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().map_or("out".into(), |n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".partial").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
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
    fn published_files_replace_whole_and_leave_nothing_beside() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        publish(&path, b"one").unwrap();
        publish(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["report.json"], "no temporary file is left");
        let e = publish(&dir.path().join("missing/report.json"), b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

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
