//! What operators see from outside: logs (text, or JSON with each line's trace and span ids),
//! traces and metrics through OpenTelemetry, exported over OTLP when the standard `OTEL_*`
//! variables ask for it, and the metrics in Prometheus' text format for `/metrics`.
//!
//! Parts: [`json_log`] (the JSON log line), [`metrics`] (the instruments and what records them),
//! [`prometheus`] (the text format), and this file: [`init`] (the subscriber and the providers,
//! once per process) and the trace context a request brings and a tool call carries.
//!
//! Traces are off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) is set: then
//! the spans of MCP requests, cells and tool calls (targets `codemode*`, at info) go to the
//! collector over HTTP, protobuf or JSON as `OTEL_EXPORTER_OTLP_PROTOCOL` says. Off, no
//! OpenTelemetry layer is installed, so spans cost what they cost before. Metrics are always
//! kept (in memory, for `/metrics`), and exported over OTLP when an endpoint is set.

mod json_log;
pub mod metrics;
mod prometheus;

use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::{ManualReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable text (colours on a terminal).
    #[default]
    Text,
    /// One JSON object a line, with the trace and span ids of the span it was logged in.
    Json,
}

/// The process's telemetry: the providers to flush at exit.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: SdkMeterProvider,
}

/// What the process exports, set once by [`init`].
struct Installed {
    /// Reads the metrics for `/metrics`.
    reader: std::sync::Arc<ManualReader>,
    /// Whether spans are exported (an OpenTelemetry layer is installed).
    tracing: bool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// Whether an OTLP endpoint is configured for `signal` (`TRACES` or `METRICS`), and its exporter
/// not turned off.
fn otlp_configured(signal: &str) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|value| value == "true");
    let exporter_off = std::env::var(format!("OTEL_{signal}_EXPORTER")).is_ok_and(|v| v == "none");
    !disabled
        && !exporter_off
        && (set("OTEL_EXPORTER_OTLP_ENDPOINT")
            || set(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")))
}

/// The resource every span and metric names: `service.name` from `OTEL_SERVICE_NAME`, or
/// `codemode`, with `OTEL_RESOURCE_ATTRIBUTES`.
fn resource() -> opentelemetry_sdk::Resource {
    let builder = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder.with_service_name("codemode").build()
    }
}

/// Sets up logging (filtered by `CODEMODE_LOG`, warnings and errors by default) and, with
/// `exports`, traces and metrics. An exporter that cannot be built is reported and left out:
/// the program runs without it.
pub fn init(format: LogFormat, exports: bool, trace_content: bool) -> Telemetry {
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_env("CODEMODE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
    };
    let text = matches!(format, LogFormat::Text).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            // Colours for a terminal only: a file or a pipe gets plain text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter())
    });
    let json = matches!(format, LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .event_format(json_log::JsonLines)
            .with_filter(filter())
    });
    let mut problems = Vec::new();
    let tracer = (exports && otlp_configured("TRACES"))
        .then(|| {
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()
                .map_err(|error| problems.push(format!("traces are not exported: {error}")))
                .ok()
        })
        .flatten()
        .map(|exporter| {
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource())
                .build()
        });
    // The spans exported: the runtime's own (requests, cells, tool calls), whatever the log
    // level; with --trace-content, the debug events that carry content too.
    let otel = tracer.as_ref().map(|provider| {
        let level = if trace_content { "debug" } else { "info" };
        let targets = tracing_subscriber::filter::Targets::new()
            .with_target("codemode", level.parse().unwrap_or(tracing::Level::INFO))
            .with_target(
                "codemode_session",
                level.parse().unwrap_or(tracing::Level::INFO),
            );
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("codemode"))
            .with_location(false)
            .with_threads(false)
            .with_filter(targets)
    });
    let tracing_on = otel.is_some();
    let _ = tracing_subscriber::registry()
        .with(text)
        .with(json)
        .with(otel)
        .try_init();
    json_log::remember_dispatch();
    let reader = std::sync::Arc::new(ManualReader::builder().build());
    let mut meter = SdkMeterProvider::builder()
        .with_reader(SharedReader(std::sync::Arc::clone(&reader)))
        .with_resource(resource());
    if exports && otlp_configured("METRICS") {
        match opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .build()
        {
            Ok(exporter) => meter = meter.with_periodic_exporter(exporter),
            Err(error) => problems.push(format!("metrics are not exported: {error}")),
        }
    }
    let meter = meter.build();
    opentelemetry::global::set_meter_provider(meter.clone());
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let _ = INSTALLED.set(Installed {
        reader,
        tracing: tracing_on,
    });
    for problem in problems {
        tracing::warn!(target: "codemode::telemetry", "{problem}");
    }
    Telemetry { tracer, meter }
}

