use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::protocol::{AgentInfo, LineKind, Work};
use woodlark_pipeline::status::Status;

/// A server that is up or away (`down`), or that no longer gives this agent the workflow
/// (`given_away`), and remembers what it took, in order, once per report: as the real one,
/// it applies a step report once by its number and a line once by its number.
#[derive(Clone, Default)]
struct Server {
    down: Arc<AtomicBool>,
    given_away: Arc<AtomicBool>,
    /// What it took: `extend`, `step <id> <state> <seq>`, `line <n>`, `done <state>`.
    took: Arc<Mutex<Vec<String>>>,
    /// Calls it answered (applied or not).
    calls: Arc<Mutex<usize>>,
    last_seq: Arc<Mutex<i64>>,
    /// The text of the last line it took.
    last_text: Arc<Mutex<String>>,
}

impl Server {
    fn answer(&self) -> Result<(), RunnerError> {
        *self.calls.lock().unwrap() += 1;
        if self.down.load(Ordering::SeqCst) {
            return Err(RunnerError::Transport("connection refused".into()));
        }
        if self.given_away.load(Ordering::SeqCst) {
            return Err(RunnerError::NotHeld("409".into()));
        }
        Ok(())
    }

    fn took(&self) -> Vec<String> {
        self.took.lock().unwrap().clone()
    }

    fn lines(&self) -> Vec<i64> {
        self.took()
            .iter()
            .filter_map(|t| t.strip_prefix("line ")?.parse().ok())
            .collect()
    }
}

impl AgentApi for Server {
    async fn next(&self, _: &AgentInfo) -> Result<Option<Work>, RunnerError> {
        Ok(None)
    }
    async fn init(&self, _: i64) -> Result<(), RunnerError> {
        self.answer()
    }
    async fn step(&self, _: i64, update: StepUpdate) -> Result<(), RunnerError> {
        self.answer()?;
        let mut last = self.last_seq.lock().unwrap();
        if update.seq > *last {
            *last = update.seq;
            self.took.lock().unwrap().push(format!(
                "step {} {} {}",
                update.step_id,
                update.state.as_str(),
                update.seq
            ));
        }
        Ok(())
    }
    async fn logs(&self, _: i64, lines: Vec<LogLine>) -> Result<(), RunnerError> {
        self.answer()?;
        let mut took = self.took.lock().unwrap();
        for line in lines {
            let seen = format!("line {}", line.line);
            if !took.contains(&seen) {
                took.push(seen);
                *self.last_text.lock().unwrap() = line.data;
            }
        }
        Ok(())
    }
    async fn extend(&self, _: i64) -> Result<(), RunnerError> {
        self.answer()?;
        self.took.lock().unwrap().push("extend".into());
        Ok(())
    }
    async fn wait_canceled(&self, _: i64) -> Result<bool, RunnerError> {
        Ok(false)
    }
    async fn done(&self, _: i64, done: WorkflowDone) -> Result<(), RunnerError> {
        self.answer()?;
        self.took
            .lock()
            .unwrap()
            .push(format!("done {}", done.state.as_str()));
        Ok(())
    }
}

fn update(state: Status, exit_code: i64) -> StepUpdate {
    StepUpdate {
        step_id: 7,
        state,
        exit_code,
        error: String::new(),
        started: 1,
        finished: 0,
        cancel_pipeline: false,
        seq: 0,
    }
}

fn line(n: i64, data: &str) -> LogLine {
    LogLine {
        step_id: 7,
        line: n,
        time: 0,
        kind: LineKind::Stdout,
        data: data.into(),
    }
}

/// Reports `batches` batches of 64 lines of 1 KiB, numbered from 0; returns how many lines.
fn write_kib_lines(reports: &Reporter, batches: usize) -> i64 {
    let text = "x".repeat(1024);
    let mut n = 0;
    for _ in 0..batches {
        let batch: Vec<LogLine> = (0..64)
            .map(|_| {
                n += 1;
                line(n - 1, &text)
            })
            .collect();
        reports.logs(batch);
    }
    n
}

fn done(state: Status) -> WorkflowDone {
    WorkflowDone {
        state,
        error: String::new(),
    }
}

