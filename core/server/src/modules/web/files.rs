//! The web UI's files (`[web] dir`); without one, Woodlark's own UI (crate `woodlark-ui`) serves.
//!
//! - A request path below the root path names a file of the directory. The router has
//!   percent-decoded it (a malformed escape is a 400); it is refused (404) if any segment is `.`, `..` or hidden (`.git`, `.env`), or contains `\`
//!   or NUL; the file found must still lie inside the directory once symlinks are resolved.
//! - Text files (HTML, JS, CSS) get the build's `/BASE_PATH` placeholder replaced by the root
//!   path, as upstream does. Files under `assets/` carry content hashes in their names, so they
//!   are cached for a year (`immutable`); everything else keeps the server's no-cache default.
//! - A path that names no file gets `index.html` (the SPA routes it in the browser), unless it
//!   is under `assets/` or under an API mount (`/api`, `/events`, participation, …): those are
//!   404 in the owning interface's error style, as without a UI.

use std::path::{Component, Path, PathBuf};

use crate::http::{
    ApiError, ErrorStyle, HeaderValue, Method, Request, Response, StatusCode, header,
};
use crate::state::Ctx;

/// Cache policy of hashed build assets.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The placeholder a UI build puts before its own URLs.
const BASE_PATH: &str = "/BASE_PATH";

/// `GET <root>/` (only with `[web] dir`): the UI's `index.html`.
pub async fn index(ctx: Ctx, _req: Request) -> Result<Response, ApiError> {
    serve_index(&ctx).await
}

/// `<root>/{*path}` (only with `[web] dir`): a file, the SPA fallback, or 404.
pub async fn file_or_fallback(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let raw = req.param("path").to_string();
    if let Some(style) = api_style(&ctx, &req.path) {
        return Ok(not_found(&req.path).render(style));
    }
    if !matches!(req.method, Method::GET | Method::HEAD) {
        return Err(not_found(&req.path));
    }
    let Some(rel) = safe_relative(&raw) else {
        return Err(not_found(&req.path));
    };
    let dir = ctx.config.web.dir.clone();
    let rel_path = rel.clone();
    let found = tokio::task::spawn_blocking(move || read_inside(&dir, &rel_path))
        .await
        .map_err(ApiError::internal)?;
    match found {
        Some(bytes) => Ok(file_response(&ctx, &rel, bytes)),
        None if rel.starts_with("assets/") => Err(not_found(&req.path)),
        None => serve_index(&ctx).await,
    }
}

/// `GET <root>/assets/custom.js`: `[web] custom_js`, or nothing.
pub async fn custom_js(ctx: Ctx, _req: Request) -> Result<Response, ApiError> {
    let body = custom_file(&ctx.config.web.custom_js).await;
    Ok(Response::new(
        StatusCode::OK,
        "application/javascript; charset=utf-8",
        body,
    ))
}

/// `GET <root>/assets/custom.css`: `[web] custom_css`, or nothing.
pub async fn custom_css(ctx: Ctx, _req: Request) -> Result<Response, ApiError> {
    let body = custom_file(&ctx.config.web.custom_css).await;
    Ok(Response::new(
        StatusCode::OK,
        "text/css; charset=utf-8",
        body,
    ))
}

/// The operator's file, re-read on every request so edits show without a restart. One that
/// went missing since start-up is served empty (and logged): the UI works without it.
async fn custom_file(path: &Path) -> Vec<u8> {
    if path.as_os_str().is_empty() {
        return Vec::new();
    }
    match tokio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(err) => {
            tracing::warn!(path = %path.display(), %err, "cannot read a custom web file");
            Vec::new()
        }
    }
}

fn not_found(path: &str) -> ApiError {
    ApiError::not_found(format!("no route for {path}"))
}

