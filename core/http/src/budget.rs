//! A byte budget for request bodies read before their sender is known.
//!
//! A route reads its body before its handler can check who sent it, and limits are large
//! (2 MB by default, 25 MB for webhooks, 128 MB for key uploads): one such body is harmless,
//! one on each of thousands of connections is gigabytes. So every route's bodies share one
//! [`BodyBudget`], unless the route's head check ([`crate::router::Scope::route_guarded`])
//! knew the sender before the body was read. A body holds its bytes from the moment they are
//! admitted (a declared `Content-Length` at once, a chunked body frame by frame) until its
//! request is dropped, and a body that would take the total past the budget is refused with
//! a 503 and `Retry-After`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The default budget: two and a half of the largest webhooks (GitHub's 25 MB).
pub const DEFAULT_BODY_BUDGET: usize = 64 * 1024 * 1024;

/// Bytes of guarded bodies held at once, shared by every guarded route of a router.
#[derive(Debug)]
pub struct BodyBudget {
    limit: usize,
    held: AtomicUsize,
    refused: AtomicU64,
}

/// A body's share of the budget, given back when dropped. It rides in the request's
/// extensions, so it is held for as long as the handler holds the request.
#[derive(Debug)]
pub struct Held {
    budget: Arc<BodyBudget>,
    bytes: usize,
}

/// The budget has no room for the bytes asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

impl BodyBudget {
    pub fn new(limit: usize) -> Arc<BodyBudget> {
        Arc::new(BodyBudget {
            limit,
            held: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        })
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held by bodies now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Bodies refused for want of room since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// An empty share, to [`Held::grow`] as bytes arrive.
    pub fn hold(self: &Arc<Self>) -> Held {
        Held {
            budget: self.clone(),
            bytes: 0,
        }
    }
}

impl Held {
    /// Takes `more` bytes of the budget, or none if they do not fit (counted as a refusal).
    pub fn grow(&mut self, more: usize) -> Result<(), Exhausted> {
        let budget = &self.budget;
        let taken = budget
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(more)
                    .filter(|&total| total <= budget.limit)
            });
        match taken {
            Ok(_) => {
                self.bytes += more;
                Ok(())
            }
            Err(_) => {
                budget.refused.fetch_add(1, Ordering::Relaxed);
                Err(Exhausted)
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_hold_bytes_until_dropped_and_never_pass_the_limit() {
        let budget = BodyBudget::new(100);
        let mut a = budget.hold();
        let mut b = budget.hold();
        a.grow(60).unwrap();
        assert_eq!(b.grow(41), Err(Exhausted));
        b.grow(40).unwrap();
        assert_eq!((budget.held(), budget.refused()), (100, 1));
        assert_eq!(budget.hold().grow(1), Err(Exhausted));
        assert_eq!(budget.hold().grow(usize::MAX), Err(Exhausted));
        drop(a);
        assert_eq!(budget.held(), 40);
        b.grow(60).unwrap();
        assert_eq!(b.bytes(), 100);
        drop(b);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn concurrent_shares_stay_within_the_limit() {
        let budget = BodyBudget::new(1000);
        let peaks: Vec<_> = (0..8)
            .map(|_| {
                let budget = budget.clone();
                std::thread::spawn(move || {
                    let mut peak = 0;
                    for _ in 0..2000 {
                        let mut held = budget.hold();
                        if held.grow(300).is_ok() {
                            peak = peak.max(budget.held());
                        }
                    }
                    peak
                })
            })
            .collect();
        for peak in peaks {
            assert!(peak.join().unwrap() <= 1000);
        }
        assert_eq!(budget.held(), 0);
    }
}
