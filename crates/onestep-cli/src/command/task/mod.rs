//! `onestep task run FILE --task T --input PAYLOAD.json` and `onestep task replay FILE --task T
//! --envelope CAPTURE.json`: one delivery of one task, locally, as the reference's diagnostics
//! run it. The handler, hooks, routes and transforms run for real; sinks are recorded, not sent
//! (unless `--send`); the delivery's action (ack, retry, fail, dead letter) is predicted, not
//! taken. The report is the reference's (`onestep/diagnostic-result`, version 1).

mod diagnose;

use std::path::PathBuf;
use std::time::Duration;

use onestep_core::Envelope;
use onestep_core::capture::load_capture;
use serde_json::Value;

use crate::registry::Registry;
use diagnose::{Report, diagnose};

/// Arguments of `task`.
#[derive(Debug, clap::Args)]
pub struct TaskArgs {
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(Debug, clap::Subcommand)]
enum TaskCommand {
    /// Run one task attempt with a JSON input file as its payload.
    ///
    /// Example: `onestep task run worker.yaml --task report --input payload.json`
    Run {
        #[command(flatten)]
        load: super::LoadArgs,
        /// The task.
        #[arg(long = "task")]
        task: String,
        /// A JSON file: the delivery's body.
        #[arg(long = "input")]
        input: PathBuf,
        #[command(flatten)]
        options: DiagnosticOptions,
    },
    /// Run one captured failure again (a file `app.failure_capture` wrote, here or in Python).
    ///
    /// Example: `onestep task replay worker.yaml --task report --envelope captures/2026….json`
    Replay {
        #[command(flatten)]
        load: super::LoadArgs,
        /// The task.
        #[arg(long = "task")]
        task: String,
        /// The capture file.
        #[arg(long = "envelope")]
        envelope: PathBuf,
        #[command(flatten)]
        options: DiagnosticOptions,
    },
}

/// Options of both diagnostics.
#[derive(Debug, clap::Args)]
struct DiagnosticOptions {
    /// Send to the sinks the attempt selects instead of only recording what it would send.
    #[arg(long)]
    send: bool,
    /// Seconds the whole diagnostic may take.
    #[arg(long, default_value_t = 60.0, value_parser = positive_seconds)]
    timeout: f64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(s),
        _ => Err(format!("must be a number of seconds > 0, got {text:?}")),
    }
}

/// 0 when the attempt succeeded, 1 when it failed or timed out, 2 when the diagnostic could not
/// run (the file, the task, the input or the capture is wrong).
pub async fn task(args: TaskArgs, registry: &Registry) -> u8 {
    let (operation, load, task, options, envelope) = match args.command {
        TaskCommand::Run {
            load,
            task,
            input,
            options,
        } => {
            let body = std::fs::read_to_string(&input)
                .map_err(|e| format!("--input {}: {e}", input.display()))
                .and_then(|text| {
                    serde_json::from_str::<Value>(&text)
                        .map_err(|e| format!("--input {}: not JSON: {e}", input.display()))
                });
            ("run", load, task, options, body.map(Envelope::new))
        }
        TaskCommand::Replay {
            load,
            task,
            envelope,
            options,
        } => {
            let loaded = load_capture(&envelope, None, Some(&task))
                .map(|c| c.envelope)
                .map_err(|e| format!("--envelope {}: {e}", envelope.display()));
            ("replay", load, task, options, loaded)
        }
    };
    let envelope = match envelope {
        Ok(envelope) => envelope,
        Err(e) => {
            eprintln!("onestep: task diagnostic failed: {e}");
            return 2;
        }
    };
    let spec = match load.spec(registry, 2) {
        Ok(spec) => spec,
        Err(code) => return code,
    };
    let matching = spec.tasks.iter().filter(|t| t.name == task).count();
    if matching != 1 {
        eprintln!(
            "onestep: task diagnostic failed: expected exactly one task named {task:?}, found {matching}"
        );
        return 2;
    }
    let report = diagnose(
        &spec,
        registry,
        &load.python_config(),
        diagnose::Request {
            operation,
            task: &task,
            envelope,
            send: options.send,
            timeout: Duration::from_secs_f64(options.timeout),
        },
    )
    .await;
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("onestep: task diagnostic failed: {e}");
            return 2;
        }
    };
    print_report(&load.file.display().to_string(), &report, options.json);
    eprintln!("{}", diagnose::SIDE_EFFECT_WARNING);
    match report.completion.as_str() {
        "succeeded" => 0,
        _ => 1,
    }
}

fn print_report(target: &str, report: &Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default()
        );
        return;
    }
    let dash = |v: Option<&str>| v.unwrap_or("-").to_owned();
    println!("Operation: {}", report.operation);
    println!("Target: {target}");
    println!("App: {}", report.app);
    println!("Task: {}", report.task);
    println!("Mode: {}", report.mode());
    println!("Completion: {}", report.completion);
    println!("Failure stage: {}", dash(report.failure_stage.as_deref()));
    let selected = report.selected_sinks.join(",");
    println!(
        "Selected sinks: {}",
        if selected.is_empty() { "-" } else { &selected }
    );
    println!(
        "Delivery action: {} (predicted)",
        dash(report.delivery_action)
    );
    let published = match report.dead_letter_published {
        None => "None",
        Some(true) => "True",
        Some(false) => "False",
    };
    println!(
        "Dead letter: attempted={} published={published}",
        if report.dead_letter_attempted {
            "True"
        } else {
            "False"
        }
    );
    println!("Cleanup: complete");
    println!("Side-effect outcome: {}", report.side_effect_outcome());
    println!("Last checkpoint: -");
    println!("Duration: {:.3}s", report.duration_s);
    println!("Warning: {}", diagnose::SIDE_EFFECT_WARNING);
}
