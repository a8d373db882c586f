//! Signing browsers in and out.
//!
//! - `GET <root>/authorize?forge_id=N[&next=<path>]` (the web UI's login button) signs in
//!   through the forge when it has OAuth sign-in ([`super::oauth`], which also takes the
//!   forge's callback), and returns to `next` afterwards.
//! - `GET <root>/authorize` (and a forge without OAuth) shows a form that takes a personal
//!   access token. `POST <root>/authorize` checks it and signs the browser
//!   in. The form carries a signed, expiring form token whose nonce must match a `SameSite=Strict`
//!   cookie set with the form, so another site cannot post a token of its choosing (login
//!   CSRF). The personal access token travels only in the POST body, never in a URL.
//! - `GET <root>/authorize?login_token=T` signs in with a one-time link from
//!   `woodlark user login-link` (valid for ten minutes; its id is recorded when used, so a
//!   second use fails). A HEAD request does not use it up.
//! - Signing in sets `user_sess` to a session token (`auth::session`) valid for
//!   `[web] session_hours` and answers `303` to the root path; `GET <root>/logout` clears it.

use serde_json::json;

use super::browser::{
    SESSION_COOKIE, cookie, cookie_value, escape_html, home, html_page, over_tls, page_frame,
    redirect, safe_next, set_cookie,
};
use super::oauth;
use crate::auth::{self, session, token};
use crate::config::Config;
use crate::http::{ApiError, Method, Request, Response, StatusCode};
use crate::state::{AppState, Ctx};
use crate::store::users::{self, Account};
use crate::store::{StoreError, now_unix};

/// The cookie holding the nonce of the sign-in form the browser was given.
const FORM_COOKIE: &str = "woodlark_login";
/// How long a sign-in form may be left open.
const FORM_SECS: i64 = 15 * 60;
const FORM_TOKEN: &str = "login-form";

/// The key that signs form tokens, derived from the sealing key: every replica behind one
/// proxy accepts a form another one served (no sticky sessions needed).
fn form_key(ctx: &AppState) -> Vec<u8> {
    ctx.ci.seal.derive(FORM_TOKEN, "").into_bytes()
}

/// `GET <root>/authorize`: the sign-in form, or a login link's sign-in.
pub async fn authorize(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    if let Some(link) = req.query("login_token") {
        return sign_in_with_link(&ctx, &req, &link).await;
    }
    if let Some(response) = oauth::forge_error(&ctx, &req) {
        return Ok(response);
    }
    let (code, state) = (req.query("code"), req.query("state"));
    if let (Some(code), Some(state)) = (&code, &state)
        && !code.is_empty()
        && !state.is_empty()
    {
        let outcome = oauth::callback(&ctx, &req, code, state).await;
        return Ok(finish(&ctx, &req, outcome));
    }
    if let Some(raw) = req.query("forge_id").filter(|v| !v.is_empty()) {
        let id: i64 = raw.parse().map_err(|_| {
            ApiError::bad_request(format!("invalid forge_id {raw:?}: expected an integer"))
        })?;
        let next = req
            .query("next")
            .and_then(|n| safe_next(ctx.config.web.root_path(), &n));
        let outcome = oauth::start(&ctx, &req, id, next).await?;
        return Ok(finish(&ctx, &req, outcome));
    }
    Ok(form(&ctx, &req, StatusCode::OK, None))
}

/// The response of a sign-in through a forge.
fn finish(ctx: &Ctx, req: &Request, outcome: oauth::Outcome) -> Response {
    match outcome {
        oauth::Outcome::Redirect(response) => response,
        oauth::Outcome::NoOAuth => form(ctx, req, StatusCode::OK, None),
        oauth::Outcome::SignedIn(account, forge, next) => {
            let mut response = signed_in(ctx, req, &account, now_unix(), "forge", Some(forge))
                .to(ctx, next.as_deref().unwrap_or_default());
            oauth::clear_state_cookie(ctx, req, &mut response);
            response
        }
    }
}

