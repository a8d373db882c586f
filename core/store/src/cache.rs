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

/// A bounded map whose entries are valid for one store generation.
pub struct GenerationCache<K, V> {
    entries: Mutex<HashMap<K, (u64, V)>>,
    capacity: usize,
}

impl<K: Eq + Hash, V: Clone> GenerationCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        GenerationCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// The value stored for `key` under `generation`, if any.
    pub fn get<Q>(&self, key: &Q, generation: u64) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((g, value)) if *g == generation => Some(value.clone()),
            _ => None,
        }
    }

    /// Stores `value` for `key`, read under `generation`.
    pub fn insert(&self, key: K, generation: u64, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            entries.retain(|_, (g, _)| *g == generation);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, (generation, value));
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
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
