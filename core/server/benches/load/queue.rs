//! `queue`: pipelines per second from trigger to `success`.
//!
//! 60 one-step `echo hello` pipelines per row on the embedded local runner (capacity 2),
//! triggered 4 at a time until all are finished: by `POST /api/hook` as the git forge's
//! post-receive hook sends it, by manual runs (with the clone, and with `skip_clone`), and the
//! `skip_clone` row again on a server with `storage.synchronous = "normal"` (what fsync costs).
//!
//! **Baseline, same run:** the same processes the runner starts (`git clone` + `git
//! checkout`, then `sh -e -c 'echo hello'`; or the shell alone), run directly, two at a time
//! ([`baseline_jobs`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::StatusCode;

use crate::report::{ratio, table};
use crate::server::{ECHO, Server, git, post_receive_hook, statuses};

const ECHO_NO_CLONE: &str =
    "skip_clone: true\nsteps:\n  - name: echo\n    image: sh\n    commands: [\"echo hello\"]\n";

struct QueueRun {
    n: usize,
    submitted: Duration,
    elapsed: Duration,
    failed: i64,
}

/// Fires `n` triggers (4 in flight) and waits until `n` more pipelines of `repo` are
/// finished than before.
async fn queue_run<F, Fut>(server: &Server, repo: i64, n: usize, trigger: F) -> QueueRun
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (ok0, failed0) = statuses(server, repo).await;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for _ in 0..4 {
        let (next, trigger) = (next.clone(), trigger.clone());
        senders.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                trigger().await;
            }
        }));
    }
    for s in senders {
        s.await.unwrap();
    }
    let submitted = started.elapsed();
    let deadline = started + Duration::from_secs(120);
    loop {
        let (ok, failed) = statuses(server, repo).await;
        let (ok, failed) = (ok - ok0, failed - failed0);
        if ok + failed >= n as i64 || Instant::now() > deadline {
            return QueueRun {
                n: ok as usize,
                submitted,
                elapsed: started.elapsed(),
                failed,
            };
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`queue_run`] with manual runs of `repo` by the user behind `token` as the trigger.
async fn manual_runs(server: &Server, repo: i64, n: usize, token: &str) -> QueueRun {
    let (api, token) = (server.api.clone(), token.to_string());
    let trigger = move || {
        let (api, token) = (api.clone(), token.clone());
        async move {
            api.run_pipeline(repo, &token).await;
        }
    };
    queue_run(server, repo, n, trigger).await
}

/// The same processes the runner starts, run directly, two at a time.
async fn baseline_jobs(n: usize, clone: Option<(PathBuf, String)>) -> Duration {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let root = tempfile::tempdir().unwrap();
    let mut workers = Vec::new();
    for w in 0..2 {
        let (next, clone, root) = (next.clone(), clone.clone(), root.path().to_path_buf());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let dir = root.join(format!("{w}-{i}"));
                tokio::fs::create_dir_all(&dir).await.unwrap();
                if let Some((bare, sha)) = &clone {
                    let script = format!(
                        "git clone --quiet --no-checkout {} . && git -c advice.detachedHead=false checkout --quiet {sha}",
                        bare.display()
                    );
                    let st = tokio::process::Command::new("sh")
                        .args(["-e", "-c", &script])
                        .current_dir(&dir)
                        .output()
                        .await
                        .unwrap();
                    assert!(st.status.success());
                }
                let st = tokio::process::Command::new("sh")
                    .args(["-e", "-c", "echo hello"])
                    .current_dir(&dir)
                    .output()
                    .await
                    .unwrap();
                assert!(st.status.success());
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    started.elapsed()
}

pub async fn run() {
    const N: usize = 60;
    println!(
        "\n# queue: {N} one-step `echo` pipelines per row, local runner with capacity 2, until all are `success`"
    );
    let server = Server::start(true).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let (with_clone, bare) = server
        .pipeline_repo(&admin, &alice, "alice/clone", ECHO)
        .await;
    let (hooked, hooked_bare) = server
        .pipeline_repo(&admin, &alice, "alice/hook", ECHO)
        .await;
    let (no_clone, _) = server
        .pipeline_repo(&admin, &alice, "alice/noclone", ECHO_NO_CLONE)
        .await;
    let sha = git(&bare, &["rev-parse", "main"]).trim().to_string();

    // The hook URL the post-receive script posts to (the repository's own hook token).
    let (hook_path, hook_body) = post_receive_hook(&hooked_bare);

    let hook = {
        let (api, path, body) = (server.api.clone(), hook_path.clone(), hook_body.clone());
        move || {
            let (api, path, body) = (api.clone(), path.clone(), body.clone());
            async move {
                let (status, text) = api.send("POST", &path, None, Some(&body)).await;
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "hook: {}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    };
    // Warm-up: one pipeline of each kind (first clone, first process spawns).
    queue_run(&server, hooked, 1, hook.clone()).await;
    manual_runs(&server, with_clone, 1, &alice).await;
    manual_runs(&server, no_clone, 1, &alice).await;

    let hook_run = queue_run(&server, hooked, N, hook).await;
    let clone_run = manual_runs(&server, with_clone, N, &alice).await;
    let bare_run = manual_runs(&server, no_clone, N, &alice).await;
    // Baselines while the server's data dir (and so the bare repository) still exists.
    let base_clone = baseline_jobs(N, Some((bare.clone(), sha))).await;
    let base_echo = baseline_jobs(N, None).await;
    server.stop().await;

    // The same skip_clone run with `storage.synchronous = "normal"` (no fsync per commit).
    let normal = Server::start_with(true, "[storage]\nsynchronous = \"normal\"\n").await;
    let admin = normal.user("root", true).await;
    let alice = normal.user("alice", false).await;
    let (normal_repo, _) = normal
        .pipeline_repo(&admin, &alice, "alice/noclone", ECHO_NO_CLONE)
        .await;
    manual_runs(&normal, normal_repo, 1, &alice).await;
    let normal_run = manual_runs(&normal, normal_repo, N, &alice).await;
    normal.stop().await;

    let per_s = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    let rows = [
        ("hook → success (clone + echo)", &hook_run, base_clone),
        (
            "manual run → success (clone + echo)",
            &clone_run,
            base_clone,
        ),
        (
            "manual run → success (skip_clone, echo)",
            &bare_run,
            base_echo,
        ),
        ("same, storage.synchronous = normal", &normal_run, base_echo),
    ];
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, r, base)| {
            let rate = per_s(r.n, r.elapsed);
            let base_rate = per_s(N, *base);
            vec![
                name.to_string(),
                format!("{}", r.n),
                format!("{}", r.failed),
                format!("{:.2}", r.submitted.as_secs_f64()),
                format!("{:.2}", r.elapsed.as_secs_f64()),
                format!("{rate:.1}"),
                format!("{:.1}", 1000.0 / rate),
                format!("{base_rate:.1}"),
                ratio(rate, base_rate),
            ]
        })
        .collect();
    table(
        "queue: pipelines/s until all `success` vs the same processes run directly (2 at a time)",
        &[
            "trigger → status",
            "pipelines",
            "failed",
            "submit s",
            "total s",
            "pipelines/s",
            "ms/pipeline",
            "baseline jobs/s",
            "÷ baseline",
        ],
        &table_rows,
    );
}
