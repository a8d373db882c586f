//! Server-sent event streams: pipeline changes and live step logs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use serde_json::Value;
use tokio::net::TcpStream;

use crate::pipelines::wait_for;
use crate::util::TestServer;

/// A minimal SSE reader over one HTTP/1.1 connection.
/// The text of a log entry as the API sends it (`data` in base64).
pub fn entry_text(entry: &Value) -> String {
    let data = entry["data"].as_str().expect("data");
    let bytes =
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).expect("base64");
    String::from_utf8(bytes).expect("utf-8")
}

pub struct Sse {
    body: Incoming,
    buf: String,
}

/// One event: its `event:` name (empty for unnamed), `id:` and `data:`; comments skipped.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: String,
    pub id: String,
    pub data: String,
}

impl Sse {
    pub async fn open(
        addr: std::net::SocketAddr,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Option<String>, Sse) {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        let mut req = hyper::Request::get(path).header("host", "test");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = sender
            .send_request(req.body(Empty::<Bytes>::new()).unwrap())
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string());
        (
            status,
            ct,
            Sse {
                body: resp.into_body(),
                buf: String::new(),
            },
        )
    }

    /// The next event, or `None` at the end of the stream or after `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(end) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..end + 2).collect();
                let mut ev = Event {
                    name: String::new(),
                    id: String::new(),
                    data: String::new(),
                };
                let mut any = false;
                for line in raw.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        ev.name = v.to_string();
                        any = true;
                    } else if let Some(v) = line.strip_prefix("id: ") {
                        ev.id = v.to_string();
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        ev.data.push_str(v);
                        any = true;
                    }
                }
                if any {
                    return Some(ev);
                }
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .ok()??
                .ok()?;
            if let Ok(data) = frame.into_data() {
                self.buf.push_str(&String::from_utf8_lossy(&data));
            }
        }
    }
}

pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_stream_shows_every_change_in_order_and_only_to_those_who_may_see() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();

    let (status, ct, mut alice) =
        Sse::open(s.http.addr, "/api/stream/events", Some(&p.alice), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(ct.as_deref(), Some("text/event-stream"));
    let (_, _, mut bob) = Sse::open(
        s.http.addr,
        &format!("/api/stream/events?access_token={}", p.bob),
        None,
        &[],
    )
    .await;
    let (_, _, mut anon) = Sse::open(s.http.addr, "/api/stream/events", None, &[]).await;

    let config = "steps:\n  - name: one\n    image: sh\n    commands: [\"echo one\"]\n  - name: two\n    image: sh\n    commands: [\"echo two\"]\n";
    crate::pipelines::push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "go").await;
    wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success").await;

    // Alice sees the pipeline move forward, one message per change, ending in success.
    let mut seen: Vec<Value> = Vec::new();
    while let Some(ev) = alice.next(Duration::from_secs(5)).await {
        assert_eq!(ev.name, "", "pipeline messages are unnamed");
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(v["repo"]["full_name"], "alice/app");
        let done = v["pipeline"]["status"] == "success";
        seen.push(v);
        if done {
            break;
        }
    }
    let statuses: Vec<String> = seen
        .iter()
        .map(|v| v["pipeline"]["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        statuses.first().map(String::as_str),
        Some("pending"),
        "{statuses:?}"
    );
    assert_eq!(
        statuses.last().map(String::as_str),
        Some("success"),
        "{statuses:?}"
    );
    assert!(statuses.contains(&"running".to_string()), "{statuses:?}");
    // Status never goes backwards: pending* running* success.
    let rank = |s: &str| match s {
        "pending" => 0,
        "running" => 1,
        _ => 2,
    };
    assert!(
        statuses.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])),
        "{statuses:?}"
    );
    // Each step's state changes are all there, in order.
    let step_states = |name: &str| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for v in &seen {
            for wf in v["pipeline"]["workflows"].as_array().unwrap() {
                for st in wf["children"].as_array().unwrap() {
                    if st["name"] == name {
                        let state = st["state"].as_str().unwrap().to_string();
                        if out.last() != Some(&state) {
                            out.push(state);
                        }
                    }
                }
            }
        }
        out
    };
    assert_eq!(step_states("one"), ["pending", "running", "success"]);
    assert_eq!(step_states("two"), ["pending", "running", "success"]);

    // bob and anonymous callers see nothing of a private repository.
    assert!(bob.next(Duration::from_millis(300)).await.is_none());
    assert!(anon.next(Duration::from_millis(300)).await.is_none());
}

