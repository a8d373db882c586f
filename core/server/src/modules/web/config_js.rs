//! `GET <root>/web-config.js`: the globals the web UI reads before it starts.
//!
//! The UI learns who is signed in only from `WOODPECKER_USER` (it never asks `/api/user` at
//! boot), so the script is rendered for every request from the caller's cookie, and the
//! server's no-cache headers keep browsers from reusing it. `WOODPECKER_CSRF` is the token
//! the UI echoes in `X-CSRF-TOKEN` on writes (see `auth::session`).

use serde_json::Value;

use crate::auth::{self, session};
use crate::ci::version_string;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::modules::ci::{access, avatars};
use crate::state::Ctx;

/// Longest log the UI shows before it offers a download instead (upstream's default).
const MAX_PIPELINE_LOG_LINES: u64 = 5000;

/// Where pipeline configs are looked up, in order (shown by the repo settings page).
const DEFAULT_CONFIG_PATHS: [&str; 3] = [".woodpecker/", ".woodpecker.yaml", ".woodpecker.yml"];

pub async fn render(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let account = access::current(&ctx, &req).await?;
    let (user, csrf) = match &account {
        Some(account) => {
            let raw = auth::bearer(&req).unwrap_or_default();
            (
                serde_json::to_value(avatars::shown(&ctx, account.user.clone()))
                    .map_err(ApiError::internal)?,
                session::csrf_token(&raw, account.user.id, &ctx.token_key(account)),
            )
        }
        None => (Value::Null, String::new()),
    };
    let globals: [(&str, Value); 9] = [
        ("USER", user),
        ("CSRF", csrf.into()),
        ("VERSION", version_string().into()),
        ("ROOT_PATH", ctx.config.web.root_path().into()),
        ("ENABLE_SWAGGER", false.into()),
        // The upstream check compares against Woodpecker's releases, not ours.
        ("SKIP_VERSION_CHECK", true.into()),
        ("USER_REGISTERED_AGENTS", true.into()),
        ("MAX_PIPELINE_LOG_LINE_COUNT", MAX_PIPELINE_LOG_LINES.into()),
        ("DEFAULT_CONFIG_PATHS", DEFAULT_CONFIG_PATHS.to_vec().into()),
    ];
    let mut script = String::new();
    for (name, value) in globals {
        script.push_str(&format!(
            "window.WOODPECKER_{name} = {};\n",
            js_literal(&value)
        ));
    }
    Ok(Response::new(
        StatusCode::OK,
        "application/javascript; charset=utf-8",
        script,
    ))
}

/// JSON as a JavaScript literal, with `<` and the two line separators escaped so the text
/// stays inert wherever it is embedded.
fn js_literal(value: &Value) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_inert() {
        let v = serde_json::json!({"login": "</script>\u{2028}"});
        assert_eq!(js_literal(&v), r#"{"login":"\u003c/script>\u2028"}"#);
        assert_eq!(js_literal(&Value::Null), "null");
    }
}
