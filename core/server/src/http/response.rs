//! What handlers return: a status, headers and a fully formed body.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Serialize;

#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    pub fn new(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        Response {
            status,
            headers,
            body: body.into(),
        }
    }

    /// 200 with `value` as JSON.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Response {
        Response::json_status(StatusCode::OK, value)
    }

    pub fn json_status<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response {
        match serde_json::to_vec(value) {
            Ok(body) => Response::new(status, "application/json; charset=utf-8", body),
            Err(err) => {
                tracing::error!(%err, "response serialisation failed");
                Response::text(StatusCode::INTERNAL_SERVER_ERROR, "internal server error")
            }
        }
    }

    pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response {
        Response::new(status, "text/plain; charset=utf-8", body)
    }

    /// A status with no body (204 and friends).
    pub fn empty(status: StatusCode) -> Response {
        Response {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    pub fn with_header(mut self, name: header::HeaderName, value: HeaderValue) -> Response {
        self.headers.insert(name, value);
        self
    }
}
