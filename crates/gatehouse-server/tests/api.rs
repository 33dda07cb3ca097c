//! API tests through the whole router (guard, auth, handlers) with
//! `tower::ServiceExt::oneshot`, plus a few over real TCP on 127.0.0.1:0.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use gatehouse_server::{auth::Clock, router, AppState, ServerConfig};
use serde_json::{json, Value};
use tower::ServiceExt;

const PORT: u16 = 4321;
const HOST: &str = "127.0.0.1:4321";
const ORIGIN: &str = "http://127.0.0.1:4321";

#[derive(Default)]
struct ManualClock(AtomicI64);
impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Harness {
    state: AppState,
    clock: Arc<ManualClock>,
    _home: tempfile::TempDir,
    _stop: tokio::sync::watch::Sender<bool>,
}

struct Resp {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

impl Harness {
    fn new() -> Self {
        let home = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock(AtomicI64::new(1_700_000_000_000)));
        let mut config = ServerConfig::new(home.path().to_path_buf());
        config.clock = clock.clone();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let state = AppState::new(&config, PORT, "cli-secret".into(), rx);
        Harness {
            state,
            clock,
            _home: home,
            _stop: stop,
        }
    }

    async fn send(&self, req: Request<Body>) -> Resp {
        let resp = router(self.state.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()));
        Resp {
            status,
            headers,
            body,
        }
    }

    /// A well-formed request; `token` adds a bearer header.
    fn req(
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> axum::http::request::Builder {
        let mut b = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header("host", HOST);
        if method != Method::GET {
            b = b.header("origin", ORIGIN);
        }
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            b = b.header("content-type", "application/json");
        }
        b
    }

    async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Resp {
        let b = Self::req(method.clone(), uri, token, body.clone());
        let body = body
            .map(|v| Body::from(v.to_string()))
            .unwrap_or_else(Body::empty);
        self.send(b.body(body).unwrap()).await
    }

    async fn sign_in(&self) -> String {
        let link = self.state.auth.mint_signin();
        let r = self
            .call(
                Method::POST,
                "/api/auth/signin",
                None,
                Some(json!({ "token": link })),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::OK,
            "fresh sign-in link must work: {:?}",
            r.body
        );
        r.body["token"].as_str().unwrap().to_owned()
    }
}

fn expect_error(r: &Resp, status: StatusCode, code: &str) {
    assert_eq!(
        r.status, status,
        "expected {status} {code}, got body {:?}",
        r.body
    );
    assert_eq!(r.body["error"]["code"], code, "stable error code");
}

#[tokio::test]
async fn every_response_has_strict_security_headers() {
    let h = Harness::new();
    let foreign = Request::builder()
        .uri("/")
        .header("host", "evil.example")
        .body(Body::empty())
        .unwrap();
    for r in [
        h.call(Method::GET, "/", None, None).await,
        h.call(Method::GET, "/api/events", None, None).await,
        h.send(foreign).await,
    ] {
        let csp = r.headers["content-security-policy"].to_str().unwrap();
        assert_eq!(
            csp,
            gatehouse_server::guard::CSP,
            "CSP on status {}",
            r.status
        );
        for needle in [
            "script-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
            "base-uri 'none'",
        ] {
            assert!(csp.contains(needle), "CSP must contain {needle}");
        }
        assert!(
            !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
            "no inline script or eval"
        );
        assert_eq!(r.headers["x-content-type-options"], "nosniff");
        assert_eq!(r.headers["referrer-policy"], "no-referrer");
    }
}

#[tokio::test]
async fn foreign_host_is_refused() {
    let h = Harness::new();
    for host in [
        "evil.example",
        "evil.example:4321",
        "127.0.0.1:9",
        "localhost",
        "127.0.0.1.nip.io:4321",
    ] {
        let req = Request::builder()
            .uri("/api/health")
            .header("host", host)
            .body(Body::empty())
            .unwrap();
        expect_error(
            &h.send(req).await,
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected_host",
        );
    }
    let no_host = Request::builder()
        .uri("/api/health")
        .body(Body::empty())
        .unwrap();
    expect_error(
        &h.send(no_host).await,
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected_host",
    );
    for host in ["127.0.0.1:4321", "localhost:4321", "[::1]:4321"] {
        let req = Request::builder()
            .uri("/api/health")
            .header("host", host)
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            h.send(req).await.status,
            StatusCode::OK,
            "loopback host {host} must be served"
        );
    }
}

