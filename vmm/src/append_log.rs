//! An append-only log whose clones share what they have in common: the
//! machine's console and its messages.
//!
//! Every snapshot clones the machine's state, and a run's console and
//! messages only grow. Kept in one `Vec`, each of thousands of snapshots
//! would copy everything since power-on; here the log is full chunks,
//! frozen and shared by reference count (their index too, copied only
//! when a chunk freezes while it is shared), plus a short tail that a
//! clone copies. A snapshot therefore costs at most [`CHUNK_WEIGHT`] per
//! log beyond what its line of descent shares, and [`AppendLog::shared`]
//! names the shared allocations so that a snapshot tree counts each one
//! once, however many snapshots hold it.
//!
//! It serializes as the plain sequence of its items, as the `Vec` it
//! replaced did: snapshot files are unchanged.

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The memory an item holds: its own size and whatever it owns.
pub trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for u8 {
    fn weight(&self) -> usize {
        1
    }
}

impl Weigh for (u64, u64) {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
    }
}

/// A tail this heavy freezes into a chunk: what a clone copies at most.
pub const CHUNK_WEIGHT: usize = 16 << 10;

#[derive(Clone)]
pub struct AppendLog<T> {
    /// Frozen chunks, oldest first; none is empty.
    chunks: Arc<Vec<Chunk<T>>>,
    tail: Vec<T>,
    tail_weight: usize,
    len: usize,
}

struct Chunk<T> {
    items: Arc<[T]>,
    /// The index of its first item in the log.
    start: usize,
    weight: usize,
}

impl<T> Clone for Chunk<T> {
    fn clone(&self) -> Self {
        Chunk { items: Arc::clone(&self.items), start: self.start, weight: self.weight }
    }
}

impl<T> Default for AppendLog<T> {
    fn default() -> Self {
        AppendLog { chunks: Arc::new(Vec::new()), tail: Vec::new(), tail_weight: 0, len: 0 }
    }
}

impl<T: Weigh> AppendLog<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, item: T) {
        self.tail_weight += item.weight();
        self.tail.push(item);
        self.len += 1;
        if self.tail_weight >= CHUNK_WEIGHT {
            let start = self.len - self.tail.len();
            let items = std::mem::take(&mut self.tail).into();
            let chunk = Chunk { items, start, weight: std::mem::take(&mut self.tail_weight) };
            Arc::make_mut(&mut self.chunks).push(chunk);
        }
    }
}

impl<T> AppendLog<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The part holding item `i` and where that part starts.
    fn part(&self, i: usize) -> (&[T], usize) {
        debug_assert!(i < self.len);
        let frozen = self.len - self.tail.len();
        if i >= frozen {
            return (&self.tail, frozen);
        }
        let c = &self.chunks[self.chunk_of(i)];
        (&c.items, c.start)
    }

    /// The chunk holding frozen item `i`.
    fn chunk_of(&self, i: usize) -> usize {
        // The first chunk starts at 0, so some chunk starts at or before i.
        self.chunks.partition_point(|c| c.start <= i) - 1
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        (i < self.len).then(|| {
            let (part, start) = self.part(i);
            &part[i - start]
        })
    }

    pub fn last(&self) -> Option<&T> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    /// The items from index `first` on (none if `first` is past the end).
    pub fn iter_from(&self, first: usize) -> Iter<'_, T> {
        let first = first.min(self.len);
        let frozen = self.len - self.tail.len();
        if first >= frozen {
            return Iter { current: self.tail[first - frozen..].iter(), chunks: [].iter(), tail: &[] };
        }
        let c = self.chunk_of(first);
        let chunk = &self.chunks[c];
        Iter {
            current: chunk.items[first - chunk.start..].iter(),
            chunks: self.chunks[c + 1..].iter(),
            tail: &self.tail,
        }
    }

    pub fn iter(&self) -> Iter<'_, T> {
        self.iter_from(0)
    }

    /// The items in `range`: borrowed when they lie in one part, else copied.
    pub fn slice(&self, range: Range<usize>) -> Cow<'_, [T]>
    where
        T: Clone,
    {
        let range = range.start.min(self.len)..range.end.min(self.len);
        if range.is_empty() {
            return Cow::Borrowed(&[]);
        }
        let (part, start) = self.part(range.start);
        if range.end - start <= part.len() {
            return Cow::Borrowed(&part[range.start - start..range.end - start]);
        }
        Cow::Owned(self.iter_from(range.start).take(range.len()).cloned().collect())
    }

    /// The allocations a clone shares with its original, each as (an
    /// identity every holder shares, its weight): the frozen chunks and
    /// their index.
    pub fn shared(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let index = (Arc::as_ptr(&self.chunks) as usize, self.chunks.len() * std::mem::size_of::<Chunk<T>>());
        let chunks = self.chunks.iter().map(|c| (Arc::as_ptr(&c.items) as *const T as usize, c.weight));
        std::iter::once(index).chain(chunks)
    }

    /// What a clone copies rather than shares: the tail.
    pub fn unshared_weight(&self) -> usize {
        self.tail_weight + std::mem::size_of::<Self>()
    }
}

