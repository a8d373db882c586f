//! `flood`: the real `woodlark` binary on `config.toml` (started by [`crate::server::Binary`],
//! as in `rss`) gets up to 20,000 connections from 127.0.0.1 at once (fewer when this
//! process's open-file limit is lower), half of them idle and half sending `GET /version`,
//! held for 5 s and closed.
//!
//! Reported: how many were served, held, refused with a 503 (`server.max_connections`) or
//! failed; the server's connection metrics after; its RSS before, at the peak, and every 5 s
//! for 60 s after.
//!
//! Then the webhook flood (issue 45): [`HOOK_FLOODERS`] clients post 25 MB bodies to
//! `/api/hook` without a token or a signature (only a GitHub event header, so the adapter
//! recognises them and the body must be read before anything can refuse it), again as soon
//! as each is answered, for [`HOOK_FLOOD_SECS`]. Reported: the answers, and the server's
//! RSS before and at the peak, against `server.unauthenticated_body_budget_bytes`.
//!
//! **No baseline:** absolute numbers, against issue 32's goal (back within 50 MB of the
//! pre-flood RSS a minute after) and issue 45's (the hook flood held to the budget).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::procfs::{open_file_limit, rss_kib};
use crate::report::{mb, table};
use crate::server::{Api, Binary};

/// Connections the `flood` scenario opens (fewer when this process's open-file limit is lower).
const FLOOD_CONNECTIONS: usize = 20_000;
/// Connection attempts in flight at once.
const FLOOD_PARALLEL: usize = 256;

/// Clients of the webhook flood at once (the attack: 300 took the RSS to 4.5 GB).
const HOOK_FLOODERS: usize = 300;
/// How long the webhook flood lasts.
const HOOK_FLOOD_SECS: u64 = 10;
/// Each flood body: the hook route's limit (GitHub's largest delivery).
const HOOK_BODY: usize = 25 * 1024 * 1024;

/// The highest RSS of a process, sampled every 100 ms until stopped.
struct PeakRss {
    peak: Arc<AtomicUsize>,
    sampling: Arc<std::sync::atomic::AtomicBool>,
    sampler: tokio::task::JoinHandle<()>,
}

impl PeakRss {
    fn sample(pid: u32, before: u64) -> PeakRss {
        let peak = Arc::new(AtomicUsize::new(before as usize));
        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let (p, s) = (peak.clone(), sampling.clone());
        let sampler = tokio::spawn(async move {
            while s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        PeakRss {
            peak,
            sampling,
            sampler,
        }
    }

    /// The peak in KiB.
    async fn stop(self) -> u64 {
        self.sampling.store(false, Ordering::Relaxed);
        let _ = self.sampler.await;
        self.peak.load(Ordering::Relaxed) as u64
    }
}

/// What became of one flood connection.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum FloodOutcome {
    /// Answered 200.
    Served,
    /// Still open without an answer (an idle connection the server admitted).
    Held,
    /// Answered 503 and closed: the clean refusal.
    Refused,
    /// Closed by the server without an answer.
    ClosedUnanswered,
    /// Connect, write or read failed (timeout, reset).
    Errored,
}

/// Opens one flood connection; odd ones send a request. Returns the stream to hold, if any.
async fn flood_connect(addr: SocketAddr, request: bool) -> Option<TcpStream> {
    let mut stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    if request
        && stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: flood\r\n\r\n")
            .await
            .is_err()
    {
        return None;
    }
    Some(stream)
}

/// What a held connection has received so far, without waiting.
fn flood_outcome(stream: &TcpStream) -> FloodOutcome {
    let mut buf = [0u8; 512];
    match stream.try_read(&mut buf) {
        Ok(0) => FloodOutcome::ClosedUnanswered,
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 200") => FloodOutcome::Served,
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 503") => FloodOutcome::Refused,
        Ok(_) => FloodOutcome::Errored,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => FloodOutcome::Held,
        Err(_) => FloodOutcome::Errored,
    }
}

pub async fn run() {
    let client_fds = open_file_limit().map_or(0, |lim| lim.rlim_cur as usize);
    let n = FLOOD_CONNECTIONS.min(client_fds.saturating_sub(512));
    println!(
        "\n# flood: {n} connections to the woodlark binary on config.toml (half idle, half GET /version), held 5 s, closed"
    );
    let woodlark = Binary::new();
    let addr = woodlark.addr;
    let mut child = woodlark.serve().await;
    let pid = child.id();
    let before = rss_kib(pid);

    // The peak is sampled while the flood runs.
    let peak = PeakRss::sample(pid, before);
    let opening = Instant::now();
    let mut held = Vec::with_capacity(n);
    let mut connect_errors = 0usize;
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..n {
        if pending.len() >= FLOOD_PARALLEL
            && let Some(done) = pending.join_next().await
        {
            match done.ok().flatten() {
                Some(stream) => held.push(stream),
                None => connect_errors += 1,
            }
        }
        pending.spawn(flood_connect(addr, i % 2 == 1));
    }
    while let Some(done) = pending.join_next().await {
        match done.ok().flatten() {
            Some(stream) => held.push(stream),
            None => connect_errors += 1,
        }
    }
    let opened_in = opening.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut outcomes = std::collections::BTreeMap::<FloodOutcome, usize>::new();
    for stream in &held {
        *outcomes.entry(flood_outcome(stream)).or_default() += 1;
    }
    *outcomes.entry(FloodOutcome::Errored).or_default() += connect_errors;
    let held_at_end = outcomes.get(&FloodOutcome::Held).copied().unwrap_or(0);
    drop(held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let peak = peak.stop().await;

    let metrics = Api::new(addr).send("GET", "/metrics", None, None).await.1;
    let metric = |name: &str| {
        String::from_utf8_lossy(&metrics)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
            .unwrap_or_else(|| "-".into())
    };

    hook_flood(addr, pid).await;

    let mut samples = Vec::new();
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        samples.push(rss_kib(pid));
    }
    let _ = child.kill();
    let _ = child.wait();

    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|(outcome, count)| vec![format!("{outcome:?}"), count.to_string()])
        .collect();
    table(
        &format!(
            "flood: outcome of {n} connections (opened in {:.1} s; held {held_at_end} at the end of the hold)",
            opened_in.as_secs_f64()
        ),
        &["outcome", "connections"],
        &rows,
    );
    println!(
        "server's metrics after the flood: woodlark_http_connections_max {}, woodlark_http_connections_refused_total {}, woodlark_http_connections_open {}",
        metric("woodlark_http_connections_max"),
        metric("woodlark_http_connections_refused_total"),
        metric("woodlark_http_connections_open"),
    );
    let mut rows = vec![
        vec![
            "before the flood (idle)".to_string(),
            mb(before),
            String::new(),
        ],
        vec![
            "peak (during the flood)".to_string(),
            mb(peak),
            mb(peak.saturating_sub(before)),
        ],
    ];
    for (i, kib) in samples.iter().enumerate() {
        rows.push(vec![
            format!("{} s after closing", (i + 1) * 5),
            mb(*kib),
            mb(kib.saturating_sub(before)),
        ]);
    }
    table(
        "flood: server RSS (MB)",
        &["when", "RSS MB", "above before"],
        &rows,
    );
    let last = samples.last().copied().unwrap_or(0);
    println!(
        "60 s after: {} MB above the pre-flood RSS (goal: within 50 MB)",
        mb(last.saturating_sub(before))
    );
}

