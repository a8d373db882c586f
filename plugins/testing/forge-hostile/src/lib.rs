//! TEST ONLY. A forge adapter that misbehaves on request, for the host's containment tests.
//! The header `x-hostile-mode` picks the behaviour of `parse-hook`:
//!
//! - `loop`: spins forever (the host's epoch deadline must stop it);
//! - `bomb`: allocates until memory runs out (the store's memory limit must stop it);
//! - `trap`: panics (a trap that must fail this call only);
//! - `huge`: returns an 8 MiB reason (the host's output caps must reject it);
//! - `http`: GETs the URL in `x-hostile-url` through the host's http-client;
//! - `slow`: busy-waits 400 ms by the host clock, then `ignored("hostile: slow done")`;
//! - `log-flood`: logs 10 000 long lines (the host must truncate and rate-limit);
//! - anything else: `ignored("hostile: calm")`.

use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::{clock, http, log};

struct Hostile;

woodlark_plugin_sdk::forge_adapter!(Hostile);

impl ForgeAdapter for Hostile {
    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-hostile-mode").is_some()
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        match header(&req.headers, "x-hostile-mode").unwrap_or("") {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "bomb" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "trap" => panic!("hostile plugin panics on purpose"),
            "huge" => Ok(ignored("x".repeat(8 << 20))),
            "http" => {
                let url =
                    header(&req.headers, "x-hostile-url").unwrap_or("http://example.invalid/");
                let resp = http::send(&http::request("GET", url, Vec::new()))?;
                Ok(ignored(format!(
                    "http {}: {}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                )))
            }
            "slow" => {
                let until = clock::now_unix_ms() + 400;
                while clock::now_unix_ms() < until {
                    std::hint::spin_loop();
                }
                Ok(ignored("hostile: slow done"))
            }
            "log-flood" => {
                let line = "y".repeat(100_000);
                for _ in 0..10_000 {
                    log::info(&line);
                }
                Ok(ignored("flooded"))
            }
            _ => Ok(ignored("hostile: calm")),
        }
    }
}
