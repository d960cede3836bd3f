//! The metrics in Prometheus' text exposition format (0.0.4), as `/metrics` serves them: each
//! OpenTelemetry instrument becomes a family named as Prometheus names it (dots to underscores,
//! the unit as a suffix, `_total` for counters), its attributes become labels, and a histogram
//! its `_bucket`, `_sum` and `_count` series.
//!
//! Written here rather than through the `opentelemetry-prometheus` crate, which its maintainers
//! no longer develop (they point to OTLP into Prometheus instead): the format is small and
//! stable, and this keeps one metrics pipeline.

use std::fmt::Write;

use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::ManualReader;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, Metric, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;

/// Collects every instrument now and writes them out.
pub(super) fn collect(reader: &ManualReader) -> String {
    let mut metrics = ResourceMetrics::default();
    if let Err(error) = reader.collect(&mut metrics) {
        return format!("# metrics could not be collected: {error}\n");
    }
    let mut text = String::new();
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics() {
            write_metric(&mut text, metric);
        }
    }
    text
}

/// A name as Prometheus allows it: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn sanitize(name: &str) -> String {
    let mut sanitized: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if sanitized.starts_with(|c: char| c.is_ascii_digit()) {
        sanitized.insert(0, '_');
    }
    sanitized
}

/// The family name of `metric`: its name, then its unit (`s` as `_seconds`, `By` as `_bytes`).
fn family_name(metric: &Metric) -> String {
    let mut name = sanitize(metric.name());
    let suffix = match metric.unit() {
        "s" => Some("seconds"),
        "By" => Some("bytes"),
        "" | "1" => None,
        unit if unit.starts_with('{') => None,
        _ => None,
    };
    if let Some(suffix) = suffix
        && !name.ends_with(suffix)
    {
        name.push('_');
        name.push_str(suffix);
    }
    name
}

/// A label value, escaped as the format asks (backslash, quote, newline).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `{a="1",b="2"}`, with `extra` last (a histogram's `le`); nothing for no labels.
fn labels<'a>(
    attributes: impl Iterator<Item = &'a KeyValue>,
    extra: Option<(&str, &str)>,
) -> String {
    let mut pairs: Vec<(String, String)> = attributes
        .map(|kv| (sanitize(kv.key.as_str()), escape(&kv.value.as_str())))
        .collect();
    pairs.sort();
    if let Some((key, value)) = extra {
        pairs.push((key.to_owned(), escape(value)));
    }
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .into_iter()
        .map(|(key, value)| format!("{key}=\"{value}\""))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A number as the format writes it.
fn number(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if value.is_nan() {
        "NaN".to_owned()
    } else {
        format!("{value}")
    }
}

fn write_metric(text: &mut String, metric: &Metric) {
    match metric.data() {
        AggregatedMetrics::F64(data) => write_data(text, metric, data, |v| *v),
        AggregatedMetrics::U64(data) => write_data(text, metric, data, |v| *v as f64),
        AggregatedMetrics::I64(data) => write_data(text, metric, data, |v| *v as f64),
    }
}

fn write_data<T: Copy>(
    text: &mut String,
    metric: &Metric,
    data: &MetricData<T>,
    as_f64: impl Fn(&T) -> f64,
) {
    let family = family_name(metric);
    let help = escape(metric.description()).replace("\\\"", "\"");
    match data {
        MetricData::Gauge(gauge) => {
            let _ = writeln!(text, "# HELP {family} {help}\n# TYPE {family} gauge");
            for point in gauge.data_points() {
                let _ = writeln!(
                    text,
                    "{family}{} {}",
                    labels(point.attributes(), None),
                    number(as_f64(&point.value()))
                );
            }
        }
        MetricData::Sum(sum) => {
            let (name, kind) = if sum.is_monotonic() {
                (format!("{family}_total"), "counter")
            } else {
                (family.clone(), "gauge")
            };
            let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for point in sum.data_points() {
                let _ = writeln!(
                    text,
                    "{name}{} {}",
                    labels(point.attributes(), None),
                    number(as_f64(&point.value()))
                );
            }
        }
        MetricData::Histogram(histogram) => {
            let _ = writeln!(text, "# HELP {family} {help}\n# TYPE {family} histogram");
            for point in histogram.data_points() {
                let mut cumulative = 0u64;
                let counts: Vec<u64> = point.bucket_counts().collect();
                for (index, bound) in point.bounds().enumerate() {
                    cumulative += counts.get(index).copied().unwrap_or(0);
                    let _ = writeln!(
                        text,
                        "{family}_bucket{} {cumulative}",
                        labels(point.attributes(), Some(("le", &number(bound))))
                    );
                }
                let _ = writeln!(
                    text,
                    "{family}_bucket{} {}",
                    labels(point.attributes(), Some(("le", "+Inf"))),
                    point.count()
                );
                let _ = writeln!(
                    text,
                    "{family}_sum{} {}",
                    labels(point.attributes(), None),
                    number(as_f64(&point.sum()))
                );
                let _ = writeln!(
                    text,
                    "{family}_count{} {}",
                    labels(point.attributes(), None),
                    point.count()
                );
            }
        }
        // Not made by any instrument of codemode's.
        MetricData::ExponentialHistogram(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_labels_are_written_as_prometheus_reads_them() {
        assert_eq!(
            sanitize("mcp.server.operation.duration"),
            "mcp_server_operation_duration"
        );
        assert_eq!(sanitize("1st"), "_1st");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let attributes = [
            KeyValue::new("tool", "demo__add"),
            KeyValue::new("a.b", "x"),
        ];
        assert_eq!(
            labels(attributes.iter(), Some(("le", "0.5"))),
            "{a_b=\"x\",tool=\"demo__add\",le=\"0.5\"}"
        );
        assert_eq!(number(f64::INFINITY), "+Inf");
        assert_eq!(number(0.25), "0.25");
    }
}
