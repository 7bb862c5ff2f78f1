//! Tar archives written as text, for the targets that take archives
//! (`layers`, `image`). A mutated raw tar mostly fails its header checksum
//! and stops at the first header; a mutated line of this text changes a
//! path, a type, a mode or a link target, and the harness writes it as a
//! tar whose headers are valid, so the fuzzer reaches what hvsim does with
//! the entries. The seeds stay readable.
//!
//! ```text
//! gzip | zstd                 first line, optional: compress the archive
//! d PATH META                 a directory
//! f PATH META DATA            a regular file holding DATA (the rest of the line)
//! s PATH META TARGET          a symbolic link
//! h PATH META TARGET          a hardlink
//! p PATH META                 a fifo
//! c PATH META                 a character device
//! t PATH META T               an entry of type byte T (its first character), no data
//! z PATH META SIZE DATA       a file whose header says SIZE bytes but which holds DATA
//! ```
//!
//! META is `MODE[:UID[:GID[:MTIME]]]`, MODE in octal. PATH, TARGET and DATA
//! take the escapes `\s` (space), `\n`, `\\` and `\xHH`. Paths are written
//! as they are (`..`, absolute, empty), longer ones through GNU long-name
//! entries. A line that does not parse is skipped.

use std::io::Write;

/// An archive: its bytes, and before compression.
pub struct Tar {
    pub bytes: Vec<u8>,
    pub uncompressed: Vec<u8>,
}

const BLOCK: usize = 512;

/// Writes the archive `text` describes.
pub fn build(text: &[u8]) -> Tar {
    let mut lines = text.split(|&b| b == b'\n').peekable();
    let compression = lines.next_if(|l| *l == b"gzip" || *l == b"zstd");
    let mut out = Vec::new();
    for line in lines {
        if let Some(e) = Entry::parse(line) {
            e.write(&mut out);
        }
    }
    finish(out, compression)
}

/// Appends a regular file (0644, root's, mtime 1).
pub fn append_file(out: &mut Vec<u8>, path: &[u8], data: &[u8]) {
    Entry::new(tar::EntryType::Regular, path, b"", data).write(out);
}

/// Appends a symbolic link.
pub fn append_symlink(out: &mut Vec<u8>, path: &[u8], target: &[u8]) {
    Entry::new(tar::EntryType::Symlink, path, target, b"").write(out);
}

/// Ends the archive, and compresses it if `compression` says `gzip` or `zstd`.
pub fn finish(mut out: Vec<u8>, compression: Option<&[u8]>) -> Tar {
    out.resize(out.len() + 2 * BLOCK, 0);
    let bytes = match compression {
        Some(b"gzip") => {
            let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(&out).expect("writing to memory");
            z.finish().expect("writing to memory")
        }
        Some(b"zstd") => zstd::encode_all(&out[..], 1).expect("writing to memory"),
        _ => out.clone(),
    };
    Tar { bytes, uncompressed: out }
}

struct Entry {
    kind: tar::EntryType,
    path: Vec<u8>,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    link: Vec<u8>,
    data: Vec<u8>,
    /// The size the header declares, if not the data's.
    declared: Option<u64>,
}

impl Entry {
    fn new(kind: tar::EntryType, path: &[u8], link: &[u8], data: &[u8]) -> Entry {
        Entry {
            kind,
            path: path.to_vec(),
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime: 1,
            link: link.to_vec(),
            data: data.to_vec(),
            declared: None,
        }
    }

    fn parse(line: &[u8]) -> Option<Entry> {
        let mut fields = line.splitn(4, |&b| b == b' ');
        let ty = fields.next()?;
        let path = unescape(fields.next()?);
        let meta = std::str::from_utf8(fields.next()?).ok()?;
        let rest = fields.next().unwrap_or_default();
        let mut m = meta.split(':');
        let mode = u32::from_str_radix(m.next()?, 8).ok()?;
        let mut num = |default: u64| m.next().and_then(|v| v.parse().ok()).unwrap_or(default);
        let mut e = Entry {
            mode,
            uid: num(0),
            gid: num(0),
            mtime: num(1),
            ..Entry::new(tar::EntryType::Regular, &path, b"", b"")
        };
        match ty {
            b"d" => e.kind = tar::EntryType::Directory,
            b"f" => e.data = unescape(rest),
            b"s" | b"h" => {
                e.kind = if ty == b"s" { tar::EntryType::Symlink } else { tar::EntryType::Link };
                e.link = unescape(rest);
            }
            b"p" => e.kind = tar::EntryType::Fifo,
            b"c" => e.kind = tar::EntryType::Char,
            b"t" => e.kind = tar::EntryType::new(*rest.first()?),
            b"z" => {
                let (size, data) = rest.split_at(rest.iter().position(|&b| b == b' ').unwrap_or(rest.len()));
                e.declared = Some(std::str::from_utf8(size).ok()?.parse().ok()?);
                e.data = unescape(data.strip_prefix(b" ").unwrap_or(data));
            }
            _ => return None,
        }
        Some(e)
    }

