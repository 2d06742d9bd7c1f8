//! The embedded SQLite a statement is evaluated in: an in-memory database per statement, run
//! by a dedicated thread (one of a pool of reusable threads) so decoding and SQL never block
//! the async runtime. The async side sends commands (create a table, load a response page,
//! read a join column, run the final SQL) and awaits the replies it needs; dropping the
//! [`Database`] interrupts a running query and frees the thread. A thread keeps its
//! connection for its next small statement, with no rows and only the tables that statement
//! creates again (see `connection`).

mod connection;
mod functions;
mod limits;
mod threads;

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, InterruptHandle};
use tokio::sync::oneshot;

use super::error::{Error, ErrorKind, Result};
use super::rows::{self, ColumnBinder, Loaded, RowLocator, RowWriter};
use super::types::{Cell, QueryOutput};

use self::connection::{Session, quote_ident};
use self::limits::Budget;
pub use self::limits::EvalLimits;

type Reply<T> = oneshot::Sender<Result<T>>;

enum Command {
    /// Not answered: a failure fails the statement's next command that is.
    Create {
        table: String,
        columns: Vec<String>,
        booleans: Vec<String>,
    },
    Load {
        table: String,
        body: Bytes,
        locator: Arc<RowLocator>,
        fixed: Vec<(String, SqlValue)>,
        wanted: Vec<Vec<String>>,
        reply: Reply<Loaded>,
    },
    Discover {
        body: Bytes,
        locator: Arc<RowLocator>,
        wanted: Vec<Vec<String>>,
        reply: Reply<Discovered>,
    },
    Distinct {
        table: String,
        column: String,
        reply: Reply<Vec<SqlValue>>,
    },
    Query {
        sql: String,
        max_rows: usize,
        reply: Reply<QueryOutput>,
    },
}

/// Handle to a statement's SQLite database.
pub(crate) struct Database {
    commands: mpsc::Sender<Command>,
    /// Set by the thread once its connection is ready.
    interrupt: Arc<OnceLock<InterruptHandle>>,
}

impl Command {
    /// Whether the caller stopped waiting for the reply.
    fn abandoned(&self) -> bool {
        match self {
            Command::Create { .. } => false,
            Command::Load { reply, .. } => reply.is_closed(),
            Command::Discover { reply, .. } => reply.is_closed(),
            Command::Distinct { reply, .. } => reply.is_closed(),
            Command::Query { reply, .. } => reply.is_closed(),
        }
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Command")
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Database")
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Stops a long-running final query when the caller goes away. This runs before the
        // thread can see the statement end (the command channel closes after it), so it never
        // reaches the thread's next statement.
        if let Some(interrupt) = self.interrupt.get() {
            interrupt.interrupt();
        }
    }
}

/// A reply from the SQLite thread, awaited later (loads are pipelined with fetching).
pub(crate) type Pending<T> = oneshot::Receiver<Result<T>>;

/// A load whose result is awaited later.
pub(crate) type PendingLoad = Pending<Loaded>;

/// The property names of a page's rows, and the scalars at the wanted paths.
pub(crate) type Discovered = (Vec<String>, Vec<Option<String>>);

/// The reply of `pending`.
pub(crate) async fn settled<T>(pending: Pending<T>) -> Result<T> {
    pending
        .await
        .map_err(|_| Error::internal("the SQLite thread has stopped"))?
}

impl Database {
    /// Starts an empty in-memory database on its own thread, bounded by `limits`. A failure
    /// to open it is the reply to the first command that is answered.
    pub(crate) fn open(limits: EvalLimits) -> Result<Self> {
        let (commands, receiver) = mpsc::channel::<Command>();
        let interrupt = Arc::new(OnceLock::new());
        let ready = interrupt.clone();
        threads::run(Box::new(move || worker(receiver, &ready, limits)))
            .map_err(|err| Error::internal(format!("cannot start the SQLite thread: {err}")))?;
        Ok(Database {
            commands,
            interrupt,
        })
    }

