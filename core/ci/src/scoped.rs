//! Resources that live at three scopes (instance, organisation, repository) — secrets and
//! registries — written through one flow: create, update, delete, each with its audit line.
//! Their values (a secret's value, a registry's password) come in clear and are sealed here,
//! so no caller holds the sealing key to store one.

use serde::Serialize;

use super::{Error, Services};
use crate::store::registries::{self, NewRegistry, Registry, RegistryChange};
use crate::store::secrets::{self, NewSecret, ResourceScope, Secret, SecretChange};
use crate::store::{StoreResult, Tx, WriteTx};

/// One kind of scoped record: what it is called and which store functions keep it.
/// Implementors are unit structs; nothing is instantiated.
pub trait ScopedRecord: 'static {
    /// The noun in log lines (`secret created`).
    const NOUN: &'static str;
    /// What its value is sealed as (a sealed value opens only for its purpose).
    const SEAL_PURPOSE: &'static str;

    /// The API rendering (never carries a sealed value).
    type Item: Serialize + Send + 'static;
    /// A validated new item, its value sealed by [`create`].
    type New: Send + 'static;
    /// A validated change, its value (when it has one) sealed by [`update`].
    type Change: Send + 'static;

    /// The item's key, for log lines.
    fn key(item: &Self::Item) -> &str;
    /// Puts the sealed value into a new item.
    fn seal_new(new: &mut Self::New, sealed: String);
    /// Puts a new sealed value into a change.
    fn seal_change(change: &mut Self::Change, sealed: String);

    fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<Self::Item>>;
    fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Self::Item>;
    fn create(c: &WriteTx, scope: ResourceScope, new: &Self::New) -> StoreResult<Self::Item>;
    fn update(
        c: &WriteTx,
        scope: ResourceScope,
        key: &str,
        change: &Self::Change,
    ) -> StoreResult<Self::Item>;
    fn delete(c: &WriteTx, scope: ResourceScope, key: &str) -> StoreResult<Self::Item>;
}

/// Stores a new `R` in `scope` with `value` sealed; a duplicate key is a conflict.
pub async fn create<R: ScopedRecord>(
    ci: &Services,
    scope: ResourceScope,
    mut new: R::New,
    value: &str,
) -> Result<R::Item, Error> {
    R::seal_new(&mut new, ci.seal.seal(R::SEAL_PURPOSE, value.as_bytes()));
    let item = ci.store.write(move |c| R::create(c, scope, &new)).await?;
    audit::<R>(&item, scope, "created");
    Ok(item)
}

/// Applies `change` to `R` `key` in `scope`; a non-empty `value` replaces the sealed one.
pub async fn update<R: ScopedRecord>(
    ci: &Services,
    scope: ResourceScope,
    key: String,
    mut change: R::Change,
    value: Option<&str>,
) -> Result<R::Item, Error> {
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        R::seal_change(&mut change, ci.seal.seal(R::SEAL_PURPOSE, value.as_bytes()));
    }
    Ok(ci
        .store
        .write(move |c| R::update(c, scope, &key, &change))
        .await?)
}

/// Removes `R` `key` from `scope`.
pub async fn delete<R: ScopedRecord>(
    ci: &Services,
    scope: ResourceScope,
    key: String,
) -> Result<R::Item, Error> {
    let item = ci.store.write(move |c| R::delete(c, scope, &key)).await?;
    audit::<R>(&item, scope, "deleted");
    Ok(item)
}

/// The audit line of a create or delete: which item, in which scope (never its value).
fn audit<R: ScopedRecord>(item: &R::Item, scope: ResourceScope, what: &str) {
    tracing::info!(
        key = R::key(item),
        org_id = scope.org_id,
        repo_id = scope.repo_id,
        "{} {what}",
        R::NOUN
    );
}

/// CI secrets: keyed by name, the value sealed.
pub struct Secrets;

impl ScopedRecord for Secrets {
    const NOUN: &'static str = "secret";
    const SEAL_PURPOSE: &'static str = secrets::SEAL_PURPOSE;

    type Item = Secret;
    type New = NewSecret;
    type Change = SecretChange;

    fn key(item: &Secret) -> &str {
        &item.name
    }

    fn seal_new(new: &mut NewSecret, sealed: String) {
        new.sealed_value = sealed;
    }

    fn seal_change(change: &mut SecretChange, sealed: String) {
        change.sealed_value = Some(sealed);
    }

    fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<Secret>> {
        secrets::list(c, scope, page, per)
    }

    fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Secret> {
        Ok(secrets::find(c, scope, key)?.secret)
    }

    fn create(c: &WriteTx, scope: ResourceScope, new: &NewSecret) -> StoreResult<Secret> {
        secrets::create(c, scope, new)
    }

    fn update(
        c: &WriteTx,
        scope: ResourceScope,
        key: &str,
        change: &SecretChange,
    ) -> StoreResult<Secret> {
        secrets::update(c, scope, key, change)
    }

    fn delete(c: &WriteTx, scope: ResourceScope, key: &str) -> StoreResult<Secret> {
        secrets::delete(c, scope, key)
    }
}

/// Registry credentials: keyed by address, the password sealed.
pub struct Registries;

impl ScopedRecord for Registries {
    const NOUN: &'static str = "registry";
    const SEAL_PURPOSE: &'static str = registries::SEAL_PURPOSE;

    type Item = Registry;
    type New = NewRegistry;
    type Change = RegistryChange;

    fn key(item: &Registry) -> &str {
        &item.address
    }

    fn seal_new(new: &mut NewRegistry, sealed: String) {
        new.sealed_password = sealed;
    }

    fn seal_change(change: &mut RegistryChange, sealed: String) {
        change.sealed_password = Some(sealed);
    }

    fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<Registry>> {
        registries::list(c, scope, page, per)
    }

    fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Registry> {
        Ok(registries::find(c, scope, key)?.registry)
    }

    fn create(c: &WriteTx, scope: ResourceScope, new: &NewRegistry) -> StoreResult<Registry> {
        registries::create(c, scope, new)
    }

    fn update(
        c: &WriteTx,
        scope: ResourceScope,
        key: &str,
        change: &RegistryChange,
    ) -> StoreResult<Registry> {
        registries::update(c, scope, key, change)
    }

    fn delete(c: &WriteTx, scope: ResourceScope, key: &str) -> StoreResult<Registry> {
        registries::delete(c, scope, key)
    }
}
