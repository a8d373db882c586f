//! Signing in through a forge (OAuth), as upstream's `/authorize` does.
//!
//! 1. `GET <root>/authorize?forge_id=N[&next=<path>]` (the web UI's login button) sends the
//!    browser to the forge's authorize page with a signed, expiring state that names the forge
//!    and the page to return to (a `next` that `browser::safe_next` accepts; the forge sends
//!    the state back untouched, and its signature keeps anyone from changing it on the way).
//!    The state also carries a nonce that must match a cookie set on this redirect, so a
//!    callback cannot be replayed into another browser (login CSRF).
//! 2. The forge sends the browser back to `GET <root>/authorize?code=…&state=…`: the state is
//!    checked, the code exchanged for the user's tokens, the forge account read, the allowed
//!    organisations checked, and the user found or made (`ci::users::sign_in_from_forge`,
//!    which keeps the tokens sealed); the browser is signed in as with any other way in.
//! 3. Every failure lands on `<root>/login?error=<code>` with upstream's codes
//!    (`invalid_state`, `oauth_error`, `org_access_denied`, `registration_closed`,
//!    `access_denied`, `internal_error`), and a forge's own OAuth error is passed on.

use serde_json::json;

use super::browser::{cookie, cookie_value, over_tls, redirect, set_cookie};
use crate::auth::{self, token};
use crate::ci::Error as CiError;
use crate::ci::forge::drivers::ForgeHandle;
use crate::ci::forge::{DriverError, ForgeError, OAuthRedirect};
use crate::http::{ApiError, Request, Response};
use crate::state::Ctx;
use crate::store::users::ForgeSignIn;
use crate::store::{StoreError, now_unix};

/// The cookie holding the nonce of the sign-in the browser started.
const STATE_COOKIE: &str = "woodlark_oauth";
/// How long a sign-in on the forge may take (upstream: five minutes).
const STATE_SECS: i64 = 5 * 60;
const STATE_TOKEN: &str = "oauth-state";

/// What a `GET /authorize` with a forge, or a forge's callback, comes to.
pub enum Outcome {
    /// Send the browser on (to the forge, or to the login page with an error).
    Redirect(Response),
    /// The forge has no OAuth sign-in: show the token form.
    NoOAuth,
    /// Signed in through the forge (its id); the page to return to, if the sign-in named one.
    SignedIn(crate::store::users::Account, i64, Option<String>),
}

/// The key that signs states: derived from the sealing key, so a callback may reach any
/// replica that shares it.
fn state_key(ctx: &Ctx) -> Vec<u8> {
    ctx.ci.seal.derive(STATE_TOKEN, "").into_bytes()
}

/// `<root>/login?error=<code>[&error_description=…]`.
pub fn login_error(ctx: &Ctx, code: &str, description: Option<&str>) -> Response {
    let description = description.unwrap_or("");
    to_login_page(ctx, &[("error", code), ("error_description", description)])
}

/// The forge's own error on its callback (`?error=access_denied&error_description=…`),
/// passed on to the login page as upstream does.
pub fn forge_error(ctx: &Ctx, req: &Request) -> Option<Response> {
    let code = req.query("error").filter(|e| !e.is_empty())?;
    let description = req.query("error_description").unwrap_or_default();
    let uri = req.query("error_uri").unwrap_or_default();
    Some(to_login_page(
        ctx,
        &[
            ("error", &code),
            ("error_description", &description),
            ("error_uri", &uri),
        ],
    ))
}

/// A redirect to `<root>/login` with the non-empty `pairs` as its query.
fn to_login_page(ctx: &Ctx, pairs: &[(&str, &str)]) -> Response {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        query.append_pair(key, value);
    }
    redirect(&format!(
        "{}/login?{}",
        ctx.config.web.root_path(),
        query.finish()
    ))
}

/// Step 1: the forge's authorize page, or [`Outcome::NoOAuth`]; `next` (already checked by
/// `browser::safe_next`) rides in the state to the callback.
pub async fn start(
    ctx: &Ctx,
    req: &Request,
    forge_id: i64,
    next: Option<String>,
) -> Result<Outcome, ApiError> {
    let forge = match ctx.ci.drivers.get(forge_id).await {
        Ok(forge) => forge,
        Err(DriverError::Store(StoreError::NotFound)) => {
            return Err(ApiError::not_found("Forge not found"));
        }
        Err(err) => {
            tracing::warn!(forge = forge_id, error = %err, "sign-in: no driver for the forge");
            return Ok(Outcome::Redirect(login_error(ctx, "internal_error", None)));
        }
    };
    let nonce = auth::random_secret();
    let mut claims = json!({"type": STATE_TOKEN, "forge": forge_id, "nonce": nonce, "exp": now_unix() + STATE_SECS});
    if let Some(next) = next {
        claims["next"] = json!(next);
    }
    let state = token::sign(&claims, &state_key(ctx));
    let target = OAuthRedirect {
        redirect_uri: ctx.ci.settings.oauth_callback(),
        state,
    };
    match forge.driver.authorize_url(&target).await {
        Ok(url) => {
            let mut response = redirect(&url);
            set_cookie(
                &mut response,
                &cookie(
                    STATE_COOKIE,
                    &nonce,
                    &callback_path(ctx),
                    STATE_SECS,
                    "Lax",
                    over_tls(ctx, req),
                ),
            );
            Ok(Outcome::Redirect(response))
        }
        Err(ForgeError::Unsupported(_)) => Ok(Outcome::NoOAuth),
        Err(err) => {
            tracing::warn!(forge = forge_id, error = %err, "sign-in: no authorize URL");
            Ok(Outcome::Redirect(login_error(ctx, "oauth_error", None)))
        }
    }
}

