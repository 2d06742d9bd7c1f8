//! The `limits:` keys that bound a statement's local SQLite evaluation.

use std::time::Duration;

use super::Problems;
use super::upstream::RawLimits;
use crate::engine::EvalLimits;

/// Checks `limits.max_eval_time` and `limits.max_eval_value_bytes`, pushing each problem
/// with its key. Unset, the time budget is 30 s or the call timeout, whichever is shorter.
pub(super) fn check_eval_limits(
    raw: &RawLimits,
    call_timeout: Duration,
    problems: &mut Problems,
) -> EvalLimits {
    let defaults = EvalLimits::default();
    let max_time = match raw.max_eval_time {
        None => defaults.max_time.min(call_timeout),
        Some(time) => {
            if time.is_zero() {
                problems.push("limits.max_eval_time", "must be greater than 0");
            } else if time >= call_timeout {
                problems.push(
                    "limits.max_eval_time",
                    format!(
                        "{} must be shorter than server.call_timeout ({})",
                        humantime::format_duration(time),
                        humantime::format_duration(call_timeout)
                    ),
                );
            }
            time
        }
    };
    let max_value_bytes = raw.max_eval_value_bytes;
    if max_value_bytes < 1024 {
        problems.push_line("limits.max_eval_value_bytes must be at least 1024".to_owned());
    } else if max_value_bytes > EvalLimits::MAX_VALUE_BYTES {
        problems.push_line(format!(
            "limits.max_eval_value_bytes must be at most {} (SQLite's limit)",
            EvalLimits::MAX_VALUE_BYTES
        ));
    }
    EvalLimits {
        max_time,
        max_value_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_budget_is_30s_or_the_call_timeout() {
        let raw = RawLimits::default();
        let mut problems = Problems::default();
        let long = check_eval_limits(&raw, Duration::from_secs(120), &mut problems);
        assert_eq!(long.max_time, Duration::from_secs(30));
        assert_eq!(long.max_value_bytes, 16 * 1024 * 1024);
        let short = check_eval_limits(&raw, Duration::from_secs(5), &mut problems);
        assert_eq!(short.max_time, Duration::from_secs(5));
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn value_bytes_over_sqlite_limit_is_named() {
        let raw = RawLimits {
            max_eval_value_bytes: EvalLimits::MAX_VALUE_BYTES + 1,
            ..RawLimits::default()
        };
        let mut problems = Problems::default();
        check_eval_limits(&raw, Duration::from_secs(120), &mut problems);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("limits.max_eval_value_bytes: must be at most"));
    }
}
