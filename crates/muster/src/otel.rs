//! OpenTelemetry span export over OTLP/gRPC (tonic), behind the `otel` cargo feature (SPEC
//! O2); off by default, and off at run time unless a collector is named.
//!
//! ```text
//!  --otlp-endpoint URL ▶ OTEL_EXPORTER_OTLP_ENDPOINT ▶ (neither: no export, no cost)
//!  tracing spans ──▶ tracing-opentelemetry layer ──▶ batch processor (own thread)
//!                                                  ──▶ OTLP SpanExporter (tonic channel)
//! ```
//!
//! What is exported: the `http request` span of every API request (`muster::http`, method,
//! path, status) with the events inside it, at `debug` and up whatever `--log-level` says
//! (the export has its own filter; `--log-level` governs stderr). The exporter's channel is
//! made inside the server's runtime (its worker task runs there), so `main` builds the
//! runtime before the logging; only `serve` and `bench`, whose runtimes have worker threads
//! that keep running while `main` flushes at exit, export.
//!
//! `service.name` is `muster` unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` say
//! otherwise (the SDK reads both).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// The standard variable naming the collector.
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Keeps the tracer provider until `main` ends; dropping it flushes the spans still queued.
#[derive(Debug, Default)]
pub struct Guard(Option<SdkTracerProvider>);

impl Guard {
    /// Flushes the queued spans and stops the exporter (as dropping it does).
    pub fn flush(self) {}
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("warning: otel: spans not flushed at exit: {err}");
        }
    }
}

/// The export layer, when a collector is named (`flag`, else [`ENDPOINT_ENV`]) and the
/// command is a server's (`serving`); an unusable endpoint is an error naming it. Must run
/// inside a Tokio runtime.
pub fn layer<S>(flag: Option<&str>, serving: bool) -> Result<(Option<impl tracing_subscriber::Layer<S>>, Guard), String>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let endpoint = flag
        .map(str::to_owned)
        .or_else(|| std::env::var(ENDPOINT_ENV).ok())
        .filter(|endpoint| !endpoint.trim().is_empty());
    let Some(endpoint) = endpoint.filter(|_| serving) else {
        return Ok((None, Guard::default()));
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|err| format!("--otlp-endpoint: '{endpoint}': {err}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("muster").build())
        .build();
    let tracer: SdkTracer = provider.tracer("muster");
    // Its own filter: the request spans are `debug`, below the default stderr level.
    let filter = Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("muster::http", LevelFilter::DEBUG)
        .with_target("muster::endpoint", LevelFilter::DEBUG)
        .with_target("openraft", LevelFilter::WARN);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(filter);
    Ok((Some(layer), Guard(Some(provider))))
}
