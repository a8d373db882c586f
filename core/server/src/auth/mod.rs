//! Credentials: random secrets, signed tokens and the server's signing key.
//!
//! - [`token`], [`sealing`], [`keys`]: HS256 tokens, encryption at rest and the server's
//!   ed25519 key pair, kept in the services' crate (`woodlark_ci::auth`), which makes, opens
//!   and stores them.
//! - [`session`]: browser sessions (`sess`), their CSRF tokens and one-time login links.
//! - [`bearer`]: where a request carries its token (header, query, cookie).

pub mod session;

pub use woodlark_ci::auth::{keys, sealing, token};

use crate::http::Request;

pub use woodlark_stdx::{random_bytes, random_secret};

/// Sealing purpose under which user token keys are derived.
const USER_TOKEN_KEY: &str = "user-token-key";

/// The key that signs `account`'s tokens: derived from its stored seed and the server's secret
/// key, so that reading the database is not enough to forge a token.
pub fn user_token_key(seal: &sealing::SealKey, account: &crate::store::users::Account) -> String {
    seal.derive(USER_TOKEN_KEY, &account.token_seed)
}

/// Compares two secrets without leaking where they differ through timing.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token a request carries, in Woodpecker's lookup order: `Authorization: Bearer`, then
/// `?access_token=`, then the `user_sess` cookie.
pub fn bearer(req: &Request) -> Option<String> {
    if let Some(value) = req.header("authorization") {
        let value = value.trim();
        if let Some(token) = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
        {
            return Some(token.trim().to_string());
        }
    }
    if let Some(token) = req.query("access_token") {
        return Some(token);
    }
    let cookies = req.header("cookie")?;
    cookies
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == "user_sess")
        .map(|(_, value)| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{HeaderValue, Method};

    #[test]
    fn lookup_order() {
        let mut req = Request::new(Method::GET, "/api/user?access_token=q");
        req.headers
            .insert("cookie", HeaderValue::from_static("a=b; user_sess=c"));
        assert_eq!(bearer(&req).as_deref(), Some("q"));
        req.headers
            .insert("authorization", HeaderValue::from_static("Bearer h"));
        assert_eq!(bearer(&req).as_deref(), Some("h"));
        let mut req = Request::new(Method::GET, "/api/user");
        req.headers
            .insert("cookie", HeaderValue::from_static("a=b; user_sess=c"));
        assert_eq!(bearer(&req).as_deref(), Some("c"));
        assert_eq!(bearer(&Request::new(Method::GET, "/")), None);
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn secrets_differ() {
        assert_ne!(random_secret(), random_secret());
        assert_eq!(random_secret().len(), 43);
    }
}