    fn send<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<oneshot::Receiver<Result<T>>> {
        let (reply, receiver) = oneshot::channel();
        self.commands
            .send(make(reply))
            .map_err(|_| Error::internal("the SQLite thread has stopped"))?;
        Ok(receiver)
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T> {
        settled(self.send(make)?).await
    }

    /// Queues the creation of a table with these columns (no declared types: values keep
    /// the type they were bound with), those in `booleans` declared BOOLEAN. Its failure is
    /// the reply to the next command that is answered.
    pub(crate) fn create_table(
        &self,
        table: &str,
        columns: Vec<String>,
        booleans: &[String],
    ) -> Result<()> {
        self.commands
            .send(Command::Create {
                table: table.to_owned(),
                columns,
                booleans: booleans.to_vec(),
            })
            .map_err(|_| Error::internal("the SQLite thread has stopped"))
    }

    /// Queues one response page for loading; the receiver yields the rows inserted and the
    /// scalars at the `wanted` paths (read in the same pass).
    pub(crate) fn load(
        &self,
        table: &str,
        body: Bytes,
        locator: Arc<RowLocator>,
        fixed: Vec<(String, SqlValue)>,
        wanted: Vec<Vec<String>>,
    ) -> Result<PendingLoad> {
        let table = table.to_owned();
        self.send(|reply| Command::Load {
            table,
            body,
            locator,
            fixed,
            wanted,
            reply,
        })
    }

    /// Queues one page for reading the property names of its rows (for schemas that declare
    /// none) and the scalars at the `wanted` paths, in one pass.
    pub(crate) fn discover_page(
        &self,
        body: Bytes,
        locator: Arc<RowLocator>,
        wanted: Vec<Vec<String>>,
    ) -> Result<Pending<Discovered>> {
        self.send(|reply| Command::Discover {
            body,
            locator,
            wanted,
            reply,
        })
    }

    /// The property names found in a page (for schemas that declare none).
    pub(crate) async fn discover(
        &self,
        body: Bytes,
        locator: Arc<RowLocator>,
    ) -> Result<Vec<String>> {
        let (names, _) = settled(self.discover_page(body, locator, Vec::new())?).await?;
        Ok(names)
    }

    /// Distinct non-null values of a column (to pass as another table's parameter).
    pub(crate) async fn distinct(&self, table: &str, column: &str) -> Result<Vec<SqlValue>> {
        let (table, column) = (table.to_owned(), column.to_owned());
        self.call(|reply| Command::Distinct {
            table,
            column,
            reply,
        })
        .await
    }

    /// Runs the final statement, returning at most `max_rows` rows (in a `sqlite_eval` span).
    pub(crate) async fn query(&self, sql: String, max_rows: usize) -> Result<QueryOutput> {
        use tracing::Instrument as _;
        self.call(|reply| Command::Query {
            sql,
            max_rows,
            reply,
        })
        .instrument(tracing::info_span!("sqlite_eval"))
        .await
    }
}

struct Table {
    columns: Vec<String>,
    binder: ColumnBinder,
}

/// The response bytes loaded after `more`; past [`EvalLimits::BULK_BYTES`] this thread's
/// priority is lowered (once) as `limits.bulk_priority` says.
fn bulk_after(loaded: usize, more: usize, limits: &EvalLimits) -> usize {
    let loaded = loaded.saturating_add(more);
    if loaded >= EvalLimits::BULK_BYTES {
        crate::thread_priority::lower(limits.bulk_priority);
    }
    loaded
}

fn worker(
    commands: mpsc::Receiver<Command>,
    ready: &OnceLock<InterruptHandle>,
    limits: EvalLimits,
) {
    let mut session = match Session::begin(&limits) {
        Ok(session) => session,
        Err(err) => {
            fail_all(&commands, sqlite_internal(err));
            return;
        }
    };
    let _ = ready.set(session.connection().get_interrupt_handle());
    let mut tables: HashMap<String, Table> = HashMap::new();
    // Response bytes loaded so far: past `EvalLimits::BULK_BYTES` this thread's work is
    // bulk work, at a lower priority until the statement ends (see `threads`).
    let mut loaded = 0_usize;
    while let Ok(command) = commands.recv() {
        // Nobody waits for this reply (the statement was dropped: cancelled or timed out):
        // skip the work instead of loading pages nobody reads.
        if command.abandoned() {
            continue;
        }
        match command {
            Command::Create {
                table,
                columns,
                booleans,
            } => {
                if let Err(err) = create(&mut session, &mut tables, table, columns, &booleans) {
                    // The statement cannot go on: its next answered command gets the error.
                    fail_all(&commands, err);
                    break;
                }
            }
            Command::Load {
                table,
                body,
                locator,
                fixed,
                wanted,
                reply,
            } => {
                loaded = bulk_after(loaded, body.len(), &limits);
                let page = Page {
                    body: &body,
                    locator: &locator,
                    wanted: &wanted,
                };
                let loaded = entered(&mut session)
                    .and_then(|conn| load(conn, &tables, &table, page, &fixed, &limits));
                let _ = reply.send(loaded);
            }
            Command::Discover {
                body,
                locator,
                wanted,
                reply,
            } => {
                loaded = bulk_after(loaded, body.len(), &limits);
                let found = rows::discover_columns(&body, &locator, &wanted).map_err(|err| {
                    Error::new(
                        ErrorKind::Upstream,
                        format!("upstream response is not valid JSON: {err}"),
                    )
                });
                let _ = reply.send(found);
            }
            Command::Distinct {
                table,
                column,
                reply,
            } => {
                let values =
                    entered(&mut session).and_then(|conn| distinct(conn, &tables, &table, &column));
                let _ = reply.send(values);
            }
            Command::Query {
                sql,
                max_rows,
                reply,
            } => {
                let output = entered(&mut session)
                    .and_then(|conn| run_bounded(conn, &sql, max_rows, &limits));
                let _ = reply.send(output);
            }
        }
    }
    drop(tables);
    session.end(loaded);
}

/// The session's connection inside the statement's transaction.
fn entered(session: &mut Session) -> Result<&mut Connection> {
    session.enter().map_err(sqlite_internal)
}

/// Answers the first answered command still to come with `err`, and any after it with a
/// note that the statement's database failed.
fn fail_all(commands: &mpsc::Receiver<Command>, err: Error) {
    let mut first = Some(err);
    while let Ok(command) = commands.recv() {
        let err = first
            .take()
            .unwrap_or_else(|| Error::internal("the statement's SQLite database failed earlier"));
        match command {
            Command::Create { .. } => first = Some(err),
            Command::Load { reply, .. } => drop(reply.send(Err(err))),
            Command::Discover { reply, .. } => drop(reply.send(Err(err))),
            Command::Distinct { reply, .. } => drop(reply.send(Err(err))),
            Command::Query { reply, .. } => drop(reply.send(Err(err))),
        }
    }
}

fn sqlite_internal(err: rusqlite::Error) -> Error {
    Error::internal(format!("sqlite: {err}"))
}

/// The declared type of columns the provider document types as boolean.
const BOOLEAN: &str = "BOOLEAN";

fn contains_ci(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

fn create(
    session: &mut Session,
    tables: &mut HashMap<String, Table>,
    table: String,
    columns: Vec<String>,
    booleans: &[String],
) -> Result<()> {
    let mut unique: Vec<String> = Vec::with_capacity(columns.len());
    for column in columns {
        if !unique.iter().any(|c| c.eq_ignore_ascii_case(&column)) {
            unique.push(column);
        }
    }
    if unique.is_empty() {
        unique.push("value".to_owned());
    }
    // Declared BOOLEAN (NUMERIC affinity: JSON true/false are stored as 1/0 and compare as
    // numbers); a query reads the declared type back to give such columns as booleans.
    let defs: Vec<String> = unique
        .iter()
        .map(|c| match contains_ci(booleans, c) {
            true => format!("{} {BOOLEAN}", quote_ident(c)),
            false => quote_ident(c),
        })
        .collect();
    let statement = format!("CREATE TABLE {} ({})", quote_ident(&table), defs.join(", "));
    session
        .create_table(&table, statement)
        .map_err(sqlite_internal)?;
    let binder = ColumnBinder::new(&unique);
    tables.insert(
        table,
        Table {
            columns: unique,
            binder,
        },
    );
    Ok(())
}

/// A response page to load.
struct Page<'a> {
    body: &'a [u8],
    locator: &'a RowLocator,
    wanted: &'a [Vec<String>],
}

fn load(
    conn: &Connection,
    tables: &HashMap<String, Table>,
    table: &str,
    page: Page<'_>,
    fixed: &[(String, SqlValue)],
    limits: &EvalLimits,
) -> Result<Loaded> {
    let state = tables
        .get(table)
        .ok_or_else(|| Error::internal(format!("no table {table}")))?;
    let fixed: Vec<(usize, SqlValue)> = fixed
        .iter()
        .filter_map(|(name, value)| {
            let position = state
                .columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(name))?;
            Some((position + 1, value.clone()))
        })
        .collect();
    let mut writer = RowWriter::new(conn, table, state.columns.len());
    let Page {
        body,
        locator,
        wanted,
    } = page;
    rows::load_rows(body, locator, &state.binder, &fixed, &mut writer, wanted).map_err(|err| {
        match err {
            rows::RowsError::Json(err) => Error::new(
                ErrorKind::Upstream,
                format!("upstream response is not valid JSON: {err}"),
            ),
            rows::RowsError::Sqlite(err) if is_too_big(&err) => limits.too_big(),
            rows::RowsError::Sqlite(err) => sqlite_internal(err),
        }
    })
}

