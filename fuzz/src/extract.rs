//! The targets that extract: `layers` (an image's layers applied to a
//! root, `hvsim_guest_image::oci::layers`) and `image` (an archive or
//! layout imported into a store, `oci::load`, then its layers applied).
//! Both work in a scratch directory of their own, beside a canary
//! directory that nothing may touch, and check what they leave behind:
//! the root holds exactly what the applier's tree says, and the store
//! holds only complete images.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hvsim_guest_image::oci::layers::{apply_image, Applier, Kind, Tree};
use hvsim_guest_image::oci::store::Store;
use hvsim_guest_image::oci::{load, Compression, Digest};

use crate::{image_text, tar_text};

/// Layers a `layers` input applies, at most.
const MAX_LAYERS: usize = 8;
const CANARY: &[u8] = b"nothing may write here";

/// Layers in [`tar_text`]'s language, separated by `---` lines, applied
/// bottom first as `hvsim` builds a root file system; if all apply, the
/// root must mirror the tree.
pub fn layers(data: &[u8]) {
    let _ = apply_layers(data);
}

/// What [`layers`] does: the paths of the root it built, or why it did not.
fn apply_layers(data: &[u8]) -> Result<Vec<String>, String> {
    let scratch = Scratch::new();
    let root = scratch.dir("root");
    let mut applier = Applier::new(&root).expect("an empty root");
    let mut outcome = Ok(());
    for (i, text) in split_lines(data, b"---").into_iter().take(MAX_LAYERS).enumerate() {
        let tar = tar_text::build(text);
        let (_, reader) = Compression::open(Cursor::new(tar.bytes)).expect("reading from memory");
        outcome = applier.layer(&format!("layer {}", i + 1), reader).map_err(|e| e.to_string());
        if outcome.is_err() {
            break;
        }
    }
    let paths = outcome.and_then(|()| applier.finish().map_err(|e| e.to_string())).map(|a| {
        check_mirror(&root, &a.tree);
        a.tree.nodes.into_keys().collect()
    });
    scratch.check_outside(&["root"]);
    paths
}

/// An image source in [`image_text`]'s language, imported into an empty
/// store; every image imported must be whole (its blobs there, hashing to
/// their names) and its layers, if they apply, must give a root that
/// mirrors the tree. Whatever happens, nothing stays half-imported.
pub fn image(data: &[u8]) {
    let _ = import(data);
}

/// What [`image`] does: the tags of the images imported, or why none was.
fn import(data: &[u8]) -> Result<Vec<String>, String> {
    let scratch = Scratch::new();
    let source = image_text::parse(data);
    let path = if source.dir { write_layout(&scratch, &source) } else { write_archive(&scratch, &source) };
    let store = Store::at(scratch.path("store")).expect("a store in scratch space");
    scratch.dir("roots");
    let loaded = load::load(&store, &path, None).map_err(|e| e.to_string());
    for (i, l) in loaded.iter().flatten().enumerate() {
        let r = &l.record;
        for d in r.layers.iter().map(|l| &l.blob).chain([&r.id]) {
            let bytes = std::fs::read(store.blob_path(d)).unwrap_or_else(|e| panic!("blob {d}: {e}"));
            assert_eq!(&Digest::of(&bytes), d, "a stored blob hashes to its name");
        }
        assert_eq!(store.resolve(&r.id.to_string()).expect("an imported image resolves").id, r.id);
        let root = scratch.dir(&format!("roots/{i}"));
        if let Ok(a) = apply_image(&store, r, &root) {
            check_mirror(&root, &a.tree);
        }
    }
    let stored: Vec<(String, Vec<String>)> = store
        .images()
        .expect("the store lists")
        .into_iter()
        .map(|(r, _)| (r.id.hex().to_owned(), r.layers.iter().map(|l| l.blob.hex().to_owned()).collect()))
        .collect();
    for blob in names(&scratch.path("store/blobs/sha256")) {
        assert!(
            stored.iter().any(|(id, layers)| *id == blob || layers.contains(&blob)),
            "blob {blob} belongs to no image: a half-finished import"
        );
    }
    assert!(names(&scratch.path("store/tmp")).is_empty(), "an import left scratch files behind");
    scratch.check_outside(&["roots", "source", "source.tar", "store"]);
    let loaded = loaded?;
    assert!(!loaded.is_empty(), "an import that succeeds imports something");
    Ok(loaded.into_iter().flat_map(|l| l.tags).collect())
}

