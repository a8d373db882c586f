//! Pipeline numbers known before the write that assigns them.
//!
//! A pipeline's number is final only inside its write transaction (one more than the
//! repository's highest), yet compiling its config needs it: `CI_PIPELINE_NUMBER`, the
//! pipeline URL and `${CI_PIPELINE_NUMBER}` substitutions anywhere in the YAML. Compiling
//! inside the write put the compiler (and sealing the compiled workflows) on the one writer
//! thread every write in the server queues for, about a sixth of its work per hook.
//!
//! So a creation compiles *before* its write, with the number it expects, and the write
//! checks the expectation against the table: equal, the compiled result is stored as it
//! is; different, the write compiles again with the real number (always correct, only
//! slower; [`NumberBook::misses`] counts it). On a database replicas share, where the
//! other replicas' creations take numbers this book never hears of, the write first gives
//! the number back (up to three times) and the creation compiles again outside the writer. Expectations come from this book: per
//! repository, the number the next submitted creation will get. Taking a [`Turn`] (one
//! per repository at a time), compiling and submitting the write happen in one turn, so
//! the writer meets the creations of a repository in the order their numbers were handed
//! out, and a burst of hooks to one repository does not miss.
//!
//! On a shared database the book also notes, with each number, how many pipeline changes
//! of other replicas this server had heard of ([`Store::generation_elsewhere`]); once
//! another replica has changed pipelines since, the entry is not trusted and the creation
//! reads the number from the table. So two replicas taking hooks for one repository in turn
//! rarely guess wrong: only when the other's commit has not reached this server yet.
//!
//! The book only ever guesses: a pipeline deleted from the top, a failed write or a config
//! whose filters read the number (stored in one compile, filtered out in the other) makes
//! the guess wrong, and the creation that finds out sets the book right when it settles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{Mutex, MutexGuard};
use woodlark_store::{Domain, Store};

/// Repositories share a lock when their ids fall in the same stripe; a turn is held for a
/// compile (well under a millisecond), so a few stripes keep repositories apart enough.
const STRIPES: usize = 16;

/// The next pipeline number of each repository, as far as submitted creations go.
pub struct NumberBook {
    stripes: Vec<Mutex<HashMap<i64, Entry>>>,
    misses: AtomicU64,
    given_back: AtomicU64,
    /// Other replicas' pipeline changes heard of so far (0 when there are none).
    elsewhere: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// A repository's next number, and what [`NumberBook::elsewhere`] said when it was noted.
#[derive(Debug, Clone, Copy)]
struct Entry {
    next: i64,
    elsewhere: u64,
}

impl Default for NumberBook {
    fn default() -> Self {
        NumberBook {
            stripes: (0..STRIPES).map(|_| Mutex::new(HashMap::new())).collect(),
            misses: AtomicU64::new(0),
            given_back: AtomicU64::new(0),
            elsewhere: Box::new(|| 0),
        }
    }
}

impl NumberBook {
    /// A book for a server on `store`: its entries go stale when another replica changes
    /// pipelines.
    pub fn following(store: Store) -> NumberBook {
        NumberBook {
            elsewhere: Box::new(move || store.generation_elsewhere(Domain::Pipelines)),
            ..NumberBook::default()
        }
    }

    /// Waits for the repository's turn: until it is dropped, no other creation of the
    /// repository takes a number.
    pub async fn turn(&self, repo_id: i64) -> Turn<'_> {
        let stripe = repo_id.rem_euclid(STRIPES as i64) as usize;
        let next = self.stripes[stripe].lock().await;
        Turn {
            next,
            repo_id,
            elsewhere: (self.elsewhere)(),
        }
    }

    /// After a creation's write: its turn set the next number to `promised`; the write left
    /// it at `actual` (`None`: the write failed). If they differ, the creations that took
    /// numbers after this one were compiled wrong too, and the last of them sets the book
    /// right when it settles; if none did, this one does.
    pub async fn settle(&self, repo_id: i64, promised: i64, actual: Option<i64>) {
        if actual == Some(promised) {
            return;
        }
        let mut turn = self.turn(repo_id).await;
        if turn.expected() == Some(promised) {
            match actual {
                Some(number) => turn.set_next(number),
                None => turn.forget(),
            }
        }
    }