fn distinct(
    conn: &Connection,
    tables: &HashMap<String, Table>,
    table: &str,
    column: &str,
) -> Result<Vec<SqlValue>> {
    let state = tables
        .get(table)
        .ok_or_else(|| Error::internal(format!("no table {table}")))?;
    let Some(column) = state
        .columns
        .iter()
        .find(|c| c.eq_ignore_ascii_case(column))
    else {
        return Err(Error::invalid_sql(format!("no such column: {column}")));
    };
    let sql = format!(
        "SELECT DISTINCT {col} FROM {table} WHERE {col} IS NOT NULL",
        col = quote_ident(column),
        table = quote_ident(table)
    );
    let mut statement = conn.prepare(&sql).map_err(sqlite_internal)?;
    let values = statement
        .query_map([], |row| row.get::<_, SqlValue>(0))
        .map_err(sqlite_internal)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sqlite_internal)?;
    Ok(values)
}

/// Runs the final SQL within the time budget; a value over the length limit or a spent
/// budget ends it with a `LimitExceeded` error.
fn run_bounded(
    conn: &mut Connection,
    sql: &str,
    max_rows: usize,
    limits: &EvalLimits,
) -> Result<QueryOutput> {
    let budget = Budget::arm(conn, limits.max_time).map_err(sqlite_internal)?;
    let result = run_query(conn, sql, max_rows, limits);
    Budget::disarm(conn).map_err(sqlite_internal)?;
    match result {
        // Once the budget is spent SQLite stops the statement: whatever error it ended
        // with, the budget is the cause.
        Err(_) if budget.spent() => Err(limits.out_of_time()),
        other => other,
    }
}