/// Step 2: the forge's callback with `code` and `state`.
pub async fn callback(ctx: &Ctx, req: &Request, code: &str, state: &str) -> Outcome {
    let Some((forge_id, next)) = verified_state(ctx, req, state) else {
        return Outcome::Redirect(login_error(ctx, "invalid_state", None));
    };
    let forge = match ctx.ci.drivers.get(forge_id).await {
        Ok(forge) => forge,
        Err(err) => {
            tracing::warn!(forge = forge_id, error = %err, "sign-in callback: no driver for the forge");
            return Outcome::Redirect(login_error(ctx, "internal_error", None));
        }
    };
    match sign_in(ctx, &forge, code).await {
        Ok(SignIn::Account(account)) => Outcome::SignedIn(account, forge_id, next),
        Ok(SignIn::Refused(code, description)) => {
            Outcome::Redirect(login_error(ctx, code, description.as_deref()))
        }
        Err(err) => {
            tracing::warn!(forge = forge_id, error = %err, "sign-in through the forge failed");
            Outcome::Redirect(login_error(ctx, "oauth_error", None))
        }
    }
}

/// Clears the state cookie on the response that ends a sign-in.
pub fn clear_state_cookie(ctx: &Ctx, req: &Request, response: &mut Response) {
    let clear = cookie(
        STATE_COOKIE,
        "",
        &callback_path(ctx),
        0,
        "Lax",
        over_tls(ctx, req),
    );
    set_cookie(response, &clear);
}

fn callback_path(ctx: &Ctx) -> String {
    format!("{}/authorize", ctx.config.web.root_path())
}

/// The forge a state names and the page it returns to, if the state is ours, unexpired, and
/// this browser's.
fn verified_state(ctx: &Ctx, req: &Request, state: &str) -> Option<(i64, Option<String>)> {
    let claims = token::verify(state, &state_key(ctx), now_unix())?;
    let nonce = claims.get("nonce")?.as_str()?;
    let cookie = cookie_value(req, STATE_COOKIE).unwrap_or_default();
    let ours = claims.get("type")?.as_str()? == STATE_TOKEN
        && claims.get("exp").is_some()
        && !nonce.is_empty()
        && auth::constant_time_eq(nonce.as_bytes(), cookie.as_bytes());
    let next = claims
        .get("next")
        .and_then(|n| n.as_str())
        .map(String::from);
    ours.then(|| Some((claims.get("forge")?.as_i64()?, next)))?
}

enum SignIn {
    Account(crate::store::users::Account),
    /// Refused, with the login page's error code and a description.
    Refused(&'static str, Option<String>),
}

async fn sign_in(ctx: &Ctx, forge: &ForgeHandle, code: &str) -> Result<SignIn, CiError> {
    let forge_id = forge.row.forge.id;
    let tokens = forge
        .driver
        .exchange_code(&ctx.ci.settings.oauth_callback(), code)
        .await?;
    let as_user = forge.driver.acting_as(&tokens.access);
    let account = as_user.current_user().await?;
    let allowed = &forge.row.forge.orgs;
    if !allowed.is_empty() {
        let member = match as_user.user_orgs().await {
            Ok(orgs) => orgs
                .iter()
                .any(|o| allowed.iter().any(|a| a.eq_ignore_ascii_case(o))),
            Err(ForgeError::Unsupported(_)) => false,
            Err(err) => return Err(err.into()),
        };
        if !member {
            tracing::info!(
                login = account.login,
                forge = forge_id,
                "sign-in refused: not in an allowed organisation"
            );
            return Ok(SignIn::Refused("org_access_denied", None));
        }
    }
    let login = account.login.clone();
    Ok(
        match crate::ci::users::sign_in_from_forge(&ctx.ci, forge_id, account, &tokens, as_user)
            .await?
        {
            ForgeSignIn::Known(a) | ForgeSignIn::Linked(a) | ForgeSignIn::Created(a) => {
                SignIn::Account(a)
            }
            ForgeSignIn::RegistrationClosed => {
                tracing::info!(
                    login,
                    forge = forge_id,
                    "sign-in refused: registration closed"
                );
                SignIn::Refused("registration_closed", None)
            }
            ForgeSignIn::LoginTaken => SignIn::Refused(
                "access_denied",
                Some(format!(
                    "the login {login:?} belongs to a user who does not sign in through this forge"
                )),
            ),
        },
    )
}
