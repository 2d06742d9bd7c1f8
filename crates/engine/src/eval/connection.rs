//! The in-memory SQLite connection a statement runs in, kept in a [`Pool`] between small
//! statements: opening one (registering functions, reading the empty schema, closing it
//! again) costs about as much as a small statement's own SQLite work.
//!
//! A statement's rows live in one transaction that is rolled back when the statement ends,
//! so no row it loaded is there for the next one. Its tables are created before that
//! transaction and kept, empty, with the connection: the next statement to take it that
//! creates a table of the same name and columns (the same resource again) reuses it, and
//! the prepared INSERTs and queries in the connection's statement cache stay valid instead
//! of being parsed again. A kept table that a statement does not create is dropped before
//! the statement's first load or query, so a statement only ever sees its own tables. A
//! table created once the transaction has begun (a later join wave) is created inside it
//! and rolled back with it.
//!
//! Per-connection counters that a rollback does not reset (`changes()`, `total_changes()`,
//! `last_insert_rowid()`) are unavailable to SQL (see `functions`). A connection whose
//! statement loaded [`EvalLimits::BULK_BYTES`] or more, or whose schema change or rollback
//! failed, is closed instead, which frees its memory.

use std::collections::HashMap;
use std::sync::Mutex;

use rusqlite::Connection;

use super::functions;
use super::limits::EvalLimits;

/// A connection kept between statements, with the (empty) tables it holds.
struct Kept {
    conn: Connection,
    /// Each kept table's name and the `CREATE TABLE` statement that made it.
    tables: HashMap<String, String>,
}

/// Connections kept between statements; a statement takes the one kept last.
pub(super) struct Pool {
    kept: Mutex<Vec<Kept>>,
}

/// Most connections a [`Pool`] keeps; a statement that ends when it is full closes its own.
const MAX_KEPT: usize = 16;

