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
}

const LEVELS: [&str; 7] = [
    "trace", "debug", "info", "warning", "warn", "error", "critical",
];

/// Installs the log subscriber: `text` or `json` lines on stdout.
pub fn init_logging(level: &str, format: &str) {
    let level = match level {
        "warning" => "warn",
        "critical" => "error",
        other => other,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},sqlx=warn")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Loads, validates, builds and runs; 2 when the file cannot be loaded, 1 when the app fails.
pub async fn run(args: RunArgs, registry: &Registry) -> u8 {
    let doc = match config::load(&args.load.file, &args.load.options()) {
        Ok(doc) => doc,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let spec = match config::spec::validate(&doc, registry, false) {
        Ok(spec) => spec,
        Err(problems) => {
            eprintln!("{problems}");
            return 2;
        }
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
    init_logging(&level, &spec.log_format);
    let app = match config::build::build_app(&spec, registry, &args.load.python_config()) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("onestep: {}: {e}", args.load.file.display());
            return 2;
        }
    };
    match app.run().await {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(error = %e, "app failed");
            eprintln!("onestep: app {} failed: {e}", spec.name);
            1
        }
    }
}
