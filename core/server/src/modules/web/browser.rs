//! What the server's browser-facing pages share: the session cookie, where the browser goes
//! home, whether cookies must be `Secure`, and the small self-contained page frame. The
//! helpers the built-in UI (`woodlark-ui`) shares with them (cookies, redirects, escaping)
//! are the HTTP core's (`http::browser`), re-exported here.

use crate::config::Config;
use crate::http::{HeaderValue, Request, Response, StatusCode, header};

pub use crate::http::browser::{
    cookie, cookie_value, escape_html, push_escaped, redirect, safe_next, set_cookie, web_link,
};

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
