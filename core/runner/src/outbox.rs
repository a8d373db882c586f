//! A workflow's reports on their way to the server: step states, log lines and the
//! workflow's end, delivered in the order they happened, each until the server takes it,
//! however long the server or its database is away.
//!
//! The runner never waits for the server while steps run. It hands every report to the
//! workflow's [`Outbox`] through a [`Reporter`] and goes on; one task per workflow delivers
//! the reports head first, re-sending the head until it is taken and backing off (up to
//! [`MAX_BACKOFF`]) while the server does not answer. The first thing it says after such an
//! outage is `extend`, so the lease the server keeps for the workflow runs from that moment
//! (a lease lasts a minute after the agent's last contact: an outage shorter than that
//! costs time, never the workflow).
//!
//! **At least once, applied once.** A report whose answer was lost is sent again, so the
//! server must be able to tell a repeat: log lines carry their line numbers (the server
//! stores each line once), step reports a sequence number of their lease (`StepUpdate::seq`,
//! the server applies each number once), and the workflow's end is taken again as a no-op
//! once it ended the workflow.
//!
//! **Bounded memory.** Reports wait in memory up to [`MEMORY_LIMIT`] bytes; past that they
//! are appended to a spool file (`<spool dir>/<workflow id>.jsonl`) and read back in order
//! once memory has room. What is still held when the outbox is dropped (the runner stopping
//! before the server answered) is written to that file too, and [`deliver_leftovers`]
//! delivers it when the runner starts again, before it takes any work.
//!
//! **Bounded disk.** A workflow spools at most [`SPOOL_LIMIT`] bytes of log lines. Past it, a
//! step's next line is replaced by one saying that its output is not kept, and its later
//! lines are dropped until the spool has been delivered; step states and the workflow's end
//! are always kept. Without this bound a chatty step with `pipeline.max_step_log_bytes = 0`
//! would fill the agent's disk during a long outage.
//!
//! A report the server refuses (`RunnerError::Refused`: a bad report) is logged and dropped;
//! when the server says the workflow is no longer this agent's (`RunnerError::NotHeld`: the
//! lease ran out and the workflow went back to the queue) nothing more of it is sent and
//! [`Outbox::given_away`] tells the runner to stop its steps.

