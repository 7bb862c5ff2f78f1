//! Coverage over every timeline: one bit per edge, in the layout of the
//! guest's coverage map (`hvsim_abi::hc::coverage_bit`). Edges arrive two
//! ways: set in the map by instrumented programs (libvoidstar), which the
//! explorer reads from guest memory whenever the machine stops, and listed
//! in `hvsim_coverage` messages. An edge no timeline reached before is a
//! new signal.

use hvsim_abi::hc::{coverage_bit, COVERAGE_BYTES};

#[derive(Clone)]
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

/// The bits of a coverage map that a [`Coverage`] had not seen, by byte:
/// what a worker found, for the explorer to add to its own coverage later;
/// or all a coverage holds ([`Coverage::bits`]), for a merge of shards.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FreshBits(Vec<(u32, u8)>);

impl FreshBits {
    /// Every edge set in a guest's coverage map.
    pub fn of_map(map: &[u8]) -> FreshBits {
        FreshBits::set_since(None, map)
    }

    /// The edges set in `end` that were not in `start` (a map as it was
    /// earlier in the same run; none yet: every edge set is).
    pub fn set_since(start: Option<&[u8]>, end: &[u8]) -> FreshBits {
        let before = |i: usize| start.and_then(|s| s.get(i)).copied().unwrap_or(0);
        FreshBits(end.iter().enumerate().map(|(i, &b)| (i as u32, b & !before(i))).filter(|&(_, b)| b != 0).collect())
    }

    /// The edges, as bit numbers in the map's layout.
    pub fn edges(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flat_map(|&(i, bits)| (0..8).filter(move |b| bits & (1 << b) != 0).map(move |b| i * 8 + b))
    }

    /// Every byte is in a coverage map (bits read from a file may not be).
    pub fn fits(&self) -> bool {
        self.0.iter().all(|&(i, _)| (i as usize) < COVERAGE_BYTES)
    }

    /// How many edges.
    pub fn count(&self) -> u64 {
        self.0.iter().map(|&(_, bits)| u64::from(bits.count_ones())).sum()
    }
}

impl Coverage {
    /// Adds the edges set in a guest's coverage map; returns those no
    /// timeline had reached before.
    pub fn merge_map(&mut self, map: &[u8]) -> FreshBits {
        assert_eq!(map.len(), COVERAGE_BYTES, "a coverage map is {COVERAGE_BYTES} bytes");
        let mut fresh = Vec::new();
        for (i, (seen, &now)) in self.seen.iter_mut().zip(map).enumerate() {
            let bits = now & !*seen;
            if bits != 0 {
                *seen |= bits;
                fresh.push((i as u32, bits));
            }
        }
        let fresh = FreshBits(fresh);
        self.edges += fresh.count() as usize;
        fresh
    }

    /// Adds edges another coverage found; returns how many are new here.
    pub fn merge_bits(&mut self, fresh: &FreshBits) -> u64 {
        let mut new = 0;
        for &(i, bits) in &fresh.0 {
            let seen = &mut self.seen[i as usize];
            new += u64::from((bits & !*seen).count_ones());
            *seen |= bits;
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

    /// Every edge reached so far, as new to a coverage that has none.
    pub fn bits(&self) -> FreshBits {
        FreshBits(self.seen.iter().enumerate().filter(|(_, &b)| b != 0).map(|(i, &b)| (i as u32, b)).collect())
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
        let fresh = c.merge_map(&map);
        assert_eq!(fresh.count(), 2, "the reported edge is not new again");
        assert_eq!(c.merge_map(&map).count(), 0);
        assert_eq!(c.edges(), 3);
        // What one coverage found, another adds: only what it lacked is new.
        let mut other = Coverage::default();
        assert!(other.add_edge((1 << 32) + 7) && other.add_edge(5));
        assert_eq!(other.merge_bits(&fresh), 2);
        assert_eq!(other.merge_bits(&fresh), 0);
        assert_eq!(other.edges(), 4);
        // All a coverage holds, added to an empty one, is all new.
        let mut copy = Coverage::default();
        assert_eq!(copy.merge_bits(&other.bits()), 4);
        assert_eq!((copy.edges(), copy.bits()), (4, other.bits()));
        // Edges of different modules land on different bits.
        assert_ne!(coverage_bit((1 << 32) + 1), coverage_bit((2 << 32) + 1));
    }
}
