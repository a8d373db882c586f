//! Long-lived `git cat-file --batch` sessions, pooled per repository.
//!
//! Starting `git` costs ~2.5 ms (fork/exec, repository discovery, pack index loading); a
//! session that is already running answers an object question in tens of microseconds. The
//! pool keeps sessions between requests:
//!
//! - **Bounded.** At most [`Limits::per_repo`] sessions of one repository exist at once
//!   (a caller beyond that waits for one to come back, at most [`Limits::timeout`]), and at
//!   most [`Limits::idle_total`] idle sessions over all repositories (the oldest goes first).
//! - **Reaped.** A session idle for [`Limits::idle_ttl`] is killed by a background thread.
//! - **Never reused after a failure.** A session whose answer failed, broke off or timed out
//!   ([`CatFile::is_usable`]) is killed instead of going back: its pipe may hold half an
//!   answer. Every answer has a read timeout, so no request hangs on a dead pipe.
//! - **Keyed by directory and inode.** A repository deleted and created again at the same
//!   path gets new sessions, not ones still reading the old directory.
//!
//! A session sees objects and refs written after it started (git looks for new packs when
//! an object is missing, and reads refs on every question).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use crate::{CatFile, GitError};

/// How many sessions the pool keeps, for how long, and how long an answer may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub per_repo: usize,
    pub idle_total: usize,
    pub idle_ttl: Duration,
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            // Two cores answer no faster with more git processes per repository.
            per_repo: 4,
            idle_total: 32,
            idle_ttl: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }
}

/// A repository directory as the pool tells them apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RepoKey {
    dir: PathBuf,
    dev: u64,
    ino: u64,
}

struct Idle {
    cat: CatFile,
    since: Instant,
}

#[derive(Default)]
struct RepoSessions {
    /// Idle sessions, the most recently used last.
    idle: Vec<Idle>,
    /// Sessions that exist: idle, lent out, or starting.
    live: usize,
}

#[derive(Default)]
struct State {
    repos: HashMap<RepoKey, RepoSessions>,
    idle_total: usize,
}

pub struct Pool {
    state: Mutex<State>,
    /// Signalled whenever a session comes back or goes away.
    freed: Condvar,
    limits: Limits,
}

static POOL: LazyLock<Pool> = LazyLock::new(|| Pool::new(Limits::default()));
static REAPER: Once = Once::new();

/// Runs `f` with a session of the repository in `dir` from the process-wide pool.
pub fn with_session<T>(
    dir: &Path,
    f: impl FnOnce(&mut CatFile) -> Result<T, GitError>,
) -> Result<T, GitError> {
    REAPER.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("git-sessions".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(POOL.limits.idle_ttl / 2);
                    POOL.reap(Instant::now());
                }
            });
        if let Err(err) = spawned {
            tracing::warn!(%err, "cannot start the git session reaper; idle sessions stay");
        }
    });
    POOL.with(dir, f)
}

