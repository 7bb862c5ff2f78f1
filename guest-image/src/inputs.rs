//! The host files a target reads at every start: files copied into the
//! guest (`--guest-file`), the nodes' disk image (`--disk-image`) and the
//! sources of containers' bind mounts. Each is pinned in the target by the
//! SHA-256 of its contents, and a start refuses one that changed.
//!
//! So that a bug record replays from any directory, and after the files
//! are edited or gone, an exploration keeps a copy of each in a store of
//! its own, named by that hash ([`save`]); a replay points the target at
//! the copies it finds there ([`relocate`]) and at the original paths,
//! made absolute when the target was described ([`absolutize`]),
//! otherwise. (The fault plan's text is in the target itself; container
//! images are in the image store, by digest.)

use std::path::{Path, PathBuf};

use crate::container::{bind_contents, Mount};
use crate::error::{io, ImageError, Result};
use crate::hash::file_hash;
use crate::target::Target;

/// One host input of a target: where it is, what its contents hash to,
/// and whether it is a tree (a bind mount's source, hashed as one).
struct Input<'a> {
    path: &'a mut PathBuf,
    sha256: &'a str,
    tree: bool,
}

fn inputs(target: &mut Target) -> Vec<Input<'_>> {
    let Target::Linux { files, system, .. } = target else {
        return Vec::new();
    };
    let mut all = Vec::new();
    for (f, sha256) in files.iter_mut() {
        all.push(Input { path: &mut f.host, sha256, tree: false });
    }
    if let Some((path, sha256)) = &mut system.disk_image {
        all.push(Input { path, sha256, tree: false });
    }
    for c in &mut system.containers {
        for m in &mut c.mounts {
            if let Mount::Bind { host, sha256, .. } = m {
                all.push(Input { path: host, sha256, tree: true });
            }
        }
    }
    all
}

/// The hash of `path`'s contents, as the target pins it.
fn hash(path: &Path, tree: bool) -> Result<String> {
    if tree {
        Ok(bind_contents(path, "")?.0)
    } else {
        file_hash(path)
    }
}

/// Makes every host input's path absolute (against the current
/// directory), so that the target names the same files from anywhere.
pub fn absolutize(target: &mut Target) -> Result<()> {
    for input in inputs(target) {
        *input.path = std::path::absolute(&*input.path).map_err(io("finding a file of the run", input.path.clone()))?;
    }
    Ok(())
}

/// Copies every host input of `target` into `store` (created if need be)
/// as `store/<sha256>`, unless a copy is there already; each copy is
/// checked against the hash the target pins.
pub fn save(target: &Target, store: &Path) -> Result<()> {
    let mut target = target.clone();
    for input in inputs(&mut target) {
        let dest = store.join(input.sha256);
        if dest.exists() {
            continue;
        }
        std::fs::create_dir_all(store).map_err(io("creating the store of a run's files", store))?;
        let tmp = store.join(format!(".{}.partial", input.sha256));
        let _ = std::fs::remove_dir_all(&tmp).or_else(|_| std::fs::remove_file(&tmp));
        copy(input.path, &tmp).map_err(io("copying a file of the run", input.path.clone()))?;
        if hash(&tmp, input.tree)? != input.sha256 {
            return Err(ImageError::Setup(format!(
                "{} changed since it was recorded (its SHA-256 differs)",
                input.path.display()
            )));
        }
        std::fs::rename(&tmp, &dest).map_err(io("storing a file of the run", &dest))?;
    }
    Ok(())
}

/// Points each host input of `target` at its copy in `store`, where there
/// is one; returns how many were.
pub fn relocate(target: &mut Target, store: &Path) -> usize {
    let mut moved = 0;
    for input in inputs(target) {
        let copy = store.join(input.sha256);
        if copy.exists() {
            *input.path = copy;
            moved += 1;
        }
    }
    moved
}

/// Copies into `to` each kept input of the store `from` (a shard's) that
/// `to` lacks: files and bind mounts' trees alike, named by their hash
/// (so shards of one exploration hold the same ones). A store holds no
/// links (`save` copies what they point at): one found, at any depth, is
/// refused, never followed (it could name any file of the host).
pub fn copy_missing(from: &Path, to: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(from) else { return Ok(()) };
    std::fs::create_dir_all(to).map_err(io("creating the store of a run's files", to))?;
    for entry in entries {
        let entry = entry.map_err(io("reading the store of a run's files", from))?;
        let name = entry.file_name();
        let is_input = name.to_str().is_some_and(|n| n.len() == 64 && n.bytes().all(|b| b.is_ascii_hexdigit()));
        let kind = entry.file_type().map_err(io("reading the store of a run's files", entry.path()))?;
        let dest = to.join(&name);
        if !is_input || dest.exists() {
            continue;
        }
        if kind.is_symlink() {
            return Err(link(&entry.path()));
        }
        let tmp = to.join(format!(".{}.partial", name.to_string_lossy()));
        let _ = std::fs::remove_dir_all(&tmp).or_else(|_| std::fs::remove_file(&tmp));
        let copied = copy_stored(&entry.path(), &tmp);
        if copied.is_err() {
            let _ = std::fs::remove_dir_all(&tmp).or_else(|_| std::fs::remove_file(&tmp));
        }
        copied?;
        std::fs::rename(&tmp, &dest).map_err(io("storing a file of the run", &dest))?;
    }
    Ok(())
}

