//! Live views: `GET /stream/events` (pipeline changes) and `GET /stream/logs/…` (step logs),
//! as server-sent events.
//!
//! **One source of truth.** Pipeline messages are not published by the code that changes
//! pipelines; one tailer task ([`PipelineFeed::run`]) follows the event outbox (woken by the
//! store after each commit) and rebuilds each pipeline from the recorded `pipelines.*`,
//! `workflows.*` and `steps.*` events, in outbox order. So the stream shows exactly the
//! changes the events feed records — every status change, in order, none invented.
//!
//! **Slow clients.** Every client has a bounded buffer (64 messages). A client whose buffer
//! is full, or who falls more than the broadcast capacity behind, is disconnected; it
//! reconnects (log streams resume without gaps from `Last-Event-ID`). The tailer and other
//! clients never wait for it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};

use super::access::{self, current, repo_perm};
use crate::app::Ctx;
use crate::http::{ApiError, Request, Response, Scope};
use crate::pipeline::status::{self, Status};
use crate::store::events::{self, Direction, Filter, StoredEvent};
use crate::store::logs::{self, LogEntry};
use crate::store::pipelines::{self, Pipeline, Step, Workflow};
use crate::store::repos::{self, Repo};
use crate::store::users::User;
use crate::store::{StoreResult, pipelines::PIPELINES, pipelines::STEPS, pipelines::WORKFLOWS};

/// Messages kept for clients that fall behind before they are dropped.
const FEED_CAPACITY: usize = 4096;
/// Per-client buffer; full means the client is too slow and is disconnected.
const CLIENT_BUFFER: usize = 64;
const PING_EVERY: Duration = Duration::from_secs(30);

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/stream/events", events_stream)
        .get("/stream/logs/{repo_id}/{number}/{step_id}", logs_stream);
}

/// One pipeline change, ready to send.
#[derive(Debug)]
pub struct FeedMessage {
    pub repo_id: i64,
    pub visibility: String,
    pub pipeline_id: i64,
    /// Step id → state, for log streams waiting for their step to end.
    pub steps: Vec<(i64, Status)>,
    /// The SSE frame: `data: {"repo":…,"pipeline":…}\n\n`.
    pub frame: Bytes,
}

/// The outbox tailer and its subscribers.
pub struct PipelineFeed {
    tx: broadcast::Sender<Arc<FeedMessage>>,
}

impl Default for PipelineFeed {
    fn default() -> Self {
        PipelineFeed {
            tx: broadcast::channel(FEED_CAPACITY).0,
        }
    }
}

/// A pipeline as rebuilt from its events.
struct Tracked {
    repo_id: i64,
    pipeline: Pipeline,
    workflows: BTreeMap<i64, Workflow>,
    steps: BTreeMap<i64, (i64, Step)>,
}

impl Tracked {
    /// The pipeline and every step have reached an end.
    fn finished(&self) -> bool {
        status::is_done(self.pipeline.status)
            && !self
                .steps
                .values()
                .any(|(_, s)| !status::is_done(s.state) && s.state != status::BLOCKED)
    }

    fn from_db(repo_id: i64, mut p: Pipeline) -> Tracked {
        let mut t = Tracked {
            repo_id,
            workflows: BTreeMap::new(),
            steps: BTreeMap::new(),
            pipeline: Pipeline::default(),
        };
        for mut wf in p.workflows.take().unwrap_or_default() {
            for s in std::mem::take(&mut wf.children) {
                t.steps.insert(s.id, (wf.id, s));
            }
            t.workflows.insert(wf.id, wf);
        }
        t.pipeline = p;
        t
    }

    /// The upstream rendering: the pipeline with workflows and their steps.
    fn render(&self) -> Pipeline {
        let mut p = self.pipeline.clone();
        let mut wfs: Vec<Workflow> = self.workflows.values().cloned().collect();
        for wf in &mut wfs {
            let mut children: Vec<Step> = self
                .steps
                .values()
                .filter(|(w, _)| *w == wf.id)
                .map(|(_, s)| s.clone())
                .collect();
            children.sort_by_key(|s| s.pid);
            wf.children = children;
        }
        wfs.sort_by_key(|w| w.pid);
        p.workflows = (!wfs.is_empty()).then_some(wfs);
        p
    }
}

