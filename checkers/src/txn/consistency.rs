//! Consistency models and the anomalies that rule them out, after Adya's
//! isolation levels as Elle (Kingsbury and Alvaro, VLDB 2020) arranges
//! them: a model holds of a history only if none of the anomalies it
//! prohibits is present, and an anomaly found implies weaker ones (G0 is a
//! G1c; a G-single cycle on items is a G2-item cycle). From the anomalies a
//! history shows come the weakest models it rules out and the strongest it
//! is still consistent with.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An isolation level a database promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Consistency {
    ReadUncommitted,
    ReadCommitted,
    RepeatableRead,
    SnapshotIsolation,
    Serializable,
    StrictSerializable,
}

/// An anomaly a transactional history can show. Cycles are named by the
/// edges they need (Adya; Elle for G-nonadjacent and the `-realtime`
/// variants, cycles that need real-time order); the rest are observations
/// a single transaction's reads contradict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Anomaly {
    /// A cycle of write-write edges: writes interleaved.
    G0,
    /// A read of a failed transaction's write (an aborted read).
    G1a,
    /// A read of a write that its transaction overwrote (an intermediate
    /// read).
    G1b,
    /// A cycle of write-write and write-read edges (circular information
    /// flow).
    G1c,
    /// Any of G1a, G1b, G1c.
    G1,
    /// A cycle with exactly one read-write (anti-dependency) edge: read
    /// skew, lost update.
    #[serde(rename = "G-single")]
    GSingle,
    /// A cycle with two or more read-write edges, none adjacent.
    #[serde(rename = "G-nonadjacent")]
    GNonadjacent,
    /// A cycle with one or more read-write edges on items: write skew.
    #[serde(rename = "G2-item")]
    G2Item,
    /// A cycle with read-write edges, items or predicates.
    G2,
    #[serde(rename = "G0-realtime")]
    G0Realtime,
    #[serde(rename = "G1c-realtime")]
    G1cRealtime,
    #[serde(rename = "G-single-realtime")]
    GSingleRealtime,
    #[serde(rename = "G-nonadjacent-realtime")]
    GNonadjacentRealtime,
    #[serde(rename = "G2-item-realtime")]
    G2ItemRealtime,
    #[serde(rename = "G2-realtime")]
    G2Realtime,
    /// A transaction's read disagrees with its own earlier reads and
    /// writes.
    #[serde(rename = "internal")]
    Internal,
    /// A transaction read a write it makes only later.
    #[serde(rename = "future-read")]
    FutureRead,
    /// A list read with an element twice.
    #[serde(rename = "duplicate-elements")]
    DuplicateElements,
    /// Two reads of one list, neither a prefix of the other: no single
    /// order of appends explains both.
    #[serde(rename = "incompatible-order")]
    IncompatibleOrder,
    /// Two committed transactions read one version of a key and both
    /// wrote it (a G-single, named as users know it).
    #[serde(rename = "lost-update")]
    LostUpdate,
    /// A committed transaction's append follows, in a list's order, one of
    /// a transaction that failed: it wrote over an aborted write (Elle's
    /// name; an aborted read, G1a, in all but name).
    #[serde(rename = "dirty-update")]
    DirtyUpdate,
    /// Every order of the writes the reads leave open has a cycle
    /// repeatable read forbids, though no one cycle is known (Elle's name
    /// for a cycle shown to exist without being named).
    #[serde(rename = "PL-2.99-cycle-exists")]
    RepeatableReadCycleExists,
    /// Every such order has a cycle snapshot isolation forbids.
    #[serde(rename = "PL-SI-cycle-exists")]
    SnapshotIsolationCycleExists,
    /// Every such order has a cycle strict serializability forbids.
    #[serde(rename = "PL-SS-cycle-exists")]
    StrictSerializableCycleExists,
}