use std::collections::VecDeque;
use std::io::{BufRead, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use crate::protocol::{LogLine, StepUpdate, WorkflowDone};
use crate::{AgentApi, MAX_BATCH_BYTES, MAX_BATCH_LINES, RunnerError};

/// Bytes of reports one workflow keeps in memory before it spools to disk.
pub const MEMORY_LIMIT: usize = 4 << 20;
/// Bytes of log lines one workflow spools to disk before it drops a step's later lines.
pub const SPOOL_LIMIT: u64 = 1 << 30;
/// The first wait after a failed delivery; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between deliveries while the server is away: once it answers again,
/// reports flow within this long.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One report about a workflow, as sent and as spooled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "report", rename_all = "snake_case")]
pub enum Report {
    Step(StepUpdate),
    Logs(Vec<LogLine>),
    Done(WorkflowDone),
}

impl Report {
    /// About what the report takes in memory.
    fn size(&self) -> usize {
        match self {
            Report::Step(u) => 128 + u.error.len(),
            Report::Logs(lines) => lines.iter().map(|l| 64 + l.data.len()).sum(),
            Report::Done(d) => 64 + d.error.len(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Report::Step(_) => "step",
            Report::Logs(_) => "logs",
            Report::Done(_) => "done",
        }
    }
}

/// Reports past the memory bound, in a file, after those in memory.
struct Spool {
    path: PathBuf,
    /// Where the next unread report starts.
    read_at: u64,
    /// Reports written and not read back yet.
    unread: usize,
    /// Bytes written to the file.
    written: u64,
}

/// What an outbox holds, in order: `memory`, then `spool`.
#[derive(Default)]
struct Held {
    memory: VecDeque<Report>,
    memory_bytes: usize,
    spool: Option<Spool>,
    /// The last step report's sequence number.
    seq: i64,
    /// The server gave the workflow to another agent: nothing more is sent.
    given_away: bool,
    /// Steps whose lines are dropped because the spool is full (each was told in a line).
    cut_steps: Vec<i64>,
}

impl Held {
    fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.spool.as_ref().is_none_or(|s| s.unread == 0)
    }

    fn count(&self) -> usize {
        self.memory.len() + self.spool.as_ref().map_or(0, |s| s.unread)
    }
}

struct Shared {
    workflow_id: i64,
    spool_path: PathBuf,
    /// [`SPOOL_LIMIT`], smaller in tests.
    spool_limit: u64,
    held: Mutex<Held>,
    /// Signalled when a report is added.
    added: Notify,
    /// Reports held and not delivered (or dropped) yet.
    pending: watch::Sender<usize>,
    given_away: watch::Sender<bool>,
}

impl Shared {
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, report: Report) {
        {
            let mut held = self.held();
            if held.given_away {
                return;
            }
            let spooling = held.spool.is_some() || held.memory_bytes >= MEMORY_LIMIT;
            let report = match report {
                Report::Logs(lines) if spooling => match self.cut_when_full(&mut held, lines) {
                    Some(lines) => Report::Logs(lines),
                    None => return,
                },
                other => other,
            };
            if !(spooling && self.spool_one(&mut held, &report)) {
                held.memory_bytes += report.size();
                held.memory.push_back(report);
            }
            self.pending.send_replace(held.count());
        }
        self.added.notify_one();
    }

    /// `lines` as they may still be spooled: all of them below the limit; past it, none,
    /// except that each step's first dropped line becomes a note saying so (it keeps the
    /// line's number, so a reader sees where the gap starts). `None` when nothing is left.
    fn cut_when_full(&self, held: &mut Held, lines: Vec<LogLine>) -> Option<Vec<LogLine>> {
        let written = held.spool.as_ref().map_or(0, |s| s.written);
        if written < self.spool_limit {
            return Some(lines);
        }
        let mut kept = Vec::new();
        for mut line in lines {
            if held.cut_steps.contains(&line.step_id) {
                continue;
            }
            held.cut_steps.push(line.step_id);
            tracing::warn!(
                workflow = self.workflow_id,
                step = line.step_id,
                limit = self.spool_limit,
                "the server is away and this workflow's spool is full: the step's later log lines are dropped"
            );
            line.data = format!(
                "[woodlark] the server was away and this agent's spool for the workflow reached {} bytes: output from here until the server answered again is not kept",
                self.spool_limit
            );
            kept.push(line);
        }
        (!kept.is_empty()).then_some(kept)
    }

    /// Appends `report` to the spool file; false (it stays in memory, nothing is lost) when
    /// the file cannot be written.
    fn spool_one(&self, held: &mut Held, report: &Report) -> bool {
        let written = append_reports(&self.spool_path, std::slice::from_ref(report));
        match written {
            Ok(bytes) => {
                let spool = held.spool.get_or_insert_with(|| Spool {
                    path: self.spool_path.clone(),
                    read_at: 0,
                    unread: 0,
                    written: 0,
                });
                spool.unread += 1;
                spool.written += bytes;
                true
            }
            Err(err) => {
                tracing::error!(
                    workflow = self.workflow_id,
                    path = %self.spool_path.display(),
                    %err,
                    "cannot spool reports to disk; holding them in memory"
                );
                false
            }
        }
    }

    /// The next report to send and how many held reports it stands for (consecutive log
    /// batches go as one, within the batch bounds); reads spooled reports back first when
    /// memory is empty.
    fn next(&self) -> Option<(Report, usize)> {
        let mut held = self.held();
        if held.memory.is_empty() {
            self.refill(&mut held);
        }
        let first = held.memory.front()?.clone();
        let Report::Logs(mut lines) = first else {
            return Some((first, 1));
        };
        let mut bytes: usize = lines.iter().map(|l| l.data.len()).sum();
        let mut taken = 1;
        for report in held.memory.iter().skip(1) {
            let Report::Logs(more) = report else { break };
            let more_bytes: usize = more.iter().map(|l| l.data.len()).sum();
            if lines.len() + more.len() > MAX_BATCH_LINES || bytes + more_bytes > MAX_BATCH_BYTES {
                break;
            }
            lines.extend(more.iter().cloned());
            bytes += more_bytes;
            taken += 1;
        }
        Some((Report::Logs(lines), taken))
    }

    /// Moves spooled reports into memory, about half the memory bound at a time.
    fn refill(&self, held: &mut Held) {
        let Some(spool) = held.spool.as_mut() else {
            return;
        };
        match read_reports(&spool.path, spool.read_at, MEMORY_LIMIT / 2) {
            Ok((reports, next)) => {
                spool.read_at = next;
                spool.unread = spool.unread.saturating_sub(reports.len());
                let done = reports.is_empty() || spool.unread == 0;
                for report in reports {
                    held.memory_bytes += report.size();
                    held.memory.push_back(report);
                }
                if done {
                    let _ = std::fs::remove_file(&spool.path);
                    held.spool = None;
                    // Delivered: a step cut short may be heard again.
                    held.cut_steps.clear();
                }
            }
            Err(err) => {
                tracing::error!(
                    workflow = self.workflow_id,
                    path = %spool.path.display(),
                    %err,
                    unread = spool.unread,
                    "cannot read spooled reports back; they are lost"
                );
                let _ = std::fs::remove_file(&spool.path);
                held.spool = None;
            }
        }
        self.pending.send_replace(held.count());
    }

    /// Drops the `n` reports at the head (delivered, or refused).
    fn pop(&self, n: usize) {
        let mut held = self.held();
        for _ in 0..n {
            if let Some(report) = held.memory.pop_front() {
                held.memory_bytes = held.memory_bytes.saturating_sub(report.size());
            }
        }
        self.pending.send_replace(held.count());
    }

    /// The server gave the workflow away: what is held goes, and nothing more is taken.
    fn give_away(&self) {
        let mut held = self.held();
        held.given_away = true;
        held.memory.clear();
        held.memory_bytes = 0;
        if let Some(spool) = held.spool.take() {
            let _ = std::fs::remove_file(spool.path);
        }
        self.pending.send_replace(0);
        self.given_away.send_replace(true);
    }

    /// Writes what is still held to the spool file (memory first, then what was spooled),
    /// for [`deliver_leftovers`]; removes the file when nothing is held.
    fn persist(&self) {
        let mut held = self.held();
        if held.given_away || held.is_empty() {
            if let Some(spool) = held.spool.take() {
                let _ = std::fs::remove_file(spool.path);
            }
            return;
        }
        let mut all: Vec<Report> = held.memory.drain(..).collect();
        if let Some(spool) = held.spool.take() {
            match read_reports(&spool.path, spool.read_at, usize::MAX) {
                Ok((rest, _)) => all.extend(rest),
                Err(err) => {
                    tracing::error!(workflow = self.workflow_id, %err, "cannot read spooled reports back")
                }
            }
        }
        let tmp = self.spool_path.with_extension("tmp");
        let _ = std::fs::remove_file(&tmp);
        let written =
            append_reports(&tmp, &all).and_then(|_| std::fs::rename(&tmp, &self.spool_path));
        match written {
            Ok(()) => tracing::warn!(
                workflow = self.workflow_id,
                reports = all.len(),
                path = %self.spool_path.display(),
                "reports not delivered yet are kept on disk; the runner's next start delivers them"
            ),
            Err(err) => tracing::error!(
                workflow = self.workflow_id,
                reports = all.len(),
                %err,
                "reports not delivered could not be kept on disk; they are lost"
            ),
        }
    }
}