async fn eventually(what: &str, ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn an_outage_costs_time_and_nothing_else() {
    let spool = tempfile::tempdir().unwrap();
    let server = Server::default();
    let outbox = Outbox::open(server.clone(), 1, spool.path());
    let reports = outbox.reporter();
    reports.step(update(Status::Running, 0));
    reports.logs(vec![line(0, "before")]);
    outbox.delivered().await;

    // The server goes away while the step goes on printing and then fails.
    server.down.store(true, Ordering::SeqCst);
    for n in 1..=30 {
        reports.logs(vec![line(n, "during")]);
    }
    reports.step(update(Status::Failure, 3));
    eventually("the outbox keeps trying", || {
        *server.calls.lock().unwrap() > 4
    })
    .await;
    assert_eq!(server.lines(), [0], "nothing taken while away");

    server.down.store(false, Ordering::SeqCst);
    outbox.finish(done(Status::Failure)).await;
    let took = server.took();
    let lines = server.lines();
    assert_eq!(
        lines,
        (0..=30).collect::<Vec<_>>(),
        "every line once, in order"
    );
    let after = took.iter().position(|t| t == "line 0").unwrap() + 1;
    assert_eq!(
        took[after], "extend",
        "the first word after the outage keeps the lease: {took:?}"
    );
    assert_eq!(
        took[took.len() - 2..],
        ["step 7 failure 2".to_string(), "done failure".to_string()],
        "the step's real end, then the workflow's: {took:?}"
    );
    assert!(
        !spool.path().join("1.jsonl").exists(),
        "nothing left on disk"
    );
}

#[tokio::test]
async fn a_long_outage_spools_past_the_memory_bound_and_reads_it_back_in_order() {
    let spool = tempfile::tempdir().unwrap();
    let server = Server::default();
    server.down.store(true, Ordering::SeqCst);
    let outbox = Outbox::open(server.clone(), 2, spool.path());
    let reports = outbox.reporter();
    // 12 MiB of output: three times the memory bound.
    let n = write_kib_lines(&reports, 192);
    {
        let held = outbox.shared.held();
        assert!(
            held.memory_bytes <= MEMORY_LIMIT + 64 * 1100,
            "memory stays bounded: {}",
            held.memory_bytes
        );
        assert!(held.spool.as_ref().is_some_and(|s| s.unread > 0));
    }
    assert!(spool.path().join("2.jsonl").exists(), "the rest is on disk");

    server.down.store(false, Ordering::SeqCst);
    outbox.finish(done(Status::Success)).await;
    assert_eq!(server.lines(), (0..n).collect::<Vec<_>>());
    assert!(!spool.path().join("2.jsonl").exists(), "the spool is gone");
}

#[tokio::test]
async fn past_the_spool_limit_a_step_says_its_output_is_cut_and_keeps_its_states() {
    let spool = tempfile::tempdir().unwrap();
    let server = Server::default();
    server.down.store(true, Ordering::SeqCst);
    // Memory takes 4 MiB first; the spool then takes 1 MiB of lines.
    let outbox = Outbox::with_held(server.clone(), 4, spool.path(), Held::default(), 1 << 20);
    let reports = outbox.reporter();
    reports.step(update(Status::Running, 0));
    // 8 MiB of output: past memory, the spool's limit, and more.
    let n = write_kib_lines(&reports, 128);
    reports.step(update(Status::Success, 0));
    let written = std::fs::metadata(spool.path().join("4.jsonl"))
        .unwrap()
        .len();
    assert!(
        written < (1 << 20) + 80 * 1024,
        "the spool stops near its limit: {written} bytes"
    );

    server.down.store(false, Ordering::SeqCst);
    outbox.finish(done(Status::Success)).await;
    let took = server.took();
    let lines = server.lines();
    // Every line up to where the spool filled, then the note in the next line's place,
    // then nothing more of the step; both states and the end arrive.
    let last = *lines.last().unwrap();
    assert_eq!(lines, (0..=last).collect::<Vec<_>>());
    assert!(last < n - 1000, "lines were dropped ({last} of {n})");
    let note = server.last_text.lock().unwrap().clone();
    assert!(note.contains("is not kept"), "{note}");
    assert_eq!(took.first().unwrap(), "step 7 running 1");
    assert!(took.contains(&"step 7 success 2".to_string()), "{took:?}");
    assert_eq!(took.last().unwrap(), "done success");
}

#[tokio::test]
async fn what_a_stopped_runner_held_is_delivered_at_its_next_start() {
    let spool = tempfile::tempdir().unwrap();
    let server = Server::default();
    server.down.store(true, Ordering::SeqCst);
    {
        let outbox = Outbox::open(server.clone(), 3, spool.path());
        let reports = outbox.reporter();
        reports.step(update(Status::Running, 0));
        reports.logs(vec![line(0, "a"), line(1, "b")]);
        reports.step(update(Status::Success, 0));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The runner stops here, the server still away.
    }
    assert!(spool.path().join("3.jsonl").exists());

    server.down.store(false, Ordering::SeqCst);
    assert_eq!(deliver_leftovers(&server, spool.path()).await, 1);
    assert_eq!(
        server.took(),
        ["step 7 running 1", "line 0", "line 1", "step 7 success 2"],
    );
    assert!(!spool.path().join("3.jsonl").exists());
    assert_eq!(deliver_leftovers(&server, spool.path()).await, 0);
}

#[tokio::test]
async fn a_workflow_given_away_stops_sending_and_says_so() {
    let spool = tempfile::tempdir().unwrap();
    let server = Server::default();
    let outbox = Outbox::open(server.clone(), 5, spool.path());
    let mut given_away = outbox.given_away();
    server.given_away.store(true, Ordering::SeqCst);
    let reports = outbox.reporter();
    reports.logs(vec![line(0, "late")]);
    tokio::time::timeout(Duration::from_secs(5), given_away.wait_for(|g| *g))
        .await
        .expect("told")
        .unwrap();
    let calls = *server.calls.lock().unwrap();
    reports.logs(vec![line(1, "later")]);
    outbox.finish(done(Status::Success)).await;
    assert_eq!(*server.calls.lock().unwrap(), calls, "nothing more sent");
    assert!(server.took().is_empty());
}