/// A kept input's file or tree, copied; a symbolic link in it refused.
fn copy_stored(from: &Path, to: &Path) -> Result<()> {
    let kind = std::fs::symlink_metadata(from).map_err(io("reading a file of the run", from))?.file_type();
    if kind.is_symlink() {
        return Err(link(from));
    }
    if kind.is_dir() {
        std::fs::create_dir(to).map_err(io("storing a file of the run", to))?;
        for entry in std::fs::read_dir(from).map_err(io("reading a file of the run", from))? {
            let entry = entry.map_err(io("reading a file of the run", from))?;
            copy_stored(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    std::fs::copy(from, to).map(|_| ()).map_err(io("copying a file of the run", from))
}

fn link(at: &Path) -> ImageError {
    ImageError::Setup(format!(
        "{}: a symbolic link in a run's kept files, which hold none: refused (it could name any file of this host)",
        at.display()
    ))
}

/// Copies a file, or a tree following symbolic links as a bind mount's
/// contents do (`container::bind_contents` keeps them inside it), keeping
/// permissions.
fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
    if std::fs::metadata(from)?.is_dir() {
        std::fs::create_dir(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::GuestFile;
    use crate::target::System;

    fn target_with(file: &Path) -> Target {
        Target::Linux {
            command: "true".into(),
            mem: 1 << 27,
            files: vec![(GuestFile { host: file.to_owned(), guest: "/f".into() }, file_hash(file).unwrap())],
            system: System::default(),
            verbose_boot: false,
        }
    }

    /// A shard's kept files and trees reach the merged exploration's store;
    /// what is already there, and anything not named by a hash, is left.
    #[test]
    fn copy_missing_brings_files_and_trees() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        let (file, tree) = ("a".repeat(64), "b".repeat(64));
        std::fs::create_dir_all(from.join(&tree).join("sub")).unwrap();
        std::fs::write(from.join(&tree).join("sub/x"), "x").unwrap();
        std::fs::write(from.join(&file), "f").unwrap();
        std::fs::write(from.join("notes"), "n").unwrap();
        copy_missing(&from, &to).unwrap();
        assert_eq!(std::fs::read_to_string(to.join(&tree).join("sub/x")).unwrap(), "x");
        assert_eq!(std::fs::read_to_string(to.join(&file)).unwrap(), "f");
        assert!(!to.join("notes").exists());
        std::fs::write(from.join(&file), "changed").unwrap();
        copy_missing(&from, &to).unwrap();
        assert_eq!(std::fs::read_to_string(to.join(&file)).unwrap(), "f", "a copy there stays");
        // A link at any depth of a shard's store is refused, never followed.
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "host file").unwrap();
        let deep = "c".repeat(64);
        std::fs::create_dir_all(from.join(&deep).join("sub")).unwrap();
        std::os::unix::fs::symlink(&secret, from.join(&deep).join("sub/link")).unwrap();
        let err = copy_missing(&from, &to).unwrap_err().to_string();
        assert!(err.contains("sub/link: a symbolic link in a run's kept files"), "{err}");
        assert!(!to.join(&deep).exists() && !to.join(format!(".{deep}.partial")).exists());
        std::fs::remove_dir_all(from.join(&deep)).unwrap();
        std::os::unix::fs::symlink(&secret, from.join("d".repeat(64))).unwrap();
        assert!(copy_missing(&from, &to).unwrap_err().to_string().contains("a symbolic link"));
    }

    #[test]
    fn saved_inputs_replace_the_originals_once_those_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("workload.sh");
        std::fs::write(&file, "echo hi\n").unwrap();
        let target = target_with(&file);
        let store = dir.path().join("run/inputs");
        save(&target, &store).unwrap();
        save(&target, &store).unwrap();
        std::fs::remove_file(&file).unwrap();
        let mut moved = target.clone();
        assert_eq!(relocate(&mut moved, &store), 1);
        let Target::Linux { files, .. } = &moved else { unreachable!() };
        assert_eq!(std::fs::read_to_string(&files[0].0.host).unwrap(), "echo hi\n");
        assert_eq!(files[0].1, file_hash(&files[0].0.host).unwrap(), "the copy is what was pinned");
        let mut elsewhere = target.clone();
        assert_eq!(relocate(&mut elsewhere, &dir.path().join("nothing")), 0);
        assert_eq!(elsewhere, target);
    }

    #[test]
    fn a_changed_input_is_not_saved_and_paths_become_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("workload.sh");
        std::fs::write(&file, "one").unwrap();
        let target = target_with(&file);
        std::fs::write(&file, "two").unwrap();
        let e = save(&target, &dir.path().join("inputs")).unwrap_err().to_string();
        assert!(e.contains("changed since it was recorded"), "{e}");
        let mut relative = target_with(Path::new("Cargo.toml"));
        absolutize(&mut relative).unwrap();
        let Target::Linux { files, .. } = &relative else { unreachable!() };
        assert_eq!(files[0].0.host, std::env::current_dir().unwrap().join("Cargo.toml"));
    }
}
