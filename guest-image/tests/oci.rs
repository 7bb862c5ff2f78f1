//! Container images: every format `load` reads, every layer feature, and
//! every malicious archive the importer and the layer applier must refuse.
//! No KVM: these run anywhere.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use hvsim_guest_image::oci::layers::{apply_image, Kind};
use hvsim_guest_image::oci::load::load;
use hvsim_guest_image::oci::pack::{Format, Pack, PackLayer, RunConfig};
use hvsim_guest_image::oci::store::Store;
use hvsim_guest_image::oci::{rootfs, Compression, Digest};
use tar::EntryType;

/// Builds layer tars entry by entry, writing names raw so that malicious
/// names (which the tar crate's setters refuse) can be made.
struct Tar(tar::Builder<Vec<u8>>);

const MTIME: u64 = 1_700_000_000;

impl Tar {
    fn new() -> Tar {
        Tar(tar::Builder::new(Vec::new()))
    }

    fn entry(mut self, kind: EntryType, name: &str, link: &str, mode: u32, uid: u64, data: &[u8]) -> Tar {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(uid);
        h.set_gid(uid);
        h.set_mtime(MTIME);
        h.set_size(data.len() as u64);
        let bytes = h.as_mut_bytes();
        bytes[..100].fill(0);
        bytes[..name.len()].copy_from_slice(name.as_bytes());
        bytes[157..257].fill(0);
        bytes[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h.set_cksum();
        self.0.append(&h, data).unwrap();
        self
    }

    fn dir(self, name: &str) -> Tar {
        self.entry(EntryType::Directory, name, "", 0o755, 0, b"")
    }

    fn file(self, name: &str, data: &[u8]) -> Tar {
        self.entry(EntryType::Regular, name, "", 0o644, 0, data)
    }

    fn symlink(self, name: &str, target: &str) -> Tar {
        self.entry(EntryType::Symlink, name, target, 0o777, 0, b"")
    }

    fn hardlink(self, name: &str, target: &str) -> Tar {
        self.entry(EntryType::Link, name, target, 0o644, 0, b"")
    }

    fn done(self) -> Vec<u8> {
        self.0.into_inner().unwrap()
    }
}

fn run_config() -> RunConfig {
    RunConfig {
        entrypoint: Some(vec!["/bin/app".into()]),
        cmd: Some(vec!["--port".into(), "6379".into()]),
        env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".into(), "MODE=test".into()],
        working_dir: Some("/data".into()),
        user: Some("app:app".into()),
        exposed_ports: vec!["6379/tcp".into()],
    }
}

fn pack(layers: &[Vec<u8>], compression: Compression, name: &str) -> Pack {
    Pack::new(&run_config(), layers.iter().map(|t| PackLayer::new(t, compression)).collect(), Some(name))
}

fn store(dir: &Path) -> Store {
    Store::at(dir.join("store")).unwrap()
}

/// Loads `pack` written in `format` into a fresh store; applies it to a
/// fresh directory.
fn load_and_apply(
    pack: &Pack,
    format: Format,
) -> (tempfile::TempDir, hvsim_guest_image::Result<hvsim_guest_image::oci::layers::Applied>) {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let src = tmp.path().join("image");
    pack.write(format, &src).unwrap();
    let loaded = load(&s, &src, None).unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let applied = apply_image(&s, &loaded[0].record, &root);
    (tmp, applied)
}

fn base_layer() -> Vec<u8> {
    Tar::new()
        .dir("./")
        .dir("bin/")
        .entry(EntryType::Regular, "bin/app", "", 0o4755, 0, b"#!/bin/sh\necho app\n")
        .dir("data/")
        .entry(EntryType::Directory, "home/app", "", 0o750, 1000, b"")
        .entry(EntryType::Regular, "home/app/.profile", "", 0o600, 1000, b"export A=1\n")
        .file("etc/gone", b"deleted by the next layer")
        .dir("etc/opaque")
        .file("etc/opaque/old", b"hidden by the next layer")
        .dir("etc/opaque/olddir")
        .file("etc/opaque/olddir/deep", b"hidden too")
        .file("etc/replaced", b"version 1")
        .symlink("etc/link", "/bin/app")
        .hardlink("bin/app2", "bin/app")
        .entry(EntryType::Fifo, "run/fifo", "", 0o644, 0, b"")
        .entry(EntryType::Char, "dev/null", "", 0o666, 0, b"")
        .entry(EntryType::Block, "dev/sda", "", 0o660, 0, b"")
        .done()
}

fn top_layer() -> Vec<u8> {
    Tar::new()
        .file("etc/.wh.gone", b"")
        .file("etc/opaque/new", b"added with the opaque marker")
        .file("etc/opaque/.wh..wh..opq", b"")
        .file("etc/replaced", b"version 2")
        .done()
}

#[test]
fn every_format_and_compression_loads_the_same_image() {
    let layers = [base_layer(), top_layer()];
    let cases = [
        (Format::DockerLegacy, Compression::None),
        (Format::DockerOci, Compression::None),
        (Format::OciDir, Compression::Gzip),
        (Format::OciDir, Compression::Zstd),
        (Format::OciArchive, Compression::Gzip),
        (Format::OciArchive, Compression::None),
    ];
    let mut ids = Vec::new();
    for (format, compression) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path());
        let p = pack(&layers, compression, "example/app:1.0");
        let src = tmp.path().join("image");
        p.write(format, &src).unwrap();
        let loaded = load(&s, &src, None).unwrap();
        assert_eq!(loaded.len(), 1, "{format:?}");
        let r = &loaded[0].record;
        assert_eq!(loaded[0].tags, vec!["example/app:1.0".to_owned()], "{format:?}");
        assert_eq!(r.layers.len(), 2);
        assert!(r.layers.iter().all(|l| l.compression == compression), "{format:?}");
        assert_eq!(r.layers[0].diff_id, Digest::of(&layers[0]));
        assert_eq!(r.layers[1].unpacked, layers[1].len() as u64);
        let again = s.resolve("example/app:1.0").unwrap();
        assert_eq!(&again, r);
        let config = s.config(r).unwrap();
        let c = config.config().as_ref().unwrap();
        assert_eq!(c.entrypoint().as_deref(), Some(&["/bin/app".to_owned()][..]));
        assert_eq!(c.working_dir().as_deref(), Some("/data"));
        assert_eq!(c.user().as_deref(), Some("app:app"));
        assert_eq!(c.exposed_ports().as_deref(), Some(&["6379/tcp".to_owned()][..]));
        ids.push(r.id.clone());
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one config, one id: {ids:?}");
}

