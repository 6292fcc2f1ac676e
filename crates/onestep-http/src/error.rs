//! API errors as `{"detail": …}` responses with the seed documents' status codes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use onestep_core::ConnectorErrorKind;
use onestep_core::execution::ExecutionError;
use serde_json::json;

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    /// The status.
    pub status: StatusCode,
    /// The `detail` text.
    pub detail: String,
}

impl ApiError {
    /// An error with `status` and `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            status,
            detail: detail.into(),
        }
    }

    /// 422 with `detail`.
    pub fn unprocessable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
    }

    /// 400 with `detail`.
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, detail)
    }
}

impl From<ExecutionError> for ApiError {
    fn from(err: ExecutionError) -> Self {
        let status = match &err {
            ExecutionError::NotFound(_) => StatusCode::NOT_FOUND,
            ExecutionError::NotReady(_)
            | ExecutionError::Cancelled(_)
            | ExecutionError::Conflict(_) => StatusCode::CONFLICT,
            ExecutionError::Expired(_) => StatusCode::GONE,
            ExecutionError::Failed(_)
            | ExecutionError::Encoding(_)
            | ExecutionError::InvalidArgument { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ExecutionError::LeaseLost(_) => StatusCode::CONFLICT,
            ExecutionError::Connector(c) => match c.kind {
                ConnectorErrorKind::Disconnected
                | ConnectorErrorKind::Transient
                | ConnectorErrorKind::Throttled => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let detail = match &err {
            ExecutionError::Connector(c) if status == StatusCode::SERVICE_UNAVAILABLE => {
                format!(
                    "the execution store is unavailable ({}); retry with the same Idempotency-Key",
                    c.kind
                )
            }
            ExecutionError::Connector(_) | ExecutionError::Backend(_) => {
                tracing::error!(error = %err, "execution backend failed");
                "the execution store failed; see the server log".to_string()
            }
            other => other.to_string(),
        };
        Self { status, detail }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, axum::Json(json!({"detail": self.detail}))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"onestep\""),
            );
        }
        response
    }
}
