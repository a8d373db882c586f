//! What the browser-facing pages share: the session cookie, redirects, HTML escaping and
//! the small self-contained page frame. A leaf below both the upstream UI's support
//! ([`super`]: files, sign-in) and the built-in UI (`modules::ui`), so neither imports the
//! other for these.

use crate::config::Config;
use crate::http::{HeaderValue, Request, Response, StatusCode, header};

/// Name of the cookie that carries a browser's token (Woodpecker's).
pub const SESSION_COOKIE: &str = "user_sess";

/// The root path as a URL a browser can be sent to (`/` for the server root).
pub fn home(config: &Config) -> String {
    format!("{}/", config.web.root_path())
}

/// Whether cookies must be `Secure`: the request came over TLS (ours, or a terminating
/// proxy's: `X-Forwarded-Proto: https` or `Forwarded: proto=https`) or the public URL is https.
pub fn over_tls(ctx: &crate::state::AppState, req: &Request) -> bool {
    if req.tls || ctx.config.server.public_url.starts_with("https://") {
        return true;
    }
    let forwarded_proto = req
        .header("x-forwarded-proto")
        .and_then(|v| v.split(',').next())
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let forwarded = req.header("forwarded").is_some_and(|v| {
        v.split([';', ','])
            .any(|kv| kv.trim().eq_ignore_ascii_case("proto=https"))
    });
    forwarded_proto || forwarded
}

/// A `Set-Cookie` value: HttpOnly, SameSite as given, `Secure` under TLS. `max_age` 0 clears.
pub fn cookie(
    name: &str,
    value: &str,
    path: &str,
    max_age: i64,
    same_site: &str,
    secure: bool,
) -> String {
    let path = if path.is_empty() { "/" } else { path };
    let mut c =
        format!("{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite={same_site}");
    if secure {
        c.push_str("; Secure");
    }
    c
}

/// The value of cookie `name` in the request, if any.
pub fn cookie_value(req: &Request, name: &str) -> Option<String> {
    req.headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

/// A `303 See Other` to `location`.
pub fn redirect(location: &str) -> Response {
    let mut r = Response::empty(StatusCode::SEE_OTHER);
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers.insert(header::LOCATION, v);
    }
    r
}

/// `next` as a place of this site under `root` to return to after signing in: a path that
/// starts with one `/` (not `//` or `/\\`, which browsers read as another host), without a
/// scheme, backslash or control character; `None` for anything else (an absolute URL, say),
/// so a sign-in link can never send the browser off-site.
pub fn safe_next(root: &str, next: &str) -> Option<String> {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && next.len() <= 2000
        && !next
            .chars()
            .any(|c| c == '\\' || c.is_control() || c.is_whitespace())
        && (root.is_empty() || next == root || next.starts_with(&format!("{root}/")));
    ok.then(|| next.to_string())
}

/// `url` when it is an `http:` or `https:` URL, for links a forge supplied (a `javascript:`
/// or `data:` URL is never made a link).
pub fn web_link(url: &str) -> Option<&str> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    (lower.starts_with("http://") || lower.starts_with("https://")).then_some(url)
}

/// Adds a `Set-Cookie` header (several may be set on one response).
pub fn set_cookie(response: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        response.headers.append(header::SET_COOKIE, v);
    }
}

/// Text made safe to place in HTML content or a quoted attribute.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(&mut out, text);
    out
}

/// [`escape_html`] appended to `out`; control characters but tabs are dropped.
pub fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' => out.push('\t'),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
}

/// Our own HTML pages: self-contained, no scripts, forms only to ourselves.
pub fn html_page(status: StatusCode, body: String) -> Response {
    Response::new(status, "text/html; charset=utf-8", body).with_header(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    )
}

/// The shared frame of our pages.
pub fn page_frame(title: &str, content: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>\
         body{{font-family:system-ui,sans-serif;max-width:34rem;margin:3rem auto;padding:0 1rem;color:#222;line-height:1.5}}\
         input[type=password]{{width:100%;padding:.4rem;box-sizing:border-box}}\
         button{{margin-top:.8rem;padding:.4rem 1.2rem}}\
         .error{{color:#b00020}} code{{background:#f3f3f3;padding:0 .2rem}}\
         </style></head><body>\n{content}\n</body></html>\n",
        title = escape_html(title),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Method;

    #[test]
    fn cookies_and_escaping() {
        assert_eq!(
            cookie("user_sess", "t", "", 60, "Lax", false),
            "user_sess=t; Path=/; Max-Age=60; HttpOnly; SameSite=Lax"
        );
        assert!(cookie("a", "", "/ci", 0, "Strict", true).ends_with("SameSite=Strict; Secure"));
        let mut req = Request::new(Method::GET, "/");
        req.headers.insert(
            "cookie",
            HeaderValue::from_static("x=1; user_sess=abc.def; y=2"),
        );
        assert_eq!(cookie_value(&req, "user_sess").as_deref(), Some("abc.def"));
        assert_eq!(cookie_value(&req, "z"), None);
        assert_eq!(
            safe_next("", "/repos/1?page=2#L3").as_deref(),
            Some("/repos/1?page=2#L3")
        );
        for bad in [
            "//evil.example/x",
            "/\\evil.example",
            "https://evil.example/",
            "repos",
            "",
            "/a b",
            "/x\n",
        ] {
            assert_eq!(safe_next("", bad), None, "{bad:?}");
        }
        assert_eq!(safe_next("/ci", "/ci/repos").as_deref(), Some("/ci/repos"));
        assert_eq!(safe_next("/ci", "/cix/repos"), None);
        assert_eq!(safe_next("/ci", "/repos"), None);
        assert_eq!(
            web_link("https://forge.example/a"),
            Some("https://forge.example/a")
        );
        assert_eq!(
            web_link("HTTP://forge.example"),
            Some("HTTP://forge.example")
        );
        for bad in [
            "javascript:alert(1)",
            "data:text/html,x",
            "//x",
            "ftp://x",
            "",
        ] {
            assert_eq!(web_link(bad), None, "{bad}");
        }
        assert_eq!(
            escape_html("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
