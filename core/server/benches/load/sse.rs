//! `sse`: 1,000 concurrent HTTP/1.1 clients on `GET /api/stream/events`.
//!
//! Memory per client (`VmRSS` before and after connecting them all) and the delivery lag of 20
//! pipeline changes (even waves create a pending pipeline, odd ones cancel it): from sending
//! the POST to the first `data:` frame each client reads.
//!
//! **Baseline, same run:** a bare hyper SSE broadcaster with the same architecture (tokio
//! broadcast → one forwarding task and a 64-message buffer per client: the `/sse` of
//! [`crate::baseline::baseline_server`]), the same clients, its waves sent straight into the
//! broadcast.
//!
//! Each side runs in a child process of its own (this binary re-executed as `__sse_child
//! baseline|woodlark`, which prints one `RESULT {json}` line), so that resident memory is
//! measured in isolation. The clients live in the same process as the server they talk to, so
//! "RSS per client" includes the client side: the same code on both sides.

use std::net::SocketAddr;
use std::pin::Pin;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::broadcast;

use crate::baseline::baseline_server;
use crate::procfs::rss_bytes;
use crate::report::{pct, ratio, table};
use crate::server::{ECHO, Server};

const CLIENTS: usize = 1_000;
const WAVES: usize = 20;

/// What each SSE client saw: when it was ready (`: ping`) and when each `data:` arrived.
#[derive(Default)]
struct Seen {
    arrivals: Mutex<Vec<Instant>>,
}

