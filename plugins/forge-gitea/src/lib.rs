//! Gitea forge adapter. Payload parsing and API calls are shared with the other Gitea-family
//! adapter in the `gitea-hooks` crate (see its docs for the event table).
//!
//! Recognises `X-Gitea-Event` (but not Forgejo, which sends that header too for compatibility).
//! Signature: `X-Gitea-Signature` (hex HMAC-SHA256 of the body) when the instance config
//! names a `hook-secret`.
//!
//! The API functions use `<forge-url>/api/v1` with `Authorization: token <token>`.

use woodlark_plugin_sdk::forge::*;

struct Gitea;

woodlark_plugin_sdk::forge_adapter!(Gitea);

impl ForgeAdapter for Gitea {
    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-gitea-event").is_some() && header(headers, "x-forgejo-event").is_none()
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        gitea_hooks::parse_hook(req, &["x-gitea-event"], &["x-gitea-signature"])
    }

    gitea_hooks::gitea_api_methods!("gitea");
}
