//! How many client connections the server holds at once, and what happens past that.
//!
//! Every open connection costs a file descriptor and hyper's buffers. Without a bound, a flood
//! of idle connections runs the process out of descriptors (then the database, the plugins'
//! cache and the runner fail too) and leaves hundreds of megabytes resident. So the accept
//! loop admits at most a fixed number of connections; one more is accepted, told
//! `503 Service Unavailable` in one non-blocking write, and closed: a clean, cheap refusal
//! instead of a connection that hangs in the kernel's backlog or an `EMFILE` for everyone.
//!
//! A place must not be held by a client that does nothing with it. So every connection is
//! timed from the moment it is accepted: one that has not begun a request within the header
//! timeout, or sits idle between requests for longer than the idle timeout, is closed
//! ([`Slot::expired`]). And when all places are taken, the connection idle the longest is
//! closed to make room for the new one ([`Admission::admit`]): a flood of sockets that send
//! nothing only ever displaces itself, never a client with a request in flight.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::AtomicWaker;
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::metrics::Metrics;

/// Descriptors kept out of the connection budget for everything else the process opens:
/// database files and their WAL, the plugin cache, runner pipes and git sessions, log files.
const FD_RESERVE: u64 = 256;

/// What a refused plain-HTTP client reads. Whole and short, so one write sends it.
pub const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
content-length: 45\r\n\
retry-after: 1\r\n\
connection: close\r\n\
\r\n\
the server has too many open connections now\n";

/// Raises this process's soft open-file limit to its hard limit (where the system allows)
/// and returns the soft limit in force afterwards, `None` where there is none to read.
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and fill the struct they are given.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return None;
            }
            if lim.rlim_cur < lim.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: lim.rlim_max,
                    rlim_max: lim.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    lim = raised;
                }
            }
        }
        if lim.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        Some(lim.rlim_cur)
    }
    #[cfg(not(unix))]
    None
}

/// The connection limit in force: `configured`, lowered to fit a soft open-file limit of
/// `fd_limit` with room left for the rest of the process (at least half of the limit).
pub fn effective_limit(configured: usize, fd_limit: Option<u64>) -> usize {
    let Some(fds) = fd_limit else {
        return configured;
    };
    let budget = fds - FD_RESERVE.min(fds / 2);
    configured
        .min(usize::try_from(budget).unwrap_or(usize::MAX))
        .max(1)
}

/// Evictions that may be on their way (the evicted connection's task not yet gone) before a
/// new connection is refused instead: the open count never runs more than this past the limit.
const EVICTIONS_IN_FLIGHT: u64 = 64;

/// How long connections may do nothing.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// From accept to the first request's headers (a TLS handshake included).
    pub first_request: Duration,
    /// Between the end of one response and the start of the next request.
    pub idle: Duration,
}

/// Admits connections up to a limit; the accept loop is its only caller.
pub struct Admission {
    metrics: Arc<Metrics>,
    limit: usize,
    /// Told when the open count reaches [`heap::FLOOD_MARK`](super::heap::FLOOD_MARK).
    flood: Arc<Notify>,
    slots: Arc<Slots>,
    timeouts: Timeouts,
}

/// The open connections' activity, by admission number.
#[derive(Default)]
struct Slots {
    open: Mutex<HashMap<u64, Arc<Slot>>>,
    /// Admitted connections not yet dropped, evicted ones on their way out included.
    live: AtomicUsize,
    /// Told when `live` falls to zero.
    all_gone: Notify,
}

/// One open connection's activity.
pub struct Slot {
    /// Requests in flight (an HTTP/2 connection may have several); their responses included,
    /// until the last byte of the body was handed to the socket.
    busy: Mutex<Activity>,
    /// What the connection's task is told: [`Signal`] bits, only ever set.
    signal: AtomicU8,
    /// The connection's task, woken when `signal` gains a bit. One atomic word to look at on
    /// each of the task's wake-ups, where a timer and two `Notify`s cost a lock each.
    task: AtomicWaker,
    /// Told when a request ends: the deadline moved (perhaps sooner than the one slept for).
    ended: Notify,
    timeouts: Timeouts,
}

