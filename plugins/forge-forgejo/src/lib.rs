//! Forgejo forge adapter. Payload parsing and API calls are shared with the other Gitea-family
//! adapter in the `gitea-hooks` crate (see its docs for the event table).
//!
//! Recognises `X-Forgejo-Event`. Signature: `X-Forgejo-Signature` (or the `X-Gitea-Signature`
//! Forgejo also sends; hex HMAC-SHA256 of the body) when the instance config names a
//! `hook-secret`.
//!
//! The API functions use `<forge-url>/api/v1` with `Authorization: token <token>`.

use woodlark_plugin_sdk::forge::*;

struct Forgejo;

woodlark_plugin_sdk::forge_adapter!(Forgejo);

impl ForgeAdapter for Forgejo {
    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-forgejo-event").is_some()
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        gitea_hooks::parse_hook(
            req,
            &["x-forgejo-event", "x-gitea-event"],
            &["x-forgejo-signature", "x-gitea-signature"],
        )
    }

    gitea_hooks::gitea_api_methods!("forgejo");
}
