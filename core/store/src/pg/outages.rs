//! Replicas through PostgreSQL outages (issue 47): each restart ends with exactly one
//! leader within a few seconds, never two at once, and writes work again (on a cluster of
//! the test's own, as it is stopped and started); a leader whose session is cut without a
//! word gives up within the detection delay.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::testing::Cluster;
use crate::{Store, StoreOptions};

/// Restarts in the test, as the issue counts them.
const RESTARTS: usize = 8;

/// How long after PostgreSQL is back a leader must be.
const ELECTED_WITHIN: Duration = Duration::from_secs(3);

/// How long PostgreSQL stays down, restart after restart: a quick restart, and outages long
/// enough that listeners fail to reconnect a few times first.
const OUTAGES: [Duration; 3] = [
    Duration::from_millis(300),
    Duration::from_secs(1),
    Duration::from_secs(3),
];

/// How often the sampler looks at every store's leadership.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// What the sampler saw: the most stores leading at one moment (main stores), and whether a
/// logs' store ever led.
#[derive(Default)]
struct Seen {
    most_leaders: usize,
    logs_led: bool,
}

/// Looks at every store's leadership every [`SAMPLE_EVERY`] until `stop`.
fn sample(
    mains: Vec<tokio::sync::watch::Receiver<bool>>,
    logs: Vec<tokio::sync::watch::Receiver<bool>>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            let leaders = mains.iter().filter(|l| *l.borrow()).count();
            let logs_led = logs.iter().any(|l| *l.borrow());
            let mut seen = seen.lock().unwrap();
            seen.most_leaders = seen.most_leaders.max(leaders);
            seen.logs_led |= logs_led;
            drop(seen);
            std::thread::sleep(SAMPLE_EVERY);
        }
    })
}

/// The index of the one leading store, if exactly one leads.
fn leader(stores: &[Store]) -> Option<usize> {
    let leading: Vec<usize> = (0..stores.len())
        .filter(|i| *stores[*i].leadership().borrow())
        .collect();
    (leading.len() == 1).then(|| leading[0])
}

/// Waits until exactly one of `stores` leads; returns it and how long that took.
async fn elected(stores: &[Store], within: Duration) -> (usize, Duration) {
    let started = Instant::now();
    loop {
        if let Some(i) = leader(stores) {
            return (i, started.elapsed());
        }
        assert!(started.elapsed() < within, "no leader within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs a blocking cluster tool off the runtime's threads.
async fn on_thread(f: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(f).await.unwrap();
}

/// Three replicas, each with its main store and its logs' store (which never competes, as
/// servers open it); PostgreSQL restarted eight times, down for a moment or for seconds.
/// Each time: the old leader gives up as soon as its session is cut, exactly one main store
/// leads within a few seconds of PostgreSQL being back, no two ever at once, and every
/// replica can write again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_after_every_postgres_restart() {
    let cluster = Arc::new(Cluster::start());
    let url = {
        let cluster = cluster.clone();
        std::thread::spawn(move || cluster.database("replicas"))
            .join()
            .unwrap()
    };
    let logs_options = StoreOptions {
        competes_for_lead: false,
        ..StoreOptions::default()
    };
    let mut mains = Vec::new();
    let mut logs = Vec::new();
    for _ in 0..3 {
        mains.push(Store::open_postgres(&url, &StoreOptions::default()).unwrap());
        logs.push(Store::open_postgres(&url, &logs_options).unwrap());
    }
    let (mut first, _) = elected(&mains, ELECTED_WITHIN).await;
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sampler = sample(
        mains.iter().map(Store::leadership).collect(),
        logs.iter().map(Store::leadership).collect(),
        stop.clone(),
        seen.clone(),
    );
    let mut gave_up = Vec::new();
    let mut elections = Vec::new();
    for round in 0..RESTARTS {
        let old = mains[first].leadership();
        let stopping = Instant::now();
        let down = cluster.clone();
        on_thread(move || down.crash()).await;
        let deadline = stopping + Duration::from_secs(2);
        while *old.borrow() {
            assert!(
                Instant::now() < deadline,
                "round {round}: the old leader still leads"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        gave_up.push(stopping.elapsed());
        tokio::time::sleep(OUTAGES[round % OUTAGES.len()]).await;
        let up = cluster.clone();
        on_thread(move || up.start_again()).await;
        let (now, took) = elected(&mains, ELECTED_WITHIN).await;
        elections.push(took);
        first = now;
        for (i, store) in mains.iter().chain(&logs).enumerate() {
            store
                .write(move |c| crate::meta::set(c, "restart", &format!("{round}.{i}")))
                .await
                .unwrap_or_else(|e| panic!("round {round}: store {i} cannot write: {e}"));
        }
    }
    stop.store(true, Ordering::Release);
    sampler.join().unwrap();
    let seen = seen.lock().unwrap();
    eprintln!(
        "old leader gave up after {gave_up:?} of the stop; a leader {elections:?} after the start"
    );
    assert_eq!(seen.most_leaders, 1, "two leaders at once");
    assert!(!seen.logs_led, "a logs' store led");
    for store in mains.iter().chain(&logs) {
        store.close();
    }
}

/// A TCP relay to the cluster that can go silent, as a network that drops everything
/// without closing anything: while frozen no byte passes either way, and no connection it
/// relays is closed (the database's goodbye never reaches the client).
struct Relay {
    port: u16,
    frozen: Arc<AtomicBool>,
    closed: Arc<AtomicBool>,
}

impl Relay {
    fn to(upstream: u16) -> Relay {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (frozen, closed) = (Arc::<AtomicBool>::default(), Arc::<AtomicBool>::default());
        let (f, c) = (frozen.clone(), closed.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else {
                    return;
                };
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let (f, c) = (f.clone(), c.clone());
                    std::thread::spawn(move || pass(from, to, &f, &c));
                }
            }
        });
        Relay {
            port,
            frozen,
            closed,
        }
    }

    fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::Release);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// Copies `from` to `to` while not frozen, until either end closes or the relay does.
fn pass(
    mut from: std::net::TcpStream,
    mut to: std::net::TcpStream,
    frozen: &AtomicBool,
    closed: &AtomicBool,
) {
    use std::io::{Read, Write};
    from.set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    let mut buf = [0u8; 16 * 1024];
    while !closed.load(Ordering::Acquire) {
        if frozen.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Both);
}

/// Ends the session holding the leader lock from the database's side (as a failover or the
/// server's own keepalive would); returns how many sessions it ended.
fn end_the_leaders_session(url: &str) -> i64 {
    let mut admin = super::connect(url).unwrap();
    admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
             AND ((classid::bigint << 32) | objid::bigint) = $1",
            &[&crate::LEADER_LOCK],
        )
        .unwrap()
        .get(0)
}