impl Anomaly {
    pub const ALL: [Anomaly; 24] = [
        Anomaly::G0,
        Anomaly::G1a,
        Anomaly::G1b,
        Anomaly::G1c,
        Anomaly::G1,
        Anomaly::GSingle,
        Anomaly::GNonadjacent,
        Anomaly::G2Item,
        Anomaly::G2,
        Anomaly::G0Realtime,
        Anomaly::G1cRealtime,
        Anomaly::GSingleRealtime,
        Anomaly::GNonadjacentRealtime,
        Anomaly::G2ItemRealtime,
        Anomaly::G2Realtime,
        Anomaly::Internal,
        Anomaly::FutureRead,
        Anomaly::DuplicateElements,
        Anomaly::IncompatibleOrder,
        Anomaly::LostUpdate,
        Anomaly::DirtyUpdate,
        Anomaly::RepeatableReadCycleExists,
        Anomaly::SnapshotIsolationCycleExists,
        Anomaly::StrictSerializableCycleExists,
    ];

    /// Its name, as Elle writes it.
    pub fn name(self) -> &'static str {
        match self {
            Anomaly::G0 => "G0",
            Anomaly::G1a => "G1a",
            Anomaly::G1b => "G1b",
            Anomaly::G1c => "G1c",
            Anomaly::G1 => "G1",
            Anomaly::GSingle => "G-single",
            Anomaly::GNonadjacent => "G-nonadjacent",
            Anomaly::G2Item => "G2-item",
            Anomaly::G2 => "G2",
            Anomaly::G0Realtime => "G0-realtime",
            Anomaly::G1cRealtime => "G1c-realtime",
            Anomaly::GSingleRealtime => "G-single-realtime",
            Anomaly::GNonadjacentRealtime => "G-nonadjacent-realtime",
            Anomaly::G2ItemRealtime => "G2-item-realtime",
            Anomaly::G2Realtime => "G2-realtime",
            Anomaly::Internal => "internal",
            Anomaly::FutureRead => "future-read",
            Anomaly::DuplicateElements => "duplicate-elements",
            Anomaly::IncompatibleOrder => "incompatible-order",
            Anomaly::LostUpdate => "lost-update",
            Anomaly::DirtyUpdate => "dirty-update",
            Anomaly::RepeatableReadCycleExists => "PL-2.99-cycle-exists",
            Anomaly::SnapshotIsolationCycleExists => "PL-SI-cycle-exists",
            Anomaly::StrictSerializableCycleExists => "PL-SS-cycle-exists",
        }
    }

    /// Whether it is a cycle that needs real-time order.
    pub fn needs_realtime(self) -> bool {
        use Anomaly::*;
        matches!(self, G0Realtime | G1cRealtime | GSingleRealtime | GNonadjacentRealtime | G2ItemRealtime | G2Realtime)
    }

    /// The anomalies this one is an instance of (one step; Elle's
    /// `implied-anomalies`, restricted to these).
    fn implies(self) -> &'static [Anomaly] {
        use Anomaly::*;
        match self {
            G0 => &[G1c, G0Realtime],
            G1a | G1b => &[G1],
            G1c => &[G1, G1cRealtime],
            GSingle => &[GNonadjacent, G2Item, GSingleRealtime],
            GNonadjacent => &[G2, G2Item, GNonadjacentRealtime],
            G2Item => &[G2, G2ItemRealtime],
            G2 => &[G2Realtime],
            G0Realtime => &[G1cRealtime],
            GSingleRealtime => &[GNonadjacentRealtime, G2ItemRealtime],
            GNonadjacentRealtime => &[G2Realtime, G2ItemRealtime],
            G2ItemRealtime => &[G2Realtime],
            // A read of a later write of one's own is a trivial cycle of
            // information flow; two orders of one list mean some read saw
            // writes that were not (yet) committed in that order.
            FutureRead => &[G1c],
            IncompatibleOrder | DirtyUpdate => &[G1a],
            LostUpdate => &[GSingle],
            G1 | G1cRealtime | G2Realtime | Internal | DuplicateElements => &[],
            RepeatableReadCycleExists | SnapshotIsolationCycleExists | StrictSerializableCycleExists => &[],
        }
    }
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Consistency {
    pub const ALL: [Consistency; 6] = [
        Consistency::ReadUncommitted,
        Consistency::ReadCommitted,
        Consistency::RepeatableRead,
        Consistency::SnapshotIsolation,
        Consistency::Serializable,
        Consistency::StrictSerializable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Consistency::ReadUncommitted => "read-uncommitted",
            Consistency::ReadCommitted => "read-committed",
            Consistency::RepeatableRead => "repeatable-read",
            Consistency::SnapshotIsolation => "snapshot-isolation",
            Consistency::Serializable => "serializable",
            Consistency::StrictSerializable => "strict-serializable",
        }
    }

    /// The models a history of this model also satisfies, one step down
    /// (repeatable read and snapshot isolation are incomparable).
    fn implies(self) -> &'static [Consistency] {
        use Consistency::*;
        match self {
            ReadUncommitted => &[],
            ReadCommitted => &[ReadUncommitted],
            RepeatableRead | SnapshotIsolation => &[ReadCommitted],
            Serializable => &[RepeatableRead, SnapshotIsolation],
            StrictSerializable => &[Serializable],
        }
    }

    /// What it prohibits beyond the models it implies (Adya; Cerone for
    /// `internal`; Elle for G-nonadjacent under snapshot isolation).
    fn prohibits(self) -> &'static [Anomaly] {
        use Anomaly::*;
        match self {
            Consistency::ReadUncommitted => &[G0, DuplicateElements],
            Consistency::ReadCommitted => &[G1],
            Consistency::RepeatableRead => &[G2Item, RepeatableReadCycleExists],
            Consistency::SnapshotIsolation => &[Internal, GSingle, GNonadjacent, SnapshotIsolationCycleExists],
            Consistency::Serializable => &[G2],
            Consistency::StrictSerializable => &[G1cRealtime, G2Realtime, StrictSerializableCycleExists],
        }
    }

    /// Whether a history with `self` also satisfies `weaker`.
    pub fn implies_model(self, weaker: Consistency) -> bool {
        self == weaker || self.implies().iter().any(|m| m.implies_model(weaker))
    }

    /// Every anomaly a history of this model cannot show.
    pub fn prohibited(self) -> BTreeSet<Anomaly> {
        Consistency::ALL
            .into_iter()
            .filter(|&m| self.implies_model(m))
            .flat_map(|m| m.prohibits().iter().copied())
            .collect()
    }
}

