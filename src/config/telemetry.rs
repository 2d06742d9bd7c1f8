//! The `log:` and `telemetry:` sections: the log format and level, Prometheus metrics, and
//! OpenTelemetry traces (off unless enabled here or by the standard `OTEL_*` variables).

use std::collections::HashMap;

use serde::Deserialize;

use super::Problems;

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable text (the default).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `log:` section, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// `log.format`.
    pub format: LogFormat,
    /// `log.level`: a filter such as `warn` or `querygate=debug,info`; the `QUERYGATE_LOG`
    /// variable replaces it.
    pub level: String,
}

/// The `telemetry:` section, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct TelemetryConfig {
    /// Whether `/metrics` is served (`telemetry.metrics.enabled`).
    pub metrics: bool,
    /// OpenTelemetry traces; `None` when off.
    pub traces: Option<TracesConfig>,
}

/// Where and how traces are exported (OTLP over HTTP with protobuf).
#[derive(Clone, Debug, PartialEq)]
pub struct TracesConfig {
    /// The OTLP traces URL (`…/v1/traces`); `None`: from `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (+ `/v1/traces`), else `http://localhost:4318/v1/traces`.
    pub endpoint: Option<String>,
    /// `service.name`; `None`: `OTEL_SERVICE_NAME`, else `querygate`.
    pub service_name: Option<String>,
    /// Share of new traces sampled (parent-based: a caller's sampled flag is followed);
    /// `None`: `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, else every trace.
    pub sample_ratio: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLog {
    format: LogFormat,
    level: String,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            format: LogFormat::Text,
            level: "warn".to_owned(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTelemetry {
    metrics: RawMetrics,
    traces: RawTraces,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawMetrics {
    enabled: bool,
}

impl Default for RawMetrics {
    fn default() -> Self {
        RawMetrics { enabled: true }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawTraces {
    enabled: Option<bool>,
    endpoint: Option<String>,
    service_name: Option<String>,
    sample_ratio: Option<f64>,
}

/// Checks `log:`.
pub(super) fn check_log(raw: RawLog, problems: &mut Problems) -> LogConfig {
    if let Err(err) = tracing_subscriber::EnvFilter::try_new(&raw.level) {
        problems.push(
            "log.level",
            format!("'{}' is not a filter: {err}", raw.level),
        );
    }
    LogConfig {
        format: raw.format,
        level: raw.level,
    }
}

/// Checks `telemetry:`. Traces are on when `telemetry.traces.enabled` is true, or, when it
/// is not set, when an OTLP endpoint variable is set; `OTEL_SDK_DISABLED=true` or
/// `OTEL_TRACES_EXPORTER=none` turn them off unless the file enables them.
pub(super) fn check_telemetry(
    raw: RawTelemetry,
    env: &HashMap<String, String>,
    problems: &mut Problems,
) -> TelemetryConfig {
    let traces = raw.traces;
    if let Some(endpoint) = &traces.endpoint {
        match url::Url::parse(endpoint) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => problems.push(
                "telemetry.traces.endpoint",
                format!("'{endpoint}' is not an http or https URL"),
            ),
        }
    }
    if let Some(ratio) = traces.sample_ratio
        && !(0.0..=1.0).contains(&ratio)
    {
        problems.push("telemetry.traces.sample_ratio", "must be between 0 and 1");
    }
    if let Some(name) = &traces.service_name
        && name.trim().is_empty()
    {
        problems.push("telemetry.traces.service_name", "must not be empty");
    }
    let set = |key: &str| env.get(key).is_some_and(|v| !v.trim().is_empty());
    let said = |key: &str, value: &str| {
        env.get(key)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case(value))
    };
    let enabled = traces.enabled.unwrap_or_else(|| {
        (set("OTEL_EXPORTER_OTLP_ENDPOINT")
            || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            || said("OTEL_TRACES_EXPORTER", "otlp"))
            && !said("OTEL_SDK_DISABLED", "true")
            && !said("OTEL_TRACES_EXPORTER", "none")
    });
    TelemetryConfig {
        metrics: raw.metrics.enabled,
        traces: enabled.then(|| TracesConfig {
            endpoint: traces.endpoint.map(|e| traces_url(&e)),
            service_name: traces.service_name,
            sample_ratio: traces.sample_ratio,
        }),
    }
}

/// `http://collector:4318` → `http://collector:4318/v1/traces` (a URL already ending in
/// `/v1/traces` is kept).
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn traces_follow_the_file_then_the_otel_variables() {
        let mut problems = Problems::default();
        let off = check_telemetry(RawTelemetry::default(), &env(&[]), &mut problems);
        assert_eq!(off.traces, None);
        assert!(off.metrics);
        let on = check_telemetry(
            RawTelemetry::default(),
            &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
            &mut problems,
        );
        assert!(on.traces.is_some());
        let disabled = check_telemetry(
            RawTelemetry::default(),
            &env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SDK_DISABLED", "true"),
            ]),
            &mut problems,
        );
        assert_eq!(disabled.traces, None);
        let raw = RawTelemetry {
            traces: RawTraces {
                enabled: Some(true),
                endpoint: Some("http://127.0.0.1:4318/".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let file = check_telemetry(raw, &env(&[("OTEL_SDK_DISABLED", "true")]), &mut problems);
        assert_eq!(
            file.traces.unwrap().endpoint.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert!(problems.is_empty());
    }

    #[test]
    fn bad_values_are_named() {
        let mut problems = Problems::default();
        let raw = RawTelemetry {
            traces: RawTraces {
                enabled: Some(true),
                endpoint: Some("grpc://x".into()),
                sample_ratio: Some(1.5),
                service_name: Some(" ".into()),
            },
            ..Default::default()
        };
        check_telemetry(raw, &env(&[]), &mut problems);
        check_log(
            RawLog {
                format: LogFormat::Json,
                level: "querygate=nope=1".into(),
            },
            &mut problems,
        );
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        let text = text.join("\n");
        for key in [
            "telemetry.traces.endpoint",
            "telemetry.traces.sample_ratio",
            "telemetry.traces.service_name",
            "log.level",
        ] {
            assert!(text.contains(key), "{key} missing in {text}");
        }
    }
}
