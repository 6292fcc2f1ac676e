//! `onestep run FILE`.

use crate::config;
use crate::registry::Registry;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    load: super::LoadArgs,
    /// Log level: trace, debug, info, warning, error (default: `app.logging.level` or info).
    #[arg(long)]
    log_level: Option<String>,
    /// Log lines as `text`, or `json` in the reference's shape (default: `app.logging.format`
    /// or text).
    #[arg(long, value_parser = ["text", "json"])]
    log_format: Option<String>,
    /// Log every task event (fetched, started, succeeded, retried, failed, …) as a structured
    /// line; the default, as in the reference.
    #[arg(long, overrides_with = "no_task_events")]
    task_events: bool,
    /// Do not log task events (their subscribers still run).
    #[arg(long, overrides_with = "task_events")]
    no_task_events: bool,
    /// Serve Prometheus `/metrics`, `/healthz` and `/readyz` on HOST:PORT (`:PORT` binds every
    /// interface), as the reference's `--metrics-addr`.
    #[arg(long, value_name = "HOST:PORT", value_parser = crate::probes::parse_addr)]
    metrics_addr: Option<std::net::SocketAddr>,
}

const LEVELS: [&str; 7] = [
    "trace", "debug", "info", "warning", "warn", "error", "critical",
];

/// Loads, validates, builds and runs; 2 when the file cannot be loaded, 1 when the app fails.
pub async fn run(args: RunArgs, registry: &Registry) -> u8 {
    let spec = match args.load.spec(registry, 2) {
        Ok(spec) => spec,
        Err(code) => return code,
    };
    let level = match args.log_level.as_deref().map(str::to_ascii_lowercase) {
        Some(l) if LEVELS.contains(&l.as_str()) => l,
        Some(other) => {
            eprintln!(
                "onestep: --log-level must be one of {}; got {other:?}",
                LEVELS.join(", ")
            );
            return 2;
        }
        None => spec.log_level.clone(),
    };
    let telemetry = match crate::logging::init_with_telemetry(
        &level,
        args.log_format.as_deref().unwrap_or(&spec.log_format),
        &spec.name,
    ) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let app = match config::build::build_app(
        &spec,
        registry,
        &config::build::BuildOptions {
            python: args.load.python_config(),
            log_task_events: !args.no_task_events,
            diagnostic: None,
            metrics_addr: args.metrics_addr,
        },
    ) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("onestep: {}: {e}", args.load.file.display());
            return 2;
        }
    };
    let code = match app.run().await {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "app failed");
            eprintln!("onestep: app {} failed: {e}", spec.name);
            1
        }
    };
    telemetry.shutdown().await;
    code
}
