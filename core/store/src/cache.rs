//! Caches of what requests read on every call but that changes rarely: who a token names, a
//! repository and a caller's permission on it, rendered pipeline and event pages.
//!
//! Correctness comes from the store, not from timeouts: each entry carries the
//! [generation](super::Store::generation) of the tables it was read from, read *before* the
//! read that produced it, and an entry whose generation is not the current one is a miss.
//! The writer bumps a domain's generation after every commit that touched one of its tables,
//! so a token rotation, a user deletion, a permission change or a new pipeline is seen by the
//! very next request.
//!
//! The cache is bounded: when it is full, stale entries go first, and if none are stale it is
//! emptied (a cold cache costs one read per key; unbounded growth would cost memory forever).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

/// A bounded map whose entries are valid for one store generation: at most `capacity`
/// entries and, for a weighed cache ([`GenerationCache::weighed`]), at most `budget` bytes.
pub struct GenerationCache<K, V> {
    entries: Mutex<Entries<K, V>>,
    capacity: usize,
    budget: usize,
    weigh: fn(&V) -> usize,
}

struct Entries<K, V> {
    map: HashMap<K, (u64, V)>,
    /// The weights of what `map` holds.
    used: usize,
}

impl<K: Eq + Hash, V: Clone> GenerationCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        GenerationCache::weighed(capacity, usize::MAX, |_| 0)
    }

    /// A cache bounded by entries and by the sum of its values' `weigh` (their bytes): a
    /// value heavier than a quarter of `budget` is not kept, so no single one empties it.
    pub fn weighed(capacity: usize, budget: usize, weigh: fn(&V) -> usize) -> Self {
        GenerationCache {
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                used: 0,
            }),
            capacity: capacity.max(1),
            budget,
            weigh,
        }
    }

    /// The value stored for `key` under `generation`, if any.
    pub fn get<Q>(&self, key: &Q, generation: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.map.get(key) {
            Some((g, value)) if *g == generation => Some(value.clone()),
            _ => None,
        }
    }

    /// Stores `value` for `key`, read under `generation` (unless it alone outweighs a
    /// quarter of the budget).
    pub fn insert(&self, key: K, generation: u64, value: V) {
        let weight = (self.weigh)(&value);
        if weight > self.budget / 4 {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let Entries { map, used } = &mut *entries;
        if let Some((_, old)) = map.remove(&key) {
            *used -= (self.weigh)(&old);
        }
        let fits = |map: &HashMap<K, (u64, V)>, used: usize| {
            map.len() < self.capacity && used + weight <= self.budget
        };
        if !fits(map, *used) {
            map.retain(|_, (g, _)| *g == generation);
            *used = map.values().map(|(_, v)| (self.weigh)(v)).sum();
            if !fits(map, *used) {
                map.clear();
                *used = 0;
            }
        }
        map.insert(key, (generation, value));
        *used += weight;
    }

    pub fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .len()
    }

    /// The weight of what is kept (bytes, for a weighed cache).
    pub fn weight(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).used
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Store;

    #[test]
    fn entries_live_for_one_generation_and_the_cache_stays_bounded() {
        let cache: GenerationCache<String, i32> = GenerationCache::new(2);
        cache.insert("a".into(), 1, 10);
        assert_eq!(cache.get("a", 1), Some(10));
        assert_eq!(cache.get("a", 2), None, "another generation is a miss");
        cache.insert("b".into(), 2, 20);
        // Full: the stale entry ("a", generation 1) makes room first.
        cache.insert("c".into(), 2, 30);
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("a", 1), None);
        assert_eq!(cache.get("b", 2), Some(20));
        // Full of current entries: emptied, then the new one stored.
        cache.insert("d".into(), 2, 40);
        assert_eq!((cache.len(), cache.get("d", 2)), (1, Some(40)));
    }

    #[test]
    fn a_weighed_cache_keeps_its_values_within_the_budget() {
        let cache: GenerationCache<u32, Vec<u8>> = GenerationCache::weighed(100, 100, Vec::len);
        cache.insert(1, 1, vec![0; 26]);
        assert_eq!(cache.len(), 0, "over a quarter of the budget: not kept");
        for key in 0..4 {
            cache.insert(key, 1, vec![0; 25]);
        }
        assert_eq!((cache.len(), cache.weight()), (4, 100));
        cache.insert(2, 1, vec![0; 10]);
        assert_eq!(cache.weight(), 85, "a replaced value's weight goes with it");
        // Past the budget under a newer generation: the stale entries make room.
        cache.insert(9, 2, vec![0; 20]);
        assert_eq!((cache.len(), cache.weight()), (1, 20));
        for key in 10..13 {
            cache.insert(key, 2, vec![0; 25]);
        }
        assert_eq!(cache.weight(), 95);
        // Full of current entries: emptied, then the new one kept.
        cache.insert(20, 2, vec![0; 25]);
        assert_eq!((cache.len(), cache.weight()), (1, 25));
        assert_eq!(cache.get(&20, 2).map(|v| v.len()), Some(25));
    }

    #[tokio::test]
    async fn the_generation_moves_only_when_an_identity_table_changes() {
        let (_dir, store) = crate::test_store();
        let g0 = store.identity_generation();
        store
            .write(|c| {
                c.execute_batch(
                    "CREATE TABLE unrelated (v INTEGER); INSERT INTO unrelated VALUES (1)",
                )?;
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(
            store.identity_generation(),
            g0,
            "other tables leave it alone"
        );
        store.ping().await.unwrap();
        assert_eq!(store.identity_generation(), g0);
        store
            .write(|c| {
                c.execute(
                    "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///x', '{}', 's')",
                    [],
                )?;
                Ok(())
            })
            .await
            .unwrap();
        let g1 = store.identity_generation();
        assert!(g1 > g0, "a new forge row moves it");
        // A failed job's change is rolled back; the generation may move (an extra miss) but
        // never goes back.
        let _ = store
            .write(|c| -> crate::StoreResult<()> {
                c.execute("DELETE FROM forges WHERE id > 0", [])?;
                Err(crate::StoreError::Conflict("no".into()))
            })
            .await;
        assert!(store.identity_generation() >= g1);
    }

    #[tokio::test]
    async fn each_domain_counts_only_its_own_tables() {
        use crate::Domain;
        let (_dir, store) = crate::test_store();
        let all = |s: &Store| {
            [Domain::Identity, Domain::Pipelines, Domain::Events].map(|d| s.generation(d))
        };
        let before = all(&store);
        store
            .write(|c| {
                let owner = crate::events::Owner {
                    org_id: None,
                    repo_id: None,
                };
                let action = crate::events::Action::Created;
                let users = crate::events::RecordType::Users;
                crate::events::append(c, users, action, 1, &serde_json::json!({}), owner)?;
                Ok(())
            })
            .await
            .unwrap();
        let [identity, pipelines, events] = all(&store);
        assert_eq!((identity, pipelines), (before[0], before[1]));
        assert!(
            events > before[2],
            "an appended event moves the events domain"
        );
        store
            .write(|c| {
                c.execute("DELETE FROM steps WHERE id = -1", [])?;
                c.execute(
                    "INSERT INTO forges (type, url, data, webhook_secret) VALUES ('git', 'file:///y', '{}', 's')",
                    [],
                )?;
                Ok(())
            })
            .await
            .unwrap();
        let after = all(&store);
        assert_eq!(
            after[1], pipelines,
            "an update that touched no row changes nothing"
        );
        assert!(after[0] > identity);
        assert_eq!(after[2], events);
    }
}
