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
                    let executions = onestep_core::metrics::execution::execution_metrics();
                    executions.sample_backlog().await;
                    let mut text = exporter.render();
                    text.push_str(&executions.render());
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        text,
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

/// Request counts and latencies of an HTTP API, by method, route template (`/v1/executions/{id}`,
/// never the raw path, so the series stay few) and status, plus what the server limits turned
/// away. Count with [`with_http_metrics`]; [`HttpMetrics::render`] writes:
///
/// | family | type | labels |
/// |---|---|---|
/// | `onestep_http_requests_total` | counter | `method`, `route`, `status` |
/// | `onestep_http_request_duration_seconds` | histogram | `method`, `route` |
/// | `onestep_http_refused_connections_total`, `…_header_timeouts_total`, `…_idle_closed_total`, `…_busy_rejections_total`, `…_malformed_requests_total`, `…_accept_errors_total` | counter | |
#[derive(Debug, Default)]
pub struct HttpMetrics {
    requests: std::sync::Mutex<std::collections::BTreeMap<(String, String, u16), u64>>,
    durations: std::sync::Mutex<std::collections::BTreeMap<(String, String), Latency>>,
}

#[derive(Debug, Default, Clone)]
struct Latency {
    count: u64,
    sum: f64,
    buckets: [u64; onestep_core::metrics::BUCKETS.len()],
}

impl HttpMetrics {
    /// Counts one answered request.
    pub fn record(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *requests
            .entry((method.to_owned(), route.to_owned(), status))
            .or_default() += 1;
        drop(requests);
        let mut durations = self
            .durations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let latency = durations
            .entry((method.to_owned(), route.to_owned()))
            .or_default();
        latency.count += 1;
        latency.sum += seconds;
        for (bound, count) in onestep_core::metrics::BUCKETS
            .iter()
            .zip(latency.buckets.iter_mut())
        {
            if seconds <= *bound {
                *count += 1;
            }
        }
    }

    /// The Prometheus text of the requests and of `counters`.
    pub fn render(&self, counters: &crate::server::ServerCounters) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let label = |v: &str| {
            v.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        };
        let _ = writeln!(
            out,
            "# HELP onestep_http_requests_total HTTP requests answered\n# TYPE onestep_http_requests_total counter"
        );
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for ((method, route, status), n) in &requests {
            let _ = writeln!(
                out,
                "onestep_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{status}\"}} {n}",
                label(method),
                label(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP onestep_http_request_duration_seconds HTTP request latency in seconds\n# TYPE onestep_http_request_duration_seconds histogram"
        );
        let durations = self
            .durations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for ((method, route), l) in &durations {
            let labels = format!("method=\"{}\",route=\"{}\"", label(method), label(route));
            let mut cumulative = 0;
            for (bound, count) in onestep_core::metrics::BUCKETS.iter().zip(l.buckets) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "onestep_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "onestep_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}\nonestep_http_request_duration_seconds_count{{{labels}}} {}\nonestep_http_request_duration_seconds_sum{{{labels}}} {}",
                l.count, l.count, l.sum
            );
        }
        for (name, help, value) in [
            (
                "refused_connections",
                "Connections refused at max_connections",
                counters.refused_connections(),
            ),
            (
                "header_timeouts",
                "Connections closed for a slow request head",
                counters.header_timeouts(),
            ),
            (
                "idle_closed",
                "Kept-alive connections closed when idle",
                counters.idle_closed(),
            ),
            (
                "busy_rejections",
                "Requests answered 503 at max_in_flight",
                counters.busy_rejections(),
            ),
            (
                "malformed_requests",
                "Requests refused as malformed",
                counters.malformed_requests(),
            ),
            (
                "accept_errors",
                "Errors accepting connections",
                counters.accept_errors(),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP onestep_http_{name}_total {help}\n# TYPE onestep_http_{name}_total counter\nonestep_http_{name}_total {value}"
            );
        }
        out
    }
}

/// `router` with every request counted into `metrics` (by its route template; a path no route
/// matched counts as `unmatched`).
pub fn with_http_metrics(router: Router, metrics: Arc<HttpMetrics>) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let metrics = metrics.clone();
            async move {
                let method = request.method().as_str().to_owned();
                let route = request
                    .extensions()
                    .get::<axum::extract::MatchedPath>()
                    .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
                let started = std::time::Instant::now();
                let response = next.run(request).await;
                metrics.record(
                    &method,
                    &route,
                    response.status().as_u16(),
                    started.elapsed().as_secs_f64(),
                );
                response
            }
        },
    ))
}

/// `GET /metrics` of an HTTP API: `metrics` and `counters` as Prometheus text; with `token`,
/// only for `Authorization: Bearer <token>` (401 otherwise).
pub fn api_metrics_route(
    metrics: Arc<HttpMetrics>,
    counters: Arc<crate::server::ServerCounters>,
    token: Option<String>,
) -> Router {
    Router::new().route(
        "/metrics",
        get(move |headers: axum::http::HeaderMap| {
            let (metrics, counters, token) = (metrics.clone(), counters.clone(), token.clone());
            async move {
                if let Some(expected) = &token {
                    let given = headers
                        .get(header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "));
                    if !given
                        .is_some_and(|g| crate::constant_time_eq(g.as_bytes(), expected.as_bytes()))
                    {
                        return (
                            StatusCode::UNAUTHORIZED,
                            axum::Json(json!({"detail": "missing or invalid bearer token"})),
                        )
                            .into_response();
                    }
                }
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    metrics.render(&counters)
                        + &onestep_core::metrics::execution::execution_metrics().render(),
                )
                    .into_response()
            }
        })
        .fallback(not_allowed),
    )
}