/// One webhook-flood request: the head declaring [`HOOK_BODY`] bytes, the body in 64 KiB
/// writes while the server takes it, and the status of its answer (0: none, cut off).
async fn hook_flood_request(addr: SocketAddr, chunk: &[u8]) -> u16 {
    use tokio::io::AsyncReadExt;
    let Ok(Ok(mut stream)) =
        tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr)).await
    else {
        return 0;
    };
    let head = format!(
        "POST /api/hook HTTP/1.1\r\nHost: flood\r\nX-GitHub-Event: push\r\nContent-Type: application/json\r\nContent-Length: {HOOK_BODY}\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(head.as_bytes()).await.is_err() {
        return 0;
    }
    let (mut read, mut write) = stream.into_split();
    let sending = async {
        let mut left = HOOK_BODY;
        while left > 0 {
            let n = left.min(chunk.len());
            if write.write_all(&chunk[..n]).await.is_err() {
                break;
            }
            left -= n;
        }
        // Wait for the answer with the write side open.
        std::future::pending::<()>().await;
    };
    let answer = async {
        let mut buf = [0u8; 64];
        let n = read.read(&mut buf).await.unwrap_or(0);
        std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.strip_prefix("HTTP/1.1 "))
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    };
    tokio::select! {
        status = answer => status,
        () = sending => 0,
    }
}

/// The webhook flood (see the module's doc): answers by status, and the RSS it cost.
async fn hook_flood(addr: SocketAddr, pid: u32) {
    println!(
        "\n# flood: {HOOK_FLOODERS} clients posting {} MB unauthenticated bodies to /api/hook, again on each answer, for {HOOK_FLOOD_SECS} s",
        HOOK_BODY / (1024 * 1024)
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = rss_kib(pid);
    let peak = PeakRss::sample(pid, before);
    let chunk: Arc<[u8]> = vec![b' '; 64 * 1024].into();
    let until = Instant::now() + Duration::from_secs(HOOK_FLOOD_SECS);
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..HOOK_FLOODERS {
        let chunk = chunk.clone();
        clients.spawn(async move {
            let mut answers = std::collections::BTreeMap::<u16, usize>::new();
            while Instant::now() < until {
                *answers
                    .entry(hook_flood_request(addr, &chunk).await)
                    .or_default() += 1;
            }
            answers
        });
    }
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    while let Some(done) = clients.join_next().await {
        for (status, n) in done.unwrap_or_default() {
            *answers.entry(status).or_default() += n;
        }
    }
    let peak = peak.stop().await;
    let rows: Vec<Vec<String>> = answers
        .iter()
        .map(|(status, n)| {
            let what = match status {
                0 => "no answer (cut off)".to_string(),
                s => s.to_string(),
            };
            vec![what, n.to_string()]
        })
        .collect();
    table("flood: /api/hook answers", &["status", "requests"], &rows);
    table(
        "flood: server RSS under the webhook flood (MB)",
        &["when", "RSS MB", "above before"],
        &[
            vec!["before".to_string(), mb(before), String::new()],
            vec![
                "peak (during the flood)".to_string(),
                mb(peak),
                mb(peak.saturating_sub(before)),
            ],
        ],
    );
    println!(
        "peak {} MB above before the webhook flood (budget: server.unauthenticated_body_budget_bytes of config.toml)",
        mb(peak.saturating_sub(before))
    );
}
