//! `onestep check [--strict] [--json] [--connect] FILE`.

use std::time::Duration;

use onestep_core::catalog::{BuildContext, Built};

use crate::config;
use crate::registry::Registry;

/// Arguments of `check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    load: super::LoadArgs,
    /// Report every problem: unknown fields at every level, types, ranges, references.
    #[arg(long)]
    strict: bool,
    /// Print the app description as JSON (or the problems as JSON).
    #[arg(long)]
    json: bool,
    /// Also open and close every resource (connects to databases).
    #[arg(long)]
    connect: bool,
    /// Seconds each resource may take to open with `--connect`.
    #[arg(long, default_value_t = 10.0)]
    connect_timeout: f64,
}

/// 0 when valid, 1 when problems were found, 2 when the file could not be loaded.
pub async fn check(args: CheckArgs, registry: &Registry) -> u8 {
    let doc = match config::load(&args.load.file, &args.load.options()) {
        Ok(doc) => doc,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let python = args.load.python_config();
    let checked = match config::spec::validate(&doc, registry, args.strict) {
        Ok(spec) => {
            let mut problems = config::Problems::new(args.load.file.display().to_string());
            config::python::check_imports(&spec, registry, &python, &doc.positions, &mut problems)
                .await;
            if problems.is_empty() {
                Ok(spec)
            } else {
                Err(problems)
            }
        }
        Err(problems) => Err(problems),
    };
    let spec = match checked {
        Ok(spec) => spec,
        Err(problems) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&problems).unwrap_or_default()
                );
            } else {
                eprintln!("{problems}");
                eprintln!("{} problem(s) in {}", problems.items.len(), problems.file);
            }
            return 1;
        }
    };
    let app = match config::build::build_app(
        &spec,
        registry,
        &config::build::BuildOptions {
            python,
            log_task_events: true,
            diagnostic: None,
            metrics_addr: None,
        },
    ) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("{}: {e}", args.load.file.display());
            return 1;
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&app.describe()).unwrap_or_default()
        );
    } else {
        println!("Target: {}", args.load.file.display());
        println!("App: {}", spec.name);
        match spec.shutdown_timeout_s {
            Some(s) => println!("Shutdown timeout: {s}s"),
            None => println!("Shutdown timeout: none (waits for in-flight work)"),
        }
        println!("Resources: {}", spec.resources.len());
        for r in &spec.resources {
            println!("  - {} ({})", r.name, r.type_name);
        }
        println!("Tasks: {}", spec.tasks.len());
        for t in &spec.tasks {
            let handler = match &t.handler {
                None => "passthrough".to_owned(),
                Some((r, _)) if registry.has_handler(r) => r.clone(),
                Some((r, _)) => format!("{r} (python)"),
            };
            println!(
                "  - {}: source={} handler={} emit=[{}] concurrency={} retry={}",
                t.name,
                t.source.as_deref().unwrap_or("-"),
                handler,
                t.emit.join(", "),
                t.concurrency,
                t.retry
            );
        }
    }
    if args.connect {
        let timeout = Duration::from_secs_f64(args.connect_timeout.clamp(0.1, 3600.0));
        let failed = connect(&spec, registry, timeout, args.json).await;
        if failed != 0 {
            return failed;
        }
    }
    if !args.json {
        println!(
            "OK: {} is valid{}{}",
            args.load.file.display(),
            if args.strict { " (strict)" } else { "" },
            if args.connect {
                "; every resource opened"
            } else {
                ""
            }
        );
    }
    0
}

/// Opens and closes every resource; prints one line each (to stderr under `--json`).
async fn connect(spec: &config::AppSpec, registry: &Registry, timeout: Duration, json: bool) -> u8 {
    let say = |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let mut ctx = BuildContext::new(registry.catalog(), &spec.resources);
    let mut failed = 0;
    for r in &spec.resources {
        let built = match ctx.get(&r.name) {
            Ok(b) => b,
            Err(e) => {
                say(format!("  x {}: {e}", r.name));
                failed += 1;
                continue;
            }
        };
        // A store has no lifecycle: reading one key shows it connects and finds (or, with
        // auto_create, makes) its table.
        let probe = "onestep:check";
        let outcome = tokio::time::timeout(timeout, async {
            match &built {
                Built::StateStore(store) => store.load(probe).await.map(drop),
                Built::CursorStore(store) => store.load(probe).await.map(drop),
                _ => match built.resource() {
                    Some(resource) => {
                        resource.open().await?;
                        resource.close().await
                    }
                    None => Ok(()),
                },
            }
        })
        .await;
        match outcome {
            Ok(Ok(())) => say(format!("  ok {}", r.name)),
            Ok(Err(e)) => {
                say(format!("  x {}: {e}", r.name));
                failed += 1;
            }
            Err(_) => {
                say(format!(
                    "  x {}: did not open within {:.1}s",
                    r.name,
                    timeout.as_secs_f64()
                ));
                failed += 1;
            }
        }
    }
    u8::from(failed > 0)
}
