//! The snapshot file format.
//!
//! ```text
//! offset  size  field
//! 0       8     magic "HVSIMSNP"
//! 8       4     format version (u32 LE), currently 1
//! 12      4     reserved, 0
//! 16      8     header length H (u64 LE)
//! 24      H     header: JSON, see [`Header`] (the machine state, no RAM)
//! 24+H    8     memory length M (u64 LE)
//! 32+H    M     memory: zstd stream of records (page index u32 LE, 4096
//!               bytes), one per page that is not all zero, ascending
//! 32+H+M  32    SHA-256 of every byte before it
//! ```
//!
//! A reader checks length, checksum, magic and version before it parses
//! anything: a corrupt, truncated or foreign file is refused with one line
//! that says which, never half-loaded.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use hvsim_vmm::machine::{HostSettings, MachineSnapshot};
use hvsim_vmm::memory::PAGE_SIZE;
use hvsim_vmm::{Machine, Vtime};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const MAGIC: &[u8; 8] = b"HVSIMSNP";
pub const VERSION: u32 = 1;
const PREFIX: usize = 24;
const CHECKSUM: usize = 32;
const ZSTD_LEVEL: i32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("snapshot {}: not an hvsim snapshot (bad magic)", path.display())]
    BadMagic { path: PathBuf },
    #[error("snapshot {}: format version {found}, but this hvsim reads version {VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("snapshot {}: truncated ({len} bytes; {what})", path.display())]
    Truncated { path: PathBuf, len: usize, what: String },
    #[error("snapshot {}: checksum mismatch: the file is corrupt", path.display())]
    Checksum { path: PathBuf },
    #[error("snapshot {}: corrupt: {what}", path.display())]
    Corrupt { path: PathBuf, what: String },
    #[error("snapshot {}: {source}", path.display())]
    Machine { path: PathBuf, source: hvsim_vmm::Error },
}

/// Everything in a snapshot file but the memory.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Header {
    /// What was running (a raw guest's name, "linux", ...).
    pub guest: String,
    /// The master seed the run started with.
    pub seed: u64,
    pub hvsim_version: String,
    /// The world the machine ran in (see `hvsim_guest_image::world`): the
    /// hvsim version, machine model, CPUID and MSR policy, and what the
    /// guest was made of. Empty if the writer did not say (the boot cache,
    /// benchmarks) and in files written before snapshots pinned it.
    #[serde(default)]
    pub world: BTreeMap<String, String>,
    pub machine: MachineSnapshot,
}

impl Header {
    pub fn vtime(&self) -> Vtime {
        self.machine.state.clock.now()
    }
}

/// What was written.
#[derive(Clone, Debug)]
pub struct SaveStats {
    pub file_bytes: usize,
    /// Pages stored (the others are all zero).
    pub pages: usize,
}

/// Captures `machine` and writes it to `path` atomically (a temporary file
/// in the same directory, renamed when complete).
pub fn save(
    path: &Path,
    machine: &mut Machine,
    guest: &str,
    seed: u64,
    world: &BTreeMap<String, String>,
) -> Result<SaveStats, SnapshotError> {
    let io = |source| SnapshotError::Io { path: path.to_owned(), source };
    tracing::debug!(path = %path.display(), "saving a snapshot file");
    let snap = machine.capture().map_err(|source| SnapshotError::Machine { path: path.to_owned(), source })?;
    let header = Header {
        guest: guest.to_owned(),
        seed,
        hvsim_version: env!("CARGO_PKG_VERSION").to_owned(),
        world: world.clone(),
        machine: snap,
    };
    let header_json = serde_json::to_vec(&header).expect("snapshot headers serialize");

    let ram = machine.ram();
    let mut encoder = zstd::Encoder::new(Vec::new(), ZSTD_LEVEL).map_err(io)?;
    let mut pages = 0;
    for index in 0..ram.pages() {
        let page = ram.page(index);
        if page.iter().any(|&b| b != 0) {
            encoder.write_all(&(index as u32).to_le_bytes()).map_err(io)?;
            encoder.write_all(page).map_err(io)?;
            pages += 1;
        }
    }
    let memory = encoder.finish().map_err(io)?;

    let mut out = Vec::with_capacity(PREFIX + header_json.len() + 8 + memory.len() + CHECKSUM);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&(header_json.len() as u64).to_le_bytes());
    out.extend_from_slice(&header_json);
    out.extend_from_slice(&(memory.len() as u64).to_le_bytes());
    out.extend_from_slice(&memory);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A name of its own: concurrent writers of one path never mix.
    let mut tmp = tempfile::Builder::new().prefix(".hvsim-snapshot-").tempfile_in(dir).map_err(io)?;
    tmp.write_all(&out).map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(SaveStats { file_bytes: out.len(), pages })
}

