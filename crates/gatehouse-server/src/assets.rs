//! The dashboard's built files, embedded at compile time by `build.rs`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

mod generated {
    include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));
}

/// Whether the real dashboard (not the "run npm run build" page) is embedded.
pub const DASHBOARD_BUILT: bool = generated::BUILT;

/// Top-level paths of the single-page app; each serves `index.html`.
pub const PAGES: &[&str] = &[
    "", "signin", "overview", "events", "tools", "consent", "clients", "secrets", "policy",
    "sessions",
];

fn mime(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") | Some("mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// Looks up an embedded file by its path below `/`.
pub fn file(path: &str) -> Option<&'static [u8]> {
    generated::FILES
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, b)| *b)
}

/// Serves `path` (without the leading `/`): an embedded file, or
/// `index.html` for a dashboard page, or 404.
pub fn serve(path: &str) -> Response {
    let page = path.split('/').next().unwrap_or("");
    let (name, immutable) = match file(path) {
        Some(_) if !path.is_empty() => (path, path.starts_with("assets/")),
        _ if PAGES.contains(&page) => ("index.html", false),
        _ => return (StatusCode::NOT_FOUND, "not found").into_response(),
    };
    let Some(body) = file(name) else {
        return (StatusCode::NOT_FOUND, "not found").into_response();
    };
    let cache = if immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-store"
    };
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(mime(name))),
            (header::CACHE_CONTROL, HeaderValue::from_static(cache)),
        ],
        body,
    )
        .into_response()
}
