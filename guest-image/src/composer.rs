//! Test Composer templates (Antithesis's `/opt/antithesis/test/v1/<template>/`)
//! in a project's containers, found on the host: in each image's root file
//! system, and in bind mounts at or under the test directory (a container
//! sees both). A template of the same name in several containers is one
//! template, each command held by the containers that have it. Init runs
//! them (`guest-init/src/container/composer.rs`); this is what it is handed, as
//! `hvsim_abi::linux::COMPOSER`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::container::{Container, Mount};
use crate::error::{io, ImageError, Result};
use crate::linux::RunFile;

/// Where templates are, in a container.
pub const TEST_DIR: &str = "/opt/antithesis/test/v1";

pub use hvsim_abi::composer::Kind;

/// A command, and the nodes whose containers hold it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TestCommand {
    pub template: String,
    pub file: String,
    pub nodes: Vec<u16>,
}

impl TestCommand {
    pub fn kind(&self) -> Kind {
        Kind::of(&self.file).expect("only commands of a known kind are kept")
    }
}

/// Every template's commands, by template and file name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Composer {
    pub commands: Vec<TestCommand>,
}

impl Composer {
    /// The templates of `containers` (node `i` runs `containers[i]`), each
    /// with a root file system at `rootfs[i]`.
    pub fn discover(containers: &[Container], rootfs: &[&Path]) -> Result<Composer> {
        let mut found: BTreeMap<(String, String), Vec<u16>> = BTreeMap::new();
        for (node, c) in containers.iter().enumerate() {
            let mut files = image_templates(rootfs[node])?;
            for m in &c.mounts {
                if let Mount::Bind { host, target, .. } = m {
                    files.extend(bound_templates(host, target)?);
                }
            }
            for key in files {
                let nodes = found.entry(key).or_default();
                if !nodes.contains(&(node as u16)) {
                    nodes.push(node as u16);
                }
            }
        }
        let commands = found
            .into_iter()
            .filter(|((_, file), _)| Kind::of(file).is_some())
            .map(|((template, file), nodes)| TestCommand { template, file, nodes })
            .collect();
        Ok(Composer { commands })
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The commands a line of descent may switch off (`Kind::switchable`),
    /// as `template/file`, each with its template.
    pub fn switchable(&self) -> Vec<(&str, String)> {
        let on = self.commands.iter().filter(|c| c.kind().switchable());
        on.map(|c| (c.template.as_str(), format!("{}/{}", c.template, c.file))).collect()
    }

    /// The templates' names, in order (commands are sorted by template).
    pub fn templates(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.commands.iter().map(|c| c.template.as_str()).collect();
        names.dedup();
        names
    }

    /// Init's description of the commands (`hvsim_abi::linux::COMPOSER`).
    pub fn run_file(&self) -> RunFile {
        let mut text = String::new();
        for c in &self.commands {
            let nodes: Vec<String> = c.nodes.iter().map(u16::to_string).collect();
            text.push_str(&format!("{}\t{}\t{}\n", c.template, c.file, nodes.join(",")));
        }
        (hvsim_abi::linux::COMPOSER.to_owned(), 0o644, text.into_bytes())
    }
}

/// `(template, file)` of every executable file or link in the templates of
/// the ext4 root file system at `image`.
fn image_templates(image: &Path) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (name, mode) in debugfs_ls(image, TEST_DIR)? {
        if is_dir(mode) && !name.starts_with('.') {
            for (file, mode) in debugfs_ls(image, &format!("{TEST_DIR}/{name}"))? {
                if runnable(mode) {
                    out.push((name.clone(), file));
                }
            }
        }
    }
    Ok(out)
}

/// The entries of directory `dir` in the ext4 image, with their modes;
/// none if it is not there.
fn debugfs_ls(image: &Path, dir: &str) -> Result<Vec<(String, u32)>> {
    let o = Command::new("debugfs")
        .arg("-R")
        .arg(format!("ls -p {dir}"))
        .arg(image)
        .output()
        .map_err(io("running debugfs on a root file system", image))?;
    if !o.status.success() {
        return Err(ImageError::Setup(format!(
            "debugfs could not list {dir} in {}: {}",
            image.display(),
            String::from_utf8_lossy(&o.stderr).trim()
        )));
    }
    // `/inode/mode/uid/gid/name/size/`, one per line.
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.strip_prefix('/')?.split('/').collect();
            let mode = u32::from_str_radix(f.get(1)?, 8).ok()?;
            let name = (*f.get(4)?).to_owned();
            (name != "." && name != "..").then_some((name, mode))
        })
        .collect())
}

