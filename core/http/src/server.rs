//! The accept loop and per-request dispatch.
//!
//! Connections are served by hyper-util's auto builder (HTTP/1.1, and HTTP/2 with prior
//! knowledge). At most `max_connections` are open at once (TLS handshakes included); a
//! connection is timed from accept and closed when idle too long, and past the limit the one
//! idle the longest makes room or the new one is refused (`connections`). On shutdown the
//! listener stops accepting and open connections get a grace period to finish. After a flood
//! of connections, freed heap goes back to the kernel (`heap`).
//!
//! Timeouts and shutdown are not hyper's: hyper's HTTP/1 header-read timer is armed again for
//! every request (a boxed timer, a timer-wheel entry and one more read per request), and
//! hyper-util's graceful watcher is polled on every wake-up of the connection. Here each
//! connection has a watchdog task that sleeps to its deadline, and the connection's own task
//! looks at one atomic word per wake-up ([`drive`]): keep-alive reads pay for no timer.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::TcpListener;
use tracing::Instrument;

use super::budget::{BodyBudget, Held};
use super::connections::{AcceptErrors, Admission, Admitted, Busy, Signal, Timeouts};
use super::error::{ApiError, ErrorStyle};
use super::metrics::Metrics;
use super::request::Request;
use super::response::Response;
use super::router::{Lookup, Route, Router, SenderKnown};

/// A whole body, or chunks from a channel (server-sent events).
pub type ResponseBody = Either<Full<Bytes>, ChannelBody>;

/// A body whose frames arrive on a channel; it ends when the sender is dropped.
pub struct ChannelBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// A response body that keeps its request counted as in flight on its connection until
/// hyper has sent it and dropped it.
struct Counted {
    body: ResponseBody,
    _busy: Busy,
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = <ResponseBody as hyper::body::Body>::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// From accept to a request's complete headers (and a TLS handshake's end).
    pub header_read_timeout: Duration,
    /// A connection with no request in flight is closed after this long.
    pub idle_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Connections served at once; more are refused with a 503. [`serve`] raises the
    /// open-file limit and lowers this to fit it.
    pub max_connections: usize,
    /// When set, connections are TLS with ALPN `h2` and `http/1.1`.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("TLS set-up failed: {0}")]
    Config(String),
}

