//! The requests every forge adapter makes on its forge's REST API, in one place.
//!
//! Why: the adapters' API methods are the same few requests on every forge (GET a resource
//! that must exist, GET a list of names or a folder's files where 404 means "none", GET a
//! file's raw bytes, POST a commit status) and differ only in URLs, field names and state
//! names. Written out per adapter they were copies of each other, so a fix to one forge's
//! request handling did not reach the others. [`ApiClient`] makes the requests and
//! [`StatusFormat`] / [`Listing`] name what differs; the wire format is [`crate::http`]'s.

use serde_json::{Map, Value};

use super::{ApiContext, CommitStatus, Header, PluginError, StatusState, auth_header, invalid};
use crate::http;
use crate::json::{array_at, str_at};

/// A forge API client for one call: the `Authorization` value built from the context's token
/// (none when the token is empty) sent with every request.
pub struct ApiClient {
    authorization: Option<String>,
}

impl ApiClient {
    /// Sends `Authorization: {scheme} {token}`.
    pub fn new(ctx: &ApiContext, scheme: &str) -> ApiClient {
        ApiClient {
            authorization: auth_header(ctx, scheme),
        }
    }

    /// `Authorization: Bearer {token}` (GitHub, GitLab, Bitbucket).
    pub fn bearer(ctx: &ApiContext) -> ApiClient {
        ApiClient::new(ctx, "Bearer")
    }

    /// `Authorization: token {token}` (Gitea, Forgejo).
    pub fn token(ctx: &ApiContext) -> ApiClient {
        ApiClient::new(ctx, "token")
    }

    /// The `Authorization` value, if there is a token.
    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// GET JSON: `None` on 404 (see [`http::get_json`]).
    pub fn get(&self, url: &str) -> Result<Option<Value>, PluginError> {
        http::get_json(url, self.authorization())
    }

    /// GET JSON about the caller's own access: `None` on 404 and on a 403 that is not a
    /// rate limit (see [`http::get_json_for_access`]).
    pub fn get_for_access(&self, url: &str) -> Result<Option<Value>, PluginError> {
        http::get_json_for_access(url, self.authorization())
    }

    /// GET JSON that must exist: 404 is the error `not_found` makes.
    pub fn get_found(
        &self,
        url: &str,
        not_found: impl FnOnce() -> PluginError,
    ) -> Result<Value, PluginError> {
        self.get(url)?.ok_or_else(not_found)
    }

    /// GET JSON where 404 reads as `null`, which the list readers take as empty.
    pub fn get_or_null(&self, url: &str) -> Result<Value, PluginError> {
        Ok(self.get(url)?.unwrap_or(Value::Null))
    }

    /// The string at `field` of each item of the list at `items` (`""`: the reply is the
    /// list), e.g. branch names; empty on 404.
    pub fn names(&self, url: &str, items: &str, field: &str) -> Result<Vec<String>, PluginError> {
        let v = self.get_or_null(url)?;
        Ok(array_at(&v, items)
            .iter()
            .map(|i| str_at(i, field))
            .collect())
    }

    /// The files a folder listing names (see [`Listing`]); empty on 404.
    pub fn files(&self, url: &str, listing: &Listing) -> Result<Vec<String>, PluginError> {
        Ok(listing.files(&self.get_or_null(url)?))
    }

    /// The files of a GitHub-style contents listing ([`contents_url`]); see
    /// [`http::get_contents_files`].
    pub fn contents_files(&self, url: &str) -> Result<Vec<String>, PluginError> {
        http::get_contents_files(url, self.authorization())
    }

    /// A file's raw bytes, GET with `extra` headers: `None` on 404, `Unavailable` naming `api`
    /// on another status (see [`http::get_file`]).
    pub fn raw_file(
        &self,
        url: &str,
        extra: Vec<Header>,
        api: &str,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        http::get_file(url, extra, self.authorization(), api)
    }

    /// POSTs `status` to `url` as the forge's `format` has it; `Unavailable` unless 2xx.
    pub fn post_status(
        &self,
        url: &str,
        format: &StatusFormat,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        http::send_json("POST", url, self.authorization(), &format.body(status)).map(|_| ())
    }
}

/// How a forge's API reads a commit status: its names for the states, and the fields that
/// carry the status's context and link. The body is `state`, the context fields,
/// `description`, then the link field, in that order.
pub struct StatusFormat {
    pub pending: &'static str,
    pub running: &'static str,
    pub success: &'static str,
    pub failure: &'static str,
    pub error: &'static str,
    pub killed: &'static str,
    /// Fields set to the status's context (Bitbucket wants it as both `key` and `name`).
    pub context: &'static [&'static str],
    /// Field set to the link to the pipeline.
    pub link: &'static str,
}

impl StatusFormat {
    /// GitHub's statuses API, which Gitea and Forgejo copy.
    pub const GITHUB: StatusFormat = StatusFormat {
        pending: "pending",
        running: "pending",
        success: "success",
        failure: "failure",
        error: "error",
        killed: "error",
        context: &["context"],
        link: "target_url",
    };

    /// Bitbucket Cloud's build statuses; Data Center's take the same body.
    pub const BITBUCKET: StatusFormat = StatusFormat {
        pending: "INPROGRESS",
        running: "INPROGRESS",
        success: "SUCCESSFUL",
        failure: "FAILED",
        error: "FAILED",
        killed: "STOPPED",
        context: &["key", "name"],
        link: "url",
    };