fn run_query(
    conn: &Connection,
    sql: &str,
    max_rows: usize,
    limits: &EvalLimits,
) -> Result<QueryOutput> {
    let sql_error = |err| sql_error(err, limits);
    // Cached: the same statement over the same (kept) tables is not parsed again.
    let mut statement = conn.prepare_cached(sql).map_err(sql_error)?;
    if !statement.readonly() {
        return Err(Error::unsupported(
            "only read-only SQL runs against fetched rows",
        ));
    }
    // The result's columns are read once the statement has stepped: a cached statement over
    // a table made again since (same name, other columns) is compiled again by its first
    // step, and only then names the table's columns now.
    let mut shape: Option<Shape> = None;
    let mut rows = statement.query([]).map_err(sql_error)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().map_err(sql_error)? {
        if out.len() >= max_rows {
            return Err(Error::new(
                ErrorKind::LimitExceeded,
                format!(
                    "the result has more than {max_rows} rows (limits.max_result_rows); add a LIMIT or a narrower WHERE"
                ),
            ));
        }
        let shape = shape.get_or_insert_with(|| Shape::of(row.as_ref()));
        let mut cells = Vec::with_capacity(shape.columns.len());
        for (i, is_boolean) in shape.boolean.iter().enumerate() {
            let cell = match row.get_ref(i).map_err(sql_error)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(v @ (0 | 1)) if *is_boolean => Cell::Boolean(v == 1),
                ValueRef::Integer(v) => Cell::Integer(v),
                ValueRef::Real(v) => Cell::Real(v),
                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Cell::Blob(b.to_vec()),
            };
            cells.push(cell);
        }
        out.push(cells);
    }
    drop(rows);
    let columns = match shape {
        Some(shape) => shape.columns,
        None => Shape::of(&statement).columns,
    };
    Ok(QueryOutput {
        columns,
        rows: out,
        warnings: Vec::new(),
        ..Default::default()
    })
}