/// Why a connection's task is told to stop: bits of [`Slot::signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Idle past its deadline: close now.
    Expired = 1,
    /// Its place went to a new connection: close now.
    Evicted = 2,
    /// The server is shutting down: finish the request in flight, then close.
    Drain = 4,
}

impl Signal {
    /// The reason to close now among `bits`, if any.
    pub fn close_in(bits: u8) -> Option<Signal> {
        [Signal::Evicted, Signal::Expired]
            .into_iter()
            .find(|s| bits & *s as u8 != 0)
    }
}

#[derive(Clone, Copy)]
struct Activity {
    in_flight: u32,
    /// When it was accepted, or its last request ended.
    since: Instant,
    /// Whether a request has begun on it.
    served: bool,
    /// When the connection's task looks at the deadline next ([`Slot::next_look`]).
    look_at: Option<Instant>,
}

impl Slot {
    fn new(timeouts: Timeouts) -> Slot {
        Slot {
            busy: Mutex::new(Activity {
                in_flight: 0,
                since: Instant::now(),
                served: false,
                look_at: None,
            }),
            signal: AtomicU8::new(0),
            task: AtomicWaker::new(),
            ended: Notify::new(),
            timeouts,
        }
    }

    fn activity(&self) -> Activity {
        *self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request began; it lasts until the guard is dropped (with the response's body).
    pub fn begin(self: &Arc<Self>) -> Busy {
        let mut a = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        a.in_flight += 1;
        a.served = true;
        Busy { slot: self.clone() }
    }

    /// When the connection, idle as it is now, must be closed; `None` while a request is in
    /// flight.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline_of(&self.activity())
    }

    fn deadline_of(&self, a: &Activity) -> Option<Instant> {
        (a.in_flight == 0).then(|| {
            a.since
                + if a.served {
                    self.timeouts.idle
                } else {
                    self.timeouts.first_request
                }
        })
    }

    /// When to look again: the deadline, or while busy the idle timeout from now (a request
    /// ending now moves the deadline to no earlier than that). Remembered, so that a request's
    /// end wakes the connection's task only when it moved the deadline sooner than that.
    pub fn next_look(&self) -> Instant {
        let mut a = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        let at = self
            .deadline_of(&a)
            .unwrap_or_else(|| Instant::now() + self.timeouts.idle);
        a.look_at = Some(at);
        at
    }

    /// Whether the connection has been idle past its deadline at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| d <= now)
    }

    /// Tells the connection's task `signal` and wakes it.
    pub fn tell(&self, signal: Signal) {
        self.signal.fetch_or(signal as u8, Ordering::AcqRel);
        self.task.wake();
    }

    /// What the connection's task has been told so far; `cx`'s task is woken when that
    /// changes. Cheap enough for every poll of the connection.
    pub fn poll_signal(&self, cx: &mut Context<'_>) -> u8 {
        self.task.register(cx.waker());
        self.signal.load(Ordering::Acquire)
    }

    /// Resolves when the connection must close now: evicted, or idle past its deadline.
    pub async fn closed(&self) -> Signal {
        std::future::poll_fn(|cx| match Signal::close_in(self.poll_signal(cx)) {
            Some(why) => Poll::Ready(why),
            None => Poll::Pending,
        })
        .await
    }

    /// Closes the connection when it has been idle past its deadline: the connection's own
    /// watchdog task, so that the connection's task polls no timer on its hot path. Sleeps to
    /// the deadline, waking sooner only when a request's end moved the deadline sooner.
    pub async fn watch_deadline(&self) {
        loop {
            let wake = self.next_look();
            tokio::select! {
                () = tokio::time::sleep_until(wake.into()) => {
                    if self.expired(Instant::now()) {
                        self.tell(Signal::Expired);
                        return;
                    }
                }
                () = self.request_ended() => {}
            }
        }
    }