#[test]
fn layers_apply_exactly() {
    let p = pack(&[base_layer(), top_layer()], Compression::Gzip, "app");
    let (tmp, applied) = load_and_apply(&p, Format::OciDir);
    let applied = applied.unwrap();
    let root = tmp.path().join("root");
    let meta = |p: &str| std::fs::symlink_metadata(root.join(p)).unwrap();
    // Whiteout and opaque directory.
    assert!(!root.join("etc/gone").exists());
    assert!(!applied.tree.nodes.contains_key("etc/gone"));
    let mut opaque: Vec<String> = std::fs::read_dir(root.join("etc/opaque"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    opaque.sort();
    assert_eq!(opaque, ["new"]);
    assert!(!applied.tree.nodes.contains_key("etc/opaque/olddir/deep"));
    assert_eq!(std::fs::read(root.join("etc/replaced")).unwrap(), b"version 2");
    // Modes (setuid kept), hardlinks, symlinks, fifos, devices skipped.
    assert_eq!(meta("bin/app").permissions().mode() & 0o7777, 0o4755);
    assert_eq!(meta("bin/app").ino(), meta("bin/app2").ino());
    assert_eq!(applied.hardlinks, 1);
    assert_eq!(std::fs::read_link(root.join("etc/link")).unwrap(), Path::new("/bin/app"));
    assert!(meta("run/fifo").file_type().is_fifo_like());
    assert_eq!(applied.devices_skipped, 2);
    assert!(!root.join("dev/null").exists());
    // Times on disk; owners in the tree (applied to the file system image).
    assert_eq!(meta("home/app/.profile").mtime() as u64, MTIME);
    assert_eq!(meta("home/app").permissions().mode() & 0o7777, 0o750);
    let home = &applied.tree.nodes["home/app"];
    assert_eq!((home.uid, home.gid, home.kind.clone()), (1000, 1000, Kind::Dir));
    assert_eq!(applied.tree.nodes["bin/app2"].mode, 0o4755);
}

trait FifoLike {
    fn is_fifo_like(&self) -> bool;
}
impl FifoLike for std::fs::FileType {
    fn is_fifo_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_fifo(self)
    }
}

/// Applies a malicious image; it must fail with `expect` in the message,
/// and nothing may appear outside the root.
fn refused(layers: &[Vec<u8>], expect: &str) {
    let p = pack(layers, Compression::None, "evil");
    let (tmp, applied) = load_and_apply(&p, Format::OciArchive);
    let err = applied.expect_err("a malicious image was applied").to_string();
    assert!(err.contains(expect), "{err:?} should say {expect:?}");
    assert!(!err.contains('\n'), "one line: {err:?}");
    let mut outside: Vec<String> =
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    outside.sort();
    assert_eq!(outside, ["image", "root", "store"], "nothing written beside the root");
    assert!(!Path::new("/tmp/hvsim-evil").exists());
}

#[test]
fn traversal_and_absolute_paths_are_refused() {
    refused(&[Tar::new().file("../evil", b"x").done()], "entry \"../evil\": a path with \"..\"");
    refused(&[Tar::new().file("a/../../evil", b"x").done()], "a path with \"..\"");
    refused(&[Tar::new().file("/tmp/hvsim-evil", b"x").done()], "entry \"/tmp/hvsim-evil\": an absolute path");
}

#[test]
fn writes_through_symlinks_are_refused() {
    // Planted by an earlier layer...
    let plant = Tar::new().symlink("escape", "../../..").done();
    let write = Tar::new().file("escape/evil", b"x").done();
    refused(&[plant, write], "layer 2");
    // ... or earlier in the same layer, and absolute.
    let same = Tar::new().symlink("tmp", "/tmp").file("tmp/hvsim-evil", b"x").done();
    refused(&[same], "it would write through the symbolic link \"tmp\"");
    // A directory entry through a link is refused too.
    let dir = Tar::new().symlink("d", "/").dir("d/etc/").done();
    refused(&[dir], "symbolic link \"d\"");
}

#[test]
fn hardlink_escapes_are_refused() {
    refused(&[Tar::new().hardlink("passwd", "../../etc/passwd").done()], "its hardlink target: a path with \"..\"");
    refused(&[Tar::new().hardlink("passwd", "/etc/passwd").done()], "its hardlink target: an absolute path");
    // A hardlink to a symlink would link the host file it points to.
    let via_link = Tar::new().symlink("l", "/etc/passwd").hardlink("passwd", "l").done();
    refused(&[via_link], "not a regular file of the image");
    refused(&[Tar::new().hardlink("x", "missing").done()], "not a regular file of the image");
}

/// Owners and times a file system cannot store are refused, not wrapped.
#[test]
fn owners_and_times_beyond_ext4_are_refused() {
    refused(&[Tar::new().entry(EntryType::Regular, "big-uid", "", 0o644, 1 << 32, b"").done()], "beyond the 32 bits");
    let mut h = tar::Header::new_gnu();
    h.set_path("future").unwrap();
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1 << 40);
    h.set_size(0);
    h.set_cksum();
    let mut late = h.as_bytes().to_vec();
    late.extend_from_slice(&[0; 1024]);
    refused(&[late], "after 2446");
    // The largest owner a file system stores is taken.
    let ok = Tar::new().entry(EntryType::Regular, "max-uid", "", 0o644, u64::from(u32::MAX), b"").done();
    let p = pack(&[ok], Compression::None, "max");
    let (_tmp, applied) = load_and_apply(&p, Format::OciDir);
    assert_eq!(applied.unwrap().tree.nodes["max-uid"].uid, u64::from(u32::MAX));
}