/// The tailer reads nothing while nobody listens; a pipeline that changed meanwhile is
/// shown whole, as it stands, at its next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_listener_sees_pipelines_changed_while_nobody_listened() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/late").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: one\n    image: sh\n    commands: [\"echo one\"]\n  - name: two\n    image: sh\n    commands: [\"echo two\"]\n";
    crate::pipelines::push_files(&s, "alice/late", &[(".woodpecker.yaml", config)], "go").await;
    wait_for(&s.http, &p.alice, id, 1, 10, |p| p["status"] == "pending").await;

    let (status, _, mut alice) =
        Sse::open(s.http.addr, "/api/stream/events", Some(&p.alice), &[]).await;
    assert_eq!(status, 200);
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let mut v = Value::Null;
    while v["pipeline"]["status"] != "canceled" {
        let ev = alice
            .next(Duration::from_secs(5))
            .await
            .expect("a message for the cancelled pipeline");
        v = serde_json::from_str(&ev.data).unwrap();
    }
    assert_eq!(v["repo"]["full_name"], "alice/late");
    assert_eq!(v["pipeline"]["number"], 1);
    let steps: Vec<&str> = v["pipeline"]["workflows"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["clone", "one", "two"], "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_stream_is_live_and_resumes_without_gap_or_duplicate() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: ticker\n    image: sh\n    commands:\n      - sleep 1\n      - for i in 1 2 3 4 5 6; do echo \"tick $$i $$(date +%s%N)\"; sleep 0.3; done\n";
    crate::pipelines::push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "ticks").await;
    let running = wait_for(&s.http, &p.alice, id, 1, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && crate::pipelines::step_of(p, "ticker")["state"] == "running"
    })
    .await;
    let step_id = crate::pipelines::step_of(&running, "ticker")["id"]
        .as_i64()
        .unwrap();
    let path = format!("/api/stream/logs/{id}/1/{step_id}");
    s.http.get(&path, Some(&p.bob)).await.expect(404);

    let (status, _, mut live) = Sse::open(s.http.addr, &path, Some(&p.alice), &[]).await;
    assert_eq!(status, 200);
    let mut ticks = Vec::new();
    let mut ids = Vec::new();
    let mut lags = Vec::new();
    let mut live_entries = Vec::new();
    loop {
        let ev = live
            .next(Duration::from_secs(20))
            .await
            .expect("stream ended early");
        if ev.name == "eof" {
            break;
        }
        let entry: Value = serde_json::from_str(&ev.data).unwrap();
        ids.push(ev.id.parse::<i64>().unwrap());
        live_entries.push(entry.clone());
        let text = entry_text(&entry);
        if let Some(rest) = text.strip_prefix("tick ") {
            let mut parts = rest.split(' ');
            let n: i64 = parts.next().unwrap().parse().unwrap();
            let written: u128 = parts.next().unwrap().parse().unwrap();
            lags.push(now_ns().saturating_sub(written) / 1_000_000);
            ticks.push(n);
        }
    }
    assert_eq!(ticks, [1, 2, 3, 4, 5, 6]);
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "ids are consecutive: {ids:?}"
    );
    // Lines that were written while we watched arrive within 100 ms. The whole suite shares two
    // cores, so one scheduling hiccup among the five is tolerated, but never beyond a second.
    let watched = &lags[1..];
    let late = watched.iter().filter(|ms| **ms > 100).count();
    assert!(
        late <= 1 && watched.iter().all(|ms| *ms <= 1000),
        "lines arrived late (ms): {lags:?}"
    );

    // A line reads the same live and stored: same row id, same rendering.
    let stored = s
        .http
        .get(&format!("/api/repos/{id}/logs/1/{step_id}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(stored, Value::Array(live_entries));

    // The step ended: a new stream replays the stored lines, numbered from 0, and ends; one
    // that resumes past the end gets only the end.
    let (_, _, mut ended) = Sse::open(s.http.addr, &path, Some(&p.alice), &[]).await;
    let mut replayed = Vec::new();
    loop {
        let ev = ended.next(Duration::from_secs(5)).await.expect("no eof");
        if ev.name == "eof" {
            break;
        }
        let entry: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(
            ev.id.parse::<i64>().unwrap(),
            entry["line"].as_i64().unwrap() + 1
        );
        replayed.push(entry["line"].as_i64().unwrap());
    }
    let expected: Vec<i64> = (0..ids.len() as i64).collect();
    assert_eq!(replayed, expected);
    let past = ids.last().unwrap().to_string();
    let (_, _, mut resumed) = Sse::open(
        s.http.addr,
        &path,
        Some(&p.alice),
        &[("last-event-id", &past)],
    )
    .await;
    assert_eq!(
        resumed.next(Duration::from_secs(5)).await.unwrap().name,
        "eof"
    );

    // Resuming: a second run, a client that reconnects with Last-Event-ID.
    let restarted = s
        .http
        .post(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice), "")
        .await
        .expect(200)
        .json();
    let n = restarted["number"].as_i64().unwrap();
    let running = wait_for(&s.http, &p.alice, id, n, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && crate::pipelines::step_of(p, "ticker")["state"] == "running"
    })
    .await;
    let step_id = crate::pipelines::step_of(&running, "ticker")["id"]
        .as_i64()
        .unwrap();
    let path = format!("/api/stream/logs/{id}/{n}/{step_id}");
    let (_, _, mut first) = Sse::open(s.http.addr, &path, Some(&p.alice), &[]).await;
    let mut got = Vec::new();
    while got.len() < 3 {
        let ev = first.next(Duration::from_secs(20)).await.unwrap();
        got.push(
            ev.id
                .parse::<i64>()
                .unwrap_or_else(|_| panic!("{ev:?} after {got:?}")),
        );
    }
    drop(first);
    let last = got.last().unwrap().to_string();
    let (_, _, mut second) = Sse::open(
        s.http.addr,
        &path,
        Some(&p.alice),
        &[("last-event-id", &last)],
    )
    .await;
    loop {
        let ev = second
            .next(Duration::from_secs(20))
            .await
            .expect("stream ended early");
        if ev.name == "eof" {
            break;
        }
        got.push(ev.id.parse::<i64>().unwrap());
    }
    let expected: Vec<i64> = (1..=*got.last().unwrap()).collect();
    assert_eq!(got, expected, "no gap, no duplicate");
}
