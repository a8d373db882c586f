//! The access cache: what the CI API's access checks learned (tokens verified, permissions
//! on repositories, what a user may read), kept for one identity generation of the store
//! (see `store::cache`); the server's `modules::ci::access` fills and reads it.

use std::sync::Arc;

use serde_json::Value;

use crate::store::cache::GenerationCache;
use crate::store::repos::{Perm, RepoRow};
use crate::store::users::Account;

/// Entries per cache; past that, stale entries go, then everything (see `store::cache`).
const CACHE_ENTRIES: usize = 4096;

/// What verifying a token established, for the token's next requests.
#[derive(Clone)]
pub struct Verified {
    pub account: Arc<Account>,
    /// The token's claims and the key that signed it (a session's CSRF check needs both).
    pub claims: Arc<Value>,
    pub key: Arc<str>,
    pub session: bool,
    /// `exp` claim, checked on every use.
    pub expires: Option<i64>,
}

/// Cached answers of `access::current`, `access::repo` and `access::readable_by_caller`, valid for one
/// identity generation.
pub struct AccessCache {
    /// Raw token → what it proved. Only tokens that verified are kept.
    pub tokens: GenerationCache<String, Verified>,
    /// (caller's user id, 0 when anonymous; repository id) → the repository and the
    /// caller's permission on it (shared: a hit copies no field of the repository).
    pub repos: GenerationCache<(i64, i64), (Arc<RepoRow>, Perm)>,
    /// User id → the repositories and organisations that user may read (the events feed's
    /// visibility filter; computing it reads every repository).
    pub readable: GenerationCache<i64, Arc<Readable>>,
}

/// Ids of the repositories and of the organisations a user may read.
pub type Readable = (Vec<i64>, Vec<i64>);

impl Default for AccessCache {
    fn default() -> Self {
        AccessCache {
            tokens: GenerationCache::new(CACHE_ENTRIES),
            repos: GenerationCache::new(CACHE_ENTRIES),
            readable: GenerationCache::new(CACHE_ENTRIES),
        }
    }
}