#[test]
fn a_huge_declared_size_is_refused_without_allocating_it() {
    let mut h = tar::Header::new_gnu();
    h.set_path("big").unwrap();
    h.set_size(1 << 40);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_entry_type(EntryType::Regular);
    h.set_cksum();
    let mut t = h.as_bytes().to_vec();
    t.extend_from_slice(&[7u8; 512]);
    t.extend_from_slice(&[0u8; 1024]);
    refused(&[t], "entry \"big\": truncated");
}

#[test]
fn a_truncated_gzip_stream_is_refused_at_load() {
    let tar = base_layer();
    let mut layer = PackLayer::new(&tar, Compression::Gzip);
    layer.blob.truncate(layer.blob.len() / 2);
    let p = Pack::new(&run_config(), vec![layer], Some("cut"));
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    p.write(Format::OciDir, &tmp.path().join("image")).unwrap();
    let err = load(&s, &tmp.path().join("image"), None).unwrap_err().to_string();
    assert!(err.contains("cannot decompress (Gzip)"), "{err}");
    assert!(s.images().unwrap().is_empty(), "nothing entered the store");
}

#[test]
fn digest_mismatches_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    // A blob of an OCI layout changed after it was written.
    let p = pack(&[base_layer()], Compression::Gzip, "tampered");
    let dir = tmp.path().join("oci");
    p.write(Format::OciDir, &dir).unwrap();
    let blob = dir.join("blobs/sha256").join(Digest::of(&p.layers[0].blob).hex());
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    let err = load(&s, &dir, None).unwrap_err().to_string();
    assert!(err.contains("digest mismatch"), "{err}");
    // A legacy archive whose layer differs from the config's diff_id.
    let mut wrong = pack(&[base_layer()], Compression::None, "tampered");
    wrong.layers[0].blob = top_layer();
    let archive = tmp.path().join("legacy.tar");
    wrong.write(Format::DockerLegacy, &archive).unwrap();
    let err = load(&s, &archive, None).unwrap_err().to_string();
    assert!(err.contains("digest mismatch: its tar hashes to"), "{err}");
    assert!(s.images().unwrap().is_empty());
}

