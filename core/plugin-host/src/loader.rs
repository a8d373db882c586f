//! Turning a file into a ready-to-call plugin, or a [`LoadError`].
//!
//! Steps (all off the async runtime): read and hash the bytes → compiled component from the
//! cache or the compiler → the world and version from the component's exports → compare
//! with the configured world → `instantiate_pre` against that world's linker (an import the
//! world does not grant fails here, not at the first webhook) → the typed `*Pre` of the
//! world's bindings (checks the export's names) → the index of each exported function,
//! so a call looks up (and type-checks) only the function it calls.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};

use crate::bindings::{forge_v0_1, forge_v0_2, registry_v0_1, secrets_v0_1};
use crate::cache::ComponentCache;
use crate::config::{InstanceConfig, Limits};
use crate::error::LoadError;
use crate::state::{CallState, Grants};
use crate::types::WorldKind;

/// Largest component file accepted.
pub(crate) const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// A world's pre-instantiated bindings, one variant per supported world version.
pub(crate) enum WorldPre {
    ForgeV0_1(forge_v0_1::ForgeAdapterPre<CallState>),
    ForgeV0_2(forge_v0_2::ForgeAdapterPre<CallState>),
    SecretsV0_1(secrets_v0_1::SecretBackendPre<CallState>),
    RegistryV0_1(registry_v0_1::RegistryAuthPre<CallState>),
}

impl WorldPre {
    /// The untyped `InstancePre` under the world's bindings.
    pub fn instance_pre(&self) -> &InstancePre<CallState> {
        match self {
            Self::ForgeV0_1(p) => p.instance_pre(),
            Self::ForgeV0_2(p) => p.instance_pre(),
            Self::SecretsV0_1(p) => p.instance_pre(),
            Self::RegistryV0_1(p) => p.instance_pre(),
        }
    }
}

/// The functions of the world's exported interface, by WIT name (`parse-hook`), resolved
/// once at load. The bindings' `*Pre::instantiate` re-checks the types of every export on
/// every instantiation; a call through these checks only the function it calls.
pub(crate) struct ExportFuncs(HashMap<String, ComponentExportIndex>);

impl ExportFuncs {
    fn resolve(
        engine: &Engine,
        component: &Component,
        world: WorldKind,
        version: &str,
    ) -> Result<Self, LoadError> {
        let missing = |what: String| LoadError::Exports {
            world,
            message: format!("no export {what}"),
        };
        let iface = format!("{}@{version}", world.export_interface());
        let Some(ComponentItem::ComponentInstance(ty)) = component
            .component_type()
            .get_export(engine, &iface)
            .map(|e| e.ty)
        else {
            return Err(missing(iface));
        };
        let (_, iface_index) = component
            .get_export(None, &iface)
            .ok_or_else(|| missing(iface.clone()))?;
        let mut funcs = HashMap::new();
        for (name, item) in ty.exports(engine) {
            if matches!(item.ty, ComponentItem::ComponentFunc(_)) {
                let (_, index) = component
                    .get_export(Some(&iface_index), name)
                    .ok_or_else(|| missing(format!("{iface}#{name}")))?;
                funcs.insert(name.to_string(), index);
            }
        }
        Ok(Self(funcs))
    }

    /// The index of function `name`; an error (a failed call, not a panic) if the world's
    /// interface has none of that name.
    pub fn get(&self, name: &str) -> wasmtime::Result<&ComponentExportIndex> {
        self.0
            .get(name)
            .ok_or_else(|| wasmtime::format_err!("the plugin exports no function {name:?}"))
    }
}

/// One loaded version of one plugin instance. Immutable; a reload makes a new one, and
/// in-flight calls keep the `Arc` of the version they started on.
pub(crate) struct LoadedPlugin {
    pub name: Arc<str>,
    pub world: WorldKind,
    pub version: String,
    pub sha256: String,
    pub loaded_at: SystemTime,
    pub pre: WorldPre,
    pub exports: ExportFuncs,
    pub grants: Arc<Grants>,
    pub limits: Limits,
    pub engine: Engine,
}

impl LoadedPlugin {
    /// A forge adapter built against contract 0.1.x (whose `api-context` has no
    /// `skip-verify`, and which lacks the 0.2.0 functions).
    pub fn is_forge_v0_1(&self) -> bool {
        matches!(self.pre, WorldPre::ForgeV0_1(_))
    }
}

/// The contract versions (`major.minor.`) this host loads, per world.
fn supported_versions(world: WorldKind) -> (&'static [&'static str], &'static str) {
    match world {
        WorldKind::ForgeAdapter => (&["0.1.", "0.2."], "0.1.x and 0.2.x"),
        WorldKind::SecretBackend | WorldKind::RegistryAuth => (&["0.1."], "0.1.x"),
    }
}

pub(crate) struct Linkers {
    pub forge: Linker<CallState>,
    pub secrets: Linker<CallState>,
    pub registry: Linker<CallState>,
}

impl Linkers {
    fn for_world(&self, w: WorldKind) -> &Linker<CallState> {
        match w {
            WorldKind::ForgeAdapter => &self.forge,
            WorldKind::SecretBackend => &self.secrets,
            WorldKind::RegistryAuth => &self.registry,
        }
    }
}

