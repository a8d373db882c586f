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

/// The [`ScopedRecord`] of a store module (`$store`) of the secrets' shape: the same functions
/// under the same names, its rows keyed by `$key`, the clear value sealed into `$sealed`, and
/// `find` returning a row whose rendering is its `$found` field. One definition, so the
/// resources cannot drift apart.
macro_rules! scoped_record {
    ($record:ident, $noun:literal, $store:ident, $item:ty, $new:ty, $change:ty,
     key: $key:ident, sealed: $sealed:ident, found: $found:ident) => {
        impl ScopedRecord for $record {
            const NOUN: &'static str = $noun;
            const SEAL_PURPOSE: &'static str = $store::SEAL_PURPOSE;

            type Item = $item;
            type New = $new;
            type Change = $change;

            fn key(item: &$item) -> &str {
                &item.$key
            }

            fn seal_new(new: &mut $new, sealed: String) {
                new.$sealed = sealed;
            }

            fn seal_change(change: &mut $change, sealed: String) {
                change.$sealed = Some(sealed);
            }

            fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<$item>> {
                $store::list(c, scope, page, per)
            }

            fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<$item> {
                Ok($store::find(c, scope, key)?.$found)
            }

            fn create(c: &WriteTx, scope: ResourceScope, new: &$new) -> StoreResult<$item> {
                $store::create(c, scope, new)
            }

            fn update(
                c: &WriteTx,
                scope: ResourceScope,
                key: &str,
                change: &$change,
            ) -> StoreResult<$item> {
                $store::update(c, scope, key, change)
            }

            fn delete(c: &WriteTx, scope: ResourceScope, key: &str) -> StoreResult<$item> {
                $store::delete(c, scope, key)
            }
        }
    };
}

/// CI secrets: keyed by name, the value sealed.
pub struct Secrets;

scoped_record!(Secrets, "secret", secrets, Secret, NewSecret, SecretChange,
    key: name, sealed: sealed_value, found: secret);

/// Registry credentials: keyed by address, the password sealed.
pub struct Registries;

scoped_record!(Registries, "registry", registries, Registry, NewRegistry, RegistryChange,
    key: address, sealed: sealed_password, found: registry);
