//! Load generators: closed loop ([`load`]: `conns` keep-alive HTTP/1.1 connections, one
//! request in flight each, so the server's speed sets the rate) and open loop ([`open_loop`]:
//! a fixed rate whatever the replies do, so a slow server cannot slow the sender down and the
//! tail shows).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub struct LoadResult {
    pub requests: usize,
    pub errors: usize,
    pub elapsed: Duration,
    pub lat: Vec<Duration>,
}

impl LoadResult {
    /// Nothing yet: a total that turns are [`add`](Self::add)ed to.
    pub fn empty() -> LoadResult {
        LoadResult {
            requests: 0,
            errors: 0,
            elapsed: Duration::ZERO,
            lat: Vec::new(),
        }
    }

    /// Adds a turn's result (rates over the summed time; latencies unsorted until read).
    pub fn add(&mut self, turn: LoadResult) {
        self.requests += turn.requests;
        self.errors += turn.errors;
        self.elapsed += turn.elapsed;
        self.lat.extend(turn.lat);
    }

    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

/// `conns` connections sending `GET path` in a closed loop for `duration` or `max_requests`.
/// A `{n}` in `path` becomes each request's own number, so that no two requests ask for the
/// same thing (a read that misses every cache, every time).
pub async fn load(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    conns: usize,
    duration: Duration,
    max_requests: usize,
) -> LoadResult {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (path, token, issued) = (path.to_string(), token.map(str::to_string), issued.clone());
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).ok();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(conn);
            let mut lat = Vec::new();
            let mut errors = 0;
            let varied = path.contains("{n}");
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if Instant::now() >= deadline || n >= max_requests {
                    break;
                }
                let uri = if varied {
                    path.replace("{n}", &n.to_string())
                } else {
                    path.clone()
                };
                let mut req = Request::builder().uri(uri).header("host", "127.0.0.1");
                if let Some(t) = &token {
                    req = req.header("authorization", format!("Bearer {t}"));
                }
                let req = req.body(Empty::<Bytes>::new()).unwrap();
                let t0 = Instant::now();
                if sender.ready().await.is_err() {
                    errors += 1;
                    break;
                }
                match sender.send_request(req).await {
                    Ok(resp) => {
                        let ok = resp.status().is_success();
                        let body = resp.into_body().collect().await;
                        if ok && body.is_ok() {
                            lat.push(t0.elapsed());
                        } else {
                            errors += 1;
                        }
                    }
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, errors)
        }));
    }
    gather(tasks, started).await
}

/// Waits for a closed loop's senders, each ending with its latencies and error count, and sums
/// them into one result timed from `started`, latencies sorted (as [`pct`](crate::report::pct)
/// reads them).
pub async fn gather(
    tasks: Vec<tokio::task::JoinHandle<(Vec<Duration>, usize)>>,
    started: Instant,
) -> LoadResult {
    let mut result = LoadResult::empty();
    for t in tasks {
        let (lat, errors) = t.await.unwrap();
        result.requests += lat.len();
        result.errors += errors;
        result.lat.extend(lat);
    }
    result.elapsed = started.elapsed();
    result.lat.sort();
    result
}

/// Sends `make()` every `1/rate` s for `secs` s without waiting for replies (open loop: a slow
/// server cannot slow the sender down); returns each request's latency and the error count.
pub async fn open_loop<F, Fut>(rate: u64, secs: u64, make: F) -> (Vec<Duration>, usize)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let total = rate * secs;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(total as usize);
    for _ in 0..total {
        tick.tick().await;
        let fut = make();
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ok = fut.await;
            (start.elapsed(), ok)
        }));
    }
    let mut lat = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (d, ok) = t.await.unwrap();
        lat.push(d);
        if !ok {
            errors += 1;
        }
    }
    lat.sort_unstable();
    (lat, errors)
}

/// A request of an open loop: true when it succeeded.
pub type BoxedCheck = Pin<Box<dyn std::future::Future<Output = bool> + Send>>;
