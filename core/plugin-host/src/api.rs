//! The plain Rust traits the server's modules program against (DESIGN invariant: modules call
//! plugins through traits; only this crate knows wasmtime). [`PluginHost`] implements all
//! three; module tests can implement them with fakes.
//!
//! The methods return boxed futures so the traits can be used as `Arc<dyn ForgeAdapter>`.

use std::future::Future;
use std::pin::Pin;

use crate::error::PluginError;
use crate::host::PluginHost;
use crate::types::*;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Forge adapters, addressed by plugin instance name (e.g. `github`, or the forge type the
/// server maps to an instance).
pub trait ForgeAdapter: Send + Sync {
    /// The adapter that recognises the request, if any.
    fn recognize<'a>(&'a self, headers: &'a [(String, Vec<u8>)]) -> BoxFuture<'a, Option<String>>;
    fn parse_hook<'a>(
        &'a self,
        plugin: &'a str,
        req: HookRequest,
    ) -> BoxFuture<'a, Result<HookOutcome, PluginError>>;
    fn repo_info<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
    ) -> BoxFuture<'a, Result<Repo, PluginError>>;
    fn file_at<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        commit: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, PluginError>>;
    fn dir_at<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        commit: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, PluginError>>;
    fn branches<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, PluginError>>;
    fn post_status<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        commit: &'a str,
        status: CommitStatus,
    ) -> BoxFuture<'a, Result<(), PluginError>>;
    fn branch_head<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        branch: &'a str,
    ) -> BoxFuture<'a, Result<CommitInfo, PluginError>>;
    fn create_hook<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        url: &'a str,
        secret: &'a str,
    ) -> BoxFuture<'a, Result<(), PluginError>>;
    fn delete_hook<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        url: &'a str,
    ) -> BoxFuture<'a, Result<(), PluginError>>;
    /// The files pull request `pr_number` changes (PR payloads do not list them).
    fn changed_files<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        pr_number: u64,
    ) -> BoxFuture<'a, Result<Vec<String>, PluginError>>;
}

pub trait SecretBackend: Send + Sync {
    fn list_secrets<'a>(
        &'a self,
        plugin: &'a str,
        scope: SecretScope,
    ) -> BoxFuture<'a, Result<Vec<Secret>, PluginError>>;
    fn get_secret<'a>(
        &'a self,
        plugin: &'a str,
        scope: SecretScope,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, PluginError>>;
}

pub trait RegistryAuth: Send + Sync {
    fn credential_for<'a>(
        &'a self,
        plugin: &'a str,
        image: &'a str,
        repo: &'a str,
    ) -> BoxFuture<'a, Result<Option<Credential>, PluginError>>;
}

impl ForgeAdapter for PluginHost {
    fn recognize<'a>(&'a self, headers: &'a [(String, Vec<u8>)]) -> BoxFuture<'a, Option<String>> {
        Box::pin(PluginHost::recognize(self, headers))
    }
    fn parse_hook<'a>(
        &'a self,
        plugin: &'a str,
        req: HookRequest,
    ) -> BoxFuture<'a, Result<HookOutcome, PluginError>> {
        Box::pin(PluginHost::parse_hook(self, plugin, req))
    }
    fn repo_info<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
    ) -> BoxFuture<'a, Result<Repo, PluginError>> {
        Box::pin(PluginHost::repo_info(self, plugin, ctx, full_name))
    }
    fn file_at<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        commit: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, PluginError>> {
        Box::pin(PluginHost::file_at(
            self, plugin, ctx, full_name, commit, path,
        ))
    }
    fn dir_at<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        commit: &'a str,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, PluginError>> {
        Box::pin(PluginHost::dir_at(
            self, plugin, ctx, full_name, commit, path,
        ))
    }
    fn branches<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, PluginError>> {
        Box::pin(PluginHost::branches(self, plugin, ctx, full_name))
    }
    fn post_status<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        commit: &'a str,
        status: CommitStatus,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(PluginHost::post_status(
            self, plugin, ctx, full_name, commit, status,
        ))
    }
    fn branch_head<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        branch: &'a str,
    ) -> BoxFuture<'a, Result<CommitInfo, PluginError>> {
        Box::pin(PluginHost::branch_head(
            self, plugin, ctx, full_name, branch,
        ))
    }
    fn create_hook<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        url: &'a str,
        secret: &'a str,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(PluginHost::create_hook(
            self, plugin, ctx, full_name, url, secret,
        ))
    }
    fn delete_hook<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        url: &'a str,
    ) -> BoxFuture<'a, Result<(), PluginError>> {
        Box::pin(PluginHost::delete_hook(self, plugin, ctx, full_name, url))
    }
    fn changed_files<'a>(
        &'a self,
        plugin: &'a str,
        ctx: ApiContext,
        full_name: &'a str,
        pr_number: u64,
    ) -> BoxFuture<'a, Result<Vec<String>, PluginError>> {
        Box::pin(PluginHost::changed_files(
            self, plugin, ctx, full_name, pr_number,
        ))
    }
}

impl SecretBackend for PluginHost {
    fn list_secrets<'a>(
        &'a self,
        plugin: &'a str,
        scope: SecretScope,
    ) -> BoxFuture<'a, Result<Vec<Secret>, PluginError>> {
        Box::pin(PluginHost::list_secrets(self, plugin, scope))
    }
    fn get_secret<'a>(
        &'a self,
        plugin: &'a str,
        scope: SecretScope,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Secret>, PluginError>> {
        Box::pin(PluginHost::get_secret(self, plugin, scope, name))
    }
}

impl RegistryAuth for PluginHost {
    fn credential_for<'a>(
        &'a self,
        plugin: &'a str,
        image: &'a str,
        repo: &'a str,
    ) -> BoxFuture<'a, Result<Option<Credential>, PluginError>> {
        Box::pin(PluginHost::credential_for(self, plugin, image, repo))
    }
}
