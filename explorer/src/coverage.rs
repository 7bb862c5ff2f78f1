//! Coverage over every timeline: one bit per edge, in the layout of the
//! guest's coverage map (`hvsim_abi::hc::coverage_bit`). Edges arrive two
//! ways: set in the map by instrumented programs (libvoidstar), which the
//! explorer reads from guest memory whenever the machine stops, and listed
//! in `hvsim_coverage` messages. An edge no timeline reached before is a
//! new signal.

use hvsim_abi::hc::{coverage_bit, COVERAGE_BYTES};

pub struct Coverage {
    seen: Vec<u8>,
    edges: usize,
}

impl std::fmt::Debug for Coverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Coverage {{ edges: {} }}", self.edges)
    }
}

impl Default for Coverage {
    fn default() -> Self {
        Coverage { seen: vec![0; COVERAGE_BYTES], edges: 0 }
    }
}

impl Coverage {
    /// Adds the edges set in a guest's coverage map; returns how many no
    /// timeline had reached before.
    pub fn merge_map(&mut self, map: &[u8]) -> u64 {
        assert_eq!(map.len(), COVERAGE_BYTES, "a coverage map is {COVERAGE_BYTES} bytes");
        let mut new = 0;
        for (seen, &now) in self.seen.iter_mut().zip(map) {
            let fresh = now & !*seen;
            if fresh != 0 {
                new += u64::from(fresh.count_ones());
                *seen |= fresh;
            }
        }
        self.edges += new as usize;
        new
    }

    /// Adds one reported edge; returns whether it is new.
    pub fn add_edge(&mut self, edge: u64) -> bool {
        let bit = coverage_bit(edge);
        let (byte, mask) = (bit / 8, 1u8 << (bit % 8));
        let new = self.seen[byte] & mask == 0;
        self.seen[byte] |= mask;
        self.edges += usize::from(new);
        new
    }

    /// Edges reached so far.
    pub fn edges(&self) -> usize {
        self.edges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_count_once_whichever_way_they_arrive() {
        let mut c = Coverage::default();
        assert!(c.add_edge((1 << 32) + 7));
        assert!(!c.add_edge((1 << 32) + 7));
        let mut map = vec![0u8; COVERAGE_BYTES];
        let bit = coverage_bit((1 << 32) + 7);
        map[bit / 8] |= 1 << (bit % 8);
        map[100] = 0b1010_0000;
        assert_eq!(c.merge_map(&map), 2, "the reported edge is not new again");
        assert_eq!(c.merge_map(&map), 0);
        assert_eq!(c.edges(), 3);
        // Edges of different modules land on different bits.
        assert_ne!(coverage_bit((1 << 32) + 1), coverage_bit((2 << 32) + 1));
    }
}
