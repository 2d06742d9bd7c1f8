//! Bounds on a statement's local evaluation: how long its final SQL may run and how large a
//! single value SQLite may build, so one statement cannot hold a core or grow the heap
//! without end.

use crate::thread_priority::BulkPriority;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use rusqlite::limits::Limit;

use crate::error::{Error, ErrorKind};

/// SQLite virtual-machine steps between two checks of the time budget.
const CHECK_EVERY_OPS: i32 = 1_000;

/// The largest value SQLite's length limit accepts.
const SQLITE_MAX_LENGTH: usize = 1_000_000_000;

/// Bounds on one statement's evaluation in its SQLite database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalLimits {
    /// Wall-clock time the statement's final SQL may run before it is stopped
    /// (`limits.max_eval_time`).
    pub max_time: Duration,
    /// Bytes of the largest string, blob or row SQLite may build; larger values fail the
    /// statement (`limits.max_eval_value_bytes`, SQLite's `SQLITE_LIMIT_LENGTH`).
    pub max_value_bytes: usize,
    /// How a statement's SQLite thread lowers its OS priority once the statement has
    /// loaded [`EvalLimits::BULK_BYTES`] of response bodies (`limits.bulk_work_priority`,
    /// `limits.bulk_work_nice`).
    pub bulk_priority: BulkPriority,
}

impl Default for EvalLimits {
    fn default() -> Self {
        EvalLimits {
            max_time: Duration::from_secs(30),
            max_value_bytes: 16 * 1024 * 1024,
            bulk_priority: BulkPriority::default(),
        }
    }
}

impl EvalLimits {
    /// The largest `max_value_bytes` SQLite can enforce.
    pub const MAX_VALUE_BYTES: usize = SQLITE_MAX_LENGTH;

    /// The response bodies a statement loads on the calling thread, over all its pages:
    /// 128 KiB. The page that takes it past them moves its SQLite work to a thread of its
    /// own, and first waits for a bulk permit when the statement has evaluation slots (see
    /// `engine::slots`).
    pub const INLINE_BYTES: usize = 128 * 1024;

    /// The response bodies a statement loads (over all its pages) from which its SQLite
    /// work is bulk work, at the priority `bulk_priority` lowers it to: 256 KiB.
    pub const BULK_BYTES: usize = 256 * 1024;

    /// Applies the value-size bound to a fresh connection.
    pub(super) fn apply(&self, conn: &Connection) -> rusqlite::Result<()> {
        let length = self.max_value_bytes.clamp(1, SQLITE_MAX_LENGTH);
        // The clamp keeps the value within i32.
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, length as i32)?;
        Ok(())
    }

    /// The error of a statement that built a value over `max_value_bytes`.
    pub(super) fn too_big(&self) -> Error {
        Error::new(
            ErrorKind::LimitExceeded,
            format!(
                "a value in the statement grew past {} bytes (limits.max_eval_value_bytes); aggregate or select less",
                self.max_value_bytes
            ),
        )
    }

    /// The error of a statement stopped by its time budget.
    pub(super) fn out_of_time(&self) -> Error {
        Error::new(
            ErrorKind::LimitExceeded,
            format!(
                "local evaluation ran longer than {} (limits.max_eval_time); narrow the statement or bound its recursion",
                humantime::format_duration(self.max_time)
            ),
        )
    }
}

/// The time budget of one run of SQL: while it is armed, SQLite is interrupted once the
/// deadline passes, and [`Budget::spent`] tells that interruption from any other.
pub(super) struct Budget {
    spent: Arc<AtomicBool>,
}

impl Budget {
    /// Arms the budget on the connection from now.
    pub(super) fn arm(conn: &mut Connection, max_time: Duration) -> rusqlite::Result<Self> {
        let spent = Arc::new(AtomicBool::new(false));
        let flag = spent.clone();
        let deadline = Instant::now().checked_add(max_time);
        conn.progress_handler(
            CHECK_EVERY_OPS,
            Some(move || {
                let over = deadline.is_some_and(|deadline| Instant::now() >= deadline);
                if over {
                    flag.store(true, Ordering::Relaxed);
                }
                over
            }),
        )?;
        Ok(Budget { spent })
    }

    /// Whether the deadline stopped the SQL.
    pub(super) fn spent(&self) -> bool {
        self.spent.load(Ordering::Relaxed)
    }

    /// Removes the handler from the connection.
    pub(super) fn disarm(conn: &mut Connection) -> rusqlite::Result<()> {
        conn.progress_handler(0, None::<fn() -> bool>)
    }
}

/// Whether SQLite refused a value over its length limit.
pub(super) fn is_too_big(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(code, _) if code.code == rusqlite::ErrorCode::TooBig
    )
}
