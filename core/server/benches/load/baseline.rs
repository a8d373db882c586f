//! The baselines the scenarios measure against in the same run: bare hyper (HTTP/1.1, no
//! framework) as a hello-world server and as an SSE broadcaster built like the real server's
//! stream, SQLite alone with the server's durability (WAL, every commit synced), and
//! PostgreSQL alone committing the same rows.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use http_body_util::combinators::BoxBody;
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::client::BoxedCheck;

/// A streaming body fed by a channel (the baseline's SSE responses).
pub struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// Serves HTTP/1.1 on a fresh 127.0.0.1 port, answering every request with `handle` (the
/// bench's own servers: the bare hyper baseline, the fake GitHub API).
pub async fn serve_http1<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<BoxBody<Bytes, Infallible>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let reply = handle(req);
                    async move { Ok::<_, Infallible>(reply.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// A bare hyper server: `/sse` streams `feed` (a broadcast with one forwarding task and a
/// 64-message buffer per client, as the real server does), anything else answers `ok`.
pub async fn baseline_server(feed: broadcast::Sender<Bytes>) -> SocketAddr {
    serve_http1(move |req: Request<hyper::body::Incoming>| {
        let feed = feed.clone();
        async move {
            let body: BoxBody<Bytes, Infallible> = if req.uri().path() == "/sse" {
                let mut sub = feed.subscribe();
                let (tx, rx) = mpsc::channel::<Bytes>(64);
                let _ = tx.try_send(Bytes::from_static(b": ping\n\n"));
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            m = sub.recv() => match m {
                                Ok(b) => if tx.try_send(b).is_err() { break },
                                Err(_) => break,
                            },
                            _ = tx.closed() => break,
                        }
                    }
                });
                BoxBody::new(ChannelBody(rx))
            } else {
                BoxBody::new(Full::new(Bytes::from_static(b"ok")))
            };
            Response::new(body)
        }
    })
    .await
}

/// A bare hyper server answering every request with `body` and `headers` (a real response
/// of the server, fetched once): what sending those bytes costs, with nothing else done.
/// `date` and `content-length` are left to hyper, which writes them itself.
pub async fn same_bytes_server(headers: hyper::HeaderMap, body: Bytes) -> SocketAddr {
    let mut kept = headers;
    kept.remove(hyper::header::DATE);
    kept.remove(hyper::header::CONTENT_LENGTH);
    let kept = Arc::new(kept);
    serve_http1(move |_req: Request<hyper::body::Incoming>| {
        let (headers, body) = (kept.clone(), body.clone());
        async move {
            let mut reply = Response::new(BoxBody::new(Full::new(body)));
            *reply.headers_mut() = (*headers).clone();
            reply
        }
    })
    .await
}

/// A bare SQLite connection as the baselines use it: WAL, every commit synced.
pub fn durable_sqlite(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn
}

/// Tables the durable-write baseline fills, one row each per commit: with an index each,
/// plus the header page, a commit writes about as many log frames as a hook's does (22–28).
pub const BARE_TABLES: usize = 12;

