//! OAuth 2 authorization-code sign-in as forges implement it (GitHub, Gitea, Forgejo,
//! GitLab, Bitbucket): the authorize URL, and the token endpoint's form POST for a code or a
//! refresh token with its JSON answer. What differs per forge is the paths and scopes, which
//! the adapter passes in.

use serde_json::Value;

use super::{NetrcInfo, OauthClient, OauthToken, PluginError, denied, unavailable};
use crate::http;
use crate::json::{str_at, u64_at};

/// A forge's OAuth 2 endpoints, the one thing that differs between forges' sign-ins: an
/// adapter that names them in [`super::ForgeAdapter::OAUTH`] gets `authorize-url`,
/// `exchange-code` and `refresh-token` from the trait's defaults.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints {
    /// The authorize path, below the browser's root ([`browser_root`]).
    pub authorize: &'static str,
    /// The token path, below the forge's URL (the server calls it, never the browser).
    pub token: &'static str,
    /// The scopes asked for ("" asks for none).
    pub scope: &'static str,
    /// The client's id and secret go in an HTTP Basic header (Bitbucket's token endpoints),
    /// not in the form body.
    pub basic_auth: bool,
    /// The root when the client names none (a cloud forge's own host), else "".
    pub default_root: &'static str,
}

impl Endpoints {
    /// `root`, or [`Endpoints::default_root`] when it is empty.
    fn or_default<'a>(&self, root: &'a str) -> &'a str {
        if root.is_empty() {
            self.default_root
        } else {
            root
        }
    }

    /// The URL that starts the sign-in, with `scope` ([`Endpoints::scope`] unless an adapter
    /// decides it at run time).
    pub fn authorize_url(&self, client: &OauthClient, scope: &str, state: &str) -> String {
        let root = self.or_default(browser_root(client));
        authorize_url(&format!("{root}{}", self.authorize), client, scope, state)
    }

    /// The token endpoint's URL.
    pub fn token_url(&self, client: &OauthClient) -> String {
        let root = self.or_default(client.forge_url.trim_end_matches('/'));
        format!("{root}{}", self.token)
    }

    /// Trades `code` for tokens ([`exchange`] or [`exchange_basic`]).
    pub fn exchange(&self, client: &OauthClient, code: &str) -> Result<OauthToken, PluginError> {
        let url = self.token_url(client);
        if self.basic_auth {
            exchange_basic(&url, client, code)
        } else {
            exchange(&url, client, code)
        }
    }

    /// A fresh access token ([`refresh`] or [`refresh_basic`]).
    pub fn refresh(
        &self,
        client: &OauthClient,
        refresh_token: &str,
    ) -> Result<OauthToken, PluginError> {
        let url = self.token_url(client);
        if self.basic_auth {
            refresh_basic(&url, client, refresh_token)
        } else {
            refresh(&url, client, refresh_token)
        }
    }
}

/// Where browsers sign in: the client's `oauth_host`, else its `forge_url`, without a
/// trailing slash.
pub fn browser_root(client: &OauthClient) -> &str {
    let root = if client.oauth_host.is_empty() {
        &client.forge_url
    } else {
        &client.oauth_host
    };
    root.trim_end_matches('/')
}

/// `{endpoint}?client_id=…&redirect_uri=…&response_type=code&scope=…&state=…`, each value
/// percent-encoded; `scope` is omitted when empty.
pub fn authorize_url(endpoint: &str, client: &OauthClient, scope: &str, state: &str) -> String {
    let mut url = format!(
        "{endpoint}?client_id={}&redirect_uri={}&response_type=code",
        http::encode(&client.client_id),
        http::encode(&client.redirect_uri),
    );
    if !scope.is_empty() {
        url.push_str(&format!("&scope={}", http::encode(scope)));
    }
    url.push_str(&format!("&state={}", http::encode(state)));
    url
}

/// POSTs the authorization `code` to `token_url` (`grant_type=authorization_code`, the
/// client's id, secret and redirect URI in the form body) and reads the token.
pub fn exchange(
    token_url: &str,
    client: &OauthClient,
    code: &str,
) -> Result<OauthToken, PluginError> {
    post_token(
        token_url,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", &client.client_id),
            ("client_secret", &client.client_secret),
            ("redirect_uri", &client.redirect_uri),
        ],
    )
}

