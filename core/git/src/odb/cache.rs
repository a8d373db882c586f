//! Objects already put together from pack entries, kept by where their entry is, so that
//! a delta chain stops at the first entry resolved before.
//!
//! Why: git chains up to 50 deltas (`gc --aggressive`: 250), and consecutive versions of a
//! tree share most of a chain. Without a cache, every object of a chain inflates the whole
//! chain again, so a walk of history inflates each base dozens of times.
//!
//! Bounded by bytes, least recently used first out: the total held never passes the cap
//! given (an object larger than a quarter of it is not kept at all). Keys are (pack serial,
//! offset): a pack's serial is unique to one open pack, so a repacked or replaced pack's
//! entries are never taken for the new one's.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::object::Kind;

/// Where an entry is: the pack's serial and the entry's offset in it.
pub(super) type Key = (u64, u64);

/// Objects resolved from pack entries, by [`Key`], bounded by bytes.
pub(super) struct DeltaBaseCache {
    cap: usize,
    held: usize,
    entries: HashMap<Key, Entry>,
    /// Keys by when they were last used (a counter), oldest first.
    by_use: BTreeMap<u64, Key>,
    clock: u64,
}

struct Entry {
    kind: Kind,
    data: Arc<Vec<u8>>,
    used: u64,
}

impl DeltaBaseCache {
    /// A cache that holds at most `cap` bytes of objects.
    pub(super) fn new(cap: usize) -> DeltaBaseCache {
        DeltaBaseCache {
            cap,
            held: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
            clock: 0,
        }
    }

    /// The object resolved from the entry at `key`, if kept; it becomes the most recently
    /// used.
    pub(super) fn get(&mut self, key: Key) -> Option<(Kind, Arc<Vec<u8>>)> {
        self.clock += 1;
        let entry = self.entries.get_mut(&key)?;
        self.by_use.remove(&entry.used);
        entry.used = self.clock;
        self.by_use.insert(self.clock, key);
        Some((entry.kind, entry.data.clone()))
    }

    /// Keeps `data`, of kind `kind`, as what the entry at `key` resolves to, letting go of
    /// the least recently used objects to stay within the cap.
    pub(super) fn put(&mut self, key: Key, kind: Kind, data: Arc<Vec<u8>>) {
        let size = data.len();
        if size > self.cap / 4 {
            return;
        }
        self.remove(key);
        while self.held + size > self.cap {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some(entry) = self.entries.remove(&oldest) {
                self.held -= entry.data.len();
            }
        }
        self.clock += 1;
        self.held += size;
        self.by_use.insert(self.clock, key);
        self.entries.insert(
            key,
            Entry {
                kind,
                data,
                used: self.clock,
            },
        );
    }

    /// Lets go of every object of packs whose serial `keep` says no to.
    pub(super) fn retain_packs(&mut self, keep: impl Fn(u64) -> bool) {
        let gone: Vec<Key> = self
            .entries
            .keys()
            .filter(|(serial, _)| !keep(*serial))
            .copied()
            .collect();
        for key in gone {
            self.remove(key);
        }
    }

    fn remove(&mut self, key: Key) {
        if let Some(entry) = self.entries.remove(&key) {
            self.by_use.remove(&entry.used);
            self.held -= entry.data.len();
        }
    }

    /// Bytes of objects held.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.held
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(len: usize, byte: u8) -> Arc<Vec<u8>> {
        Arc::new(vec![byte; len])
    }

    #[test]
    fn the_least_recently_used_go_first_and_the_cap_is_never_passed() {
        let mut cache = DeltaBaseCache::new(1000);
        for i in 0..4 {
            cache.put((0, i), Kind::Blob, object(200, i as u8));
        }
        assert_eq!(cache.held(), 800);
        // Using 0 makes 1 the oldest.
        assert_eq!(cache.get((0, 0)).unwrap().1[0], 0);
        cache.put((0, 9), Kind::Tree, object(250, 9));
        assert_eq!(cache.held(), 850);
        assert!(cache.get((0, 1)).is_none(), "the least recently used went");
        for kept in [0, 2, 3, 9] {
            assert!(cache.get((0, kept)).is_some(), "{kept} kept");
        }
        // Many more puts of mixed sizes: never over the cap.
        for i in 10..500u64 {
            cache.put((i % 3, i), Kind::Blob, object((i as usize * 37) % 250, 1));
            assert!(cache.held() <= 1000, "{} held", cache.held());
            assert_eq!(
                cache.held(),
                cache.entries.values().map(|e| e.data.len()).sum::<usize>()
            );
            assert_eq!(cache.by_use.len(), cache.len());
        }
    }

    #[test]
    fn objects_larger_than_a_quarter_of_the_cap_are_not_kept() {
        let mut cache = DeltaBaseCache::new(1000);
        cache.put((0, 1), Kind::Blob, object(100, 1));
        cache.put((0, 2), Kind::Blob, object(251, 2));
        assert!(cache.get((0, 2)).is_none());
        assert!(cache.get((0, 1)).is_some(), "nothing evicted for it");
        assert_eq!(cache.held(), 100);
    }

    #[test]
    fn putting_a_key_again_replaces_it_and_packs_let_go_of_lose_their_objects() {
        let mut cache = DeltaBaseCache::new(1000);
        cache.put((0, 1), Kind::Blob, object(100, 1));
        cache.put((0, 1), Kind::Tree, object(50, 2));
        assert_eq!(cache.held(), 50);
        assert_eq!(cache.get((0, 1)).unwrap().0, Kind::Tree);
        cache.put((1, 1), Kind::Blob, object(60, 3));
        cache.put((2, 1), Kind::Blob, object(70, 4));
        cache.retain_packs(|serial| serial != 1);
        assert!(cache.get((1, 1)).is_none());
        assert_eq!(cache.held(), 120);
        assert_eq!(cache.len(), 2);
    }
}
