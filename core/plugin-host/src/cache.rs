//! Content-addressed cache of compiled components.
//!
//! Key: `sha256(component bytes)` plus a hash of the engine's precompile-compatibility data
//! and the wasmtime version, so a different engine configuration or wasmtime never reads a
//! stale entry. Value: `Component::serialize()` written to `<dir>/<key>.cwasm` through a
//! temporary file and a rename.
//!
//! Loading a `.cwasm` is `unsafe` (it is trusted machine code), so the cache directory is
//! created with mode 0700 and is used only if it is owned by this process's user and not
//! writable by others; the cache never reads from the plugin directory.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::HostError;

pub(crate) struct ComponentCache {
    dir: Option<PathBuf>,
    engine_tag: String,
}

impl ComponentCache {
    /// A cache in `dir` (empty path: no disk cache).
    pub fn open(engine: &Engine, dir: &Path) -> Result<Self, HostError> {
        let mut h = DefaultHasher::new();
        compatibility(engine).hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        "wasmtime-48".hash(&mut h);
        let engine_tag = format!("{:016x}", h.finish());
        if dir.as_os_str().is_empty() {
            return Ok(Self {
                dir: None,
                engine_tag,
            });
        }
        let err = |source| HostError::CacheDir {
            path: dir.display().to_string(),
            source,
        };
        create_private_dir(dir).map_err(err)?;
        Ok(Self {
            dir: Some(dir.to_path_buf()),
            engine_tag,
        })
    }

    fn path_for(&self, sha256: &str) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("{sha256}-{}.cwasm", self.engine_tag)))
    }

    /// The compiled component for `bytes` (hash `sha256`): from the cache when present and
    /// loadable, else compiled now and stored.
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<Component> {
        let path = self.path_for(sha256);
        if let Some(p) = &path
            && p.is_file()
        {
            // SAFETY: the file sits in our private cache directory, was written by this
            // process (or an earlier run of it) from `Component::serialize`, and is keyed by
            // the engine's compatibility hash.
            match unsafe { Component::deserialize_file(engine, p) } {
                Ok(c) => {
                    tracing::debug!(path = %p.display(), "plugin cache hit");
                    return Ok(c);
                }
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "unusable cache entry; recompiling")
                }
            }
        }
        let code = precompile(engine, bytes)?;
        if let Some(p) = &path {
            match write_atomically(p, &code) {
                // Served from the file, as after a restart: its code pages belong to the
                // page cache (file-backed, reclaimable) instead of this process's heap.
                // SAFETY: as above; written just now from `precompile_component`.
                Ok(()) => return unsafe { Component::deserialize_file(engine, p) },
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "could not write plugin cache entry")
                }
            }
        }
        // SAFETY: `code` is what `precompile_component` made for this engine's configuration.
        unsafe { Component::deserialize(engine, &code) }
    }
}

/// `bytes` compiled for `engine`, by a throwaway engine of the same configuration when it
/// produces code `engine` accepts ([`crate::engine::compile_engine`]), else by `engine`.
fn precompile(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
    match crate::engine::compile_engine() {
        Ok(compiler) if compatibility(&compiler) == compatibility(engine) => {
            compiler.precompile_component(bytes)
        }
        _ => engine.precompile_component(bytes),
    }
}

/// A digest of what must match for `engine` to run code another engine compiled.
fn compatibility(engine: &Engine) -> u64 {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    h.finish()
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let meta = fs::metadata(dir)?;
        // The owner check compares with a file we just created (no libc needed).
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = dir.join(format!(".owner-probe-{}-{n}", std::process::id()));
        fs::write(&probe, b"")?;
        let mine = fs::metadata(&probe)?.uid();
        let _ = fs::remove_file(&probe);
        if meta.uid() != mine {
            return Err(std::io::Error::other("not owned by the server's user"));
        }
        if meta.mode() & 0o077 != 0 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        }
    }
    #[cfg(not(unix))]
    fs::create_dir_all(dir)?;
    Ok(())
}

fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}