/// POSTs `refresh_token` to `token_url` (`grant_type=refresh_token`) and reads the new token.
/// A forge that rotates refresh tokens answers a new one; otherwise the old one stays valid
/// and is kept.
pub fn refresh(
    token_url: &str,
    client: &OauthClient,
    refresh_token: &str,
) -> Result<OauthToken, PluginError> {
    let mut token = post_token(
        token_url,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", &client.client_id),
            ("client_secret", &client.client_secret),
        ],
    )?;
    if token.refresh_token.is_empty() {
        token.refresh_token = refresh_token.to_string();
    }
    Ok(token)
}

/// As [`exchange`], with the client's id and secret sent as HTTP Basic credentials instead of
/// form fields (Bitbucket's token endpoints).
pub fn exchange_basic(
    token_url: &str,
    client: &OauthClient,
    code: &str,
) -> Result<OauthToken, PluginError> {
    post_token_as(
        token_url,
        Some(client),
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &client.redirect_uri),
        ],
    )
}

/// As [`refresh`], with HTTP Basic client credentials (see [`exchange_basic`]).
pub fn refresh_basic(
    token_url: &str,
    client: &OauthClient,
    refresh_token: &str,
) -> Result<OauthToken, PluginError> {
    let mut token = post_token_as(
        token_url,
        Some(client),
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
        ],
    )?;
    if token.refresh_token.is_empty() {
        token.refresh_token = refresh_token.to_string();
    }
    Ok(token)
}