#[test]
fn multi_platform_indexes_pick_linux_amd64() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let amd = pack(&[base_layer()], Compression::Gzip, "multi");
    let dir = tmp.path().join("oci");
    // Lay out the amd64 image, then wrap its manifest in a nested index
    // beside an arm64 one that is not there (it must not be fetched).
    amd.write(Format::OciDir, &dir).unwrap();
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let mut amd_desc = index["manifests"][0].clone();
    amd_desc["platform"] = serde_json::json!({"os": "linux", "architecture": "amd64"});
    let mut arm_desc = amd_desc.clone();
    arm_desc["platform"] = serde_json::json!({"os": "linux", "architecture": "arm64"});
    arm_desc["digest"] = serde_json::json!(Digest::of(b"not here").to_string());
    let write_nested = |manifests: Vec<serde_json::Value>| {
        let nested = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests,
        }))
        .unwrap();
        let d = Digest::of(&nested);
        std::fs::write(dir.join("blobs/sha256").join(d.hex()), &nested).unwrap();
        let top = serde_json::json!({ "schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json", "digest": d.to_string(), "size": nested.len(),
            "annotations": { "io.containerd.image.name": "multi:2" },
        }]});
        std::fs::write(dir.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    };
    write_nested(vec![arm_desc.clone(), amd_desc]);
    let loaded = load(&s, &dir, None).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].record.id, amd.config_digest());
    assert_eq!(loaded[0].tags, ["multi:2"]);
    write_nested(vec![arm_desc]);
    let err = load(&s, &dir, None).unwrap_err().to_string();
    assert!(err.contains("no linux/amd64 image (it has linux/arm64)"), "{err}");
}

#[test]
fn the_store_keeps_each_blob_once_and_collects_garbage() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let base = base_layer();
    let a = pack(std::slice::from_ref(&base), Compression::None, "a");
    let b = pack(&[base, top_layer()], Compression::None, "b");
    for (p, name) in [(&a, "a.tar"), (&b, "b.tar")] {
        p.write(Format::DockerLegacy, &tmp.path().join(name)).unwrap();
        load(&s, &tmp.path().join(name), None).unwrap();
    }
    let blobs = || std::fs::read_dir(s.dir().join("blobs/sha256")).unwrap().count();
    assert_eq!(blobs(), 4, "two configs, and the shared base layer stored once");
    // Tagging again and loading again change nothing but the tag.
    load(&s, &tmp.path().join("a.tar"), Some("again")).unwrap();
    assert_eq!(blobs(), 4);
    let listed = s.images().unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].1, ["a:latest", "again:latest"]);
    // Removing one of two tags keeps the image; the last tag removes it.
    let r = s.remove("again").unwrap();
    assert_eq!((r.untagged.len(), r.deleted.is_some()), (1, false));
    let r = s.remove("a").unwrap();
    assert_eq!(r.deleted, Some(a.config_digest()));
    assert_eq!(blobs(), 3, "a's config went; the base layer is b's too");
    // By id (a unique prefix).
    let id = b.config_digest();
    s.remove(&id.hex()[..8]).unwrap();
    assert_eq!(blobs(), 0);
    assert!(s.images().unwrap().is_empty());
    assert!(s.resolve("b").unwrap_err().to_string().contains("no image \"b\""));
}