/// The items of an [`AppendLog`] in order.
pub struct Iter<'a, T> {
    current: std::slice::Iter<'a, T>,
    chunks: std::slice::Iter<'a, Chunk<T>>,
    /// The log's tail, once the chunks are done (then empty).
    tail: &'a [T],
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        loop {
            if let Some(item) = self.current.next() {
                return Some(item);
            }
            self.current = match self.chunks.next() {
                Some(c) => c.items.iter(),
                None if !self.tail.is_empty() => std::mem::take(&mut self.tail).iter(),
                None => return None,
            };
        }
    }
}

impl<'a, T> IntoIterator for &'a AppendLog<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T: PartialEq> PartialEq for AppendLog<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Eq> Eq for AppendLog<T> {}

impl<T> fmt::Debug for AppendLog<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AppendLog({} items in {} chunks and a tail)", self.len, self.chunks.len())
    }
}

impl<T: Weigh> FromIterator<T> for AppendLog<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut log = AppendLog::new();
        for item in items {
            log.push(item);
        }
        log
    }
}

impl<T: Serialize> Serialize for AppendLog<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de> + Weigh> Deserialize<'de> for AppendLog<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Vec::<T>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is pushed, and wherever chunks freeze, the log reads as
        /// the `Vec` of the same pushes, and a clone taken on the way shares
        /// the chunks frozen before it.
        #[test]
        fn a_log_reads_as_the_vec_of_its_pushes(
            items in proptest::collection::vec(any::<u8>(), 0..(3 * CHUNK_WEIGHT)),
            cut in any::<prop::sample::Index>(),
            a in any::<prop::sample::Index>(),
            b in any::<prop::sample::Index>(),
        ) {
            let cut = cut.index(items.len() + 1);
            let mut log: AppendLog<u8> = items[..cut].iter().copied().collect();
            let early = log.clone();
            for &x in &items[cut..] {
                log.push(x);
            }
            prop_assert_eq!(log.len(), items.len());
            prop_assert!(log.iter().eq(items.iter()));
            let (a, b) = (a.index(items.len() + 1), b.index(items.len() + 1));
            let (a, b) = (a.min(b), a.max(b));
            prop_assert_eq!(&log.slice(a..b)[..], &items[a..b]);
            prop_assert!(log.iter_from(a).eq(items[a..].iter()));
            prop_assert_eq!(log.get(a), items.get(a));
            prop_assert_eq!(log.last(), items.last());
            // Past the index (which the later pushes may have copied).
            let shared: Vec<usize> = early.shared().skip(1).map(|(id, _)| id).collect();
            let now: Vec<usize> = log.shared().skip(1).map(|(id, _)| id).take(shared.len()).collect();
            prop_assert_eq!(shared, now);
            prop_assert!(early.iter().eq(items[..cut].iter()), "the clone did not change");
            prop_assert!(log.unshared_weight() < CHUNK_WEIGHT + 1024);
            prop_assert_eq!(log.shared().skip(1).map(|(_, w)| w).sum::<usize>() + log.unshared_weight(),
                items.len() + std::mem::size_of::<AppendLog<u8>>());
        }
    }

    #[test]
    fn it_serializes_as_the_vec_it_replaced() {
        let items: Vec<u8> = (0..(4 * CHUNK_WEIGHT + 10)).map(|i| i as u8).collect();
        let log: AppendLog<u8> = items.iter().copied().collect();
        assert_eq!(serde_json::to_string(&log).unwrap(), serde_json::to_string(&items).unwrap());
        let back: AppendLog<u8> = serde_json::from_str(&serde_json::to_string(&items).unwrap()).unwrap();
        assert_eq!(back, log);
        assert_eq!(back.shared().count(), 1 + 4, "the index and four chunks");
    }
}
