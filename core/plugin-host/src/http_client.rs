//! The `http-client` capability: outbound HTTP(S) for plugins, deny by default.
//!
//! Rules, in order:
//! 1. the URL's origin (`scheme://host:port`, default ports filled in) must be in the
//!    instance's `allowed_hosts` or among the origins of the forge the call is made for,
//!    else `denied` (and the call's failure names the host and how to allow it);
//! 2. redirects (301/302/303/307/308, at most 5) are followed only to allowed origins, each
//!    hop re-checked; a 303 turns into a body-less GET;
//! 3. the request body, header count and number of requests per call are capped; the
//!    response body is read under `max_http_response_bytes` (a bigger one is `unavailable`);
//! 4. the timeout is the request's own `timeout-ms`, never longer than what is left of the
//!    plugin call's deadline;
//! 5. certificates are verified, except for the one origin a call names as unverified: the
//!    forge of a forge-API call whose forge is marked `skip_verify` (self-signed forges).
//!
//! Each exchange goes through the HTTP core's client (`woodlark_http::client`: rustls with the
//! Mozilla root set, so no system state is consulted); this module adds the policy above.

use std::time::Duration;

use bytes::Bytes;
use woodlark_http::client::{Client, ClientError};

use crate::config::Origin;
use crate::error::HostError;

const MAX_REDIRECTS: usize = 5;

/// An outbound request from a plugin (already converted from WIT).
pub(crate) struct OutRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Option<Vec<u8>>,
    pub timeout: Duration,
}

pub(crate) struct OutResponse {
    pub status: u16,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// Errors as the plugin sees them.
#[derive(Debug)]
pub(crate) enum OutError {
    Invalid(String),
    /// The origin is not granted to this call.
    NotAllowed(Origin),
    Unavailable(String),
}

#[derive(Clone)]
pub(crate) struct HttpClient {
    client: Client,
    /// The same client without certificate checks, only ever used for the call's
    /// `unverified` origin.
    unverified: Client,
}

impl HttpClient {
    pub fn new() -> Result<Self, HostError> {
        let client = Client::new().map_err(|e| HostError::Http(e.to_string()))?;
        let unverified = Client::unverified().map_err(|e| HostError::Http(e.to_string()))?;
        Ok(Self { client, unverified })
    }

    /// Sends `req` to origins `allowed` accepts (every redirect hop checked); runs on the
    /// async runtime. Requests to `unverified` (and only those, redirects included) skip
    /// certificate checks.
    pub async fn send(
        &self,
        allowed: &(dyn Fn(&Origin) -> bool + Sync),
        unverified: Option<&Origin>,
        req: OutRequest,
        max_response: u64,
    ) -> Result<OutResponse, OutError> {
        let mut method: http::Method = req
            .method
            .to_ascii_uppercase()
            .parse()
            .map_err(|_| OutError::Invalid(format!("bad method {:?}", req.method)))?;
        let mut url: http::Uri = req
            .url
            .parse()
            .map_err(|e| OutError::Invalid(format!("bad url {:?}: {e}", req.url)))?;
        let mut body = req.body.unwrap_or_default();
        let deadline = tokio::time::Instant::now() + req.timeout;

        for _hop in 0..=MAX_REDIRECTS {
            let origin = Origin::of(&url)
                .ok_or_else(|| OutError::Invalid(format!("url {url} needs a scheme and host")))?;
            if !allowed(&origin) {
                return Err(OutError::NotAllowed(origin));
            }
            let mut builder = http::Request::builder()
                .method(method.clone())
                .uri(url.clone());
            for (name, value) in &req.headers {
                let lower = name.to_ascii_lowercase();
                if matches!(
                    lower.as_str(),
                    "host"
                        | "connection"
                        | "content-length"
                        | "transfer-encoding"
                        | "upgrade"
                        | "te"
                        | "trailer"
                ) {
                    continue;
                }
                let name = http::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| OutError::Invalid(format!("bad header name {name:?}")))?;
                let value = http::HeaderValue::from_bytes(value)
                    .map_err(|_| OutError::Invalid(format!("bad value for header {name}")))?;
                builder = builder.header(name, value);
            }
            let request = builder
                .body(Bytes::from(body.clone()))
                .map_err(|e| OutError::Invalid(e.to_string()))?;
            let limit = usize::try_from(max_response).unwrap_or(usize::MAX);
            let client = if unverified == Some(&origin) {
                &self.unverified
            } else {
                &self.client
            };
            let response = tokio::time::timeout_at(deadline, client.send(request, limit))
                .await
                .map_err(|_| OutError::Unavailable(format!("{origin}: timed out")))?
                .map_err(|e| match e {
                    ClientError::TooLarge(_) => OutError::Unavailable(format!(
                        "response body larger than {max_response} bytes"
                    )),
                    ClientError::Body(_) => OutError::Unavailable(e.to_string()),
                    other => OutError::Unavailable(format!("{origin}: {other}")),
                })?;
            let status = response.status();
            let headers: Vec<(String, Vec<u8>)> = response
                .headers()
                .iter()
                .map(|(n, v)| (n.as_str().to_string(), v.as_bytes().to_vec()))
                .collect();
            let location = response.headers().get(http::header::LOCATION).cloned();
            let resp_body = response.into_body().to_vec();

            let follow = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
            match location {
                Some(loc) if follow => {
                    let loc = loc.to_str().map_err(|_| {
                        OutError::Unavailable("redirect location is not text".into())
                    })?;
                    url = resolve(&url, loc)?;
                    if status.as_u16() == 303
                        || (status.as_u16() != 307
                            && status.as_u16() != 308
                            && method == http::Method::POST)
                    {
                        method = http::Method::GET;
                        body.clear();
                    }
                }
                _ => {
                    return Ok(OutResponse {
                        status: status.as_u16(),
                        headers,
                        body: resp_body,
                    });
                }
            }
        }
        Err(OutError::Unavailable(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }
}

/// Resolves a `Location` against the current URL (absolute, or absolute-path).
fn resolve(base: &http::Uri, location: &str) -> Result<http::Uri, OutError> {
    if location.contains("://") {
        return location
            .parse()
            .map_err(|_| OutError::Unavailable(format!("bad redirect location {location:?}")));
    }
    if !location.starts_with('/') {
        return Err(OutError::Unavailable(format!(
            "unsupported relative redirect {location:?}"
        )));
    }
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    format!("{scheme}://{authority}{location}")
        .parse()
        .map_err(|_| OutError::Unavailable(format!("bad redirect location {location:?}")))
}
