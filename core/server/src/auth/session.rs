//! Browser sessions: the tokens behind the `user_sess` cookie, the CSRF tokens that go with
//! them, and one-time login links.
//!
//! All three are HS256 tokens (see [`super::token`]) signed with the user's own secret
//! (`hash`), like personal access tokens, so rotating a user's token secret ends every session
//! and voids every outstanding link and CSRF token of that user at once.
//!
//! - `sess`: `{"type":"sess","user-id":"<id>","sid":"<random>","exp":<unix>}`. Always expires.
//! - `csrf`: `{"type":"csrf","user-id":"<id>","sid":"<sid of the session>"}`. Handed to the
//!   page in `/web-config.js`; a request authenticated by a session must echo it in
//!   `X-CSRF-TOKEN` unless its method is GET, HEAD or OPTIONS. It is bound to the session's
//!   `sid`, so a CSRF token of another session (or of the same user's PAT) does not fit.
//! - `login-link`: `{"type":"login-link","user-id":"<id>","jti":"<random>","exp":<unix>}`.
//!   One-time use is enforced by the caller, which records spent `jti`s in the database.

use serde_json::{Value, json};

use super::{random_secret, token};
use crate::http::{Method, Request};

pub const SESSION: &str = "sess";
pub const CSRF: &str = "csrf";
pub const LOGIN_LINK: &str = "login-link";

/// Request header that carries the CSRF token (Woodpecker's name).
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The CSRF token a built-in UI form carried in its hidden field (see its type).
pub use crate::http::browser::FormCsrf;

/// How long a login link stays valid.
pub const LOGIN_LINK_SECS: i64 = 10 * 60;

/// Who a user-level token names, read before verification (only to find the signing key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub user_id: i64,
    /// A browser session (`sess`) rather than a personal access token (`user`).
    pub session: bool,
}

/// The user a personal access token or a session token names (unverified). Other token
/// types, and session tokens without an expiry, name nobody.
pub fn subject(raw: &str) -> Option<Subject> {
    let claims = token::unverified_claims(raw)?;
    let session = match claims.get("type")?.as_str()? {
        "user" => false,
        SESSION if claims.get("exp")?.is_i64() => true,
        _ => return None,
    };
    let user_id = user_id(&claims)?;
    Some(Subject { user_id, session })
}

fn user_id(claims: &Value) -> Option<i64> {
    claims.get("user-id")?.as_str()?.parse().ok()
}

fn str_claim<'a>(claims: &'a Value, name: &str) -> Option<&'a str> {
    claims.get(name)?.as_str()
}

/// A new session token for user `id`, valid for `lifetime_secs` from `now`.
pub fn session_token(id: i64, hash: &str, now: i64, lifetime_secs: i64) -> String {
    session_token_from(id, hash, now, lifetime_secs, None)
}

/// [`session_token`]; `forge`: the forge the user signed in through, whose tokens the
/// session lasts no longer than (its claim `forge`; see [`forge_of`]).
pub fn session_token_from(
    id: i64,
    hash: &str,
    now: i64,
    lifetime_secs: i64,
    forge: Option<i64>,
) -> String {
    let mut claims = json!({
        "type": SESSION,
        "user-id": id.to_string(),
        "sid": random_secret(),
        "exp": now.saturating_add(lifetime_secs),
    });
    if let Some(forge) = forge {
        claims["forge"] = json!(forge);
    }
    token::sign(&claims, hash.as_bytes())
}

/// The forge a verified session's user signed in through, if they did: the session ends
/// when the server no longer holds that forge's tokens for them (the forge refused them).
pub fn forge_of(claims: &Value) -> Option<i64> {
    claims.get("forge")?.as_i64()
}

