//! The run's work. Init tells hvsim that the guest is booted
//! (`HVSIM_IOC_READY`): hvsim saves the machine at this point once per
//! machine shape and restores it for every later run, so everything before
//! it must be the same for every run. Then init reads the run's work from
//! the inbox (`HVSIM_IOC_INBOX`, see `hvsim_abi::inbox`): the files of the
//! run (its command, the nodes' command, the user's files), which it writes
//! before it starts anything.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

use hvsim_abi::inbox;

/// `ioctl` on /dev/hvsim: booted, waiting for the run (`_IO('h', 3)`).
const HVSIM_IOC_READY: libc::c_ulong = 0x6803;
/// `ioctl` on /dev/hvsim: the next part of the work (`_IOW('h', 4, struct
/// hvsim_chunk)`); returns its length, 0 once all is read.
const HVSIM_IOC_INBOX: libc::c_ulong = 0x4010_6804;
/// The kernel hands out at most this much per call.
const CHUNK: usize = 64 * 1024;

#[repr(C)]
struct Chunk {
    addr: u64,
    len: u64,
}

fn ioctl(dev: &File, request: libc::c_ulong, arg: *mut libc::c_void) -> io::Result<usize> {
    // SAFETY: both requests take a pointer to memory that outlives the call
    // (or nothing); the kernel checks the rest.
    let r = unsafe { libc::ioctl(dev.as_raw_fd(), request, arg) };
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// The inbox, read as a stream: every byte is read once, into one reused
/// buffer (each page a process touches first costs a page fault, and those
/// are expensive where the guest kernel is emulated).
struct Inbox {
    dev: File,
    buf: Vec<u8>,
}

impl Inbox {
    /// Reads the next `n` bytes (at most [`CHUNK`]) into the buffer.
    fn read(&mut self, n: usize) -> io::Result<&[u8]> {
        debug_assert!(n <= CHUNK);
        let mut got = 0;
        while got < n {
            let mut chunk = Chunk { addr: self.buf[got..].as_mut_ptr() as u64, len: (n - got) as u64 };
            let len = ioctl(&self.dev, HVSIM_IOC_INBOX, (&mut chunk as *mut Chunk).cast())?;
            if len == 0 {
                return Err(io::Error::other(format!("the inbox ends {} bytes early", n - got)));
            }
            got += len.min(n - got);
        }
        Ok(&self.buf[..n])
    }

    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.read(4)?.try_into().expect("4 bytes")))
    }

    /// The next file's header: path, mode, data length; `None` at the end.
    fn header(&mut self) -> io::Result<Option<(String, u32, u64)>> {
        let mut chunk = Chunk { addr: self.buf.as_mut_ptr() as u64, len: 4 };
        let len = ioctl(&self.dev, HVSIM_IOC_INBOX, (&mut chunk as *mut Chunk).cast())?;
        if len == 0 {
            return Ok(None);
        }
        if len < 4 {
            self.read(4 - len)?;
        }
        let path_len = u32::from_le_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
        if path_len > 4096 {
            return Err(io::Error::other(format!("a path of {path_len} bytes")));
        }
        let path = String::from_utf8(self.read(path_len)?.to_vec())
            .map_err(|_| io::Error::other("a path that is not UTF-8"))?;
        let mode = self.u32()?;
        let len = u64::from_le_bytes(self.read(8)?.try_into().expect("8 bytes"));
        Ok(Some((path, mode, len)))
    }
}

/// Waits for the run, then writes its files. Returns how many there were.
pub fn receive() -> io::Result<usize> {
    let dev = OpenOptions::new().read(true).write(true).open("/dev/hvsim")?;
    ioctl(&dev, HVSIM_IOC_READY, std::ptr::null_mut())?;
    let mut inbox = Inbox { dev, buf: vec![0u8; CHUNK] };
    if inbox.read(inbox::MAGIC.len())? != inbox::MAGIC {
        return Err(io::Error::other("the inbox is malformed (bad magic)"));
    }
    let mut count = 0;
    while let Some((path, mode, len)) = inbox.header()? {
        let mut out = create(&path, mode).map_err(|e| io::Error::other(format!("{path}: {e}")))?;
        let mut left = len;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            io::Write::write_all(&mut out, inbox.read(n)?).map_err(|e| io::Error::other(format!("{path}: {e}")))?;
            left -= n as u64;
        }
        count += 1;
    }
    Ok(count)
}

/// What the inbox holds now, to its end (at most 64 KiB): the command of
/// an `hvsim debug` session (`hc::event::DEBUG`).
pub fn read_rest() -> io::Result<Vec<u8>> {
    let dev = OpenOptions::new().read(true).write(true).open("/dev/hvsim")?;
    let mut buf = vec![0u8; CHUNK];
    let mut chunk = Chunk { addr: buf.as_mut_ptr() as u64, len: CHUNK as u64 };
    let len = ioctl(&dev, HVSIM_IOC_INBOX, (&mut chunk as *mut Chunk).cast())?;
    buf.truncate(len);
    Ok(buf)
}

/// Creates (or truncates) one file of the work with `mode`, and the
/// directories it needs.
fn create(path: &str, mode: u32) -> io::Result<File> {
    let path = Path::new(path);
    let plain = path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || path.parent().is_none() {
        return Err(io::Error::other("not a plain absolute path"));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mode = mode & 0o7777;
    let out = OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path)?;
    // The mode of an existing file stays otherwise; umask may have masked it.
    out.set_permissions(std::fs::Permissions::from_mode(mode))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_match_the_kernel() {
        const fn io(ty: u8, nr: u8) -> libc::c_ulong {
            ((ty as libc::c_ulong) << 8) | nr as libc::c_ulong
        }
        const fn iow(ty: u8, nr: u8, size: usize) -> libc::c_ulong {
            (1 << 30) | ((size as libc::c_ulong) << 16) | io(ty, nr)
        }
        assert_eq!(HVSIM_IOC_READY, io(b'h', 3));
        assert_eq!(HVSIM_IOC_INBOX, iow(b'h', 4, std::mem::size_of::<Chunk>()));
    }

    #[test]
    fn only_plain_absolute_paths_are_written() {
        let dir = tempfile_dir();
        let ok = format!("{dir}/a/b/file");
        io::Write::write_all(&mut create(&ok, 0o750).unwrap(), b"x").unwrap();
        assert_eq!(std::fs::read(&ok).unwrap(), b"x");
        assert_eq!(std::fs::metadata(&ok).unwrap().permissions().mode() & 0o7777, 0o750);
        for bad in ["relative/file", "/", &format!("{dir}/../escape")] {
            assert!(create(bad, 0o644).is_err(), "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> String {
        let dir = std::env::temp_dir().join(format!("hvsim-init-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.display().to_string()
    }
}