/// A TLS server configuration from PEM files (certificate chain, private key), offering
/// HTTP/2 and HTTP/1.1 by ALPN.
pub fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, TlsError> {
    use tokio_rustls::rustls::{
        self,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    };
    let file_err = |path: &std::path::Path, message: String| TlsError::File {
        path: path.display().to_string(),
        message,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_err(cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err(cert, "no certificate in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| file_err(key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Everything a connection needs, shared by all of them.
pub struct Dispatcher<S> {
    pub router: Router<S>,
    pub state: S,
    pub metrics: Arc<Metrics>,
    /// A request body must arrive completely within this time (else 408), so that a client
    /// trickling bytes cannot hold a connection and a task forever.
    pub body_read_timeout: Duration,
}

/// Serves `listener` until `shutdown` resolves, then drains connections for up to the grace.
pub async fn serve<S>(
    listener: TcpListener,
    dispatcher: Arc<Dispatcher<S>>,
    options: ServerOptions,
    shutdown: impl Future<Output = ()>,
) where
    S: Clone + Send + Sync + 'static,
{
    let metrics = dispatcher.metrics.clone();
    let handle = move |req, remote, tls| {
        let dispatcher = dispatcher.clone();
        async move { dispatch(&dispatcher, req, Some(remote), tls).await }
    };
    let open = accept(&listener, handle, metrics, &options, true, shutdown).await;
    drop(listener);
    drain(open, options.shutdown_grace).await;
}

/// What [`hold`] answers a request with, from its method and path.
pub type Answer = Arc<dyn Fn(&Method, &str) -> Response + Send + Sync>;

/// Answers every request on `listener` with `answer` until `until` resolves, then lets the
/// requests in flight finish (within the grace) and hands the listener back, still bound:
/// a server that cannot serve yet (its database is not up) holds its port meanwhile, so that
/// clients and load balancers hear why instead of a refused connection.
pub async fn hold(
    listener: TcpListener,
    answer: Answer,
    options: &ServerOptions,
    until: impl Future<Output = ()>,
) -> TcpListener {
    let handle = move |req: hyper::Request<Incoming>, _remote, _tls| {
        let answer = answer.clone();
        async move {
            let is_head = req.method() == Method::HEAD;
            into_hyper(answer(req.method(), req.uri().path()), is_head)
        }
    };
    let metrics = Arc::new(Metrics::default());
    let open = accept(&listener, handle, metrics, options, false, until).await;
    drain(open, options.shutdown_grace).await;
    listener
}

/// Gives open connections up to `grace` to finish their requests, then closes them.
async fn drain(open: Admission, grace: Duration) {
    tracing::info!("shutting down: waiting for open connections");
    open.drain();
    tokio::select! {
        () = open.all_gone() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(grace) => {
            tracing::warn!("grace period over; closing remaining connections")
        }
    }
}

/// The accept loop: serves each connection with `handle` until `shutdown` resolves, and
/// returns the admission of the connections still open, to drain.
async fn accept<H, F>(
    listener: &TcpListener,
    handle: H,
    metrics: Arc<Metrics>,
    options: &ServerOptions,
    announce: bool,
    shutdown: impl Future<Output = ()>,
) -> Admission
where
    H: Fn(hyper::Request<Incoming>, SocketAddr, bool) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = hyper::Response<ResponseBody>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No header-read timeout of hyper's: the connection's watchdog holds its deadline.
    builder.http2().timer(TokioTimer::new());
    tokio::pin!(shutdown);
    let limit = super::connections::effective_limit(
        options.max_connections,
        super::connections::raise_fd_limit(),
    );
    if limit < options.max_connections {
        tracing::warn!(
            max_connections = limit,
            configured = options.max_connections,
            "connection limit lowered to fit the open-file limit"
        );
    } else if announce {
        tracing::info!(max_connections = limit, "connection limit");
    }
    let flood = Arc::new(tokio::sync::Notify::new());
    // The next request's headers are due within the header timeout of the previous
    // response's end, as they always were: an idle connection lasts the shorter of the two.
    let timeouts = Timeouts {
        first_request: options.header_read_timeout,
        idle: options.idle_timeout.min(options.header_read_timeout),
    };
    let admission = Admission::new(metrics.clone(), limit, flood.clone(), timeouts);
    let trimmer = tokio::spawn(super::heap::trim_after_floods(metrics, flood));
    let mut accept_errors = AcceptErrors::default();

    loop {
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    let pause = accept_errors.on_error(&err);
                    if !pause.is_zero() {
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = &mut shutdown => break,
                        }
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(admitted) = admission.admit() else {
            super::connections::refuse(stream, options.tls.is_some());
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let tls = options.tls.is_some();
        let slot = admitted.slot.clone();
        let service = service_fn(move |req| {
            let response = handle(req, remote, tls);
            let busy = slot.begin();
            async move {
                let response = response.await;
                Ok::<_, Infallible>(response.map(|body| Counted { body, _busy: busy }))
            }
        });
        let Some(tls_config) = options.tls.clone() else {
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            tokio::spawn(run_connection(admitted, remote, conn));
            continue;
        };
        // The handshake runs in the connection's task so a slow client cannot stall accept.
        let builder = builder.clone();
        tokio::spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls_config);
            let deadline = admitted.slot.deadline().unwrap_or_else(Instant::now);
            let stream = tokio::select! {
                handshake = acceptor.accept(stream) => match handshake {
                    Ok(s) => s,
                    Err(err) => {
                        tracing::debug!(%err, %remote, "TLS handshake failed");
                        return;
                    }
                },
                () = tokio::time::sleep_until(deadline.into()) => {
                    tracing::debug!(%remote, "TLS handshake timed out");
                    return;
                }
                _ = admitted.slot.closed() => return,
            };
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            run_connection(admitted, remote, conn).await;
        });
    }
    trimmer.abort();
    admission
}

/// Serves one connection until it ends, it is idle past its deadline (from accept to the
/// first request, then between requests), it is evicted to make room for another, or the
/// server drains. Dropping `conn` closes the socket.
async fn run_connection<C>(admitted: Admitted, remote: SocketAddr, conn: C)
where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let slot = admitted.slot.clone();
    let watchdog = tokio::spawn({
        let slot = slot.clone();
        async move { slot.watch_deadline().await }
    });
    match drive(&slot, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => tracing::debug!(%err, %remote, "connection ended with an error"),
        Err(Signal::Evicted) => {
            tracing::debug!(%remote, "idle connection closed to make room for another")
        }
        Err(_) => tracing::debug!(%remote, "idle connection closed"),
    }
    watchdog.abort();
}

