//! `docker`: pipelines on the docker backend, one at a time, from a manual run to `success`:
//! - a one-step pipeline (`echo hello` in `woodlark-test/busybox`), 15 each: with
//!   `skip_clone`, and with the clone (a container of the clone image);
//!   **baseline, same run:** `docker run --rm` of the same image and command, 15 times, after
//!   one warm-up round;
//! - a five-step pipeline (the clone, a service, three commands in a row), 10 times;
//!   **baseline, same run:** the same five containers run by hand with the docker CLI, one
//!   after the other, on a network and a volume created for the round and removed after it
//!   (and, as a second row, on a network kept from round to round as the runner's pool
//!   keeps one);
//! - three independent steps (`depends_on: []`) of `sleep 1` each, 5 times; **baseline, same
//!   run:** one `docker run --rm` of `sleep 1` (what fully parallel steps would cost).
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
                times.push(to_success(&api, repo, number, &alice).await);
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
        ("pipeline with clone (a clone container)", &clone),
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
    five_steps(&server, &admin, &alice).await;
    server.stop().await;
}

const IMAGE: &str = "woodlark-test/busybox:latest";
const SERVICE: &str = "sleep 600";
const COMMANDS: [&str; 3] = ["ls -a >/dev/null && echo one", "echo two", "echo three"];

/// The five-step pipeline vs the same containers run by hand, and independent steps.
async fn five_steps(server: &Server, admin: &str, alice: &str) {
    const N: usize = 10;
    let mut config =
        format!("services:\n  db:\n    image: {IMAGE}\n    commands: [{SERVICE:?}]\nsteps:\n");
    for (i, command) in COMMANDS.iter().enumerate() {
        config.push_str(&format!(
            "  s{i}:\n    image: {IMAGE}\n    commands: [{command:?}]\n"
        ));
    }
    let (repo, bare) = server
        .pipeline_repo(admin, alice, "alice/five", &config)
        .await;
    let commit = crate::server::git(&bare, &["rev-parse", "HEAD"])
        .trim()
        .to_string();
    let mut parallel = "skip_clone: true\nsteps:\n".to_string();
    for i in 0..3 {
        parallel.push_str(&format!(
            "  p{i}:\n    image: {IMAGE}\n    commands: [\"sleep 1\"]\n    depends_on: []\n"
        ));
    }
    let (par_repo, _) = server
        .pipeline_repo(admin, alice, "alice/parallel", &parallel)
        .await;
    println!(
        "\n# docker: a five-step pipeline (clone, service, three commands) vs the same containers by hand; three independent `sleep 1` steps vs one `docker run`"
    );
    // A network kept across rounds, for the by-hand runs that reuse one as the pipeline's
    // network pool does.
    let kept = format!("wl_bench_kept_{}", std::process::id());
    docker(&["network", "create", &kept]);
    let by_hand = |round: usize, reuse: bool| {
        let t = Instant::now();
        let volume = format!("wl_bench_hand_{}_{round}_{reuse}", std::process::id());
        let name = if reuse { kept.clone() } else { volume.clone() };
        if !reuse {
            docker(&["network", "create", &name]);
        }
        docker(&["volume", "create", &volume]);
        let workspace = format!("{volume}:/woodpecker/src");
        let repo_mount = format!("{0}:{0}:ro", bare.display());
        let env = [
            format!("CI_REPO_CLONE_URL={}", bare.display()),
            format!("CI_COMMIT_SHA={commit}"),
            "CI_COMMIT_REF=refs/heads/main".to_string(),
            "CI_WORKSPACE=/woodpecker/src".to_string(),
            "GIT_CONFIG_COUNT=1".to_string(),
            "GIT_CONFIG_KEY_0=safe.directory".to_string(),
            "GIT_CONFIG_VALUE_0=*".to_string(),
        ];
        let mut clone = vec!["run", "--rm", "--network", &name, "-v", &workspace];
        clone.extend(["-v", &repo_mount, "-w", "/woodpecker/src"]);
        for e in &env {
            clone.extend(["-e", e]);
        }
        clone.push(woodlark::runner::docker::DEFAULT_CLONE_IMAGE);
        docker(&clone);
        let service = format!("{volume}_db");
        docker(&[
            "run",
            "-d",
            "--name",
            &service,
            "--network",
            &name,
            "--network-alias",
            "db",
            IMAGE,
            "/bin/sh",
            "-c",
            SERVICE,
        ]);
        for command in COMMANDS {
            docker(&[
                "run",
                "--rm",
                "--network",
                &name,
                "-v",
                &workspace,
                "-w",
                "/woodpecker/src",
                IMAGE,
                "/bin/sh",
                "-c",
                command,
            ]);
        }
        docker(&["rm", "-f", &service]);
        docker(&["volume", "rm", &volume]);
        if !reuse {
            docker(&["network", "rm", &name]);
        }
        t.elapsed()
    };
    let sleep_once = || {
        let t = Instant::now();
        docker(&["run", "--rm", IMAGE, "/bin/sh", "-c", "sleep 1"]);
        t.elapsed()
    };
    // Alternate the two paths, so drift in the engine's speed touches both alike.
    let (mut hand, mut reused, mut pipeline) = (Vec::new(), Vec::new(), Vec::new());
    let _ = by_hand(0, false);
    for round in 1..=N {
        hand.push(by_hand(round, false));
        reused.push(by_hand(round, true));
        pipeline.push(to_success(&server.api, repo, round as i64, alice).await);
    }
    docker(&["network", "rm", &kept]);
    let (mut one_sleep, mut three) = (Vec::new(), Vec::new());
    for round in 1..=5 {
        one_sleep.push(sleep_once());
        three.push(to_success(&server.api, par_repo, round, alice).await);
    }
    for list in [
        &mut hand,
        &mut reused,
        &mut pipeline,
        &mut one_sleep,
        &mut three,
    ] {
        list.sort();
    }
    let row = |name: &str, t: &[Duration], base: &[Duration]| {
        vec![
            name.to_string(),
            ms(pct(t, 0.5)),
            ms(pct(t, 0.9)),
            ratio(pct(t, 0.5).as_secs_f64(), pct(base, 0.5).as_secs_f64()),
        ]
    };
    table(
        "five steps: trigger → success vs the same containers by hand",
        &["path", "median ms", "p90 ms", "÷ by hand"],
        &[
            row(
                "by hand: network, volume, 5 × docker run, removal (baseline)",
                &hand,
                &hand,
            ),
            row(
                "by hand, on a network kept from round to round",
                &reused,
                &hand,
            ),
            row("pipeline: clone, service, 3 steps", &pipeline, &hand),
        ],
    );
    table(
        "three independent `sleep 1` steps vs one `docker run` of `sleep 1`",
        &["path", "median ms", "p90 ms", "÷ one run"],
        &[
            row(
                "one `docker run --rm … sleep 1` (baseline)",
                &one_sleep,
                &one_sleep,
            ),
            row(
                "pipeline: 3 × `sleep 1`, depends_on: []",
                &three,
                &one_sleep,
            ),
        ],
    );
}

/// Starts pipeline `number` of `repo` and waits for its `success`.
async fn to_success(api: &crate::server::Api, repo: i64, number: i64, token: &str) -> Duration {
    let t = Instant::now();
    api.run_pipeline(repo, token).await;
    loop {
        let p = api.pipeline(repo, number, token).await;
        match p["status"].as_str() {
            Some("success") => return t.elapsed(),
            Some("failure" | "error" | "killed") => panic!("pipeline failed: {p:#}"),
            _ => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Runs the docker CLI; panics on failure.
fn docker(args: &[&str]) {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
