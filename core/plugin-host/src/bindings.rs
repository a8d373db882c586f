//! Host-side bindings generated from `wit/` by `wasmtime::component::bindgen!`.
//!
//! The capabilities (`woodlark:host`) are bound once, through the `capabilities` world, and
//! every plugin world reuses them with `with:`, so one `Host` impl per capability serves all
//! worlds. Host functions are `trappable`: returning `Err` from them traps the guest (used for
//! limit breaches); expected failures are the WIT `plugin-error` values.
//!
//! Calls run in wasmtime's async mode (on the caller's tokio task, see `host.rs`): exports
//! are `async`, and so are the imports that wait on I/O (`http-client`, `kv`, and `signing`,
//! which reads secret values); the rest answer at once and stay synchronous.

/// `woodlark:host@0.1.0`: the capability interfaces.
pub mod caps {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "woodlark:host/capabilities@0.1.0",
        imports: {
            "woodlark:host/http-client": async | trappable,
            "woodlark:host/kv": async | trappable,
            "woodlark:host/signing": async | trappable,
            default: trappable,
        },
    });
}

/// `woodlark:plugins/forge-adapter@0.1.0`.
pub mod forge_v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "woodlark:plugins/forge-adapter@0.1.0",
        exports: { default: async },
        with: { "woodlark:host": crate::bindings::caps::woodlark::host },
    });
}

/// `woodlark:plugins/forge-adapter@0.2.0`: 0.1.0 plus sign-in, repositories, permissions,
/// orgs, pull requests and netrc; `api-context` gains `skip-verify`. The host lifts and
/// lowers every forge record through these types, also for 0.1.0 adapters (component types
/// are checked by shape, and only `api-context` changed shape; see `host.rs`).
pub mod forge_v0_2 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "woodlark:plugins/forge-adapter@0.2.0",
        exports: { default: async },
        with: { "woodlark:host": crate::bindings::caps::woodlark::host },
    });
}

/// `woodlark:plugins/secret-backend@0.1.0`.
pub mod secrets_v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "woodlark:plugins/secret-backend@0.1.0",
        exports: { default: async },
        with: { "woodlark:host": crate::bindings::caps::woodlark::host },
    });
}

/// `woodlark:plugins/registry-auth@0.1.0`.
pub mod registry_v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "woodlark:plugins/registry-auth@0.1.0",
        exports: { default: async },
        with: { "woodlark:host": crate::bindings::caps::woodlark::host },
    });
}
