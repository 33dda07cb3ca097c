//! Request guard: DNS-rebinding and CSRF defences plus security headers.
//!
//! - `Host` must be one of this server's loopback authorities
//!   (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`), else 421.
//! - A request that can change anything (any method but GET/HEAD/OPTIONS)
//!   must carry an `Origin` equal to one of those (or a configured extra
//!   origin such as the tray app's), else 403. A foreign `Origin` or
//!   `Sec-Fetch-Site: cross-site` is refused on reads too — except a
//!   top-level navigation to the sign-in page itself (`GET /signin`,
//!   `Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document`): `--open`
//!   reaches it from a local redirect page (`file://`, so cross-site), and
//!   the page holds nothing; the token in its fragment is what signs in.
//! - A request body must arrive whole within a time limit (as its header
//!   must, `ConnectionLimits`), else 408: a connection that trickles a body
//!   cannot keep one of the server's slots.
//! - Every response, refusals included, carries a strict CSP, `nosniff`,
//!   `no-referrer` and `frame-ancestors 'none'`.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// The Content Security Policy sent with every response.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// Which Host and Origin values this server accepts.
#[derive(Debug, Clone)]
pub struct Allowed {
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Allowed {
    /// Loopback authorities for `port`, plus `extra_origins` (exact match).
    pub fn for_port(port: u16, extra_origins: &[String]) -> Self {
        let hosts: Vec<String> = [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ]
        .into();
        let mut origins: Vec<String> = hosts.iter().map(|h| format!("http://{h}")).collect();
        origins.extend(extra_origins.iter().cloned());
        Allowed { hosts, origins }
    }

    /// Whether `host` (the raw header value) names this server.
    pub fn host_ok(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Whether `origin` (the raw header value) is this server's own.
    pub fn origin_ok(&self, origin: &str) -> bool {
        self.origins.iter().any(|o| o.eq_ignore_ascii_case(origin))
    }
}

fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Middleware enforcing the Host and Origin rules.
pub async fn check_request(
    State(allowed): State<std::sync::Arc<Allowed>>,
    req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    // HTTP/1.1 puts the authority in Host; for absolute-form targets use the
    // URI's. A Host that is there but not readable is refused, not skipped.
    let authority = match headers.get(header::HOST) {
        Some(host) => host.to_str().ok().map(str::to_owned),
        None => req.uri().authority().map(|a| a.to_string()),
    };
    if !authority.as_deref().is_some_and(|h| allowed.host_ok(h)) {
        return ApiError::MisdirectedHost.into_response();
    }
    let origin = headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    let cross_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"));
    let origin_ok = origin.map(|o| allowed.origin_ok(o));
    let refuse = if changes_state(req.method()) {
        origin_ok != Some(true)
    } else {
        origin_ok == Some(false) || (cross_site && !signin_navigation(&req))
    };
    if refuse {
        return ApiError::ForbiddenOrigin.into_response();
    }
    next.run(req).await
}

/// A browser opening the sign-in page as a document in a tab or window
/// (never a fetch, frame or sub-resource: those say another mode or
/// destination; `frame-ancestors 'none'` stops framing anyway).
fn signin_navigation(req: &Request) -> bool {
    let is = |name: &str, want: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case(want))
    };
    matches!(*req.method(), Method::GET | Method::HEAD)
        && req.uri().path() == "/signin"
        && is("sec-fetch-mode", "navigate")
        && is("sec-fetch-dest", "document")
}

/// Middleware reading a request's body whole, within `limit` and at most
/// [`crate::MAX_BODY_BYTES`], before the handler runs.
pub async fn body_in_time(
    State(limit): State<std::time::Duration>,
    req: Request,
    next: Next,
) -> Response {
    use axum::body::{Body, HttpBody};
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let read = axum::body::to_bytes(body, crate::MAX_BODY_BYTES);
    match tokio::time::timeout(limit, read).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(err)) if too_large(&err) => ApiError::TooLarge.into_response(),
        Ok(Err(_)) => {
            ApiError::BadRequest("the request body could not be read".into()).into_response()
        }
        Err(_) => ApiError::SlowBody.into_response(),
    }
}

