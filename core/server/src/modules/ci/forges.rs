//! `/forges`: where repositories come from. Admins write; anyone may list, non-admins see
//! only `id`, `type` and `url`. Forges the operator configured (`[[forges]]` in config.toml,
//! Woodpecker's variables) are read-only here: a write answers 409 naming where to change
//! them, and admins see `woodlark_configured_in`.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::access::{current, must_admin};
use super::pagination::read_page;
use crate::auth::random_secret;
use crate::ci;
use crate::ci::forge::git;
use crate::ci::forge_secrets::webhook_secret;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::forges::{self, Forge, ForgeKind, PLUGIN_OPTION};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/forges", list)
        .post("/forges", create)
        .get("/forges/{forge_id}", get)
        .patch("/forges/{forge_id}", update)
        .delete("/forges/{forge_id}", delete);
}

async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let admin = current(&ctx, &req).await?.is_some_and(|a| a.user.admin);
    let list = read_page(&ctx, &req, forges::list).await?;
    if admin {
        let shown: Vec<Value> = list
            .iter()
            .map(|f| with_origin(&ctx, f, json!(f)))
            .collect();
        Ok(Response::json(&shown))
    } else {
        let server_url = ctx.public_url();
        let public: Vec<_> = list.iter().map(|f| f.public(&server_url)).collect();
        Ok(Response::json(&public))
    }
}

async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let id = req.param_i64("forge_id")?;
    let admin = current(&ctx, &req).await?.is_some_and(|a| a.user.admin);
    let row = ctx
        .ci
        .reads
        .read(move |c| forges::by_id(c, id))
        .await
        .map_err(forge_not_found)?;
    if !admin {
        return Ok(Response::json(&row.forge.public(&ctx.public_url())));
    }
    let secret = webhook_secret(&ctx.ci.seal, &row).map_err(ApiError::internal)?;
    let shown = with_webhook_secret(&row.forge, secret.as_bytes());
    Ok(Response::json(&with_origin(&ctx, &row.forge, shown)))
}

/// `value` (an admin's view of `forge`) with `woodlark_configured_in` when the operator
/// configured the forge.
fn with_origin(ctx: &Ctx, forge: &Forge, mut value: Value) -> Value {
    if let Some(origin) = ctx.ci.settings.configured_forges.get(&forge.id) {
        value["woodlark_configured_in"] = Value::String(origin.to_string());
    }
    value
}

/// 409 when forge `id` is configured by the operator, naming where to change it.
fn must_be_api_managed(ctx: &Ctx, id: i64) -> Result<(), ApiError> {
    match ctx.ci.settings.configured_forges.get(&id) {
        Some(origin) => Err(ApiError::conflict(format!(
            "forge {id} is configured in {origin}: change it there and restart the server"
        ))),
        None => Ok(()),
    }
}

/// Admins see the webhook secret (they configure it on the forge) next to the forge.
fn with_webhook_secret(forge: &Forge, secret: &[u8]) -> Value {
    let mut value = json!(forge);
    value["webhook_secret"] = Value::String(String::from_utf8_lossy(secret).into_owned());
    value
}

/// Body of `POST /forges` and `PATCH /forges/{id}`.
#[derive(Debug, Deserialize)]
struct ForgeIn {
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Woodlark's own name of the type; wins over `type` (see `store::forges::api_type`).
    woodlark_type: Option<String>,
    url: Option<String>,
    client: Option<String>,
    oauth_client_secret: Option<String>,
    /// The secret the forge signs deliveries with; a random one when not given on create.
    webhook_secret: Option<String>,
    skip_verify: Option<bool>,
    oauth_host: Option<String>,
    orgs: Option<Vec<String>>,
    additional_options: Option<Map<String, Value>>,
}

/// The upstream web UI puts `https://` before every URL that does not start with `http`, so
/// the git forge's `file:///dir` comes back as `https://file:///dir`. No http(s) URL has an
/// empty host, so that spelling can only mean the `file://` URL.
fn undo_ui_scheme(url: &str) -> &str {
    ["https://", "http://"]
        .iter()
        .find_map(|scheme| {
            url.strip_prefix(scheme)
                .filter(|rest| rest.starts_with("file://"))
        })
        .unwrap_or(url)
}

impl ForgeIn {
    /// The forge type the body names, if it names one (422 for an unknown one).
    fn kind(&self) -> Result<Option<ForgeKind>, ApiError> {
        let Some(name) = self.woodlark_type.as_ref().or(self.kind.as_ref()) else {
            return Ok(None);
        };
        ForgeKind::parse(name).map(Some).ok_or_else(|| {
            ApiError::unprocessable(format!(
                "unknown forge type {name:?}: expected one of {}",
                kind_names()
            ))
        })
    }

