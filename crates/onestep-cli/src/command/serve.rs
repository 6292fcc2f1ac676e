//! `onestep serve`: the HTTP executions API as its own process.

use onestep_core::execution::ExecutionClient;
use onestep_http::ExecutionApi;
use onestep_http::dashboard::Dashboard;
use onestep_http::metrics::{HttpMetrics, api_metrics_route, with_http_metrics};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};

use super::with_dialect;

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The database; `ONESTEP_DSN` when absent.
    #[arg(long, env = "ONESTEP_DSN", hide_env_values = true)]
    dsn: String,
    /// The namespace this API submits into and reads from.
    #[arg(long)]
    namespace: String,
    /// A task name clients may submit (repeat for several). Without any, every task is accepted.
    #[arg(long = "allow-task")]
    allow_task: Vec<String>,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Require `Authorization: Bearer <token>` on /v1 routes; `ONESTEP_API_TOKEN` when absent.
    #[arg(long, env = "ONESTEP_API_TOKEN", hide_env_values = true)]
    bearer_token: Option<String>,
    /// The executions table.
    #[arg(long, default_value = "onestep_executions")]
    table: String,
    /// The attempts table.
    #[arg(long, default_value = "onestep_execution_attempts")]
    attempts_table: String,
    /// Create missing tables (by default the API expects `onestep init-db` to have run).
    #[arg(long)]
    auto_create: bool,
    /// Seconds a client has to send a whole request body; 408 after that.
    #[arg(long, default_value = "30", value_parser = positive_seconds)]
    body_timeout_s: std::time::Duration,
    /// Seconds a client has to send a request head (request line and headers), counted from its
    /// first byte or from connecting; 408 and the connection closed after that.
    #[arg(long, default_value = "10", value_parser = positive_seconds)]
    header_timeout_s: std::time::Duration,
    /// Seconds a kept-alive connection may wait for its next request before it is closed.
    #[arg(long, default_value = "60", value_parser = positive_seconds)]
    idle_timeout_s: std::time::Duration,
    /// Connections served at once; more are answered 503 (Retry-After: 1) and closed. Default:
    /// 4096, or the open-file limit less 256 when that is lower.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Requests handled at once; more are answered 503 (Retry-After: 1).
    #[arg(long, default_value = "512", value_parser = clap::value_parser!(u32).range(1..))]
    max_in_flight: u32,
    /// Also serve the web dashboard of the namespace (under `--ui-prefix`). With a bearer token
    /// set, the dashboard asks for it too (a sign-in page, then a session cookie).
    #[arg(long)]
    ui: bool,
    /// Where the dashboard lives: a path like `/ui`, or `""` for the root.
    #[arg(long, default_value = "/ui", requires = "ui")]
    ui_prefix: String,
    /// The dashboard shows, but offers no cancel or "submit again".
    #[arg(long, requires = "ui")]
    ui_read_only: bool,
    /// Protect the dashboard with HTTP basic authentication, `USER:PASSWORD`
    /// (`ONESTEP_UI_BASIC_AUTH` when absent) instead of the bearer token.
    #[arg(
        long,
        env = "ONESTEP_UI_BASIC_AUTH",
        hide_env_values = true,
        requires = "ui"
    )]
    ui_basic_auth: Option<String>,
}

/// Parses `--body-timeout-s`: a number of seconds above 0 that fits a duration.
fn positive_seconds(text: &str) -> Result<std::time::Duration, String> {
    let expected = || format!("expected a number of seconds > 0, got '{}'", text.trim());
    let seconds: f64 = text.trim().parse().map_err(|_| expected())?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(expected());
    }
    std::time::Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("{} seconds is too long for a timeout", text.trim()))
}

