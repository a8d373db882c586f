//! Path → handler table built once at start-up.
//!
//! matchit maps a path to an entry; the entry holds one route per method, so a known path with
//! an unknown method is a 405 carrying `Allow`, and an unknown path a 404 — both rendered in the
//! error style of the module whose mount prefix the path falls under. matchit is pinned exactly
//! (its conflict rules change between releases) and the full route table is unit-tested.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::{HeaderValue, Method};

use super::budget::{BodyBudget, DEFAULT_BODY_BUDGET};
use super::error::{ApiError, ErrorStyle};
use super::request::Request;
use super::response::Response;

pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Response, ApiError>> + Send>>;
pub type Handler<S> = Arc<dyn Fn(S, Request) -> HandlerFuture + Send + Sync>;
pub type HeadCheckFuture = Pin<Box<dyn Future<Output = Result<Request, ApiError>> + Send>>;
/// Sees a request before its body is read (`body` empty) and refuses it, or gives it back,
/// with what it learned in `extensions` for the handler.
pub type HeadCheck<S> = Arc<dyn Fn(S, Request) -> HeadCheckFuture + Send + Sync>;

/// Put in a request's extensions by a head check that authenticated the sender from the head
/// alone (a signed token in the URL, an API token in a header): its body is read outside the
/// shared budget.
#[derive(Debug, Clone, Copy)]
pub struct SenderKnown;

/// What a guarded route runs before its body is read: its head check.
pub struct Guard<S> {
    pub check: HeadCheck<S>,
}

impl<S> Clone for Guard<S> {
    fn clone(&self) -> Self {
        Guard {
            check: self.check.clone(),
        }
    }
}

/// One method on one path.
pub struct Route<S> {
    /// The full pattern, e.g. `/api/users/{login}`: the route's name in logs and metrics.
    pub pattern: Arc<str>,
    pub handler: Handler<S>,
    pub body_limit: usize,
    pub style: ErrorStyle,
    /// Set on routes that may learn who the sender is from the head (and refuse a request)
    /// before reading its body.
    pub guard: Option<Guard<S>>,
    /// Shared by every route: a body not marked [`SenderKnown`] by its route's guard is read
    /// within it.
    pub budget: Arc<BodyBudget>,
}

impl<S> Clone for Route<S> {
    fn clone(&self) -> Self {
        Route {
            pattern: self.pattern.clone(),
            handler: self.handler.clone(),
            body_limit: self.body_limit,
            style: self.style,
            guard: self.guard.clone(),
            budget: self.budget.clone(),
        }
    }
}

struct PathEntry<S> {
    methods: Vec<(Method, Route<S>)>,
}

/// Outcome of a lookup.
pub enum Lookup<'a, S> {
    Found(&'a Route<S>, Vec<(String, String)>),
    MethodNotAllowed {
        allow: HeaderValue,
        style: ErrorStyle,
    },
    /// `OPTIONS` on a known path: answered at once with `Allow` (CORS pre-flight).
    Options {
        allow: HeaderValue,
    },
    NotFound {
        style: ErrorStyle,
    },
    /// A path parameter with a malformed percent-escape or one that is not UTF-8 (400).
    BadPath {
        param: String,
        style: ErrorStyle,
    },
}

#[derive(Debug, thiserror::Error)]
#[error("route {pattern}: {message}")]
pub struct RouteError {
    pattern: String,
    message: String,
}

pub struct Router<S> {
    paths: matchit::Router<usize>,
    entries: Vec<PathEntry<S>>,
    patterns: Vec<String>,
    /// Mount prefixes and their error styles, longest first, for 404s.
    mounts: Vec<(String, ErrorStyle)>,
    default_body_limit: usize,
    /// Shared by the bodies of every route whose sender is not known before they are read.
    body_budget: Arc<BodyBudget>,
    errors: Vec<RouteError>,
}

