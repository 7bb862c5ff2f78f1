//! The project manifest, `hvsim.toml` beside a compose file: what hvsim
//! checks of the project beyond its SDK assertions. Checkers run at the
//! end of every timeline (`checkers.rs`); claims say what the product
//! promises and what would falsify it (`claims.rs`, docs/claims.md):
//!
//! ```toml
//! [[checker]]
//! model = "set"          # register, set, queue, ledger, lease, log, list-append or rw-register
//! consistency = "serializable" # list-append and rw-register: the isolation
//!                        # level the history must keep (default serializable)
//! writes_follow_reads = false # rw-register: don't order a write after the
//!                        # version its transaction read (default true)
//! history = "elements"   # optional: the events whose `history` is this
//! name = "elements"      # optional: default the model, and the history
//!
//! [[claim]]
//! id = "acked-adds-survive"
//! statement = "Every add the store acknowledged is in the final read."
//! checkers = ["elements"]      # checkers whose violation falsifies it
//! assertions = []              # SDK assertions (message or id) likewise
//! faults = ["kill"]            # drawn fault kinds that must land meanwhile
//! min_operations = 5           # optional (1): fewer checked is inconclusive
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use hvsim_checkers::txn::Consistency;
use hvsim_checkers::ModelKind;
use serde::Deserialize;

use crate::record::checkers::CheckerSpec;
use crate::record::claims::{self, ClaimSpec};

/// The manifest's file name.
pub const FILE: &str = "hvsim.toml";

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifest {
    pub checkers: Vec<CheckerSpec>,
    pub claims: Vec<ClaimSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    checker: Vec<Entry>,
    #[serde(default)]
    claim: Vec<ClaimEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimEntry {
    id: String,
    statement: String,
    #[serde(default)]
    checkers: Vec<String>,
    #[serde(default)]
    assertions: Vec<String>,
    #[serde(default)]
    faults: Vec<String>,
    min_operations: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Option<String>,
    model: ModelKind,
    history: Option<String>,
    consistency: Option<Consistency>,
    writes_follow_reads: Option<bool>,
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
            if e.consistency.is_some() && e.model.transactional().is_none() {
                return Err(format!(
                    "checker {name:?}: `consistency` is for transactional models (list-append, rw-register), not {}",
                    e.model.name()
                ));
            }
            if e.writes_follow_reads.is_some() && e.model != ModelKind::RwRegister {
                return Err(format!(
                    "checker {name:?}: `writes_follow_reads` is for the rw-register model, not {}",
                    e.model.name()
                ));
            }
            checkers.push(CheckerSpec {
                name,
                model: e.model,
                history: e.history,
                consistency: e.consistency,
                writes_follow_reads: e.writes_follow_reads,
            });
        }
        let mut ids = BTreeSet::new();
        let mut claims = Vec::new();
        for c in file.claim {
            let id = c.id.trim();
            let bad = |what: String| format!("claim {id:?}: {what}");
            if id.is_empty() || !id.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_') {
                return Err(bad("an id is letters, digits, '-' and '_'".into()));
            }
            if !ids.insert(id.to_owned()) {
                return Err(format!("two claims have the id {id:?}"));
            }
            if c.statement.trim().is_empty() {
                return Err(bad("its statement is empty".into()));
            }
            if c.checkers.is_empty() && c.assertions.is_empty() {
                return Err(bad("nothing could falsify it: name `checkers` or `assertions`".into()));
            }
            if let Some(name) = c.checkers.iter().find(|n| !names.contains(*n)) {
                return Err(bad(format!("no [[checker]] is named {name:?}")));
            }
            for names in [&c.checkers, &c.assertions] {
                let mut seen = BTreeSet::new();
                if let Some(twice) = names.iter().find(|n| !seen.insert(*n)) {
                    return Err(bad(format!("{twice:?} is named twice")));
                }
            }
            let faults = claims::kinds(&c.faults).map_err(bad)?;
            claims.push(ClaimSpec {
                id: id.to_owned(),
                statement: c.statement.trim().to_owned(),
                checkers: c.checkers,
                assertions: c.assertions,
                faults,
                min_operations: c.min_operations.unwrap_or(1),
            });
        }
        Ok(Manifest { checkers, claims })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hvsim_vmm::faults::schedule::DrawnKind;

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
        let m =
            Manifest::parse("[[checker]]\nmodel = \"list-append\"\nconsistency = \"snapshot-isolation\"\n").unwrap();
        assert_eq!(m.checkers[0].consistency, Some(hvsim_checkers::txn::Consistency::SnapshotIsolation));
        let m = Manifest::parse("[[checker]]\nmodel = \"rw-register\"\nwrites_follow_reads = false\n").unwrap();
        assert_eq!(m.checkers[0].writes_follow_reads, Some(false));
        let e = Manifest::parse("[[checker]]\nmodel = \"list-append\"\nwrites_follow_reads = true\n").unwrap_err();
        assert!(e.contains("`writes_follow_reads` is for the rw-register model"), "{e}");
        let e = Manifest::parse("[[checker]]\nmodel = \"set\"\nconsistency = \"serializable\"\n").unwrap_err();
        assert!(e.contains("`consistency` is for transactional models"), "{e}");
        let e = Manifest::parse("[[checker]]\nmodel = \"rw-register\"\nconsistency = \"linearizable\"\n").unwrap_err();
        assert!(e.contains("unknown variant `linearizable`"), "{e}");
        let e = Manifest::parse("[[checker]]\nmodel = \"graph\"\n").unwrap_err();
        assert!(e.contains("unknown variant `graph`"), "{e}");
        let e = Manifest::parse("[[checkers]]\nmodel = \"set\"\n").unwrap_err();
        assert!(e.contains("unknown field `checkers`"), "{e}");
    }

    #[test]
    fn claims_name_what_exists() {
        let ok = "[[checker]]\nmodel = \"set\"\n[[claim]]\nid = \"adds\"\nstatement = \"kept\"\n\
                  checkers = [\"set\"]\nfaults = [\"kill\", \"partition\"]\n";
        let m = Manifest::parse(ok).unwrap();
        assert_eq!(m.claims[0].faults, [DrawnKind::Kill, DrawnKind::Partition]);
        assert_eq!(m.claims[0].min_operations, 1);
        let bad = |text: &str, says: &str| {
            let e = Manifest::parse(&format!("[[checker]]\nmodel = \"set\"\n{text}")).unwrap_err();
            assert!(e.contains(says), "{e}");
        };
        bad("[[claim]]\nid = \"a\"\nstatement = \"s\"\ncheckers = [\"register\"]\n", "no [[checker]] is named");
        bad("[[claim]]\nid = \"a\"\nstatement = \"s\"\n", "nothing could falsify it");
        bad("[[claim]]\nid = \"a b\"\nstatement = \"s\"\nassertions = [\"x\"]\n", "an id is");
        bad(
            "[[claim]]\nid = \"a\"\nstatement = \"s\"\nassertions = [\"x\"]\nfaults = [\"flood\"]\n",
            "unknown fault kind",
        );
        bad(
            "[[claim]]\nid = \"a\"\nstatement = \"s\"\nassertions = [\"x\"]\n[[claim]]\nid = \"a\"\nstatement = \"t\"\nassertions = [\"x\"]\n",
            "two claims have the id",
        );
        bad("[[claim]]\nid = \"a\"\nstatement = \"s\"\nassertions = [\"x\"]\nwhy = 1\n", "unknown field `why`");
        bad("[[claim]]\nid = \"a\"\nstatement = \"s\"\ncheckers = [\"set\", \"set\"]\n", "\"set\" is named twice");
    }
}
