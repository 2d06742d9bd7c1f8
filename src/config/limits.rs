//! The `limits:` keys that bound a statement's local SQLite evaluation, and admission: how
//! many statements run at once and how many rendered response bytes may be in flight,
//! overall and per tenant; and how much lower the OS priority of bulk work is.

use serde::Deserialize;
use std::time::Duration;

use super::Problems;
use crate::engine::EvalLimits;
use crate::thread_priority::{BulkPriority, DEFAULT_LOWER_BY, LOWEST};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLimits {
    pub(super) max_result_rows: usize,
    #[serde(with = "humantime_serde")]
    pub(super) max_eval_time: Option<Duration>,
    pub(super) max_eval_value_bytes: usize,
    pub(super) max_concurrent_evaluations: Option<usize>,
    pub(super) max_tenant_evaluations: Option<usize>,
    pub(super) max_bulk_statements: Option<usize>,
    pub(super) max_tenant_bulk_statements: Option<usize>,
    #[serde(with = "humantime_serde")]
    pub(super) admission_wait: Duration,
    pub(super) max_response_bytes_in_flight: Option<usize>,
    pub(super) max_tenant_response_bytes_in_flight: Option<usize>,
    pub(super) bulk_work_priority: Option<RawBulkPriority>,
    pub(super) bulk_work_nice: Option<u8>,
}

/// `limits.bulk_work_priority` as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum RawBulkPriority {
    Idle,
    Nice,
    Normal,
}

impl Default for RawLimits {
    fn default() -> Self {
        RawLimits {
            max_result_rows: 100_000,
            max_eval_time: None,
            max_eval_value_bytes: crate::engine::EvalLimits::default().max_value_bytes,
            max_concurrent_evaluations: None,
            max_tenant_evaluations: None,
            max_bulk_statements: None,
            max_tenant_bulk_statements: None,
            admission_wait: AdmissionLimits::default().wait,
            max_response_bytes_in_flight: None,
            max_tenant_response_bytes_in_flight: None,
            bulk_work_priority: None,
            bulk_work_nice: None,
        }
    }
}

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
        bulk_priority: check_bulk_work_priority(raw, problems),
    }
}

/// Checks `limits.bulk_work_priority` (`idle`, the default; `nice`; `normal`) and
/// `limits.bulk_work_nice` (1 to 19 nice steps, default 10; 0: not lowered), which applies
/// with `nice` only. `bulk_work_nice` without `bulk_work_priority` means `nice`.
fn check_bulk_work_priority(raw: &RawLimits, problems: &mut Problems) -> BulkPriority {
    let kind = raw
        .bulk_work_priority
        .unwrap_or(if raw.bulk_work_nice.is_some() {
            RawBulkPriority::Nice
        } else {
            RawBulkPriority::Idle
        });
    let (priority, name) = match kind {
        RawBulkPriority::Nice => {
            let by = raw.bulk_work_nice.unwrap_or(DEFAULT_LOWER_BY);
            if by > LOWEST {
                problems.push(
                    "limits.bulk_work_nice",
                    format!(
                        "{by} is out of range: 0 (bulk work at the process's priority) to {LOWEST}"
                    ),
                );
            }
            return match by.min(LOWEST) {
                0 => BulkPriority::Normal,
                by => BulkPriority::Nice(by),
            };
        }
        RawBulkPriority::Idle => (BulkPriority::Idle, "idle"),
        RawBulkPriority::Normal => (BulkPriority::Normal, "normal"),
    };
    if raw.bulk_work_nice.is_some() {
        problems.push(
            "limits.bulk_work_nice",
            format!("applies only with limits.bulk_work_priority: nice (it is {name})"),
        );
    }
    priority
}