pub(crate) fn read_file(path: &Path) -> Result<(Vec<u8>, String), LoadError> {
    let read_err = |e: std::io::Error| LoadError::Read {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let size = std::fs::metadata(path).map_err(read_err)?.len();
    if size > MAX_COMPONENT_BYTES {
        return Err(LoadError::TooBig {
            path: path.display().to_string(),
            size,
            limit: MAX_COMPONENT_BYTES,
        });
    }
    let bytes = std::fs::read(path).map_err(read_err)?;
    let sha = hex(&Sha256::digest(&bytes));
    Ok((bytes, sha))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which world and version a component exports, from its export names
/// (`woodlark:forge/forge@0.1.0` → forge-adapter, `0.1.0`).
pub(crate) fn detect_world(
    engine: &Engine,
    component: &Component,
) -> Result<(WorldKind, String), LoadError> {
    let ty = component.component_type();
    let mut found = Vec::new();
    for (name, item) in ty.exports(engine) {
        found.push(name.to_string());
        if !matches!(item.ty, ComponentItem::ComponentInstance(_)) {
            continue;
        }
        let (iface, version) = name.split_once('@').unwrap_or((name, ""));
        for world in [
            WorldKind::ForgeAdapter,
            WorldKind::SecretBackend,
            WorldKind::RegistryAuth,
        ] {
            if iface == world.export_interface() {
                let (prefixes, supported) = supported_versions(world);
                if !prefixes.iter().any(|p| version.starts_with(p)) {
                    return Err(LoadError::UnsupportedVersion {
                        interface: iface.to_string(),
                        version: version.to_string(),
                        supported,
                    });
                }
                return Ok((world, version.to_string()));
            }
        }
    }
    Err(LoadError::UnknownWorld {
        found: if found.is_empty() {
            "nothing".into()
        } else {
            found.join(", ")
        },
    })
}

/// Says what a file is when it is not a binary component, before the compiler gives a
/// less direct answer: WebAssembly text, a core module, or no WebAssembly at all.
fn check_binary_component(bytes: &[u8]) -> Result<(), LoadError> {
    const MAGIC: &[u8] = b"\0asm";
    let refuse = |what: &str| Err(LoadError::Compile(what.to_string()));
    if !bytes.starts_with(MAGIC) {
        let text = bytes.iter().find(|b| !b.is_ascii_whitespace());
        return if matches!(text, Some(b'(' | b';')) {
            refuse(
                "the file is WebAssembly text (WAT), not a binary component: plugins are loaded as binary components (build them as plugins/README.md shows, or convert the text with `wasm-tools parse`)",
            )
        } else {
            refuse("not a WebAssembly binary (the file does not start with \\0asm)")
        };
    }
    // Bytes 6..8 are the layer: 0 for a core module, 1 for a component.
    if bytes.get(6..8) == Some(&[0, 0]) {
        return refuse(
            "a core WebAssembly module, not a component: make it one with `wasm-tools component new` (cargo's wasm32-wasip2 target does this), see plugins/README.md",
        );
    }
    Ok(())
}

/// Loads `bytes` as instance `name`. Pure with respect to the registry: the caller swaps.
#[allow(clippy::too_many_arguments)]
pub(crate) fn load(
    engine: &Engine,
    cache: &ComponentCache,
    linkers: &Linkers,
    name: &str,
    inst: &InstanceConfig,
    defaults: &Limits,
    bytes: &[u8],
    sha256: &str,
) -> Result<LoadedPlugin, LoadError> {
    check_binary_component(bytes)?;
    let component = cache
        .load_or_compile(engine, sha256, bytes)
        .map_err(|e| LoadError::Compile(format!("{e:#}")))?;
    let (world, version) = detect_world(engine, &component)?;
    if let Some(configured) = inst.world
        && configured != world
    {
        return Err(LoadError::WrongWorld {
            configured,
            actual: world,
        });
    }
    let instance_pre = linkers
        .for_world(world)
        .instantiate_pre(&component)
        .map_err(|e| LoadError::Link(format!("{e:#}")))?;
    let exports_err = |e: wasmtime::Error| LoadError::Exports {
        world,
        message: format!("{e:#}"),
    };
    let pre = match world {
        WorldKind::ForgeAdapter if version.starts_with("0.1.") => WorldPre::ForgeV0_1(
            forge_v0_1::ForgeAdapterPre::new(instance_pre).map_err(exports_err)?,
        ),
        WorldKind::ForgeAdapter => WorldPre::ForgeV0_2(
            forge_v0_2::ForgeAdapterPre::new(instance_pre).map_err(exports_err)?,
        ),
        WorldKind::SecretBackend => WorldPre::SecretsV0_1(
            secrets_v0_1::SecretBackendPre::new(instance_pre).map_err(exports_err)?,
        ),
        WorldKind::RegistryAuth => WorldPre::RegistryV0_1(
            registry_v0_1::RegistryAuthPre::new(instance_pre).map_err(exports_err)?,
        ),
    };
    let exports = ExportFuncs::resolve(engine, &component, world, &version)?;
    Ok(LoadedPlugin {
        name: Arc::from(name),
        world,
        version,
        sha256: sha256.to_string(),
        loaded_at: SystemTime::now(),
        pre,
        exports,
        grants: Arc::new(Grants::from_config(inst)),
        limits: inst.limits(defaults),
        engine: engine.clone(),
    })
}

#[cfg(test)]
mod binary_tests {
    use super::*;

    #[test]
    fn text_core_modules_and_other_files_are_named_for_what_they_are() {
        let said = |bytes: &[u8]| check_binary_component(bytes).unwrap_err().to_string();
        assert!(said(b"\n  (component\n)").contains("WebAssembly text (WAT)"));
        assert!(said(b";; a comment\n(module)").contains("WebAssembly text (WAT)"));
        assert!(said(b"\0asm\x01\0\0\0").contains("core WebAssembly module"));
        assert!(said(b"#!/bin/sh").contains("not a WebAssembly binary"));
        assert!(check_binary_component(b"\0asm\x0d\0\x01\0").is_ok());
    }
}
