//! What a model infers from a history's transactions: the dependency graph
//! (`graph.rs`), and the anomalies single reads show without any cycle (an
//! aborted read, a list with an element twice), each with its evidence.

use super::consistency::Anomaly;
use super::graph::Graph;

/// An anomaly one or two transactions' reads show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub anomaly: Anomaly,
    /// The transactions involved, the reader first.
    pub txns: Vec<usize>,
    /// What was seen, for people.
    pub what: String,
}

pub struct Inference {
    pub graph: Graph,
    pub observed: Vec<Observation>,
}