/// Appends reports to a spool file (created private) as JSON lines; returns the bytes
/// written.
fn append_reports(path: &Path, reports: &[Report]) -> std::io::Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = Vec::new();
    for report in reports {
        serde_json::to_writer(&mut text, report)?;
        text.push(b'\n');
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(&text)?;
    Ok(text.len() as u64)
}

/// Reads reports of a spool file from byte `from`, stopping after about `budget` bytes;
/// returns them and where the next one starts. A torn last line (the runner died while
/// writing it) ends the file.
fn read_reports(path: &Path, from: u64, budget: usize) -> std::io::Result<(Vec<Report>, u64)> {
    let mut file = std::fs::File::open(path)?;
    file.seek(std::io::SeekFrom::Start(from))?;
    let mut reader = std::io::BufReader::new(file);
    let mut reports = Vec::new();
    let (mut at, mut bytes) = (from, 0usize);
    let mut line = Vec::new();
    while bytes < budget {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        match serde_json::from_slice::<Report>(&line) {
            Ok(report) => reports.push(report),
            Err(err) => {
                tracing::warn!(path = %path.display(), %err, "skipping a spooled report that does not parse")
            }
        }
        at += n as u64;
        bytes += n;
    }
    Ok((reports, at))
}

/// Hands reports to a workflow's outbox; cheap to clone, never waits.
#[derive(Clone)]
pub struct Reporter {
    shared: Arc<Shared>,
}