impl Telemetry {
    /// Sends what is left to the collector (spans ended, the last metrics) and stops the
    /// exporters; called once, outside the async runtime, as the program ends.
    pub fn shutdown(self) {
        if let Some(tracer) = self.tracer
            && let Err(error) = tracer.shutdown()
        {
            eprintln!("warning: the last spans may not have been exported: {error}");
        }
        let _ = self.meter.shutdown();
    }
}

/// Whether spans are exported.
pub fn tracing_on() -> bool {
    INSTALLED.get().is_some_and(|installed| installed.tracing)
}

/// The metrics as Prometheus reads them (text exposition format 0.0.4).
pub fn prometheus_text() -> String {
    let Some(installed) = INSTALLED.get() else {
        return String::new();
    };
    prometheus::collect(&installed.reader)
}

/// The manual reader, shared between the meter provider (which owns its reader) and
/// `/metrics` (which collects through it).
#[derive(Debug)]
struct SharedReader(std::sync::Arc<ManualReader>);

impl opentelemetry_sdk::metrics::reader::MetricReader for SharedReader {
    fn register_pipeline(&self, pipeline: std::sync::Weak<opentelemetry_sdk::metrics::Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(
        &self,
        metrics: &mut opentelemetry_sdk::metrics::data::ResourceMetrics,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.collect(metrics)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(
        &self,
        kind: opentelemetry_sdk::metrics::InstrumentKind,
    ) -> opentelemetry_sdk::metrics::Temporality {
        self.0.temporality(kind)
    }
}

/// Reads W3C Trace Context fields from an MCP request's `_meta`.
struct MetaFields<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for MetaFields<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Continues the trace a client sent in a request's `_meta` (`traceparent`, `tracestate`):
/// `span` becomes a child of the client's span. Nothing happens when spans are not exported or
/// the request carried none.
pub fn continue_trace(span: &tracing::Span, meta: &serde_json::Map<String, serde_json::Value>) {
    if !tracing_on() || !meta.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&MetaFields(meta));
    let _ = span.set_parent(parent);
}

/// Collects injected fields.
struct Fields(Vec<(String, String)>);

impl Injector for Fields {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

/// The trace context of the span running now, as W3C Trace Context fields (empty when spans
/// are not exported).
pub fn current_trace_context() -> Vec<(String, String)> {
    let mut fields = Fields(Vec::new());
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut fields);
    fields.0
}

/// Where a session's tool calls get their trace context: `None` when spans are not exported,
/// so that calls carry nothing and cost nothing.
pub fn trace_context_hook() -> Option<codemode_session::TraceContextHook> {
    tracing_on()
        .then(|| std::sync::Arc::new(current_trace_context) as codemode_session::TraceContextHook)
}

/// Links `observer` (a request that observes a cell) and the cell's span both ways, so that a
/// trace shows which requests saw a cell that outlived the one that started it.
pub fn link_spans(observer: &tracing::Span, cell: &tracing::Span) {
    if !tracing_on() {
        return;
    }
    use opentelemetry::trace::TraceContextExt;
    let observer_context = observer.context().span().span_context().clone();
    let cell_context = cell.context().span().span_context().clone();
    observer.add_link(cell_context);
    cell.add_link(observer_context);
}
