//! A forge adapter for "Quokka", an invented forge, in ~60 lines.
//!
//! Quokka sends `X-Quokka-Event: push` with a JSON body like `sample-push.json`, signed with
//! `X-Quokka-Signature: sha256=<hex HMAC of the body>`.

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
        let mut p = pipeline(if git_ref.starts_with("refs/tags/") {
            Event::Tag
        } else {
            Event::Push
        });
        p.commit = str_at(&v, "/commit/sha");
        p.branch = short_ref(&git_ref).to_string();
        p.git_ref = git_ref;
        p.message = str_at(&v, "/commit/message");
        p.author = str_at(&v, "/pusher");
        p.author_email = str_at(&v, "/commit/author/email");
        p.sender = str_at(&v, "/pusher");
        p.forge_url = format!("{}/commit/{}", repo.forge_url, p.commit);

        woodlark_plugin_sdk::log::debug(&format!("quokka push to {}", repo.full_name));
        Ok(build(repo, p, verified))
    }
}
