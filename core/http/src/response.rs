//! What handlers return: a status, headers and a fully formed body — or, for server-sent
//! events, a stream of chunks fed through a bounded channel.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Serialize;

#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When set, the body is streamed from this channel instead (`body` is ignored). The
    /// channel is bounded: a producer that finds it full knows the client is too slow.
    pub stream: Option<tokio::sync::mpsc::Receiver<Bytes>>,
}

impl Response {
    pub fn new(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        Response {
            status,
            headers,
            body: body.into(),
            stream: None,
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

    /// A 200 whose body is JSON text made elsewhere (e.g. by the store from stored records).
    pub fn json_text(body: impl Into<Bytes>) -> Response {
        Response::new(StatusCode::OK, "application/json; charset=utf-8", body)
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
            stream: None,
        }
    }

    /// A `text/event-stream` response whose chunks come from `rx`.
    pub fn event_stream(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
        let mut r = Response::new(StatusCode::OK, "text/event-stream", Bytes::new());
        r.headers
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r.headers.insert(
            header::HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        );
        r.stream = Some(rx);
        r
    }

    pub fn with_header(mut self, name: header::HeaderName, value: HeaderValue) -> Response {
        self.headers.insert(name, value);
        self
    }
}