async fn serve<D: Dialect>(args: &ServeArgs) -> anyhow::Result<()> {
    let options = BackendOptions::default()
        .with_table(args.table.clone())
        .with_attempts_table(args.attempts_table.clone())
        .with_auto_create(args.auto_create);
    let backend = SqlExecutionBackend::<D>::new(&args.dsn, options)?;
    let dashboard = args
        .ui
        .then(|| dashboard(args, backend.clone()))
        .transpose()?;
    let client = ExecutionClient::new(backend, &args.namespace)?;
    client.open().await?;
    let mut api = ExecutionApi::new(client).body_timeout(args.body_timeout_s);
    if !args.allow_task.is_empty() {
        api = api.allow_tasks(args.allow_task.clone());
    } else {
        tracing::warn!("no --allow-task given: clients may submit any task name");
    }
    if let Some(token) = &args.bearer_token {
        api = api.bearer_token(token.clone());
    }
    let metrics = std::sync::Arc::new(HttpMetrics::default());
    let counters = std::sync::Arc::new(onestep_http::server::ServerCounters::default());
    let mut routes = api.router().merge(api_metrics_route(
        metrics.clone(),
        counters.clone(),
        args.bearer_token.clone(),
    ));
    if let Some(dashboard) = dashboard {
        routes = routes.merge(dashboard);
    }
    let router = with_http_metrics(routes, metrics);
    let listener = onestep_http::bind(&args.listen).await?;
    // One start-up line, for people and for scripts that read the address (the port of
    // `--listen 127.0.0.1:0`); the log has its own (one) event.
    let addr = listener.local_addr()?;
    tracing::debug!(listen = %addr, namespace = %args.namespace, "serving /v1/executions");
    println!(
        "serving http://{addr}/v1/executions (namespace {})",
        args.namespace
    );
    if args.ui {
        println!("dashboard http://{addr}{}/", args.ui_prefix);
    }
    let mut limits = onestep_http::ServerLimits::default()
        .header_timeout(args.header_timeout_s)?
        .idle_timeout(args.idle_timeout_s)?
        .max_in_flight(args.max_in_flight as usize)?;
    if let Some(max) = args.max_connections {
        limits = limits.max_connections(max as usize)?;
    }
    tracing::debug!(?limits, "connection limits");
    onestep_http::server::serve_counted(listener, router, limits, counters, shutdown_signal())
        .await?;
    Ok(())
}

/// The dashboard router `args` ask for, over `backend`.
fn dashboard<D: Dialect>(
    args: &ServeArgs,
    backend: SqlExecutionBackend<D>,
) -> anyhow::Result<onestep_http::Router> {
    let mut ui = Dashboard::new(backend, &args.namespace)?
        .prefix(&args.ui_prefix)?
        .read_only(args.ui_read_only);
    match (&args.ui_basic_auth, &args.bearer_token) {
        (Some(pair), _) => {
            let Some((user, password)) = pair
                .split_once(':')
                .filter(|(u, p)| !u.is_empty() && !p.is_empty())
            else {
                anyhow::bail!("--ui-basic-auth must be USER:PASSWORD, both non-empty");
            };
            ui = ui.basic_auth(user, password);
        }
        (None, Some(token)) => ui = ui.bearer_token(token.clone()),
        (None, None) => tracing::warn!(
            "the dashboard has no authentication: anyone who reaches the address can cancel \
             and resubmit executions (set --bearer-token or --ui-basic-auth)"
        ),
    }
    Ok(ui.router())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// 0 after a graceful stop, 1 when it cannot serve.
pub async fn run(args: ServeArgs) -> u8 {
    crate::logging::init("info", "text");
    let outcome: anyhow::Result<()> = with_dialect!(&args.dsn, serve(&args));
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("onestep serve: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::positive_seconds;
    use std::time::Duration;

    #[test]
    fn body_timeout_accepts_positive_seconds_and_names_what_it_got_otherwise() {
        assert_eq!(positive_seconds("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(positive_seconds(" 30 "), Ok(Duration::from_secs(30)));
        for (given, message) in [
            ("0", "expected a number of seconds > 0, got '0'"),
            ("-2", "expected a number of seconds > 0, got '-2'"),
            ("NaN", "expected a number of seconds > 0, got 'NaN'"),
            ("abc", "expected a number of seconds > 0, got 'abc'"),
            ("1e300", "1e300 seconds is too long for a timeout"),
        ] {
            assert_eq!(positive_seconds(given), Err(message.to_string()), "{given}");
        }
    }
}
