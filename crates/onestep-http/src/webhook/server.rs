use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Result,
};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::options::WebhookOptions;
use super::options::normalise_path;
use super::reply::Reject;
use super::request::Endpoint;
use super::{WebhookSource, lock};
use crate::server::{ServerCounters, ServerLimits, serve_counted};

/// Running servers by (host, bound port).
type Running = HashMap<(String, u16), Arc<Server>>;

/// The listeners of the webhook sources built from it: sources with the same `(host, port)`
/// share one listener, each serving its own path.
///
/// Clones share the listeners. A source made with [`WebhookSource::new`] has a
/// `WebhookServers` of its own, so it shares its port with no one; build every source that
/// should share a port from one value with [`WebhookServers::source`]. The YAML loader does so
/// for all webhook sources of one app.
///
/// ```no_run
/// use onestep_http::webhook::{WebhookOptions, WebhookServers};
///
/// # fn demo() -> onestep_core::Result<()> {
/// let servers = WebhookServers::new();
/// let orders = servers.source(WebhookOptions::new("/hooks/orders"))?;
/// let refunds = servers.source(WebhookOptions::new("/hooks/refunds"))?;
/// // Opened, both answer on 127.0.0.1:8080.
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct WebhookServers {
    running: Arc<tokio::sync::Mutex<Running>>,
    limits: ServerLimits,
    counters: Arc<ServerCounters>,
}

impl fmt::Debug for WebhookServers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookServers")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl WebhookServers {
    /// Servers with [`ServerLimits::default`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Servers that bound every client by `limits` (slow heads, connections, requests in
    /// flight; see [`crate::server`]). The body deadline stays each source's `read_timeout`.
    pub fn with_limits(limits: ServerLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// What the limits turned away, over every listener of these servers.
    pub fn counters(&self) -> &ServerCounters {
        &self.counters
    }

    /// A source served by these servers; invalid options fail with field-qualified messages.
    pub fn source(&self, options: WebhookOptions) -> Result<WebhookSource> {
        WebhookSource::build(options, self.clone())
    }

    /// Starts or joins the listener for the endpoint's `(host, port)` and adds its route.
    pub(super) async fn attach(&self, endpoint: &Arc<Endpoint>) -> Result<Arc<Server>> {
        let options = &endpoint.options;
        let mut running = self.running.lock().await;
        let shared = (options.port != 0)
            .then(|| running.get(&(options.host.clone(), options.port)))
            .flatten()
            .filter(|s| s.is_running())
            .cloned();
        let server = match shared {
            Some(server) => server,
            None => {
                let server =
                    Server::start(self, &options.host, options.port, &endpoint.name).await?;
                running.insert((options.host.clone(), server.addr.port()), server.clone());
                server
            }
        };
        server.routes.add(endpoint, server.addr)?;
        Ok(server)
    }

    /// Removes the endpoint's route; the last route on a server stops it (in-flight requests
    /// get `grace` to finish) and frees its port.
    pub(super) async fn detach(
        &self,
        endpoint: &Arc<Endpoint>,
        server: Arc<Server>,
        grace: Duration,
    ) {
        let mut running = self.running.lock().await;
        if server.routes.remove(endpoint) {
            let key = (server.host.clone(), server.addr.port());
            if running.get(&key).is_some_and(|s| Arc::ptr_eq(s, &server)) {
                running.remove(&key);
            }
            server.stop(grace).await;
        }
    }
}

/// One listener and its route table; the serve loop is owned by `tasks`.
pub(super) struct Server {
    host: String,
    pub(super) addr: SocketAddr,
    routes: Arc<Routes>,
    running: Arc<AtomicBool>,
    stop: CancellationToken,
    tasks: Mutex<JoinSet<()>>,
}

/// Clears `running` when the serve loop ends or is dropped (its runtime shut down).
struct RunningFlag(Arc<AtomicBool>);

