//! `onestep run --metrics-addr HOST:PORT`: Prometheus `/metrics`, `/healthz` and `/readyz` on
//! their own listener, opened after the resources (the reference's `install_metrics`) and
//! closed at shutdown.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use onestep_core::metrics::PrometheusExporter;
use onestep_core::{AppBuilder, AppHandle, BoxError, RunnerStatus};
use onestep_http::ServerLimits;
use onestep_http::metrics::metrics_router;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One task as `/healthz` reports it: its name and its source's runtime name and class.
#[derive(Debug, Clone)]
pub struct ProbedTask {
    /// The task.
    pub task: String,
    /// Its source's name and the reference's class for its type, when it has one.
    pub source: Option<(String, String)>,
}

/// `HOST:PORT`, or `:PORT` for every interface, as the reference reads `--metrics-addr`.
pub fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    let spelled = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    spelled
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("--metrics-addr must be HOST:PORT or :PORT, got {text:?}"))
}

struct Probe {
    app: String,
    tasks: Vec<ProbedTask>,
    exporter: Arc<PrometheusExporter>,
    handle: OnceLock<AppHandle>,
    started: OnceLock<Instant>,
    stop: Arc<Notify>,
}

impl Probe {
    fn alive(&self, task: &str) -> bool {
        self.handle
            .get()
            .and_then(|h| h.task_status(task))
            .is_some_and(|s| matches!(s, RunnerStatus::Running | RunnerStatus::Parked))
    }

    fn stopping(&self) -> bool {
        self.handle.get().is_none_or(AppHandle::is_shutting_down)
    }

    fn ready(&self) -> bool {
        !self.stopping()
            && self
                .tasks
                .iter()
                .all(|t| t.source.is_none() || self.alive(&t.task))
    }

    /// The reference's `/healthz` snapshot.
    fn health(&self) -> Value {
        let tasks: Vec<Value> = self
            .tasks
            .iter()
            .map(|t| {
                json!({
                    "task": t.task,
                    "source": t.source.as_ref().map(|(name, kind)| json!({
                        "name": name,
                        "kind": kind,
                        "alive": self.alive(&t.task),
                    })),
                    "inflight": self.exporter.inflight(&self.app, &t.task),
                })
            })
            .collect();
        let healthy = !self.stopping()
            && self
                .tasks
                .iter()
                .all(|t| t.source.is_none() || self.alive(&t.task));
        json!({
            "status": if healthy { "ok" } else { "degraded" },
            "app": self.app,
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_s": self.started.get().map_or(0.0, |s| (s.elapsed().as_secs_f64() * 1000.0).round() / 1000.0),
            "stopping": self.stopping(),
            "tasks": tasks,
        })
    }
}

/// Adds `exporter` and the probe listener on `addr` to `builder`.
pub fn install(
    builder: AppBuilder,
    exporter: Arc<PrometheusExporter>,
    addr: SocketAddr,
    app: &str,
    tasks: Vec<ProbedTask>,
) -> AppBuilder {
    let probe = Arc::new(Probe {
        app: app.to_owned(),
        tasks,
        exporter: exporter.clone(),
        handle: OnceLock::new(),
        started: OnceLock::new(),
        stop: Arc::new(Notify::new()),
    });
    let (on_start, on_stop) = (probe.clone(), probe.stop.clone());
    builder
        .metrics(exporter.clone())
        .on_event(move |event| exporter.record(event))
        .on_startup(move |handle| {
            let probe = on_start.clone();
            async move {
                let _ = probe.handle.set(handle);
                let _ = probe.started.set(Instant::now());
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| BoxError::from(format!("--metrics-addr {addr}: {e}")))?;
                let bound = listener.local_addr().map_or(addr, |a| a);
                let (health, ready) = (probe.clone(), probe.clone());
                let router = metrics_router(
                    probe.exporter.clone(),
                    Arc::new(move || health.health()),
                    Arc::new(move || ready.ready()),
                );
                let stop = probe.stop.clone();
                tokio::spawn(async move {
                    let served = onestep_http::serve_with(listener, router, ServerLimits::default(), async move {
                        stop.notified().await;
                    })
                    .await;
                    if let Err(e) = served {
                        tracing::error!(error = %e, "the metrics server stopped");
                    }
                });
                tracing::info!(target: "onestep.observability", "metrics server listening on {bound}");
                Ok(())
            }
        })
        .on_shutdown(move |_handle| {
            let stop = on_stop.clone();
            async move {
                stop.notify_one();
                Ok(())
            }
        })
}

#[cfg(test)]
mod tests {
    use super::parse_addr;

    #[test]
    fn addresses_read_as_the_reference_reads_them() {
        assert_eq!(parse_addr(":9100").unwrap().to_string(), "0.0.0.0:9100");
        assert_eq!(parse_addr("127.0.0.1:0").unwrap().port(), 0);
        assert!(parse_addr("nonsense").is_err());
        assert!(parse_addr(":http").is_err());
    }
}