impl<S: Clone + Send + Sync + 'static> Router<S> {
    pub fn new(default_body_limit: usize) -> Router<S> {
        Router {
            paths: matchit::Router::new(),
            entries: Vec::new(),
            patterns: Vec::new(),
            mounts: Vec::new(),
            default_body_limit,
            body_budget: BodyBudget::new(DEFAULT_BODY_BUDGET),
            errors: Vec::new(),
        }
    }

    /// The bytes the bodies of senders not yet known may hold at once, on all routes
    /// together (before any route is added).
    pub fn with_body_budget(mut self, bytes: usize) -> Router<S> {
        self.body_budget = BodyBudget::new(bytes);
        self
    }

    /// The routes' shared budget (for metrics).
    pub fn body_budget(&self) -> &Arc<BodyBudget> {
        &self.body_budget
    }

    /// Routes added through the scope are mounted under `prefix` and render errors in `style`.
    pub fn scope(&mut self, prefix: &str, style: ErrorStyle) -> Scope<'_, S> {
        if !prefix.is_empty() {
            self.mounts.push((prefix.to_string(), style));
            self.mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        }
        Scope {
            router: self,
            prefix: prefix.to_string(),
            style,
        }
    }

    /// Finishes building; fails if any route pattern was rejected or registered twice.
    pub fn finish(self) -> Result<Router<S>, RouteError> {
        match self.errors.into_iter().next() {
            Some(err) => Err(err),
            None => Ok(Router {
                errors: Vec::new(),
                ..self
            }),
        }
    }

    fn add(&mut self, method: Method, pattern: String, route: Route<S>) {
        let index = match self.patterns.iter().position(|p| *p == pattern) {
            Some(i) => i,
            None => {
                if let Err(e) = self.paths.insert(pattern.clone(), self.entries.len()) {
                    self.errors.push(RouteError {
                        pattern,
                        message: e.to_string(),
                    });
                    return;
                }
                self.entries.push(PathEntry {
                    methods: Vec::new(),
                });
                self.patterns.push(pattern.clone());
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[index];
        if entry.methods.iter().any(|(m, _)| *m == method) {
            self.errors.push(RouteError {
                pattern,
                message: format!("{method} registered twice"),
            });
            return;
        }
        entry.methods.push((method, route));
    }

    fn style_for(&self, path: &str) -> ErrorStyle {
        self.mounts
            .iter()
            .find(|(prefix, _)| {
                path.strip_prefix(prefix.as_str())
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .map(|(_, style)| *style)
            .unwrap_or(ErrorStyle::PlainText)
    }

    pub fn lookup(&self, method: &Method, path: &str) -> Lookup<'_, S> {
        let Ok(matched) = self.paths.at(path) else {
            return Lookup::NotFound {
                style: self.style_for(path),
            };
        };
        let entry = &self.entries[*matched.value];
        // Parameters arrive decoded, as clients percent-encode them (`alice%2Fapp`).
        let mut params: Vec<(String, String)> = Vec::with_capacity(matched.params.len());
        for (k, v) in matched.params.iter() {
            let Some(decoded) = percent_decode(v) else {
                return Lookup::BadPath {
                    param: k.to_string(),
                    style: entry.methods[0].1.style,
                };
            };
            params.push((k.to_string(), decoded));
        }
        // HEAD is served by the GET route (the body is dropped by the server).
        let wanted = if *method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        if let Some((_, route)) = entry.methods.iter().find(|(m, _)| m == wanted) {
            return Lookup::Found(route, params);
        }
        let mut allow: Vec<&str> = entry.methods.iter().map(|(m, _)| m.as_str()).collect();
        if allow.contains(&"GET") {
            allow.push("HEAD");
        }
        allow.push("OPTIONS");
        let allow =
            HeaderValue::from_str(&allow.join(", ")).unwrap_or(HeaderValue::from_static("OPTIONS"));
        if *method == Method::OPTIONS {
            return Lookup::Options { allow };
        }
        let style = entry.methods[0].1.style;
        Lookup::MethodNotAllowed { allow, style }
    }

    /// Every registered `METHOD pattern`, for tests and the route listing in docs.
    pub fn routes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (pattern, entry) in self.patterns.iter().zip(&self.entries) {
            for (m, _) in &entry.methods {
                out.push(format!("{m} {pattern}"));
            }
        }
        out
    }
}

/// Percent-decoding of one path segment or tail (no `+` → space, as in paths), `None` for a
/// malformed escape or bytes that are not UTF-8.
pub fn percent_decode(raw: &str) -> Option<String> {
    if !raw.contains('%') {
        return Some(raw.to_string());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One path segment percent-encoded, the inverse of [`percent_decode`]: every byte but the
/// unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`, so a value holding `/`, `?`, `#`, `%`
/// or a space stays one segment and reads back exactly.
pub fn percent_encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for &b in segment.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Adds routes under one module's mount prefix.
pub struct Scope<'r, S> {
    router: &'r mut Router<S>,
    prefix: String,
    style: ErrorStyle,
}

impl<S: Clone + Send + Sync + 'static> Scope<'_, S> {
    /// Registers `handler` for `method` on `prefix + path` with the default body limit.
    pub fn route<F, Fut>(&mut self, method: Method, path: &str, handler: F) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        let limit = self.router.default_body_limit;
        self.route_with_limit(method, path, limit, handler)
    }

    /// Like [`Scope::route_with_limit`] with a check of the head before the body is read.
    /// `check` may refuse the request, so nothing is read for one that names no valid target
    /// or carries no valid credentials; one whose sender it authenticates from the head it
    /// marks [`SenderKnown`], and that body is read outside the router's [`BodyBudget`].
    /// Every other body, on any route, is read within the budget (503 past it): a route
    /// whose bodies may be large and come from known senders (webhooks with a verified
    /// token, uploads behind an API token) needs this to be served during a flood.
    pub fn route_guarded<C, CFut, F, Fut>(
        &mut self,
        method: Method,
        path: &str,
        body_limit: usize,
        check: C,
        handler: F,
    ) -> &mut Self
    where
        C: Fn(S, Request) -> CFut + Send + Sync + 'static,
        CFut: Future<Output = Result<Request, ApiError>> + Send + 'static,
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        let guard = Guard {
            check: Arc::new(move |s, r| Box::pin(check(s, r))),
        };
        self.add(method, path, body_limit, Some(guard), handler)
    }

    /// Like [`Scope::route`] with a route-specific body limit (webhooks, uploads).
    pub fn route_with_limit<F, Fut>(
        &mut self,
        method: Method,
        path: &str,
        body_limit: usize,
        handler: F,
    ) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        self.add(method, path, body_limit, None, handler)
    }

    fn add<F, Fut>(
        &mut self,
        method: Method,
        path: &str,
        body_limit: usize,
        guard: Option<Guard<S>>,
        handler: F,
    ) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        let pattern = format!("{}{}", self.prefix, path);
        let pattern = if pattern.is_empty() {
            "/".to_string()
        } else {
            pattern
        };
        let route = Route {
            pattern: Arc::from(pattern.as_str()),
            handler: Arc::new(move |s, r| Box::pin(handler(s, r))),
            body_limit,
            style: self.style,
            guard,
            budget: self.router.body_budget.clone(),
        };
        self.router.add(method, pattern, route);
        self
    }

    pub fn get<F, Fut>(&mut self, path: &str, handler: F) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        self.route(Method::GET, path, handler)
    }

    pub fn post<F, Fut>(&mut self, path: &str, handler: F) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        self.route(Method::POST, path, handler)
    }

    pub fn patch<F, Fut>(&mut self, path: &str, handler: F) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        self.route(Method::PATCH, path, handler)
    }

    pub fn put<F, Fut>(&mut self, path: &str, handler: F) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        self.route(Method::PUT, path, handler)
    }

    pub fn delete<F, Fut>(&mut self, path: &str, handler: F) -> &mut Self
    where
        F: Fn(S, Request) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
    {
        self.route(Method::DELETE, path, handler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    async fn ok(_: (), _: Request) -> Result<Response, ApiError> {
        Ok(Response::empty(StatusCode::NO_CONTENT))
    }

    #[test]
    fn an_encoded_segment_decodes_to_itself() {
        for raw in ["plain", "a/b c", "100%", "x?y#z", "grüße", "a+b&c=d"] {
            let encoded = percent_encode(raw);
            assert!(!encoded.contains(['/', '?', '#', ' ']), "{encoded}");
            assert_eq!(percent_decode(&encoded).as_deref(), Some(raw));
        }
        assert_eq!(percent_encode("a b/%"), "a%20b%2F%25");
    }

    fn router() -> Router<()> {
        let mut r = Router::new(1024);
        r.scope("/api", ErrorStyle::PlainText)
            .get("/users", ok)
            .post("/users", ok)
            .get("/users/{login}", ok)
            .get("/repos/lookup/{*full_name}", ok)
            .get("/repos/{repo_id}", ok);
        r.scope("/events", ErrorStyle::JsonMessage)
            .get("", ok)
            .get("/{id}", ok);
        r.finish().unwrap()
    }

    #[test]
    fn finds_routes_and_params() {
        let r = router();
        match r.lookup(&Method::GET, "/api/users/alice") {
            Lookup::Found(route, params) => {
                assert_eq!(&*route.pattern, "/api/users/{login}");
                assert_eq!(params, vec![("login".to_string(), "alice".to_string())]);
            }
            _ => panic!("not found"),
        }
        match r.lookup(&Method::GET, "/api/repos/lookup/a/b") {
            Lookup::Found(_, params) => assert_eq!(params[0].1, "a/b"),
            _ => panic!("not found"),
        }
        match r.lookup(&Method::GET, "/api/repos/lookup/alice%2Fapp%20x") {
            Lookup::Found(_, params) => assert_eq!(params[0].1, "alice/app x"),
            _ => panic!("not found"),
        }
        assert!(matches!(
            r.lookup(&Method::GET, "/api/users/al%zzice"),
            Lookup::BadPath { param, .. } if param == "login"
        ));
        assert!(matches!(
            r.lookup(&Method::GET, "/api/users/%ff"),
            Lookup::BadPath { .. }
        ));
        assert!(matches!(
            r.lookup(&Method::HEAD, "/events"),
            Lookup::Found(..)
        ));
    }

    #[test]
    fn method_not_allowed_lists_allow() {
        let r = router();
        match r.lookup(&Method::DELETE, "/api/users") {
            Lookup::MethodNotAllowed { allow, style } => {
                assert_eq!(allow, "GET, POST, HEAD, OPTIONS");
                assert_eq!(style, ErrorStyle::PlainText);
            }
            _ => panic!("expected 405"),
        }
    }

    #[test]
    fn not_found_uses_the_mount_style() {
        let r = router();
        assert!(matches!(
            r.lookup(&Method::GET, "/events/a/b"),
            Lookup::NotFound {
                style: ErrorStyle::JsonMessage
            }
        ));
        assert!(matches!(
            r.lookup(&Method::GET, "/eventsx"),
            Lookup::NotFound {
                style: ErrorStyle::PlainText
            }
        ));
    }

    #[test]
    fn duplicate_routes_are_rejected() {
        let mut r: Router<()> = Router::new(1024);
        r.scope("", ErrorStyle::PlainText)
            .get("/a", ok)
            .get("/a", ok);
        assert!(r.finish().is_err());
    }
}