impl Drop for RunningFlag {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Server {
    async fn start(
        servers: &WebhookServers,
        host: &str,
        port: u16,
        source_name: &str,
    ) -> Result<Arc<Self>> {
        let open_error = |e: std::io::Error| {
            let kind = if e.kind() == std::io::ErrorKind::AddrInUse {
                ConnectorErrorKind::Misconfigured
            } else {
                ConnectorErrorKind::Disconnected
            };
            let message = if e.kind() == std::io::ErrorKind::AddrInUse {
                format!(
                    "{host}:{port} is already in use (webhook sources that share a port must be \
                     built from one WebhookServers)"
                )
            } else {
                format!("cannot listen on {host}:{port}: {e}")
            };
            Error::from(
                ConnectorOperationError::new(
                    "webhook",
                    ConnectorOperation::Open,
                    kind,
                    source_name,
                )
                .with_cause(std::io::Error::new(e.kind(), message)),
            )
        };
        let listener = tokio::net::TcpListener::bind((host, port))
            .await
            .map_err(open_error)?;
        let addr = listener.local_addr().map_err(open_error)?;
        let routes = Arc::new(Routes::default());
        let router = Router::new().fallback(dispatch).with_state(routes.clone());
        let stop = CancellationToken::new();
        let running = Arc::new(AtomicBool::new(true));
        let flag = RunningFlag(running.clone());
        let signal = stop.clone().cancelled_owned();
        let limits = servers.limits.clone();
        let counters = servers.counters.clone();
        let mut tasks = JoinSet::new();
        tasks.spawn(async move {
            let _flag = flag;
            if let Err(err) = serve_counted(listener, router, limits, counters, signal).await {
                tracing::error!(%addr, error = %err, "webhook server failed");
            }
            tracing::info!(%addr, "webhook server stopped");
        });
        tracing::info!(%addr, "webhook server listening");
        Ok(Arc::new(Self {
            host: host.to_string(),
            addr,
            routes,
            running,
            stop,
            tasks: Mutex::new(tasks),
        }))
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Stops accepting, lets in-flight requests finish within `grace`, then aborts.
    async fn stop(&self, grace: Duration) {
        self.stop.cancel();
        let mut tasks = std::mem::take(&mut *lock(&self.tasks));
        let drained =
            tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(addr = %self.addr, "webhook server did not stop in time; aborting");
            tasks.shutdown().await;
        }
    }
}

/// Path → method → endpoint.
#[derive(Default)]
struct Routes {
    by_path: Mutex<HashMap<String, BTreeMap<String, Arc<Endpoint>>>>,
}

impl Routes {
    fn add(&self, endpoint: &Arc<Endpoint>, addr: SocketAddr) -> Result<()> {
        let mut by_path = lock(&self.by_path);
        let path = &endpoint.options.path;
        if let Some(taken) = by_path.get(path) {
            for method in &endpoint.options.methods {
                if let Some(other) = taken.get(method)
                    && !Arc::ptr_eq(other, endpoint)
                {
                    return Err(Error::Configuration(format!(
                        "duplicate webhook route for {method} {path} on {addr}: {} already serves it",
                        other.name
                    )));
                }
            }
        }
        let methods = by_path.entry(path.clone()).or_default();
        for method in &endpoint.options.methods {
            methods.insert(method.clone(), endpoint.clone());
        }
        Ok(())
    }

    /// Removes `endpoint`'s routes; returns whether no route is left.
    fn remove(&self, endpoint: &Arc<Endpoint>) -> bool {
        let mut by_path = lock(&self.by_path);
        if let Some(methods) = by_path.get_mut(&endpoint.options.path) {
            methods.retain(|_, e| !Arc::ptr_eq(e, endpoint));
            if methods.is_empty() {
                by_path.remove(&endpoint.options.path);
            }
        }
        by_path.is_empty()
    }

    fn resolve(&self, path: &str, method: &str) -> Result<Arc<Endpoint>, Reject> {
        let by_path = lock(&self.by_path);
        let Some(methods) = by_path.get(normalise_path(path)) else {
            return Err(Reject::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no webhook at {path}"),
            ));
        };
        if let Some(endpoint) = methods.get(method) {
            return Ok(endpoint.clone());
        }
        let allowed = methods.keys().cloned().collect::<Vec<_>>().join(", ");
        let mut reject = Reject::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("{method} is not allowed on {path}; allowed: {allowed}"),
        );
        if let Ok(value) = HeaderValue::from_str(&allowed) {
            reject = reject.header(header::ALLOW, value);
        }
        Err(reject)
    }
}

async fn dispatch(
    State(routes): State<Arc<Routes>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let endpoint = match routes.resolve(parts.uri.path(), parts.method.as_str()) {
        Ok(endpoint) => endpoint,
        Err(reject) => return reject.into_response(),
    };
    match endpoint.accept(&parts, body, peer).await {
        Ok(()) => endpoint.reply.render(),
        Err(reject) => reject.into_response(),
    }
}
