//! Load benchmarks for the real server, over 127.0.0.1.
//!
//! ```sh
//! cargo bench -p woodlark --bench load -- <http|events|queue|logs|sse|hooks|rss|flood|all>
//! cargo bench -p woodlark --bench load -- reads    # needs PostgreSQL's binaries; not part of `all`
//! cargo bench -p woodlark --bench load -- docker   # needs a Docker engine; not part of `all`
//! ```
//!
//! Every scenario starts its own server, in process exactly as the integration tests do
//! ([`server::Server`]: `App::build` + `App::serve` on `127.0.0.1:0`, a temporary data dir,
//! default storage settings, i.e. `synchronous = FULL`), or the real `woodlark` binary where
//! the process itself is measured (`rss`, `flood`). It reports its numbers next to a
//! **baseline measured in the same run**, as ratios, never against absolute thresholds: the
//! machine is shared and its speed wanders, and a baseline taken in the same minutes wanders
//! with it.
//!
//! One module per scenario; each module's doc says what it measures and against which
//! baseline:
//!
//! | scenario | measures | baseline in the same run |
//! |---|---|---|
//! | [`http`] | API reads, closed loop, 16 connections | bare hyper hello-world, same client |
//! | [`events`] | `/events` pages at 10k and 1M outbox rows | the same page at 10k; `GET /version` |
//! | [`queue`] | pipelines/s from trigger to `success` | the same processes run directly |
//! | [`logs`] | log lines/s stored for one step | a pipe; bare SQLite, same batches |
//! | [`sse`] | 1,000 stream clients: RSS per client, lag | bare hyper SSE broadcaster |
//! | [`docker`] | docker-backend pipeline to `success` | `docker run --rm` (not in `all`) |
//! | [`rss`] | the real binary's memory and idle wake-ups | bare hyper process, idle |
//! | [`hooks`] | push hooks at a fixed rate: latency | bare hyper; bare SQLite commits |
//! | [`flood`] | 20,000 connections at once, RSS after; 300 unauthenticated 25 MB webhook bodies, RSS peak | none (absolute goal) |
//! | [`ui`] | the built-in UI's pages: one connection (a page's cost), then 16 | bare hyper sending the same bytes |
//! | [`reads`] | hot reads; a page past every cache on PostgreSQL | bare hyper sending the same bytes; the same page on SQLite (not in `all`) |
//! | [`stores`] | hooks/s and reads/s: SQLite, PostgreSQL, 2 replicas | bare PostgreSQL and SQLite commits (not in `all`) |
//!
//! The shared harness: [`server`] (the server under test and its API client), [`baseline`]
//! (bare hyper servers, bare SQLite, bare PostgreSQL), [`client`] (closed- and open-loop
//! load), [`procfs`] (memory, CPU and wake-ups of processes), [`report`] (percentiles, number
//! formats, tables, the machine banner).
//!
//! Adding a scenario: a module with a `run` that starts its own server, measures its subject
//! *and* a baseline, and prints one table with the ratios; then a row in [`SCENARIOS`].
//! `BENCH_LOG=warn` (any tracing filter) shows the server's own log on stderr. Load is bounded
//! in requests and time; `all` finishes in a few minutes on two cores.

mod baseline;
mod client;
mod docker;
mod events;
mod flood;
mod hooks;
mod http;
mod logs;
mod procfs;
mod queue;
mod reads;
mod report;
mod rss;
mod server;
mod sse;
mod stores;
mod ui;

use std::time::Instant;

/// One scenario of the command line.
struct Scenario {
    name: &'static str,
    /// Whether `all` runs it.
    in_all: bool,
    run: fn(),
}

/// The scenarios, in the order `all` runs them.
const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "http",
        in_all: true,
        run: || runtime().block_on(http::run()),
    },
    Scenario {
        name: "events",
        in_all: true,
        run: || runtime().block_on(events::run()),
    },
    Scenario {
        name: "queue",
        in_all: true,
        run: || runtime().block_on(queue::run()),
    },
    Scenario {
        name: "logs",
        in_all: true,
        run: || runtime().block_on(logs::run()),
    },
    // Its two sides run in child processes, each with a runtime of its own.
    Scenario {
        name: "sse",
        in_all: true,
        run: sse::run,
    },
    Scenario {
        name: "docker",
        in_all: false,
        run: || runtime().block_on(docker::run()),
    },
    Scenario {
        name: "rss",
        in_all: true,
        run: || runtime().block_on(rss::run()),
    },
    Scenario {
        name: "hooks",
        in_all: true,
        run: || runtime().block_on(hooks::run()),
    },
    Scenario {
        name: "ui",
        in_all: true,
        run: || runtime().block_on(ui::run()),
    },
    Scenario {
        name: "flood",
        in_all: true,
        run: || runtime().block_on(flood::run()),
    },
    // Needs PostgreSQL's server binaries (Debian's `postgresql`), as `stores` does.
    Scenario {
        name: "reads",
        in_all: false,
        run: || runtime().block_on(reads::run()),
    },
    // Needs PostgreSQL's server binaries (Debian's `postgresql`).
    Scenario {
        name: "stores",
        in_all: false,
        run: || runtime().block_on(stores::run()),
    },
];

fn main() {
    procfs::raise_fd_limit();
    // `BENCH_LOG=warn` (any filter) shows the server's own log on stderr.
    if let Ok(filter) = std::env::var("BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    // `cargo bench` appends `--bench`; flags are not scenarios.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    // The baselines that must be measured in a process of their own re-execute this binary.
    match args.first().map(String::as_str) {
        Some("__rss_baseline") => return runtime().block_on(rss::baseline_child()),
        Some("__sse_child") => {
            let kind = args.get(1).cloned().unwrap_or_default();
            return runtime().block_on(sse::child(&kind));
        }
        _ => {}
    }
    let scenario = args.first().cloned().unwrap_or_else(|| "all".into());
    if scenario != "all" && !SCENARIOS.iter().any(|s| s.name == scenario) {
        let names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).chain(["all"]).collect();
        eprintln!(
            "unknown scenario {scenario:?}; expected one of {}",
            names.join(", ")
        );
        std::process::exit(2);
    }
    report::machine_banner();
    let started = Instant::now();
    for s in SCENARIOS {
        if s.name == scenario || (scenario == "all" && s.in_all) {
            (s.run)();
        }
    }
    println!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
}

/// Two workers, as many as this machine has cores (client and server share them).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}
