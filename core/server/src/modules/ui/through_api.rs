//! A form post carried out by the REST API's own handler.
//!
//! The settings and admin forms do what an API call does, so they make that call: the form's
//! fields become the JSON body (and path parameters) the handler reads, and the handler makes
//! the access decision (`modules::ci::access`), validates and calls the service exactly as
//! for a client of the API. Nothing here decides who may do what or what is valid, so the UI
//! cannot drift from the API. The answers become pages: success a `303` back to the page
//! (post/redirect/get, with a one-shot message); a refusal of what was typed the form's page
//! again with the typed fields and the API's message and status ([`super::refused`]); any
//! other refusal the API's status and message as a readable page (nothing was changed: the
//! handler refused before its service call).

use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};

use super::forms::{self, Form};
use super::refused::Refused;
use super::{Frame, or_error_page};
use crate::http::router::HandlerFuture;
use crate::http::{ApiError, HeaderValue, Method, Request, Response, Scope, StatusCode, header};
use crate::modules::ci::access;
use crate::modules::ci::scoped::{self, Level, Use};
use crate::state::Ctx;
use crate::store::users::Account;

/// What a form asks of the API: the JSON body and the path parameters of the call.
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

    /// A path parameter the handler reads. `%` is escaped, so a handler that percent-decodes
    /// its key (`scoped::path_text`) reads back exactly `value`.
    pub fn param(mut self, name: &'static str, value: &str) -> Call {
        self.params.push((name, value.replace('%', "%25")));
        self
    }
}

/// A posted form read and checked, and the page frame to answer with.
pub struct Posted {
    pub form: Form,
    pub frame: Frame,
    pub account: std::sync::Arc<Account>,
}

/// The API's access decision a form needs before its fields are read, the same function
/// the API's handler runs first (which runs it again, from its cache): so a caller the API
/// refuses is refused whatever the form holds, and a bad form is told so only to those
/// allowed to send it.
#[derive(Debug, Clone, Copy)]
pub enum Gate {
    /// Any signed-in user (`access::must_user`).
    User,
    /// Instance admins (`access::must_admin`).
    Admin,
    /// The repository's admins (`access::repo_admin`, `{repo_id}`).
    RepoAdmin,
    /// Writers of a scope's secrets and registries (`scoped::resolve`).
    Scoped(Level),
}

impl Gate {
    async fn check(self, ctx: &Ctx, req: &Request) -> Result<(), ApiError> {
        match self {
            Gate::User => access::must_user(ctx, req).await.map(drop),
            Gate::Admin => access::must_admin(ctx, req).await.map(drop),
            Gate::RepoAdmin => access::repo_admin(ctx, req).await.map(drop),
            Gate::Scoped(level) => scoped::resolve(ctx, req, level, Use::Write).await.map(drop),
        }
    }
}

