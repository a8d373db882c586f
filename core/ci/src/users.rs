//! Users: creating, changing and removing accounts, rotating their token secret, and using up
//! one-time sign-in links. `auth.admins` (the settings' `env_admins`) are admins whatever the
//! database says, so every call reads accounts through them.

use std::sync::Arc;

use super::forge::{ForgeAccount, ForgeDriver, ForgeError, ForgeTokens, acting};
use super::{Error, Services};
use crate::auth::random_secret;
use crate::store::pipelines::{self, ListFilter, Pipeline};
use crate::store::repos::{self, Repo};
use crate::store::users::{
    self, Account, EnvAdmins, ForgeIdentity, ForgeSignIn, NewUser, User, UserPatch,
};
use crate::store::{Store, StoreResult, Tx, forge_tokens, used_tokens};

/// Creates a user (and its personal organisation).
pub async fn create(ci: &Services, new: NewUser) -> Result<Account, Error> {
    create_in(&ci.store, ci.settings.env_admins.clone(), new).await
}

/// [`create`] for `woodlark user add`, which opens the store but builds no services.
pub async fn create_in(store: &Store, env: EnvAdmins, new: NewUser) -> Result<Account, Error> {
    let account = store.write(move |c| users::create(c, &env, &new)).await?;
    tracing::info!(
        user = account.user.login,
        admin = account.user.admin,
        "user created"
    );
    Ok(account)
}

/// Signs in forge `forge_id`'s `account`: finds or makes its user (see
/// `store::users::sign_in_from_forge`) and keeps the tokens the forge gave, sealed, in the
/// same write; then, before the sign-in is answered, reads their repositories' permissions
/// from the forge as them (`as_user`), as upstream does at each sign-in: a permission lost
/// on the forge is lost here at once (see `ci::repos::sync_listed_perms`; a forge that
/// cannot list them is logged, the sign-in goes on).
pub async fn sign_in_from_forge(
    ci: &Services,
    forge_id: i64,
    account: ForgeAccount,
    tokens: &ForgeTokens,
    as_user: Arc<dyn ForgeDriver>,
) -> Result<ForgeSignIn, Error> {
    users::validate_login(&account.login)
        .map_err(|why| Error::Invalid(format!("the forge's login cannot be used here: {why}")))?;
    if account.remote_id.is_empty() {
        return Err(Error::Invalid(
            "the forge gave no id for the account".into(),
        ));
    }
    let who = ForgeIdentity {
        forge_id,
        remote_id: account.remote_id,
        login: account.login,
        email: account.email,
        avatar_url: account.avatar_url,
    };
    let env = ci.settings.env_admins.clone();
    let open = ci.settings.open_registration;
    let seed = random_secret();
    let sealed = acting::seal(&ci.seal, forge_id, tokens);
    let outcome = ci
        .store
        .write(move |c| {
            let outcome = users::sign_in_from_forge(c, &env, &who, open, &seed)?;
            if let ForgeSignIn::Known(a) | ForgeSignIn::Linked(a) | ForgeSignIn::Created(a) =
                &outcome
            {
                forge_tokens::set(c, a.user.id, &sealed)?;
            }
            Ok(outcome)
        })
        .await?;
    if let ForgeSignIn::Known(a) | ForgeSignIn::Linked(a) | ForgeSignIn::Created(a) = &outcome {
        let synced = super::repos::sync_listed_perms(ci, a.user.id, forge_id, as_user.as_ref());
        match synced.await {
            Ok(_) | Err(Error::Forge(ForgeError::Unsupported(_))) => {}
            Err(err) => tracing::warn!(
                user = a.user.id,
                forge = forge_id,
                error = %err,
                "permissions not synced at sign-in; the stored ones stay"
            ),
        }
    }
    match &outcome {
        ForgeSignIn::Created(a) => tracing::info!(
            user = a.user.login,
            forge = forge_id,
            "user created by signing in through the forge"
        ),
        ForgeSignIn::Linked(a) => tracing::info!(
            user = a.user.login,
            forge = forge_id,
            "user linked to the forge account"
        ),
        _ => {}
    }
    Ok(outcome)
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

/// The home list (the API's `GET /user/repos`, and the built-in UI's `/repos`): the repositories `user`
/// owns (`repos::owned_by`), active ones unless `all`, those whose full name holds `name`
/// (lower case) when it is not empty, each with its newest pipeline; of those, `take` after
/// the first `skip` (the UI's pages; the API, like upstream's, lists them all). One read: a
/// cached statement per repository listed, so a page costs the same however many there are.
pub fn home_list(
    c: &Tx,
    user: &User,
    all: bool,
    name: &str,
    skip: usize,
    take: usize,
) -> StoreResult<Vec<(Repo, Option<Pipeline>)>> {
    let mut out = Vec::new();
    let wanted = repos::owned_by(c, user.id, user.org_id)?
        .into_iter()
        .filter(|row| {
            (all || row.repo.active)
                && (name.is_empty() || row.repo.full_name.to_lowercase().contains(name))
        })
        .skip(skip)
        .take(take);
    for row in wanted {
        let last = pipelines::list(c, row.repo.id, &ListFilter::default(), 1, 1)?
            .into_iter()
            .next();
        out.push((row.repo, last));
    }
    Ok(out)
}
