//! The in-memory SQLite connection a statement runs in, kept on its thread between small
//! statements: opening one (registering functions, reading the empty schema, closing it
//! again) costs about as much as a small statement's own SQLite work.
//!
//! Every statement runs inside one transaction that is rolled back when the statement ends,
//! so nothing it loaded or created (tables, rows, schema) is there for the next one; the
//! statement cache is flushed with it. Per-connection counters that a rollback does not
//! reset (`changes()`, `total_changes()`, `last_insert_rowid()`) are unavailable to SQL
//! (see `functions`). A connection whose statement loaded [`EvalLimits::BULK_BYTES`] or more,
//! or whose rollback failed, is closed instead, which frees its memory.

use std::cell::RefCell;

use rusqlite::Connection;

use super::functions;
use super::limits::EvalLimits;

thread_local! {
    /// This thread's connection between two statements.
    static KEPT: RefCell<Option<Connection>> = const { RefCell::new(None) };
}

/// A connection for one statement, with its transaction begun and `limits` applied: the one
/// this thread kept from its previous statement, else a new one.
pub(super) fn begin(limits: &EvalLimits) -> rusqlite::Result<Connection> {
    let conn = match KEPT.with(|kept| kept.borrow_mut().take()) {
        Some(conn) => conn,
        None => open()?,
    };
    limits.apply(&conn)?;
    conn.execute_batch("BEGIN")?;
    Ok(conn)
}

/// Ends a statement: rolls its transaction back and keeps the connection for this thread's
/// next statement, unless the statement loaded `loaded` bytes of bulk work (or the rollback
/// failed): then the connection is closed.
pub(super) fn end(conn: Connection, loaded: usize) {
    if loaded >= EvalLimits::BULK_BYTES {
        return;
    }
    conn.flush_prepared_statement_cache();
    if conn.execute_batch("ROLLBACK").is_err() || !conn.is_autocommit() {
        return;
    }
    KEPT.with(|kept| *kept.borrow_mut() = Some(conn));
}

fn open() -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    functions::register(&conn)?;
    // In-memory: the rollback journal is kept in memory too (it is what undoes a statement
    // at its end); nothing is ever synced.
    conn.execute_batch("PRAGMA journal_mode = MEMORY; PRAGMA synchronous = OFF;")?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn tables(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get(0))
            .unwrap()
    }

    /// Marks `conn` with a connection setting that a rollback does not undo.
    fn mark(conn: &Connection, marker: i64) {
        conn.execute_batch(&format!("PRAGMA cache_size = {marker}"))
            .unwrap();
    }

    /// The mark of `conn` (SQLite's default cache size when unmarked).
    fn marker(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA cache_size", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_kept_connection_starts_empty() {
        let limits = EvalLimits::default();
        let conn = begin(&limits).unwrap();
        mark(&conn, -1234);
        conn.execute_batch("CREATE TABLE t (a); INSERT INTO t VALUES (1), (2);")
            .unwrap();
        end(conn, 10);

        let conn = begin(&limits).unwrap();
        assert_eq!(marker(&conn), -1234, "the connection was kept");
        assert_eq!(tables(&conn), 0, "the last statement's table is gone");
        conn.execute_batch("CREATE TABLE t (b, c)").unwrap();
        assert_eq!(tables(&conn), 1);
        end(conn, 0);
    }

    #[test]
    fn a_bulk_statement_closes_its_connection() {
        let limits = EvalLimits::default();
        let conn = begin(&limits).unwrap();
        end(conn, EvalLimits::BULK_BYTES);
        assert!(KEPT.with(|kept| kept.borrow().is_none()));
    }

    #[test]
    fn limits_apply_to_a_kept_connection() {
        use rusqlite::limits::Limit;
        let conn = begin(&EvalLimits::default()).unwrap();
        mark(&conn, -2345);
        end(conn, 0);
        let small = EvalLimits {
            max_value_bytes: 1000,
            ..EvalLimits::default()
        };
        let conn = begin(&small).unwrap();
        assert_eq!(marker(&conn), -2345, "the connection was kept");
        assert_eq!(conn.limit(Limit::SQLITE_LIMIT_LENGTH).unwrap(), 1000);
        end(conn, 0);
    }

    #[test]
    fn an_interrupt_after_the_last_command_does_not_reach_the_next_statement() {
        // `Database` interrupts its connection whenever it is dropped, also after a
        // statement that ended normally.
        let limits = EvalLimits::default();
        let conn = begin(&limits).unwrap();
        mark(&conn, -4321);
        conn.execute_batch("CREATE TABLE t (a)").unwrap();
        conn.get_interrupt_handle().interrupt();
        end(conn, 0);
        let conn = begin(&limits).unwrap();
        assert_eq!(marker(&conn), -4321, "the connection was kept");
        assert_eq!(tables(&conn), 0);
        end(conn, 0);
    }
}
