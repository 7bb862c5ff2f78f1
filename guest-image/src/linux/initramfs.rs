//! The initramfs: hvsim's init as `/init`, Debian's busybox-static as the
//! shell and tool box, libvoidstar for the Antithesis SDKs, and the few
//! nodes and directories a boot needs.
//!
//! Uncompressed on purpose: on nested hosts the guest kernel runs emulated,
//! and decompressing is the slowest part of unpacking. Built byte-for-byte
//! reproducibly (fixed inode numbers, zero mtimes, fixed order), so the
//! initramfs is a pure function of its inputs like everything else.

use std::io::Write;

use cpio::newc::{trailer, Builder};

use crate::error::{io, Result};

/// Where busybox-static installs its binary.
pub const HOST_BUSYBOX: &str = "/bin/busybox";

/// The static init, built by build.rs from guest-init/.
pub const INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hvsim-init"));
/// libvoidstar, built by build.rs from guest-sdk/voidstar/: where the
/// Antithesis SDKs look for it, they send everything to hvsim.
pub const VOIDSTAR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libvoidstar.so"));
pub const VOIDSTAR_PATH: &str = "usr/lib/libvoidstar.so";

enum Node<'a> {
    Dir,
    File(&'a [u8]),
    Symlink(&'a str),
    CharDev(u32, u32),
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

fn append(out: &mut Vec<u8>, ino: u32, name: &str, node: &Node<'_>) -> std::io::Result<()> {
    let (mode, data, rdev): (u32, &[u8], (u32, u32)) = match node {
        Node::Dir => (S_IFDIR | 0o755, &[], (0, 0)),
        Node::File(bytes) => (S_IFREG | 0o755, bytes, (0, 0)),
        Node::Symlink(target) => (S_IFLNK | 0o777, target.as_bytes(), (0, 0)),
        Node::CharDev(major, minor) => (S_IFCHR | 0o600, &[], (*major, *minor)),
    };
    let nlink = if matches!(node, Node::Dir) { 2 } else { 1 };
    let mut w = Builder::new(name)
        .ino(ino)
        .mode(mode)
        .nlink(nlink)
        .mtime(0)
        .rdev_major(rdev.0)
        .rdev_minor(rdev.1)
        .write(out, data.len() as u32);
    w.write_all(data)?;
    w.finish()?;
    Ok(())
}

/// The initramfs bytes around `busybox` (the host's busybox-static binary),
/// plus `extra` files (absolute guest path, contents; made executable).
pub fn build(busybox: &[u8], extra: &[(String, Vec<u8>)]) -> Vec<u8> {
    let passwd = b"root:x:0:0:root:/root:/bin/sh\n";
    let group = b"root:x:0:\n";
    let mut entries: Vec<(&str, Node<'_>)> = vec![
        ("bin", Node::Dir),
        ("dev", Node::Dir),
        ("dev/console", Node::CharDev(5, 1)),
        ("etc", Node::Dir),
        ("etc/group", Node::File(group)),
        ("etc/passwd", Node::File(passwd)),
        ("proc", Node::Dir),
        ("root", Node::Dir),
        ("run", Node::Dir),
        ("sys", Node::Dir),
        ("tmp", Node::Dir),
        ("usr", Node::Dir),
        ("usr/bin", Node::Dir),
        ("usr/lib", Node::Dir),
        (VOIDSTAR_PATH, Node::File(VOIDSTAR)),
        ("bin/busybox", Node::File(busybox)),
        // busybox sh runs every applet itself (SH_STANDALONE), so one link
        // is enough: no per-applet entries for the kernel to unpack.
        ("bin/sh", Node::Symlink("busybox")),
        ("usr/bin/env", Node::Symlink("/bin/busybox")),
        // Runs a command on a simulated node (init, called by this name).
        ("bin/hvsim-node", Node::Symlink("/init")),
        ("init", Node::File(INIT)),
    ];
    // Extra files, with any directories they need that are not there yet.
    let mut dirs: Vec<String> = Vec::new();
    for (path, _) in extra {
        let rel = path.trim_start_matches('/');
        let mut at = 0;
        while let Some(i) = rel[at..].find('/') {
            let dir = rel[..at + i].to_owned();
            if !entries.iter().any(|(n, _)| *n == dir) && !dirs.contains(&dir) {
                dirs.push(dir);
            }
            at += i + 1;
        }
    }
    entries.extend(dirs.iter().map(|d| (d.as_str(), Node::Dir)));
    entries.extend(extra.iter().map(|(path, bytes)| (path.trim_start_matches('/'), Node::File(bytes))));
    let mut out = Vec::with_capacity(busybox.len() + INIT.len() + 64 * 1024);
    for (i, (name, node)) in entries.iter().enumerate() {
        append(&mut out, i as u32 + 1, name, node).expect("writing to a Vec cannot fail");
    }
    trailer(&mut out).expect("writing to a Vec cannot fail");
    out
}

/// Reads the host's busybox-static binary.
pub fn host_busybox() -> Result<Vec<u8>> {
    std::fs::read(HOST_BUSYBOX).map_err(io("reading busybox-static (apt-get install busybox-static)", HOST_BUSYBOX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cpio::newc::Reader;

    #[test]
    fn archive_lists_init_and_busybox_reproducibly() {
        let extra = vec![("/opt/app/run".to_owned(), b"#!/bin/sh\ntrue\n".to_vec())];
        let a = build(b"fake busybox", &extra);
        assert_eq!(a, build(b"fake busybox", &extra), "reproducible");
        let mut names = vec![];
        let mut rest: &[u8] = &a;
        loop {
            let r = Reader::new(rest).unwrap();
            if r.entry().is_trailer() {
                break;
            }
            names.push((r.entry().name().to_owned(), r.entry().mode(), r.entry().file_size()));
            rest = r.finish().unwrap();
        }
        assert!(names.iter().any(|(n, m, s)| n == "init" && m & S_IFREG != 0 && *s as usize == INIT.len()));
        assert!(names.iter().any(|(n, _, s)| n == "bin/busybox" && *s == 12));
        assert!(names.iter().any(|(n, m, _)| n == "dev/console" && m & S_IFCHR == S_IFCHR));
        assert!(names.iter().any(|(n, m, _)| n == "opt/app" && m & S_IFDIR != 0));
        assert!(names.iter().any(|(n, _, s)| n == "opt/app/run" && *s == 15));
        assert_eq!(a.len() % 4, 0);
    }

    #[test]
    fn embedded_init_is_a_static_executable() {
        assert_eq!(&INIT[..4], b"\x7fELF");
        // No PT_INTERP program header: no dynamic loader needed.
        let phoff = u64::from_le_bytes(INIT[32..40].try_into().unwrap()) as usize;
        let phentsize = u16::from_le_bytes(INIT[54..56].try_into().unwrap()) as usize;
        let phnum = u16::from_le_bytes(INIT[56..58].try_into().unwrap()) as usize;
        for i in 0..phnum {
            let p_type = u32::from_le_bytes(INIT[phoff + i * phentsize..][..4].try_into().unwrap());
            assert_ne!(p_type, 3, "PT_INTERP present: init is dynamically linked");
        }
    }
}