impl std::str::FromStr for Consistency {
    type Err = String;
    fn from_str(s: &str) -> Result<Consistency, String> {
        Consistency::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Consistency::ALL.iter().map(|m| m.name()).collect();
            format!("unknown consistency model {s:?}: one of {}", names.join(", "))
        })
    }
}

impl std::fmt::Display for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `found` and every anomaly it implies.
pub fn implied(found: &BTreeSet<Anomaly>) -> BTreeSet<Anomaly> {
    let mut all = found.clone();
    let mut todo: Vec<Anomaly> = found.iter().copied().collect();
    while let Some(a) = todo.pop() {
        for &b in a.implies() {
            if all.insert(b) {
                todo.push(b);
            }
        }
    }
    all
}

/// What a history's anomalies say about each model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Standing {
    /// Every model some anomaly rules out.
    pub ruled_out: Vec<Consistency>,
    /// The weakest of those: each rules out all stronger ones.
    pub weakest_ruled_out: Vec<Consistency>,
    /// The strongest models no anomaly rules out and that were decided
    /// (two when repeatable read and snapshot isolation both still hold,
    /// or both fail).
    pub strongest_consistent: Vec<Consistency>,
    /// Models no anomaly rules out that the check did not decide (a
    /// register history's search ran for the model asked only, or stopped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<Consistency>,
}

impl Standing {
    pub fn of(found: &BTreeSet<Anomaly>, undecided: &[Consistency]) -> Standing {
        let present = implied(found);
        let ruled_out: Vec<Consistency> =
            Consistency::ALL.into_iter().filter(|m| !m.prohibited().is_disjoint(&present)).collect();
        let undecided: Vec<Consistency> =
            Consistency::ALL.into_iter().filter(|m| undecided.contains(m) && !ruled_out.contains(m)).collect();
        let holds: Vec<Consistency> =
            Consistency::ALL.into_iter().filter(|m| !ruled_out.contains(m) && !undecided.contains(m)).collect();
        let weakest_ruled_out =
            ruled_out.iter().copied().filter(|&m| !ruled_out.iter().any(|&w| w != m && m.implies_model(w))).collect();
        let strongest_consistent =
            holds.iter().copied().filter(|&m| !holds.iter().any(|&s| s != m && s.implies_model(m))).collect();
        Standing { ruled_out, weakest_ruled_out, strongest_consistent, undecided }
    }