/// A verified snapshot file.
pub struct Loaded {
    pub header: Header,
    path: PathBuf,
    memory: Vec<u8>,
}

/// The largest header a snapshot file may announce: far above any
/// machine's (tens of KiB), far below what would hurt to allocate.
const MAX_HEADER: u64 = 64 << 20;

/// Reads and verifies `path` (length, checksum, magic, version, header).
/// The magic, version, header and lengths are checked against the file's
/// size before its whole is read ([`announced`]): a file is data, and a
/// hostile or damaged one (a sparse terabyte) gets one line, not an
/// allocation.
pub fn load(path: &Path) -> Result<Loaded, SnapshotError> {
    let io = |source| SnapshotError::Io { path: path.to_owned(), source };
    let mut file = hvsim_vmm::files::open_regular(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let want = announced(&mut file, len, path)?;
    drop(file);
    let bytes = hvsim_vmm::files::read_bounded(path, want).map_err(io)?;
    parse(bytes, path)
}

/// The length of a snapshot file of `len` bytes whose start `file` reads,
/// once its magic, version, header and lengths are checked and agree with
/// `len`. Reads at most the header (`path` only names the file in errors).
pub fn announced(file: &mut impl Read, len: u64, path: &Path) -> Result<u64, SnapshotError> {
    let p = || path.to_owned();
    let io = |source| SnapshotError::Io { path: p(), source };
    let corrupt = |what: String| SnapshotError::Corrupt { path: p(), what };
    let truncated = |what: &str| SnapshotError::Truncated { path: p(), len: len as usize, what: what.into() };
    if len < (PREFIX + 8 + CHECKSUM) as u64 {
        return Err(truncated("shorter than any snapshot"));
    }
    let mut prefix = [0u8; PREFIX];
    file.read_exact(&mut prefix).map_err(io)?;
    if &prefix[..8] != MAGIC {
        return Err(SnapshotError::BadMagic { path: p() });
    }
    let version = u32::from_le_bytes(prefix[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(SnapshotError::Version { path: p(), found: version });
    }
    let header_len = u64_at(&prefix, 16);
    if header_len > MAX_HEADER {
        return Err(corrupt(format!("its header length, {header_len} bytes, is beyond any snapshot's")));
    }
    if (PREFIX as u64 + header_len + 8 + CHECKSUM as u64) > len {
        return Err(truncated("cut short in its header"));
    }
    let mut header = vec![0u8; header_len as usize + 8];
    file.read_exact(&mut header).map_err(io)?;
    let memory_len = u64_at(&header, header_len as usize);
    // A header that does not parse may be a damaged byte the checksum
    // names (`parse`): then the memory is bounded by the most RAM there is.
    let ram = match serde_json::from_slice::<Header>(&header[..header_len as usize]) {
        Ok(h) => {
            hvsim_vmm::memory::check_size(h.machine.spec.ram_size).map_err(|e| corrupt(format!("header: {e}")))?;
            h.machine.spec.ram_size
        }
        Err(_) => hvsim_vmm::memory::MAX_RAM,
    };
    // Every page stored, with its index, compressed at worst.
    let most = zstd::zstd_safe::compress_bound(ram / PAGE_SIZE * (PAGE_SIZE + 4)) as u64;
    if memory_len > most {
        return Err(corrupt(format!("its memory length, {memory_len} bytes, is beyond what {ram} bytes of RAM make")));
    }
    let want = PREFIX as u64 + header_len + 8 + memory_len + CHECKSUM as u64;
    if len < want {
        return Err(truncated("cut short"));
    }
    if len > want {
        return Err(corrupt(format!("the file is {len} bytes, {} more than its lengths say", len - want)));
    }
    Ok(want)
}

/// Verifies the contents of a snapshot file (`path` only names it in
/// errors): what [`load`] does once the file is read.
pub fn parse(bytes: Vec<u8>, path: &Path) -> Result<Loaded, SnapshotError> {
    let p = || path.to_owned();
    let len = bytes.len();
    if len < PREFIX + 8 + CHECKSUM {
        return Err(SnapshotError::Truncated { path: p(), len, what: "shorter than any snapshot".into() });
    }
    if &bytes[..8] != MAGIC {
        return Err(SnapshotError::BadMagic { path: p() });
    }
    let (body, digest) = bytes.split_at(len - CHECKSUM);
    if Sha256::digest(body).as_slice() != digest {
        // A cut-short file fails here too; say so when the lengths show it.
        if expected_len(&bytes).is_none_or(|need| need > len) {
            return Err(SnapshotError::Truncated { path: p(), len, what: "cut short".into() });
        }
        return Err(SnapshotError::Checksum { path: p() });
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(SnapshotError::Version { path: p(), found: version });
    }
    let corrupt = |what: String| SnapshotError::Corrupt { path: p(), what };
    let header_len = u64_at(&bytes, 16) as usize;
    let header_end = PREFIX.checked_add(header_len).filter(|&e| e + 8 <= body.len());
    let header_end = header_end.ok_or_else(|| corrupt("header length points past the end".into()))?;
    let header: Header =
        serde_json::from_slice(&bytes[PREFIX..header_end]).map_err(|e| corrupt(format!("header: {e}")))?;
    // Every size in the header is checked before anything is allocated
    // from it (a header is data, and a checksum proves only integrity).
    let spec = &header.machine.spec;
    hvsim_vmm::memory::check_size(spec.ram_size).map_err(|e| corrupt(format!("header: {e}")))?;
    spec.virtio.check().map_err(|e| corrupt(format!("header: {e}")))?;
    let memory_len = u64_at(&bytes, header_end) as usize;
    if header_end + 8 + memory_len != body.len() {
        return Err(corrupt("memory length does not match the file".into()));
    }
    let memory = bytes[header_end + 8..body.len()].to_vec();
    Ok(Loaded { header, path: p(), memory })
}

/// The file length the length fields announce (None if they overflow or
/// point beyond what is there to read).
fn expected_len(bytes: &[u8]) -> Option<usize> {
    let header_end = PREFIX.checked_add(u64_at(bytes, 16) as usize)?;
    let memory_len = u64_at(bytes, header_end);
    if memory_len == u64::MAX {
        return None;
    }
    header_end.checked_add(8)?.checked_add(memory_len as usize)?.checked_add(CHECKSUM)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes.get(at..at + 8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

impl Loaded {
    /// Decompresses the memory and calls `page(index, bytes)` for every
    /// stored page, in order; fails on a page outside RAM.
    pub fn for_each_page(&self, mut page: impl FnMut(usize, &[u8])) -> Result<usize, SnapshotError> {
        let corrupt = |what: String| SnapshotError::Corrupt { path: self.path.clone(), what };
        let ram_pages = self.header.machine.spec.ram_size / PAGE_SIZE;
        let mut decoder = zstd::Decoder::new(&self.memory[..]).map_err(|e| corrupt(format!("memory: {e}")))?;
        let mut record = vec![0u8; 4 + PAGE_SIZE];
        let mut count = 0;
        let mut last = 0;
        loop {
            match read_record(&mut decoder, &mut record) {
                Ok(false) => return Ok(count),
                Ok(true) => {}
                Err(e) => return Err(corrupt(format!("memory: {e}"))),
            }
            let index = u32::from_le_bytes(record[..4].try_into().expect("4 bytes")) as usize;
            if index >= ram_pages {
                return Err(corrupt(format!("page {index} is outside the {ram_pages} pages of RAM")));
            }
            // Ascending, as `save` writes them: a stream cannot repeat
            // pages to decompress without end.
            if count > 0 && index <= last {
                return Err(corrupt(format!("page {index} comes after page {last}")));
            }
            last = index;
            page(index, &record[4..]);
            count += 1;
        }
    }

    /// A new machine in this snapshot's state (RAM included), run with this
    /// host's `host` settings.
    pub fn restore(&self, host: &HostSettings) -> Result<Machine, SnapshotError> {
        tracing::debug!(path = %self.path.display(), "restoring a snapshot file");
        let machine = Machine::restore(&self.header.machine, host)
            .map_err(|source| SnapshotError::Machine { path: self.path.clone(), source })?;
        let ram = machine.ram();
        self.for_each_page(|index, bytes| ram.restore_page(index, bytes))?;
        Ok(machine)
    }

    pub fn compressed_memory_bytes(&self) -> usize {
        self.memory.len()
    }
}

/// Reads one whole record; `Ok(false)` at a clean end of stream.
fn read_record(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..])? {
            0 if filled == 0 => return Ok(false),
            0 => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "partial page record")),
            n => filled += n,
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/inputs.rs"));

    /// A snapshot file (without its checksum) whose memory is `records`.
    fn with_memory(records: &[u8]) -> Vec<u8> {
        let (_, seed) = fuzz_inputs("snapshot").into_iter().find(|(f, _)| f.ends_with("timer-1ms")).unwrap();
        let header_end = PREFIX + u64_at(&seed, 16) as usize;
        let memory = zstd::encode_all(records, ZSTD_LEVEL).unwrap();
        let mut out = seed[..header_end].to_vec();
        out.extend_from_slice(&(memory.len() as u64).to_le_bytes());
        out.extend_from_slice(&memory);
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    /// Pages come in ascending order: a small file cannot repeat one page
    /// to decompress for as long as it likes.
    #[test]
    fn pages_out_of_order_are_refused() {
        let record = |index: u32| [&index.to_le_bytes()[..], &[7u8; PAGE_SIZE][..]].concat();
        let path = Path::new("x.snap");
        let ok = parse(with_memory(&[record(1), record(3)].concat()), path).unwrap();
        assert_eq!(ok.for_each_page(|_, _| {}).unwrap(), 2);
        for records in [[record(1), record(1)], [record(3), record(1)]] {
            let loaded = parse(with_memory(&records.concat()), path).unwrap();
            let e = loaded.for_each_page(|_, _| {}).unwrap_err().to_string();
            assert!(e.ends_with("comes after page 1") || e.ends_with("comes after page 3"), "{e}");
        }
    }

    /// What the `snapshot` fuzz target does: each input as it is and with
    /// its checksum appended (corpus files are snapshots without theirs).
    #[test]
    fn fuzz_corpus_and_regressions_parse_or_fail_cleanly() {
        let inputs = fuzz_inputs("snapshot");
        assert!(!inputs.is_empty());
        for (file, data) in inputs {
            let mut sealed = data.clone();
            sealed.extend_from_slice(&Sha256::digest(&data));
            for bytes in [data, sealed] {
                if let Ok(loaded) = parse(bytes, &file) {
                    let _ = loaded.for_each_page(|_, page| assert_eq!(page.len(), PAGE_SIZE));
                }
            }
        }
        // The seed is a whole snapshot once sealed.
        let (file, mut seed) = fuzz_inputs("snapshot").into_iter().find(|(f, _)| f.ends_with("timer-1ms")).unwrap();
        let digest = Sha256::digest(&seed);
        seed.extend_from_slice(&digest);
        let loaded = parse(seed, &file).unwrap();
        assert!(loaded.for_each_page(|_, _| {}).unwrap() > 0);
    }
}