    /// Resolves when a request ended since the last call: time to look at the deadline again.
    pub async fn request_ended(&self) {
        self.ended.notified().await
    }

    /// Idle since when; `None` while busy.
    fn idle_since(&self) -> Option<Instant> {
        let a = self.activity();
        (a.in_flight == 0).then_some(a.since)
    }
}

/// A request in flight on a connection; dropping it makes the connection idle again (if it
/// was the last).
pub struct Busy {
    slot: Arc<Slot>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let sooner = {
            let mut a = self.slot.busy.lock().unwrap_or_else(|p| p.into_inner());
            a.in_flight -= 1;
            a.since = Instant::now();
            let deadline = self.slot.deadline_of(&a);
            deadline.zip(a.look_at).is_some_and(|(d, look)| d < look)
        };
        // Most request ends move the deadline later than the task looks anyway: no wake-up
        // on the request path then.
        if sooner {
            self.slot.ended.notify_one();
        }
    }
}

/// An admitted connection; dropping it (when the connection's task ends) frees its place.
pub struct Admitted {
    metrics: Arc<Metrics>,
    slots: Arc<Slots>,
    id: u64,
    /// The connection's activity: what the timeouts and evictions go by.
    pub slot: Arc<Slot>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.slots
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
        self.metrics
            .connections
            .open
            .fetch_sub(1, Ordering::Relaxed);
        if self.slots.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.slots.all_gone.notify_waiters();
        }
    }
}

impl Admission {
    pub fn new(
        metrics: Arc<Metrics>,
        limit: usize,
        flood: Arc<Notify>,
        timeouts: Timeouts,
    ) -> Admission {
        metrics
            .connections
            .limit
            .store(limit as u64, Ordering::Relaxed);
        Admission {
            metrics,
            limit,
            flood,
            slots: Arc::default(),
            timeouts,
        }
    }

    /// A place for one more connection, or `None` (counted as refused) when all are taken by
    /// connections with a request in flight. When all are taken but some are idle, the one
    /// idle the longest is told to close and the new connection takes its place.
    pub fn admit(&self) -> Option<Admitted> {
        let counts = &self.metrics.connections;
        // Only the accept loop adds, so reading first cannot let two admissions overshoot.
        let open = counts.open.load(Ordering::Relaxed);
        if open >= self.limit as u64 {
            if open >= self.limit as u64 + EVICTIONS_IN_FLIGHT || !self.evict_the_longest_idle() {
                counts.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            counts.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let id = counts.admitted.fetch_add(1, Ordering::Relaxed);
        if counts.open.fetch_add(1, Ordering::Relaxed) + 1 == super::heap::FLOOD_MARK {
            self.flood.notify_one();
        }
        let slot = Arc::new(Slot::new(self.timeouts));
        self.slots.live.fetch_add(1, Ordering::AcqRel);
        self.slots
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, slot.clone());
        Some(Admitted {
            metrics: self.metrics.clone(),
            slots: self.slots.clone(),
            id,
            slot,
        })
    }

    /// Tells the connection idle the longest to close, and forgets it (its place is the new
    /// connection's); `false` if every connection has a request in flight.
    fn evict_the_longest_idle(&self) -> bool {
        let mut open = self.slots.open.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = open
            .iter()
            .filter_map(|(id, slot)| slot.idle_since().map(|since| (since, *id)))
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        if let Some(slot) = open.remove(&id) {
            slot.tell(Signal::Evicted);
        }
        true
    }

    /// Tells every open connection to finish the request in flight and close (shutdown).
    pub fn drain(&self) {
        for slot in self
            .slots
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            slot.tell(Signal::Drain);
        }
    }