fn too_large(err: &axum::Error) -> bool {
    std::error::Error::source(err)
        .is_some_and(|inner| inner.is::<http_body_util::LengthLimitError>())
}

/// Middleware adding the security headers to every response.
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A router echoing the body's length behind `body_in_time`.
    async fn send_body(body: axum::body::Body) -> (axum::http::StatusCode, String) {
        use tower::ServiceExt;
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::post(
                    |body: axum::body::Bytes| async move { body.len().to_string() },
                ),
            )
            .layer(axum::middleware::from_fn_with_state(
                std::time::Duration::from_millis(200),
                body_in_time,
            ));
        let resp = app
            .oneshot(Request::post("/").body(body).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn a_body_must_arrive_whole_in_time_and_within_the_size_limit() {
        let (status, text) = send_body("hello".into()).await;
        assert_eq!((status.as_u16(), text.as_str()), (200, "5"));

        // One byte, then nothing: a trickled body holds no handler.
        use futures_util::StreamExt;
        let trickle = futures_util::stream::iter([Ok::<_, std::io::Error>(
            axum::body::Bytes::from_static(b"{"),
        )])
        .chain(futures_util::stream::pending());
        let (status, text) = send_body(axum::body::Body::from_stream(trickle)).await;
        assert_eq!(status.as_u16(), 408, "{text}");
        assert!(text.contains("request_timeout"), "{text}");

        let (status, text) = send_body(vec![b'x'; crate::MAX_BODY_BYTES + 1].into()).await;
        assert_eq!(status.as_u16(), 413, "{text}");
    }

    fn check_host(host: &str, expect: bool) {
        let a = Allowed::for_port(4321, &[]);
        assert_eq!(
            a.host_ok(host),
            expect,
            "host {host:?} should be {}",
            if expect { "accepted" } else { "refused" }
        );
    }

    #[test]
    fn hosts() {
        check_host("127.0.0.1:4321", true);
        check_host("localhost:4321", true);
        check_host("LOCALHOST:4321", true);
        check_host("[::1]:4321", true);
        check_host("127.0.0.1", false);
        check_host("127.0.0.1:4322", false);
        check_host("evil.example:4321", false);
        check_host("localhost.evil.example:4321", false);
        check_host("127.0.0.1:4321.evil", false);
        check_host("", false);
    }

    #[test]
    fn origins() {
        let a = Allowed::for_port(4321, &["tauri://localhost".into()]);
        for (o, ok) in [
            ("http://127.0.0.1:4321", true),
            ("http://localhost:4321", true),
            ("http://[::1]:4321", true),
            ("tauri://localhost", true),
            ("https://127.0.0.1:4321", false),
            ("http://127.0.0.1:9999", false),
            ("null", false),
            ("http://evil.example", false),
        ] {
            assert_eq!(a.origin_ok(o), ok, "origin {o:?}");
        }
    }

    #[test]
    fn only_a_document_navigation_to_signin_passes_cross_site() {
        let check = |method: Method, path: &str, mode: &str, dest: &str, ok: bool| {
            let req = Request::builder()
                .method(method.clone())
                .uri(path)
                .header("sec-fetch-site", "cross-site")
                .header("sec-fetch-mode", mode)
                .header("sec-fetch-dest", dest)
                .body(axum::body::Body::empty())
                .unwrap();
            assert_eq!(
                signin_navigation(&req),
                ok,
                "{method} {path} mode={mode} dest={dest}"
            );
        };
        // what `--open`'s local redirect page does
        check(Method::GET, "/signin", "navigate", "document", true);
        check(Method::GET, "/signin", "cors", "empty", false);
        check(Method::GET, "/signin", "navigate", "iframe", false);
        check(Method::GET, "/signin", "no-cors", "script", false);
        check(Method::POST, "/signin", "navigate", "document", false);
        check(Method::GET, "/", "navigate", "document", false);
        check(
            Method::GET,
            "/api/auth/signin",
            "navigate",
            "document",
            false,
        );
        check(Method::GET, "/signin/x", "navigate", "document", false);
    }
}