/// The error style of the interface whose mount `path` falls under, if any: such paths are
/// never answered with the UI. Root routes (`/healthz`, …) are exact routes and never get here.
fn api_style(ctx: &Ctx, path: &str) -> Option<ErrorStyle> {
    let under = |prefix: &str| {
        !prefix.is_empty()
            && path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    ctx.mounts
        .iter()
        .filter(|m| m.name != "web")
        .find(|m| {
            under(&m.prefix)
                // Participation lives at the root by default; its routes are all below these.
                || (m.name == "participation"
                    && (under(&format!("{}/v2", m.prefix)) || under(&format!("{}/debug", m.prefix))))
        })
        .map(|m| m.style)
}

/// `decoded` (a URL path below the root, percent-decoded by the router) as a relative file
/// path, or `None` if it could step outside the directory or names a hidden file.
pub fn safe_relative(decoded: &str) -> Option<String> {
    if decoded.contains(['\\', '\0']) {
        return None;
    }
    let mut parts = Vec::new();
    for segment in decoded.split('/') {
        if segment.is_empty() {
            continue;
        }
        if segment.starts_with('.') {
            return None;
        }
        parts.push(segment);
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

/// The file `rel` inside `dir`, if it exists, is a regular file and, with every symlink
/// resolved, still lies inside `dir`.
fn read_inside(dir: &Path, rel: &str) -> Option<Vec<u8>> {
    let rel = Path::new(rel);
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let root = dir.canonicalize().ok()?;
    let file: PathBuf = root.join(rel).canonicalize().ok()?;
    if !file.starts_with(&root) || !file.is_file() {
        return None;
    }
    std::fs::read(file).ok()
}

async fn serve_index(ctx: &Ctx) -> Result<Response, ApiError> {
    let dir = ctx.config.web.dir.clone();
    let found = tokio::task::spawn_blocking(move || read_inside(&dir, "index.html"))
        .await
        .map_err(ApiError::internal)?;
    match found {
        Some(bytes) => Ok(file_response(ctx, "index.html", bytes)),
        None => Err(ApiError::internal(format!(
            "{}/index.html cannot be read",
            ctx.config.web.dir.display()
        ))),
    }
}

fn file_response(ctx: &Ctx, rel: &str, bytes: Vec<u8>) -> Response {
    let ext = rel.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    let content_type = content_type(ext);
    let body = if matches!(ext, "html" | "htm" | "js" | "mjs" | "css") {
        rewrite_base_path(bytes, ctx.config.web.root_path())
    } else {
        bytes
    };
    let mut response = Response::new(StatusCode::OK, content_type, body);
    if rel.starts_with("assets/") {
        response
            .headers
            .insert(header::CACHE_CONTROL, HeaderValue::from_static(IMMUTABLE));
    }
    response
}

/// Replaces the build's `/BASE_PATH` placeholder by the root path (text files only).
pub fn rewrite_base_path(bytes: Vec<u8>, root_path: &str) -> Vec<u8> {
    match String::from_utf8(bytes) {
        Ok(text) if text.contains(BASE_PATH) => text.replace(BASE_PATH, root_path).into_bytes(),
        Ok(text) => text.into_bytes(),
        Err(err) => err.into_bytes(),
    }
}

/// The content type of a file extension (UTF-8 for text).
pub fn content_type(ext: &str) -> &'static str {
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" => "application/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "webmanifest" => "application/manifest+json",
        "txt" => "text/plain; charset=utf-8",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "avif" => "image/avif",
        "ico" => "image/x-icon",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "ttf" => "font/ttf",
        "otf" => "font/otf",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::router::percent_decode;

    #[test]
    fn relative_paths_never_leave_the_directory() {
        // What the router hands over (decoded), then the check.
        let rel = |raw: &str| percent_decode(raw).and_then(|d| safe_relative(&d));
        assert_eq!(rel("assets/app.js").as_deref(), Some("assets/app.js"));
        assert_eq!(rel("a//b/").as_deref(), Some("a/b"));
        assert_eq!(rel("caf%C3%A9.txt").as_deref(), Some("café.txt"));
        for bad in [
            "../etc/passwd",
            "assets/../../x",
            "%2e%2e/x",
            "%2E%2E%2Fx",
            "a/%2e/b",
            ".git/config",
            "a/.env",
            "a\\..\\b",
            "a%5c..%5cb",
            "a%00b",
            "%zz",
            "%e9",
            "",
            "/",
        ] {
            assert_eq!(rel(bad), None, "{bad}");
        }
    }

    #[test]
    fn symlinks_out_of_the_directory_are_refused() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("ui");
        std::fs::create_dir_all(dir.join("assets")).unwrap();
        std::fs::write(dir.join("assets/a.js"), "ok").unwrap();
        std::fs::write(base.path().join("secret"), "no").unwrap();
        assert_eq!(
            read_inside(&dir, "assets/a.js").as_deref(),
            Some(&b"ok"[..])
        );
        assert_eq!(
            read_inside(&dir, "assets"),
            None,
            "directories are not files"
        );
        assert_eq!(read_inside(&dir, "missing"), None);
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(base.path().join("secret"), dir.join("link")).unwrap();
            assert_eq!(read_inside(&dir, "link"), None);
            std::os::unix::fs::symlink(dir.join("assets/a.js"), dir.join("inside")).unwrap();
            assert_eq!(read_inside(&dir, "inside").as_deref(), Some(&b"ok"[..]));
        }
    }

    #[test]
    fn base_path_is_rewritten_in_text() {
        let html = b"<script src=\"/BASE_PATH/assets/a.js\"></script>".to_vec();
        assert_eq!(
            rewrite_base_path(html.clone(), ""),
            b"<script src=\"/assets/a.js\"></script>"
        );
        assert_eq!(
            rewrite_base_path(html, "/ci"),
            b"<script src=\"/ci/assets/a.js\"></script>"
        );
        let binary = vec![0xff, 0xfe, b'/'];
        assert_eq!(rewrite_base_path(binary.clone(), "/ci"), binary);
        assert_eq!(content_type("JS"), "application/javascript; charset=utf-8");
        assert_eq!(content_type("woff2"), "font/woff2");
        assert_eq!(content_type("exe"), "application/octet-stream");
    }
}
