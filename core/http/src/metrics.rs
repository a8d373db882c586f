//! Request metrics in the Prometheus text format (`GET /metrics`).
//!
//! Counted per route *pattern* (never the raw path, which would give one series per id) and
//! status. A single mutex is enough: recording is a hash lookup and a few additions, with
//! keys that are cloned without allocating (the route's shared pattern, the method).

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;

/// Latency bucket upper bounds in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// Client connections, kept by the accept loop (`connections::Admission`).
    pub connections: ConnectionCounts,
}

/// Atomics rather than the mutex: every accepted and every closed connection touches them.
#[derive(Default)]
pub struct ConnectionCounts {
    /// Open now (TLS handshakes included).
    pub open: AtomicU64,
    /// Refused (answered 503 and closed) because `limit` were open.
    pub refused: AtomicU64,
    /// The limit in force.
    pub limit: AtomicU64,
    /// Idle connections closed to make room for a new one at the limit.
    pub evicted: AtomicU64,
    /// Admitted since start (the next connection's number).
    pub admitted: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// (route, method, status) → count.
    requests: HashMap<(Arc<str>, Method, u16), u64>,
    /// route → latency histogram.
    latency: HashMap<Arc<str>, Histogram>,
}

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Metrics {
    pub fn record(&self, route: &Arc<str>, method: &Method, status: u16, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *inner
            .requests
            .entry((route.clone(), method.clone(), status))
            .or_default() += 1;
        let h = inner.latency.entry(route.clone()).or_default();
        h.count += 1;
        h.sum += secs;
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.buckets[i] += 1;
            }
        }
    }

    /// The exposition text, with `extra` values (name, help, value) appended: counters when
    /// the name ends in `_total`, else gauges.
    pub fn render(&self, extra: &[(&str, &str, f64)]) -> String {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        out.push_str(
            "# HELP woodlark_http_requests_total HTTP requests by route, method and status.\n",
        );
        out.push_str("# TYPE woodlark_http_requests_total counter\n");
        let mut requests: Vec<_> = inner.requests.iter().collect();
        requests
            .sort_by(|(a, _), (b, _)| (&a.0, a.1.as_str(), a.2).cmp(&(&b.0, b.1.as_str(), b.2)));
        for ((route, method, status), n) in requests {
            let _ = writeln!(
                out,
                "woodlark_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                escape(route),
                escape(method.as_str())
            );
        }
        out.push_str(
            "# HELP woodlark_http_request_duration_seconds HTTP request latency by route.\n",
        );
        out.push_str("# TYPE woodlark_http_request_duration_seconds histogram\n");
        let mut latency: Vec<_> = inner.latency.iter().collect();
        latency.sort_by(|a, b| a.0.cmp(b.0));
        for (route, h) in latency {
            let route = escape(route);
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(
                    out,
                    "woodlark_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "woodlark_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "woodlark_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "woodlark_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                h.count
            );
        }
        let connections = &self.connections;
        for (name, kind, help, value) in [
            (
                "woodlark_http_connections_open",
                "gauge",
                "Client connections open now.",
                connections.open.load(Ordering::Relaxed),
            ),
            (
                "woodlark_http_connections_max",
                "gauge",
                "Client connections served at once; more are refused.",
                connections.limit.load(Ordering::Relaxed),
            ),
            (
                "woodlark_http_connections_refused_total",
                "counter",
                "Connections refused with 503 because the connection limit was reached.",
                connections.refused.load(Ordering::Relaxed),
            ),
            (
                "woodlark_http_connections_evicted_total",
                "counter",
                "Idle connections closed to make room for a new one at the connection limit.",
                connections.evicted.load(Ordering::Relaxed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        for (name, help, value) in extra {
            // Prometheus's naming rule: a `_total` is a counter, anything else a gauge.
            let kind = if name.ends_with("_total") {
                "counter"
            } else {
                "gauge"
            };
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets() {
        let m = Metrics::default();
        let users: Arc<str> = Arc::from("/api/users");
        m.record(&users, &Method::GET, 200, Duration::from_micros(700));
        m.record(&users, &Method::GET, 200, Duration::from_millis(30));
        m.record(&users, &Method::GET, 401, Duration::from_millis(2));
        let text = m.render(&[("woodlark_up", "Always 1.", 1.0)]);
        assert!(text.contains(
            "woodlark_http_requests_total{route=\"/api/users\",method=\"GET\",status=\"200\"} 2"
        ));
        assert!(text.contains("status=\"401\"} 1"));
        assert!(text.contains(
            "woodlark_http_request_duration_seconds_bucket{route=\"/api/users\",le=\"0.001\"} 1"
        ));
        assert!(text.contains(
            "woodlark_http_request_duration_seconds_bucket{route=\"/api/users\",le=\"0.05\"} 3"
        ));
        assert!(
            text.contains("woodlark_http_request_duration_seconds_count{route=\"/api/users\"} 3")
        );
        assert!(text.contains("woodlark_up 1"));
        assert!(text.contains("# TYPE woodlark_http_connections_refused_total counter\n"));
        assert!(text.contains("\nwoodlark_http_connections_open 0\n"));
    }
}