/// Polls `conn` to its end, unless `slot` is told to close it first (`Err` with why); told
/// to drain, it asks `conn` to finish the request in flight and close.
async fn drive<C: GracefulConnection>(
    slot: &super::connections::Slot,
    conn: C,
) -> Result<Result<(), C::Error>, Signal> {
    tokio::pin!(conn);
    let mut draining = false;
    std::future::poll_fn(|cx| {
        let told = slot.poll_signal(cx);
        if let Some(why) = Signal::close_in(told) {
            return std::task::Poll::Ready(Err(why));
        }
        if told & Signal::Drain as u8 != 0 && !draining {
            draining = true;
            conn.as_mut().graceful_shutdown();
        }
        conn.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// Metric names of requests that match no route, and of `OPTIONS` answers.
static UNMATCHED: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("<unmatched>"));
static OPTIONS: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from("<options>"));

/// Routes one request and turns the outcome into a hyper response. Never fails.
pub async fn dispatch<S>(
    dispatcher: &Dispatcher<S>,
    req: hyper::Request<Incoming>,
    remote: Option<SocketAddr>,
    tls: bool,
) -> hyper::Response<ResponseBody>
where
    S: Clone + Send + Sync + 'static,
{
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let is_head = method == Method::HEAD;

    let (route_name, response) = match dispatcher.router.lookup(&method, &path) {
        Lookup::NotFound { style } => (
            UNMATCHED.clone(),
            ApiError::not_found(format!("no route for {path}")).render(style),
        ),
        Lookup::BadPath { param, style } => (
            UNMATCHED.clone(),
            ApiError::bad_request(format!(
                "invalid {param} in {path}: malformed percent-encoding"
            ))
            .render(style),
        ),
        Lookup::MethodNotAllowed { allow, style } => {
            let mut resp = ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {method} not allowed on {path}"),
            )
            .render(style);
            resp.headers.insert(header::ALLOW, allow);
            (UNMATCHED.clone(), resp)
        }
        Lookup::Options { allow } => {
            let resp = Response::empty(StatusCode::OK)
                .with_header(header::ALLOW, allow.clone())
                .with_header(header::ACCESS_CONTROL_ALLOW_METHODS, allow)
                .with_header(
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    HeaderValue::from_static(
                        "Authorization, Content-Type, X-CSRF-TOKEN, X-Algo-API-Token, Last-Event-ID",
                    ),
                );
            (OPTIONS.clone(), resp)
        }
        Lookup::Found(route, params) => {
            let route = route.clone();
            // A read's span is at debug: at the default level an enabled span costs about a
            // microsecond per request (the subscriber formats its fields and keeps them), a
            // tenth of a cached read, and reads seldom log. Writes keep theirs at info, so
            // what they log carries the route.
            let span = if method == Method::GET || is_head {
                tracing::debug_span!(
                    "request",
                    method = %method,
                    route = %route.pattern,
                    status = tracing::field::Empty,
                )
            } else {
                tracing::info_span!(
                    "request",
                    method = %method,
                    route = %route.pattern,
                    status = tracing::field::Empty,
                )
            };
            let response = async {
                // A request without a body (most GETs) on an unguarded route is whole now:
                // no read timer, and no body reader held in this future (it is moved
                // whole on every hand-off, so the rare path is boxed instead).
                let no_body = hyper::body::Body::is_end_stream(req.body());
                let read = if no_body && route.guard.is_none() {
                    Ok(request_of(req.into_parts().0, params, remote, tls))
                } else {
                    let read = read_request(req, params, &route, &dispatcher.state, remote, tls);
                    match tokio::time::timeout(dispatcher.body_read_timeout, Box::pin(read)).await {
                        Ok(read) => read,
                        Err(_) => Err(ApiError::new(
                            StatusCode::REQUEST_TIMEOUT,
                            format!(
                                "the request body did not arrive within {} ms",
                                dispatcher.body_read_timeout.as_millis()
                            ),
                        )),
                    }
                };
                let response = match read {
                    Ok(request) => {
                        run_handler(
                            &route.handler,
                            dispatcher.state.clone(),
                            request,
                            route.style,
                        )
                        .await
                    }
                    Err(err) => unread_body_closes(err.render(route.style)),
                };
                tracing::Span::current().record("status", response.status.as_u16());
                tracing::debug!(elapsed_us = started.elapsed().as_micros() as u64, "handled");
                response
            }
            .instrument(span)
            .await;
            (route.pattern.clone(), response)
        }
    };

    dispatcher.metrics.record(
        &route_name,
        &method,
        response.status.as_u16(),
        started.elapsed(),
    );
    into_hyper(response, is_head)
}

