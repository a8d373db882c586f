//! The HTTP core: the only crate in the workspace that knows hyper.
//!
//! Layout:
//! - [`server`]: the accept loop (hyper-util's auto builder: HTTP/1.1 and h2c), header-read
//!   timeout, graceful shutdown.
//! - [`connections`]: the connection limit, the 503 refusal past it, the open-file limit.
//! - [`heap`]: freed heap handed back to the kernel after a flood of connections.
//! - [`router`]: a matchit table from path patterns to handlers, with per-route body limits and
//!   405 + `Allow`; modules add their routes through a [`router::Scope`] under their mount. A
//!   guarded route (webhooks) checks the request's head before its body is read.
//! - [`budget`]: the byte budget guarded routes' bodies share (503 past it).
//! - [`request`] / [`response`]: the plain types handlers see and return; [`paging`]: the
//!   `?page=&per_page=` of lists; [`browser`]: cookies, redirects, escaping, the form CSRF.
//! - [`error`]: [`ApiError`], rendered as plain text (Woodpecker) or `{"message"}` JSON
//!   (Clever, algod) depending on the module that owns the route.
//! - [`client`]: outbound HTTP(S) for the rest of the server (agent protocol, plugins).
//! - [`metrics`]: request counters and latency histograms for `/metrics`.
//!
//! **API boundary:** handlers never see hyper types; they take a [`Request`] and return
//! `Result<Response, ApiError>`. Types re-exported here from the `http` crate (status codes,
//! methods, header maps) are plain data and safe to use anywhere.

pub mod browser;
pub mod budget;
pub mod client;
pub mod connections;
pub mod error;
pub mod heap;
pub mod metrics;
pub mod paging;
pub mod request;
pub mod response;
pub mod router;
pub mod server;

pub use error::{ApiError, ErrorStyle};
pub use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
pub use request::Request;
pub use response::Response;
pub use router::{Router, Scope};
