//! One leader per replica set across PostgreSQL restarts (issue 47): two replica servers on
//! one database of a cluster of the test's own, PostgreSQL restarted eight times; after each
//! restart exactly one replica leads within a few seconds, and a pipeline pushed then has
//! its commit statuses posted, each state once.
//!
//! It runs in the PostgreSQL pass (`WOODLARK_TEST_STORE=postgres`, as `.ci/test` runs it):
//! its servers need PostgreSQL whatever the pass, so the SQLite pass leaves it to that one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use woodlark_store::pg::testing::Cluster;

use crate::forges::gitea_round_trip_on_replicas;
use crate::util::{TestServer, on_postgres};

/// Restarts, as the issue counts them.
const RESTARTS: usize = 8;

/// How long PostgreSQL stays down, restart after restart.
const OUTAGES: [Duration; 2] = [Duration::from_millis(300), Duration::from_secs(2)];

/// How long after PostgreSQL is back one replica must lead.
const ELECTED_WITHIN: Duration = Duration::from_secs(5);

/// The servers whose main store leads; panics if a logs' store does.
fn leading(servers: &[&TestServer]) -> Vec<usize> {
    for s in servers {
        assert!(
            !*s.app_state.ci.log_reads.leadership().borrow(),
            "a logs' store leads"
        );
    }
    (0..servers.len())
        .filter(|i| *servers[*i].app_state.ci.reads.leadership().borrow())
        .collect()
}

/// Waits until exactly one of `servers` leads, looking every few milliseconds and failing
/// if two ever do; returns it and how long that took.
async fn one_leader(servers: &[&TestServer]) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        let now = leading(servers);
        assert!(now.len() < 2, "two leaders at once");
        if let [one] = now[..] {
            return (one, started.elapsed());
        }
        assert!(
            started.elapsed() < ELECTED_WITHIN,
            "no leader within {ELECTED_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Two replicas (one with the runner), PostgreSQL restarted eight times, cleanly and as a
/// crash in turn: after each, one leader, and a pipeline pushed then has each of its
/// states posted to the forge, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_posts_statuses_after_every_postgres_restart() {
    if !on_postgres() {
        eprintln!("runs in the PostgreSQL pass (WOODLARK_TEST_STORE=postgres)");
        return;
    }
    let cluster = Arc::new(Cluster::start());
    let url = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.database("replicas"))
            .await
            .unwrap()
    };
    let round = gitea_round_trip_on_replicas(url).await;
    let servers = round.servers();
    assert_eq!(servers.len(), 2);
    let mut elections = Vec::new();
    let mut led_by = Vec::new();
    for restart in 0..RESTARTS {
        // A clean stop (`-m fast`: every session told goodbye), then a crash (`-m
        // immediate`: sockets simply close).
        let down = cluster.clone();
        let clean = restart % 2 == 0;
        tokio::task::spawn_blocking(move || {
            if clean {
                down.stop_for_outage()
            } else {
                down.crash()
            }
        })
        .await
        .unwrap();
        tokio::time::sleep(OUTAGES[restart % OUTAGES.len()]).await;
        let up = cluster.clone();
        tokio::task::spawn_blocking(move || up.start_again())
            .await
            .unwrap();
        let (leader, took) = one_leader(&servers).await;
        elections.push(took);
        led_by.push(leader);
        round
            .push_and_check(&format!("RESTART-{restart}.md"), "success")
            .await;
        assert_eq!(
            leading(&servers),
            [leader],
            "restart {restart}: the lead moved meanwhile"
        );
    }
    eprintln!("a leader {elections:?} after PostgreSQL was back (replica {led_by:?})");
}
