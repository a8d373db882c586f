//! Resources that live at three scopes (instance, organisation, repository) — secrets and
//! registries — written through one flow: create, update, delete, each with its audit line.

use serde::Serialize;

use super::{Error, Services};
use crate::store::secrets::ResourceScope;
use crate::store::{StoreResult, Tx};

/// One kind of scoped record: what it is called and which store functions keep it.
/// Implementors are unit structs; nothing is instantiated.
pub trait ScopedRecord: 'static {
    /// The noun in log lines (`secret created`).
    const NOUN: &'static str;

    /// The API rendering (never carries a sealed value).
    type Item: Serialize + Send + 'static;
    /// A validated, sealed new item.
    type New: Send + 'static;
    /// A validated, sealed change.
    type Change: Send + 'static;

    /// The item's key, for log lines.
    fn key(item: &Self::Item) -> &str;

    fn list(c: &Tx, scope: ResourceScope, page: u32, per: u32) -> StoreResult<Vec<Self::Item>>;
    fn find(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Self::Item>;
    fn create(c: &Tx, scope: ResourceScope, new: &Self::New) -> StoreResult<Self::Item>;
    fn update(
        c: &Tx,
        scope: ResourceScope,
        key: &str,
        change: &Self::Change,
    ) -> StoreResult<Self::Item>;
    fn delete(c: &Tx, scope: ResourceScope, key: &str) -> StoreResult<Self::Item>;
}

/// Stores a new `R` in `scope`; a duplicate key is a conflict.
pub async fn create<R: ScopedRecord>(
    ci: &Services,
    scope: ResourceScope,
    new: R::New,
) -> Result<R::Item, Error> {
    let item = ci.store.write(move |c| R::create(c, scope, &new)).await?;
    audit::<R>(&item, scope, "created");
    Ok(item)
}

/// Applies `change` to `R` `key` in `scope`.
pub async fn update<R: ScopedRecord>(
    ci: &Services,
    scope: ResourceScope,
    key: String,
    change: R::Change,
) -> Result<R::Item, Error> {
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
