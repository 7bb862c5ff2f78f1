//! The project manifest, `hvsim.toml` beside a compose file: what hvsim
//! checks of the project beyond its SDK assertions. Today, the checkers
//! run at the end of every timeline (`checkers.rs`):
//!
//! ```toml
//! [[checker]]
//! model = "set"          # register, set or queue
//! history = "elements"   # optional: the events whose `history` is this
//! name = "elements"      # optional: default the model, and the history
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hvsim_checkers::ModelKind;
use serde::Deserialize;

use crate::checkers::CheckerSpec;

/// The manifest's file name.
pub const FILE: &str = "hvsim.toml";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    pub checkers: Vec<CheckerSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    checker: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Option<String>,
    model: ModelKind,
    history: Option<String>,
}

impl Manifest {
    /// The manifest beside `compose` (a compose file), if there is one.
    pub fn beside(compose: &Path) -> Option<PathBuf> {
        let path = compose.parent().unwrap_or(Path::new(".")).join(FILE);
        path.is_file().then_some(path)
    }

    pub fn load(path: &Path) -> Result<Manifest, String> {
        let text = hvsim_vmm::files::read_text(path).map_err(|e| e.to_string())?;
        Manifest::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Manifest, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        let mut names = BTreeSet::new();
        let mut checkers = Vec::new();
        for e in file.checker {
            let name = e.name.unwrap_or_else(|| match &e.history {
                Some(h) => format!("{} {h}", e.model.name()),
                None => e.model.name().to_owned(),
            });
            if name.trim().is_empty() {
                return Err("a checker's name is empty".into());
            }
            if !names.insert(name.clone()) {
                return Err(format!("two checkers are named {name:?}: give each its own `name`"));
            }
            checkers.push(CheckerSpec { name, model: e.model, history: e.history });
        }
        Ok(Manifest { checkers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkers_are_named_and_names_are_unique() {
        let m = Manifest::parse(
            "[[checker]]\nmodel = \"set\"\n[[checker]]\nmodel = \"register\"\nhistory = \"r\"\n\
             [[checker]]\nmodel = \"queue\"\nname = \"jobs\"\n",
        )
        .unwrap();
        let names: Vec<&str> = m.checkers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["set", "register r", "jobs"]);
        assert_eq!(m.checkers[1].history.as_deref(), Some("r"));
        let e = Manifest::parse("[[checker]]\nmodel = \"set\"\n[[checker]]\nmodel = \"set\"\n").unwrap_err();
        assert!(e.contains("two checkers are named \"set\""), "{e}");
        let e = Manifest::parse("[[checker]]\nmodel = \"graph\"\n").unwrap_err();
        assert!(e.contains("unknown variant `graph`"), "{e}");
        let e = Manifest::parse("[[checkers]]\nmodel = \"set\"\n").unwrap_err();
        assert!(e.contains("unknown field `checkers`"), "{e}");
    }
}
