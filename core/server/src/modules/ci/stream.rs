//! Live views: `GET /stream/events` (pipeline changes) and `GET /stream/logs/…` (step logs),
//! as server-sent events.
//!
//! Pipeline messages come from the pipeline feed (`ci::feed`), which rebuilds them from the
//! event outbox: the stream shows exactly the changes the events feed records.
//!
//! **Slow clients.** Every client has a bounded buffer (64 messages). A client whose buffer
//! is full, or who falls more than the broadcast capacity behind, is disconnected; it
//! reconnects (log streams resume without gaps from `Last-Event-ID`). The tailer and other
//! clients never wait for it.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc};

use super::access::{self, current, repo_perm};
use crate::ci::feed::FeedMessage;
use crate::http::{ApiError, Request, Response, Scope};
use crate::pipeline::status::{self};
use crate::state::Ctx;
use crate::store::StoreResult;
use crate::store::logs::{self, LogEntry};
use crate::store::pipelines::{self};
use crate::store::repos::Visibility;
use crate::store::repos::{self};
use crate::store::users::User;

/// Messages kept for clients that fall behind before they are dropped.
/// Per-client buffer; full means the client is too slow and is disconnected.
const CLIENT_BUFFER: usize = 64;
const PING_EVERY: Duration = Duration::from_secs(30);

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/stream/events", events_stream)
        .get("/stream/logs/{repo_id}/{number}/{step_id}", logs_stream);
}

/// Whether `user` may see pipelines of a repository (cached per client).
async fn may_see(
    ctx: &Ctx,
    user: Option<&User>,
    cache: &mut HashMap<i64, bool>,
    msg: &FeedMessage,
) -> bool {
    match msg.visibility {
        Visibility::Public => return true,
        Visibility::Internal if user.is_some() => return true,
        _ => {}
    }
    let Some(user) = user else {
        return false;
    };
    if let Some(v) = cache.get(&msg.repo_id) {
        return *v;
    }
    let (u, repo_id) = (user.clone(), msg.repo_id);
    let allowed = ctx
        .ci
        .reads
        .read(move |c| -> StoreResult<bool> {
            let row = repos::by_id(c, repo_id)?;
            Ok(repo_perm(c, Some(&u), &row)?.pull)
        })
        .await
        .unwrap_or(false);
    cache.insert(msg.repo_id, allowed);
    allowed
}

