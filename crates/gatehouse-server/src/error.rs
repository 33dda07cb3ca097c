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
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The request conflicts with the current state (e.g. approving a hash that is not the pending one).
    #[error("{0}")]
    Conflict(String),
    /// A feature whose backing component is not available in this build.
    #[error("{0} is not available in this build")]
    Unavailable(&'static str),
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
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict(_) => "conflict",
            ApiError::Unavailable(_) => "unavailable",
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
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::NOT_IMPLEMENTED,
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
