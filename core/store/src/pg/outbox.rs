//! The event outbox on PostgreSQL, with ids in commit order.
//!
//! **The trap.** With ids from a plain sequence, transaction A draws 41, transaction B draws
//! 42 and commits first; a reader pages, sees 42 and continues `starting_after` 42; A then
//! commits 41, which that reader never sees. Sequence order is the order transactions asked,
//! not the order they committed (`a_plain_sequence_loses_events_for_a_paging_reader` shows it).
//!
//! **The rule here.** A transaction takes a transaction-level advisory lock ([`OUTBOX_LOCK`])
//! before it draws its first id, and holds it until it commits or rolls back. So while one
//! transaction holds ids, no other can draw any: every id drawn later is larger *and*
//! belongs to a transaction that commits later. PostgreSQL makes a committed transaction
//! visible (removes it from the running set) before it releases its locks, so a snapshot that
//! sees an id sees every smaller id that was ever committed: a reader that pages by `seq`
//! skips nothing, on any replica, whatever its isolation level.
//!
//! **The cost.** Transactions that record events are serialised from their first event to
//! their commit. Each replica already funnels its writes through one writer thread that
//! commits them in groups, so the lock is contended only between replicas, once per group
//! commit; transactions without events never take it.

/// Advisory lock key of the outbox ("wl-outbx" in ASCII).
pub const OUTBOX_LOCK: i64 = 0x776c_2d6f_7574_6278;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::pg::testing::Cluster;

    fn ready(cluster: &Cluster, name: &str) -> String {
        let url = cluster.database(name);
        crate::pg::schema::migrate(&mut crate::pg::connect(&url).unwrap()).unwrap();
        url
    }

    /// Records one event in `tx` as the store does (the outbox lock first, when `locked`),
    /// with raw SQL so that two transactions can be held open side by side; returns its id.
    fn event(tx: &mut postgres::Transaction<'_>, id: &str, locked: bool) -> i64 {
        if locked {
            // Taken again by a transaction that holds it already: it stacks, and all go at
            // its end.
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&OUTBOX_LOCK])
                .unwrap();
        }
        tx.query_one(
            "INSERT INTO events (created_ms, record_type, action, record_id, object)
             VALUES (0, 'repo', 'created', $1, '{}') RETURNING seq",
            &[&id],
        )
        .unwrap()
        .get(0)
    }

    /// The ids after `after`, as a feed page reads them.
    fn seqs(client: &mut postgres::Client, after: i64) -> Vec<i64> {
        client
            .query(
                "SELECT seq FROM events WHERE seq > $1 ORDER BY seq",
                &[&after],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    /// The trap, shown: without the lock, a later commit of a smaller id is never seen by a
    /// reader that already paged past it.
    #[test]
    fn a_plain_sequence_loses_events_for_a_paging_reader() {
        let cluster = Cluster::start();
        let url = ready(&cluster, "trap");
        let (mut a, mut b, mut reader) = (
            crate::pg::connect(&url).unwrap(),
            crate::pg::connect(&url).unwrap(),
            crate::pg::connect(&url).unwrap(),
        );
        let mut slow = a.transaction().unwrap();
        let first = event(&mut slow, "a", false);
        let mut fast = b.transaction().unwrap();
        let second = event(&mut fast, "b", false);
        fast.commit().unwrap();
        assert!(first < second);
        let page = seqs(&mut reader, 0);
        assert_eq!(page, [second]);
        slow.commit().unwrap();
        // Paging on from where it was, the reader never meets `first`.
        assert_eq!(seqs(&mut reader, second), Vec::<i64>::new());
        assert_eq!(seqs(&mut reader, 0), [first, second]);
    }

    /// The rule: a second writer waits for the first one's commit before it draws an id, so
    /// ids follow commit order.
    #[test]
    fn the_outbox_lock_makes_ids_follow_commit_order() {
        let cluster = Cluster::start();
        let url = ready(&cluster, "order");
        let mut a = crate::pg::connect(&url).unwrap();
        let mut reader = crate::pg::connect(&url).unwrap();
        let mut slow = a.transaction().unwrap();
        let first = event(&mut slow, "a", true);
        let (drawn_tx, drawn) = mpsc::channel();
        let other = {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut b = crate::pg::connect(&url).unwrap();
                let mut fast = b.transaction().unwrap();
                let second = event(&mut fast, "b", true);
                drawn_tx.send(second).unwrap();
                fast.commit().unwrap();
                second
            })
        };
        // The second writer is held at the lock while the first is open.
        assert!(drawn.recv_timeout(Duration::from_millis(500)).is_err());
        assert_eq!(seqs(&mut reader, 0), Vec::<i64>::new());
        slow.commit().unwrap();
        let second = other.join().unwrap();
        assert!(first < second);
        assert_eq!(seqs(&mut reader, 0), [first, second]);
    }

    /// Many writers (some rolling back), one reader paging with its cursor all along: the
    /// reader ends up with every committed event, in order, none skipped.
    #[test]
    fn a_paging_reader_sees_every_committed_event_under_concurrent_writers() {
        let cluster = Cluster::start();
        let url = ready(&cluster, "stress");
        let done = AtomicBool::new(false);
        let (seen, committed) = std::thread::scope(|s| {
            let writers: Vec<_> = (0..4)
                .map(|w| {
                    let url = url.clone();
                    s.spawn(move || {
                        let mut client = crate::pg::connect(&url).unwrap();
                        let mut mine = Vec::new();
                        for n in 0..40 {
                            let mut tx = client.transaction().unwrap();
                            let ids: Vec<i64> = (0..1 + n % 3)
                                .map(|k| event(&mut tx, &format!("{w}-{n}-{k}"), true))
                                .collect();
                            // Hold the lock a little, as a group commit does.
                            std::thread::sleep(Duration::from_micros(300 * (n % 4)));
                            if n % 7 == 3 {
                                tx.rollback().unwrap();
                            } else {
                                tx.commit().unwrap();
                                mine.extend(ids);
                            }
                        }
                        mine
                    })
                })
                .collect();
            let reader = s.spawn(|| {
                let mut client = crate::pg::connect(&url).unwrap();
                let (mut cursor, mut seen) = (0, Vec::new());
                loop {
                    let last_round = done.load(Ordering::SeqCst);
                    let page = seqs(&mut client, cursor);
                    if let Some(last) = page.last() {
                        cursor = *last;
                    }
                    seen.extend(page);
                    if last_round {
                        return seen;
                    }
                }
            });
            let committed: BTreeSet<i64> = writers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect();
            done.store(true, Ordering::SeqCst);
            (reader.join().unwrap(), committed)
        });
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "out of order");
        let seen: BTreeSet<i64> = seen.into_iter().collect();
        let expected: usize = 4
            * (0..40)
                .filter(|n| n % 7 != 3)
                .map(|n| 1 + n % 3)
                .sum::<usize>();
        assert_eq!(committed.len(), expected, "writes lost");
        let skipped: Vec<&i64> = committed.difference(&seen).collect();
        assert!(skipped.is_empty(), "the reader skipped {skipped:?}");
        assert_eq!(seen, committed);
    }
}