/// `GET /stream/events`: pipeline changes of the repositories the caller may see.
async fn events_stream(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let user = current(&ctx, &req).await?.map(|a| a.user.clone());
    let mut feed = ctx.ci.feed.subscribe();
    let (tx, rx) = mpsc::channel::<Bytes>(CLIENT_BUFFER);
    let _ = tx.try_send(Bytes::from_static(b": ping\n\n"));
    tokio::spawn(async move {
        let mut cache = HashMap::new();
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = feed.recv() => match msg {
                    Ok(msg) => {
                        if may_see(&ctx, user.as_ref(), &mut cache, &msg).await
                            && tx.try_send(msg.frame.clone()).is_err()
                        {
                            break; // too slow or gone: disconnect
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                _ = ping.tick() => {
                    if tx.try_send(Bytes::from_static(b": ping\n\n")).is_err() {
                        break;
                    }
                }
                _ = tx.closed() => break,
            }
        }
    });
    Ok(Response::event_stream(rx))
}

/// One line as an SSE frame. Its `id` counts lines from 1 (upstream's event counter), so a
/// client's `Last-Event-ID` is the number of the next line it needs.
fn log_frame(entry: &LogEntry) -> Bytes {
    let json = serde_json::to_string(entry).unwrap_or_default();
    Bytes::from(format!("id: {}\ndata: {json}\n\n", entry.line + 1))
}

/// Sends the stored lines of `step_id` from line `next` on, moving `next` past them; false
/// when the client is gone.
async fn catch_up(ctx: &Ctx, tx: &mpsc::Sender<Bytes>, step_id: i64, next: &mut i64) -> bool {
    loop {
        let from = *next;
        let Ok(batch) = ctx
            .ci
            .log_reads
            .read(move |c| logs::list(c, step_id, from, 500))
            .await
        else {
            return false;
        };
        for e in &batch {
            if tx.send(log_frame(e)).await.is_err() {
                return false;
            }
            *next = e.line + 1;
        }
        if batch.len() < 500 {
            return true;
        }
    }
}

/// The last frame of a log stream.
const EOF: &[u8] = b"event: eof\ndata: eof\n\n";

/// `GET /stream/logs/{repo}/{pipeline}/{step}`: the step's lines as they are written,
/// `id: <line + 1>` each; `Last-Event-ID` resumes after that line; `event: eof` at the end.
/// A step that has not started yet (created, blocked, pending) keeps the stream open until
/// it runs, as upstream; a finished step replays its stored lines and ends, so a client that
/// opened the stream just before the step ended still sees the whole log.
async fn logs_stream(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let number = req.param_i64("number")?;
    let step_id = req.param_i64("step_id")?;
    let repo_id = access.row.repo.id;
    let step = ctx
        .ci
        .reads
        .read(move |c| {
            let row = pipelines::full(c, repo_id, number)?;
            Ok(row
                .pipeline
                .workflows
                .unwrap_or_default()
                .into_iter()
                .flat_map(|w| w.children)
                .find(|s| s.id == step_id))
        })
        .await
        .map_err(|_| ApiError::not_found("Pipeline not found"))?
        .ok_or_else(|| ApiError::not_found("Step not found"))?;
    let mut next: i64 = req
        .header("last-event-id")
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(0)
        .max(0);
    let (tx, rx) = mpsc::channel::<Bytes>(CLIENT_BUFFER);
    let _ = tx.try_send(Bytes::from_static(b": ping\n\n"));
    if status::is_done(step.state) {
        tokio::spawn(async move {
            if catch_up(&ctx, &tx, step_id, &mut next).await {
                let _ = tx.send(Bytes::from_static(EOF)).await;
            }
        });
        return Ok(Response::event_stream(rx));
    }
    // Subscribe before reading what is stored, so no line falls between the two.
    let mut lines = ctx.ci.queue.log_bus().subscribe();
    let mut feed = ctx.ci.feed.subscribe();
    let mut elsewhere = OtherReplicas::watch(&ctx);
    tokio::spawn(async move {
        if !catch_up(&ctx, &tx, step_id, &mut next).await {
            return;
        }
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                batch = lines.recv() => match batch {
                    Ok(batch) => {
                        for l in batch.iter().filter(|l| l.step_id == step_id) {
                            if l.line < next {
                                continue;
                            }
                            if l.line > next {
                                // A gap (an earlier batch not yet seen): read it from the store.
                                if !catch_up(&ctx, &tx, step_id, &mut next).await {
                                    return;
                                }
                                continue;
                            }
                            if tx.try_send(log_frame(l)).is_err() {
                                return;
                            }
                            next = l.line + 1;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if !catch_up(&ctx, &tx, step_id, &mut next).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = elsewhere.stored_lines() => {
                    if !catch_up(&ctx, &tx, step_id, &mut next).await {
                        return;
                    }
                }
                msg = feed.recv() => {
                    let ended = match &msg {
                        Ok(m) => m.steps.iter().any(|(id, s)| *id == step_id && status::is_done(*s)),
                        Err(broadcast::error::RecvError::Lagged(_)) => false,
                        Err(_) => true,
                    };
                    if ended {
                        // The runner sends the last lines before it reports the end.
                        let _ = catch_up(&ctx, &tx, step_id, &mut next).await;
                        let _ = tx.send(Bytes::from_static(EOF)).await;
                        return;
                    }
                }
                _ = ping.tick() => {
                    if tx.try_send(Bytes::from_static(b": ping\n\n")).is_err() {
                        return;
                    }
                }
                _ = tx.closed() => return,
            }
        }
    });
    Ok(Response::event_stream(rx))
}

/// Lines stored by other replicas on a shared database. The log bus carries only this
/// server's runners' lines; another replica's reach this one through the logs store's
/// commit watch (moved by its change listener) and the count of log commits it heard of.
struct OtherReplicas {
    commits: Option<tokio::sync::watch::Receiver<u64>>,
    logs: crate::ci::Reads,
    seen: u64,
}

impl OtherReplicas {
    fn watch(ctx: &Ctx) -> OtherReplicas {
        let logs = ctx.ci.log_reads.clone();
        OtherReplicas {
            commits: logs.is_shared().then(|| logs.commits()),
            seen: logs.generation_elsewhere(crate::store::Domain::Logs),
            logs,
        }
    }

    /// Resolves when log lines may have been stored since the last time; never on a
    /// database no other server writes to.
    async fn stored_lines(&mut self) {
        loop {
            let Some(commits) = self.commits.as_mut() else {
                return std::future::pending().await;
            };
            if commits.changed().await.is_err() {
                self.commits = None;
                continue;
            }
            // Other replicas' commits only: this server's own lines come on the log bus.
            let now = self.logs.generation_elsewhere(crate::store::Domain::Logs);
            if now != self.seen {
                self.seen = now;
                return;
            }
        }
    }
}
