//! A worker's probe endpoints, as the reference's `onestep run --metrics-addr` serves them:
//! `GET /metrics` (Prometheus text from a [`PrometheusExporter`]), `GET /healthz` (a JSON
//! snapshot; 200 when its `status` is `ok`, else 503) and, beyond the reference, `GET /readyz`
//! (200 once the worker runs every task and is not stopping, else 503) for a Kubernetes
//! readiness probe. Other methods get 405, other paths 404, both as JSON.

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use onestep_core::metrics::PrometheusExporter;
use serde_json::{Value, json};

/// Makes the `/healthz` payload: `{"status": "ok" | "degraded", …}`.
pub type HealthFn = Arc<dyn Fn() -> Value + Send + Sync>;

/// Says whether the worker is ready for traffic.
pub type ReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// The probe router; serve it with [`serve_with`](crate::serve_with).
pub fn metrics_router(
    exporter: Arc<PrometheusExporter>,
    health: HealthFn,
    ready: ReadyFn,
) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let exporter = exporter.clone();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        exporter.render(),
                    )
                }
            })
            .fallback(not_allowed),
        )
        .route(
            "/healthz",
            get(move || {
                let payload = health();
                async move {
                    let status = if payload["status"] == "ok" {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    (status, axum::Json(payload))
                }
            })
            .fallback(not_allowed),
        )
        .route(
            "/readyz",
            get(move || {
                let ready = ready();
                async move {
                    let status = if ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    (status, axum::Json(json!({"ready": ready})))
                }
            })
            .fallback(not_allowed),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(json!({"error": "not_found"})),
            )
        })
}

async fn not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, HEAD")],
        axum::Json(json!({"error": "method_not_allowed"})),
    )
        .into_response()
}
