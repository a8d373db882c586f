//! Forges: where repositories live (a local `git` directory, or GitHub, Gitea, … through
//! forge-adapter plugins). Each has a random webhook secret, sealed at rest.

use crate::{OptionalExtension, Row};
use crate::{Tx, WriteTx};
use rusqlite::params;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use super::events::{self, Action, Owner};
use super::{StoreError, StoreResult};

pub const RECORD_TYPE: events::RecordType = events::RecordType::Forges;

/// The kinds of forge. `Git` is Woodlark's own (local repositories, served through the `git`
/// binary); the others are Woodpecker's forge types, served by forge-adapter plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ForgeKind {
    /// Also what a [`Forge`] read from its `data` column holds until the `type` column is
    /// read over it.
    #[default]
    Git,
    Github,
    Gitlab,
    Gitea,
    Forgejo,
    Bitbucket,
    BitbucketDc,
    Addon,
}

impl ForgeKind {
    pub const ALL: [ForgeKind; 8] = [
        ForgeKind::Git,
        ForgeKind::Github,
        ForgeKind::Gitlab,
        ForgeKind::Gitea,
        ForgeKind::Forgejo,
        ForgeKind::Bitbucket,
        ForgeKind::BitbucketDc,
        ForgeKind::Addon,
    ];

    /// The stored name (`woodlark_type` on the wire, `CI_FORGE_TYPE` in pipelines).
    pub fn as_str(self) -> &'static str {
        match self {
            ForgeKind::Git => "git",
            ForgeKind::Github => "github",
            ForgeKind::Gitlab => "gitlab",
            ForgeKind::Gitea => "gitea",
            ForgeKind::Forgejo => "forgejo",
            ForgeKind::Bitbucket => "bitbucket",
            ForgeKind::BitbucketDc => "bitbucket-dc",
            ForgeKind::Addon => "addon",
        }
    }

    /// The kind named `text`, if it is one.
    pub fn parse(text: &str) -> Option<ForgeKind> {
        ForgeKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// The `type` the API reports. The web UI turns `type` into an icon and fails to render
    /// an unknown one, so the built-in `git` forge is reported as `addon` (a generic git
    /// icon); the stored kind travels in `woodlark_type`, and the API accepts either name on
    /// writes.
    pub fn api_name(self) -> &'static str {
        match self {
            ForgeKind::Git => ForgeKind::Addon.as_str(),
            other => other.as_str(),
        }
    }

    /// Served by the server itself rather than by a forge-adapter plugin.
    pub fn is_builtin(self) -> bool {
        self == ForgeKind::Git
    }
}

impl std::fmt::Display for ForgeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl rusqlite::types::ToSql for ForgeKind {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(self.as_str().into())
    }
}

impl rusqlite::types::FromSql for ForgeKind {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let text = value.as_str()?;
        ForgeKind::parse(text).ok_or_else(|| {
            rusqlite::types::FromSqlError::Other(format!("unknown forge type {text:?}").into())
        })
    }
}

/// A forge as admins see it (Woodpecker's `Forge`). Non-admins get [`ForgePublic`].
///
/// Serialised with `type` as the web UI knows it ([`ForgeKind::api_name`]) and the stored
/// type in `woodlark_type`; deserialised (from the `data` column, which holds neither) field
/// by field.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Forge {
    #[serde(default)]
    pub id: i64,
    #[serde(skip)]
    pub kind: ForgeKind,
    #[serde(default)]
    pub url: String,
    #[serde(default)]
    pub client: String,
    #[serde(default)]
    pub skip_verify: bool,
    #[serde(default)]
    pub oauth_host: String,
    #[serde(default)]
    pub orgs: Vec<String>,
    #[serde(default)]
    pub additional_options: Map<String, Value>,
}

/// The API rendering of a [`Forge`].
#[derive(Serialize)]
struct ForgeWire<'a> {
    id: i64,
    #[serde(rename = "type")]
    kind: &'a str,
    woodlark_type: &'a str,
    url: &'a str,
    client: &'a str,
    skip_verify: bool,
    oauth_host: &'a str,
    orgs: &'a [String],
    additional_options: &'a Map<String, Value>,
}

impl Serialize for Forge {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ForgeWire {
            id: self.id,
            kind: self.kind.api_name(),
            woodlark_type: self.kind.as_str(),
            url: &self.url,
            client: &self.client,
            skip_verify: self.skip_verify,
            oauth_host: &self.oauth_host,
            orgs: &self.orgs,
            additional_options: &self.additional_options,
        }
        .serialize(serializer)
    }
}

