//! Who is calling: token → user, and Woodpecker's rules for refusing.
//!
//! An absent, malformed or revoked token makes the caller anonymous; routes that need a user
//! then answer 401, admin routes answer 403 to a signed-in non-admin.

use crate::app::Ctx;
use crate::auth::{self, token};
use crate::http::{ApiError, Request};
use crate::store::users::{self, Account};
use crate::store::{StoreError, now_unix};

/// The signed-in user, if the request carries a valid personal access token.
pub async fn current(ctx: &Ctx, req: &Request) -> Result<Option<Account>, ApiError> {
    let Some(raw) = auth::bearer(req) else {
        return Ok(None);
    };
    let Some(user_id) = token::user_token_subject(&raw) else {
        return Ok(None);
    };
    let env = ctx.env_admins.clone();
    let account = match ctx
        .store
        .read(move |c| users::by_id(c, &env, user_id))
        .await
    {
        Ok(account) => account,
        Err(StoreError::NotFound) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    Ok(token::verify(&raw, account.hash.as_bytes(), now_unix()).map(|_| account))
}

/// The signed-in user, or 401.
pub async fn must_user(ctx: &Ctx, req: &Request) -> Result<Account, ApiError> {
    current(ctx, req).await?.ok_or_else(ApiError::unauthorized)
}

/// A signed-in instance admin: 401 without a user, 403 for a non-admin.
pub async fn must_admin(ctx: &Ctx, req: &Request) -> Result<Account, ApiError> {
    let account = must_user(ctx, req).await?;
    if !account.user.admin {
        return Err(ApiError::new(
            crate::http::StatusCode::FORBIDDEN,
            "Access denied: admin permission required",
        ));
    }
    Ok(account)
}
