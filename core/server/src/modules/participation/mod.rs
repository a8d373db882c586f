//! The participation interface: algod's private participation-key and debug-settings API.
//!
//! Routes (below `[participation] mount`, default the root), all behind algod's **admin**
//! API token (`X-Algo-API-Token: <token>` or `Authorization: Bearer <token>`):
//!
//! | route | handler |
//! |---|---|
//! | `GET /v2/participation` | [`handlers::list`] |
//! | `POST /v2/participation` (raw partkey file) | [`handlers::add`] |
//! | `POST /v2/participation/generate/{address}?first=&last=&dilution=` | [`handlers::generate`] |
//! | `GET`, `DELETE`, `POST /v2/participation/{participation-id}` | [`handlers::get`], [`handlers::delete`], [`handlers::append_keys`] |
//! | `GET`, `PUT /debug/settings/pprof` | [`debug::get_pprof`], [`debug::put_pprof`] |
//! | `GET /debug/settings/config` | [`debug::get_config`] |
//! | `GET /debug/pprof/profile` (Woodlark's: the CPU profile, pprof protobuf) | [`debug::get_profile`] |
//!
//! Layout: [`handlers`] and [`debug`] (HTTP), [`state`] (the admin token, the key-generation
//! slot, the debug settings). Keys change only through the participation service
//! (`crate::participation::Keyring`), which seals private key material before it reaches the
//! store; it never leaves through the API. Errors are algod's `{"message": …}` JSON.
//! Wire-level choices that differ from algod are listed in docs/participation.md.

pub mod debug;
pub mod handlers;

use crate::http::{Method, Scope};
use crate::state::Ctx;

pub use crate::state::participation::{ADMIN_TOKEN_FILE, State};

/// Body limit of the two upload routes (partkey files, appended state-proof keys). algod sets
/// none; a partkey file with state-proof keys for 3,000,000 rounds is about 50 MB.
pub const MAX_UPLOAD_BYTES: usize = 128 * 1024 * 1024;

/// algod's participation routes below the module's mount.
pub(super) fn routes(scope: &mut Scope<'_, Ctx>) {
    // Uploads (partkey files, state-proof keys) may be far larger than the default limit:
    // their token is checked before a byte of them is read.
    let upload = MAX_UPLOAD_BYTES;
    scope
        .get("/debug/settings/pprof", debug::get_pprof)
        .put("/debug/settings/pprof", debug::put_pprof)
        .get("/debug/settings/config", debug::get_config)
        .get("/debug/pprof/profile", debug::get_profile)
        .get("/v2/participation", handlers::list)
        .route_guarded(
            Method::POST,
            "/v2/participation",
            upload,
            handlers::admin_sender,
            handlers::add,
        )
        .post("/v2/participation/generate/{address}", handlers::generate)
        .get("/v2/participation/{participation_id}", handlers::get)
        .delete("/v2/participation/{participation_id}", handlers::delete)
        .route_guarded(
            Method::POST,
            "/v2/participation/{participation_id}",
            upload,
            handlers::admin_sender,
            handlers::append_keys,
        );
}