/// `Basic base64(id:secret)`, the client's HTTP Basic credentials (RFC 6749 §2.3.1).
pub fn basic_auth(client: &OauthClient) -> String {
    let user_pass = format!(
        "{}:{}",
        http::encode(&client.client_id),
        http::encode(&client.client_secret)
    );
    format!("Basic {}", base64(user_pass.as_bytes()))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `application/x-www-form-urlencoded` of `fields`.
pub fn form_body(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", http::encode(k), http::encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The token endpoint's exchange: a form POST answered with JSON. An OAuth error (a 4xx, or
/// GitHub's 200 with an `error` field) is `denied` with the forge's description; other
/// failures are `unavailable`.
fn post_token(token_url: &str, fields: &[(&str, &str)]) -> Result<OauthToken, PluginError> {
    post_token_as(token_url, None, fields)
}

/// [`post_token`], with `basic`'s credentials in an `Authorization: Basic` header.
fn post_token_as(
    token_url: &str,
    basic: Option<&OauthClient>,
    fields: &[(&str, &str)],
) -> Result<OauthToken, PluginError> {
    let mut headers = vec![
        crate::headers::text("accept", "application/json"),
        crate::headers::text("content-type", "application/x-www-form-urlencoded"),
    ];
    if let Some(client) = basic {
        headers.push(crate::headers::text("authorization", &basic_auth(client)));
    }
    let mut req = http::request("POST", token_url, headers);
    req.body = Some(form_body(fields).into_bytes());
    let resp = http::send(&req)?;
    let json: Option<Value> = serde_json::from_slice(&resp.body).ok();
    match (resp.status, json) {
        (200..=299, Some(v)) => token_of(&v, crate::clock::now_unix_ms() / 1000),
        (400..=499, Some(v)) if !str_at(&v, "/error").is_empty() => Err(oauth_error(&v)),
        (400..=499, _) => Err(denied(format!("{token_url}: HTTP {}", resp.status))),
        (200..=299, None) => Err(unavailable(format!("{token_url}: answer is not JSON"))),
        (s, _) => Err(unavailable(format!("{token_url}: HTTP {s}"))),
    }
}

/// Reads a token endpoint's JSON answer, at Unix time `now`: `access_token`, optional
/// `refresh_token`, and `expires_in` seconds (absent or 0: does not expire).
pub fn token_of(v: &Value, now: u64) -> Result<OauthToken, PluginError> {
    if !str_at(v, "/error").is_empty() {
        return Err(oauth_error(v));
    }
    let access_token = str_at(v, "/access_token");
    if access_token.is_empty() {
        return Err(unavailable("token endpoint answered no access_token"));
    }
    let expires_in = u64_at(v, "/expires_in")
        .or_else(|| str_at(v, "/expires_in").parse().ok())
        .unwrap_or(0);
    Ok(OauthToken {
        access_token,
        refresh_token: str_at(v, "/refresh_token"),
        expiry: if expires_in == 0 {
            0
        } else {
            (now + expires_in) as i64
        },
    })
}

fn oauth_error(v: &Value) -> PluginError {
    let code = str_at(v, "/error");
    let text = str_at(v, "/error_description");
    denied(if text.is_empty() {
        code
    } else {
        format!("{code}: {text}")
    })
}

/// The host of an HTTP(S) clone URL without user info or port
/// (`https://git.example.com:8443/o/r.git` → `git.example.com`): a `.netrc` entry's
/// `machine`. `None` when it is not a `scheme://host...` URL.
pub fn clone_host(clone_url: &str) -> Option<String> {
    let (_, rest) = clone_url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split_once(']').map(|(h, _)| h)?
    } else {
        host_port.split(':').next()?
    };
    let valid = !host.is_empty() && !host.contains(|c: char| c.is_whitespace());
    valid.then(|| host.to_string())
}

/// A `.netrc` entry for `clone_url`'s host; `invalid-input` when the URL names no host.
pub fn netrc_for(
    clone_url: &str,
    login: String,
    password: String,
) -> Result<NetrcInfo, PluginError> {
    let machine = clone_host(clone_url)
        .ok_or_else(|| crate::invalid(format!("clone URL {clone_url:?} names no host")))?;
    Ok(NetrcInfo {
        machine,
        login,
        password,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> OauthClient {
        OauthClient {
            forge_url: "https://git.example.com/".into(),
            oauth_host: String::new(),
            client_id: "id 1".into(),
            client_secret: "s".into(),
            redirect_uri: "https://ci.example/authorize".into(),
            skip_verify: false,
        }
    }

    #[test]
    fn endpoints_put_the_authorize_path_below_the_browser_and_the_token_below_the_forge() {
        const CLOUD: Endpoints = Endpoints {
            authorize: "/site/oauth2/authorize",
            token: "/site/oauth2/access_token",
            scope: "",
            basic_auth: true,
            default_root: "https://cloud.example",
        };
        let mut c = client();
        c.oauth_host = "https://sso.example/".into();
        assert_eq!(
            CLOUD.token_url(&c),
            "https://git.example.com/site/oauth2/access_token"
        );
        assert!(
            CLOUD
                .authorize_url(&c, "", "s")
                .starts_with("https://sso.example/site/oauth2/authorize?client_id=id%201&"),
            "{}",
            CLOUD.authorize_url(&c, "", "s")
        );
        // No URL configured: the cloud forge's own host.
        c.forge_url = String::new();
        c.oauth_host = String::new();
        assert_eq!(
            CLOUD.token_url(&c),
            "https://cloud.example/site/oauth2/access_token"
        );
        assert!(
            CLOUD
                .authorize_url(&c, "", "s")
                .starts_with("https://cloud.example/site/oauth2/authorize?")
        );
    }

    #[test]
    fn authorize() {
        let c = client();
        assert_eq!(browser_root(&c), "https://git.example.com");
        assert_eq!(
            authorize_url(
                "https://x/login/oauth/authorize",
                &c,
                "repo user:email",
                "st&1"
            ),
            "https://x/login/oauth/authorize?client_id=id%201&redirect_uri=https%3A%2F%2Fci.example%2Fauthorize&response_type=code&scope=repo%20user%3Aemail&state=st%261"
        );
    }

    #[test]
    fn tokens() {
        let v = serde_json::json!({"access_token": "a", "token_type": "bearer", "scope": "repo"});
        let t = token_of(&v, 100).unwrap();
        assert_eq!(
            (t.access_token.as_str(), t.refresh_token.as_str(), t.expiry),
            ("a", "", 0)
        );
        let v = serde_json::json!({"access_token": "a", "refresh_token": "r", "expires_in": 28800});
        assert_eq!(token_of(&v, 100).unwrap().expiry, 28900);
        let v =
            serde_json::json!({"error": "bad_verification_code", "error_description": "expired"});
        assert!(
            matches!(token_of(&v, 0), Err(PluginError::Denied(m)) if m == "bad_verification_code: expired")
        );
    }

    #[test]
    fn basic_credentials() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        let mut c = client();
        c.client_id = "key".into();
        assert_eq!(basic_auth(&c), "Basic a2V5OnM=");
    }

    #[test]
    fn hosts() {
        assert_eq!(
            clone_host("https://github.com/o/r.git").as_deref(),
            Some("github.com")
        );
        assert_eq!(
            clone_host("http://u:p@127.0.0.1:3000/o/r.git").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(clone_host("https://[::1]:8443/o/r").as_deref(), Some("::1"));
        assert_eq!(clone_host("https:///o/r"), None);
        assert_eq!(clone_host("not a url"), None);
    }
}
