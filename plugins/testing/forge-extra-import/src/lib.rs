//! TEST ONLY. Exports `woodlark:forge/forge` but also imports `woodlark:host/kv`, which the
//! `forge-adapter` world does not grant: the host must reject it at load time.

wit_bindgen::generate!({
    path: "../../../wit",
    inline: "
        package woodlark:testing@0.1.0;
        world forge-with-kv {
            import woodlark:host/kv@0.1.0;
            export woodlark:forge/forge@0.1.0;
        }
    ",
    world: "woodlark:testing/forge-with-kv@0.1.0",
    generate_all,
});

use exports::woodlark::forge0_1_0::forge::*;
use woodlark::host::types::{Header, PluginError};

struct ExtraImport;

export!(ExtraImport);

fn nope() -> PluginError {
    PluginError::Unavailable("test plugin".into())
}

impl Guest for ExtraImport {
    fn recognize(_headers: Vec<Header>) -> bool {
        false
    }
    fn parse_hook(_req: HookRequest) -> Result<Outcome, PluginError> {
        // Uses the kv import so it stays in the component.
        let _ = woodlark::host::kv::get("k");
        Ok(Outcome::Ignored("never".into()))
    }
    fn repo_info(_: ApiContext, _: String) -> Result<Repo, PluginError> {
        Err(nope())
    }
    fn file_at(
        _: ApiContext,
        _: String,
        _: String,
        _: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        Err(nope())
    }
    fn dir_at(_: ApiContext, _: String, _: String, _: String) -> Result<Vec<String>, PluginError> {
        Err(nope())
    }
    fn branches(_: ApiContext, _: String) -> Result<Vec<String>, PluginError> {
        Err(nope())
    }
    fn post_status(
        _: ApiContext,
        _: String,
        _: String,
        _: CommitStatus,
    ) -> Result<(), PluginError> {
        Err(nope())
    }
    fn branch_head(_: ApiContext, _: String, _: String) -> Result<CommitInfo, PluginError> {
        Err(nope())
    }
    fn create_hook(_: ApiContext, _: String, _: String, _: String) -> Result<(), PluginError> {
        Err(nope())
    }
    fn delete_hook(_: ApiContext, _: String, _: String) -> Result<(), PluginError> {
        Err(nope())
    }
    fn changed_files(_: ApiContext, _: String, _: u64) -> Result<Vec<String>, PluginError> {
        Err(nope())
    }
}
