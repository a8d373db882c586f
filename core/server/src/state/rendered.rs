//! Rendered bodies of the hottest read endpoints, kept while the tables they were read from
//! are unchanged.
//!
//! A pipeline list, a pipeline with its steps, an events page and a repository are read far
//! more often than they change (a dashboard polls them; a change is a commit). Each entry is tagged with
//! the [store generation](crate::store::Store::generation) of the tables it was rendered
//! from, read before the rendering read, so a commit to those tables makes every older entry
//! a miss: a client never gets a body older than a write it has been answered for.
//! Authorisation is not cached here: handlers check access first (through the identity-tagged
//! caches of `ci::access`) and only then look up a body.
//!
//! Memory is bounded by bytes, not by a body's size: at most [`ENTRIES`] bodies and
//! [`BUDGET`] bytes per endpoint, a body of up to a quarter of that kept like any other. (A
//! 16 KiB limit per body once had a 25-pipeline list rendered on every request — on
//! PostgreSQL at a quarter of SQLite's rate.)

use bytes::Bytes;

use crate::ci::Reads;
use crate::store::cache::GenerationCache;

/// Bodies kept per endpoint.
pub const ENTRIES: usize = 256;
/// The bytes kept per endpoint.
pub const BUDGET: usize = 8 * 1024 * 1024;

/// What a pipeline body answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PipelinePage {
    /// `GET /repos/{id}/pipelines?{query}` (the raw query: equal queries render equally).
    List { repo_id: i64, query: String },
    /// `GET /repos/{id}/pipelines/{number}`.
    One { repo_id: i64, number: i64 },
}

/// Who reads an events page (`None`: an instance admin, who sees every event) and the raw
/// query string of the request.
pub type EventsPage = (Option<i64>, String);

pub struct RenderedPages {
    pub pipelines: Rendered<PipelinePage>,
    pub events: Rendered<EventsPage>,
    /// `GET /repos/{id}` by repository id, tagged with the identity generation (the
    /// repository's row is part of it).
    pub repos: Rendered<i64>,
}

impl Default for RenderedPages {
    fn default() -> Self {
        RenderedPages {
            pipelines: Rendered::new(),
            events: Rendered::new(),
            repos: Rendered::new(),
        }
    }
}

/// Bodies by key, valid for one generation.
pub struct Rendered<K> {
    bodies: GenerationCache<K, Bytes>,
}

impl<K: Eq + std::hash::Hash> Rendered<K> {
    fn new() -> Self {
        Rendered {
            bodies: GenerationCache::weighed(ENTRIES, BUDGET, Bytes::len),
        }
    }

    /// The body for `key` rendered under `generation`, else `render`'s (then kept).
    pub async fn get_or_render<E, F>(&self, key: K, generation: u64, render: F) -> Result<Bytes, E>
    where
        F: Future<Output = Result<String, E>>,
    {
        if let Some(body) = self.bodies.get(&key, generation) {
            return Ok(body);
        }
        let body = Bytes::from(render.await?);
        self.bodies.insert(key, generation, body.clone());
        Ok(body)
    }

    pub fn len(&self) -> usize {
        self.bodies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bodies.is_empty()
    }
}

/// The tag of an events page: it depends on the outbox and on who may see what (identity).
/// Both counters only grow, so their sum changes whenever either does.
pub fn events_generation(store: &Reads) -> u64 {
    use crate::store::Domain;
    store.generation(Domain::Events) + store.generation(Domain::Identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_is_served_again_only_within_its_generation() {
        let pages: Rendered<PipelinePage> = Rendered::new();
        let key = PipelinePage::One {
            repo_id: 1,
            number: 2,
        };
        let render = |s: &'static str| async move { Ok::<_, ()>(s.to_string()) };
        let first = pages.get_or_render(key.clone(), 7, render("a")).await;
        assert_eq!(first.unwrap(), "a");
        let again = pages.get_or_render(key.clone(), 7, render("b")).await;
        assert_eq!(again.unwrap(), "a", "same generation: the kept body");
        let newer = pages.get_or_render(key.clone(), 8, render("c")).await;
        assert_eq!(newer.unwrap(), "c", "a commit since: rendered again");
        let failed = pages
            .get_or_render(
                PipelinePage::One {
                    repo_id: 1,
                    number: 3,
                },
                8,
                async { Err::<String, _>("gone") },
            )
            .await;
        assert_eq!(failed, Err("gone"));
        assert_eq!(pages.len(), 1, "errors are not kept");
    }

    #[tokio::test]
    async fn a_big_body_is_kept_and_one_over_a_quarter_of_the_budget_is_not() {
        let pages: Rendered<EventsPage> = Rendered::new();
        for (n, size) in [(1, 64 * 1024), (2, BUDGET / 4 + 1)] {
            let body = "x".repeat(size);
            let got = pages
                .get_or_render((None, n.to_string()), 1, async {
                    Ok::<_, ()>(body.clone())
                })
                .await
                .unwrap();
            assert_eq!(got.len(), size);
        }
        assert_eq!(
            pages.len(),
            1,
            "the 64 KiB page is kept, the huge one is not"
        );
    }
}