#[test]
fn archives_that_are_not_images_get_one_line_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let junk = tmp.path().join("junk.tar");
    std::fs::write(&junk, b"this is not a tar at all, just some text").unwrap();
    let err = load(&s, &junk, None).unwrap_err().to_string();
    assert!(err.starts_with(&junk.display().to_string()), "{err}");
    assert!(!err.contains('\n'));
    let evil = tmp.path().join("evil.tar");
    hvsim_guest_image::oci::pack::write_tar(&evil, &[("manifest.json".into(), b"[]".to_vec())]).unwrap();
    assert!(load(&s, &evil, None).unwrap_err().to_string().contains("holds no image"));
}

#[test]
fn root_file_systems_are_reproducible_and_carry_owners() {
    let p = pack(&[base_layer(), top_layer()], Compression::Zstd, "app");
    let mut hashes = Vec::new();
    for i in 0..2 {
        // A second apart: a clock that leaks in would show.
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1100));
        }
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path());
        p.write(Format::OciDir, &tmp.path().join("image")).unwrap();
        let record = load(&s, &tmp.path().join("image"), None).unwrap().remove(0).record;
        let built = rootfs::build(&s, &record).unwrap();
        assert!(built.built);
        assert!(!rootfs::build(&s, &record).unwrap().built, "cached by image id");
        let stat = std::process::Command::new("debugfs")
            .args(["-R", "stat /home/app/.profile"])
            .arg(&built.path)
            .output()
            .unwrap();
        let stat = String::from_utf8_lossy(&stat.stdout);
        assert!(stat.contains("User:  1000   Group:  1000"), "{stat}");
        let ls = std::process::Command::new("debugfs").args(["-R", "ls -l /bin"]).arg(&built.path).output().unwrap();
        assert!(String::from_utf8_lossy(&ls.stdout).contains("104755"), "setuid kept");
        hashes.push(Digest::of(&std::fs::read(&built.path).unwrap()));
    }
    assert_eq!(hashes[0], hashes[1], "the same image gives the same bytes");
}

/// What a source may hold is bounded before the work it would cost:
/// entries, bytes, images and layers.
#[test]
fn sources_beyond_the_limits_are_refused_up_front() {
    use hvsim_guest_image::oci::load::{MAX_ARCHIVE_ENTRIES, MAX_IMAGES, MAX_LAYERS};
    use hvsim_guest_image::oci::pack::write_tar;
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let refused = |name: &str, files: Vec<(String, Vec<u8>)>| {
        let path = tmp.path().join(name);
        write_tar(&path, &files).unwrap();
        let err = load(&s, &path, None).unwrap_err().to_string();
        assert!(!err.contains('\n') && err.starts_with(&path.display().to_string()), "{err}");
        err
    };

    let many: Vec<(String, Vec<u8>)> = (0..=MAX_ARCHIVE_ENTRIES).map(|i| (format!("f{i}"), Vec::new())).collect();
    let err = refused("many.tar", many);
    assert!(err.contains(&format!("more than {MAX_ARCHIVE_ENTRIES} entries")), "{err}");

    let layers: Vec<String> = (0..=MAX_LAYERS).map(|_| "layer.tar".to_owned()).collect();
    let manifest = serde_json::json!([{ "Config": "c.json", "Layers": layers }]).to_string();
    let deep = vec![
        ("manifest.json".to_owned(), manifest.into_bytes()),
        ("c.json".to_owned(), b"{}".to_vec()),
        ("layer.tar".to_owned(), Tar::new().file("a", b"a").done()),
    ];
    let err = refused("deep.tar", deep);
    assert!(err.contains(&format!("an image of {} layers; hvsim takes at most {MAX_LAYERS}", MAX_LAYERS + 1)), "{err}");

    let image = serde_json::json!({ "Config": "c.json", "Layers": [] });
    let manifest = serde_json::Value::Array(vec![image; MAX_IMAGES + 1]).to_string();
    let err =
        refused("wide.tar", vec![("manifest.json".into(), manifest.into_bytes()), ("c.json".into(), b"{}".to_vec())]);
    assert!(err.contains(&format!("holds more than {MAX_IMAGES} images")), "{err}");

    // An entry that says it holds 65 GiB: refused from its header, before
    // a byte of it is copied.
    let mut h = tar::Header::new_gnu();
    h.set_path("huge").unwrap();
    h.set_size(65 << 30);
    h.set_mode(0o644);
    h.set_cksum();
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(&[0; 1024]);
    let path = tmp.path().join("huge.tar");
    std::fs::write(&path, bytes).unwrap();
    let err = load(&s, &path, None).unwrap_err().to_string();
    assert!(err.contains("holds more than 64 GiB"), "{err}");
    assert!(s.images().unwrap().is_empty(), "nothing entered the store");
}