/// The source's files as an archive.
fn write_archive(scratch: &Scratch, source: &image_text::Source) -> PathBuf {
    let mut out = Vec::new();
    for f in &source.files {
        match &f.link {
            Some(target) => tar_text::append_symlink(&mut out, &f.name, target),
            None => tar_text::append_file(&mut out, &f.name, &f.bytes),
        }
    }
    let tar = tar_text::finish(out, source.gzip.then_some(&b"gzip"[..]));
    let path = scratch.path("source.tar");
    std::fs::write(&path, tar.bytes).expect("writing scratch space");
    path
}

/// The source's files as a layout directory (names that would leave it,
/// and links, are left out: a directory is the user's own).
fn write_layout(scratch: &Scratch, source: &image_text::Source) -> PathBuf {
    let root = scratch.dir("source");
    for f in source.files.iter().filter(|f| f.link.is_none()) {
        let Ok(name) = std::str::from_utf8(&f.name) else { continue };
        if name.split('/').any(|c| matches!(c, "" | "." | "..")) {
            continue;
        }
        let path = root.join(name);
        let _ = std::fs::create_dir_all(path.parent().expect("under the root"));
        let _ = std::fs::write(&path, &f.bytes);
    }
    root
}

/// Checks that `root` holds exactly the paths of `tree`, each of its kind,
/// symbolic links with their targets, directories and files with their
/// permission bits.
fn check_mirror(root: &Path, tree: &Tree) {
    let mut disk = BTreeMap::new();
    walk(root, "", &mut disk);
    let want: BTreeMap<String, (Kind, Option<u32>)> = tree
        .nodes
        .iter()
        .filter(|(rel, _)| !rel.is_empty())
        .map(|(rel, n)| {
            let mode = matches!(n.kind, Kind::Dir | Kind::File).then_some(n.mode & 0o777);
            (rel.clone(), (n.kind.clone(), mode))
        })
        .collect();
    assert_eq!(disk, want, "the root on disk and the applier's tree differ");
}

fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, (Kind, Option<u32>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("reading the root").map(|e| e.expect("an entry")).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().into_string().expect("the applier writes UTF-8 names");
        let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let meta = std::fs::symlink_metadata(e.path()).expect("an entry's metadata");
        let t = meta.file_type();
        let kind = if t.is_dir() {
            Kind::Dir
        } else if t.is_file() {
            Kind::File
        } else if t.is_symlink() {
            use std::os::unix::ffi::OsStrExt;
            Kind::Symlink(std::fs::read_link(e.path()).expect("a link's target").as_os_str().as_bytes().to_vec())
        } else if t.is_fifo() {
            Kind::Fifo
        } else {
            panic!("{rel}: a kind of file the applier never makes")
        };
        let mode = matches!(kind, Kind::Dir | Kind::File).then_some(meta.mode() & 0o777);
        if kind == Kind::Dir {
            // Readable whatever its mode, for a fuzzer that is not root.
            std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(0o700)).expect("opening a directory");
            walk(&e.path(), &rel, out);
        }
        out.insert(rel, (kind, mode));
    }
}

/// Lines of `data` grouped between `separator` lines.
fn split_lines<'a>(data: &'a [u8], separator: &[u8]) -> Vec<&'a [u8]> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in data.split(|&b| b == b'\n') {
        if line == separator {
            parts.push(&data[start..at]);
            start = at + line.len() + 1;
        }
        at += line.len() + 1;
    }
    parts.push(&data[start.min(data.len())..]);
    parts
}

