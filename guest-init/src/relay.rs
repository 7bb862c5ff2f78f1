//! The SDK relay: guest programs write JSON lines to a FIFO at a well-known
//! path; init forwards each line as one message on hvsim's channel
//! (/dev/hvsim). Lines longer than [`MAX_LINE`] are cut there (hvsim counts
//! them as garbage) and the rest of the line is dropped.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

/// Where SDKs write (exported as HVSIM_SDK_OUTPUT and
/// ANTITHESIS_SDK_LOCAL_OUTPUT to the command).
pub const SDK_PATH: &str = "/run/hvsim/sdk";
/// One byte more than hvsim's SDK line limit (64 KiB).
pub const MAX_LINE: usize = 64 * 1024 + 1;

pub struct Relay {
    fifo: File,
    /// /dev/hvsim; `None` outside hvsim (lines are then dropped).
    out: Option<File>,
    lines: Lines,
}

/// Splits a byte stream into lines of at most [`MAX_LINE`] bytes.
#[derive(Default)]
pub struct Lines {
    line: Vec<u8>,
    /// Dropping the rest of an over-long line.
    skipping: bool,
}

impl Lines {
    /// Appends `bytes`; returns the lines completed (or cut at MAX_LINE).
    pub fn feed(&mut self, mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut done = Vec::new();
        while !bytes.is_empty() {
            let (chunk, newline) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            bytes = &bytes[chunk.len() + usize::from(newline)..];
            if !self.skipping {
                let room = MAX_LINE - self.line.len();
                self.line.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if self.line.len() == MAX_LINE {
                    done.push(std::mem::take(&mut self.line));
                    self.skipping = true;
                }
            }
            if newline {
                if !self.skipping && !self.line.is_empty() {
                    done.push(std::mem::take(&mut self.line));
                }
                self.line.clear();
                self.skipping = false;
            }
        }
        done
    }

    /// A last line without its newline, if any.
    pub fn finish(&mut self) -> Option<Vec<u8>> {
        let line = std::mem::take(&mut self.line);
        (!line.is_empty() && !std::mem::take(&mut self.skipping)).then_some(line)
    }
}

impl Relay {
    /// Creates the FIFO and opens both ends of the relay.
    pub fn create() -> std::io::Result<Relay> {
        std::fs::create_dir_all("/run/hvsim")?;
        crate::sys::mkfifo(SDK_PATH, 0o666)?;
        // Read-write, so the FIFO never reports end-of-file when writers
        // come and go; non-blocking, so a pump stops when it is empty.
        let fifo = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags_nonblock()
            .open(SDK_PATH)?;
        let out = std::fs::OpenOptions::new().write(true).open("/dev/hvsim").ok();
        Ok(Relay { fifo, out, lines: Lines::default() })
    }

    pub fn fd(&self) -> RawFd {
        self.fifo.as_raw_fd()
    }

    /// Forwards every complete line that can be read now.
    pub fn pump(&mut self) {
        let mut buf = [0u8; 4096];
        loop {
            match self.fifo.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    for line in self.lines.feed(&buf[..n]) {
                        self.send(&line);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("hvsim-init: SDK relay: {e}");
                    return;
                }
            }
        }
    }

    /// Forwards what is left, including a last line without a newline.
    pub fn finish(&mut self) {
        self.pump();
        if let Some(line) = self.lines.finish() {
            self.send(&line);
        }
    }

    fn send(&mut self, line: &[u8]) {
        if let Some(out) = &mut self.out {
            // One write is one message.
            if let Err(e) = out.write_all(line) {
                eprintln!("hvsim-init: SDK relay: /dev/hvsim: {e}");
            }
        }
    }
}

trait NonBlock {
    fn custom_flags_nonblock(&mut self) -> &mut Self;
}

impl NonBlock for std::fs::OpenOptions {
    fn custom_flags_nonblock(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NONBLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_across_reads() {
        let mut l = Lines::default();
        assert_eq!(l.feed(b"{\"a\":1}\n{\"b\""), vec![b"{\"a\":1}".to_vec()]);
        assert_eq!(l.feed(b":2}\n\n"), vec![b"{\"b\":2}".to_vec()]);
        assert_eq!(l.feed(b"tail"), Vec::<Vec<u8>>::new());
        assert_eq!(l.finish(), Some(b"tail".to_vec()));
    }

    #[test]
    fn over_long_lines_are_cut_once() {
        let mut l = Lines::default();
        let mut out = l.feed(&vec![b'x'; MAX_LINE + 10]);
        out.extend(l.feed(b"yyy\nok\n"));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].len(), MAX_LINE);
        assert_eq!(out[1], b"ok");
    }
}