/// The CSRF token for the page of whoever holds `raw`, a token already verified for user
/// `id`: bound to the session's `sid`, or to no session for a personal access token (which
/// needs no CSRF token; the page gets one anyway, like upstream's).
pub fn csrf_token(raw: &str, id: i64, hash: &str) -> String {
    let claims = token::unverified_claims(raw).unwrap_or_default();
    let sid = str_claim(&claims, "sid").unwrap_or("");
    let mut csrf = json!({"type": CSRF, "user-id": id.to_string(), "sid": sid});
    if let Some(exp) = claims.get("exp") {
        csrf["exp"] = exp.clone();
    }
    token::sign(&csrf, hash.as_bytes())
}

/// Methods that change nothing and so need no CSRF token.
pub fn is_safe_method(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether `req`, authenticated by the verified session `claims` of user `id`, may proceed:
/// a safe method, or a CSRF token signed for the same user and session, in `X-CSRF-TOKEN` or
/// (a UI form post) in the [`FormCsrf`] its handler attached.
pub fn csrf_ok(req: &Request, session: &Value, id: i64, hash: &str, now: i64) -> bool {
    if is_safe_method(&req.method) {
        return true;
    }
    let given = req
        .header(CSRF_HEADER)
        .or_else(|| req.extensions.get::<FormCsrf>().map(|f| f.0.as_str()));
    let Some(given) = given else {
        return false;
    };
    let Some(csrf) = token::verify(given.trim(), hash.as_bytes(), now) else {
        return false;
    };
    let sid = str_claim(session, "sid").unwrap_or("");
    str_claim(&csrf, "type") == Some(CSRF)
        && user_id(&csrf) == Some(id)
        && !sid.is_empty()
        && str_claim(&csrf, "sid") == Some(sid)
}

/// A login link token for user `id`, valid for [`LOGIN_LINK_SECS`] from `now`.
pub fn login_link_token(id: i64, hash: &str, now: i64) -> String {
    token::sign(
        &json!({
            "type": LOGIN_LINK,
            "user-id": id.to_string(),
            "jti": random_secret(),
            "exp": now.saturating_add(LOGIN_LINK_SECS),
        }),
        hash.as_bytes(),
    )
}

/// The user a login link names (unverified).
pub fn login_link_subject(raw: &str) -> Option<i64> {
    let claims = token::unverified_claims(raw)?;
    (str_claim(&claims, "type")? == LOGIN_LINK)
        .then(|| user_id(&claims))
        .flatten()
}

/// A login link's one-time id and expiry, if it verifies with the user's `hash` at `now`.
pub fn verify_login_link(raw: &str, hash: &str, now: i64) -> Option<(String, i64)> {
    let claims = token::verify(raw, hash.as_bytes(), now)?;
    if str_claim(&claims, "type")? != LOGIN_LINK {
        return None;
    }
    let jti = str_claim(&claims, "jti")?.to_string();
    let exp = claims.get("exp")?.as_i64()?;
    (!jti.is_empty()).then_some((jti, exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HeaderValue;

    fn post_with(csrf: Option<&str>) -> Request {
        let mut req = Request::new(Method::POST, "/api/repos");
        if let Some(c) = csrf {
            req.headers
                .insert(CSRF_HEADER, HeaderValue::from_str(c).unwrap());
        }
        req
    }

    #[test]
    fn sessions_name_their_user_and_expire() {
        let t = session_token(7, "h", 1000, 60);
        assert_eq!(
            subject(&t),
            Some(Subject {
                user_id: 7,
                session: true
            })
        );
        assert!(token::verify(&t, b"h", 1060).is_some());
        assert!(token::verify(&t, b"h", 1061).is_none(), "expired");
        assert!(token::verify(&t, b"other", 1000).is_none(), "rotated hash");
        let pat = token::user_token(7, "h");
        assert_eq!(
            subject(&pat),
            Some(Subject {
                user_id: 7,
                session: false
            })
        );
        // A session token without an expiry, and other token types, name nobody.
        let forever = token::sign(&json!({"type": "sess", "user-id": "7"}), b"h");
        assert_eq!(subject(&forever), None);
        assert_eq!(subject(&login_link_token(7, "h", 0)), None);
        assert_eq!(subject(&csrf_token(&t, 7, "h")), None);
        assert_eq!(subject(&token::hook_token(1, "a/b", "h")), None);
    }

    #[test]
    fn a_session_from_a_forge_names_it() {
        let t = session_token_from(7, "h", 1000, 60, Some(3));
        let claims = token::verify(&t, b"h", 1000).unwrap();
        assert_eq!(forge_of(&claims), Some(3));
        assert_eq!(subject(&t).map(|s| s.session), Some(true));
        let plain = token::verify(&session_token(7, "h", 1000, 60), b"h", 1000).unwrap();
        assert_eq!(forge_of(&plain), None);
    }

    #[test]
    fn csrf_is_bound_to_user_and_session() {
        let sess = session_token(7, "h", 1000, 60);
        let claims = token::verify(&sess, b"h", 1000).unwrap();
        let good = csrf_token(&sess, 7, "h");
        assert!(csrf_ok(&post_with(Some(&good)), &claims, 7, "h", 1000));
        assert!(!csrf_ok(&post_with(None), &claims, 7, "h", 1000));
        assert!(!csrf_ok(&post_with(Some("junk")), &claims, 7, "h", 1000));
        // Another session of the same user, the user's PAT page, another user, a rotated hash.
        let other = csrf_token(&session_token(7, "h", 1000, 60), 7, "h");
        assert!(!csrf_ok(&post_with(Some(&other)), &claims, 7, "h", 1000));
        let pat_page = csrf_token(&token::user_token(7, "h"), 7, "h");
        assert!(!csrf_ok(&post_with(Some(&pat_page)), &claims, 7, "h", 1000));
        let stranger = csrf_token(&sess, 8, "h");
        assert!(!csrf_ok(&post_with(Some(&stranger)), &claims, 7, "h", 1000));
        let old = csrf_token(&sess, 7, "old");
        assert!(!csrf_ok(&post_with(Some(&old)), &claims, 7, "h", 1000));
        // A session token is no CSRF token.
        assert!(!csrf_ok(&post_with(Some(&sess)), &claims, 7, "h", 1000));
        // A form's field, attached by a UI form handler, counts as the header does.
        let mut form = post_with(None);
        form.extensions.insert(FormCsrf(good.clone()));
        assert!(csrf_ok(&form, &claims, 7, "h", 1000));
        let mut form = post_with(None);
        form.extensions.insert(FormCsrf(other.clone()));
        assert!(!csrf_ok(&form, &claims, 7, "h", 1000));
        // Safe methods need none.
        for m in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(csrf_ok(
                &Request::new(m, "/api/user"),
                &claims,
                7,
                "h",
                1000
            ));
        }
        for m in [Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(!csrf_ok(&Request::new(m, "/x"), &claims, 7, "h", 1000));
        }
    }

    #[test]
    fn login_links_expire_and_carry_a_one_time_id() {
        let t = login_link_token(3, "h", 1000);
        assert_eq!(login_link_subject(&t), Some(3));
        let (jti, exp) = verify_login_link(&t, "h", 1000 + LOGIN_LINK_SECS).unwrap();
        assert_eq!(exp, 1000 + LOGIN_LINK_SECS);
        assert_eq!(jti.len(), 43);
        assert!(verify_login_link(&t, "h", 1001 + LOGIN_LINK_SECS).is_none());
        assert!(verify_login_link(&t, "x", 1000).is_none());
        let sess = session_token(3, "h", 1000, 60);
        assert_eq!(login_link_subject(&sess), None);
        assert!(verify_login_link(&sess, "h", 1000).is_none());
        assert_ne!(
            verify_login_link(&login_link_token(3, "h", 1000), "h", 1000)
                .unwrap()
                .0,
            jti
        );
    }
}
