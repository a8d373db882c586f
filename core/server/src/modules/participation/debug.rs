//! `/debug/settings/pprof` and `/debug/settings/config`, as algod serves them.
//!
//! - pprof: the mutex and block profile rates, kept per server. `PUT` decodes strictly (unknown
//!   field, negative or non-integer value → 400), rejects rates above `i32::MAX`, applies the
//!   new values and answers with the **old** values of the fields that were sent.
//! - config: algod's node configuration (`config.Local`, version 38 defaults embedded from
//!   algod's test data) with `EndpointAddress` set to this server's listen address, as one JSON
//!   object with algod's Go field names, in the order of the defaults file.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::handlers::json;
use crate::app::Ctx;
use crate::config::Config;
use crate::http::{ApiError, Request, Response, StatusCode};

/// algod's node configuration defaults (config version 38).
pub const CONFIG_DEFAULTS: &str = include_str!("algod-config-v38.json");
/// algod reads at most this many bytes of a `PUT /debug/settings/pprof` body.
pub const MAX_PPROF_BODY: usize = 128;

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DebugSettingsProf {
    #[serde(rename = "block-rate", skip_serializing_if = "Option::is_none")]
    block_rate: Option<u64>,
    #[serde(rename = "mutex-rate", skip_serializing_if = "Option::is_none")]
    mutex_rate: Option<u64>,
}

/// `GET /debug/settings/pprof`: both rates, always present.
pub async fn get_pprof(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let state = &ctx.participation;
    state.authorize(&req)?;
    json(&DebugSettingsProf {
        block_rate: Some(state.block_rate.load(Ordering::SeqCst)),
        mutex_rate: Some(state.mutex_rate.load(Ordering::SeqCst)),
    })
}

/// `PUT /debug/settings/pprof`: sets the rates, returns the old values of the fields sent.
pub async fn put_pprof(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let state = &ctx.participation;
    state.authorize(&req)?;
    if req.body.len() > MAX_PPROF_BODY {
        return Err(ApiError::bad_request("http: request body too large"));
    }
    let opts: DebugSettingsProf = if req.body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("failed to decode object: EOF"));
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("failed to decode object: {e}")))?
    };
    for rate in [opts.mutex_rate, opts.block_rate].into_iter().flatten() {
        if rate > i32::MAX as u64 {
            return Err(ApiError::bad_request(
                "blocking rate cannot be larger than max int32 value",
            ));
        }
    }
    let old = DebugSettingsProf {
        mutex_rate: opts
            .mutex_rate
            .map(|r| state.mutex_rate.swap(r, Ordering::SeqCst)),
        block_rate: opts
            .block_rate
            .map(|r| state.block_rate.swap(r, Ordering::SeqCst)),
    };
    json(&old)
}

/// `GET /debug/settings/config`.
pub async fn get_config(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    Ok(Response::new(
        StatusCode::OK,
        "application/json",
        ctx.participation.node_config.clone(),
    ))
}

/// A JSON object that keeps its keys in document order.
struct Ordered(Vec<(String, serde_json::Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// The node configuration as algod renders it, newline-terminated.
pub fn render_node_config(config: &Config) -> Bytes {
    let Ok(Ordered(mut entries)) = serde_json::from_str::<Ordered>(CONFIG_DEFAULTS) else {
        unreachable!("the embedded algod config defaults are valid JSON (unit-tested)");
    };
    for (key, value) in entries.iter_mut() {
        if key == "EndpointAddress" {
            *value = serde_json::Value::String(config.server.listen.clone());
        }
    }
    let mut out = String::from("{");
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::Value::String(key.clone()).to_string());
        out.push(':');
        out.push_str(&value.to_string());
    }
    out.push_str("}\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_config_keeps_algod_keys_and_order() {
        let config = Config::default();
        let text = String::from_utf8(render_node_config(&config).to_vec()).unwrap();
        assert!(text.starts_with("{\"Version\":38,\"AccountUpdatesStatsInterval\":5000000000,"));
        assert!(text.ends_with("}\n"));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), 149);
        assert_eq!(obj["EndpointAddress"], "127.0.0.1:8000");
        assert_eq!(obj["Archival"], false);
        assert_eq!(obj["GossipFanout"], 4);
    }

    #[test]
    fn pprof_body_is_strict() {
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"mutex-rate": 5}"#).is_ok());
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"mutex-rate": -1}"#).is_err());
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"mutex-rate": 1.5}"#).is_err());
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"other": 1}"#).is_err());
        let empty = DebugSettingsProf::default();
        assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
    }
}