fn names(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("an entry").file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// A directory of the input's own (under `TMPDIR`), with a canary beside
/// whatever the code under test is given.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new().prefix("hvsim-fuzz-").tempdir().expect("a scratch directory");
        std::fs::create_dir(dir.path().join("canary")).expect("the canary directory");
        std::fs::write(dir.path().join("canary/file"), CANARY).expect("the canary");
        Scratch { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn dir(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::create_dir(&p).expect("a scratch directory");
        p
    }

    /// Nothing but `allowed` appeared beside the canary, and the canary is
    /// as it was.
    fn check_outside(&self, allowed: &[&str]) {
        for name in names(self.dir.path()) {
            assert!(name == "canary" || allowed.contains(&name.as_str()), "{name:?} was written outside");
        }
        assert_eq!(names(&self.path("canary")), ["file"], "the canary directory changed");
        assert_eq!(std::fs::read(self.path("canary/file")).expect("the canary"), CANARY, "the canary changed");
    }
}

impl Drop for Scratch {
    /// Directories an image made unreadable are opened up, so the scratch
    /// directory can go (a fuzzer that is not root would fill TMPDIR).
    fn drop(&mut self) {
        fn open_up(dir: &Path) {
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    open_up(&e.path());
                }
            }
        }
        open_up(self.dir.path());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    include!("../inputs.rs");

    fn seed(target: &str, name: &str) -> Vec<u8> {
        let inputs = fuzz_inputs(target);
        inputs.into_iter().find(|(f, _)| f.ends_with(name)).unwrap_or_else(|| panic!("no seed {target}/{name}")).1
    }

    /// The image seeds are images hvsim imports, in each format
    /// (`docker-legacy-small` is docs/fuzzing.md's example).
    #[test]
    fn the_image_seeds_import() {
        for (name, tag) in [
            ("docker-legacy", "fuzz/app:1"),
            ("docker-legacy-small", "fuzz/app:1"),
            ("docker-legacy-linked-layer", "fuzz/twice:latest"),
            ("oci-archive", "fuzz/oci:1"),
            ("oci-layout-dir-multiplatform", "docker.io/fuzz/multi:2"),
        ] {
            assert_eq!(import(&seed("image", name)), Ok(vec![tag.to_owned()]), "{name}");
        }
    }

    /// A mutated layer keeps every reference to it right: the import gets
    /// as far as the layer's own contents.
    #[test]
    fn a_mutated_layer_still_imports() {
        let text = String::from_utf8(seed("image", "oci-archive")).unwrap();
        let mutated = text.replace("f opt/app/conf 644 a=2", "f opt/app/conf 600 a=3\nb=4");
        assert_ne!(mutated, text);
        assert_eq!(import(mutated.as_bytes()), Ok(vec!["fuzz/oci:1".to_owned()]));
        let broken = text.replace("\"@diff:5@\"", "\"@diff:4@\"");
        let err = import(broken.as_bytes()).unwrap_err();
        assert!(err.contains("digest mismatch"), "{err}");
    }

    /// The layer seeds: a root built over three layers, and each way out
    /// of the root refused.
    #[test]
    fn the_layer_seeds_apply_or_are_refused() {
        let paths = apply_layers(&seed("layers", "three-layers")).unwrap();
        for p in ["usr/bin/tool2", "usr/bin/alias/inside", "var/fresh", "etc/deep/er/file"] {
            assert!(paths.iter().any(|x| x == p), "{p} in {paths:?}");
        }
        for p in ["run.fifo", "etc/passwd", "var/data", "dev.null"] {
            assert!(!paths.iter().any(|x| x == p), "{p} in {paths:?}");
        }
        for (name, why) in [
            ("escapes", "through the symbolic link"),
            ("dotdot", "\"..\""),
            ("absolute", "absolute"),
            ("link-out", "not a regular file of the image"),
            ("replace-kinds", "through the symbolic link"),
        ] {
            let err = apply_layers(&seed("layers", name)).unwrap_err();
            assert!(err.contains(why), "{name}: {err}");
        }
    }
}