impl Pool {
    /// An empty pool.
    pub(super) const fn new() -> Pool {
        Pool {
            kept: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Option<Kept> {
        self.kept.lock().ok()?.pop()
    }

    fn keep(&self, kept: Kept) {
        if let Ok(mut pool) = self.kept.lock()
            && pool.len() < MAX_KEPT
        {
            pool.push(kept);
        }
    }
}

/// The pool every statement's connection comes from.
pub(super) static POOL: Pool = Pool::new();

/// One statement's use of a connection (see the module documentation).
pub(super) struct Session {
    pool: &'static Pool,
    conn: Connection,
    /// Tables that exist outside the statement's transaction, by name (in ASCII lower case)
    /// → CREATE statement.
    tables: HashMap<String, String>,
    /// The names (as keyed in `tables`) of those tables this statement created or reused.
    claimed: Vec<String>,
    in_transaction: bool,
    /// A schema change failed: the tables may not be what `tables` says, so the
    /// connection is not kept.
    failed: bool,
}

impl Session {
    /// A session for one statement with `limits` applied, on the connection `pool` kept
    /// last, else a new one.
    pub(super) fn begin(pool: &'static Pool, limits: &EvalLimits) -> rusqlite::Result<Session> {
        let (conn, tables) = match pool.take() {
            Some(Kept { conn, tables }) => (conn, tables),
            None => (open()?, HashMap::new()),
        };
        limits.apply(&conn)?;
        Ok(Session {
            pool,
            conn,
            tables,
            claimed: Vec::new(),
            in_transaction: false,
            failed: false,
        })
    }

    /// The connection, for the interrupt handle and commands that do not read tables.
    pub(super) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Creates table `name` with `create` (its whole `CREATE TABLE` statement): before the
    /// statement's transaction, a kept table made by the same statement is reused and any
    /// other of that name replaced; within it, a table this statement made before the
    /// transaction with the same statement is emptied (its schema, and so the INSERTs
    /// prepared for it, stay valid), any other is created in the transaction.
    pub(super) fn create_table(&mut self, name: &str, create: String) -> rusqlite::Result<()> {
        let created = self.create_or_reuse(name, create);
        self.failed |= created.is_err();
        created
    }

    fn create_or_reuse(&mut self, name: &str, create: String) -> rusqlite::Result<()> {
        let drop = || format!("DROP TABLE IF EXISTS {}", quote_ident(name));
        // SQLite compares table names without ASCII case.
        let key = name.to_ascii_lowercase();
        if self.in_transaction {
            if self.claimed.contains(&key) && self.tables.get(&key) == Some(&create) {
                return self
                    .conn
                    .execute_batch(&format!("DELETE FROM {}", quote_ident(name)));
            }
            // The table no longer is the one `tables` names until the rollback.
            self.claimed.retain(|claimed| *claimed != key);
            self.conn.execute_batch(&drop())?;
            return self.conn.execute_batch(&create);
        }
        if self.tables.get(&key) != Some(&create) {
            if self.tables.remove(&key).is_some() {
                self.conn.execute_batch(&drop())?;
            }
            self.conn.execute_batch(&create)?;
            self.tables.insert(key.clone(), create);
        }
        if !self.claimed.contains(&key) {
            self.claimed.push(key);
        }
        Ok(())
    }

    /// The connection with the statement's transaction begun: on the first call, kept
    /// tables this statement did not create are dropped and the transaction begins.
    pub(super) fn enter(&mut self) -> rusqlite::Result<&mut Connection> {
        let begun = self.begin_transaction();
        self.failed |= begun.is_err();
        begun.map(|()| &mut self.conn)
    }

    fn begin_transaction(&mut self) -> rusqlite::Result<()> {
        if !self.in_transaction {
            let unclaimed: Vec<String> = self
                .tables
                .keys()
                .filter(|name| !self.claimed.contains(name))
                .cloned()
                .collect();
            for name in unclaimed {
                self.conn
                    .execute_batch(&format!("DROP TABLE {}", quote_ident(&name)))?;
                self.tables.remove(&name);
            }
            self.conn.execute_batch("BEGIN")?;
            self.in_transaction = true;
        }
        Ok(())
    }

    /// Ends the statement: rolls its transaction back and keeps the connection and its
    /// (now empty) tables in the pool for a later statement, unless the statement loaded
    /// `loaded` bytes of bulk work, a schema change or the rollback failed: then the
    /// connection is closed.
    pub(super) fn end(self, loaded: usize) {
        if loaded >= EvalLimits::BULK_BYTES || self.failed {
            return;
        }
        let Session {
            pool,
            conn,
            tables,
            in_transaction,
            ..
        } = self;
        if in_transaction && conn.execute_batch("ROLLBACK").is_err() {
            return;
        }
        if !conn.is_autocommit() {
            return;
        }
        pool.keep(Kept { conn, tables });
    }
}

/// `name` as an SQL identifier.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Prepared statements a connection keeps: a small statement needs two or three per table
/// (the INSERT of a full batch of rows, of the last partial one, the query). A kept INSERT
/// of a wide table's batch takes about 100 KB, so an idle connection holds at most about
/// 0.8 MB of them.
const CACHED_STATEMENTS: usize = 8;

fn open() -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    conn.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
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

    fn names(conn: &Connection) -> Vec<String> {
        let mut statement = conn
            .prepare("SELECT name FROM sqlite_master ORDER BY name")
            .unwrap();
        let names = statement.query_map([], |row| row.get(0)).unwrap();
        names.collect::<rusqlite::Result<_>>().unwrap()
    }

    fn count(conn: &Connection, table: &str) -> i64 {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
            row.get(0)
        })
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