    /// Records a write that found a number other than the one it was compiled with.
    pub fn missed(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a creation whose write found its number taken and gave it back.
    pub fn gave_back(&self) {
        self.given_back.fetch_add(1, Ordering::Relaxed);
    }

    /// Numbers given back so far (see [`NumberBook::gave_back`]).
    pub fn given_back(&self) -> u64 {
        self.given_back.load(Ordering::Relaxed)
    }

    /// Creations compiled again inside their write because the guess was wrong.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }
}

/// One repository's turn at the book.
pub struct Turn<'a> {
    next: MutexGuard<'a, HashMap<i64, Entry>>,
    repo_id: i64,
    /// Other replicas' pipeline changes heard of as the turn began.
    elsewhere: u64,
}

impl Turn<'_> {
    /// The number the next creation should get, if the book knows it (and no other replica
    /// changed pipelines since it was noted).
    pub fn expected(&self) -> Option<i64> {
        self.next
            .get(&self.repo_id)
            .filter(|entry| entry.elsewhere == self.elsewhere)
            .map(|entry| entry.next)
    }

    /// Sets the number the next creation should get.
    pub fn set_next(&mut self, number: i64) {
        let entry = Entry {
            next: number,
            elsewhere: self.elsewhere,
        };
        self.next.insert(self.repo_id, entry);
    }

    /// After a failed write: the table decides again.
    pub fn forget(&mut self) {
        self.next.remove(&self.repo_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_turn_hands_out_numbers_in_order_and_forgets_on_request() {
        let book = NumberBook::default();
        let mut turn = book.turn(7).await;
        assert_eq!(turn.expected(), None);
        turn.set_next(5);
        assert_eq!(turn.expected(), Some(5));
        turn.set_next(6);
        assert_eq!(turn.expected(), Some(6));
        drop(turn);
        // Another repository in the same stripe keeps its own number.
        let mut other = book.turn(7 + STRIPES as i64).await;
        assert_eq!(other.expected(), None);
        other.set_next(2);
        drop(other);
        let mut turn = book.turn(7).await;
        assert_eq!(turn.expected(), Some(6));
        turn.forget();
        assert_eq!(turn.expected(), None);
        drop(turn);
        assert_eq!(book.turn(7 + STRIPES as i64).await.expected(), Some(2));
    }

    #[tokio::test]
    async fn settling_corrects_the_book_only_for_the_last_creation_that_took_a_number() {
        let book = NumberBook::default();
        book.turn(1).await.set_next(6);
        // As promised: nothing to do.
        book.settle(1, 6, Some(6)).await;
        assert_eq!(book.turn(1).await.expected(), Some(6));
        // Wrong (the newest pipeline was deleted), and nobody took a number since: corrected.
        book.settle(1, 6, Some(5)).await;
        assert_eq!(book.turn(1).await.expected(), Some(5));
        // Wrong, but a later creation took 5 meanwhile (the book says 6): left to it.
        book.turn(1).await.set_next(6);
        book.settle(1, 5, Some(4)).await;
        assert_eq!(book.turn(1).await.expected(), Some(6));
        // That one settles as the last: corrected.
        book.settle(1, 6, Some(5)).await;
        assert_eq!(book.turn(1).await.expected(), Some(5));
        // A failed write: the table decides again.
        book.settle(1, 5, None).await;
        assert_eq!(book.turn(1).await.expected(), None);
    }

    /// Once another replica has changed pipelines, what the book noted before is not
    /// trusted; what it notes after is.
    #[tokio::test]
    async fn an_entry_goes_stale_when_another_replica_changes_pipelines() {
        let heard = Arc::new(AtomicU64::new(0));
        let book = NumberBook {
            elsewhere: Box::new({
                let heard = heard.clone();
                move || heard.load(Ordering::Relaxed)
            }),
            ..NumberBook::default()
        };
        book.turn(1).await.set_next(4);
        assert_eq!(book.turn(1).await.expected(), Some(4));
        heard.fetch_add(1, Ordering::Relaxed);
        assert_eq!(book.turn(1).await.expected(), None, "read from the table");
        book.turn(1).await.set_next(6);
        assert_eq!(book.turn(1).await.expected(), Some(6));
    }

    #[tokio::test]
    async fn a_repository_has_one_turn_at_a_time() {
        let book = NumberBook::default();
        let held = book.turn(3).await;
        let wait = std::time::Duration::from_millis(20);
        assert!(tokio::time::timeout(wait, book.turn(3)).await.is_err());
        // A repository in another stripe is not held up.
        assert!(tokio::time::timeout(wait, book.turn(4)).await.is_ok());
        drop(held);
        assert!(tokio::time::timeout(wait, book.turn(3)).await.is_ok());
        // Negative ids (never stored, but not a panic either) land in a stripe too.
        assert_eq!(book.turn(-3).await.expected(), None);
    }
}
