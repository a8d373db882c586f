//! Native baseline for the `parse-hook` benchmark: runs `github_hooks::parse_payload` (the
//! same code the component runs, minus the host round trips) on a captured push payload and
//! prints the median and p99 per call. Run through `bash plugins/bench.sh`.

use std::time::Instant;

use woodlark_plugin_sdk::forge::{HookRequest, Outcome};
use woodlark_plugin_sdk::headers::text;

fn main() {
    let fixture = std::env::args()
        .nth(1)
        .expect("usage: bench-native FIXTURE.json [ITERATIONS]");
    let iterations: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let body = std::fs::read(&fixture).expect("reading the fixture");
    let req = HookRequest {
        method: "POST".into(),
        path_and_query: "/api/hook".into(),
        headers: vec![
            text("content-type", "application/json"),
            text("x-github-event", "push"),
        ],
        body,
    };
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let out = github_hooks::parse_payload("push", &req).expect("parse");
        samples.push(start.elapsed().as_nanos() as u64);
        assert!(matches!(out, Outcome::Build(_)));
    }
    samples.sort_unstable();
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!(
        "native  parse (forge-github, {iterations} calls): median {:.1} µs, p99 {:.1} µs",
        median as f64 / 1000.0,
        p99 as f64 / 1000.0
    );
}
