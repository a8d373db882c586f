//! `docker`: time from a manual run to `success` of a one-step pipeline (`echo hello` in
//! `woodlark-test/busybox`) on the docker backend, one pipeline at a time, 15 each: with
//! `skip_clone`, and with the clone (host `git` + copy into the workspace volume).
//!
//! **Baseline, same run:** `docker run --rm` of the same image and command, 15 times, after
//! one warm-up round.
//!
//! Needs a Docker engine; builds the test images first (`tests/docker/images.sh`). Runs only
//! when named: not part of `all`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::report::{ms, pct, ratio, table};
use crate::server::Server;

/// One-step pipelines on the docker backend vs `docker run --rm` of the same image/command.
pub async fn run() {
    const N: usize = 15;
    const IMAGE: &str = "woodlark-test/busybox:latest";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/docker/images.sh");
    let built = Command::new("bash").arg(&script).status().expect("bash");
    assert!(built.success(), "{} failed", script.display());
    println!(
        "\n# docker: {N} one-step pipelines (`echo hello` in {IMAGE}), one at a time, docker backend, vs `docker run --rm` of the same image and command"
    );
    let config = format!(
        "skip_clone: true\nsteps:\n  - name: echo\n    image: {IMAGE}\n    commands: [\"echo hello\"]\n"
    );
    let with_clone =
        format!("steps:\n  - name: echo\n    image: {IMAGE}\n    commands: [\"echo hello\"]\n");
    let server = Server::start_backend(Some("docker"), "").await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let (plain, _) = server
        .pipeline_repo(&admin, &alice, "alice/plain", &config)
        .await;
    let (cloned, _) = server
        .pipeline_repo(&admin, &alice, "alice/cloned", &with_clone)
        .await;
    let one_by_one = |repo: i64| {
        let (api, alice) = (server.api.clone(), alice.clone());
        async move {
            let mut times = Vec::with_capacity(N);
            for number in 1..=N as i64 {
                let t = Instant::now();
                api.run_pipeline(repo, &alice).await;
                loop {
                    let p = api.pipeline(repo, number, &alice).await;
                    match p["status"].as_str() {
                        Some("success") => break,
                        Some("failure" | "error" | "killed") => panic!("pipeline failed: {p:#}"),
                        _ => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
                times.push(t.elapsed());
            }
            times.sort();
            times
        }
    };
    let docker_run = || {
        let mut times = Vec::with_capacity(N);
        for _ in 0..N {
            let t = Instant::now();
            let out = Command::new("docker")
                .args(["run", "--rm", IMAGE, "/bin/sh", "-c", "echo hello"])
                .output()
                .expect("docker run");
            assert!(out.status.success());
            times.push(t.elapsed());
        }
        times.sort();
        times
    };
    // Warm both paths once (image cache, page cache).
    let _ = docker_run();
    let baseline = docker_run();
    let skip = one_by_one(plain).await;
    let clone = one_by_one(cloned).await;
    let base_med = pct(&baseline, 0.5);
    let rows: Vec<Vec<String>> = [
        ("`docker run --rm` (baseline)", &baseline),
        ("pipeline, skip_clone", &skip),
        ("pipeline with clone (host git + copy)", &clone),
    ]
    .iter()
    .map(|(name, t)| {
        vec![
            name.to_string(),
            ms(pct(t, 0.5)),
            ms(pct(t, 0.9)),
            ratio(pct(t, 0.5).as_secs_f64(), base_med.as_secs_f64()),
        ]
    })
    .collect();
    table(
        "trigger → success, one pipeline at a time",
        &["path", "median ms", "p90 ms", "÷ docker run"],
        &rows,
    );
    server.stop().await;
}
