//! Shards: one exploration split over processes or hosts that share
//! nothing while they run (docs/scale.md).
//!
//! Shard `I` of `N` runs the branches whose numbers are `I+1, I+1+N,
//! I+1+2N...`: branch numbers, and with them branch seeds
//! (`timeline::branch_seed`), are the whole exploration's, so no two shards
//! run the same timeline, a bug record names the branch it came from in
//! the whole, and shard `0/1` is the unsharded exploration itself. Each
//! shard picks its snapshots with a stream of its own, drawn from (master
//! seed, I, N).

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Shard `index` (from 0) of `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Default for Shard {
    /// The whole exploration.
    fn default() -> Shard {
        Shard { index: 0, count: 1 }
    }
}

/// Shards of one exploration at most: far beyond any fleet, small enough
/// that every list of them is cheap.
pub const MAX_SHARDS: u32 = 65_536;

impl Shard {
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 || count > MAX_SHARDS {
            return Err(format!("{count} shards: an exploration has 1 to {MAX_SHARDS}"));
        }
        if index >= count {
            return Err(format!("shard {index} of {count}: shards are numbered from 0 to {}", count - 1));
        }
        Ok(Shard { index, count })
    }

    /// The whole exploration's number of this shard's `local`th branch
    /// (both from 1).
    pub fn branch(self, local: u64) -> u64 {
        assert!(local >= 1, "branches are numbered from 1");
        (local - 1) * u64::from(self.count) + u64::from(self.index) + 1
    }

    /// The shard of `count` that ran the whole exploration's `branch`:
    /// the inverse of [`Shard::branch`]. None for branch 0 (the root, every
    /// shard's).
    pub fn of_branch(branch: u64, count: u32) -> Option<u32> {
        let count = u64::from(count.max(1));
        (branch > 0).then(|| ((branch - 1) % count) as u32)
    }

    /// How many of the whole exploration's first `branches` are this
    /// shard's.
    pub fn share(self, branches: u64) -> u64 {
        let (i, n) = (u64::from(self.index), u64::from(self.count));
        if branches <= i {
            0
        } else {
            (branches - i).div_ceil(n)
        }
    }

    /// The label of the stream that picks this shard's snapshots: the
    /// unsharded exploration's for `0/1`.
    pub fn picker(self) -> String {
        if self.count == 1 {
            "explorer".into()
        } else {
            format!("explorer/shard/{}/{}", self.index, self.count)
        }
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `I/N`, as `--shard` takes it.
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s.split_once('/').ok_or_else(|| format!("`{s}`: a shard is I/N, e.g. 0/4"))?;
        let number = |x: &str| x.trim().parse::<u32>().map_err(|e| format!("`{s}`: `{x}` is not a shard number: {e}"));
        Shard::new(number(i)?, number(n)?)
    }
}

/// Which shards of how many an exploration's results hold: one for a
/// shard, several for a merge, `[0]` of 1 for an unsharded exploration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Shards {
    pub count: u32,
    /// Sorted, each once.
    pub indices: Vec<u32>,
}

impl Default for Shards {
    fn default() -> Shards {
        Shards::of(Shard::default())
    }
}

impl Shards {
    pub fn of(shard: Shard) -> Shards {
        Shards { count: shard.count, indices: vec![shard.index] }
    }

    /// The shards not among them.
    pub fn missing(&self) -> Vec<u32> {
        (0..self.count).filter(|i| self.indices.binary_search(i).is_err()).collect()
    }

    /// Whether the list is one of shards: sorted, each once, each below
    /// the count (a file may say anything).
    pub fn sound(&self) -> bool {
        (1..=MAX_SHARDS).contains(&self.count)
            && !self.indices.is_empty()
            && self.indices.windows(2).all(|w| w[0] < w[1])
            && self.indices.iter().all(|&i| i < self.count)
    }

    /// "shard 1 of 4", "shards 0, 1, 3 of 4 (missing 2)", "" when whole
    /// and unsharded; long lists cut short.
    pub fn describe(&self) -> String {
        if self.count == 1 {
            return String::new();
        }
        let missing = self.missing();
        let missing = if missing.is_empty() { String::new() } else { format!(" (missing {})", list(&missing)) };
        let s = if self.indices.len() == 1 { "" } else { "s" };
        format!("shard{s} {} of {}{missing}", list(&self.indices), self.count)
    }
}

/// "0, 1, 3", or its first ten and how many more.
fn list(indices: &[u32]) -> String {
    const SHOWN: usize = 10;
    let mut s: Vec<String> = indices.iter().take(SHOWN).map(u32::to_string).collect();
    if indices.len() > SHOWN {
        s.push(format!("and {} more", indices.len() - SHOWN));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn shards_split_the_branches_between_them_exactly() {
        for count in 1..=5u32 {
            for budget in 0..=23u64 {
                let mut seen = BTreeSet::new();
                for index in 0..count {
                    let s = Shard::new(index, count).unwrap();
                    for local in 1..=s.share(budget) {
                        assert!(seen.insert(s.branch(local)), "{s}: branch {} twice", s.branch(local));
                        assert_eq!(Shard::of_branch(s.branch(local), count), Some(index));
                    }
                }
                assert_eq!(seen, (1..=budget).collect(), "{count} shards of {budget} branches");
            }
        }
        let whole = Shard::default();
        assert_eq!((whole.branch(7), whole.share(9), whole.picker()), (7, 9, "explorer".into()));
    }

    #[test]
    fn parsing() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        assert_eq!("0/1".parse::<Shard>(), Ok(Shard::default()));
        for bad in ["4/4", "1/0", "x/2", "1", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        assert_eq!("1/1".parse::<Shard>().unwrap_err(), "shard 1 of 1: shards are numbered from 0 to 0");
        assert_ne!(Shard::new(0, 2).unwrap().picker(), Shard::new(1, 2).unwrap().picker());
    }

    #[test]
    fn descriptions() {
        assert_eq!(Shards::default().describe(), "");
        assert_eq!(Shards::of(Shard::new(1, 4).unwrap()).describe(), "shard 1 of 4 (missing 0, 2, 3)");
        assert_eq!(Shards { count: 2, indices: vec![0, 1] }.describe(), "shards 0, 1 of 2");
        let many = Shards::of(Shard::new(0, 1000).unwrap()).describe();
        assert_eq!(many, "shard 0 of 1000 (missing 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, and 989 more)");
        assert_eq!(Shard::of_branch(0, 4), None);
        assert!("0/65537".parse::<Shard>().is_err());
        assert!(!Shards { count: 2, indices: vec![1, 1] }.sound() && !Shards { count: 2, indices: vec![2] }.sound());
    }
}