    pub fn rules_out(&self, model: Consistency) -> bool {
        self.ruled_out.contains(&model)
    }
}

#[cfg(test)]
mod tests {
    use super::Anomaly::*;
    use super::Consistency::*;
    use super::*;

    fn standing(found: &[Anomaly]) -> Standing {
        Standing::of(&found.iter().copied().collect(), &[])
    }

    #[test]
    fn each_anomaly_rules_out_what_adya_and_elle_say() {
        // (anomaly, weakest models ruled out, strongest still consistent)
        let table: &[(Anomaly, &[Consistency], &[Consistency])] = &[
            (G0, &[ReadUncommitted], &[]),
            (DuplicateElements, &[ReadUncommitted], &[]),
            (G1a, &[ReadCommitted], &[ReadUncommitted]),
            (G1b, &[ReadCommitted], &[ReadUncommitted]),
            (G1c, &[ReadCommitted], &[ReadUncommitted]),
            (IncompatibleOrder, &[ReadCommitted], &[ReadUncommitted]),
            (FutureRead, &[ReadCommitted], &[ReadUncommitted]),
            // Lost update, read skew: neither snapshot isolation nor
            // repeatable read.
            (GSingle, &[RepeatableRead, SnapshotIsolation], &[ReadCommitted]),
            (LostUpdate, &[RepeatableRead, SnapshotIsolation], &[ReadCommitted]),
            (GNonadjacent, &[RepeatableRead, SnapshotIsolation], &[ReadCommitted]),
            // Write skew: what snapshot isolation allows.
            (G2Item, &[RepeatableRead], &[SnapshotIsolation]),
            (Internal, &[SnapshotIsolation], &[RepeatableRead]),
            (G2, &[Serializable], &[RepeatableRead, SnapshotIsolation]),
            (G2ItemRealtime, &[StrictSerializable], &[Serializable]),
            (G1cRealtime, &[StrictSerializable], &[Serializable]),
            (GSingleRealtime, &[StrictSerializable], &[Serializable]),
            (G0Realtime, &[StrictSerializable], &[Serializable]),
            (GNonadjacentRealtime, &[StrictSerializable], &[Serializable]),
            (G2Realtime, &[StrictSerializable], &[Serializable]),
            (G1, &[ReadCommitted], &[ReadUncommitted]),
            (DirtyUpdate, &[ReadCommitted], &[ReadUncommitted]),
            (RepeatableReadCycleExists, &[RepeatableRead], &[SnapshotIsolation]),
            (SnapshotIsolationCycleExists, &[SnapshotIsolation], &[RepeatableRead]),
            (StrictSerializableCycleExists, &[StrictSerializable], &[Serializable]),
        ];
        // Every anomaly is in the table: none is named without saying,
        // independently of the lattice's own tables, what it rules out.
        for a in Anomaly::ALL {
            assert!(table.iter().any(|&(t, _, _)| t == a), "{a} is not in the table");
        }
        for &(a, weakest, strongest) in table {
            let s = standing(&[a]);
            assert_eq!(s.weakest_ruled_out, weakest, "{a}");
            assert_eq!(s.strongest_consistent, strongest, "{a}");
            for m in Consistency::ALL {
                // Ruled out exactly when it implies a weakest ruled out.
                assert_eq!(s.rules_out(m), weakest.iter().any(|&w| m.implies_model(w)), "{a} {m}");
            }
        }
        let clean = standing(&[]);
        assert!(clean.ruled_out.is_empty());
        assert_eq!(clean.strongest_consistent, [StrictSerializable]);
    }

    #[test]
    fn models_form_the_lattice_jepsen_draws() {
        assert!(StrictSerializable.implies_model(ReadUncommitted));
        assert!(Serializable.implies_model(SnapshotIsolation) && Serializable.implies_model(RepeatableRead));
        assert!(!SnapshotIsolation.implies_model(RepeatableRead) && !RepeatableRead.implies_model(SnapshotIsolation));
        assert!(!ReadCommitted.implies_model(RepeatableRead) && !Serializable.implies_model(StrictSerializable));
    }
}