    fn write(&self, out: &mut Vec<u8>) {
        let mut h = tar::Header::new_gnu();
        if self.path.len() > 100 {
            long(out, tar::EntryType::GNULongName, &self.path);
        }
        if self.link.len() > 100 {
            long(out, tar::EntryType::GNULongLink, &self.link);
        }
        let old = h.as_old_mut();
        copy_field(&mut old.name, &self.path);
        copy_field(&mut old.linkname, &self.link);
        h.set_entry_type(self.kind);
        h.set_mode(self.mode);
        h.set_uid(self.uid);
        h.set_gid(self.gid);
        h.set_mtime(self.mtime);
        h.set_size(self.declared.unwrap_or(self.data.len() as u64));
        h.set_cksum();
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(&self.data);
        pad(out);
    }
}

/// A GNU long name (or long link) entry, before the entry it names.
fn long(out: &mut Vec<u8>, kind: tar::EntryType, name: &[u8]) {
    let mut h = tar::Header::new_gnu();
    copy_field(&mut h.as_old_mut().name, b"././@LongLink");
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(name.len() as u64 + 1);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(name);
    out.push(0);
    pad(out);
}

fn copy_field(field: &mut [u8], value: &[u8]) {
    let n = value.len().min(field.len());
    field[..n].copy_from_slice(&value[..n]);
}

fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
}

/// `\s`, `\n`, `\\` and `\xHH`; anything else is taken as it is.
pub fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let hex = || u8::from_str_radix(std::str::from_utf8(s.get(i + 2..i + 4)?).ok()?, 16).ok();
        let (byte, used) = match (s[i], s.get(i + 1)) {
            (b'\\', Some(b's')) => (b' ', 2),
            (b'\\', Some(b'n')) => (b'\n', 2),
            (b'\\', Some(b'\\')) => (b'\\', 2),
            (b'\\', Some(b'x')) => hex().map_or((b'\\', 1), |b| (b, 4)),
            (b, _) => (b, 1),
        };
        out.push(byte);
        i += used;
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn entries_come_out_as_written() {
        let long = "d/".repeat(70) + "file";
        let text = format!(
            "d etc 755:0:0:5\nf etc/motd 600:1000:100:7 hello\\sworld\\n\ns etc/link 777 motd\n\
             h etc/hard 644 etc/motd\np fifo 644\nnot an entry\nf {long} 644 x\nf ../up 644 y\n"
        );
        let tar = build(text.as_bytes());
        assert_eq!(tar.bytes, tar.uncompressed);
        let mut archive = tar::Archive::new(&tar.bytes[..]);
        let mut seen = Vec::new();
        for e in archive.entries().unwrap() {
            let mut e = e.unwrap();
            let h = e.header().clone();
            let mut data = String::new();
            e.read_to_string(&mut data).unwrap();
            let path = String::from_utf8(e.path_bytes().into_owned()).unwrap();
            let link = e.link_name_bytes().map(|l| String::from_utf8(l.into_owned()).unwrap());
            seen.push((path, h.entry_type(), h.mode().unwrap(), h.uid().unwrap(), h.mtime().unwrap(), link, data));
        }
        use tar::EntryType::*;
        assert_eq!(seen[0], ("etc".into(), Directory, 0o755, 0, 5, None, String::new()));
        assert_eq!(seen[1], ("etc/motd".into(), Regular, 0o600, 1000, 7, None, "hello world\n".into()));
        assert_eq!(seen[2].5.as_deref(), Some("motd"));
        assert_eq!((seen[3].1, seen[3].5.as_deref()), (Link, Some("etc/motd")));
        assert_eq!(seen[4].1, Fifo);
        assert_eq!(seen[5].0, long, "a long name, whole");
        assert_eq!(seen[6].0, "../up", "paths are written as they are");
        assert_eq!(seen.len(), 7, "the line that is not an entry is skipped");
    }

    #[test]
    fn archives_compress_and_lie_about_sizes() {
        for (first, magic) in [("gzip", &[0x1f, 0x8b][..]), ("zstd", &[0x28, 0xb5, 0x2f, 0xfd])] {
            let tar = build(format!("{first}\nf a 644 x").as_bytes());
            assert!(tar.bytes.starts_with(magic), "{first}");
            assert_eq!(tar.uncompressed, build(b"f a 644 x").bytes);
        }
        let tar = build(b"z short 644 4096 abc");
        let mut archive = tar::Archive::new(&tar.bytes[..]);
        let mut e = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(e.header().size().unwrap(), 4096);
        let mut data = Vec::new();
        let _ = e.read_to_end(&mut data);
        assert!(data.len() < 4096 && data.starts_with(b"abc"), "the archive ends before its data");
    }
}
