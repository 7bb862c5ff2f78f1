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

/// Waits for the run, then writes its files. Returns how many there were.
pub fn receive() -> io::Result<usize> {
    let dev = OpenOptions::new().read(true).write(true).open("/dev/hvsim")?;
    ioctl(&dev, HVSIM_IOC_READY, std::ptr::null_mut())?;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let mut chunk = Chunk { addr: buf.as_mut_ptr() as u64, len: CHUNK as u64 };
        let n = ioctl(&dev, HVSIM_IOC_INBOX, (&mut chunk as *mut Chunk).cast())?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n.min(CHUNK)]);
    }
    let files = inbox::files(&bytes).map_err(|e| io::Error::other(format!("the inbox is malformed: {e:?}")))?;
    let mut count = 0;
    for file in files {
        let file = file.map_err(|e| io::Error::other(format!("the inbox is malformed: {e:?}")))?;
        write(&file).map_err(|e| io::Error::other(format!("{}: {e}", file.path)))?;
        count += 1;
    }
    Ok(count)
}

/// Writes one file of the work, creating the directories it needs.
fn write(file: &inbox::File<'_>) -> io::Result<()> {
    let path = Path::new(file.path);
    let plain = path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !plain || path.parent().is_none() {
        return Err(io::Error::other("not a plain absolute path"));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mode = file.mode & 0o7777;
    let mut out = OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(path)?;
    io::Write::write_all(&mut out, file.data)?;
    // The mode of an existing file stays otherwise; umask may have masked it.
    out.set_permissions(std::fs::Permissions::from_mode(mode))
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
        write(&inbox::File { path: &ok, mode: 0o750, data: b"x" }).unwrap();
        assert_eq!(std::fs::read(&ok).unwrap(), b"x");
        assert_eq!(std::fs::metadata(&ok).unwrap().permissions().mode() & 0o7777, 0o750);
        for bad in ["relative/file", "/", &format!("{dir}/../escape")] {
            assert!(write(&inbox::File { path: bad, mode: 0o644, data: b"" }).is_err(), "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> String {
        let dir = std::env::temp_dir().join(format!("hvsim-init-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.display().to_string()
    }
}
