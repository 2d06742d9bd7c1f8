//! The embedded SQLite a statement is evaluated in: one in-memory database per statement,
//! owned by a dedicated thread (one of a pool of reusable threads) so decoding and SQL never
//! block the async runtime. The async side sends commands (create a table, load a response
//! page, read a join column, run the final SQL) and awaits replies; dropping the
//! [`Database`] interrupts a running query, closes the connection and frees the thread.

mod functions;
mod limits;
mod threads;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc;

use bytes::Bytes;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, InterruptHandle};
use tokio::sync::oneshot;

use super::error::{Error, ErrorKind, Result};
use super::rows::{self, ColumnBinder, Loaded, RowLocator, RowWriter};
use super::types::{Cell, QueryOutput};

use self::limits::Budget;
pub use self::limits::EvalLimits;

type Reply<T> = oneshot::Sender<Result<T>>;

enum Command {
    Create {
        table: String,
        columns: Vec<String>,
        booleans: Vec<String>,
        reply: Reply<()>,
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
    interrupt: Arc<InterruptHandle>,
}

impl Command {
    /// Whether the caller stopped waiting for the reply.
    fn abandoned(&self) -> bool {
        match self {
            Command::Create { reply, .. } => reply.is_closed(),
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
        // Stops a long-running final query when the caller goes away.
        self.interrupt.interrupt();
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
    /// Opens a fresh in-memory database on its own thread, bounded by `limits`.
    pub(crate) async fn open(limits: EvalLimits) -> Result<Self> {
        let (commands, receiver) = mpsc::channel::<Command>();
        let (ready, ready_rx) = oneshot::channel();
        threads::run(Box::new(move || worker(receiver, ready, limits)))
            .map_err(|err| Error::internal(format!("cannot start the SQLite thread: {err}")))?;
        let interrupt = ready_rx
            .await
            .map_err(|_| Error::internal("the SQLite thread stopped during start-up"))??;
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

    /// Creates a table with these columns (no declared types: values keep the type they
    /// were bound with), those in `booleans` declared BOOLEAN.
    pub(crate) async fn create_table(
        &self,
        table: &str,
        columns: Vec<String>,
        booleans: &[String],
    ) -> Result<()> {
        let table = table.to_owned();
        let booleans = booleans.to_vec();
        self.call(|reply| Command::Create {
            table,
            columns,
            booleans,
            reply,
        })
        .await
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
/// priority is lowered (once) by `limits.bulk_nice`.
fn bulk_after(loaded: usize, more: usize, limits: &EvalLimits) -> usize {
    let loaded = loaded.saturating_add(more);
    if loaded >= EvalLimits::BULK_BYTES {
        crate::thread_priority::lower(limits.bulk_nice);
    }
    loaded
}

fn worker(
    commands: mpsc::Receiver<Command>,
    ready: oneshot::Sender<Result<Arc<InterruptHandle>>>,
    limits: EvalLimits,
) {
    let mut conn = match open_connection(&limits) {
        Ok(conn) => conn,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    if ready
        .send(Ok(Arc::new(conn.get_interrupt_handle())))
        .is_err()
    {
        return;
    }
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
                reply,
            } => {
                let _ = reply.send(create(&conn, &mut tables, table, columns, &booleans));
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
                let _ = reply.send(load(&conn, &tables, &table, page, &fixed, &limits));
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
                let _ = reply.send(distinct(&conn, &tables, &table, &column));
            }
            Command::Query {
                sql,
                max_rows,
                reply,
            } => {
                let _ = reply.send(run_bounded(&mut conn, &sql, max_rows, &limits));
            }
        }
    }
}

fn open_connection(limits: &EvalLimits) -> Result<Connection> {
    let conn = Connection::open_in_memory().map_err(sqlite_internal)?;
    limits.apply(&conn).map_err(sqlite_internal)?;
    functions::register(&conn).map_err(sqlite_internal)?;
    // One transaction for the whole statement: loads are cheap and nothing is persisted.
    conn.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; BEGIN;")
        .map_err(sqlite_internal)?;
    Ok(conn)
}

fn sqlite_internal(err: rusqlite::Error) -> Error {
    Error::internal(format!("sqlite: {err}"))
}

/// The declared type of columns the provider document types as boolean.
const BOOLEAN: &str = "BOOLEAN";

fn contains_ci(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn create(
    conn: &Connection,
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
    conn.execute_batch(&format!(
        "CREATE TABLE {} ({})",
        quote_ident(&table),
        defs.join(", ")
    ))
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
    let mut statement = conn.prepare(sql).map_err(sql_error)?;
    if !statement.readonly() {
        return Err(Error::unsupported(
            "only read-only SQL runs against fetched rows",
        ));
    }
    let columns: Vec<String> = statement.column_names().map(str::to_owned).collect();
    // Result columns that are a plain reference to a BOOLEAN column come back as booleans.
    let boolean: Vec<bool> = statement
        .columns()
        .map(|c| {
            c.decl_type()
                .is_some_and(|t| t.eq_ignore_ascii_case(BOOLEAN))
        })
        .collect();
    let width = columns.len();
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
        let mut cells = Vec::with_capacity(width);
        for (i, is_boolean) in boolean.iter().enumerate() {
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
    Ok(QueryOutput {
        columns,
        rows: out,
        warnings: Vec::new(),
        ..Default::default()
    })
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