/// A leader whose session is cut without a word (its packets dropped, the database's
/// goodbye lost: a partition, the database's host gone) stops leading within the detection
/// delay, although its socket never closes; the replica that took the lock meanwhile leads
/// alone after that, and once the network is back the old leader follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_without_a_word_gives_up_the_lead() {
    let cluster = Cluster::shared();
    let url = cluster.fresh_database();
    let relay = Relay::to(cluster.port());
    let relayed = url.replace(
        &format!("127.0.0.1:{}/", cluster.port()),
        &format!("127.0.0.1:{}/", relay.port),
    );
    let options = StoreOptions::default();
    let cut = Store::open_postgres(&relayed, &options).unwrap();
    assert_eq!(
        elected(std::slice::from_ref(&cut), ELECTED_WITHIN).await.0,
        0
    );
    let other = Store::open_postgres(&url, &options).unwrap();
    let stores = [cut, other];
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        leader(&stores),
        Some(0),
        "the first store still leads alone"
    );
    relay.freeze(true);
    let ended = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || end_the_leaders_session(&url))
            .await
            .unwrap()
    };
    assert_eq!(ended, 1);
    let cut_at = Instant::now();
    let (mut gave_up, mut took_over) = (None, None);
    while gave_up.is_none() || took_over.is_none() {
        assert!(
            cut_at.elapsed() < Duration::from_secs(5),
            "after {:?}: the cut leader gave up {gave_up:?}, the other took over {took_over:?}",
            cut_at.elapsed()
        );
        if gave_up.is_none() && !*stores[0].leadership().borrow() {
            gave_up = Some(cut_at.elapsed());
        }
        if took_over.is_none() && *stores[1].leadership().borrow() {
            took_over = Some(cut_at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (gave_up, took_over) = (gave_up.unwrap(), took_over.unwrap());
    eprintln!(
        "silent cut: the cut leader gave up after {gave_up:?}, the other led after {took_over:?} \
         (both led for {:?})",
        gave_up.saturating_sub(took_over)
    );
    relay.freeze(false);
    // Back on the network, the old leader reconnects and follows.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(leader(&stores), Some(1));
    for store in &stores {
        store.close();
    }
}