async fn run_handler<S: Clone + Send + Sync + 'static>(
    handler: &super::router::Handler<S>,
    state: S,
    request: Request,
    style: ErrorStyle,
) -> Response {
    // A panic in a handler becomes a 500 for this request only. Reads (GET, HEAD) run in
    // place: no hand-off to another task on the hot path, and a client that goes away may
    // cancel them. Anything else runs in a task of its own, so it finishes all its steps even
    // when the client disconnects halfway.
    let outcome = if request.method == Method::GET || request.method == Method::HEAD {
        let fut = std::panic::AssertUnwindSafe(handler(state, request));
        futures_util::FutureExt::catch_unwind(fut)
            .await
            .map_err(|panic| panic_message(panic.as_ref()))
    } else {
        tokio::spawn(handler(state, request).in_current_span())
            .await
            .map_err(|join| match join.try_into_panic() {
                Ok(panic) => panic_message(panic.as_ref()),
                Err(join) => join.to_string(),
            })
    };
    match outcome {
        Ok(Ok(response)) => response,
        Ok(Err(err)) => err.render(style),
        Err(what) => ApiError::internal(format!("handler panicked: {what}")).render(style),
    }
}

/// The text of a panic payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// `response`, refusing a request whose body was not read to its end, told to close the
/// connection. The rest of that body is still on the wire; a client that kept the connection
/// for its next request would lose that request when the server closes it.
fn unread_body_closes(mut response: Response) -> Response {
    response
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The request with its body, read within the route's limit: on a guarded route after its
/// head check; within the shared budget unless that check knew the sender. A body from a
/// sender nobody has checked yet must not be read in full on every connection at once
/// (`max_connections` × the limit is gigabytes).
async fn read_request<S: Clone + Send + Sync + 'static>(
    req: hyper::Request<Incoming>,
    params: Vec<(String, String)>,
    route: &Route<S>,
    state: &S,
    remote: Option<SocketAddr>,
    tls: bool,
) -> Result<Request, ApiError> {
    let limit = route.body_limit;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::payload_too_large(limit));
    }
    let (parts, body) = req.into_parts();
    let mut request = request_of(parts, params, remote, tls);
    if let Some(guard) = &route.guard {
        request = (guard.check)(state.clone(), request).await?;
    }
    if request.extensions.get::<SenderKnown>().is_some() {
        request.body = collect(body, limit).await?;
    } else {
        let (bytes, held) = collect_within(body, limit, declared, &route.budget).await?;
        request.body = bytes;
        request.extensions.insert(Arc::new(held));
    }
    Ok(request)
}

/// The request of `parts`, its body still to be read.
fn request_of(
    parts: http::request::Parts,
    params: Vec<(String, String)>,
    remote: Option<SocketAddr>,
    tls: bool,
) -> Request {
    Request {
        method: parts.method,
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        params,
        body: Bytes::new(),
        remote,
        tls,
        extensions: parts.extensions,
    }
}

