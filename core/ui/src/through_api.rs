//! A form post carried out by the REST API itself.
//!
//! Every form does what an API call does, so it makes that call: the form's fields become
//! the JSON body, path parameters and query of a request to the API's route (method and
//! path, [`Action`]), which runs in process through the API's own route table
//! (`UiHost::api`, the server's `state::api::call`: its guard, body limit, access decision
//! and validation) exactly as the browser's own request to the API would. Nothing here
//! decides who may do what or what is valid, so the UI cannot drift from the API. The
//! answers become pages: success a `303` back to the page (post/redirect/get, with a
//! one-shot message); a refusal of what was typed the form's page again with the typed
//! fields and the API's message and status ([`super::refused`]); any other refusal the API's
//! status and message as a readable page (nothing was changed: the API refused before its
//! service call).
//!
//! **Who calls.** The API request carries the browser's own headers (its session cookie or
//! token) and the form's CSRF field (`http::browser::FormCsrf`, attached by `Form::read`),
//! so the API's `access::current` checks the same session and the same CSRF token it would
//! check for that browser's request: a form never lets through what the API would refuse
//! from that browser session.

use std::sync::Arc;

use serde_json::{Value, json};

use super::forms::{self, Form};
use super::host::UiHost;
use super::refused::Refused;
use super::{Frame, or_error_page};
use crate::http::router::percent_encode;
use crate::http::{ApiError, HeaderValue, Method, Request, Response, Scope, StatusCode, header};
use crate::store::users::Account;

/// What a form asks of the API: the JSON body, the path parameters and the query of the call.
pub struct Call {
    pub body: Value,
    pub params: Vec<(&'static str, String)>,
    /// The query string, for handlers that read one (`POST /repos?forge_remote_id=`).
    pub query: Option<String>,
}

impl Call {
    pub fn body(body: Value) -> Call {
        Call {
            body,
            params: Vec::new(),
            query: None,
        }
    }

    /// The query `pairs`, encoded.
    pub fn query(mut self, pairs: &[(&str, &str)]) -> Call {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            out.append_pair(k, v);
        }
        self.query = Some(out.finish());
        self
    }

    /// A path parameter the API route reads, as is ([`fill`] encodes it; the router decodes
    /// it once).
    pub fn param(mut self, name: &'static str, value: &str) -> Call {
        self.params.push((name, value.to_string()));
        self
    }
}

