//! What every form of the built-in UI shares: reading the posted body, the CSRF check for
//! browser sessions, the hidden field that carries the token, and the answer after a post.
//!
//! - **Body**: `application/x-www-form-urlencoded` only, at most [`BODY_LIMIT`] bytes (the
//!   route is registered with that limit by [`post`], so a larger body is refused with 413
//!   before the handler runs); anything else is a 400 that says what was expected.
//! - **CSRF**: a plain HTML form cannot send `X-CSRF-TOKEN`, so each form carries the
//!   session's CSRF token (the one `/web-config.js` hands out; `UiHost::csrf_token`) in a
//!   hidden field named [`CSRF_FIELD`]. [`Form::read`] attaches it to the request as
//!   `http::browser::FormCsrf`, and the server's one check (`auth::session::csrf_ok`, run by
//!   `UiHost::current` and by the API's routes) accepts it in place of the header. Only UI
//!   form routes attach it.
//! - **Answer**: post/redirect/get: [`see_other`] answers `303` to the page, with an optional
//!   one-shot message in a cookie that page's [`super::Frame`] shows once and clears
//!   (through `or_error_page`).
//!
//! A form handler: `Form::read(&mut req)?`, then [`caller`] (a refused CSRF token becomes a
//! 403 that says so, not a sign-in page), then the API's own access check and route
//! (`through_api`).

use std::sync::Arc;

use super::Frame;
use super::host::UiHost;
use crate::http::browser::FormCsrf;
use crate::http::browser::{self, cookie, cookie_value, escape_html, set_cookie};
use crate::http::{ApiError, Method, Request, Response, Scope, StatusCode};
use crate::store::users::Account;

/// The largest form body a UI form may post: its fields are short (a branch, a few
/// variables), so 64 KiB is generous.
pub const BODY_LIMIT: usize = 64 * 1024;

/// The hidden field that carries the session's CSRF token.
pub const CSRF_FIELD: &str = "csrf";

/// The cookie carrying a one-shot message to the page a post redirected to.
const FLASH_COOKIE: &str = "woodlark_flash";
/// How long a message waits for its page (the redirect is followed at once).
const FLASH_SECS: i64 = 60;
/// Longest message kept (longer ones are cut: a cookie should stay small).
const FLASH_CHARS: usize = 300;

/// Why a posted form was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormError {
    #[error(
        "expected a form (Content-Type: application/x-www-form-urlencoded), got {content_type:?}"
    )]
    NotAForm { content_type: String },
    #[error("the form is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the form has no field {0:?}")]
    Missing(&'static str),
    #[error("field {field:?}: {reason}")]
    Invalid { field: String, reason: String },
}

impl From<FormError> for ApiError {
    fn from(err: FormError) -> ApiError {
        match err {
            FormError::TooLarge { limit } => ApiError::payload_too_large(limit),
            other => ApiError::bad_request(other.to_string()),
        }
    }
}

/// A posted form's fields in the order sent (a name may repeat: rows of key/value inputs).
#[derive(Debug, Default)]
pub struct Form {
    fields: Vec<(String, String)>,
}

impl Form {
    /// Reads `req`'s body as a form and attaches its CSRF field to `req` for
    /// `access::current`'s check.
    pub fn read(req: &mut Request) -> Result<Form, FormError> {
        let form = Form::parse(req)?;
        if let Some(token) = form.get(CSRF_FIELD) {
            req.extensions.insert(FormCsrf(token.trim().to_string()));
        }
        Ok(form)
    }

    fn parse(req: &Request) -> Result<Form, FormError> {
        // A post without a body has no fields, whatever it calls its type.
        if req.body.is_empty() {
            return Ok(Form::default());
        }
        let content_type = req.header("content-type").unwrap_or("");
        let essence = content_type.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
            return Err(FormError::NotAForm {
                content_type: content_type.to_string(),
            });
        }
        // The route's limit already holds; this keeps the bound where a route forgot it.
        if req.body.len() > BODY_LIMIT {
            return Err(FormError::TooLarge { limit: BODY_LIMIT });
        }
        let fields = form_urlencoded::parse(&req.body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        Ok(Form { fields })
    }

    /// The first value of field `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of field `name`, trimmed; missing or blank is an error.
    pub fn required(&self, name: &'static str) -> Result<&str, FormError> {
        match self.get(name).map(str::trim) {
            Some(v) if !v.is_empty() => Ok(v),
            _ => Err(FormError::Missing(name)),
        }
    }

    /// Every field as posted, in order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Every value of field `name`, in order.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.fields
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Registers a UI form's POST route with the form body limit.
pub fn post<S, F, Fut>(scope: &mut Scope<'_, S>, path: &str, handler: F)
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S, Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response, ApiError>> + Send + 'static,
{
    scope.route_with_limit(Method::POST, path, BODY_LIMIT, handler);
}

/// The caller of a form post (after [`Form::read`]): as `access::current` answers, except
/// that a session whose CSRF token is missing or wrong gets a 403 that says the form is
/// stale, rather than the 401 (sign in) the API answers: the browser is signed in.
pub async fn caller<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
) -> Result<Option<std::sync::Arc<Account>>, ApiError> {
    match host.current(req).await {
        Err(err) if err.status == StatusCode::UNAUTHORIZED => {
            tracing::info!(path = %req.path, "ui form refused: missing or wrong csrf token");
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "This form is out of date or did not come from this site: reload the page \
                 and try again.",
            ))
        }
        other => other,
    }
}