    /// The forge's name for `state`.
    pub fn state(&self, state: StatusState) -> &'static str {
        match state {
            StatusState::Pending => self.pending,
            StatusState::Running => self.running,
            StatusState::Success => self.success,
            StatusState::Failure => self.failure,
            StatusState::Error => self.error,
            StatusState::Killed => self.killed,
        }
    }

    /// The JSON body for `status`.
    /// An empty description becomes upstream's text for the state ([`status_description`]).
    pub fn body(&self, status: CommitStatus) -> Value {
        let mut body = Map::new();
        body.insert("state".into(), self.state(status.state).into());
        for field in self.context {
            body.insert((*field).into(), status.context.clone().into());
        }
        let description = if status.description.is_empty() {
            status_description(status.state).to_string()
        } else {
            status.description
        };
        body.insert("description".into(), description.into());
        body.insert(self.link.into(), status.target_url.into());
        Value::Object(body)
    }
}

/// How a forge's API lists a folder: JSON pointers to the entry array and, within an entry,
/// its path; and the `type` value that marks a file (not a folder or submodule).
pub struct Listing {
    /// JSON pointer of the entry array (`""`: the reply is the array).
    pub items: &'static str,
    /// The entry's `type` for a file.
    pub file_type: &'static str,
    /// JSON pointer, within an entry, of its path.
    pub path: &'static str,
}

impl Listing {
    /// The paths of the file entries of `listing`.
    pub fn files(&self, listing: &Value) -> Vec<String> {
        array_at(listing, self.items)
            .iter()
            .filter(|e| e["type"] == self.file_type)
            .map(|e| str_at(e, self.path))
            .collect()
    }
}

/// `{api}/repos/{full_name}/contents/{path}?ref={commit}`: a file or folder at a commit in the
/// GitHub-style contents API (GitHub, Gitea, Forgejo).
pub fn contents_url(api: &str, full_name: &str, path: &str, commit: &str) -> String {
    format!(
        "{api}/repos/{full_name}/contents/{}?ref={}",
        http::encode_path(path),
        http::encode(commit)
    )
}

/// Upstream Woodpecker's status description for `state`, for when the server sends none.
pub fn status_description(state: StatusState) -> &'static str {
    match state {
        StatusState::Pending => "Pipeline is pending",
        StatusState::Running => "Pipeline is running",
        StatusState::Success => "Pipeline was successful",
        StatusState::Failure | StatusState::Error => "Pipeline failed",
        StatusState::Killed => "Pipeline was canceled",
    }
}

/// True when a `Link` response header (RFC 8288, as GitHub, Gitea and GitLab send it) has a
/// `rel="next"` entry.
pub fn link_has_next(link: Option<&str>) -> bool {
    link.is_some_and(|l| {
        l.split(',').any(|part| {
            part.split(';')
                .skip(1)
                .any(|p| matches!(p.trim(), "rel=\"next\"" | "rel=next"))
        })
    })
}

/// `not found` for a repository, as `repo-info` reports it.
pub fn no_repo(full_name: &str) -> PluginError {
    invalid(format!("repository {full_name} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: StatusState) -> CommitStatus {
        CommitStatus {
            state,
            context: "ci/woodlark".into(),
            description: "running".into(),
            target_url: "https://ci.example/1".into(),
            branch: "main".into(),
            event: "push".into(),
            started: 0,
            finished: 0,
        }
    }

    #[test]
    fn github_status_body() {
        // The bytes the adapters sent when they wrote the body with `json!` themselves.
        let before = serde_json::json!({
            "state": "error",
            "context": "ci/woodlark",
            "description": "running",
            "target_url": "https://ci.example/1",
        });
        let body = StatusFormat::GITHUB.body(status(StatusState::Killed));
        assert_eq!(body.to_string(), before.to_string());
    }

    #[test]
    fn context_in_several_fields() {
        let format = StatusFormat {
            running: "RUN",
            ..StatusFormat::BITBUCKET
        };
        let body = format.body(status(StatusState::Running));
        assert_eq!(body["state"], "RUN");
        assert_eq!(body["key"], "ci/woodlark");
        assert_eq!(body["name"], "ci/woodlark");
        assert_eq!(body["url"], "https://ci.example/1");
    }

    #[test]
    fn listing_keeps_files() {
        let v = serde_json::json!({"values": [
            {"type": "FILE", "path": "a.yml"},
            {"type": "DIRECTORY", "path": "sub"},
            {"type": "FILE"},
        ]});
        let listing = Listing {
            items: "/values",
            file_type: "FILE",
            path: "/path",
        };
        assert_eq!(listing.files(&v), ["a.yml", ""]);
        assert!(listing.files(&Value::Null).is_empty());
    }

    #[test]
    fn empty_description_is_upstreams() {
        let mut s = status(StatusState::Killed);
        s.description.clear();
        assert_eq!(
            StatusFormat::GITHUB.body(s)["description"],
            "Pipeline was canceled"
        );
    }

    #[test]
    fn next_links() {
        let l = r#"<https://api/x?page=2>; rel="next", <https://api/x?page=5>; rel="last""#;
        assert!(link_has_next(Some(l)));
        assert!(!link_has_next(Some(
            r#"<https://api/x?page=1>; rel="prev""#
        )));
        assert!(!link_has_next(None));
    }

    #[test]
    fn contents() {
        assert_eq!(
            contents_url("https://api", "o/r", ".woodpecker/a b.yml", "main"),
            "https://api/repos/o/r/contents/.woodpecker/a%20b.yml?ref=main"
        );
    }
}