/// What anyone may see of a forge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForgePublic {
    pub id: i64,
    /// As in [`ForgeKind::api_name`].
    #[serde(rename = "type")]
    pub kind: String,
    pub woodlark_type: String,
    pub url: String,
    /// Where users sign in for this forge, when that is not `url`'s host: the web UI labels
    /// its login button with this URL's host name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub oauth_host: String,
}

/// The `additional_options` key naming the adapter plugin that serves a forge.
pub const PLUGIN_OPTION: &str = "plugin";
/// The `additional_options` key naming a forge's REST API root, when it is not where the
/// forge's adapter looks by default.
pub const API_URL_OPTION: &str = "api_url";

impl Forge {
    /// A non-empty string of `additional_options`.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.additional_options
            .get(key)
            .and_then(|v| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// The public fields. A `git` forge's URL has no host to name its login button after;
    /// its users sign in on this server, so `server_url` stands in.
    pub fn public(&self, server_url: &str) -> ForgePublic {
        let oauth_host = if self.kind.is_builtin() {
            server_url.to_string()
        } else {
            self.oauth_host.clone()
        };
        ForgePublic {
            id: self.id,
            kind: self.kind.api_name().to_string(),
            woodlark_type: self.kind.as_str().to_string(),
            url: self.url.clone(),
            oauth_host,
        }
    }
}

/// A forge with its sealed secrets, for the server's own use.
#[derive(Debug, Clone, PartialEq)]
pub struct ForgeRow {
    pub forge: Forge,
    pub sealed_client_secret: String,
    pub sealed_webhook_secret: String,
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<ForgeRow> {
    let mut forge: Forge = super::json_column(r, 3)?;
    forge.id = r.get(0)?;
    forge.kind = r.get(1)?;
    forge.url = r.get(2)?;
    Ok(ForgeRow {
        forge,
        sealed_client_secret: r.get(4)?,
        sealed_webhook_secret: r.get(5)?,
    })
}

const COLUMNS: &str = "id, type, url, data, client_secret, webhook_secret";

pub fn by_id(conn: &Tx, id: i64) -> StoreResult<ForgeRow> {
    conn.cached_row(
        &format!("SELECT {COLUMNS} FROM forges WHERE id = ?1"),
        [id],
        from_row,
    )
    .optional()?
    .ok_or(StoreError::NotFound)
}

pub fn list(conn: &Tx, page: u32, per_page: u32) -> StoreResult<Vec<Forge>> {
    let offset = super::page_offset(page, per_page);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM forges ORDER BY id LIMIT ?1 + 0 OFFSET ?2"
    ))?;
    let rows = stmt.query_map(params![per_page, offset], from_row)?;
    Ok(rows.map(|r| r.map(|f| f.forge)).collect::<Result<_, _>>()?)
}

/// Whether a forge served by an adapter (anything but the built-in `git` forge) is stored.
pub fn any_served_by_adapters(conn: &Tx) -> StoreResult<bool> {
    conn.cached_row(
        "SELECT EXISTS (SELECT 1 FROM forges WHERE type <> ?1)",
        [ForgeKind::Git.as_str()],
        |r| r.get(0),
    )
}

pub fn count(conn: &Tx) -> StoreResult<i64> {
    conn.cached_row("SELECT count(*) FROM forges", [], |r| r.get(0))
}

fn data_of(forge: &Forge) -> StoreResult<String> {
    let mut value = serde_json::to_value(forge)?;
    if let Value::Object(map) = &mut value {
        for key in ["id", "type", "woodlark_type", "url"] {
            map.remove(key);
        }
    }
    Ok(value.to_string())
}

fn owner() -> Owner {
    Owner::default()
}

/// Inserts a forge; `sealed_*` are already encrypted. Records `forges.created`.
pub fn create(
    conn: &WriteTx,
    forge: &Forge,
    sealed_client_secret: &str,
    sealed_webhook_secret: &str,
) -> StoreResult<Forge> {
    conn.cached_exec(
        "INSERT INTO forges (type, url, data, client_secret, webhook_secret) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            forge.kind,
            forge.url,
            data_of(forge)?,
            sealed_client_secret,
            sealed_webhook_secret
        ],
    )?;
    created(conn, conn.last_insert_rowid()?)
}

/// The forge just inserted as `id`, its `forges.created` recorded.
fn created(conn: &WriteTx, id: i64) -> StoreResult<Forge> {
    let created = by_id(conn, id)?.forge;
    events::append(
        conn,
        RECORD_TYPE,
        Action::Created,
        created.id,
        &created,
        owner(),
    )?;
    Ok(created)
}

