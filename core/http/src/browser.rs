//! What browser-facing pages share, whichever module serves them (the upstream UI's sign-in
//! in the server's `modules::web`, the built-in UI in `woodlark-ui`): cookies, redirects,
//! HTML escaping, safe return paths and links, and the CSRF token a plain HTML form
//! carries. Plain functions of a request or a response; no server state.

use http::{HeaderValue, StatusCode, header};

use super::request::Request;
use super::response::Response;

/// The CSRF token a built-in UI form carried in its hidden field, attached to the request by
/// the form's handler (`woodlark_ui::forms`) before any access check. The server's one CSRF
/// check (`auth::session::csrf_ok`) takes it where the `X-CSRF-TOKEN` header is absent: a
/// plain HTML form cannot set headers. Only UI form routes attach it, so every other route
/// still wants the header.
#[derive(Debug, Clone)]
pub struct FormCsrf(pub String);

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

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

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