/// A raw HTTP/1.1 SSE client; counts `data: ` frames as they arrive.
async fn sse_client(
    addr: SocketAddr,
    path: String,
    token: Option<String>,
    seen: Arc<Seen>,
    ready: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        closed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    stream.set_nodelay(true).ok();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n{auth}\r\n"
    );
    if stream.write_all(req.as_bytes()).await.is_err() {
        closed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut buf = vec![0u8; 4096];
    let mut carry: Vec<u8> = Vec::with_capacity(4096 + 8);
    let mut is_ready = false;
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        carry.extend_from_slice(&buf[..n]);
        if !is_ready && find(&carry, b": ping").is_some() {
            is_ready = true;
            ready.fetch_add(1, Ordering::Relaxed);
        }
        let frames = count(&carry, b"data: ");
        if frames > 0 {
            let mut a = seen.arrivals.lock().unwrap();
            a.extend(std::iter::repeat_n(now, frames));
        }
        // Keep the last 5 bytes: a 6-byte pattern may straddle two reads, and 5 bytes cannot
        // hold one already counted.
        let keep = carry.len().min(5);
        carry.drain(..carry.len() - keep);
    }
    closed.fetch_add(1, Ordering::Relaxed);
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Runs one side of the SSE benchmark in this (child) process and prints one JSON line.
pub async fn child(kind: &str) {
    let (feed, _) = broadcast::channel::<Bytes>(4096);
    let mut server = None;
    let (addr, path, token, trigger): (SocketAddr, String, Option<String>, Trigger) =
        if kind == "baseline" {
            let addr = baseline_server(feed.clone()).await;
            let feed = feed.clone();
            let frame = Bytes::from(format!(
                "data: {}\n\n",
                json!({"pipeline": {"status": "x".repeat(2000)}})
            ));
            let trigger: Trigger = Arc::new(move |_| -> BoxFuture {
                let (feed, frame) = (feed.clone(), frame.clone());
                Box::pin(async move {
                    let _ = feed.send(frame);
                })
            });
            (addr, "/sse".into(), None, trigger)
        } else {
            let s = Server::start(false).await;
            let admin = s.user("root", true).await;
            let alice = s.user("alice", false).await;
            let (repo, _) = s.pipeline_repo(&admin, &alice, "alice/app", ECHO).await;
            let (api, tok) = (s.api.clone(), alice.clone());
            let last = Arc::new(Mutex::new(0i64));
            // Even waves create a pipeline (pending: the runner is off), odd waves cancel it.
            let trigger: Trigger = Arc::new(move |wave| -> BoxFuture {
                let (api, tok, last) = (api.clone(), tok.clone(), last.clone());
                Box::pin(async move {
                    if wave % 2 == 0 {
                        let p = api.run_pipeline(repo, &tok).await;
                        *last.lock().unwrap() = p["number"].as_i64().unwrap();
                    } else {
                        let n = *last.lock().unwrap();
                        api.expect(
                            "POST",
                            &format!("/api/repos/{repo}/pipelines/{n}/cancel"),
                            Some(&tok),
                            Some(""),
                            204,
                        )
                        .await;
                    }
                })
            });
            let addr = s.api.addr;
            server = Some(s);
            (addr, "/api/stream/events".into(), Some(alice), trigger)
        };

    // Warm-up: one client through one full create/cancel cycle.
    {
        let (seen, ready, closed) = (
            Arc::new(Seen::default()),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let h = tokio::spawn(sse_client(
            addr,
            path.clone(),
            token.clone(),
            seen.clone(),
            ready.clone(),
            closed.clone(),
        ));
        wait_until(
            || ready.load(Ordering::Relaxed) == 1,
            Duration::from_secs(10),
        )
        .await;
        for w in 0..2 {
            trigger(w).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        h.abort();
        let _ = h.await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = rss_bytes();

    // Connect all clients, 50 connection attempts in flight at a time.
    let ready = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let seen: Vec<Arc<Seen>> = (0..CLIENTS).map(|_| Arc::new(Seen::default())).collect();
    let connect_started = Instant::now();
    let mut handles = Vec::with_capacity(CLIENTS);
    for (i, s) in seen.iter().enumerate() {
        handles.push(tokio::spawn(sse_client(
            addr,
            path.clone(),
            token.clone(),
            s.clone(),
            ready.clone(),
            closed.clone(),
        )));
        if i % 50 == 49 {
            let want = i + 1;
            wait_until(
                || ready.load(Ordering::Relaxed) + closed.load(Ordering::Relaxed) >= want,
                Duration::from_secs(30),
            )
            .await;
        }
    }
    wait_until(
        || ready.load(Ordering::Relaxed) + closed.load(Ordering::Relaxed) >= CLIENTS,
        Duration::from_secs(60),
    )
    .await;
    let connect_time = connect_started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_bytes();
    let connected = ready.load(Ordering::Relaxed);

    // Waves: trigger, then wait until every live client has a frame newer than the trigger.
    let mut first_wave = Vec::new();
    let mut lags = Vec::new();
    let mut all_received = Vec::new();
    let mut missed = 0usize;
    let mut trigger_times = Vec::new();
    for wave in 0..WAVES {
        let t0 = Instant::now();
        trigger(wave).await;
        trigger_times.push(t0.elapsed());
        let got = |s: &Seen| s.arrivals.lock().unwrap().iter().any(|a| *a >= t0);
        wait_until(
            || seen.iter().filter(|s| got(s)).count() >= connected,
            Duration::from_secs(15),
        )
        .await;
        let mut wave_lags: Vec<Duration> = seen
            .iter()
            .filter_map(|s| {
                s.arrivals
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|a| **a >= t0)
                    .map(|a| *a - t0)
            })
            .collect();
        missed += connected.saturating_sub(wave_lags.len());
        wave_lags.sort();
        if let Some(max) = wave_lags.last() {
            all_received.push(*max);
        }
        if wave == 0 {
            first_wave = wave_lags;
        } else {
            lags.extend(wave_lags);
        }
        // Let trailing frames of this change (steps, workflows) pass before the next one.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    lags.sort();
    all_received.sort();
    trigger_times.sort();
    let frames_client0 = seen[0].arrivals.lock().unwrap().len();
    let disconnected = closed.load(Ordering::Relaxed);
    for h in &handles {
        h.abort();
    }
    if let Some(s) = server {
        s.stop().await;
    }
    let us = |d: Duration| d.as_micros() as u64;
    println!(
        "RESULT {}",
        json!({
            "kind": kind,
            "clients": connected,
            "disconnected": disconnected,
            "connect_ms": connect_time.as_millis() as u64,
            "rss_before": rss_before,
            "rss_after": rss_after,
            "frames_client0": frames_client0,
            "missed": missed,
            "first_p50_us": us(pct(&first_wave, 0.5)),
            "first_max_us": us(first_wave.last().copied().unwrap_or_default()),
            "p50_us": us(pct(&lags, 0.5)),
            "p99_us": us(pct(&lags, 0.99)),
            "max_us": us(lags.last().copied().unwrap_or_default()),
            "all_p50_us": us(pct(&all_received, 0.5)),
            "trigger_p50_us": us(pct(&trigger_times, 0.5)),
        })
    );
}

type BoxFuture = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
/// Makes the change that the clients should see (the argument is the wave number).
type Trigger = Arc<dyn Fn(usize) -> BoxFuture + Send + Sync>;

async fn wait_until(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

pub fn run() {
    println!(
        "\n# sse: {CLIENTS} concurrent HTTP/1.1 clients on one stream endpoint; each side in its own process"
    );
    let mut results = Vec::new();
    for kind in ["baseline", "woodlark"] {
        let exe = std::env::current_exe().expect("current exe");
        let out = Command::new(exe)
            .args(["__sse_child", kind])
            .output()
            .expect("run the sse child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(v) = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
        else {
            eprintln!(
                "sse child {kind} failed ({}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            break;
        };
        results.push(v);
    }
    if results.len() != 2 {
        return;
    }
    let (b, w) = (&results[0], &results[1]);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let per_client =
        |v: &Value| (f(v, "rss_after") - f(v, "rss_before")) / f(v, "clients").max(1.0);
    let kib = |x: f64| format!("{:.1}", x / 1024.0);
    let msf = |us: f64| format!("{:.2}", us / 1000.0);
    let row = |name: &str, key: &str, fmt: &dyn Fn(f64) -> String| {
        vec![
            name.to_string(),
            fmt(f(b, key)),
            fmt(f(w, key)),
            ratio(f(w, key), f(b, key)),
        ]
    };
    let plain = |x: f64| format!("{x:.0}");
    let mut rows = vec![
        row("clients connected", "clients", &plain),
        row("clients disconnected by the server", "disconnected", &plain),
        row("time to connect all (ms)", "connect_ms", &plain),
        vec![
            "RSS before clients (MiB)".into(),
            format!("{:.1}", f(b, "rss_before") / 1048576.0),
            format!("{:.1}", f(w, "rss_before") / 1048576.0),
            ratio(f(w, "rss_before"), f(b, "rss_before")),
        ],
        vec![
            "RSS with all clients (MiB)".into(),
            format!("{:.1}", f(b, "rss_after") / 1048576.0),
            format!("{:.1}", f(w, "rss_after") / 1048576.0),
            ratio(f(w, "rss_after"), f(b, "rss_after")),
        ],
        vec![
            "RSS per client, client side included (KiB)".into(),
            kib(per_client(b)),
            kib(per_client(w)),
            ratio(per_client(w), per_client(b)),
        ],
    ];
    rows.push(vec![
        "  of which above the baseline (KiB)".into(),
        "-".into(),
        kib(per_client(w) - per_client(b)),
        "-".into(),
    ]);
    rows.extend([
        row("wave 1 (cold): lag p50 (ms)", "first_p50_us", &msf),
        row("wave 1 (cold): lag max (ms)", "first_max_us", &msf),
        row(&format!("waves 2..{WAVES}: lag p50 (ms)"), "p50_us", &msf),
        row(&format!("waves 2..{WAVES}: lag p99 (ms)"), "p99_us", &msf),
        row(&format!("waves 2..{WAVES}: lag max (ms)"), "max_us", &msf),
        row(
            "median time until all clients had it (ms)",
            "all_p50_us",
            &msf,
        ),
        row("client-waves without a frame", "missed", &plain),
        row(
            "trigger round trip p50 (ms; POST reply / broadcast send)",
            "trigger_p50_us",
            &msf,
        ),
    ]);
    table(
        "sse: 1,000 concurrent stream clients, woodlark vs bare hyper broadcaster",
        &["metric", "baseline", "woodlark", "woodlark ÷ base"],
        &rows,
    );
    println!(
        "(lag = from sending the POST that changes a pipeline — or, for the baseline, from the \
         broadcast send — to the first frame read by each client; {} frames reached client 0)",
        f(w, "frames_client0")
    );
}
