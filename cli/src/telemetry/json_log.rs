//! `--log-format json`: one JSON object a line, with the time, level, target, message and
//! fields of the event, the name of the span it was logged in, and (when spans are exported)
//! that span's `trace_id` and `span_id`, so that a log line leads to its trace.

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON line format.
pub(super) struct JsonLines;

/// An event's fields, as JSON values.
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::from(value));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        context: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        let mut time = String::new();
        tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(&mut time))?;
        line.insert("timestamp".into(), Value::String(time));
        let metadata = event.metadata();
        line.insert("level".into(), Value::String(metadata.level().to_string()));
        line.insert("target".into(), Value::String(metadata.target().to_owned()));
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        if let Some(message) = fields.0.remove("message") {
            line.insert("message".into(), message);
        }
        if !fields.0.is_empty() {
            line.insert("fields".into(), Value::Object(fields.0));
        }
        if let Some(span) = context.lookup_current() {
            line.insert("span".into(), Value::String(span.name().to_owned()));
            if let Some((trace_id, span_id)) = trace_ids(&span.id()) {
                line.insert("trace_id".into(), Value::String(trace_id));
                line.insert("span_id".into(), Value::String(span_id));
            }
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// The trace and span ids of the span `id`, when spans are exported.
fn trace_ids(id: &tracing::span::Id) -> Option<(String, String)> {
    let dispatch = DISPATCH.get()?.upgrade()?;
    let context = tracing_opentelemetry::get_otel_context(id, &dispatch)?;
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// The process's subscriber, kept once it is installed, for the ids above (the formatter runs
/// inside it, where the current dispatcher cannot be asked for).
static DISPATCH: std::sync::OnceLock<tracing::dispatcher::WeakDispatch> =
    std::sync::OnceLock::new();

/// Keeps the default dispatcher for [`trace_ids`]; called once it is installed.
pub(super) fn remember_dispatch() {
    tracing::dispatcher::get_default(|dispatch| {
        let _ = DISPATCH.set(dispatch.downgrade());
    });
}