/// What the login page says for an error code; unknown codes get a general message.
pub fn sign_in_error(code: &str) -> &'static str {
    match code {
        "invalid_state" => "The sign-in took too long or was started in another browser.",
        "oauth_error" => "The forge did not let us sign you in.",
        "org_access_denied" => "You are not a member of an organisation allowed to sign in.",
        "registration_closed" => "This server does not take new users: ask an admin.",
        "access_denied" => "Access was denied.",
        "internal_error" => "The server could not complete the sign-in; see its log.",
        _ => "Signing in failed.",
    }
}

/// `POST <root>/authorize` (form fields `form_token`, `token`): signs in with a personal
/// access token.
pub async fn authorize_with_token(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let mut form_token = String::new();
    let mut pat = String::new();
    let mut next = String::new();
    for (name, value) in form_urlencoded::parse(&req.body) {
        match name.as_ref() {
            "form_token" => form_token = value.into_owned(),
            "token" => pat = value.trim().to_string(),
            "next" => next = value.into_owned(),
            _ => {}
        }
    }
    let now = now_unix();
    if !form_token_ok(&form_key(&ctx), &req, &form_token, now) {
        let message = "This sign-in form has expired. Please enter your token again.";
        return Ok(form(&ctx, &req, StatusCode::BAD_REQUEST, Some(message)));
    }
    match account_for_pat(&ctx, &pat, now).await? {
        Some(account) => Ok(signed_in(&ctx, &req, &account, now, "token", None).to(&ctx, &next)),
        None => {
            let message = "That is not a valid personal access token.";
            Ok(form(&ctx, &req, StatusCode::UNAUTHORIZED, Some(message)))
        }
    }
}

/// `GET <root>/logout`: forgets the browser's session and goes back to the root.
pub async fn logout(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    logout_of(&ctx, &req)
}

/// [`logout`]'s answer for `req` (also the built-in UI's sign-out form's, after its CSRF
/// check).
pub fn logout_of(ctx: &AppState, req: &Request) -> Result<Response, ApiError> {
    let mut response = redirect(&home(&ctx.config));
    let clear = cookie(
        SESSION_COOKIE,
        "",
        ctx.config.web.root_path(),
        0,
        "Lax",
        over_tls(ctx, req),
    );
    set_cookie(&mut response, &clear);
    Ok(response)
}

/// The URL `woodlark user login-link` prints: signs user `id` (whose secret is `hash`) in
/// once, within ten minutes of `now`.
pub fn login_link(config: &Config, id: i64, hash: &str, now: i64) -> String {
    let configured = config.server.public_url.trim_end_matches('/');
    let base = if configured.is_empty() {
        let scheme = if config.server.tls_cert.as_os_str().is_empty() {
            "http"
        } else {
            "https"
        };
        match config.listen_addr() {
            Ok(mut addr) => {
                // A wildcard address is where we listen, not where a browser can go.
                if addr.ip().is_unspecified() {
                    addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
                }
                format!("{scheme}://{addr}")
            }
            Err(_) => format!("{scheme}://{}", config.server.listen),
        }
    } else {
        configured.to_string()
    };
    let token = session::login_link_token(id, hash, now);
    format!(
        "{base}{}/authorize?login_token={token}",
        config.web.root_path()
    )
}

async fn sign_in_with_link(ctx: &Ctx, req: &Request, link: &str) -> Result<Response, ApiError> {
    if req.method == Method::HEAD {
        // Link checkers and previews must not use the link up.
        return Ok(Response::empty(StatusCode::OK));
    }
    let now = now_unix();
    let invalid = |ctx: &Ctx| {
        let message = "This sign-in link is invalid, has expired or was already used. \
                       Ask for a new one, or sign in with a personal access token.";
        form(ctx, req, StatusCode::UNAUTHORIZED, Some(message))
    };
    let Some(user_id) = session::login_link_subject(link) else {
        return Ok(invalid(ctx));
    };
    let Some(account) = account_by_id(ctx, user_id).await? else {
        return Ok(invalid(ctx));
    };
    let Some((jti, exp)) = session::verify_login_link(link, &ctx.token_key(&account), now) else {
        return Ok(invalid(ctx));
    };
    let fresh = crate::ci::users::spend_once(&ctx.ci, jti, exp, now).await?;
    if !fresh {
        return Ok(invalid(ctx));
    }
    let next = req.query("next").unwrap_or_default();
    Ok(signed_in(ctx, req, &account, now, "login link", None).to(ctx, &next))
}