fn is_dir(mode: u32) -> bool {
    mode & 0o170000 == 0o040000
}

/// A regular file someone may execute, or a symbolic link (to a script
/// elsewhere in the image, as Antithesis's documentation suggests).
fn runnable(mode: u32) -> bool {
    let kind = mode & 0o170000;
    (kind == 0o100000 && mode & 0o111 != 0) || kind == 0o120000
}

/// `(template, file)` of what a bind mount of `host` at `target` puts in
/// the test directory.
fn bound_templates(host: &Path, target: &str) -> Result<Vec<(String, String)>> {
    let target = target.trim_end_matches('/');
    let mut out = Vec::new();
    let list = |dir: &Path| -> Result<Vec<(String, std::fs::Metadata)>> {
        let mut entries = Vec::new();
        for e in std::fs::read_dir(dir).map_err(io("reading a bind mount's source", dir))? {
            let e = e.map_err(io("reading a bind mount's source", dir))?;
            let meta = std::fs::metadata(e.path()).map_err(io("reading a bind mount's source", e.path()))?;
            entries.push((e.file_name().to_string_lossy().into_owned(), meta));
        }
        Ok(entries)
    };
    let executable = |m: &std::fs::Metadata| {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    };
    if target == TEST_DIR && host.is_dir() {
        for (template, meta) in list(host)? {
            if meta.is_dir() && !template.starts_with('.') {
                for (file, meta) in list(&host.join(&template))? {
                    if executable(&meta) {
                        out.push((template.clone(), file));
                    }
                }
            }
        }
    } else if let Some(template) = target.strip_prefix(&format!("{TEST_DIR}/")) {
        if template.contains('/') {
            // A single command bound in place.
            let (template, file) = template.split_once('/').expect("has a slash");
            if !file.contains('/') && std::fs::metadata(host).is_ok_and(|m| executable(&m)) {
                out.push((template.to_owned(), file.to_owned()));
            }
        } else if host.is_dir() {
            for (file, meta) in list(host)? {
                if executable(&meta) {
                    out.push((template.to_owned(), file));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_say_the_kind_and_helpers_are_never_run() {
        assert_eq!(Kind::of("first_setup.sh"), Some(Kind::First));
        assert_eq!(Kind::of("parallel_driver_write"), Some(Kind::ParallelDriver));
        assert_eq!(Kind::of("serial_driver_compact.sh"), Some(Kind::SerialDriver));
        assert_eq!(Kind::of("singleton_driver_it.py"), Some(Kind::SingletonDriver));
        assert_eq!(Kind::of("anytime_health"), Some(Kind::Anytime));
        assert_eq!(Kind::of("eventually_verify"), Some(Kind::Eventually));
        assert_eq!(Kind::of("finally_check"), Some(Kind::Finally));
        for never in ["helper_lib.sh", "README", "first_", "parallel_drivers_x", "driver_x"] {
            assert_eq!(Kind::of(never), None, "{never}");
        }
    }

    #[test]
    fn bind_mounts_at_or_under_the_test_directory_hold_templates() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("main");
        std::fs::create_dir(&t).unwrap();
        for (name, mode) in [("parallel_driver_a.sh", 0o755), ("finally_b", 0o700), ("notes.txt", 0o644)] {
            std::fs::write(t.join(name), "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(t.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let mut all = bound_templates(dir.path(), TEST_DIR).unwrap();
        all.sort();
        assert_eq!(all, [("main".into(), "finally_b".into()), ("main".into(), "parallel_driver_a.sh".into())]);
        let mut one = bound_templates(&t, &format!("{TEST_DIR}/other/")).unwrap();
        one.sort();
        assert_eq!(one[0], ("other".into(), "finally_b".into()));
        let file = bound_templates(&t.join("finally_b"), &format!("{TEST_DIR}/x/finally_b")).unwrap();
        assert_eq!(file, [("x".to_owned(), "finally_b".to_owned())]);
        assert!(bound_templates(dir.path(), "/elsewhere").unwrap().is_empty());
    }
}
