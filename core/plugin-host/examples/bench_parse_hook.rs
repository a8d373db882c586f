//! `parse-hook` latency through the whole host call path (semaphore, fresh
//! `Store` + instance from the cached `InstancePre`, epoch deadline, output checks), on a
//! captured GitHub push. Prints median and p99 per call. Run through `bash plugins/bench.sh`
//! (which also runs the native baseline); needs `plugins/dist/forge-github.wasm`.
//!
//! `cargo run --release -p woodlark-plugin-host --example bench_parse_hook -- DIST FIXTURE [N]`

use std::time::Instant;

use woodlark_plugin_host::{
    HookOutcome, HookRequest, HostServices, InstanceConfig, PluginHost, PluginsConfig,
};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let dist = args
        .next()
        .expect("usage: bench_parse_hook DIST FIXTURE [ITERATIONS]");
    let fixture = args
        .next()
        .expect("usage: bench_parse_hook DIST FIXTURE [ITERATIONS]");
    let iterations: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(5_000);
    let body = std::fs::read(&fixture).expect("reading the fixture");

    let cfg = PluginsConfig {
        dir: dist.into(),
        watch: false,
        load_unlisted: false,
        instances: [(
            "github".to_string(),
            InstanceConfig::bare("forge-github.wasm"),
        )]
        .into(),
        ..PluginsConfig::default()
    };
    let host = PluginHost::start(cfg, HostServices::default())
        .await
        .expect("starting the host");
    let req = HookRequest::post(
        "/api/hook",
        &[
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", "push"),
        ],
        body,
    );
    for _ in 0..200 {
        host.parse_hook("github", req.clone())
            .await
            .expect("warm-up");
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let out = host.parse_hook("github", req.clone()).await.expect("parse");
        samples.push(start.elapsed().as_nanos() as u64);
        assert!(matches!(out, HookOutcome::Build(_)));
    }
    samples.sort_unstable();
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!(
        "wasm    parse-hook via PluginHost (forge-github, {iterations} calls): median {:.1} µs, p99 {:.1} µs",
        median as f64 / 1000.0,
        p99 as f64 / 1000.0
    );
}