impl Pool {
    pub fn new(limits: Limits) -> Pool {
        Pool {
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
            limits,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with a session of the repository in `dir`: an idle one, a new one, or the
    /// next one to come back when the repository has [`Limits::per_repo`] already.
    pub fn with<T>(
        &self,
        dir: &Path,
        f: impl FnOnce(&mut CatFile) -> Result<T, GitError>,
    ) -> Result<T, GitError> {
        let meta = std::fs::metadata(dir).map_err(|source| GitError::Spawn {
            dir: dir.to_path_buf(),
            source,
        })?;
        let key = RepoKey {
            dir: dir.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let mut lease = self.checkout(&key)?;
        let result = match lease.cat.as_mut() {
            Some(cat) => f(cat),
            None => Err(GitError::Ended {
                spec: String::new(),
            }),
        };
        drop(lease);
        result
    }

    fn checkout(&self, key: &RepoKey) -> Result<Lease<'_>, GitError> {
        let deadline = Instant::now() + self.limits.timeout;
        let mut state = self.lock();
        loop {
            let repo = state.repos.entry(key.clone()).or_default();
            if let Some(idle) = repo.idle.pop() {
                state.idle_total = state.idle_total.saturating_sub(1);
                return Ok(self.lease(key, idle.cat));
            }
            if repo.live < self.limits.per_repo {
                repo.live += 1;
                drop(state);
                return match CatFile::start(&key.dir, self.limits.timeout) {
                    Ok(cat) => Ok(self.lease(key, cat)),
                    Err(err) => {
                        self.forget(&mut self.lock(), key, 1);
                        Err(err)
                    }
                };
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(GitError::Busy {
                    dir: key.dir.clone(),
                    waited: self.limits.timeout,
                });
            }
            state = self
                .freed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn lease(&self, key: &RepoKey, cat: CatFile) -> Lease<'_> {
        Lease {
            pool: self,
            key: key.clone(),
            cat: Some(cat),
        }
    }

    /// `gone` sessions of `key` no longer exist; wakes the waiters.
    fn forget(&self, state: &mut State, key: &RepoKey, gone: usize) {
        if let Some(repo) = state.repos.get_mut(key) {
            repo.live = repo.live.saturating_sub(gone);
            if repo.live == 0 && repo.idle.is_empty() {
                state.repos.remove(key);
            }
        }
        self.freed.notify_all();
    }

    /// Takes back a lent session: idle again if it still works, else killed.
    fn give_back(&self, key: &RepoKey, cat: CatFile) {
        let mut state = self.lock();
        if !cat.is_usable() {
            self.forget(&mut state, key, 1);
            drop(state);
            drop(cat);
            return;
        }
        let since = Instant::now();
        state
            .repos
            .entry(key.clone())
            .or_default()
            .idle
            .push(Idle { cat, since });
        state.idle_total += 1;
        let evicted = if state.idle_total > self.limits.idle_total {
            self.take_idle(&mut state, |_| true, 1)
        } else {
            Vec::new()
        };
        self.freed.notify_all();
        drop(state);
        drop(evicted);
    }

    /// Kills the sessions idle since before `now - idle_ttl`.
    pub fn reap(&self, now: Instant) {
        let ttl = self.limits.idle_ttl;
        let mut state = self.lock();
        let stale = self.take_idle(
            &mut state,
            |since| now.duration_since(since) >= ttl,
            usize::MAX,
        );
        drop(state);
        drop(stale);
    }

    /// Removes up to `max` idle sessions whose idle start `pick` accepts, oldest first;
    /// the caller drops (kills) them after releasing the lock.
    fn take_idle(
        &self,
        state: &mut State,
        pick: impl Fn(Instant) -> bool,
        max: usize,
    ) -> Vec<CatFile> {
        let mut candidates: Vec<(Instant, RepoKey)> = state
            .repos
            .iter()
            .flat_map(|(key, repo)| {
                repo.idle
                    .iter()
                    .filter(|i| pick(i.since))
                    .map(move |i| (i.since, key.clone()))
            })
            .collect();
        candidates.sort_by_key(|(since, _)| *since);
        let mut taken = Vec::new();
        for (since, key) in candidates.into_iter().take(max) {
            let Some(repo) = state.repos.get_mut(&key) else {
                continue;
            };
            if let Some(at) = repo.idle.iter().position(|i| i.since == since) {
                taken.push(repo.idle.remove(at).cat);
                state.idle_total = state.idle_total.saturating_sub(1);
                self.forget(state, &key, 1);
            }
        }
        taken
    }

    #[cfg(test)]
    fn counts(&self, dir: &Path) -> (usize, usize) {
        let state = self.lock();
        state
            .repos
            .iter()
            .find(|(k, _)| k.dir == dir)
            .map(|(_, r)| (r.live, r.idle.len()))
            .unwrap_or((0, 0))
    }
}

/// A session lent out; it goes back to the pool (or is killed) when dropped, also when the
/// borrower panics.
struct Lease<'p> {
    pool: &'p Pool,
    key: RepoKey,
    cat: Option<CatFile>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(cat) = self.cat.take() {
            self.pool.give_back(&self.key, cat);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::repo;
    use std::sync::Arc;

    fn limits() -> Limits {
        Limits {
            per_repo: 2,
            idle_total: 3,
            idle_ttl: Duration::from_secs(60),
            timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn sessions_are_reused_bounded_and_reaped() {
        let (dir, head) = repo();
        let pool = Pool::new(limits());
        let found = pool.with(dir.path(), |cat| cat.get(&head)).unwrap();
        assert_eq!(found.unwrap().kind, crate::Kind::Commit);
        assert_eq!(pool.counts(dir.path()), (1, 1));
        // Sequential use reuses the one session.
        for _ in 0..5 {
            pool.with(dir.path(), |cat| cat.get(&head)).unwrap();
        }
        assert_eq!(pool.counts(dir.path()), (1, 1));

        // Nested use takes a second session; a third waits, then gives up (Busy).
        pool.with(dir.path(), |_| {
            pool.with(dir.path(), |_| {
                assert!(matches!(
                    pool.with(dir.path(), |_| Ok(())),
                    Err(GitError::Busy { .. })
                ));
                Ok(())
            })
        })
        .unwrap();
        assert_eq!(pool.counts(dir.path()), (2, 2));

        // Idle sessions older than the TTL are killed.
        pool.reap(Instant::now());
        assert_eq!(pool.counts(dir.path()), (2, 2));
        pool.reap(Instant::now() + Duration::from_secs(61));
        assert_eq!(pool.counts(dir.path()), (0, 0));
    }

    #[test]
    fn a_waiter_gets_the_session_that_comes_back() {
        let (dir, head) = repo();
        let pool = Arc::new(Pool::new(Limits {
            per_repo: 1,
            timeout: Duration::from_secs(5),
            ..limits()
        }));
        let (p2, d2, h2) = (pool.clone(), dir.path().to_path_buf(), head.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            p2.with(&d2, |cat| {
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                cat.get(&h2)
            })
            .unwrap()
        });
        rx.recv().unwrap();
        assert!(
            pool.with(dir.path(), |cat| cat.get(&head))
                .unwrap()
                .is_some()
        );
        assert!(holder.join().unwrap().is_some());
        assert_eq!(pool.counts(dir.path()), (1, 1));
    }

    #[test]
    fn a_broken_or_hung_session_is_killed_not_reused() {
        let (dir, head) = repo();
        let pool = Pool::new(limits());
        // A session whose git died: the question fails and the session is dropped.
        let err = pool
            .with(dir.path(), |cat| {
                cat.kill_for_test();
                cat.get(&head)
            })
            .unwrap_err();
        assert!(
            matches!(err, GitError::Ended { .. } | GitError::Io { .. }),
            "{err}"
        );
        assert_eq!(pool.counts(dir.path()), (0, 0));
        // A session that does not answer in time: a timeout, not a hang.
        let started = Instant::now();
        let err = pool
            .with(dir.path(), |cat| {
                cat.stop_for_test();
                cat.get(&head)
            })
            .unwrap_err();
        assert!(matches!(err, GitError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(pool.counts(dir.path()), (0, 0));
        // The next caller gets a fresh, working session.
        assert!(
            pool.with(dir.path(), |cat| cat.get(&head))
                .unwrap()
                .is_some()
        );
        assert_eq!(pool.counts(dir.path()), (1, 1));
    }

    #[test]
    fn idle_sessions_are_bounded_over_all_repositories() {
        let pool = Pool::new(limits());
        let repos: Vec<_> = (0..5).map(|_| repo()).collect();
        for (dir, head) in &repos {
            pool.with(dir.path(), |cat| cat.get(head)).unwrap();
        }
        let idle: usize = repos.iter().map(|(d, _)| pool.counts(d.path()).1).sum();
        assert_eq!(idle, 3);
        // The oldest went first.
        assert_eq!(pool.counts(repos[0].0.path()), (0, 0));
        assert_eq!(pool.counts(repos[4].0.path()), (1, 1));
    }

    #[test]
    fn a_repository_made_again_at_the_same_path_gets_new_sessions() {
        let (dir, _) = repo();
        let pool = Pool::new(limits());
        pool.with(dir.path(), |_| Ok(())).unwrap();
        let moved = dir.path().with_extension("old");
        std::fs::rename(dir.path(), &moved).unwrap();
        let head = {
            let (fresh, head) = repo();
            std::fs::rename(fresh.path(), dir.path()).unwrap();
            std::mem::forget(fresh);
            head
        };
        let got = pool.with(dir.path(), |cat| cat.get(&head)).unwrap();
        assert!(got.is_some(), "a session of the old directory answered");
        std::fs::remove_dir_all(&moved).unwrap();
    }
}
