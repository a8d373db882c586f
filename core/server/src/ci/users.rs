//! Users: creating, changing and removing accounts, rotating their token secret, and using up
//! one-time sign-in links. `auth.admins` (the settings' `env_admins`) are admins whatever the
//! database says, so every call reads accounts through them.

use super::{Error, Services};
use crate::auth::random_secret;
use crate::store::used_tokens;
use crate::store::users::{self, Account, NewUser, User, UserPatch};

/// Creates a user (and its personal organisation).
pub async fn create(ci: &Services, new: NewUser) -> Result<Account, Error> {
    let env = ci.settings.env_admins.clone();
    let account = ci
        .store
        .write(move |c| users::create(c, &env, &new))
        .await?;
    tracing::info!(
        user = account.user.login,
        admin = account.user.admin,
        "user created"
    );
    Ok(account)
}

/// Changes the email, avatar or admin flag of the user called `login`.
pub async fn update(ci: &Services, login: String, patch: UserPatch) -> Result<User, Error> {
    let env = ci.settings.env_admins.clone();
    Ok(ci
        .store
        .write(move |c| users::update(c, &env, &login, &patch))
        .await?)
}

/// Removes the user called `login`.
pub async fn delete(ci: &Services, login: String) -> Result<User, Error> {
    let env = ci.settings.env_admins.clone();
    let user = ci
        .store
        .write(move |c| users::delete(c, &env, &login))
        .await?;
    tracing::info!(user = user.login, "user deleted");
    Ok(user)
}

/// Gives user `id` a new token secret, which revokes every token signed with the old one.
pub async fn rotate_token_seed(ci: &Services, id: i64) -> Result<Account, Error> {
    let env = ci.settings.env_admins.clone();
    let seed = random_secret();
    let account = ci
        .store
        .write(move |c| users::set_token_seed(c, &env, id, &seed))
        .await?;
    tracing::info!(user = account.user.login, "personal access token rotated");
    Ok(account)
}

/// Uses up one-time token `jti` (valid until `exp`); `false` when it was used before.
pub async fn spend_once(ci: &Services, jti: String, exp: i64, now: i64) -> Result<bool, Error> {
    Ok(ci
        .store
        .write(move |c| used_tokens::spend(c, &jti, exp, now))
        .await?)
}
