//! HS256 JSON Web Tokens, the format of Woodpecker's tokens.
//!
//! A personal access token is `{"type":"user","user-id":"<id>"}` signed with the user's own
//! secret (`hash`), without expiry: rotating the secret is what revokes it. Verification
//! recomputes the MAC in constant time; the claims are only trusted after that.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

/// Signs `claims` with `key`.
pub fn sign(claims: &Value, key: &[u8]) -> String {
    let header = URL_SAFE_NO_PAD.encode(HEADER);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{header}.{payload}");
    let mac = mac(key, signing_input.as_bytes());
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(mac))
}

fn mac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut m = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable!("hmac key"));
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// The claims of a well-formed HS256 token, NOT yet verified: use them only to find the key.
pub fn unverified_claims(token: &str) -> Option<Value> {
    let mut parts = token.split('.');
    let (header, payload, _sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    if header.get("alg")? != "HS256" {
        return None;
    }
    let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    claims.is_object().then_some(claims)
}

/// Checks the signature (constant time) and, when present, the `exp` claim.
pub fn verify(token: &str, key: &[u8], now_unix: i64) -> Option<Value> {
    let claims = unverified_claims(token)?;
    let (signing_input, sig) = token.rsplit_once('.')?;
    let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
    let mut m = HmacSha256::new_from_slice(key).ok()?;
    m.update(signing_input.as_bytes());
    m.verify_slice(&sig).ok()?;
    if let Some(exp) = claims.get("exp")
        && exp.as_i64()? < now_unix
    {
        return None;
    }
    Some(claims)
}

/// The personal access token of user `id`, signed with that user's `hash`.
pub fn user_token(id: i64, hash: &str) -> String {
    sign(
        &json!({"type": "user", "user-id": id.to_string()}),
        hash.as_bytes(),
    )
}

/// The user id a personal access token names (unverified).
pub fn user_token_subject(token: &str) -> Option<i64> {
    let claims = unverified_claims(token)?;
    if claims.get("type")? != "user" {
        return None;
    }
    claims.get("user-id")?.as_str()?.parse().ok()
}

/// The token in a repository's hook URL: names the repository, signed with its `hash`.
pub fn hook_token(forge_id: i64, remote_id: &str, hash: &str) -> String {
    sign(
        &json!({"type": "hook", "forge-id": forge_id.to_string(), "repo-forge-remote-id": remote_id}),
        hash.as_bytes(),
    )
}

/// The (forge id, remote id) a hook token names (unverified).
pub fn hook_token_subject(token: &str) -> Option<(i64, String)> {
    let claims = unverified_claims(token)?;
    if claims.get("type")? != "hook" {
        return None;
    }
    let forge = claims.get("forge-id")?.as_str()?.parse().ok()?;
    let remote = claims.get("repo-forge-remote-id")?.as_str()?.to_string();
    Some((forge, remote))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let t = user_token(42, "secret");
        assert_eq!(user_token_subject(&t), Some(42));
        assert!(verify(&t, b"secret", 0).is_some());
        assert!(verify(&t, b"other", 0).is_none());
        let mut forged = t.clone();
        forged.pop();
        forged.push(if t.ends_with('A') { 'B' } else { 'A' });
        assert!(verify(&forged, b"secret", 0).is_none());
        assert!(verify("a.b", b"secret", 0).is_none());
        assert!(user_token_subject("garbage").is_none());
    }

    #[test]
    fn hook_tokens() {
        let t = hook_token(3, "alice/hello", "h");
        assert_eq!(hook_token_subject(&t), Some((3, "alice/hello".to_string())));
        assert!(verify(&t, b"h", 0).is_some());
        assert_eq!(
            user_token_subject(&t),
            None,
            "a hook token is no user token"
        );
        assert_eq!(hook_token_subject(&user_token(1, "h")), None);
    }

    #[test]
    fn expiry_is_enforced() {
        let t = sign(&json!({"type": "sess", "exp": 100}), b"k");
        assert!(verify(&t, b"k", 99).is_some());
        assert!(verify(&t, b"k", 101).is_none());
    }

    #[test]
    fn other_algorithms_are_refused() {
        let header = URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#);
        let payload = URL_SAFE_NO_PAD.encode(r#"{"type":"user","user-id":"1"}"#);
        assert!(unverified_claims(&format!("{header}.{payload}.")).is_none());
    }
}