/// Inserts a forge under the id it carries (one the operator configured); `None` when that
/// id is taken (another replica, starting at the same moment, inserted it). On PostgreSQL
/// the id sequence is moved past it, so forges added later through the API never collide.
/// Records `forges.created`.
pub fn create_with_id(
    conn: &WriteTx,
    forge: &Forge,
    sealed_client_secret: &str,
    sealed_webhook_secret: &str,
) -> StoreResult<Option<Forge>> {
    let inserted = conn.cached_exec(
        "INSERT INTO forges (id, type, url, data, client_secret, webhook_secret) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (id) DO NOTHING",
        params![
            forge.id,
            forge.kind,
            forge.url,
            data_of(forge)?,
            sealed_client_secret,
            sealed_webhook_secret
        ],
    )?;
    if inserted == 0 {
        return Ok(None);
    }
    if conn.dialect() == crate::sql::Dialect::Postgres {
        conn.query_row(
            "SELECT setval(pg_get_serial_sequence('forges', 'id'), (SELECT max(id) FROM forges))",
            [],
            |r| r.get::<_, i64>(0),
        )?;
    }
    created(conn, forge.id).map(Some)
}

/// Replaces a forge's settings (and the client or webhook secret when `Some`). Records
/// `forges.updated`.
/// The type of a forge that repositories use cannot change (409): their remote ids and hooks
/// are the old type's.
pub fn update(
    conn: &WriteTx,
    forge: &Forge,
    sealed_client_secret: Option<&str>,
    sealed_webhook_secret: Option<&str>,
) -> StoreResult<Forge> {
    let before = by_id(conn, forge.id)?.forge;
    if before.kind != forge.kind {
        let repos = repo_count(conn, forge.id)?;
        if repos > 0 {
            return Err(StoreError::Conflict(format!(
                "cannot change the type of forge {} from {:?} to {:?}: {repos} repositories \
                 use it (their ids and hooks belong to the {:?} forge); add a new forge instead",
                forge.id, before.kind, forge.kind, before.kind
            )));
        }
    }
    conn.cached_exec(
        "UPDATE forges SET type = ?2, url = ?3, data = ?4, client_secret = coalesce(?5, client_secret),
            webhook_secret = coalesce(?6, webhook_secret)
         WHERE id = ?1",
        params![
            forge.id,
            forge.kind,
            forge.url,
            data_of(forge)?,
            sealed_client_secret,
            sealed_webhook_secret
        ],
    )?;
    let after = by_id(conn, forge.id)?.forge;
    events::append_update(conn, RECORD_TYPE, after.id, &before, &after, owner())?;
    Ok(after)
}

fn repo_count(conn: &Tx, forge_id: i64) -> StoreResult<i64> {
    conn.cached_row(
        "SELECT count(*) FROM repos WHERE forge_id = ?1",
        [forge_id],
        |r| r.get(0),
    )
}

/// Deletes a forge that no repository uses any more (409 otherwise).
pub fn delete(conn: &WriteTx, id: i64) -> StoreResult<()> {
    let forge = by_id(conn, id)?.forge;
    let repos = repo_count(conn, id)?;
    if repos > 0 {
        return Err(StoreError::Conflict(format!(
            "forge {id} still has {repos} repositories; delete them first"
        )));
    }
    conn.cached_exec("DELETE FROM forges WHERE id = ?1", [id])?;
    events::append(conn, RECORD_TYPE, Action::Deleted, id, &forge, owner())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::migrate;

    #[test]
    fn only_forges_other_than_git_are_served_by_adapters() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let c = &WriteTx::new(&conn);
        assert!(!any_served_by_adapters(c).unwrap(), "no forge");
        let git = Forge {
            kind: ForgeKind::Git,
            url: "/srv/git".into(),
            ..Forge::default()
        };
        create(c, &git, "", "s").unwrap();
        assert!(
            !any_served_by_adapters(c).unwrap(),
            "the built-in forge only"
        );
        let github = Forge {
            kind: ForgeKind::Github,
            url: "https://github.com".into(),
            ..Forge::default()
        };
        let github = create(c, &github, "", "s").unwrap();
        assert!(any_served_by_adapters(c).unwrap());
        delete(c, github.id).unwrap();
        assert!(!any_served_by_adapters(c).unwrap());
    }

    #[test]
    fn a_configured_forge_keeps_its_id_and_later_ones_follow_it() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let c = &WriteTx::new(&conn);
        let configured = Forge {
            id: 7,
            kind: ForgeKind::Gitea,
            url: "https://git.example.com".into(),
            ..Forge::default()
        };
        assert_eq!(
            create_with_id(c, &configured, "", "s").unwrap().unwrap().id,
            7
        );
        let later = Forge {
            kind: ForgeKind::Github,
            url: "https://github.com".into(),
            ..Forge::default()
        };
        assert_eq!(create(c, &later, "", "s").unwrap().id, 8);
        assert_eq!(
            create_with_id(c, &configured, "", "s").unwrap(),
            None,
            "taken"
        );
    }
}