    /// Resolves when every admitted connection is gone.
    pub async fn all_gone(&self) {
        loop {
            let gone = self.slots.all_gone.notified();
            tokio::pin!(gone);
            gone.as_mut().enable();
            if self.slots.live.load(Ordering::Acquire) == 0 {
                return;
            }
            gone.await;
        }
    }
}

/// Refuses an accepted connection without waiting for the peer: whatever request bytes
/// already arrived are read (so closing does not turn into a reset that could destroy the
/// answer), [`REFUSAL`] is written if the socket takes it now, and the socket is closed.
/// A TLS client gets no plain-text answer it could not read; its connection is just closed.
pub fn refuse(stream: TcpStream, tls: bool) {
    if !tls {
        let mut sink = [0u8; 4096];
        for _ in 0..4 {
            match stream.try_read(&mut sink) {
                Ok(n) if n == sink.len() => continue,
                _ => break,
            }
        }
        let _ = stream.try_write(REFUSAL);
    }
    drop(stream);
}

/// What the accept loop does after `accept` failed: pause (when the process or the system
/// is out of descriptors or memory, so the loop does not spin) and log at most once a second.
#[derive(Default)]
pub struct AcceptErrors {
    last_logged: Option<Instant>,
    suppressed: u64,
}

/// The pause after an `accept` that failed for lack of resources.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

impl AcceptErrors {
    /// Logs `err` (rate-limited) and returns how long to wait before accepting again.
    pub fn on_error(&mut self, err: &io::Error) -> Duration {
        let now = Instant::now();
        if self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            tracing::warn!(%err, suppressed = self.suppressed, "accept failed");
            self.last_logged = Some(now);
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
        }
        if out_of_resources(err) {
            ACCEPT_BACKOFF
        } else {
            // A connection that failed between the handshake and accept: take the next one.
            Duration::ZERO
        }
    }
}