/// A whole body of at most `limit` bytes.
async fn collect(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            Err(ApiError::payload_too_large(limit))
        }
        Err(err) => Err(unreadable(err)),
    }
}

fn unreadable(err: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("could not read request body: {err}"))
}

/// Seconds a client refused for want of budget is asked to wait: bodies in flight are done
/// within the body read timeout, most far sooner.
const BUDGET_RETRY_AFTER_SECS: u32 = 5;

/// [`collect`] holding the body's bytes in `budget` as they are admitted: a declared length
/// before any byte is read, else each frame before it is kept. Past the budget, 503.
async fn collect_within(
    mut body: Incoming,
    limit: usize,
    declared: Option<u64>,
    budget: &Arc<BodyBudget>,
) -> Result<(Bytes, Held), ApiError> {
    let busy = || {
        tracing::debug!(
            budget = budget.limit(),
            held = budget.held(),
            "request body refused: the unauthenticated body budget is spent"
        );
        ApiError::busy(
            "too many request bodies in flight; try again later",
            BUDGET_RETRY_AFTER_SECS,
        )
    };
    let mut held = budget.hold();
    let mut buf = BytesMut::new();
    if let Some(n) = declared {
        // At most `limit` (checked before).
        let n = n as usize;
        held.grow(n).map_err(|_| busy())?;
        buf.reserve(n);
    }
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(unreadable)?.into_data() else {
            continue;
        };
        let total = buf.len() + data.len();
        if total > limit {
            return Err(ApiError::payload_too_large(limit));
        }
        if total > held.bytes() {
            held.grow(total - held.bytes()).map_err(|_| busy())?;
        }
        buf.extend_from_slice(&data);
    }
    Ok((buf.freeze(), held))
}

