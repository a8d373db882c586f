//! The allow-listed HTTP client. A request to an origin the operator did not list in
//! `allowed_hosts` fails with `PluginError::Denied`; the host caps response sizes.

use crate::host_api::http_client;
use crate::{Header, PluginError, headers};

pub use http_client::{Request, Response};

/// Sends a request as is.
pub fn send(req: &Request) -> Result<Response, PluginError> {
    http_client::send(req)
}

/// A request with no body and no timeout override.
pub fn request(method: &str, url: &str, headers: Vec<Header>) -> Request {
    Request {
        method: method.to_string(),
        url: url.to_string(),
        headers,
        body: None,
        timeout_ms: None,
    }
}

/// The error for an answer with an unexpected `status` from `what` (a URL or an API's name):
/// 401, the forge refusing the credentials (a revoked or expired token), is `Denied`, so
/// the server can tell a bad token from a forge that is down (`Unavailable`, every other
/// status).
pub fn status_error(what: &str, status: u16) -> PluginError {
    if status == 401 {
        crate::denied(format!(
            "{what}: HTTP 401: the forge refused the credentials (revoked or expired token?)"
        ))
    } else {
        crate::unavailable(format!("{what}: HTTP {status}"))
    }
}

/// GET `url` with an optional bearer-style `Authorization` value and `Accept: application/json`;
/// `Ok(None)` on 404, the parsed JSON on 2xx, [`status_error`] otherwise.
pub fn get_json(
    url: &str,
    authorization: Option<&str>,
) -> Result<Option<serde_json::Value>, PluginError> {
    get_json_unless(url, authorization, |resp| resp.status == 404)
}

/// [`get_json`] for a question about the caller's own access (their permission on a
/// repository, their membership of an organisation): 403 is `Ok(None)` too, the forge
/// saying no to them, unless it is a rate limit ([`is_rate_limited`]), which says nothing
/// about the caller and stays `Unavailable`.
pub fn get_json_for_access(
    url: &str,
    authorization: Option<&str>,
) -> Result<Option<serde_json::Value>, PluginError> {
    get_json_unless(url, authorization, |resp| {
        resp.status == 404 || (resp.status == 403 && !is_rate_limited(resp))
    })
}

/// Whether a 403 is a rate limit rather than a refusal: GitHub's primary limit sends
/// `x-ratelimit-remaining: 0`, its secondary one `retry-after`.
pub fn is_rate_limited(resp: &Response) -> bool {
    crate::headers::header(&resp.headers, "retry-after").is_some()
        || crate::headers::header(&resp.headers, "x-ratelimit-remaining")
            .is_some_and(|left| left.trim() == "0")
}

/// GET JSON: `Ok(None)` when `absent` says so of the answer, the parsed JSON on 2xx,
/// [`status_error`] otherwise.
fn get_json_unless(
    url: &str,
    authorization: Option<&str>,
    absent: impl Fn(&Response) -> bool,
) -> Result<Option<serde_json::Value>, PluginError> {
    let mut hs = vec![headers::text("accept", "application/json")];
    if let Some(auth) = authorization {
        hs.push(headers::text("authorization", auth));
    }
    let resp = send(&request("GET", url, hs))?;
    if absent(&resp) {
        return Ok(None);
    }
    match resp.status {
        200..=299 => serde_json::from_slice(&resp.body)
            .map(Some)
            .map_err(|e| crate::unavailable(format!("bad JSON from {url}: {e}"))),
        s => Err(status_error(url, s)),
    }
}

/// The files (not subdirectories) of one directory, as a GitHub-style contents API lists them
/// (`GET …/contents/{path}?ref=…`, served alike by GitHub, Gitea and Forgejo): their paths in
/// the repository. None on 404 or when the answer is not a list.
pub fn get_contents_files(
    url: &str,
    authorization: Option<&str>,
) -> Result<Vec<String>, PluginError> {
    let listing = get_json(url, authorization)?;
    Ok(listing
        .as_ref()
        .and_then(serde_json::Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e["type"] == "file")
                .map(|e| crate::json::str_at(e, "/path"))
                .collect()
        })
        .unwrap_or_default())
}

/// GET a file's raw bytes with `extra` headers plus an optional `Authorization` value:
/// `Ok(None)` on 404, the body on 200, [`status_error`] naming `api` otherwise.
pub fn get_file(
    url: &str,
    mut extra: Vec<Header>,
    authorization: Option<&str>,
    api: &str,
) -> Result<Option<Vec<u8>>, PluginError> {
    if let Some(auth) = authorization {
        extra.push(headers::text("authorization", auth));
    }
    let resp = send(&request("GET", url, extra))?;
    match resp.status {
        200 => Ok(Some(resp.body)),
        404 => Ok(None),
        s => Err(status_error(api, s)),
    }
}

/// Sends `body` as JSON with `method`; [`status_error`] unless the status is 2xx.
pub fn send_json(
    method: &str,
    url: &str,
    authorization: Option<&str>,
    body: &serde_json::Value,
) -> Result<Response, PluginError> {
    let mut hs = vec![
        headers::text("accept", "application/json"),
        headers::text("content-type", "application/json"),
    ];
    if let Some(auth) = authorization {
        hs.push(headers::text("authorization", auth));
    }
    let mut req = request(method, url, hs);
    req.body = Some(body.to_string().into_bytes());
    let resp = send(&req)?;
    if (200..300).contains(&resp.status) {
        Ok(resp)
    } else {
        Err(status_error(url, resp.status))
    }
}

/// DELETE `url`; 2xx and 404 (already gone) are success, anything else [`status_error`].
pub fn delete(url: &str, authorization: Option<&str>) -> Result<(), PluginError> {
    let mut hs = vec![headers::text("accept", "application/json")];
    if let Some(auth) = authorization {
        hs.push(headers::text("authorization", auth));
    }
    let resp = send(&request("DELETE", url, hs))?;
    match resp.status {
        200..=299 | 404 => Ok(()),
        s => Err(status_error(url, s)),
    }
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-encodes a path, keeping the `/` separators.
pub fn encode_path(path: &str) -> String {
    path.split('/').map(encode).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_403_is_a_refusal_unless_it_is_a_rate_limit() {
        let answer = |headers: &[(&str, &str)]| Response {
            status: 403,
            headers: headers.iter().map(|(k, v)| headers::text(k, v)).collect(),
            body: Vec::new(),
        };
        assert!(!is_rate_limited(&answer(&[])));
        assert!(!is_rate_limited(&answer(&[(
            "x-ratelimit-remaining",
            "17"
        )])));
        assert!(is_rate_limited(&answer(&[("x-ratelimit-remaining", "0")])));
        assert!(is_rate_limited(&answer(&[("retry-after", "60")])));
    }

    #[test]
    fn a_refused_token_is_denied_and_other_statuses_unavailable() {
        let refused = status_error("https://forge/api/user", 401);
        assert!(matches!(refused, PluginError::Denied(ref m) if m.contains("HTTP 401")));
        for status in [403, 429, 500, 502] {
            let err = status_error("https://forge/api/user", status);
            assert!(
                matches!(err, PluginError::Unavailable(ref m) if m.ends_with(&format!("HTTP {status}"))),
                "{status}: {err:?}"
            );
        }
    }
}