impl PipelineFeed {
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<FeedMessage>> {
        self.tx.subscribe()
    }

    /// Follows the outbox forever, publishing one message per recorded pipeline change.
    pub async fn run(ctx: Ctx) {
        let mut commits = ctx.store.commits();
        let mut last = ctx.store.read(events::newest_seq).await.unwrap_or(0);
        let mut tracked: HashMap<i64, Tracked> = HashMap::new();
        let mut repos_seen: HashMap<i64, Repo> = HashMap::new();
        let filter = Filter {
            record_types: vec![
                PIPELINES.into(),
                WORKFLOWS.into(),
                STEPS.into(),
                repos::RECORD_TYPE.into(),
            ],
            ..Filter::default()
        };
        loop {
            // Read up to the newest event now, so events of other records are passed over once
            // (the cursor moves past them) instead of being rescanned after every commit.
            let batch = {
                let f = filter.clone();
                let feed = ctx.pipeline_feed.tx.clone();
                ctx.store
                    .read(move |c| {
                        let newest = events::newest_seq(c)?;
                        // Nobody listening (checked after `newest` was read, so whoever
                        // subscribes later subscribed after these events): nothing would be
                        // sent, so no event is read.
                        if feed.receiver_count() == 0 {
                            return Ok((newest, None));
                        }
                        let page = events::page(c, last, newest + 1, &f, Direction::Forward, 500)?;
                        Ok((newest, Some(page)))
                    })
                    .await
            };
            let (newest, batch) = match batch {
                Ok((newest, Some(page))) => (newest, page),
                Ok((newest, None)) => {
                    // What is tracked would miss the changes passed over: a pipeline that
                    // changes again is read afresh from the database (as after a restart).
                    tracked.clear();
                    repos_seen.clear();
                    last = newest;
                    if commits.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                Err(err) => {
                    tracing::warn!(%err, "event stream: cannot read the outbox");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let full = batch.len() == 500;
            let advance_to = if full { None } else { Some(newest) };
            let mut dirty: Option<i64> = None;
            let mut touched = HashSet::new();
            for event in &batch {
                last = event.seq;
                let Some(pid) = Self::apply(&ctx, &mut tracked, &mut repos_seen, event).await
                else {
                    continue;
                };
                touched.insert(pid);
                if event.action == "created" && event.record_type != PIPELINES {
                    dirty = Some(pid);
                    continue;
                }
                if let Some(d) = dirty.take().filter(|d| *d != pid) {
                    self_publish(&ctx, &tracked, &mut repos_seen, d).await;
                }
                if event.action == "created" {
                    dirty = Some(pid);
                } else {
                    self_publish(&ctx, &tracked, &mut repos_seen, pid).await;
                }
            }
            if let Some(d) = dirty {
                self_publish(&ctx, &tracked, &mut repos_seen, d).await;
            }
            if let Some(n) = advance_to {
                last = last.max(n);
            }
            // Finished pipelines leave the cache (they are re-read if they change again). Only
            // a pipeline this batch touched can have finished: looking at every tracked one
            // after every commit cost O(queued pipelines) per commit.
            for pid in touched {
                if tracked.get(&pid).is_some_and(Tracked::finished) {
                    tracked.remove(&pid);
                }
            }
            if !full && commits.changed().await.is_err() {
                return;
            }
        }
    }

    /// Applies one event; returns the pipeline it concerns.
    async fn apply(
        ctx: &Ctx,
        tracked: &mut HashMap<i64, Tracked>,
        repos_seen: &mut HashMap<i64, Repo>,
        event: &StoredEvent,
    ) -> Option<i64> {
        if event.record_type == repos::RECORD_TYPE {
            if let Ok(repo) = Repo::deserialize(&event.object) {
                repos_seen.insert(repo.id, repo);
            }
            return None;
        }
        let pipeline_id = match event.record_type.as_str() {
            PIPELINES => event.object["id"].as_i64()?,
            _ => event.object["pipeline_id"].as_i64()?,
        };
        if event.action == "deleted" && event.record_type == PIPELINES {
            tracked.remove(&pipeline_id);
            return None;
        }
        if !tracked.contains_key(&pipeline_id) {
            if event.record_type == PIPELINES && event.action == "created" {
                let p = Pipeline::deserialize(&event.object).ok()?;
                tracked.insert(pipeline_id, Tracked::from_db(event.repo_id.unwrap_or(0), p));
                return Some(pipeline_id);
            }
            // Created before we started watching: take it from the database once.
            let row = ctx.store.read(move |c| {
                let row = pipelines::by_id(c, pipeline_id)?;
                pipelines::full(c, row.repo_id, row.pipeline.number)
            });
            let row = row.await.ok()?;
            tracked.insert(pipeline_id, Tracked::from_db(row.repo_id, row.pipeline));
            return Some(pipeline_id);
        }
        let t = tracked.get_mut(&pipeline_id)?;
        match event.record_type.as_str() {
            PIPELINES => {
                if let Ok(mut p) = Pipeline::deserialize(&event.object) {
                    p.workflows = None;
                    t.pipeline = p;
                }
            }
            WORKFLOWS => {
                if let Ok(wf) = Workflow::deserialize(&event.object) {
                    if event.action == "deleted" {
                        t.workflows.remove(&wf.id);
                    } else {
                        t.workflows.insert(wf.id, wf);
                    }
                }
            }
            _ => {
                let wf_id = event.object["ppid"]
                    .as_i64()
                    .and_then(|ppid| t.workflows.values().find(|w| w.pid == ppid).map(|w| w.id));
                if let (Ok(s), Some(wf_id)) = (Step::deserialize(&event.object), wf_id) {
                    if event.action == "deleted" {
                        t.steps.remove(&s.id);
                    } else {
                        t.steps.insert(s.id, (wf_id, s));
                    }
                }
            }
        }
        Some(pipeline_id)
    }
}

async fn self_publish(
    ctx: &Ctx,
    tracked: &HashMap<i64, Tracked>,
    repos_seen: &mut HashMap<i64, Repo>,
    pipeline_id: i64,
) {
    // Nobody listening: a message sent now would be dropped unread, so it is not rendered.
    if ctx.pipeline_feed.tx.receiver_count() == 0 {
        return;
    }
    let Some(t) = tracked.get(&pipeline_id) else {
        return;
    };
    let repo_id = t.repo_id;
    if let std::collections::hash_map::Entry::Vacant(slot) = repos_seen.entry(repo_id)
        && let Ok(row) = ctx.store.read(move |c| repos::by_id(c, repo_id)).await
    {
        slot.insert(row.repo);
    }
    let Some(repo) = repos_seen.get(&repo_id) else {
        return;
    };
    let pipeline = t.render();
    let body = json!({"repo": repo, "pipeline": pipeline});
    let frame = Bytes::from(format!("data: {body}\n\n"));
    let _ = ctx.pipeline_feed.tx.send(Arc::new(FeedMessage {
        repo_id,
        visibility: repo.visibility.clone(),
        pipeline_id,
        steps: t.steps.values().map(|(_, s)| (s.id, s.state)).collect(),
        frame,
    }));
}

/// Whether `user` may see pipelines of a repository (cached per client).
async fn may_see(
    ctx: &Ctx,
    user: Option<&User>,
    cache: &mut HashMap<i64, bool>,
    msg: &FeedMessage,
) -> bool {
    match msg.visibility.as_str() {
        "public" => return true,
        "internal" if user.is_some() => return true,
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
        .store
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
    let user = current(&ctx, &req).await?.map(|a| a.user);
    let mut feed = ctx.pipeline_feed.subscribe();
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
            .logs
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
        .store
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
    let mut feed = ctx.pipeline_feed.subscribe();
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
                            let entry = LogEntry {
                                id: l.line,
                                step_id,
                                time: l.time,
                                line: l.line,
                                data: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, l.data.as_bytes()),
                                kind: l.kind,
                            };
                            if tx.try_send(log_frame(&entry)).is_err() {
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