/// `pattern` (an API path below the CI mount naming `{parameters}`) with each parameter
/// filled in, percent-encoded as one segment: from `call`'s first, else from `form`'s (the
/// form route's own, `{repo_id}`, `{org_id}`). A parameter neither names is a bug of the
/// row: a 500.
fn fill(
    pattern: &str,
    call: &[(&'static str, String)],
    form: &Request,
) -> Result<String, ApiError> {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|i| open + i)
            .ok_or_else(|| ApiError::internal(format!("unclosed parameter in {pattern}")))?;
        let name = &rest[open + 1..close];
        let value = match call.iter().find(|(k, _)| *k == name) {
            Some((_, v)) => v.as_str(),
            None if form.params.iter().any(|(k, _)| k == name) => form.param(name),
            None => {
                return Err(ApiError::internal(format!(
                    "no value for {{{name}}} of {pattern}"
                )));
            }
        };
        out.push_str(&rest[..open]);
        out.push_str(&percent_encode(value));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Sends the API request `call` describes (`method` on `pattern`, below the CI mount) as the
/// browser of the form post `req`: the API's answer, or its refusal.
pub async fn send<H: UiHost>(
    host: &Arc<H>,
    req: Request,
    method: Method,
    pattern: &str,
    call: Call,
) -> Result<Response, ApiError> {
    let path = fill(pattern, &call.params, &req)?;
    let mut api = Request::new(method, &format!("{}{path}", host.api_mount()));
    api.query = call.query.unwrap_or_default();
    api.headers = req.headers;
    api.headers.remove(header::CONTENT_LENGTH);
    api.headers.remove(header::CONTENT_TYPE);
    // `null`: no body (a read).
    if !call.body.is_null() {
        api.body = serde_json::to_vec(&call.body)
            .map_err(ApiError::internal)?
            .into();
        api.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    api.remote = req.remote;
    api.tls = req.tls;
    // The form's CSRF field (`FormCsrf`) rides along, as the header would.
    api.extensions = req.extensions;
    let shown = api.path.clone();
    Arc::clone(host).api(api).await.inspect_err(|err| {
        tracing::info!(path = %shown, status = err.status.as_u16(), "ui form refused by the api");
    })
}

/// A posted form read and checked, and the page frame to answer with.
pub struct Posted {
    pub form: Form,
    pub frame: Frame,
    pub account: std::sync::Arc<Account>,
}

/// The API's access decision a form needs before its fields are read, the same function
/// the API's route runs first (which runs it again, from its cache): so a caller the API
/// refuses is refused whatever the form holds, and a bad form is told so only to those
/// allowed to send it.
#[derive(Debug, Clone, Copy)]
pub enum Gate {
    /// Any signed-in user (`access::must_user`).
    User,
    /// Instance admins (`access::must_admin`).
    Admin,
    /// Those who may push to the repository (`access::repo_push`, `{repo_id}`).
    RepoPush,
    /// The repository's admins (`access::repo_admin`, `{repo_id}`).
    RepoAdmin,
    /// The organisation's admins (`access::org`, `{org_id}`).
    OrgAdmin,
}

impl Gate {
    async fn check<H: UiHost>(self, host: &Arc<H>, req: &Request) -> Result<(), ApiError> {
        match self {
            Gate::User => host.must_user(req).await.map(drop),
            Gate::Admin => host.must_admin(req).await.map(drop),
            Gate::RepoPush => host.repo_push(req).await.map(drop),
            Gate::RepoAdmin => host.repo_admin(req).await.map(drop),
            Gate::OrgAdmin => host.org(req, true).await.map(drop),
        }
    }
}

/// Reads the form of `req` and checks, in this order: the caller is signed in (anonymous:
/// the sign-in page, 401), the session's CSRF field is right (a stale or foreign form: 403,
/// `forms::caller`), `gate` lets them, and the body is a form (400). `Err` is the page to
/// answer with.
pub async fn read<H: UiHost>(
    host: &Arc<H>,
    req: &mut Request,
    title: &str,
    gate: Gate,
) -> Result<Posted, Response> {
    let form = Form::read(req);
    let (frame, _) = Frame::of(host, req, title).await;
    let checked = async {
        let account = forms::caller(host, req)
            .await?
            .ok_or_else(ApiError::unauthorized)?;
        gate.check(host, req).await?;
        Ok::<_, ApiError>((form?, account))
    }
    .await;
    match checked {
        Ok((form, account)) => Ok(Posted {
            form,
            frame,
            account,
        }),
        Err(err) => Err(error_page(frame, err)),
    }
}

/// `err` as the UI's page (a page that cannot render is a bare 500).
pub fn error_page(frame: Frame, err: ApiError) -> Response {
    or_error_page(frame, Err(err))
        .unwrap_or_else(|_| Response::empty(StatusCode::INTERNAL_SERVER_ERROR))
}

/// [`send`], its refusal as a page (`Err`) in `frame`.
pub async fn call<H: UiHost>(
    host: &Arc<H>,
    req: Request,
    frame: Frame,
    method: Method,
    pattern: &str,
    call: Result<Call, ApiError>,
) -> Result<Response, Response> {
    let call = call.map_err(|err| error_page(frame.clone(), err))?;
    send(host, req, method, pattern, call)
        .await
        .map_err(|err| error_page(frame, err))
}

/// Makes a form's API call from its fields and whether the caller is an instance admin.
type Build = Box<dyn Fn(&Form, bool) -> Result<Call, ApiError> + Send + Sync>;

/// One form of a page that is one API call, a row of the page's table ([`register`]): what
/// differs between forms is here, what they share is [`act`], so a new form is a new row.
pub struct Action {
    /// Below the page's path (`""`: the page's own form). Its first segment names the
    /// page's section the form sits in, where the browser goes back to.
    path: &'static str,
    /// Shown once on the page after a success.
    message: &'static str,
    build: Build,
    /// The API route that carries the form out: its method and its path below the CI mount
    /// (`/repos/{repo_id}/cron/{cron}`), the parameters filled by [`fill`].
    method: Method,
    api: String,
}

impl Action {
    pub fn new(
        path: &'static str,
        message: &'static str,
        build: impl Fn(&Form, bool) -> Result<Call, ApiError> + Send + Sync + 'static,
        method: Method,
        api: impl Into<String>,
    ) -> Action {
        Action {
            path,
            message,
            build: Box::new(build),
            method,
            api: api.into(),
        }
    }

    /// Where the browser goes after a success at `posted` (the post's path, with the root):
    /// the page (`posted` less the form's own path) at the form's section, the first segment
    /// of that path (`general` for the page's own form).
    fn back(&self, posted: &str) -> String {
        let page = posted.strip_suffix(self.path).unwrap_or(posted);
        format!("{page}#{}", self.section())
    }

    fn section(&self) -> &'static str {
        self.path
            .split('/')
            .find(|segment| !segment.is_empty())
            .unwrap_or("general")
    }
}

/// Registers each of `actions` as a form route below `page` (a path pattern naming the
/// parameters the API routes read), checked by `gate`; `show` is the page's `GET`, which
/// shows a form the API refused again.
pub fn register<H: UiHost>(
    scope: &mut Scope<'_, Arc<H>>,
    page: &str,
    gate: Gate,
    show: PageHandler<H>,
    actions: impl IntoIterator<Item = Action>,
) {
    for action in actions {
        let path = format!("{page}{}", action.path);
        let action = Arc::new(action);
        let show = show.clone();
        forms::post(scope, &path, move |host, req| {
            act(host, req, gate, action.clone(), show.clone())
        });
    }
}

/// A whole form post: read and checked ([`read`], `gate`), the API call built from the form,
/// the API carries it out, and the browser goes back to the form's section with the
/// action's message shown once there.
async fn act<H: UiHost>(
    host: Arc<H>,
    mut req: Request,
    gate: Gate,
    action: Arc<Action>,
    show: PageHandler<H>,
) -> Result<Response, ApiError> {
    let posted = match read(&host, &mut req, "Settings", gate).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let back = action.back(&req.path);
    let origin = Origin::of(&req, action.path);
    let outcome = match (action.build)(&posted.form, posted.account.user.admin) {
        Ok(call) => send(&host, req, action.method.clone(), &action.api, call).await,
        Err(err) => Err(err),
    };
    Ok(match outcome {
        Ok(_) => forms::see_other(&host, &origin.page, &back, Some(action.message)),
        Err(err) => refused(&host, origin, action.section(), posted, &show, err).await,
    })
}

/// Where a form posted from, kept before its request becomes the API's: the form's page is
/// shown from here again when the API refuses what was typed ([`refused`]).
pub struct Origin {
    /// The page's `GET`, with the post's cookies and path parameters.
    page: Request,
    /// The path posted to.
    action: String,
}

impl Origin {
    /// `req` posted to the form at `form_path` below its page (`""`: the page's own form).
    pub fn of(req: &Request, form_path: &str) -> Origin {
        let page_path = req.path.strip_suffix(form_path).unwrap_or(&req.path);
        let mut page = head_of(req);
        page.path = page_path.to_string();
        page.params = req.params.clone();
        page.remote = req.remote;
        Origin {
            page,
            action: req.path.clone(),
        }
    }
}

/// The answer to a form the API refused with `err`: when `err` is about what was typed
/// ([`Refused::reshows`]), the form's page again from `show` with `err`'s status, its
/// message and the typed fields; otherwise `err` as a page.
pub async fn refused<H: UiHost>(
    host: &Arc<H>,
    origin: Origin,
    section: &str,
    posted: Posted,
    show: &PageHandler<H>,
    err: ApiError,
) -> Response {
    if !Refused::reshows(err.status) {
        return error_page(posted.frame, err);
    }
    let status = err.status;
    let mut page = origin.page;
    page.extensions.insert(Refused::new(
        &origin.action,
        section,
        err.message.clone(),
        &posted.form,
    ));
    match show(Arc::clone(host), page).await {
        Ok(mut response) if response.status == StatusCode::OK => {
            response.status = status;
            response
        }
        // The page itself could not be shown (gone since): the refusal on its own.
        _ => error_page(posted.frame, err),
    }
}

/// A page's `GET` handler, which shows a refused form of it again.
pub type PageHandler<H> = crate::http::router::Handler<Arc<H>>;

/// `show` as a [`PageHandler`].
pub fn page_handler<H, F, Fut>(show: F) -> PageHandler<H>
where
    H: UiHost,
    F: Fn(Arc<H>, Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response, ApiError>> + Send + 'static,
{
    Arc::new(move |host, req| Box::pin(show(host, req)) as crate::http::router::HandlerFuture)
}

/// A body-less `GET` of `req`'s path with its headers: what a form's answer needs of the
/// post once the post itself has gone to the API.
pub fn head_of(req: &Request) -> Request {
    let mut head = Request::new(Method::GET, &req.path);
    head.headers = req.headers.clone();
    head.tls = req.tls;
    head
}

/// The call of a form that only names an item (delete it, run it): no body, the form's
/// `field` as the path parameter `param`.
pub fn item(
    param: &'static str,
    field: &'static str,
) -> impl Fn(&Form, bool) -> Result<Call, ApiError> + Send + Sync + 'static {
    move |form, _| Ok(Call::body(json!({})).param(param, form.required(field)?))
}

/// The call of a form with nothing to send (pause, resume): an empty body.
pub fn nothing(_: &Form, _: bool) -> Result<Call, ApiError> {
    Ok(Call::body(json!({})))
}

/// A comma- or newline-separated list field as a list, blanks left out.
pub fn list_field(form: &Form, name: &str) -> Vec<String> {
    form.get(name)
        .unwrap_or("")
        .split([',', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Every value of a repeated field (checkboxes), in order.
pub fn all_of(form: &Form, name: &str) -> Vec<String> {
    form.all(name).map(str::to_string).collect()
}

/// Whether a checkbox was ticked.
pub fn checked(form: &Form, name: &str) -> bool {
    form.get(name).is_some()
}

/// A whole-number field: 400 naming the field otherwise.
pub fn number(form: &Form, name: &'static str) -> Result<i64, ApiError> {
    let raw = form.get(name).unwrap_or("").trim();
    raw.parse::<i64>()
        .map_err(|_| ApiError::bad_request(format!("{name} must be a whole number, not {raw:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(path: &'static str) -> Action {
        Action::new(path, "", nothing, Method::POST, "/users")
    }

    #[test]
    fn a_form_goes_back_to_its_section_of_the_page_it_posted_from() {
        let cases = [
            (
                "/secrets/edit",
                "/ci/repos/7/settings/secrets/edit",
                "/ci/repos/7/settings#secrets",
            ),
            (
                "/registries/delete",
                "/admin/registries/delete",
                "/admin#registries",
            ),
            ("/users", "/admin/users", "/admin#users"),
            ("", "/repos/7/settings", "/repos/7/settings#general"),
            (
                "/crons/run",
                "/org/3/settings/crons/run",
                "/org/3/settings#crons",
            ),
        ];
        for (path, posted, back) in cases {
            assert_eq!(row(path).back(posted), back, "{path} at {posted}");
        }
    }

    #[test]
    fn an_item_form_names_its_item_and_refuses_without_it() {
        let mut req = Request::new(Method::POST, "/admin/users/delete");
        req.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        req.body = "login=al%25ice".to_string().into();
        let form = Form::read(&mut req).unwrap();
        let call = item("login", "login")(&form, false).unwrap();
        assert_eq!(call.params, [("login", "al%ice".to_string())]);
        assert_eq!(call.body, json!({}));
        let err = item("agent_id", "id")(&form, false).err().unwrap();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("\"id\""), "{}", err.message);
    }

    #[test]
    fn an_api_path_is_filled_from_the_call_then_the_form_route() {
        let mut form = Request::new(Method::POST, "/repos/7/settings/secrets/edit");
        form.params = vec![("repo_id".into(), "7".into())];
        let call = Call::body(json!({})).param("secret", "a/b c%");
        let path = fill("/repos/{repo_id}/secrets/{secret}", &call.params, &form).unwrap();
        assert_eq!(path, "/repos/7/secrets/a%2Fb%20c%25");
        let err = fill("/orgs/{org_id}/secrets", &[], &form).unwrap_err();
        assert_eq!(err.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
}