#[tokio::test]
async fn state_changes_need_our_origin() {
    let h = Harness::new();
    let token = h.sign_in().await;
    let cases: [(Option<&str>, Option<&str>); 4] = [
        (None, None),
        (Some("http://evil.example"), None),
        (Some("null"), None),
        (Some("http://127.0.0.1:9999"), None),
    ];
    for (origin, _) in cases {
        let mut b = Request::builder()
            .method(Method::POST)
            .uri("/api/events/ticket")
            .header("host", HOST)
            .header("authorization", format!("Bearer {token}"));
        if let Some(o) = origin {
            b = b.header("origin", o);
        }
        expect_error(
            &h.send(b.body(Body::empty()).unwrap()).await,
            StatusCode::FORBIDDEN,
            "forbidden_origin",
        );
    }
    // A read with a foreign Origin or from a cross-site fetch is refused too.
    let read = Request::builder()
        .uri("/api/sessions")
        .header("host", HOST)
        .header("origin", "http://evil.example");
    let read = read
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    expect_error(
        &h.send(read).await,
        StatusCode::FORBIDDEN,
        "forbidden_origin",
    );
    let cross = Request::builder()
        .uri("/api/sessions")
        .header("host", HOST)
        .header("sec-fetch-site", "cross-site");
    let cross = cross
        .header("authorization", format!("Bearer {token}"))
        .body(Body::empty())
        .unwrap();
    expect_error(
        &h.send(cross).await,
        StatusCode::FORBIDDEN,
        "forbidden_origin",
    );
    // Our own origin works.
    let ok = h
        .call(Method::POST, "/api/events/ticket", Some(&token), None)
        .await;
    assert_eq!(
        ok.status,
        StatusCode::OK,
        "own origin must be accepted: {:?}",
        ok.body
    );
}

#[tokio::test]
async fn api_needs_a_session_token() {
    let h = Harness::new();
    for (m, uri) in [
        (Method::GET, "/api/sessions"),
        (Method::POST, "/api/events/ticket"),
        (Method::DELETE, "/api/sessions/x"),
    ] {
        let r = h.call(m.clone(), uri, None, None).await;
        expect_error(&r, StatusCode::UNAUTHORIZED, "unauthorized");
        assert_eq!(r.headers["www-authenticate"], "Bearer");
        expect_error(
            &h.call(m, uri, Some("forged-token"), None).await,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        );
    }
}

#[tokio::test]
async fn signin_links_are_single_use_and_expire() {
    let h = Harness::new();
    let link = h.state.auth.mint_signin();
    let first = h
        .call(
            Method::POST,
            "/api/auth/signin",
            None,
            Some(json!({ "token": link })),
        )
        .await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(
        first.body["token"].as_str().is_some_and(|t| t.len() >= 40),
        "session token is long and random"
    );
    let reused = h
        .call(
            Method::POST,
            "/api/auth/signin",
            None,
            Some(json!({ "token": link })),
        )
        .await;
    expect_error(&reused, StatusCode::UNAUTHORIZED, "signin_link_invalid");

    let link = h.state.auth.mint_signin();
    h.clock.0.fetch_add(60_000, Ordering::SeqCst);
    let expired = h
        .call(
            Method::POST,
            "/api/auth/signin",
            None,
            Some(json!({ "token": link })),
        )
        .await;
    expect_error(&expired, StatusCode::UNAUTHORIZED, "signin_link_invalid");
    let forged = h
        .call(
            Method::POST,
            "/api/auth/signin",
            None,
            Some(json!({ "token": "made-up" })),
        )
        .await;
    expect_error(&forged, StatusCode::UNAUTHORIZED, "signin_link_invalid");
}

