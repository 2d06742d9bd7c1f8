//! `audit.otlp`: where the audit's OTLP export goes and how it queues and retries, over the
//! standard `OTEL_EXPORTER_OTLP_*` variables (the `_LOGS_` ones first). A key set here wins
//! over its variable; headers are merged, a key here replacing the variable's header of the
//! same name.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

use super::Problems;
use crate::audit::OtlpSettings;

/// The endpoint when neither the configuration nor the environment names one.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/logs";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawOtlp {
    endpoint: Option<String>,
    headers: HashMap<String, String>,
    #[serde(with = "humantime_serde")]
    timeout: Option<Duration>,
    compression: Option<String>,
    queue_size: usize,
    max_batch: usize,
    retry: RawRetry,
}

impl Default for RawOtlp {
    fn default() -> Self {
        RawOtlp {
            endpoint: None,
            headers: HashMap::new(),
            timeout: None,
            compression: None,
            queue_size: 2048,
            max_batch: 512,
            retry: RawRetry::default(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    #[serde(with = "humantime_serde")]
    initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    max_backoff: Duration,
    #[serde(with = "humantime_serde")]
    max_elapsed: Duration,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_elapsed: Duration::from_secs(300),
        }
    }
}

/// The first of `OTEL_EXPORTER_OTLP_LOGS_<name>` and `OTEL_EXPORTER_OTLP_<name>` set.
fn otel_env<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<(String, &'a str)> {
    [
        format!("OTEL_EXPORTER_OTLP_LOGS_{name}"),
        format!("OTEL_EXPORTER_OTLP_{name}"),
    ]
    .into_iter()
    .find_map(|key| {
        let value = env.get(&key).map(|v| v.trim()).filter(|v| !v.is_empty())?;
        Some((key, value))
    })
}

/// Checks the section over `env`, adding every problem (naming its key) to `problems`.
pub(super) fn check_otlp(
    raw: RawOtlp,
    env: &HashMap<String, String>,
    problems: &mut Problems,
) -> OtlpSettings {
    let endpoint = match raw.endpoint.filter(|e| !e.is_empty()) {
        Some(endpoint) => endpoint,
        None => match env
            .get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
        {
            Some(logs) => logs.to_owned(),
            None => match otel_env(env, "ENDPOINT") {
                Some((_, base)) => format!("{}/v1/logs", base.trim_end_matches('/')),
                None => DEFAULT_ENDPOINT.to_owned(),
            },
        },
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        problems.push_line(
            "audit.otlp.endpoint (or OTEL_EXPORTER_OTLP_(LOGS_)ENDPOINT) must be an http:// or https:// URL"
                .to_owned(),
        );
    }
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some((key, list)) = otel_env(env, "HEADERS") {
        for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
            match pair.split_once('=') {
                Some((name, value)) => headers.push((decode(name.trim()), decode(value.trim()))),
                None => problems.push_line(format!(
                    "{key} holds an entry without '=' (entries are name=value, comma-separated)"
                )),
            }
        }
    }
    let mut own: Vec<(String, String)> = raw.headers.into_iter().collect();
    own.sort();
    for (name, value) in own {
        headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
        headers.push((name, value));
    }
    let timeout = match raw.timeout {
        Some(timeout) => timeout,
        None => match otel_env(env, "TIMEOUT") {
            Some((key, millis)) => millis
                .parse::<u64>()
                .map(Duration::from_millis)
                .unwrap_or_else(|_| {
                    problems.push_line(format!("{key} '{millis}' is not a number of milliseconds"));
                    Duration::from_secs(10)
                }),
            None => Duration::from_secs(10),
        },
    };
    if timeout.is_zero() {
        problems.push_line("audit.otlp.timeout must be greater than 0".to_owned());
    }
    let compression = raw
        .compression
        .or_else(|| otel_env(env, "COMPRESSION").map(|(_, v)| v.to_owned()))
        .unwrap_or_else(|| "none".to_owned());
    let gzip = match compression.as_str() {
        "gzip" => true,
        "none" => false,
        other => {
            problems.push_line(format!(
                "audit.otlp.compression '{other}' must be gzip or none"
            ));
            false
        }
    };
    if raw.queue_size == 0 {
        problems.push_line("audit.otlp.queue_size must be greater than 0".to_owned());
    }
    if raw.max_batch == 0 {
        problems.push_line("audit.otlp.max_batch must be greater than 0".to_owned());
    }
    let retry = raw.retry;
    if retry.initial_backoff.is_zero() || retry.max_backoff < retry.initial_backoff {
        problems.push_line(
            "audit.otlp.retry: initial_backoff must be greater than 0 and at most max_backoff"
                .to_owned(),
        );
    }
    OtlpSettings {
        endpoint,
        headers,
        timeout,
        gzip,
        queue_size: raw.queue_size,
        max_batch: raw.max_batch,
        initial_backoff: retry.initial_backoff,
        max_backoff: retry.max_backoff,
        max_elapsed: retry.max_elapsed,
    }
}

/// A percent-decoded header name or value (as the OTLP exporter variables write them).
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str, env: &[(&str, &str)]) -> (OtlpSettings, Vec<String>) {
        let raw: RawOtlp = serde_norway::from_str(yaml).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut problems = Problems::default();
        let settings = check_otlp(raw, &env, &mut problems);
        (settings, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn the_standard_variables_are_read_and_keys_win() {
        let (settings, problems) = check("{}", &[]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(settings.timeout, Duration::from_secs(10));
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20abc,x-tenant=a",
            ),
            ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ];
        let (settings, problems) = check("{}", &env);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.endpoint, "http://collector:4318/v1/logs");
        assert_eq!(settings.timeout, Duration::from_millis(2500));
        assert!(settings.gzip);
        assert_eq!(
            settings.headers,
            vec![
                ("authorization".to_owned(), "Bearer abc".to_owned()),
                ("x-tenant".to_owned(), "a".to_owned())
            ]
        );
        let logs = [(
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
            "http://logs:4318/custom",
        )];
        assert_eq!(check("{}", &logs).0.endpoint, "http://logs:4318/custom");
        let (settings, _) = check(
            "endpoint: https://own/v1/logs\nheaders: {X-Tenant: b}\ntimeout: 1s\ncompression: none\n",
            &env,
        );
        assert_eq!(settings.endpoint, "https://own/v1/logs");
        assert_eq!(settings.timeout, Duration::from_secs(1));
        assert!(!settings.gzip);
        assert_eq!(settings.headers[1], ("X-Tenant".to_owned(), "b".to_owned()));
        assert_eq!(settings.headers.len(), 2);
        let debug = format!("{settings:?}");
        assert!(!debug.contains("Bearer"), "headers are secrets: {debug}");
    }

    #[test]
    fn problems_are_named() {
        let (_, problems) = check(
            "endpoint: ftp://x\ncompression: zstd\nqueue_size: 0\nmax_batch: 0\nretry: {initial_backoff: 0s}\n",
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")],
        );
        let text = problems.join("; ");
        for key in [
            "audit.otlp.endpoint",
            "audit.otlp.compression",
            "audit.otlp.queue_size",
            "audit.otlp.max_batch",
            "audit.otlp.retry",
        ] {
            assert!(text.contains(key), "{key}: {text}");
        }
    }
}