impl Reporter {
    /// A step's state change; numbered here, in the order the runner reports them.
    pub fn step(&self, mut update: StepUpdate) {
        {
            let mut held = self.shared.held();
            held.seq += 1;
            update.seq = held.seq;
        }
        self.shared.push(Report::Step(update));
    }

    pub fn logs(&self, lines: Vec<LogLine>) {
        if !lines.is_empty() {
            self.shared.push(Report::Logs(lines));
        }
    }
}

/// The reports of one workflow and the task delivering them (see the module doc).
pub struct Outbox {
    shared: Arc<Shared>,
    deliverer: tokio::task::JoinHandle<()>,
}

impl Outbox {
    /// An outbox for workflow `workflow_id`, spooling to `spool_dir` (created when first
    /// needed).
    pub fn open<A: AgentApi>(api: A, workflow_id: i64, spool_dir: &Path) -> Outbox {
        Outbox::with_held(api, workflow_id, spool_dir, Held::default(), SPOOL_LIMIT)
    }

    fn with_held<A: AgentApi>(
        api: A,
        workflow_id: i64,
        spool_dir: &Path,
        held: Held,
        spool_limit: u64,
    ) -> Outbox {
        if let Err(err) = std::fs::create_dir_all(spool_dir) {
            tracing::warn!(path = %spool_dir.display(), %err, "cannot create the runner's spool directory");
        }
        let count = held.count();
        let shared = Arc::new(Shared {
            workflow_id,
            spool_path: spool_dir.join(format!("{workflow_id}.jsonl")),
            spool_limit,
            held: Mutex::new(held),
            added: Notify::new(),
            pending: watch::channel(count).0,
            given_away: watch::channel(false).0,
        });
        let deliverer = tokio::spawn(deliver(api, shared.clone()));
        Outbox { shared, deliverer }
    }

    pub fn reporter(&self) -> Reporter {
        Reporter {
            shared: self.shared.clone(),
        }
    }

    /// Turns true when the server said the workflow is no longer this agent's.
    pub fn given_away(&self) -> watch::Receiver<bool> {
        self.shared.given_away.subscribe()
    }

    /// Hands in the workflow's end and waits until everything is delivered.
    pub async fn finish(self, done: WorkflowDone) {
        self.shared.push(Report::Done(done));
        self.delivered().await;
    }

    /// Waits until every report handed in so far is delivered (or dropped as refused).
    pub async fn delivered(&self) {
        let mut pending = self.shared.pending.subscribe();
        let _ = pending.wait_for(|n| *n == 0).await;
    }
}