    /// Applies the given fields over `forge`.
    fn apply(self, forge: &mut Forge) -> Result<(), ApiError> {
        let kind = self.kind()?;
        if let Some(v) = self.url {
            forge.url = undo_ui_scheme(&v).trim_end_matches('/').to_string();
        }
        if let Some(v) = self.additional_options {
            forge.additional_options = v;
        }
        // Upstream's addon forges name an executable; here the stem names a WASM adapter.
        if forge.option(PLUGIN_OPTION).is_none()
            && let Some(stem) = forge
                .option("executable")
                .and_then(|e| std::path::Path::new(e).file_stem())
                .map(|s| s.to_string_lossy().into_owned())
        {
            forge
                .additional_options
                .insert(PLUGIN_OPTION.into(), Value::String(stem));
        }
        // `type: "addon"` is how a `git` forge is reported, so a client sending back what it
        // read keeps an existing `git` forge one, and an addon forge at a `file://` URL (the
        // upstream UI cannot pick `git`) is one. An addon forge naming its adapter
        // (`additional_options.plugin`) is a third-party adapter's. `woodlark_type` names
        // the type unambiguously.
        let git_url = forge.url.starts_with("file://");
        let existing_git = forge.id != 0 && forge.kind.is_builtin();
        let names_adapter = forge.option(PLUGIN_OPTION).is_some();
        match kind {
            Some(ForgeKind::Addon) if git_url || (existing_git && !names_adapter) => {
                forge.kind = ForgeKind::Git
            }
            Some(kind) => forge.kind = kind,
            None => {}
        }
        if let Some(v) = self.client {
            forge.client = v;
        }
        if let Some(v) = self.skip_verify {
            forge.skip_verify = v;
        }
        if let Some(v) = self.oauth_host {
            forge.oauth_host = v;
        }
        if let Some(v) = self.orgs {
            forge.orgs = v;
        }
        Ok(())
    }
}

/// The forge types the API accepts, for error messages.
fn kind_names() -> String {
    ForgeKind::ALL.map(ForgeKind::as_str).join(", ")
}

/// 422 unless the forge's URL fits its type.
fn validate(forge: &Forge) -> Result<(), ApiError> {
    if forge.url.is_empty() {
        return Err(ApiError::unprocessable("url is required"));
    }
    if forge.kind.is_builtin() {
        git::root_from_url(&forge.url)?;
    } else if !(forge.url.starts_with("https://") || forge.url.starts_with("http://")) {
        return Err(ApiError::unprocessable(format!(
            "url {:?} must start with http:// or https://",
            forge.url
        )));
    }
    if forge.kind == ForgeKind::Addon && forge.option(PLUGIN_OPTION).is_none() {
        return Err(ApiError::unprocessable(
            "an addon forge names the forge-adapter plugin that serves it in additional_options.plugin",
        ));
    }
    Ok(())
}

async fn create(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let body: ForgeIn = req.json()?;
    let client_secret = body.oauth_client_secret.clone().unwrap_or_default();
    if body.kind()?.is_none() {
        return Err(ApiError::unprocessable(format!(
            "type is required: one of {}",
            kind_names()
        )));
    }
    let mut forge = Forge {
        id: 0,
        kind: ForgeKind::default(),
        url: String::new(),
        client: String::new(),
        skip_verify: false,
        oauth_host: String::new(),
        orgs: Vec::new(),
        additional_options: Map::new(),
    };
    let webhook_secret = given_webhook_secret(&body)?.unwrap_or_else(random_secret);
    body.apply(&mut forge)?;
    validate(&forge)?;
    let created = ci::forges::create(&ctx.ci, forge, &client_secret, &webhook_secret).await?;
    Ok(Response::json(&with_webhook_secret(
        &created,
        webhook_secret.as_bytes(),
    )))
}

async fn update(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("forge_id")?;
    must_be_api_managed(&ctx, id)?;
    let body: ForgeIn = req.json()?;
    let mut forge = ctx
        .ci
        .reads
        .read(move |c| forges::by_id(c, id))
        .await
        .map_err(forge_not_found)?
        .forge;
    let secret = body.oauth_client_secret.clone();
    let webhook_secret = given_webhook_secret(&body)?;
    body.apply(&mut forge)?;
    validate(&forge)?;
    let updated = ci::forges::update(&ctx.ci, forge, secret.as_deref(), webhook_secret.as_deref())
        .await
        .map_err(forge_not_found)?;
    Ok(Response::json(&updated))
}

async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("forge_id")?;
    must_be_api_managed(&ctx, id)?;
    ci::forges::delete(&ctx.ci, id)
        .await
        .map_err(forge_not_found)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// The `webhook_secret` the body sets, if any: at least 16 characters (it is what stands
/// between the hook endpoint and forged deliveries).
fn given_webhook_secret(body: &ForgeIn) -> Result<Option<String>, ApiError> {
    match body.webhook_secret.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(s) if s.len() < 16 => Err(ApiError::unprocessable(
            "webhook_secret must be at least 16 characters",
        )),
        Some(s) => Ok(Some(s.to_string())),
    }
}

fn forge_not_found(err: impl Into<ci::Error>) -> ApiError {
    match err.into() {
        ci::Error::Store(StoreError::NotFound) => ApiError::not_found("Forge not found"),
        other => other.into(),
    }
}
