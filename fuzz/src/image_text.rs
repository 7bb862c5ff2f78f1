//! Image sources written as text, for the `image` target: the files of a
//! docker-archive or an OCI image layout, whose digests and sizes the
//! harness fills in. hvsim checks every digest, so a fuzzer that had to
//! guess SHA-256 values would never get past the first descriptor; here a
//! mutation of a layer, a config or a manifest keeps every reference to it
//! right, unless the mutation is of the reference itself.
//!
//! ```text
//! dir | gzip                  first line, optional: a layout directory
//!                             rather than an archive, or a gzip'd archive
//! === NAME                    a file of the source; its lines follow
//! === NAME -> TARGET          a symbolic link in the archive
//! ```
//!
//! A file whose first line is `tar` (or `tar gzip`, `tar zstd`) holds a tar
//! in [`tar_text`](crate::tar_text)'s language. In names and contents,
//! `@digest:N@`, `@hex:N@`, `@size:N@` and `@diff:N@` stand for file N's
//! (counting from 0) `sha256:<hex>` digest, its hex digits, its size in
//! bytes, and the digest of its tar before compression. A reference that
//! cannot be resolved (to itself, around a cycle, to no file) stays as it
//! is written.

use sha2::{Digest, Sha256};

use crate::tar_text;

/// Files of one source, at most: the rest are ignored.
const MAX_FILES: usize = 64;

/// A source's files, ready to write.
pub struct Source {
    /// A layout directory rather than an archive.
    pub dir: bool,
    pub gzip: bool,
    pub files: Vec<File>,
}

pub struct File {
    pub name: Vec<u8>,
    /// A symbolic link's target, or `None` for a regular file.
    pub link: Option<Vec<u8>>,
    pub bytes: Vec<u8>,
}

/// A file as the text has it.
struct Spec<'a> {
    name: &'a [u8],
    link: Option<&'a [u8]>,
    lines: Vec<&'a [u8]>,
}

/// What a file is once built: its bytes, and its tar before compression.
#[derive(Clone)]
struct Built {
    bytes: Vec<u8>,
    uncompressed: Vec<u8>,
}

pub fn parse(text: &[u8]) -> Source {
    let mut lines = text.split(|&b| b == b'\n').peekable();
    let dir = lines.next_if(|l| *l == b"dir").is_some();
    let gzip = !dir && lines.next_if(|l| *l == b"gzip").is_some();
    let mut specs: Vec<Spec> = Vec::new();
    for line in lines {
        if let Some(header) = line.strip_prefix(b"=== ") {
            let (name, link) = match find(header, b" -> ") {
                Some(i) => (&header[..i], Some(&header[i + 4..])),
                None => (header, None),
            };
            specs.push(Spec { name, link, lines: Vec::new() });
        } else if let Some(spec) = specs.last_mut() {
            spec.lines.push(line);
        }
    }
    specs.truncate(MAX_FILES);
    let contents: Vec<Vec<u8>> = specs.iter().map(|s| s.lines.join(&b'\n')).collect();

    // Each file is built once every file it refers to is (a pass per file
    // at most); one that refers to itself, or around a cycle, is built
    // last, with those references as they are written.
    let n = specs.len();
    let mut built: Vec<Option<Built>> = vec![None; n];
    for _ in 0..n {
        for i in 0..n {
            let ready = refs(&contents[i]).iter().all(|&r| r != i && built.get(r).is_some_and(Option::is_some));
            if built[i].is_none() && ready {
                built[i] = Some(build(&substitute(&contents[i], &built)));
            }
        }
    }
    for i in 0..n {
        if built[i].is_none() {
            built[i] = Some(build(&substitute(&contents[i], &built)));
        }
    }
    let files = specs
        .iter()
        .zip(&built)
        .map(|(spec, b)| File {
            name: substitute(spec.name, &built),
            link: spec.link.map(|l| substitute(l, &built)),
            bytes: b.as_ref().expect("every file is built").bytes.clone(),
        })
        .collect();
    Source { dir, gzip, files }
}

fn build(content: &[u8]) -> Built {
    let (first, rest) = content.split_at(content.iter().position(|&b| b == b'\n').unwrap_or(content.len()));
    let rest = rest.strip_prefix(b"\n").unwrap_or(rest);
    let compression: Option<&[u8]> = match first {
        b"tar" => Some(b""),
        b"tar gzip" => Some(b"gzip\n"),
        b"tar zstd" => Some(b"zstd\n"),
        _ => None,
    };
    match compression {
        Some(c) => {
            let t = tar_text::build(&[c, rest].concat());
            Built { bytes: t.bytes, uncompressed: t.uncompressed }
        }
        None => Built { bytes: content.to_vec(), uncompressed: content.to_vec() },
    }
}

/// A placeholder at the start of `s`: its kind, file and length.
fn placeholder(s: &[u8]) -> Option<(&[u8], usize, usize)> {
    let body = s.strip_prefix(b"@")?;
    let colon = body.iter().position(|&b| b == b':')?;
    let kind = &body[..colon];
    if !matches!(kind, b"digest" | b"hex" | b"size" | b"diff") {
        return None;
    }
    let digits = body[colon + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 4 || body.get(colon + 1 + digits) != Some(&b'@') {
        return None;
    }
    let n = std::str::from_utf8(&body[colon + 1..colon + 1 + digits]).ok()?.parse().ok()?;
    Some((kind, n, 1 + colon + 1 + digits + 1))
}

fn refs(s: &[u8]) -> Vec<usize> {
    (0..s.len()).filter_map(|i| placeholder(&s[i..]).map(|(_, n, _)| n)).collect()
}

fn substitute(s: &[u8], built: &[Option<Built>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if let Some((kind, n, len)) = placeholder(&s[i..]) {
            if let Some(Some(b)) = built.get(n) {
                let hex = |bytes: &[u8]| hex(&Sha256::digest(bytes));
                let value = match kind {
                    b"digest" => format!("sha256:{}", hex(&b.bytes)),
                    b"hex" => hex(&b.bytes),
                    b"size" => b.bytes.len().to_string(),
                    _ => format!("sha256:{}", hex(&b.uncompressed)),
                };
                out.extend_from_slice(value.as_bytes());
                i += len;
                continue;
            }
        }
        out.push(s[i]);
        i += 1;
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
