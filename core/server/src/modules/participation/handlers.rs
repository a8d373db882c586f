//! `/v2/participation` handlers: list, import, generate, get, delete, append state-proof keys.
//!
//! Status codes, bodies and messages follow algod (see docs/participation.md for the few
//! deliberate differences). Successful JSON replies are `application/json` with a trailing
//! newline, as Go's `encoding/json` writes them.

use serde::Serialize;

use crate::http::router::SenderKnown;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::participation::KeyringError;
use crate::participation::ids::{encode_participation_id, parse_address, parse_participation_id};
use crate::participation::keygen::{self, Plan};
use crate::participation::keys::PartKey;
use crate::participation::partfile::{self, ReadError};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::partkeys::{self, ParticipationKey};

/// algod's reply when the uploaded body is empty.
pub const ZERO_LENGTH: &str = "payload was of zero length";
/// algod's 404 message for an unknown id on GET (and here on append).
pub const ID_NOT_FOUND: &str = "the participation ID was not found";
/// algod's 404 message for an unknown id on DELETE.
pub const DELETE_NOT_FOUND: &str = "participation id not found";
pub const KEYGEN_BUSY: &str = "participation key generation already in progress";

/// `200` with `value` as Go's `encoding/json` writes it: `application/json`, newline-terminated.
pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Response, ApiError> {
    let mut body = serde_json::to_vec(value).map_err(ApiError::internal)?;
    body.push(b'\n');
    Ok(Response::new(StatusCode::OK, "application/json", body))
}

/// Installs `key` through the keyring; a duplicate is algod's 400.
pub async fn install(ctx: &Ctx, key: PartKey) -> Result<ParticipationKey, ApiError> {
    Ok(ctx.keyring.install(key).await?)
}

/// The head check of the upload routes (up to [`super::MAX_UPLOAD_BYTES`]): a request
/// without the admin token is refused before its body is read, and the admin's body is read
/// outside the budget for bodies of senders not yet known.
pub async fn admin_sender(ctx: Ctx, mut req: Request) -> Result<Request, ApiError> {
    ctx.participation.authorize(&req)?;
    req.extensions.insert(SenderKnown);
    Ok(req)
}

/// `GET /v2/participation`: every installed key. Like algod, no keys is `null`.
pub async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let keys = ctx.ci.reads.read(partkeys::list).await?;
    if keys.is_empty() {
        return json(&serde_json::Value::Null);
    }
    json(&keys)
}

#[derive(Serialize)]
struct PostParticipationResponse {
    #[serde(rename = "partId")]
    part_id: String,
}

/// `POST /v2/participation`: installs the partkey file in the raw body (Content-Type ignored).
pub async fn add(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    if req.body.is_empty() {
        return Err(ApiError::bad_request(ZERO_LENGTH));
    }
    let body = req.body.clone();
    let dir = ctx.participation.work_dir.clone();
    let key = tokio::task::spawn_blocking(move || partfile::read(&body, &dir))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| match e {
            ReadError::Bad(message) => ApiError::bad_request(message),
            ReadError::Internal(cause) => ApiError::internal(cause),
        })?;
    let key = install(&ctx, key).await?;
    json(&PostParticipationResponse { part_id: key.id })
}

/// A required or optional `uint64` query parameter, with oapi-codegen's messages.
fn query_u64(req: &Request, name: &str, required: bool) -> Result<Option<u64>, ApiError> {
    let invalid = |detail: String| {
        ApiError::bad_request(format!("Invalid format for parameter {name}: {detail}"))
    };
    let Some(raw) = req.query(name) else {
        if required {
            return Err(invalid(format!("query parameter '{name}' is required")));
        }
        return Ok(None);
    };
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(format!(
            "error binding string parameter: strconv.ParseUint: parsing {raw:?}: invalid syntax"
        )));
    }
    raw.parse::<u64>().map(Some).map_err(|_| {
        invalid(format!(
            "error binding string parameter: strconv.ParseUint: parsing {raw:?}: value out of range"
        ))
    })
}

/// `POST /v2/participation/generate/{address}?first=&last=&dilution=`: starts generating a key
/// in the background and answers at once with the two characters `{}` as text, like algod.
pub async fn generate(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let parent = parse_address(req.param("address"))
        .map_err(|e| ApiError::bad_request(format!("Invalid format for parameter address: {e}")))?;
    let first = query_u64(&req, "first", true)?.unwrap_or_default();
    let last = query_u64(&req, "last", true)?.unwrap_or_default();
    let dilution = query_u64(&req, "dilution", false)?.unwrap_or_default();
    // algod accepts these and only logs the failure; a clear 400 is more useful.
    let plan = Plan::new(parent, first, last, dilution).map_err(ApiError::bad_request)?;
    let Ok(permit) = ctx.participation.keygen.clone().try_acquire_owned() else {
        return Err(ApiError::bad_request(KEYGEN_BUSY));
    };
    let address = req.param("address").to_string();
    tokio::spawn(async move {
        let _permit = permit;
        let started = std::time::Instant::now();
        let key = match tokio::task::spawn_blocking(move || keygen::generate(&plan)).await {
            Ok(key) => key,
            Err(err) => {
                tracing::error!(%err, %address, "participation key generation failed");
                return;
            }
        };
        match install(&ctx, key).await {
            Ok(key) => tracing::info!(
                id = %key.id,
                %address,
                first,
                last,
                dilution = key.key.vote_key_dilution,
                seconds = started.elapsed().as_secs_f64(),
                "participation key generated and installed"
            ),
            Err(err) => {
                tracing::warn!(%err, %address, "error installing a generated participation key")
            }
        }
    });
    Ok(Response::new(
        StatusCode::OK,
        "text/plain; charset=UTF-8",
        "{}",
    ))
}

fn id_param(req: &Request) -> Result<String, ApiError> {
    let raw = req.param("participation_id");
    // Canonical text of the decoded bytes, so every spelling algod accepts finds the key.
    parse_participation_id(raw)
        .map(|id| encode_participation_id(&id))
        .map_err(ApiError::bad_request)
}

/// `GET /v2/participation/{participation-id}`.
pub async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let id = id_param(&req)?;
    match ctx.ci.reads.read(move |c| partkeys::get(c, &id)).await {
        Ok(key) => json(&key),
        Err(StoreError::NotFound) => Err(ApiError::not_found(ID_NOT_FOUND)),
        Err(err) => Err(err.into()),
    }
}

/// `DELETE /v2/participation/{participation-id}`: 200 with an empty body.
pub async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let id = id_param(&req)?;
    match ctx.keyring.delete(id).await {
        Ok(()) => Ok(Response::empty(StatusCode::OK)),
        Err(KeyringError::NotFound) => Err(ApiError::not_found(DELETE_NOT_FOUND)),
        Err(err) => Err(err.into()),
    }
}

/// `POST /v2/participation/{participation-id}`: appends state-proof signing keys (msgpack
/// array of `{"key", "rnd"}`); 200 with an empty body.
pub async fn append_keys(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let id = id_param(&req)?;
    match ctx
        .keyring
        .append_state_proof_keys(id, req.body.clone())
        .await
    {
        Ok(()) => Ok(Response::empty(StatusCode::OK)),
        Err(KeyringError::NotFound) => Err(ApiError::not_found(ID_NOT_FOUND)),
        Err(err) => Err(err.into()),
    }
}
