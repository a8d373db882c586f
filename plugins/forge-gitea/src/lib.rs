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

    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        gitea_hooks::repo_info(ctx, full_name)
    }

    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        gitea_hooks::file_at(ctx, full_name, commit, path)
    }

    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        gitea_hooks::dir_at(ctx, full_name, commit, path)
    }

    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        gitea_hooks::branches(ctx, full_name)
    }

    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        gitea_hooks::post_status(ctx, full_name, commit, status)
    }

    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        gitea_hooks::branch_head(ctx, full_name, branch)
    }

    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        gitea_hooks::set_hook(&ctx, &full_name, &url, Some(("gitea", &secret)))
    }

    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        gitea_hooks::set_hook(&ctx, &full_name, &url, None)
    }

    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        gitea_hooks::pr_changed_files(ctx, full_name, pr_number)
    }
}