/// The CSRF token for the page of a signed-in `account` whose token `req` carries ("" for
/// anonymous callers: they have no form to post).
pub(super) fn csrf_for<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    account: Option<&Account>,
) -> String {
    account
        .and_then(|account| host.csrf_token(req, account))
        .unwrap_or_default()
}

/// A message for one page, set by a post and shown once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flash {
    pub text: String,
    /// The page it is for (the cookie's path), where it is cleared.
    path: String,
    secure: bool,
}

/// The message waiting for the page `req` asks for, if any.
///
/// Only a page the browser goes to shows it (and so clears it): a live page's script that
/// fetches the same page to refresh its parts (`woodlark.js`) may send its request between
/// a post's `303` and the browser's request for the page, and would take the message the
/// page was to show. Browsers say which is which (`Sec-Fetch-Mode: navigate` for the page);
/// one that says nothing is taken to be going to the page, as before.
pub(super) fn flash_of<H: UiHost>(host: &Arc<H>, req: &Request) -> Option<Flash> {
    let fetched = req
        .headers
        .get("sec-fetch-mode")
        .is_some_and(|mode| mode.as_bytes() != b"navigate");
    if fetched {
        return None;
    }
    let raw = cookie_value(req, FLASH_COOKIE)?;
    let decoded: String = form_urlencoded::parse(format!("m={raw}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())?;
    let (path, text) = decoded.split_once('\n')?;
    (path == req.path && !text.trim().is_empty()).then(|| Flash {
        text: text.chars().take(FLASH_CHARS).collect(),
        path: path.to_string(),
        secure: host.over_tls(req),
    })
}

/// Clears a message `response`'s page has shown.
pub(super) fn clear_flash(flash: &Flash, response: &mut Response) {
    let clear = cookie(FLASH_COOKIE, "", &flash.path, 0, "Lax", flash.secure);
    set_cookie(response, &clear);
}

/// The answer to a successful post: `303 See Other` to `location` (a path of this UI, from
/// its root), with `message` shown once on that page.
pub fn see_other<H: UiHost>(
    host: &Arc<H>,
    req: &Request,
    location: &str,
    message: Option<&str>,
) -> Response {
    let mut response = browser::redirect(location);
    if let Some(message) = message {
        let path = location.split(['?', '#']).next().unwrap_or(location);
        let text: String = message.chars().take(FLASH_CHARS).collect();
        let value: String =
            form_urlencoded::byte_serialize(format!("{path}\n{text}").as_bytes()).collect();
        let flash = cookie(
            FLASH_COOKIE,
            &value,
            path,
            FLASH_SECS,
            "Lax",
            host.over_tls(req),
        );
        set_cookie(&mut response, &flash);
    }
    response
}

impl Frame {
    /// The hidden input every form of a signed-in page carries (`{{ frame.csrf_field()|safe }}`).
    pub fn csrf_field(&self) -> String {
        format!(
            "<input type=\"hidden\" name=\"{CSRF_FIELD}\" value=\"{}\">",
            escape_html(&self.csrf)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HeaderValue;

    fn posted(content_type: &str, body: &str) -> Request {
        let mut req = Request::new(Method::POST, "/repos/1/pipeline/2/cancel");
        req.headers
            .insert("content-type", HeaderValue::from_str(content_type).unwrap());
        req.body = body.to_string().into();
        req
    }

    #[test]
    fn a_form_is_read_and_its_csrf_attached() {
        let mut req = posted(
            "application/x-www-form-urlencoded; charset=UTF-8",
            "csrf=t0k&branch=main&key=A&value=1+2&key=B&value=%26",
        );
        let form = Form::read(&mut req).unwrap();
        assert_eq!(form.get("branch"), Some("main"));
        assert_eq!(form.all("key").collect::<Vec<_>>(), ["A", "B"]);
        assert_eq!(form.all("value").collect::<Vec<_>>(), ["1 2", "&"]);
        assert_eq!(
            req.extensions.get::<FormCsrf>().map(|f| f.0.as_str()),
            Some("t0k")
        );
        assert_eq!(form.required("branch"), Ok("main"));
        assert_eq!(form.required("nope"), Err(FormError::Missing("nope")));
    }

    #[test]
    fn other_bodies_are_refused_with_what_was_expected() {
        for ct in ["application/json", "multipart/form-data; boundary=x", ""] {
            let err = Form::read(&mut posted(ct, "{}")).unwrap_err();
            assert!(matches!(err, FormError::NotAForm { .. }), "{ct}");
            let api: ApiError = err.into();
            assert_eq!(api.status, StatusCode::BAD_REQUEST);
            assert!(api.message.contains("x-www-form-urlencoded"));
        }
        let big = "a=".to_string() + &"x".repeat(BODY_LIMIT);
        let err = Form::read(&mut posted("application/x-www-form-urlencoded", &big)).unwrap_err();
        assert_eq!(ApiError::from(err).status, StatusCode::PAYLOAD_TOO_LARGE);
        // An empty post is an empty form, whatever its type.
        let form = Form::read(&mut posted("text/plain", "")).unwrap();
        assert_eq!(form.get("csrf"), None);
        // No csrf field: nothing attached.
        let mut req = posted("application/x-www-form-urlencoded", "a=1");
        Form::read(&mut req).unwrap();
        assert!(req.extensions.get::<FormCsrf>().is_none());
    }
}