#[tokio::test]
async fn sessions_list_and_revoke() {
    let h = Harness::new();
    let a = h.sign_in().await;
    let b = h.sign_in().await;
    let list = h.call(Method::GET, "/api/sessions", Some(&a), None).await;
    let items = list.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "both sign-ins are listed");
    assert_eq!(
        items.iter().filter(|s| s["current"] == true).count(),
        1,
        "exactly one is the caller"
    );
    assert!(
        !list.body.to_string().contains(&b),
        "tokens are never listed"
    );
    let other = items.iter().find(|s| s["current"] == false).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let del = h
        .call(
            Method::DELETE,
            &format!("/api/sessions/{other}"),
            Some(&a),
            None,
        )
        .await;
    assert_eq!(del.status, StatusCode::NO_CONTENT);
    expect_error(
        &h.call(Method::GET, "/api/sessions", Some(&b), None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let again = h
        .call(
            Method::DELETE,
            &format!("/api/sessions/{other}"),
            Some(&a),
            None,
        )
        .await;
    expect_error(&again, StatusCode::NOT_FOUND, "not_found");
    let out = h
        .call(Method::POST, "/api/auth/signout", Some(&a), None)
        .await;
    assert_eq!(out.status, StatusCode::NO_CONTENT);
    expect_error(
        &h.call(Method::GET, "/api/sessions", Some(&a), None).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
}

#[tokio::test]
async fn cli_challenge_mints_a_link_only_with_the_secret() {
    let h = Harness::new();
    let nonce = h
        .call(Method::GET, "/api/cli/challenge", None, None)
        .await
        .body["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let bad = json!({ "nonce": nonce, "mac": gatehouse_server::auth::cli_mac("guess", &nonce) });
    expect_error(
        &h.call(Method::POST, "/api/cli/signin-link", None, Some(bad))
            .await,
        StatusCode::UNAUTHORIZED,
        "challenge_failed",
    );
    let nonce = h
        .call(Method::GET, "/api/cli/challenge", None, None)
        .await
        .body["nonce"]
        .as_str()
        .unwrap()
        .to_owned();
    let good =
        json!({ "nonce": nonce, "mac": gatehouse_server::auth::cli_mac("cli-secret", &nonce) });
    let r = h
        .call(
            Method::POST,
            "/api/cli/signin-link",
            None,
            Some(good.clone()),
        )
        .await;
    let url = r.body["url"].as_str().expect("a sign-in path");
    let token = url
        .strip_prefix("/signin#t=")
        .expect("link has the token in the fragment");
    let replay = h
        .call(Method::POST, "/api/cli/signin-link", None, Some(good))
        .await;
    expect_error(&replay, StatusCode::UNAUTHORIZED, "challenge_failed");
    let s = h
        .call(
            Method::POST,
            "/api/auth/signin",
            None,
            Some(json!({ "token": token })),
        )
        .await;
    assert_eq!(s.status, StatusCode::OK, "the CLI's link signs in");
}

#[tokio::test]
async fn dashboard_pages_are_served_and_unknown_paths_404() {
    let h = Harness::new();
    for page in ["/", "/signin", "/events", "/tools", "/consent", "/policy"] {
        let r = h.call(Method::GET, page, None, None).await;
        assert_eq!(r.status, StatusCode::OK, "page {page}");
        assert!(r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html"));
    }
    assert_eq!(
        h.call(Method::GET, "/nope.php", None, None).await.status,
        StatusCode::NOT_FOUND
    );
    expect_error(
        &h.call(Method::GET, "/api/nope", None, None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

#[tokio::test]
async fn real_tcp_server_binds_loopback_and_cli_gets_a_link() {
    let home = tempfile::tempdir().unwrap();
    let handle = gatehouse_server::serve(ServerConfig::new(home.path().to_path_buf()))
        .await
        .unwrap();
    assert_ne!(handle.port(), 0, "port 0 picks a free port");
    let info = handle.control_info();
    let url =
        tokio::task::spawn_blocking(move || gatehouse_server::control::request_signin_url(&info))
            .await
            .unwrap()
            .expect("CLI challenge over TCP works");
    assert!(
        url.starts_with(&format!("http://127.0.0.1:{}/signin#t=", handle.port())),
        "got {url}"
    );
    let mut wrong = handle.control_info();
    wrong.cli_secret = "not-it".into();
    let err =
        tokio::task::spawn_blocking(move || gatehouse_server::control::request_signin_url(&wrong))
            .await
            .unwrap();
    assert!(err.is_err(), "a wrong secret must not get a link");
    handle.shutdown().await;
}