/// Reads the form of `req` and checks, in this order: the caller is signed in (anonymous:
/// the sign-in page, 401), the session's CSRF field is right (a stale or foreign form: 403,
/// `forms::caller`), `gate` lets them, and the body is a form (400). `Err` is the page to
/// answer with.
pub async fn read(
    ctx: &Ctx,
    req: &mut Request,
    title: &str,
    gate: Gate,
) -> Result<Posted, Response> {
    let form = Form::read(req);
    let (frame, _) = Frame::of(ctx, req, title).await;
    let checked = async {
        let account = forms::caller(ctx, req)
            .await?
            .ok_or_else(ApiError::unauthorized)?;
        gate.check(ctx, req).await?;
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

/// Calls `handler` with `req` turned into the API request `call` describes: the API's
/// response, or its refusal as a page (`Err`).
pub async fn call<H, Fut>(
    ctx: &Ctx,
    req: Request,
    frame: Frame,
    call: Result<Call, ApiError>,
    handler: H,
) -> Result<Response, Response>
where
    H: FnOnce(Ctx, Request) -> Fut,
    Fut: Future<Output = Result<Response, ApiError>>,
{
    let call = call.map_err(|err| error_page(frame.clone(), err))?;
    through(ctx, req, call, handler)
        .await
        .map_err(|err| error_page(frame, err))
}

/// `handler`'s answer to `req` turned into the API request `call` describes.
pub async fn through<H, Fut>(
    ctx: &Ctx,
    mut req: Request,
    call: Call,
    handler: H,
) -> Result<Response, ApiError>
where
    H: FnOnce(Ctx, Request) -> Fut,
    Fut: Future<Output = Result<Response, ApiError>>,
{
    let body = serde_json::to_vec(&call.body).map_err(ApiError::internal)?;
    req.body = body.into();
    req.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(query) = call.query {
        req.query = query;
    }
    for (name, value) in call.params {
        req.params.retain(|(k, _)| k != name);
        req.params.push((name.to_string(), value));
    }
    let path = req.path.clone();
    handler(ctx.clone(), req).await.inspect_err(|err| {
        tracing::info!(%path, status = err.status.as_u16(), "ui form refused by the api");
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
        let mut page = Request::new(Method::GET, page_path);
        page.headers = req.headers.clone();
        page.params = req.params.clone();
        page.tls = req.tls;
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
pub async fn refused(
    ctx: &Ctx,
    origin: Origin,
    section: &str,
    posted: Posted,
    show: &PageHandler,
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
    match show(ctx.clone(), page).await {
        Ok(mut response) if response.status == StatusCode::OK => {
            response.status = status;
            response
        }
        // The page itself could not be shown (gone since): the refusal on its own.
        _ => error_page(posted.frame, err),
    }
}

/// A page's `GET` handler, which shows a refused form of it again.
pub type PageHandler = crate::http::router::Handler<Ctx>;

/// `show` as a [`PageHandler`].
pub fn page_handler<F, Fut>(show: F) -> PageHandler
where
    F: Fn(Ctx, Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
{
    Arc::new(move |ctx, req| Box::pin(show(ctx, req)) as HandlerFuture)
}

/// A REST handler as a form's row names it: `(ctx, req)`, or `(ctx, req, level)` for the
/// handlers of secrets and registries, which serve every scope and are told the page's.
pub trait ApiHandler<P>: Send + Sync + 'static {
    fn call(&self, ctx: Ctx, req: Request, page: P) -> HandlerFuture;
}

impl<F, Fut> ApiHandler<()> for F
where
    F: Fn(Ctx, Request) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
{
    fn call(&self, ctx: Ctx, req: Request, (): ()) -> HandlerFuture {
        Box::pin(self(ctx, req))
    }
}

impl<F, Fut> ApiHandler<Level> for F
where
    F: Fn(Ctx, Request, Level) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Response, ApiError>> + Send + 'static,
{
    fn call(&self, ctx: Ctx, req: Request, level: Level) -> HandlerFuture {
        Box::pin(self(ctx, req, level))
    }
}

/// Makes a form's API call from its fields and whether the caller is an instance admin.
type Build = Box<dyn Fn(&Form, bool) -> Result<Call, ApiError> + Send + Sync>;

/// One form of a page that is one API call, a row of the page's table ([`register`]): what
/// differs between forms is here, what they share is [`act`], so a new form is a new row.
pub struct Action<P> {
    /// Below the page's path (`""`: the page's own form). Its first segment names the
    /// page's section the form sits in, where the browser goes back to.
    path: &'static str,
    /// Shown once on the page after a success.
    message: &'static str,
    build: Build,
    handler: Box<dyn ApiHandler<P>>,
}

impl<P> Action<P> {
    pub fn new(
        path: &'static str,
        message: &'static str,
        build: impl Fn(&Form, bool) -> Result<Call, ApiError> + Send + Sync + 'static,
        handler: impl ApiHandler<P>,
    ) -> Action<P> {
        Action {
            path,
            message,
            build: Box::new(build),
            handler: Box::new(handler),
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
/// parameters the handlers read), checked by `gate`; `param` is handed to the handlers;
/// `show` is the page's `GET`, which shows a form the API refused again.
pub fn register<P: Copy + Send + Sync + 'static>(
    scope: &mut Scope<'_, Ctx>,
    page: &str,
    gate: Gate,
    param: P,
    show: PageHandler,
    actions: impl IntoIterator<Item = Action<P>>,
) {
    for action in actions {
        let path = format!("{page}{}", action.path);
        let action = Arc::new(action);
        let show = show.clone();
        forms::post(scope, &path, move |ctx, req| {
            act(ctx, req, gate, param, action.clone(), show.clone())
        });
    }
}

/// A whole form post: read and checked ([`read`], `gate`), the API call built from the form,
/// the REST handler carries it out, and the browser goes back to the form's section with
/// the action's message shown once there.
async fn act<P: 'static>(
    ctx: Ctx,
    mut req: Request,
    gate: Gate,
    param: P,
    action: Arc<Action<P>>,
    show: PageHandler,
) -> Result<Response, ApiError> {
    let posted = match read(&ctx, &mut req, "Settings", gate).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let back = action.back(&req.path);
    let origin = Origin::of(&req, action.path);
    let handler = |ctx, req| action.handler.call(ctx, req, param);
    let outcome = match (action.build)(&posted.form, posted.account.user.admin) {
        Ok(call) => through(&ctx, req, call, handler).await,
        Err(err) => Err(err),
    };
    Ok(match outcome {
        Ok(_) => forms::see_other(&ctx, &origin.page, &back, Some(action.message)),
        Err(err) => refused(&ctx, origin, action.section(), posted, &show, err).await,
    })
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
    use crate::modules::ci::users;

    fn row(path: &'static str) -> Action<()> {
        Action::new(path, "", nothing, users::create)
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
        assert_eq!(call.params, [("login", "al%25ice".to_string())]);
        assert_eq!(call.body, json!({}));
        let err = item("agent_id", "id")(&form, false).err().unwrap();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
        assert!(err.message.contains("\"id\""), "{}", err.message);
    }
}
