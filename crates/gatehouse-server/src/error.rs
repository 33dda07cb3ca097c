//! API errors: a stable machine-readable `code`, an HTTP status and a safe
//! message. Internal details are logged (never secrets) and never sent.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Every way an API request can fail, as the client sees it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The Host header is not this control plane's loopback address.
    #[error("this server only answers to its loopback address")]
    MisdirectedHost,
    /// A state-changing request came from a foreign (or no) Origin.
    #[error("request origin is not allowed")]
    ForbiddenOrigin,
    /// Missing, unknown, expired or revoked session token.
    #[error("sign in again: missing or invalid session token")]
    Unauthorized,
    /// A sign-in link that is unknown, already used or expired.
    #[error("this sign-in link is invalid, already used or expired; run `gatehouse dashboard` for a new one")]
    SigninLinkInvalid,
    /// An event-stream ticket that is unknown, used or expired.
    #[error("event stream ticket is invalid, already used or expired")]
    TicketInvalid,
    /// The CLI challenge response did not verify.
    #[error("challenge response did not verify")]
    ChallengeFailed,
    /// Malformed input; the message names the field, never echoes values.
    #[error("{0}")]
    BadRequest(String),
    /// A request body that is not declared as JSON.
    #[error("send the request body as JSON, with `Content-Type: application/json`")]
    UnsupportedMediaType,
    /// A request body over the size limit.
    #[error("the request body is too large")]
    TooLarge,
    /// A request body that did not arrive within the time allowed.
    #[error("the request body did not arrive in time")]
    SlowBody,
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request conflicts with the current state (e.g. approving a hash that is not the pending one).
    #[error("{0}")]
    Conflict(String),
    /// A feature whose backing component is not available in this build.
    #[error("{0} is not available in this build")]
    Unavailable(&'static str),
    /// The OS keyring does not answer (locked, no Secret Service, timed
    /// out); the message says why, with names and reasons only.
    #[error("the OS keyring is unavailable: {0}")]
    KeyringUnavailable(String),
    /// Anything else; details are logged, not returned.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// Stable code clients can match on.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::MisdirectedHost => "misdirected_host",
            ApiError::ForbiddenOrigin => "forbidden_origin",
            ApiError::Unauthorized => "unauthorized",
            ApiError::SigninLinkInvalid => "signin_link_invalid",
            ApiError::TicketInvalid => "ticket_invalid",
            ApiError::ChallengeFailed => "challenge_failed",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::UnsupportedMediaType => "unsupported_media_type",
            ApiError::TooLarge => "too_large",
            ApiError::SlowBody => "request_timeout",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::KeyringUnavailable(_) => "keyring_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    /// HTTP status for this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::MisdirectedHost => StatusCode::MISDIRECTED_REQUEST,
            ApiError::ForbiddenOrigin => StatusCode::FORBIDDEN,
            ApiError::Unauthorized
            | ApiError::SigninLinkInvalid
            | ApiError::TicketInvalid
            | ApiError::ChallengeFailed => StatusCode::UNAUTHORIZED,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::SlowBody => StatusCode::REQUEST_TIMEOUT,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::KeyringUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Wraps an internal failure; `context` must not contain secrets.
    pub fn internal(context: impl std::fmt::Display) -> Self {
        ApiError::Internal(context.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "control plane internal error");
        }
        let body =
            serde_json::json!({ "error": { "code": self.code(), "message": self.to_string() } });
        let mut resp = (self.status(), Json(body)).into_response();
        if matches!(self, ApiError::Unauthorized) {
            resp.headers_mut().insert(
                "www-authenticate",
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// Turns axum's own rejections (bad JSON, a missing `Content-Type`, a wrong
/// field type, a bad query string, a body over the limit: plain-text 4xx
/// responses that may quote the request) into the JSON error format. The
/// message names the field at most, never a value from the request.
pub(crate) async fn rejections_as_api_errors(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let api = req.uri().path().starts_with("/api/");
    let resp = next.run(req).await;
    let plain = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    let status = resp.status();
    let rejection = matches!(
        status,
        StatusCode::BAD_REQUEST
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::UNSUPPORTED_MEDIA_TYPE
            | StatusCode::UNPROCESSABLE_ENTITY
    );
    if !api || !plain || !rejection {
        return resp;
    }
    let error = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType,
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge,
        _ => {
            let text = axum::body::to_bytes(resp.into_body(), 64 * 1024)
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            ApiError::BadRequest(describe_rejection(&text))
        }
    };
    error.into_response()
}

/// What was wrong with a request, from axum's rejection text, without any
/// value from the request: `missing field `text``, `field `token` has the
/// wrong type or value`, `the request body is not valid JSON`.
fn describe_rejection(text: &str) -> String {
    if text.starts_with("Failed to parse the request body as JSON")
        || text.starts_with("Failed to buffer the request body")
    {
        return "the request body is not valid JSON".to_owned();
    }
    let what = if text.starts_with("Failed to deserialize query string") {
        "query"
    } else if text.starts_with("Failed to deserialize the JSON body") {
        "request body"
    } else {
        "request"
    };
    // axum: "<prefix>: <path>: <serde message>" (the path from serde_path_to_error).
    let detail = text.split_once(": ").map_or("", |(_, rest)| rest);
    // Only serde's own wording at the start: a value could hold the same text.
    if let Some(name) = detail
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name)
    {
        return format!("the {what} is missing field `{}`", cap(name));
    }
    if detail.contains("unknown field `") {
        // The name is the request's own key: it could be anything.
        return format!("the {what} has an unknown field");
    }
    match detail.split_once(": ") {
        Some((path, _)) if !path.is_empty() && path != "." && !path.contains(['"', '`', ' ']) => {
            format!(
                "field `{}` of the {what} has the wrong type or value",
                cap(path)
            )
        }
        _ => format!("the {what} does not have the expected shape"),
    }
}

/// Field names come from the request too: keep them short.
fn cap(name: &str) -> String {
    if name.chars().count() > 64 {
        name.chars().take(64).chain(['…']).collect()
    } else {
        name.to_owned()
    }
}