impl Drop for Outbox {
    /// A runner stopping before the server took everything keeps the rest on disk.
    fn drop(&mut self) {
        self.deliverer.abort();
        self.shared.persist();
    }
}

/// Delivers `shared`'s reports until the outbox is dropped.
async fn deliver<A: AgentApi>(api: A, shared: Arc<Shared>) {
    let id = shared.workflow_id;
    let mut backoff = FIRST_BACKOFF;
    let mut away_since: Option<Instant> = None;
    loop {
        let added = shared.added.notified();
        let Some((report, covers)) = shared.next() else {
            added.await;
            continue;
        };
        if let Some(since) = away_since {
            // The first contact after an outage keeps the lease before anything else.
            match api.extend(id).await {
                Ok(()) => {
                    tracing::info!(
                        workflow = id,
                        away_secs = since.elapsed().as_secs(),
                        held = shared.held().count(),
                        "the server answers again; delivering the reports held meanwhile"
                    );
                    away_since = None;
                    backoff = FIRST_BACKOFF;
                }
                Err(RunnerError::Transport(_)) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
                Err(RunnerError::NotHeld(why)) => {
                    tracing::warn!(
                        workflow = id,
                        why,
                        "the server gave this workflow to another agent while it was away; its reports are dropped"
                    );
                    shared.give_away();
                    continue;
                }
                Err(RunnerError::Refused(_)) => away_since = None,
            }
        }
        let sent = match &report {
            Report::Step(update) => api.step(id, update.clone()).await,
            Report::Logs(lines) => api.logs(id, lines.clone()).await,
            Report::Done(done) => api.done(id, done.clone()).await,
        };
        match sent {
            Ok(()) => {
                backoff = FIRST_BACKOFF;
                shared.pop(covers);
            }
            Err(RunnerError::Transport(err)) => {
                if away_since.is_none() {
                    tracing::warn!(
                        workflow = id,
                        %err,
                        "the server does not answer; holding this workflow's reports until it does"
                    );
                    away_since = Some(Instant::now());
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(RunnerError::NotHeld(why)) => {
                tracing::warn!(
                    workflow = id,
                    why,
                    report = report.kind(),
                    "the server says this workflow is no longer this agent's; its reports are dropped"
                );
                shared.give_away();
            }
            Err(RunnerError::Refused(why)) => {
                tracing::warn!(
                    workflow = id,
                    why,
                    report = report.kind(),
                    "the server refused a report; dropped"
                );
                shared.pop(covers);
            }
        }
    }
}

/// Delivers what earlier runs left in `spool_dir` (an outbox dropped before the server took
/// everything), one workflow after the other; returns how many workflows had reports. A
/// workflow the server no longer gives this agent has its reports dropped.
pub async fn deliver_leftovers<A: AgentApi>(api: &A, spool_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(spool_dir) else {
        return 0;
    };
    let mut left: Vec<(i64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let id = path
                .file_name()?
                .to_str()?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()?;
            Some((id, path))
        })
        .collect();
    left.sort();
    for (id, path) in &left {
        let unread = match read_reports(path, 0, usize::MAX) {
            Ok((reports, _)) => reports.len(),
            Err(_) => 0,
        };
        tracing::info!(
            workflow = id,
            reports = unread,
            "delivering reports an earlier run of this runner could not"
        );
        let held = Held {
            spool: Some(Spool {
                path: path.clone(),
                read_at: 0,
                unread,
                written: std::fs::metadata(path).map_or(0, |m| m.len()),
            }),
            // Later numbers than any the file holds are never needed: nothing is added.
            ..Held::default()
        };
        let outbox = Outbox::with_held(api.clone(), *id, spool_dir, held, SPOOL_LIMIT);
        outbox.delivered().await;
    }
    left.len()
}

#[cfg(test)]
mod tests;
