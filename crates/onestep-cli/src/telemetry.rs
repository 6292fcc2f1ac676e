//! The OpenTelemetry trace export of `onestep run` (feature `otel`, on by default): one span per
//! delivery, exported over OTLP/HTTP (protobuf) when the standard variables name an endpoint.
//!
//! | variable | effect |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector's base URL; spans go to `<url>/v1/traces` |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the full traces URL (wins over the base) |
//! | `OTEL_EXPORTER_OTLP_PROTOCOL`, `…_TRACES_PROTOCOL` | must be `http/protobuf` when set |
//! | `OTEL_TRACES_EXPORTER=none`, `OTEL_SDK_DISABLED=true` | no export |
//! | `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` | the resource; `service.name` defaults to the app's name |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*` | headers, batching, as the SDK reads them |
//!
//! The spans are the runtime's `onestep.delivery` spans (see `onestep-core`'s executor): named
//! `<task> process`, kind consumer, with `onestep.execution.id`, `onestep.attempt.id`,
//! `onestep.attempt`, `onestep.task`, `onestep.app`, `onestep.source` and `onestep.outcome`, an
//! error status when the attempt failed, and the task-event log lines as span events.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Level;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::{Layer, Registry};

/// The span target the OpenTelemetry layer exports.
const DELIVERY_TARGET: &str = "onestep::delivery";

/// The running export; [`shutdown`](Self::shutdown) flushes the spans still buffered.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends what is buffered and stops the exporter (blocking work, off the async threads).
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(err)) = flushed {
                eprintln!("onestep: the OpenTelemetry export did not flush: {err}");
            }
        }
    }
}

/// A layer of the subscriber `onestep` installs.
pub type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Adds the layer exporting delivery spans to `layers` when the environment asks for an export;
/// `Err` names the variable that is wrong (nothing added then).
pub fn install(layers: &mut Vec<BoxedLayer>, service: &str) -> Result<Telemetry, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or(var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    if endpoint.is_none() || disabled {
        return Ok(Telemetry::default());
    }
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = var(name).filter(|p| p != "http/protobuf") {
            return Err(format!(
                "{name} must be http/protobuf (this build exports OTLP over HTTP), got {protocol:?}"
            ));
        }
    }
    if let Some(exporter) = var("OTEL_TRACES_EXPORTER").filter(|e| e != "otlp") {
        return Err(format!(
            "OTEL_TRACES_EXPORTER must be otlp or none, got {exporter:?}"
        ));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("the OTLP exporter could not be built: {e}"))?;
    let mut resource = Resource::builder();
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name(service.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_resource(resource.build())
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer("onestep");
    // The delivery spans, and the events inside them (the task events, a handler's warnings)
    // as span events; nothing else, whatever the log filter lets through.
    let wanted = filter_fn(|meta| {
        if meta.is_span() {
            meta.target() == DELIVERY_TARGET
        } else {
            *meta.level() <= Level::INFO
        }
    });
    layers.push(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(wanted)
            .boxed(),
    );
    Ok(Telemetry {
        provider: Some(provider),
    })
}