/// How many evaluation slots there are (per replica): pieces of statements' local work done
/// at once (planning, SQLite work on a statement's own thread; never a wait for an
/// upstream), and for how long a call waits to be admitted before it is answered
/// `server.busy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Slots over all tenants (`limits.max_concurrent_evaluations`): by default twice the
    /// CPU cores (more only adds memory and latency, not throughput: the work in a slot is
    /// CPU-bound).
    pub max_concurrent_evaluations: usize,
    /// Slots one tenant may hold at once (`limits.max_tenant_evaluations`): by default half
    /// the global cap (rounded up), so one tenant never takes every slot.
    pub max_tenant_evaluations: usize,
    /// Statements past [`crate::engine::EvalLimits::INLINE_BYTES`] of loaded responses at
    /// once over all tenants (`limits.max_bulk_statements`): each keeps its data in memory
    /// until it ends, waits for upstream pages included, so this bounds the memory of large
    /// statements. By default as many as the CPU cores (at least 2): see
    /// [`AdmissionLimits::default_bulk_statements`].
    pub max_bulk_statements: usize,
    /// Statements of one tenant past those bytes at once
    /// (`limits.max_tenant_bulk_statements`): by default half the global cap (rounded up).
    pub max_tenant_bulk_statements: usize,
    /// How long a call waits to be admitted with a slot (`limits.admission_wait`).
    pub wait: Duration,
    /// Rendered response bytes in flight over all tenants under which statements are
    /// admitted (`limits.max_response_bytes_in_flight`): by default 64 MiB.
    pub max_response_bytes: usize,
    /// Rendered response bytes in flight of one tenant under which its statements are
    /// admitted (`limits.max_tenant_response_bytes_in_flight`): by default half the global
    /// cap.
    pub max_tenant_response_bytes: usize,
    /// How threads rendering and sending large results lower their OS priority
    /// (`limits.bulk_work_priority`, `limits.bulk_work_nice`).
    pub bulk_work_priority: BulkPriority,
}

impl AdmissionLimits {
    /// The default cap on response bytes in flight: 64 MiB.
    pub const DEFAULT_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
    /// The smallest cap on response bytes in flight accepted: 64 KiB.
    pub const MIN_RESPONSE_BYTES: usize = 64 * 1024;

    /// The default cap on large statements at once: the CPU cores this process may use (at
    /// least 2). Each holds its data, its SQLite thread's memory and then its result and
    /// response (about 11 MiB for 10,000 rows of 6 columns); their work is CPU-bound once
    /// their pages are in.
    pub fn default_bulk_statements() -> usize {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .max(2)
    }

    /// The default global cap: twice the CPU cores this process may use (at least 2).
    pub fn default_slots() -> usize {
        std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .saturating_mul(2)
            .max(2)
    }
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        let slots = Self::default_slots();
        let bulk = Self::default_bulk_statements();
        AdmissionLimits {
            max_concurrent_evaluations: slots,
            max_tenant_evaluations: slots.div_ceil(2),
            max_bulk_statements: bulk,
            max_tenant_bulk_statements: bulk.div_ceil(2),
            wait: Duration::from_secs(10),
            max_response_bytes: Self::DEFAULT_RESPONSE_BYTES,
            max_tenant_response_bytes: Self::DEFAULT_RESPONSE_BYTES / 2,
            bulk_work_priority: BulkPriority::default(),
        }
    }
}

/// Checks `limits.max_concurrent_evaluations`, `limits.max_tenant_evaluations`, the bulk
/// statements, `limits.admission_wait` and the response bytes in flight, pushing each
/// problem with its key. `bulk_work_priority` is the one [`check_eval_limits`] read and reported the
/// problems of.
pub(super) fn check_admission(
    raw: &RawLimits,
    bulk_work_priority: BulkPriority,
    problems: &mut Problems,
) -> AdmissionLimits {
    let (global, per_tenant) = check_cap(
        (
            "limits.max_concurrent_evaluations",
            raw.max_concurrent_evaluations,
        ),
        ("limits.max_tenant_evaluations", raw.max_tenant_evaluations),
        AdmissionLimits::default_slots(),
        problems,
    );
    let (bulk, per_tenant_bulk) = check_cap(
        ("limits.max_bulk_statements", raw.max_bulk_statements),
        (
            "limits.max_tenant_bulk_statements",
            raw.max_tenant_bulk_statements,
        ),
        AdmissionLimits::default_bulk_statements(),
        problems,
    );
    if raw.admission_wait > Duration::from_secs(3600) {
        problems.push(
            "limits.admission_wait",
            format!(
                "{} is more than the longest allowed, 1h",
                humantime::format_duration(raw.admission_wait)
            ),
        );
    }
    let (max_response_bytes, max_tenant_response_bytes) = check_response_bytes(raw, problems);
    AdmissionLimits {
        max_concurrent_evaluations: global,
        max_tenant_evaluations: per_tenant,
        max_bulk_statements: bulk,
        max_tenant_bulk_statements: per_tenant_bulk,
        wait: raw.admission_wait,
        max_response_bytes,
        max_tenant_response_bytes,
        bulk_work_priority,
    }
}

