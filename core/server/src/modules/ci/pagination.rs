//! A page of a store read, as Woodpecker's `page` / `perPage` name it (`http::paging`).

pub use crate::http::paging::{MAX_PER_PAGE, Page};
use crate::http::{ApiError, Request};
use crate::state::Ctx;
use crate::store::{StoreResult, Tx};

/// One page of a list, read through `ctx.ci.reads`: `list` gets the request's page number and
/// size (see [`Page::from_request`]). The list endpoints' one way to page a store read.
pub async fn read_page<T, F>(ctx: &Ctx, req: &Request, list: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnMut(&Tx, u32, u32) -> StoreResult<T> + Send + 'static,
{
    let mut list = list;
    let page = Page::from_request(req);
    Ok(ctx
        .ci
        .reads
        .read(move |c| list(c, page.page, page.per_page))
        .await?)
}
