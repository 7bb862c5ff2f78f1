//! A container's output, relayed line by line to the console with the
//! service's name on each line.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;

/// A container's output stream, relayed line by line to the console.
pub(super) struct Relay {
    pub(super) fd: File,
    pub(super) prefix: String,
    pub(super) partial: Vec<u8>,
}

impl Relay {
    pub(super) fn new(fd: OwnedFd, name: &str) -> Relay {
        Relay { fd: File::from(fd), prefix: format!("{name} | "), partial: Vec::new() }
    }

    /// Reads what is there; false at the end of the stream.
    pub(super) fn pump(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        let (n, end) = match self.fd.read(&mut buf) {
            Ok(0) => (0, true),
            Ok(n) => (n, false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => (0, true),
        };
        let out = self.lines(&buf[..n], end);
        // One write per batch of lines, so lines of services do not mix.
        let _ = io::stdout().write_all(&out);
        !end
    }

    /// Relays what is left once the writer is gone, without waiting for
    /// processes it left behind that still hold the stream (a command's
    /// orphans): reads until nothing is there, then the stream is done.
    pub(super) fn drain(&mut self) {
        use std::os::fd::AsRawFd;
        let fd = self.fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor this relay owns.
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK) };
        // Bounded: an orphan that writes without pause is cut off.
        for _ in 0..64 {
            if !self.pump() {
                return;
            }
        }
        let _ = io::stdout().write_all(&self.lines(&[], true));
    }

    /// Takes `data`; returns the complete lines so far, each prefixed (at
    /// the end, the unfinished last line too). Lines longer than 4 KiB
    /// are cut, so the console sees them as they come.
    pub(super) fn lines(&mut self, data: &[u8], end: bool) -> Vec<u8> {
        self.partial.extend_from_slice(data);
        if (end && !self.partial.is_empty() && !self.partial.ends_with(b"\n"))
            || (self.partial.len() >= 4096 && !self.partial.contains(&b'\n'))
        {
            self.partial.push(b'\n');
        }
        let Some(last) = self.partial.iter().rposition(|&b| b == b'\n') else { return Vec::new() };
        let mut out = Vec::with_capacity(last + 64);
        for line in self.partial[..=last].split_inclusive(|&b| b == b'\n') {
            out.extend_from_slice(self.prefix.as_bytes());
            out.extend_from_slice(line);
        }
        self.partial.drain(..=last);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::pipe;

    #[test]
    fn relayed_lines_get_the_service_name() {
        let (r, _w) = pipe().unwrap();
        let mut relay = Relay::new(r, "db");
        assert_eq!(relay.lines(b"one\ntw", false), b"db | one\n");
        assert_eq!(relay.lines(b"o\nthr", false), b"db | two\n");
        assert_eq!(relay.lines(b"ee", true), b"db | three\n", "the last line, unfinished");
        let long = vec![b'x'; 5000];
        assert_eq!(relay.lines(&long, false).len(), 5 + 5000 + 1, "a long line is cut");
    }
}
