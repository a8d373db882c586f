//! How many client connections the server holds at once, and what happens past that.
//!
//! Every open connection costs a file descriptor and hyper's buffers. Without a bound, a flood
//! of idle connections runs the process out of descriptors (then the database, the plugins'
//! cache and the runner fail too) and leaves hundreds of megabytes resident. So the accept
//! loop admits at most a fixed number of connections; one more is accepted, told
//! `503 Service Unavailable` in one non-blocking write, and closed: a clean, cheap refusal
//! instead of a connection that hangs in the kernel's backlog or an `EMFILE` for everyone.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

/// Admits connections up to a limit; the accept loop is its only caller.
pub struct Admission {
    metrics: Arc<Metrics>,
    limit: usize,
    /// Told when the open count reaches [`heap::FLOOD_MARK`](super::heap::FLOOD_MARK).
    flood: Arc<Notify>,
}

/// An admitted connection; dropping it (when the connection's task ends) frees its place.
pub struct Admitted {
    metrics: Arc<Metrics>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.metrics
            .connections
            .open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Admission {
    pub fn new(metrics: Arc<Metrics>, limit: usize, flood: Arc<Notify>) -> Admission {
        metrics
            .connections
            .limit
            .store(limit as u64, Ordering::Relaxed);
        Admission {
            metrics,
            limit,
            flood,
        }
    }

    /// A place for one more connection, or `None` (counted as refused) when all are taken.
    pub fn admit(&self) -> Option<Admitted> {
        let counts = &self.metrics.connections;
        // Only the accept loop adds, so reading first cannot let two admissions overshoot.
        if counts.open.load(Ordering::Relaxed) >= self.limit as u64 {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if counts.open.fetch_add(1, Ordering::Relaxed) + 1 == super::heap::FLOOD_MARK {
            self.flood.notify_one();
        }
        Some(Admitted {
            metrics: self.metrics.clone(),
        })
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

    #[test]
    fn admission_stops_at_the_limit_and_frees_places_on_drop() {
        let metrics = Arc::new(Metrics::default());
        let gate = Admission::new(metrics.clone(), 2, Arc::default());
        let a = gate.admit().expect("first");
        let b = gate.admit().expect("second");
        assert!(gate.admit().is_none());
        assert_eq!(metrics.connections.refused.load(Ordering::Relaxed), 1);
        drop(a);
        let c = gate.admit().expect("a freed place");
        assert!(gate.admit().is_none());
        drop((b, c));
        assert_eq!(metrics.connections.open.load(Ordering::Relaxed), 0);
        assert_eq!(metrics.connections.refused.load(Ordering::Relaxed), 2);
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