/// Checks a count cap over all tenants (`default` when unset, at most 100,000) and its
/// per-tenant share (half the cap, rounded up, when unset; at most the cap), each given with
/// its key; both at least 1.
fn check_cap(
    (global_key, global): (&str, Option<usize>),
    (tenant_key, tenant): (&str, Option<usize>),
    default: usize,
    problems: &mut Problems,
) -> (usize, usize) {
    let global = match global {
        Some(global) => {
            problems.in_range(global_key, global as u64, 100_000);
            global.max(1)
        }
        None => default,
    };
    let per_tenant = tenant.unwrap_or(global.div_ceil(2));
    check_share(tenant_key, tenant, global_key, global, problems);
    (global, per_tenant.max(1))
}

/// Checks a per-tenant share set in `tenant_key`: greater than 0 and at most the cap
/// `global` (set in `global_key`).
fn check_share(
    tenant_key: &str,
    tenant: Option<usize>,
    global_key: &str,
    global: usize,
    problems: &mut Problems,
) {
    match tenant {
        Some(0) => problems.push(tenant_key, "must be greater than 0"),
        Some(share) if share > global => problems.push(
            tenant_key,
            format!("{share} is more than {global_key} ({global})"),
        ),
        _ => {}
    }
}

/// Checks `limits.max_response_bytes_in_flight` and
/// `limits.max_tenant_response_bytes_in_flight` (the share defaults to half the cap).
fn check_response_bytes(raw: &RawLimits, problems: &mut Problems) -> (usize, usize) {
    const MAX: usize = 1 << 40;
    let global = raw
        .max_response_bytes_in_flight
        .unwrap_or(AdmissionLimits::DEFAULT_RESPONSE_BYTES);
    if !(AdmissionLimits::MIN_RESPONSE_BYTES..=MAX).contains(&global) {
        problems.push(
            "limits.max_response_bytes_in_flight",
            format!(
                "{global} is out of range: at least {} (64 KiB) and at most {MAX} (1 TiB)",
                AdmissionLimits::MIN_RESPONSE_BYTES
            ),
        );
    }
    let share = raw
        .max_tenant_response_bytes_in_flight
        .unwrap_or(global / 2);
    check_share(
        "limits.max_tenant_response_bytes_in_flight",
        raw.max_tenant_response_bytes_in_flight,
        "limits.max_response_bytes_in_flight",
        global,
        problems,
    );
    (global.max(1), share.max(1))
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
    fn admission_defaults_to_half_the_slots_per_tenant_and_checks_the_share() {
        let mut problems = Problems::default();
        let raw = RawLimits {
            max_concurrent_evaluations: Some(5),
            ..RawLimits::default()
        };
        let limits = check_admission(&raw, BulkPriority::default(), &mut problems);
        assert_eq!(limits.max_tenant_evaluations, 3);
        assert_eq!(limits.wait, Duration::from_secs(10));
        assert!(problems.is_empty(), "{problems:?}");
        let unset = check_admission(
            &RawLimits::default(),
            BulkPriority::default(),
            &mut problems,
        );
        assert_eq!(
            unset.max_concurrent_evaluations,
            AdmissionLimits::default_slots()
        );
        assert!(unset.max_concurrent_evaluations >= 2);
        let raw = RawLimits {
            max_concurrent_evaluations: Some(4),
            max_tenant_evaluations: Some(5),
            ..RawLimits::default()
        };
        check_admission(&raw, BulkPriority::default(), &mut problems);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            ["limits.max_tenant_evaluations: 5 is more than limits.max_concurrent_evaluations (4)"]
        );
    }

    #[test]
    fn bulk_statements_default_to_the_cores_and_half_per_tenant_and_are_checked() {
        let mut problems = Problems::default();
        let unset = check_admission(
            &RawLimits::default(),
            BulkPriority::default(),
            &mut problems,
        );
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(unset.max_bulk_statements, cores.max(2));
        assert_eq!(
            unset.max_tenant_bulk_statements,
            unset.max_bulk_statements.div_ceil(2)
        );
        let raw = RawLimits {
            max_bulk_statements: Some(3),
            ..RawLimits::default()
        };
        let three = check_admission(&raw, BulkPriority::default(), &mut problems);
        assert_eq!(three.max_tenant_bulk_statements, 2);
        assert!(problems.is_empty(), "{problems:?}");
        let raw = RawLimits {
            max_bulk_statements: Some(0),
            max_tenant_bulk_statements: Some(0),
            ..RawLimits::default()
        };
        check_admission(&raw, BulkPriority::default(), &mut problems);
        let raw = RawLimits {
            max_bulk_statements: Some(2),
            max_tenant_bulk_statements: Some(3),
            ..RawLimits::default()
        };
        check_admission(&raw, BulkPriority::default(), &mut problems);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "limits.max_bulk_statements: must be greater than 0",
                "limits.max_tenant_bulk_statements: must be greater than 0",
                "limits.max_tenant_bulk_statements: 3 is more than limits.max_bulk_statements (2)",
            ]
        );
    }

    #[test]
    fn response_bytes_default_to_64_mib_and_half_per_tenant_and_are_checked() {
        let mut problems = Problems::default();
        let unset = check_admission(
            &RawLimits::default(),
            BulkPriority::default(),
            &mut problems,
        );
        assert_eq!(unset.max_response_bytes, 64 * 1024 * 1024);
        assert_eq!(unset.max_tenant_response_bytes, 32 * 1024 * 1024);
        let raw = RawLimits {
            max_response_bytes_in_flight: Some(1_000_000),
            ..RawLimits::default()
        };
        assert_eq!(
            check_admission(&raw, BulkPriority::default(), &mut problems).max_tenant_response_bytes,
            500_000
        );
        assert!(problems.is_empty(), "{problems:?}");
        let raw = RawLimits {
            max_response_bytes_in_flight: Some(1000),
            max_tenant_response_bytes_in_flight: Some(2000),
            ..RawLimits::default()
        };
        check_admission(&raw, BulkPriority::default(), &mut problems);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "limits.max_response_bytes_in_flight: 1000 is out of range: at least 65536 (64 KiB) and at most 1099511627776 (1 TiB)",
                "limits.max_tenant_response_bytes_in_flight: 2000 is more than limits.max_response_bytes_in_flight (1000)"
            ]
        );
    }

    #[test]
    fn bulk_work_priority_defaults_to_idle_and_is_checked() {
        let check = |priority, nice| {
            let raw = RawLimits {
                bulk_work_priority: priority,
                bulk_work_nice: nice,
                ..RawLimits::default()
            };
            let mut problems = Problems::default();
            let eval = check_eval_limits(&raw, Duration::from_secs(120), &mut problems);
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            (eval.bulk_priority, problems)
        };
        let none: Vec<String> = Vec::new();
        assert_eq!(check(None, None), (BulkPriority::Idle, none.clone()));
        assert_eq!(
            check(Some(RawBulkPriority::Idle), None),
            (BulkPriority::Idle, none.clone())
        );
        assert_eq!(
            check(Some(RawBulkPriority::Normal), None),
            (BulkPriority::Normal, none.clone())
        );
        assert_eq!(
            check(Some(RawBulkPriority::Nice), None),
            (BulkPriority::Nice(10), none.clone())
        );
        assert_eq!(
            check(Some(RawBulkPriority::Nice), Some(3)),
            (BulkPriority::Nice(3), none.clone())
        );
        // `bulk_work_nice` alone means `nice`; 0 there means not lowered.
        assert_eq!(check(None, Some(7)), (BulkPriority::Nice(7), none.clone()));
        assert_eq!(check(None, Some(0)), (BulkPriority::Normal, none));
        assert_eq!(
            check(None, Some(20)),
            (
                BulkPriority::Nice(19),
                vec![
                    "limits.bulk_work_nice: 20 is out of range: 0 (bulk work at the process's priority) to 19"
                        .to_owned()
                ]
            )
        );
        assert_eq!(
            check(Some(RawBulkPriority::Idle), Some(5)),
            (
                BulkPriority::Idle,
                vec![
                    "limits.bulk_work_nice: applies only with limits.bulk_work_priority: nice (it is idle)"
                        .to_owned()
                ]
            )
        );
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
