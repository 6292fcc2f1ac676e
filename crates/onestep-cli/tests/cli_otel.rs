//! `onestep run` exports one OpenTelemetry span per delivery over OTLP/HTTP (feature `otel`, on
//! by default) to a real HTTP receiver decoding the protobuf requests: the span carries the
//! execution and attempt ids the database holds, a failed attempt has an error status, and the
//! task events are span events. A protocol the build cannot speak stops `run` before it starts.
#![cfg(feature = "otel")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::{Span, status::StatusCode};
use prost::Message;
use sqlx::Row;

/// A span as received, with its attributes as text and the resource's `service.name`.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    span: Span,
    attributes: HashMap<String, String>,
}

fn text(value: Option<&Any>) -> String {
    match value {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// An OTLP/HTTP traces receiver on a free port: every span of every request it accepts.
async fn receiver() -> (String, Arc<Mutex<Vec<Received>>>) {
    let spans: Arc<Mutex<Vec<Received>>> = Arc::default();
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP request");
                for resource in request.resource_spans {
                    let service = resource
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|kv| kv.key == "service.name")
                        .map(|kv| text(kv.value.as_ref().and_then(|v| v.value.as_ref())))
                        .unwrap_or_default();
                    for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
                        let attributes = span
                            .attributes
                            .iter()
                            .map(|kv| {
                                let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                                (kv.key.clone(), text(value))
                            })
                            .collect();
                        kept.lock().unwrap().push(Received {
                            service: service.clone(),
                            span,
                            attributes,
                        });
                    }
                }
                // An empty ExportTraceServiceResponse.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), spans)
}

/// A worker with one succeeding and one failing task, one source each.
fn yaml(dir: &std::path::Path, dsn: &str) -> std::path::PathBuf {
    let source = |name: &str, task: &str| {
        format!(
            "  {name}: {{type: sqlite_execution_source, connector: db, namespace: otel, \
             task_names: [{task}], poll_interval_s: 0.05}}\n"
        )
    };
    let yaml = format!(
        "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: traced-app}}\nresources:\n  \
         db: {{type: sqlite, dsn: \"{dsn}\"}}\n{}{}tasks:\n  \
         - {{name: work, source: jobs, handler: onestep:echo}}\n  \
         - {{name: broken, source: failing, handler: onestep:fail, \
         retry: {{type: max_attempts, max_attempts: 1}}}}\n",
        source("jobs", "work"),
        source("failing", "broken"),
    );
    let path = dir.join("worker.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn cli(dsn: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["executions", "--dsn", dsn, "--namespace", "otel"])
        .args(args)
        .output()
        .unwrap()
}

/// Waits for the execution to reach `status` (as `executions get` shows it).
fn wait_status(dsn: &str, id: &str, status: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(dsn, &["get", id]);
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if shown["status"] == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never became {status}: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn submit(dsn: &str, task: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = cli(dsn, &["submit", task, r#"{"n": 1}"#]);
        if out.status.success() {
            let printed = String::from_utf8_lossy(&out.stdout).to_string();
            return printed.split_whitespace().next().unwrap().to_owned();
        }
        // The worker creates the tables; until then a submit finds none.
        assert!(Instant::now() < deadline, "{out:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The attempt ids the database holds for `execution`, without dashes.
async fn attempt_ids(dsn: &str, execution: &str) -> Vec<String> {
    let pool = sqlx::SqlitePool::connect(dsn).await.unwrap();
    let rows = sqlx::query(
        "SELECT id FROM onestep_execution_attempts WHERE replace(execution_id, '-', '') = ?",
    )
    .bind(execution.replace('-', ""))
    .fetch_all(&pool)
    .await
    .unwrap();
    rows.iter()
        .map(|r| r.get::<String, _>(0).replace('-', ""))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn run_exports_a_span_per_delivery_with_the_execution_and_attempt_ids() {
    let (endpoint, spans) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}?mode=rwc", dir.path().join("otel.db").display());
    let worker = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["run"])
        .arg(yaml(dir.path(), &dsn))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let worked = tokio::task::spawn_blocking({
        let dsn = dsn.clone();
        move || {
            let work = submit(&dsn, "work");
            let broken = submit(&dsn, "broken");
            wait_status(&dsn, &work, "succeeded");
            wait_status(&dsn, &broken, "failed");
            (work, broken)
        }
    })
    .await
    .unwrap();
    let (work, broken) = worked;
    // The spans are batched every 100 ms; SIGTERM's graceful stop flushes the rest.
    let deadline = Instant::now() + Duration::from_secs(20);
    while spans.lock().unwrap().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || worker.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let spans = spans.lock().unwrap().clone();
    let of = |id: &str| {
        spans
            .iter()
            .find(|s| s.attributes.get("onestep.execution.id").map(String::as_str) == Some(id))
            .unwrap_or_else(|| panic!("a span for {id} among {spans:#?}"))
            .clone()
    };
    let ok = of(&work);
    assert_eq!(ok.service, "traced-app", "service.name defaults to the app");
    assert_eq!(ok.span.name, "work process");
    assert_eq!(ok.span.kind, 5, "SPAN_KIND_CONSUMER");
    assert_eq!(ok.attributes["onestep.task"], "work");
    assert_eq!(ok.attributes["onestep.app"], "traced-app");
    assert_eq!(ok.attributes["onestep.attempt"], "1");
    assert_eq!(ok.attributes["onestep.outcome"], "succeeded");
    assert!(ok.span.end_time_unix_nano > ok.span.start_time_unix_nano);
    assert_eq!(
        attempt_ids(&dsn, &work).await,
        [ok.attributes["onestep.attempt.id"].replace('-', "")],
        "the span's attempt id is the attempt the database holds"
    );
    assert!(
        ok.span.events.iter().any(|e| e.name == "task succeeded"),
        "the task event is a span event: {:?}",
        ok.span.events
    );
    assert_ne!(
        ok.span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );

    let failed = of(&broken);
    assert_eq!(failed.span.name, "broken process");
    assert_eq!(failed.attributes["onestep.outcome"], "failed");
    let status = failed.span.status.clone().unwrap();
    assert_eq!(status.code, StatusCode::Error as i32);
    assert!(
        status.message.contains("onestep:fail always fails"),
        "{status:?}"
    );
    assert_ne!(
        ok.span.trace_id, failed.span.trace_id,
        "one trace per delivery"
    );
}

/// Runs `onestep run` with `set` in its environment and `unset` removed, expects the refusal
/// (exit 2) before anything started (no database file), and returns its stderr.
fn refused_run(set: &[(&str, &str)], unset: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let dsn = format!("sqlite://{}?mode=rwc", dir.path().join("otel.db").display());
    let mut command = Command::new(env!("CARGO_BIN_EXE_onestep"));
    command.args(["run"]).arg(yaml(dir.path(), &dsn));
    command.envs(set.iter().copied());
    for name in unset {
        command.env_remove(name);
    }
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !dir.path().join("otel.db").exists(),
        "nothing was started: {stderr}"
    );
    stderr
}

#[test]
fn a_protocol_this_build_cannot_export_stops_run_with_the_variables_name() {
    let stderr = refused_run(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        &[],
    );
    assert!(
        stderr.contains(
            "OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf (this build exports OTLP over HTTP), got \"grpc\""
        ),
        "{stderr}"
    );
}

#[test]
fn an_exporter_this_build_does_not_have_stops_run_with_the_variables_name() {
    let stderr = refused_run(
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
        ],
        &[
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ],
    );
    assert!(
        stderr.contains("OTEL_TRACES_EXPORTER must be otlp or none, got \"zipkin\""),
        "{stderr}"
    );
}
