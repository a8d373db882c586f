//! # woodlark-plugin-sdk
//!
//! Write a Woodlark plugin in Rust: implement one trait, call one macro, build with
//! `plugins/build.sh` (or `cargo build --release --target wasm32-unknown-unknown` with
//! `wasm-component-ld` as the linker). The result is a WebAssembly component the server
//! loads from its plugin directory.
//!
//! ## Layout
//!
//! - Pick the world with a cargo feature, exactly one of `forge`, `secrets`, `registry`.
//! - [`forge`] (feature `forge`): [`forge::ForgeAdapter`] and [`forge_adapter!`];
//!   [`forge::ApiClient`] makes the requests of the forge-API functions.
//! - [`secrets`] / [`registry`]: [`secrets::SecretBackend`] + [`secret_backend!`],
//!   [`registry::RegistryAuth`] + [`registry_auth!`].
//! - Host capabilities, thin and safe wrappers: [`log`], [`config`], [`clock`], [`http`],
//!   `kv` (secrets/registry worlds), `signing` helpers inside [`forge`].
//! - [`json`]: small `serde_json::Value` accessors that make payload parsing short.
//! - `arena` (default feature `call-arena`, wasm only): the global allocator, a bump arena
//!   suited to the host's fresh instance per call.
//!
//! ```ignore
//! use woodlark_plugin_sdk::forge::*;
//!
//! struct MyForge;
//! impl ForgeAdapter for MyForge {
//!     fn recognize(headers: &[Header]) -> bool { header(headers, "x-my-event").is_some() }
//!     fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
//!         Ok(ignored("nothing to do"))
//!     }
//! }
//! woodlark_plugin_sdk::forge_adapter!(MyForge);
//! ```
//!
//! What a plugin can do is exactly what its world imports and the operator grants in
//! `config.toml`: no file system, no environment, no sockets except the allow-listed HTTP
//! client.

#[cfg(any(
    all(feature = "forge", feature = "secrets"),
    all(feature = "forge", feature = "registry"),
    all(feature = "secrets", feature = "registry"),
))]
compile_error!("enable exactly one of the features `forge`, `secrets`, `registry`");
#[cfg(not(any(feature = "forge", feature = "secrets", feature = "registry")))]
compile_error!("enable one of the features `forge`, `secrets`, `registry` (the plugin's world)");

extern crate self as woodlark_plugin_sdk;

pub use serde;
pub use serde_json;
#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

#[cfg(feature = "forge")]
#[doc(hidden)]
pub mod forge_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "woodlark:plugins/forge-adapter@0.2.0",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_forge_adapter",
        default_bindings_module: "::woodlark_plugin_sdk::forge_bindings",
        runtime_path: "::woodlark_plugin_sdk::__wit_bindgen::rt",
    });
}

#[cfg(feature = "secrets")]
#[doc(hidden)]
pub mod secrets_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "woodlark:plugins/secret-backend@0.1.0",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_secret_backend",
        default_bindings_module: "::woodlark_plugin_sdk::secrets_bindings",
        runtime_path: "::woodlark_plugin_sdk::__wit_bindgen::rt",
    });
}

#[cfg(feature = "registry")]
#[doc(hidden)]
pub mod registry_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "woodlark:plugins/registry-auth@0.1.0",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "__export_registry_auth",
        default_bindings_module: "::woodlark_plugin_sdk::registry_bindings",
        runtime_path: "::woodlark_plugin_sdk::__wit_bindgen::rt",
    });
}

/// The host interfaces of whichever world this build targets.
#[cfg(feature = "forge")]
pub(crate) use forge_bindings::woodlark::host as host_api;
#[cfg(feature = "registry")]
pub(crate) use registry_bindings::woodlark::host as host_api;
#[cfg(feature = "secrets")]
pub(crate) use secrets_bindings::woodlark::host as host_api;

pub use host_api::types::{Header, PluginError};

#[cfg(all(
    feature = "call-arena",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
pub mod arena;
pub mod clock;
pub mod config;
#[cfg(feature = "forge")]
pub mod forge;
pub mod headers;
pub mod http;
pub mod json;
#[cfg(any(feature = "secrets", feature = "registry"))]
pub mod kv;
pub mod log;
#[cfg(feature = "registry")]
pub mod registry;
#[cfg(feature = "secrets")]
pub mod secrets;

pub use headers::header;

/// The one body of [`forge_adapter!`], [`secret_backend!`] and [`registry_auth!`]: names the
/// world's `Bridge<T>` and hands it to that world's wit-bindgen export macro. A build serves
/// exactly one world (the features above), so one alias name serves all three.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_world {
    ($world:ident, $bindings:ident :: $export:ident, $ty:ty) => {
        type __WoodlarkExport = $crate::$world::Bridge<$ty>;
        $crate::$bindings::$export!(__WoodlarkExport with_types_in $crate::$bindings);
    };
}

/// `PluginError::InvalidInput` with a message.
pub fn invalid(msg: impl Into<String>) -> PluginError {
    PluginError::InvalidInput(msg.into())
}

/// `PluginError::Denied` with a message.
pub fn denied(msg: impl Into<String>) -> PluginError {
    PluginError::Denied(msg.into())
}

/// `PluginError::Unavailable` with a message.
pub fn unavailable(msg: impl Into<String>) -> PluginError {
    PluginError::Unavailable(msg.into())
}