/// The columns of a query's result, and which of them come back as booleans.
struct Shape {
    columns: Vec<String>,
    /// Whether each column is a plain reference to a BOOLEAN column.
    boolean: Vec<bool>,
}

impl Shape {
    fn of(statement: &rusqlite::Statement<'_>) -> Shape {
        Shape {
            columns: statement.column_names().map(str::to_owned).collect(),
            boolean: statement
                .columns()
                .map(|c| {
                    c.decl_type()
                        .is_some_and(|t| t.eq_ignore_ascii_case(BOOLEAN))
                })
                .collect(),
        }
    }
}

/// Errors from the user's SQL (unknown column, bad function use) are the caller's to fix.
fn sql_error(err: rusqlite::Error, limits: &EvalLimits) -> Error {
    if is_too_big(&err) {
        return limits.too_big();
    }
    match err {
        rusqlite::Error::SqliteFailure(code, _)
            if code.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            Error::internal("query interrupted")
        }
        rusqlite::Error::SqliteFailure(_, Some(message)) => {
            Error::invalid_sql(message.replace("__qg_t", "table #"))
        }
        other => Error::invalid_sql(other.to_string()),
    }
}

/// Whether SQLite refused a value over its length limit.
fn is_too_big(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(code, _) if code.code == rusqlite::ErrorCode::TooBig
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A cached query whose table was made again with other columns names the new ones
    /// (its first step compiles it again), with and without rows.
    #[test]
    fn a_cached_query_over_a_table_made_again_reads_its_columns_now() {
        let conn = Connection::open_in_memory().unwrap();
        let limits = EvalLimits::default();
        let sql = "SELECT * FROM t";
        conn.execute_batch("CREATE TABLE t (a, b, c BOOLEAN); INSERT INTO t VALUES (1, 2, 1)")
            .unwrap();
        let first = run_query(&conn, sql, 10, &limits).unwrap();
        assert_eq!(first.columns, ["a", "b", "c"]);
        assert_eq!(first.rows[0][2], Cell::Boolean(true));
        for rows in ["INSERT INTO t VALUES (1, 2)", ""] {
            conn.execute_batch(&format!(
                "DROP TABLE t; CREATE TABLE t (x BOOLEAN, y); {rows}"
            ))
            .unwrap();
            let again = run_query(&conn, sql, 10, &limits).unwrap();
            assert_eq!(again.columns, ["x", "y"], "{rows:?}");
            if !rows.is_empty() {
                assert_eq!(again.rows, [[Cell::Boolean(true), Cell::Integer(2)]]);
            }
        }
    }
}