fn into_hyper(response: Response, is_head: bool) -> hyper::Response<ResponseBody> {
    let body = match (response.stream, is_head) {
        (Some(rx), false) => Either::Right(ChannelBody { rx }),
        (_, true) => Either::Left(Full::new(Bytes::new())),
        (None, false) => Either::Left(Full::new(response.body)),
    };
    let mut out = hyper::Response::new(body);
    *out.status_mut() = response.status;
    let headers = out.headers_mut();
    *headers = response.headers;
    // Woodpecker's defaults on every response; a handler may override any of them.
    for (name, value) in [
        (
            header::CACHE_CONTROL,
            "no-cache, no-store, max-age=0, must-revalidate, value",
        ),
        (header::EXPIRES, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method) -> Request {
        Request {
            method,
            path: "/boom".into(),
            query: String::new(),
            headers: http::HeaderMap::new(),
            params: Vec::new(),
            body: Bytes::new(),
            remote: None,
            tls: false,
            extensions: http::Extensions::new(),
        }
    }

    /// What `serve` needs for `router`, with a 5 s body timeout.
    fn dispatcher_of(router: Router<()>) -> Arc<Dispatcher<()>> {
        Arc::new(Dispatcher {
            router: router.finish().unwrap(),
            state: (),
            metrics: Arc::new(Metrics::default()),
            body_read_timeout: Duration::from_secs(5),
        })
    }

    /// A server with one guarded route, `POST /hook`: its check refuses a request without
    /// `?to=ok` and marks one with `x-known` as from a known sender; and one without a check,
    /// `POST /plain`. Both answer the body's length. Bodies share a budget of 100 bytes.
    async fn guarded_server() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        async fn check(_: (), req: Request) -> Result<Request, ApiError> {
            if req.query != "to=ok" {
                return Err(ApiError::bad_request("no such target"));
            }
            let mut req = req;
            if req.header("x-known").is_some() {
                req.extensions.insert(SenderKnown);
            }
            Ok(req)
        }
        async fn handler(_: (), req: Request) -> Result<Response, ApiError> {
            Ok(Response::text(StatusCode::OK, req.body.len().to_string()))
        }
        let mut router = Router::new(1024).with_body_budget(100);
        router
            .scope("", ErrorStyle::PlainText)
            .route_guarded(Method::POST, "/hook", 1000, check, handler)
            .route_with_limit(Method::POST, "/plain", 1000, handler);
        let dispatcher = dispatcher_of(router);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let options = ServerOptions {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_millis(10),
            max_connections: 64,
            tls: None,
        };
        tokio::spawn(serve(listener, dispatcher, options, async {
            let _ = stopped.await;
        }));
        (addr, stop)
    }

    /// Sends `head` (and `body`) on a new connection; the answer's head, as soon as it comes.
    async fn send(addr: SocketAddr, head: &str, body: &[u8]) -> (tokio::net::TcpStream, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        let answered = tokio::time::timeout(Duration::from_secs(5), async {
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        assert!(answered.is_ok(), "no answer to {head:?}");
        (stream, String::from_utf8_lossy(&got).to_lowercase())
    }

    fn post(query: &str, length: usize, extra: &str) -> String {
        format!("POST /hook?{query} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n{extra}\r\n")
    }

    #[tokio::test]
    async fn a_held_port_answers_then_is_handed_on_still_bound() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let options = ServerOptions {
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_millis(200),
            max_connections: 64,
            tls: None,
        };
        let answer: Answer = Arc::new(|method, path| {
            Response::text(StatusCode::SERVICE_UNAVAILABLE, format!("{method} {path}"))
        });
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let held = tokio::spawn({
            let options = options.clone();
            async move {
                hold(listener, answer, &options, async {
                    let _ = released.await;
                })
                .await
            }
        });
        let get = "GET /any/path HTTP/1.1\r\nHost: x\r\n\r\n";
        let (_, head) = send(addr, get, b"").await;
        assert!(head.starts_with("http/1.1 503"), "{head}");
        release.send(()).unwrap();
        let listener = held.await.unwrap();
        // A connection made between the two is kept in the backlog, not refused.
        let early = tokio::net::TcpStream::connect(addr).await.unwrap();
        drop(early);
        let answer: Answer = Arc::new(|_, _| Response::text(StatusCode::OK, "ready"));
        tokio::spawn(async move { hold(listener, answer, &options, std::future::pending()).await });
        let (_, head) = send(addr, get, b"").await;
        assert!(head.starts_with("http/1.1 200"), "{head}");
    }

    #[tokio::test]
    async fn shutdown_finishes_the_request_in_flight_and_closes_the_idle() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        async fn slow(_: (), _: Request) -> Result<Response, ApiError> {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Response::text(StatusCode::OK, "done"))
        }
        let mut router = Router::new(1024);
        router
            .scope("", ErrorStyle::PlainText)
            .route(Method::GET, "/slow", slow);
        let dispatcher = dispatcher_of(router);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let options = ServerOptions {
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(20),
            max_connections: 64,
            tls: None,
        };
        let served = tokio::spawn(serve(listener, dispatcher, options, async {
            let _ = stopped.await;
        }));
        let mut busy = tokio::net::TcpStream::connect(addr).await.unwrap();
        busy.write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let asked = std::time::Instant::now();
        stop.send(()).unwrap();
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), busy.read_to_end(&mut answer));
        read.await
            .expect("the busy connection was not closed")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");
        let mut nothing = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), idle.read_to_end(&mut nothing));
        read.await
            .expect("the idle connection was not closed")
            .unwrap();
        assert!(nothing.is_empty());
        // Both gone, the server returns long before its grace ends.
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("serve did not return once every connection was gone")
            .unwrap();
        assert!(asked.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_guarded_route_refuses_a_bad_head_before_reading_any_body() {
        let (addr, _stop) = guarded_server().await;
        // Not a byte of the declared body is sent: the answer comes anyway.
        let (_, answer) = send(addr, &post("to=nowhere", 900, ""), b"").await;
        assert!(answer.starts_with("http/1.1 400"), "{answer}");
        let (_, answer) = send(addr, &post("to=ok", 3, ""), b"abc").await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
    }

    #[tokio::test]
    async fn guarded_bodies_share_a_budget_and_past_it_are_told_to_come_back() {
        let (addr, _stop) = guarded_server().await;
        // A body of 80 declared bytes, held half sent.
        let first = {
            use tokio::io::AsyncWriteExt;
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(post("to=ok", 80, "").as_bytes())
                .await
                .unwrap();
            stream.write_all(&[b'x'; 40]).await.unwrap();
            stream
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // 30 more do not fit, declared or chunked; a known sender's body is outside it.
        let (_, answer) = send(addr, &post("to=ok", 30, ""), &[b'y'; 30]).await;
        assert!(answer.starts_with("http/1.1 503"), "{answer}");
        assert!(answer.contains("\r\nretry-after: 5\r\n"), "{answer}");
        let chunked = "POST /hook?to=ok HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
        let (_, answer) = send(
            addr,
            chunked,
            b"1e\r\nyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n0\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("http/1.1 503"), "{answer}");
        let (_, answer) = send(addr, &post("to=ok", 30, "x-known: 1\r\n"), &[b'y'; 30]).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        // 20 still fit; once the first body is in and answered, 30 fit again.
        let (_, answer) = send(addr, &post("to=ok", 20, ""), &[b'y'; 20]).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        let mut first = first;
        {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            first.write_all(&[b'x'; 40]).await.unwrap();
            let mut buf = [0u8; 256];
            let n = first.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (_, answer) = send(addr, &post("to=ok", 30, ""), &[b'y'; 30]).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
    }

    /// A route without a head check cannot know its sender before the body is read, so its
    /// bodies are held in the same budget as the guarded routes' unknown senders.
    #[tokio::test]
    async fn bodies_on_a_route_without_a_check_share_the_budget_too() {
        let (addr, _stop) = guarded_server().await;
        let plain = |length: usize| {
            format!("POST /plain HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n")
        };
        let first = {
            use tokio::io::AsyncWriteExt;
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(plain(80).as_bytes()).await.unwrap();
            stream.write_all(&[b'x'; 40]).await.unwrap();
            stream
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Neither route has room for 30 more bytes from a sender not known.
        let (_, answer) = send(addr, &plain(30), &[b'y'; 30]).await;
        assert!(answer.starts_with("http/1.1 503"), "{answer}");
        assert!(answer.contains("\r\nretry-after: 5\r\n"), "{answer}");
        let (_, answer) = send(addr, &post("to=ok", 30, ""), &[b'y'; 30]).await;
        assert!(answer.starts_with("http/1.1 503"), "{answer}");
        // A known sender's body is outside it; a small one still fits; a request without a
        // body takes nothing.
        let (_, answer) = send(addr, &post("to=ok", 30, "x-known: 1\r\n"), &[b'y'; 30]).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        let (_, answer) = send(addr, &plain(20), &[b'y'; 20]).await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        let (_, answer) = send(addr, &plain(0), b"").await;
        assert!(answer.starts_with("http/1.1 200"), "{answer}");
        drop(first);
        // The first body's share is given back when its connection goes.
        let started = std::time::Instant::now();
        loop {
            let (_, answer) = send(addr, &plain(30), &[b'y'; 30]).await;
            if answer.starts_with("http/1.1 200") {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "{answer}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_for_its_request_only() {
        let handler: super::super::router::Handler<()> =
            Arc::new(|_, _| Box::pin(async { panic!("kaboom") }));
        for method in [Method::GET, Method::POST] {
            let response =
                run_handler(&handler, (), request(method.clone()), ErrorStyle::PlainText).await;
            assert_eq!(
                response.status,
                StatusCode::INTERNAL_SERVER_ERROR,
                "{method}"
            );
            // The cause is logged, not shown.
            assert_eq!(&response.body[..], b"internal server error", "{method}");
        }
    }

    #[tokio::test]
    async fn writes_finish_when_the_client_goes_away() {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let handler: super::super::router::Handler<()> = Arc::new(move |_, _| {
            let flag = flag.clone();
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(Response::empty(StatusCode::NO_CONTENT))
            })
        });
        // The caller gives up (the connection closed) before the handler is done.
        let _ = tokio::time::timeout(
            Duration::from_millis(5),
            run_handler(&handler, (), request(Method::POST), ErrorStyle::PlainText),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(done.load(std::sync::atomic::Ordering::SeqCst));
    }
}
