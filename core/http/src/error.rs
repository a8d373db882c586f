//! One error type for every handler, rendered in the style of the interface that owns the route.

use http::StatusCode;

use super::response::Response;

/// How a module's errors look on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorStyle {
    /// Woodpecker: the message as a `text/plain` body.
    PlainText,
    /// Clever and algod: `{"message": "..."}`.
    JsonMessage,
}

/// A failed request: a status and a message safe to show to the client.
///
/// Internal failures carry a generic message; their cause is logged where they are created
/// (see [`ApiError::internal`]) so that database paths or secrets never reach a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds to wait before trying again (`Retry-After`), when the refusal will pass.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 503: the server is too busy for this request now; try again in `seconds`.
    pub fn busy(message: impl Into<String>, seconds: u32) -> ApiError {
        ApiError {
            retry_after: Some(seconds),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "Unauthorized")
    }

    pub fn forbidden() -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "Forbidden")
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    pub fn payload_too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds the limit of {limit} bytes"),
        )
    }

    /// A server-side failure: logs `cause` and answers 500 without details.
    pub fn internal(cause: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %cause, "internal error");
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal server error")
    }

    pub fn render(&self, style: ErrorStyle) -> Response {
        let response = match style {
            ErrorStyle::PlainText => Response::text(self.status, self.message.clone()),
            ErrorStyle::JsonMessage => {
                Response::json_status(self.status, &serde_json::json!({ "message": self.message }))
            }
        };
        match self.retry_after {
            Some(seconds) => response.with_header(http::header::RETRY_AFTER, seconds.into()),
            None => response,
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl std::error::Error for ApiError {}

/// Errors that classify themselves (the store's, the CI services') become 404, 400 or 409
/// with their message, or a logged 500, so `?` works in handlers without those crates knowing HTTP.
impl<E: woodlark_stdx::Classify> From<E> for ApiError {
    fn from(err: E) -> ApiError {
        match err.fault() {
            woodlark_stdx::Fault::NotFound(message) => ApiError::not_found(message),
            woodlark_stdx::Fault::Invalid(message) => ApiError::bad_request(message),
            woodlark_stdx::Fault::Conflict(message) => ApiError::conflict(message),
            woodlark_stdx::Fault::Forbidden(message) => {
                ApiError::new(StatusCode::FORBIDDEN, message)
            }
            woodlark_stdx::Fault::Unprocessable(message) => ApiError::unprocessable(message),
            woodlark_stdx::Fault::Upstream(message) => {
                tracing::warn!(error = %message, "a system we depend on failed");
                ApiError::new(StatusCode::BAD_GATEWAY, message)
            }
            woodlark_stdx::Fault::Unavailable(message) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
            }
            woodlark_stdx::Fault::Internal => ApiError::internal(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use woodlark_stdx::{Classify, Fault};

    #[derive(Debug)]
    struct Lower(Fault);

    impl std::fmt::Display for Lower {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "disk on fire")
        }
    }

    impl Classify for Lower {
        fn fault(&self) -> Fault {
            self.0.clone()
        }
    }

    #[test]
    fn lower_errors_keep_their_class_and_internal_ones_stay_opaque() {
        let not_found = ApiError::from(Lower(Fault::NotFound("no such step".into())));
        assert_eq!(
            (not_found.status, not_found.message.as_str()),
            (StatusCode::NOT_FOUND, "no such step")
        );
        let invalid = ApiError::from(Lower(Fault::Invalid("bad state".into())));
        assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
        let forbidden = ApiError::from(Lower(Fault::Forbidden("needs admin".into())));
        assert_eq!(forbidden.status, StatusCode::FORBIDDEN);
        let conflict = ApiError::from(Lower(Fault::Conflict("name taken".into())));
        assert_eq!(
            (conflict.status, conflict.message.as_str()),
            (StatusCode::CONFLICT, "name taken")
        );
        let refused = ApiError::from(Lower(Fault::Unprocessable("unknown commit".into())));
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
        let upstream = ApiError::from(Lower(Fault::Upstream("forge said 500".into())));
        assert_eq!(
            (upstream.status, upstream.message.as_str()),
            (StatusCode::BAD_GATEWAY, "forge said 500")
        );
        let absent = ApiError::from(Lower(Fault::Unavailable("no github plugin".into())));
        assert_eq!(absent.status, StatusCode::SERVICE_UNAVAILABLE);
        let internal = ApiError::from(Lower(Fault::Internal));
        assert_eq!(internal.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            !internal.message.contains("fire"),
            "the cause is logged, not shown"
        );
    }
}
