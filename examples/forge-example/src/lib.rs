//! A forge adapter for "Quokka", an invented forge, in ~110 lines.
//!
//! Quokka sends `X-Quokka-Event: push` with a JSON body like `sample-push.json`, signed with
//! `X-Quokka-Signature: sha256=<hex HMAC of the body>`. Its users sign in with OAuth 2 at
//! `<forge>/oauth/authorize` / `<forge>/oauth/token`, and its API (`<forge>/api`) answers
//! `GET /api/me` with `{"id", "username", "email", "avatar"}`.
//!
//! Every other function of the contract (repositories, permissions, orgs, pull requests,
//! statuses, ...) is left to the SDK's default body, which answers "not supported": the
//! server then goes without it (no repository list from the forge, no statuses, ...).

use woodlark_plugin_sdk::forge::oauth;
use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::json::{bool_at, str_at};

struct Quokka;

// The one macro call: exports `Quokka` as the component's `woodlark:forge/forge`.
woodlark_plugin_sdk::forge_adapter!(Quokka);

impl ForgeAdapter for Quokka {
    /// Cheap check on the headers: is this request ours?
    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-quokka-event").is_some()
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        // Checks the signature through the host when the operator configured `hook-secret`
        // (the secret's value never enters the plugin).
        let verified = verify_hmac(
            Algorithm::HmacSha256,
            header(&req.headers, "x-quokka-signature"),
            &req.body,
        )?;
        let event = header(&req.headers, "x-quokka-event")
            .unwrap_or_default()
            .to_string();
        if event != "push" {
            return Ok(ignored(format!("event {event:?} is not handled")));
        }
        let v = json_payload(&req)?;

        let mut repo = repo();
        repo.forge_remote_id = str_at(&v, "/repo/id");
        repo.owner = str_at(&v, "/repo/owner");
        repo.name = str_at(&v, "/repo/name");
        repo.full_name = format!("{}/{}", repo.owner, repo.name);
        repo.forge_url = str_at(&v, "/repo/url");
        repo.clone_url = format!("{}.git", repo.forge_url);
        repo.default_branch = str_at(&v, "/repo/default_branch");
        repo.private = bool_at(&v, "/repo/private");

        let git_ref = str_at(&v, "/ref");
        let is_tag = git_ref.starts_with("refs/tags/");
        let mut p = pipeline(if is_tag { Event::Tag } else { Event::Push });
        p.commit = str_at(&v, "/commit/sha");
        // The contract: a tag has no branch (so `when: branch` filters never match a tag).
        if !is_tag {
            p.branch = short_ref(&git_ref).to_string();
        }
        p.git_ref = git_ref;
        p.message = str_at(&v, "/commit/message");
        p.author = str_at(&v, "/pusher");
        p.author_email = str_at(&v, "/commit/author/email");
        p.sender = str_at(&v, "/pusher");
        p.forge_url = format!("{}/commit/{}", repo.forge_url, p.commit);

        woodlark_plugin_sdk::log::info(&format!("quokka push to {}", repo.full_name));
        Ok(build(repo, p, verified))
    }

    // ---- sign-in (contract 0.2.0); the rest stays "not supported" ----

    /// Where the browser signs in. No request: the SDK builds the query string.
    fn authorize_url(client: OauthClient, state: String) -> Result<String, PluginError> {
        let endpoint = format!("{}/oauth/authorize", oauth::browser_root(&client));
        Ok(oauth::authorize_url(
            &endpoint,
            &client,
            "read write",
            &state,
        ))
    }

    /// The standard form POST; Quokka's tokens expire, so `expires_in` and `refresh_token`
    /// in the answer become the token's `expiry` and `refresh_token`.
    fn exchange_code(client: OauthClient, code: String) -> Result<OauthToken, PluginError> {
        oauth::exchange(&token_url(&client), &client, &code)
    }

    fn refresh_token(client: OauthClient, refresh: String) -> Result<OauthToken, PluginError> {
        oauth::refresh(&token_url(&client), &client, &refresh)
    }

    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        let url = format!("{}/api/me", ctx.forge_url.trim_end_matches('/'));
        let me = ApiClient::bearer(&ctx).get_found(&url, || denied("no user for this token"))?;
        Ok(ForgeUser {
            remote_id: str_at(&me, "/id"),
            login: str_at(&me, "/username"),
            email: str_at(&me, "/email"),
            avatar_url: str_at(&me, "/avatar"),
        })
    }

    /// Clones authenticate as `oauth2` with the user's token as the password.
    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        oauth::netrc_for(&clone_url, "oauth2".into(), ctx.token)
    }
}

fn token_url(client: &OauthClient) -> String {
    format!("{}/oauth/token", client.forge_url.trim_end_matches('/'))
}