async fn account_by_id(ctx: &Ctx, id: i64) -> Result<Option<Account>, ApiError> {
    let env = ctx.ci.settings.env_admins.clone();
    match ctx.ci.reads.read(move |c| users::by_id(c, &env, id)).await {
        Ok(account) => Ok(Some(account)),
        Err(StoreError::NotFound) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// The user whose personal access token `pat` is (sessions and other tokens do not count).
async fn account_for_pat(ctx: &Ctx, pat: &str, now: i64) -> Result<Option<Account>, ApiError> {
    let Some(id) = token::user_token_subject(pat) else {
        return Ok(None);
    };
    let account = account_by_id(ctx, id).await?;
    Ok(account.filter(|a| token::verify(pat, ctx.token_key(a).as_bytes(), now).is_some()))
}

/// Sets the session cookie, drops the form cookie and sends the browser to the root. A
/// session made by signing in through `forge` lasts only while its tokens are held.
fn signed_in(
    ctx: &Ctx,
    req: &Request,
    account: &Account,
    now: i64,
    how: &str,
    forge: Option<i64>,
) -> Response {
    let secure = over_tls(ctx, req);
    let lifetime = i64::try_from(ctx.config.web.session_hours)
        .unwrap_or(1)
        .saturating_mul(3600);
    let key = ctx.token_key(account);
    let token = session::session_token_from(account.user.id, &key, now, lifetime, forge);
    let root = ctx.config.web.root_path();
    let mut response = redirect(&home(&ctx.config));
    set_cookie(
        &mut response,
        &cookie(SESSION_COOKIE, &token, root, lifetime, "Lax", secure),
    );
    set_cookie(
        &mut response,
        &cookie(FORM_COOKIE, "", &form_path(root), 0, "Strict", secure),
    );
    tracing::info!(user = account.user.login, how, "browser signed in");
    response
}

/// A sign-in's answer, sent on to a page of this site other than the home page.
trait SentOn {
    /// `self` redirected to `next` instead, when it is a safe place (`browser::safe_next`).
    fn to(self, ctx: &Ctx, next: &str) -> Response;
}

impl SentOn for Response {
    fn to(mut self, ctx: &Ctx, next: &str) -> Response {
        if let Some(next) = safe_next(ctx.config.web.root_path(), next)
            && let Ok(v) = crate::http::HeaderValue::from_str(&next)
        {
            self.headers.insert(crate::http::header::LOCATION, v);
        }
        self
    }
}

pub fn form_path(root: &str) -> String {
    format!("{root}/authorize")
}

/// A form token must be ours, unexpired, and carry the nonce of this browser's form cookie.
fn form_token_ok(key: &[u8], req: &Request, form_token: &str, now: i64) -> bool {
    let Some(claims) = token::verify(form_token, key, now) else {
        return false;
    };
    let nonce = claims.get("nonce").and_then(|v| v.as_str()).unwrap_or("");
    let cookie = cookie_value(req, FORM_COOKIE).unwrap_or_default();
    claims.get("type").and_then(|v| v.as_str()) == Some(FORM_TOKEN)
        && claims.get("exp").is_some()
        && !nonce.is_empty()
        && auth::constant_time_eq(nonce.as_bytes(), cookie.as_bytes())
}

/// A token form's fresh form token and the `Set-Cookie` value carrying its nonce (the
/// login-CSRF check of `POST <root>/authorize`; the web UI's login page shows the form too).
pub fn new_form(ctx: &AppState, req: &Request) -> (String, String) {
    let nonce = auth::random_secret();
    let form_token = token::sign(
        &json!({"type": FORM_TOKEN, "nonce": nonce, "exp": now_unix() + FORM_SECS}),
        &form_key(ctx),
    );
    let set_cookie = cookie(
        FORM_COOKIE,
        &nonce,
        &form_path(ctx.config.web.root_path()),
        FORM_SECS,
        "Strict",
        over_tls(ctx, req),
    );
    (form_token, set_cookie)
}

/// The sign-in page, with a fresh form token and its cookie, and `error` above the form.
fn form(ctx: &Ctx, req: &Request, status: StatusCode, error: Option<&str>) -> Response {
    let (form_token, form_cookie) = new_form(ctx, req);
    let root = ctx.config.web.root_path();
    let error = error
        .map(|e| format!("<p class=\"error\">{}</p>\n", escape_html(e)))
        .unwrap_or_default();
    let content = format!(
        "<h1>Sign in to Woodlark</h1>\n{error}\
         <form method=\"post\" action=\"{action}\">\n\
         <input type=\"hidden\" name=\"form_token\" value=\"{form_token}\">\n\
         <label for=\"token\">Personal access token</label>\n\
         <input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"off\" required autofocus>\n\
         <button type=\"submit\">Sign in</button>\n</form>\n\
         <p>An admin creates users and prints their tokens with <code>woodlark user add</code>, \
         or a one-time sign-in link with <code>woodlark user login-link LOGIN</code>.</p>",
        action = escape_html(&form_path(root)),
        form_token = escape_html(&form_token),
    );
    let mut response = html_page(status, page_frame("Sign in · Woodlark", &content));
    set_cookie(&mut response, &form_cookie);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HeaderValue;

    fn post(cookie: Option<&str>) -> Request {
        let mut req = Request::new(Method::POST, "/authorize");
        if let Some(c) = cookie {
            req.headers.insert(
                "cookie",
                HeaderValue::from_str(&format!("{FORM_COOKIE}={c}")).unwrap(),
            );
        }
        req
    }

    #[test]
    fn form_tokens_need_the_matching_cookie() {
        const KEY: &[u8] = b"form key";
        let sign = |claims| token::sign(&claims, KEY);
        let good = sign(json!({"type": FORM_TOKEN, "nonce": "n1", "exp": 200}));
        assert!(form_token_ok(KEY, &post(Some("n1")), &good, 100));
        assert!(
            !form_token_ok(KEY, &post(Some("n2")), &good, 100),
            "other browser"
        );
        assert!(!form_token_ok(KEY, &post(None), &good, 100), "no cookie");
        assert!(
            !form_token_ok(KEY, &post(Some("n1")), &good, 201),
            "expired"
        );
        let foreign = token::sign(
            &json!({"type": FORM_TOKEN, "nonce": "n1", "exp": 200}),
            b"k",
        );
        assert!(
            !form_token_ok(KEY, &post(Some("n1")), &foreign, 100),
            "not our key"
        );
        let typeless = sign(json!({"nonce": "n1", "exp": 200}));
        assert!(!form_token_ok(KEY, &post(Some("n1")), &typeless, 100));
        let eternal = sign(json!({"type": FORM_TOKEN, "nonce": "n1"}));
        assert!(!form_token_ok(KEY, &post(Some("n1")), &eternal, 100));
        let empty = sign(json!({"type": FORM_TOKEN, "nonce": "", "exp": 200}));
        assert!(!form_token_ok(KEY, &post(Some("")), &empty, 100));
    }

    #[test]
    fn login_links_point_at_the_public_url() {
        let config = Config::from_toml("[server]\nlisten = \"0.0.0.0:8000\"\n", "t", &[]).unwrap();
        let url = login_link(&config, 1, "h", 0);
        assert!(
            url.starts_with("http://127.0.0.1:8000/authorize?login_token="),
            "{url}"
        );
        let config = Config::from_toml(
            "[server]\npublic_url = \"https://ci.example.com/\"\n[web]\nroot_path = \"/ci\"\n",
            "t",
            &[],
        )
        .unwrap();
        let url = login_link(&config, 1, "h", 0);
        let token = url
            .strip_prefix("https://ci.example.com/ci/authorize?login_token=")
            .unwrap();
        assert_eq!(session::login_link_subject(token), Some(1));
    }
}
