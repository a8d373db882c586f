//! The pipeline feed: every recorded pipeline change, rebuilt from the event outbox.
//!
//! **One source of truth.** Pipeline messages are not published by the code that changes
//! pipelines; one tailer task ([`PipelineFeed::run`]) follows the event outbox (woken by the
//! store after each commit) and rebuilds each pipeline from the recorded `pipelines.*`,
//! `workflows.*` and `steps.*` events, in outbox order. So live views (`/stream/events`) show
//! exactly the changes the events feed records — every status change, in order, none invented.
//! Subscribers get a bounded broadcast; one that falls behind loses messages, never stalls
//! the tailer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast;

use crate::pipeline::status::{self, Status};
use crate::store::Store;
use crate::store::events::{self, Action, Direction, Filter, RecordType, StoredEvent};
use crate::store::pipelines::{self, Pipeline, Step, Workflow};
use crate::store::repos::{self, Repo, Visibility};

/// The record types a pipeline is rebuilt from, and the repositories it is shown with.
const FOLLOWED: [RecordType; 4] = [
    RecordType::Pipelines,
    RecordType::Workflows,
    RecordType::Steps,
    RecordType::Repos,
];

/// After a failed read of the outbox: the shortest wait (a store that fails at once is not
/// asked again at the rate of its failed commits), the longest wait with no change heard of,
/// and the first one.
const RETRY_FLOOR: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// Messages kept for subscribers that fall behind.
const FEED_CAPACITY: usize = 4096;

/// One pipeline change, ready to send.
#[derive(Debug)]
pub struct FeedMessage {
    pub repo_id: i64,
    pub visibility: Visibility,
    pub pipeline_id: i64,
    /// Step id → state, for log streams waiting for their step to end.
    pub steps: Vec<(i64, Status)>,
    /// The SSE frame: `data: {"repo":…,"pipeline":…}\n\n`.
    pub frame: Bytes,
}