/// The durable-write baseline: SQLite alone, one transaction per request (a row into each of
/// [`BARE_TABLES`] indexed tables), WAL with `synchronous = FULL` and SQLite's default
/// checkpoint (a `PASSIVE` one in the commit that takes the log past 1,000 frames), on a
/// thread of its own that requests queue for, as they do for the server's writer. Its tail
/// is what this disk gives a commit of a hook's size at that rate, beside which the hook's
/// tail is judged. Returns a request maker for [`open_loop`] and a reader of the log frames
/// per commit so far.
pub fn bare_sqlite(dir: &Path) -> (impl Fn() -> BoxedCheck + use<>, impl Fn() -> f64 + use<>) {
    /// The log's length after the connection's last commit (the WAL hook takes a plain fn).
    static LOG_FRAMES: AtomicUsize = AtomicUsize::new(0);
    fn note(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
        LOG_FRAMES.store(usize::try_from(frames).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }
    let conn = durable_sqlite(&dir.join("bare.db"));
    for t in 0..BARE_TABLES {
        conn.execute_batch(&format!(
            "CREATE TABLE t{t} (id INTEGER PRIMARY KEY, state INTEGER, body TEXT);
             CREATE INDEX t{t}_state ON t{t} (state, id);"
        ))
        .unwrap();
    }
    // The hook replaces SQLite's automatic checkpoint, which the loop below does as it would.
    conn.wal_hook(Some(note));
    // (frames written, commits)
    let counts = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let counted = counts.clone();
    let (tx, rx) = std::sync::mpsc::channel::<oneshot::Sender<bool>>();
    std::thread::spawn(move || {
        let body = "x".repeat(200);
        let mut last = 0;
        while let Ok(reply) = rx.recv() {
            let commit = || -> rusqlite::Result<()> {
                let tx = conn.unchecked_transaction()?;
                for t in 0..BARE_TABLES {
                    tx.prepare_cached(&format!("INSERT INTO t{t} (state, body) VALUES (?1, ?2)"))?
                        .execute(rusqlite::params![t % 5, body])?;
                }
                tx.commit()
            };
            let ok = commit().is_ok();
            let frames = LOG_FRAMES.load(Ordering::Relaxed);
            // A log that started over counts from its beginning.
            let written = if frames >= last {
                frames - last
            } else {
                frames
            };
            last = frames;
            counted.0.fetch_add(written, Ordering::Relaxed);
            counted.1.fetch_add(1, Ordering::Relaxed);
            if frames >= 1000 {
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
            let _ = reply.send(ok);
        }
    });
    let send = move || {
        let (reply, answer) = oneshot::channel();
        let queued = tx.send(reply).is_ok();
        Box::pin(async move { queued && answer.await.unwrap_or(false) }) as BoxedCheck
    };
    let per_commit = move || {
        counts.0.load(Ordering::Relaxed) as f64 / counts.1.load(Ordering::Relaxed).max(1) as f64
    };
    (send, per_commit)
}

/// The bare-PostgreSQL-commit baseline: [`bare_sqlite`]'s transaction (a row into each of
/// [`BARE_TABLES`] indexed tables) on the database `url`, one transaction per request, over
/// one connection on a thread of its own that requests queue for, as they do for each
/// replica's writer. Its durability is the cluster's (the test cluster's is `fsync = off`).
/// Returns a request maker for [`crate::client::open_loop`] or a closed loop.
pub fn bare_postgres(url: &str) -> impl Fn() -> BoxedCheck + use<> {
    let url = url.to_string();
    let (tx, rx) = std::sync::mpsc::channel::<oneshot::Sender<bool>>();
    // On a plain thread: the blocking client cannot run on a runtime's.
    std::thread::spawn(move || {
        let mut client = woodlark_store::pg::connect(&url).expect("connect to PostgreSQL");
        let inserts: Vec<_> = (0..BARE_TABLES)
            .map(|t| {
                client
                    .batch_execute(&format!(
                        "CREATE TABLE t{t} (id bigserial PRIMARY KEY, state integer, body text);
                         CREATE INDEX t{t}_state ON t{t} (state, id);"
                    ))
                    .expect("create the baseline's tables");
                client
                    .prepare(&format!("INSERT INTO t{t} (state, body) VALUES ($1, $2)"))
                    .expect("prepare the baseline's insert")
            })
            .collect();
        let body = "x".repeat(200);
        while let Ok(reply) = rx.recv() {
            let ok = (|| {
                let mut tx = client.transaction().ok()?;
                for (t, insert) in inserts.iter().enumerate() {
                    let state = (t % 5) as i32;
                    tx.execute(insert, &[&state, &body]).ok()?;
                }
                tx.commit().ok()
            })()
            .is_some();
            let _ = reply.send(ok);
        }
    });
    move || {
        let (reply, answer) = oneshot::channel();
        let queued = tx.send(reply).is_ok();
        Box::pin(async move { queued && answer.await.unwrap_or(false) }) as BoxedCheck
    }
}
