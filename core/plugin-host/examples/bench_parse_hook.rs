//! `parse-hook` latency through the whole host call path (semaphore, fresh
//! `Store` + instance from the cached `InstancePre`, epoch deadline, output checks), on a
//! captured GitHub push. Prints median and p99 per call. Run through `bash plugins/bench.sh`
//! (which also runs the native baseline); needs `plugins/dist/forge-github.wasm`.
//!
//! It then measures the same path around an export that does next to nothing
//! (`recognize`: two header lookups): what any call costs before the guest does its work,
//! the floor under the parse-hook figure. Both loops run in one process, so at one speed.
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
    let (median, p99) = median_and_p99(samples);
    println!(
        "wasm    parse-hook via PluginHost (forge-github, {iterations} calls): median {median:.1} µs, p99 {p99:.1} µs"
    );

    let headers = req.headers.clone();
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let which = host.recognize(&headers).await;
        samples.push(start.elapsed().as_nanos() as u64);
        assert_eq!(which.as_deref(), Some("github"));
    }
    let (median, p99) = median_and_p99(samples);
    println!(
        "floor   recognize via PluginHost (fresh instance, trivial export, {iterations} calls): median {median:.1} µs, p99 {p99:.1} µs"
    );
}

/// Median and p99 of nanosecond samples, in µs.
fn median_and_p99(mut samples: Vec<u64>) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: usize| samples[samples.len() * q / 100] as f64 / 1000.0;
    (at(50), at(99))
}