/// Whether an `accept` error means the process or the system ran out of something (as
/// opposed to one client's connection failing).
fn out_of_resources(err: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(
            err.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
        )
    }
    #[cfg(not(unix))]
    {
        let _ = err;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_leaves_room_for_the_rest_of_the_process() {
        assert_eq!(effective_limit(4096, None), 4096);
        assert_eq!(effective_limit(4096, Some(1_048_576)), 4096);
        // The common default soft limit: 1024 - 256.
        assert_eq!(effective_limit(4096, Some(1024)), 768);
        assert_eq!(effective_limit(100, Some(1024)), 100);
        // A tiny limit keeps half for the rest.
        assert_eq!(effective_limit(4096, Some(200)), 100);
        assert_eq!(effective_limit(4096, Some(1)), 1);
    }

    const TIMEOUTS: Timeouts = Timeouts {
        first_request: Duration::from_secs(10),
        idle: Duration::from_secs(60),
    };

    #[test]
    fn admission_stops_at_the_limit_of_busy_connections_and_frees_places_on_drop() {
        let metrics = Arc::new(Metrics::default());
        let gate = Admission::new(metrics.clone(), 2, Arc::default(), TIMEOUTS);
        let a = gate.admit().expect("first");
        let b = gate.admit().expect("second");
        let (busy_a, busy_b) = (a.slot.begin(), b.slot.begin());
        assert!(gate.admit().is_none());
        assert_eq!(metrics.connections.refused.load(Ordering::Relaxed), 1);
        drop((a, busy_a));
        let c = gate.admit().expect("a freed place");
        let busy_c = c.slot.begin();
        assert!(gate.admit().is_none());
        drop((b, c, busy_b, busy_c));
        assert_eq!(metrics.connections.open.load(Ordering::Relaxed), 0);
        assert_eq!(metrics.connections.refused.load(Ordering::Relaxed), 2);
        assert_eq!(metrics.connections.evicted.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_full_house_closes_the_connection_idle_the_longest() {
        let metrics = Arc::new(Metrics::default());
        let gate = Admission::new(metrics.clone(), 3, Arc::default(), TIMEOUTS);
        // Admitted in the same instant, ties go by admission order.
        let oldest = gate.admit().unwrap();
        let busy = gate.admit().unwrap();
        let request = busy.slot.begin();
        let newer = gate.admit().unwrap();
        // The oldest idle one is told to close; the busy one never is.
        let fourth = gate.admit().expect("room made");
        let told = tokio::time::timeout(Duration::from_secs(1), oldest.slot.closed()).await;
        assert_eq!(
            told.ok(),
            Some(Signal::Evicted),
            "the oldest idle connection is told to close"
        );
        drop(oldest);
        let fifth = gate.admit().expect("room made again");
        tokio::time::timeout(Duration::from_secs(1), newer.slot.closed())
            .await
            .expect("then the next oldest");
        drop(newer);
        // Only busy connections and new ones are left: the newest idle goes next.
        let _sixth = gate.admit().expect("room made from the newest");
        tokio::time::timeout(Duration::from_secs(1), fourth.slot.closed())
            .await
            .expect("the fourth was idle the longest");
        drop(fourth);
        drop(fifth);
        assert!(busy.slot.deadline().is_none());
        drop(request);
        assert!(busy.slot.deadline().is_some());
        assert_eq!(metrics.connections.evicted.load(Ordering::Relaxed), 3);
        assert_eq!(metrics.connections.refused.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_request_end_wakes_the_connection_only_when_its_deadline_came_sooner() {
        // The task looks at accept + 60 s; the request's end makes the deadline 1 s away.
        let slow_first = Timeouts {
            first_request: Duration::from_secs(60),
            idle: Duration::from_secs(1),
        };
        let slot = Arc::new(Slot::new(slow_first));
        slot.next_look();
        drop(slot.begin());
        tokio::time::timeout(Duration::from_millis(200), slot.request_ended())
            .await
            .expect("woken: the idle deadline is sooner than the look");
        // The usual case: the idle deadline lies after the look, so nothing is woken.
        let slot = Arc::new(Slot::new(TIMEOUTS));
        slot.next_look();
        drop(slot.begin());
        let woken = tokio::time::timeout(Duration::from_millis(50), slot.request_ended()).await;
        assert!(
            woken.is_err(),
            "a request's end woke the connection for nothing"
        );
    }

    #[test]
    fn a_connection_is_timed_from_accept_and_between_requests() {
        let slot = Arc::new(Slot::new(TIMEOUTS));
        let accepted = slot.activity().since;
        assert_eq!(slot.deadline(), Some(accepted + TIMEOUTS.first_request));
        assert!(!slot.expired(accepted));
        assert!(slot.expired(accepted + TIMEOUTS.first_request));
        let request = slot.begin();
        assert_eq!(slot.deadline(), None);
        assert!(!slot.expired(accepted + Duration::from_secs(3600)));
        drop(request);
        let ended = slot.activity().since;
        assert_eq!(slot.deadline(), Some(ended + TIMEOUTS.idle));
    }

    #[test]
    fn the_refusal_is_a_complete_http_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(head.contains("\r\nretry-after: 1"));
        assert!(head.contains("\r\nconnection: close"));
        assert!(head.contains(&format!("\r\ncontent-length: {}", body.len())));
    }

    #[test]
    fn running_out_of_descriptors_backs_off_and_a_failed_handshake_does_not() {
        let mut errors = AcceptErrors::default();
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        assert_eq!(errors.on_error(&emfile), ACCEPT_BACKOFF);
        assert_eq!(errors.on_error(&emfile), ACCEPT_BACKOFF);
        // The second error within the second was not logged.
        assert_eq!(errors.suppressed, 1);
        let aborted = io::Error::from_raw_os_error(libc::ECONNABORTED);
        assert_eq!(errors.on_error(&aborted), Duration::ZERO);
    }
}
