//! What handlers receive: the request line, headers, path parameters and the whole body.
//!
//! Bodies are read before the handler runs, bounded by the route's limit, so a handler never
//! waits on a slow client and never sees more bytes than its route allows. A guarded route's
//! head check sees the request before its body is read (`body` still empty).

use bytes::Bytes;
use http::{HeaderMap, Method};
use serde::de::DeserializeOwned;

use super::error::ApiError;

#[derive(Debug)]
pub struct Request {
    pub method: Method,
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    pub headers: HeaderMap,
    /// Parameters captured by the route pattern, in pattern order.
    pub params: Vec<(String, String)>,
    pub body: Bytes,
    /// The peer's address, when known.
    pub remote: Option<std::net::SocketAddr>,
    /// Whether the request came over TLS.
    pub tls: bool,
    /// What the server and a route's head check attached to the request (see
    /// [`crate::router::Scope::route_guarded`]).
    pub extensions: http::Extensions,
}

impl Request {
    /// A request as a test or an internal caller would build it.
    pub fn new(method: Method, path_and_query: &str) -> Request {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        Request {
            method,
            path: path.to_string(),
            query: query.to_string(),
            headers: HeaderMap::new(),
            params: Vec::new(),
            body: Bytes::new(),
            remote: None,
            tls: false,
            extensions: http::Extensions::new(),
        }
    }

    /// A path parameter. Route patterns guarantee presence, so a missing one is a route bug.
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    }

    /// A path parameter that must be a (positive or zero) integer id: 400 otherwise.
    pub fn param_i64(&self, name: &str) -> Result<i64, ApiError> {
        let raw = self.param(name);
        raw.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!("invalid {name} {raw:?}: expected an integer"))
        })
    }

    /// A boolean query parameter, read as upstream's handlers read one (Go's
    /// `strconv.ParseBool`: `true`, `1`, `t`, `false`, `0`, …): `None` when absent or empty,
    /// a 400 naming it for anything else.
    pub fn query_bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.query(name).as_deref() {
            None | Some("") => Ok(None),
            Some(raw) => woodlark_stdx::go_bool(raw).map(Some).ok_or_else(|| {
                ApiError::bad_request(format!("invalid {name} {raw:?}: expected true or false"))
            }),
        }
    }

    /// The first value of a query parameter, percent-decoded.
    pub fn query(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Every value of a query parameter, in order.
    pub fn query_all(&self, name: &str) -> Vec<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body parsed as JSON; malformed JSON or wrong field types are 400.
    ///
    /// The body must be a JSON **object**: serde would also read a struct from an array of
    /// its fields in order (`["x", 1]`), which no client means and which would create records
    /// from garbage. Bodies that are lists use [`Request::json_list`].
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        self.json_shaped(b'{', "an object")
    }

    /// The body as a JSON array of `T`.
    pub fn json_list<T: DeserializeOwned>(&self) -> Result<Vec<T>, ApiError> {
        self.json_shaped(b'[', "an array")
    }

    fn json_shaped<T: DeserializeOwned>(&self, open: u8, what: &str) -> Result<T, ApiError> {
        let first = self.body.iter().find(|b| !b.is_ascii_whitespace());
        match first {
            None => Err(ApiError::bad_request(
                "request body is empty: expected JSON",
            )),
            Some(&b) if b != open => {
                // A form post (`curl -d`, an HTML form) is the usual way to get here.
                let form = self
                    .header("content-type")
                    .is_some_and(|t| t.starts_with("application/x-www-form-urlencoded"));
                Err(ApiError::bad_request(if form {
                    format!(
                        "invalid JSON body: expected {what}, got a form-encoded body; send JSON with `Content-Type: application/json`"
                    )
                } else {
                    format!("invalid JSON body: expected {what}")
                }))
            }
            Some(_) => serde_json::from_slice(&self.body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boolean_query_parameter_is_read_as_go_reads_one() {
        let flag = |q: &str| Request::new(Method::GET, &format!("/x?{q}")).query_bool("latest");
        assert_eq!(flag("latest=true").unwrap(), Some(true));
        assert_eq!(flag("latest=1").unwrap(), Some(true));
        assert_eq!(flag("latest=T").unwrap(), Some(true));
        assert_eq!(flag("latest=False").unwrap(), Some(false));
        assert_eq!(flag("latest=").unwrap(), None);
        assert_eq!(flag("other=true").unwrap(), None);
        let err = flag("latest=yes").unwrap_err();
        assert_eq!(err.status, http::StatusCode::BAD_REQUEST);
        assert_eq!(
            err.message,
            "invalid latest \"yes\": expected true or false"
        );
    }
}