/// The outbox tailer and its subscribers.
pub struct PipelineFeed {
    tx: broadcast::Sender<Arc<FeedMessage>>,
    store: Store,
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
                .any(|(_, s)| !status::is_done(s.state) && s.state != Status::Blocked)
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
    pub fn new(store: Store) -> PipelineFeed {
        PipelineFeed {
            tx: broadcast::channel(FEED_CAPACITY).0,
            store,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<FeedMessage>> {
        self.tx.subscribe()
    }

    /// Follows the outbox forever, publishing one message per recorded pipeline change.
    pub async fn run(self: Arc<Self>) {
        let feed = &self;
        let mut commits = feed.store.commits();
        let mut last = feed.store.read_one(events::newest_seq).await.unwrap_or(0);
        let mut tracked: HashMap<i64, Tracked> = HashMap::new();
        let mut repos_seen: HashMap<i64, Repo> = HashMap::new();
        let mut pause = RETRY_FIRST;
        let filter = Filter {
            record_types: FOLLOWED.iter().map(|t| t.as_str().into()).collect(),
            ..Filter::default()
        };
        loop {
            // Read up to the newest event now, so events of other records are passed over once
            // (the cursor moves past them) instead of being rescanned after every commit.
            let batch = {
                let f = filter.clone();
                let subscribers = feed.tx.clone();
                // The newest id alone first (one statement, no transaction): every event up
                // to it has committed (see `events`), so the page need not share its snapshot.
                match feed.store.read_one(events::newest_seq).await {
                    // Nobody listening (checked after `newest` was read, so whoever
                    // subscribes later subscribed after these events): nothing would be
                    // sent, so no event is read.
                    Ok(newest) if subscribers.receiver_count() == 0 => Ok((newest, None)),
                    Ok(newest) => {
                        feed.store
                            .read(move |c| {
                                let page =
                                    events::page(c, last, newest + 1, &f, Direction::Forward, 500)?;
                                Ok((newest, Some(page)))
                            })
                            .await
                    }
                    Err(err) => Err(err),
                }
            };
            if batch.is_ok() {
                pause = RETRY_FIRST;
            }
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
                    tracing::warn!(%err, retry_in = ?pause, "event stream: cannot read the outbox");
                    // Again as soon as the store hears of a change (a reconnected listener
                    // says so the moment the database is back), or after `pause`: a feed
                    // that slept a fixed second after an outage missed the live states of
                    // a pipeline run meanwhile (commit statuses then posted only its end).
                    tokio::time::sleep(RETRY_FLOOR).await;
                    tokio::select! {
                        changed = commits.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(RETRY_MAX);
                    continue;
                }
            };
            let full = batch.len() == 500;
            let advance_to = if full { None } else { Some(newest) };
            let mut dirty: Option<i64> = None;
            let mut touched = HashSet::new();
            for event in &batch {
                last = event.seq;
                let Some((record, action)) = event.kind() else {
                    continue;
                };
                let Some(pid) = feed
                    .apply(&mut tracked, &mut repos_seen, event, record, action)
                    .await
                else {
                    continue;
                };
                touched.insert(pid);
                if action == Action::Created && record != RecordType::Pipelines {
                    dirty = Some(pid);
                    continue;
                }
                if let Some(d) = dirty.take().filter(|d| *d != pid) {
                    feed.publish(&tracked, &mut repos_seen, d).await;
                }
                if action == Action::Created {
                    dirty = Some(pid);
                } else {
                    feed.publish(&tracked, &mut repos_seen, pid).await;
                }
            }
            if let Some(d) = dirty {
                feed.publish(&tracked, &mut repos_seen, d).await;
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

    /// Applies one event (of `record`, `action`: its parsed kind); returns the pipeline it
    /// concerns.
    async fn apply(
        &self,
        tracked: &mut HashMap<i64, Tracked>,
        repos_seen: &mut HashMap<i64, Repo>,
        event: &StoredEvent,
        record: RecordType,
        action: Action,
    ) -> Option<i64> {
        if record == RecordType::Repos {
            if let Ok(repo) = Repo::deserialize(&event.object) {
                repos_seen.insert(repo.id, repo);
            }
            return None;
        }
        let pipeline_id = match record {
            RecordType::Pipelines => event.object["id"].as_i64()?,
            RecordType::Workflows | RecordType::Steps => event.object["pipeline_id"].as_i64()?,
            // Not followed (see `FOLLOWED`).
            _ => return None,
        };
        if action == Action::Deleted && record == RecordType::Pipelines {
            tracked.remove(&pipeline_id);
            return None;
        }
        if !tracked.contains_key(&pipeline_id) {
            if record == RecordType::Pipelines && action == Action::Created {
                let p = Pipeline::deserialize(&event.object).ok()?;
                tracked.insert(pipeline_id, Tracked::from_db(event.repo_id.unwrap_or(0), p));
                return Some(pipeline_id);
            }
            // Created before we started watching: take it from the database once.
            let row = self.store.read(move |c| {
                let row = pipelines::by_id(c, pipeline_id)?;
                pipelines::full(c, row.repo_id, row.pipeline.number)
            });
            let row = row.await.ok()?;
            tracked.insert(pipeline_id, Tracked::from_db(row.repo_id, row.pipeline));
            return Some(pipeline_id);
        }
        let t = tracked.get_mut(&pipeline_id)?;
        match record {
            RecordType::Pipelines => {
                if let Ok(mut p) = Pipeline::deserialize(&event.object) {
                    p.workflows = None;
                    t.pipeline = p;
                }
            }
            RecordType::Workflows => {
                if let Ok(wf) = Workflow::deserialize(&event.object) {
                    if action == Action::Deleted {
                        t.workflows.remove(&wf.id);
                    } else {
                        t.workflows.insert(wf.id, wf);
                    }
                }
            }
            RecordType::Steps => {
                let wf_id = event.object["ppid"]
                    .as_i64()
                    .and_then(|ppid| t.workflows.values().find(|w| w.pid == ppid).map(|w| w.id));
                if let (Ok(s), Some(wf_id)) = (Step::deserialize(&event.object), wf_id) {
                    if action == Action::Deleted {
                        t.steps.remove(&s.id);
                    } else {
                        t.steps.insert(s.id, (wf_id, s));
                    }
                }
            }
            _ => {}
        }
        Some(pipeline_id)
    }

    /// Renders and sends pipeline `pipeline_id` as tracked.
    async fn publish(
        &self,
        tracked: &HashMap<i64, Tracked>,
        repos_seen: &mut HashMap<i64, Repo>,
        pipeline_id: i64,
    ) {
        // Nobody listening: a message sent now would be dropped unread, so it is not rendered.
        if self.tx.receiver_count() == 0 {
            return;
        }
        let Some(t) = tracked.get(&pipeline_id) else {
            return;
        };
        let repo_id = t.repo_id;
        if let std::collections::hash_map::Entry::Vacant(slot) = repos_seen.entry(repo_id)
            && let Ok(row) = self.store.read(move |c| repos::by_id(c, repo_id)).await
        {
            slot.insert(row.repo);
        }
        let Some(repo) = repos_seen.get(&repo_id) else {
            return;
        };
        let pipeline = t.render();
        let body = json!({"repo": repo, "pipeline": pipeline});
        let frame = Bytes::from(format!("data: {body}\n\n"));
        let _ = self.tx.send(Arc::new(FeedMessage {
            repo_id,
            visibility: repo.visibility,
            pipeline_id,
            steps: t.steps.values().map(|(_, s)| (s.id, s.state)).collect(),
            frame,
        }));
    }
}