    /// A pool of its own for one test (tests run in parallel).
    fn fresh_pool() -> &'static Pool {
        Box::leak(Box::new(Pool::new()))
    }

    /// Whether `pool` keeps no connection.
    fn is_empty(pool: &Pool) -> bool {
        pool.kept.lock().unwrap().is_empty()
    }

    /// A session on the connection `pool` kept last, which must be the one marked `marker`
    /// (kept from the previous statement).
    fn kept_session(pool: &'static Pool, limits: &EvalLimits, marker: i64) -> Session {
        let session = Session::begin(pool, limits).unwrap();
        assert_eq!(
            self::marker(session.connection()),
            marker,
            "the connection was kept"
        );
        session
    }

    /// Every schema change (a DROP, a CREATE) counts up `schema_version`.
    fn schema_version(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA schema_version", [], |r| r.get(0))
            .unwrap()
    }

    fn create(session: &mut Session, name: &str, columns: &str) {
        session
            .create_table(name, format!("CREATE TABLE {name} ({columns})"))
            .unwrap();
    }

    /// A statement on a connection of `pool`: creates `t` with `columns`, enters the
    /// transaction and inserts a row.
    fn statement_with_a_row(pool: &'static Pool, columns: &str, marker: i64) {
        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        mark(session.connection(), marker);
        create(&mut session, "t", columns);
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t DEFAULT VALUES").unwrap();
        assert_eq!(count(conn, "t"), 1);
        session.end(10);
    }

    #[test]
    fn a_kept_table_comes_back_empty_for_the_same_columns() {
        let pool = fresh_pool();
        statement_with_a_row(pool, "a, b", -1234);
        let mut session = kept_session(pool, &EvalLimits::default(), -1234);
        let before = schema_version(session.connection());
        create(&mut session, "t", "a, b");
        let conn = session.enter().unwrap();
        assert_eq!(
            schema_version(conn),
            before,
            "the table was reused, not made again"
        );
        assert_eq!(count(conn, "t"), 0, "the last statement's row is gone");
        session.end(0);
    }

    #[test]
    fn the_same_table_made_again_within_the_transaction_is_emptied_not_replaced() {
        let pool = fresh_pool();
        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        create(&mut session, "t", "a, b");
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t DEFAULT VALUES").unwrap();
        let before = schema_version(conn);
        create(&mut session, "t", "a, b");
        let conn = session.enter().unwrap();
        assert_eq!(
            schema_version(conn),
            before,
            "the table was emptied, not dropped and made again"
        );
        assert_eq!(count(conn, "t"), 0, "its rows are gone");
        // Another CREATE for the name within the transaction replaces the table.
        create(&mut session, "t", "c");
        let conn = session.enter().unwrap();
        assert!(schema_version(conn) > before, "the table was replaced");
        conn.execute_batch("INSERT INTO t (c) VALUES (1)").unwrap();
        // And the first CREATE again makes its table again: it is not the one made before.
        create(&mut session, "t", "a, b");
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t (a, b) VALUES (1, 2)")
            .unwrap();
        session.end(0);
    }

    #[test]
    fn a_kept_table_of_other_columns_is_replaced() {
        let pool = fresh_pool();
        statement_with_a_row(pool, "a, b", -1235);
        let mut session = kept_session(pool, &EvalLimits::default(), -1235);
        create(&mut session, "t", "c");
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t (c) VALUES (1)").unwrap();
        assert!(conn.execute_batch("SELECT a FROM t").is_err());
        session.end(0);
    }

    #[test]
    fn a_statement_sees_only_the_tables_it_created() {
        let pool = fresh_pool();
        statement_with_a_row(pool, "a", -1236);
        let mut session = kept_session(pool, &EvalLimits::default(), -1236);
        create(&mut session, "u", "x");
        let conn = session.enter().unwrap();
        assert_eq!(names(conn), ["u"], "the kept table t is gone");
        session.end(0);

        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        let conn = session.enter().unwrap();
        assert!(
            names(conn).is_empty(),
            "a statement with no tables sees none"
        );
        session.end(0);
    }

    #[test]
    fn a_table_created_in_the_transaction_is_rolled_back() {
        let pool = fresh_pool();
        statement_with_a_row(pool, "a", -1237);
        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        create(&mut session, "t", "a");
        session.enter().unwrap();
        // A later wave re-creates t with other columns and adds v, inside the transaction.
        create(&mut session, "t", "z");
        create(&mut session, "v", "w");
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t (z) VALUES (1); INSERT INTO v (w) VALUES (2)")
            .unwrap();
        session.end(0);

        let mut session = kept_session(pool, &EvalLimits::default(), -1237);
        create(&mut session, "t", "a");
        let conn = session.enter().unwrap();
        assert_eq!(names(conn), ["t"]);
        conn.execute_batch("SELECT a FROM t").unwrap();
        assert_eq!(count(conn, "t"), 0);
        session.end(0);
    }

    #[test]
    fn a_kept_table_named_in_another_case_is_replaced() {
        let pool = fresh_pool();
        statement_with_a_row(pool, "a", -1238);
        let mut session = kept_session(pool, &EvalLimits::default(), -1238);
        create(&mut session, "T", "a");
        let conn = session.enter().unwrap();
        assert_eq!(names(conn), ["T"]);
        assert_eq!(count(conn, "T"), 0);
        session.end(0);
    }

    #[test]
    fn a_pool_keeps_at_most_its_limit_of_connections() {
        let pool = fresh_pool();
        let sessions: Vec<Session> = (0..MAX_KEPT + 2)
            .map(|_| Session::begin(pool, &EvalLimits::default()).unwrap())
            .collect();
        for session in sessions {
            session.end(0);
        }
        assert_eq!(pool.kept.lock().unwrap().len(), MAX_KEPT);
    }

    #[test]
    fn a_failed_schema_change_closes_the_connection() {
        let pool = fresh_pool();
        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        create(&mut session, "t", "a");
        let broken = session.create_table("u", "CREATE TABLE u (a, a)".to_owned());
        assert!(broken.is_err(), "duplicate column");
        session.end(0);
        assert!(is_empty(pool));
    }

    #[test]
    fn a_bulk_statement_closes_its_connection() {
        let pool = fresh_pool();
        let session = Session::begin(pool, &EvalLimits::default()).unwrap();
        session.end(EvalLimits::BULK_BYTES);
        assert!(is_empty(pool));
    }

    #[test]
    fn a_statement_that_committed_closes_its_connection() {
        let pool = fresh_pool();
        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        create(&mut session, "t", "a");
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t VALUES (1); COMMIT")
            .unwrap();
        session.end(0);
        assert!(is_empty(pool));
    }

    #[test]
    fn limits_apply_to_a_kept_connection() {
        let pool = fresh_pool();
        use rusqlite::limits::Limit;
        let session = Session::begin(pool, &EvalLimits::default()).unwrap();
        mark(session.connection(), -2345);
        session.end(0);
        let small = EvalLimits {
            max_value_bytes: 1000,
            ..EvalLimits::default()
        };
        let session = kept_session(pool, &small, -2345);
        assert_eq!(
            session
                .connection()
                .limit(Limit::SQLITE_LIMIT_LENGTH)
                .unwrap(),
            1000
        );
        session.end(0);
    }

    #[test]
    fn an_interrupt_after_the_last_command_does_not_reach_the_next_statement() {
        let pool = fresh_pool();
        // `Database` interrupts its connection whenever it is dropped, also after a
        // statement that ended normally.
        let mut session = Session::begin(pool, &EvalLimits::default()).unwrap();
        mark(session.connection(), -4321);
        create(&mut session, "t", "a");
        let conn = session.enter().unwrap();
        conn.execute_batch("INSERT INTO t VALUES (1)").unwrap();
        conn.get_interrupt_handle().interrupt();
        session.end(0);
        let mut session = kept_session(pool, &EvalLimits::default(), -4321);
        create(&mut session, "t", "a");
        let conn = session.enter().unwrap();
        assert_eq!(count(conn, "t"), 0);
        session.end(0);
    }
}
