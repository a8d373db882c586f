//! TEST ONLY. A secret backend: `list-secrets` returns one secret per `secret.<name>` config
//! key (restricted to the scope's event when `events.<name>` is set) plus a `calls` secret
//! whose value counts calls in the instance's kv store (it survives across calls, unlike
//! guest memory, because every call gets a fresh instance).

use woodlark_plugin_sdk::secrets::*;
use woodlark_plugin_sdk::{config, kv};

struct KvSecrets;

woodlark_plugin_sdk::secret_backend!(KvSecrets);

impl SecretBackend for KvSecrets {
    fn list_secrets(scope: Scope) -> Result<Vec<Secret>, PluginError> {
        let n = kv::get("calls")?
            .and_then(|v| String::from_utf8(v).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        kv::set("calls", n.to_string().as_bytes(), None)?;
        let mut out = vec![Secret {
            name: "calls".into(),
            value: n.to_string(),
            events: vec![],
            images: vec![],
        }];
        for name in config::get("names")
            .unwrap_or_default()
            .split(',')
            .filter(|s| !s.is_empty())
        {
            let Some(value) = config::get(&format!("secret.{name}")) else {
                continue;
            };
            out.push(Secret {
                name: name.to_string(),
                value,
                events: vec![scope.event.clone()],
                images: vec![],
            });
        }
        Ok(out)
    }
}
