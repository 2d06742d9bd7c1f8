//! The embedded SQLite a statement is evaluated in: an in-memory database per statement, on
//! a connection kept in a pool between small statements, with no rows and only the tables
//! the next statement creates again (see `connection`). The async side sends commands
//! (create a table, load a response page, read a join column, run the final SQL) and
//! awaits the replies it needs.
//!
//! A small statement's commands run where they are sent, on the async thread, as a
//! synchronous step: loading up to [`worker::INLINE_BYTES`] of responses and running final
//! SQL for up to [`worker::INLINE_QUERY_TIME`] costs less than handing each command to
//! another thread and waking the caller with its reply. The first command past either moves
//! the statement to a thread of its own (one of a pool of reusable threads) for the rest of
//! its commands, so a large statement's decoding and SQL never hold up the async runtime;
//! final SQL stopped at the time limit runs again there from its start. Dropping the
//! [`Database`] interrupts SQL running on that thread and ends the statement.
//!
//! A database opened with evaluation slots (see `engine::slots`) runs each command that
//! does work (loading or scanning a page, running SQL) on its own thread in a slot, freed
//! when the command is done: the slots bound the SQLite work running beside the async
//! runtime. The sender waits for the slot before it hands such a command over, so a
//! statement whose pages wait for a slot fetches no more meanwhile; final SQL that moves
//! there after its time on the calling thread waits for its slot on its own thread. A
//! command run where it is sent needs no slot: the async runtime's threads bound it.
//!
//! Such a database also takes a bulk permit (see `engine::slots`) before it sends the page
//! that takes the response bytes sent past [`EvalLimits::INLINE_BYTES`], before that page's
//! slot; the statement's own thread holds it until the statement has ended there.

mod connection;
mod functions;
mod limits;
mod query;
mod tables;
mod threads;
mod worker;

pub(crate) use threads::SqliteThreads;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};

use bytes::Bytes;
use rusqlite::InterruptHandle;
use rusqlite::types::Value as SqlValue;
use tokio::sync::oneshot;

use super::error::{Error, Result};
use super::rows::{Loaded, RowLocator};
use super::slots::{EvalSlot, EvalSlots};
use super::types::QueryOutput;
use super::upstream::{AdmissionWait, BodyAdmission};

pub use self::limits::EvalLimits;
pub(crate) use self::query::near_word;
use self::worker::Worker;

type Reply<T> = oneshot::Sender<Result<T>>;

/// A command handed to a statement's own thread.
struct Job {
    command: Command,
    /// The slot it runs in, when the sender took one for it.
    slot: Option<EvalSlot>,
    /// The statement's bulk permit, once it has one: the thread keeps it until the
    /// statement ends there.
    bulk: Option<Arc<EvalSlot>>,
}

enum Command {
    /// Not answered: a failure fails the statement's next command that is.
    Create {
        table: String,
        columns: Vec<String>,
        booleans: Vec<String>,
        /// (column, wire name) of columns rows fill from another key.
        wire_names: Vec<(String, String)>,
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
    state: Mutex<State>,
    /// Where the commands run on the statement's own thread get their slots; `None`: no
    /// bound.
    slots: Option<Arc<dyn EvalSlots>>,
    /// The engine's threads, one of which takes the statement when it outgrows the caller's.
    threads: Arc<SqliteThreads>,
    /// Response bytes sent for scanning so far.
    sent: AtomicUsize,
    /// The bulk permit from `slots`, taken before the page that takes `sent` past
    /// [`EvalLimits::INLINE_BYTES`].
    bulk: tokio::sync::OnceCell<Arc<EvalSlot>>,
}

/// A page whose body would take the bytes sent past [`EvalLimits::INLINE_BYTES`] waits for
/// the statement's bulk permit before its body is read (or, when its request's last answer
/// was larger than that, before it is sent), so that a statement waiting for one holds no
/// page (the bytes are counted when the page is sent).
impl BodyAdmission for Database {
    fn admit(&self, bytes: u64) -> Option<AdmissionWait<'_>> {
        let slots = self.slots.as_deref()?;
        if self.bulk.initialized() {
            return None;
        }
        let sent = self.sent.load(Ordering::Relaxed) as u64;
        if sent.saturating_add(bytes) <= EvalLimits::INLINE_BYTES as u64 {
            return None;
        }
        Some(Box::pin(async move {
            self.take_bulk(slots).await;
        }))
    }

    fn large(&self, bytes: u64) -> bool {
        self.slots.is_some() && bytes > EvalLimits::INLINE_BYTES as u64
    }
}

/// Where a statement's commands run.
enum State {
    /// On the thread that sends them, as they are sent.
    Caller(Box<Worker>),
    /// On the statement's own thread.
    Own {
        commands: mpsc::Sender<Job>,
        /// Stops SQL running on that thread.
        interrupt: Option<InterruptHandle>,
    },
    /// Nowhere: the statement's thread could not be started (also the state left behind
    /// while the worker is moved out).
    Stopped,
}

impl Command {
    /// Whether it does work that needs a slot on the statement's own thread (all but
    /// creating a table).
    fn does_work(&self) -> bool {
        !matches!(self, Command::Create { .. })
    }

    /// The bytes of the response page it scans, if it scans one.
    fn body_len(&self) -> Option<usize> {
        match self {
            Command::Load { body, .. } | Command::Discover { body, .. } => Some(body.len()),
            _ => None,
        }
    }

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
        // A worker left in a poisoned lock may be halfway through a command: its connection
        // is closed, not kept.
        let poisoned = self.state.is_poisoned();
        let state = std::mem::replace(
            self.state.get_mut().unwrap_or_else(PoisonError::into_inner),
            State::Stopped,
        );
        match state {
            State::Caller(worker) if !poisoned => worker.end(),
            State::Own {
                commands,
                interrupt,
            } => {
                // Stops a long-running final query when the caller goes away. This runs
                // before the thread can see the statement end (the command channel closes
                // after it), so it never reaches the thread's next statement.
                if let Some(interrupt) = interrupt {
                    interrupt.interrupt();
                }
                drop(commands);
            }
            State::Caller(_) | State::Stopped => {}
        }
    }
}

/// A reply to a command, awaited later (loads are pipelined with fetching).
pub(crate) type Pending<T> = oneshot::Receiver<Result<T>>;

/// A load whose result is awaited later.
pub(crate) type PendingLoad = Pending<Loaded>;

/// The property names of a page's rows, and the scalars at the wanted paths.
pub(crate) type Discovered = (Vec<String>, Vec<Option<String>>);

/// The reply of `pending`.
pub(crate) async fn settled<T>(pending: Pending<T>) -> Result<T> {
    pending.await.map_err(|_| stopped())?
}

impl Database {
    /// Starts an empty in-memory database bounded by `limits`, its commands run on the
    /// calling thread until one is too large for it, then on its own thread, each in a slot
    /// from `slots` when given. A failure to open it is the reply to the first command that
    /// is answered. The statement's own thread, when it needs one, comes from `threads`.
    pub(crate) fn open(
        limits: EvalLimits,
        slots: Option<Arc<dyn EvalSlots>>,
        threads: &Arc<SqliteThreads>,
    ) -> Self {
        Database {
            state: Mutex::new(State::Caller(Box::new(Worker::begin(limits)))),
            slots,
            threads: Arc::clone(threads),
            sent: AtomicUsize::new(0),
            bulk: tokio::sync::OnceCell::new(),
        }
    }

    /// Sends the command `make` builds, first waiting for the statement's bulk permit when
    /// its page takes the statement past [`EvalLimits::INLINE_BYTES`], then for its slot when
    /// it will run on the statement's own thread.
    async fn send<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> Command,
    ) -> Result<oneshot::Receiver<Result<T>>> {
        let (reply, receiver) = oneshot::channel();
        let command = make(reply);
        let bulk = self.bulk_permit(&command).await;
        let slot = match &self.slots {
            Some(slots) if command.does_work() && self.runs_on_own_thread(&command)? => {
                Some(slots.acquire().await)
            }
            _ => None,
        };
        self.dispatch(command, slot, bulk)?;
        Ok(receiver)
    }

    /// The statement's bulk permit, waited for when `command`'s page takes the bytes sent
    /// past [`EvalLimits::INLINE_BYTES`] (pages sent at once wait for the same permit); `None`
    /// before that or without slots.
    async fn bulk_permit(&self, command: &Command) -> Option<Arc<EvalSlot>> {
        let slots = self.slots.as_ref()?;
        let Some(bytes) = command.body_len() else {
            return self.bulk.get().cloned();
        };
        let sent = self
            .sent
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if sent <= EvalLimits::INLINE_BYTES {
            return None;
        }
        Some(Arc::clone(self.take_bulk(slots.as_ref()).await))
    }

    /// The statement's bulk permit, waited for from `slots` the first time.
    async fn take_bulk(&self, slots: &dyn EvalSlots) -> &Arc<EvalSlot> {
        self.bulk
            .get_or_init(|| async { Arc::new(slots.acquire_bulk().await) })
            .await
    }

    /// Whether `command` will run on the statement's own thread: it runs there already,
    /// or the command is a page too large for the calling thread.
    fn runs_on_own_thread(&self, command: &Command) -> Result<bool> {
        let state = self.state.lock().map_err(|_| stopped())?;
        Ok(match &*state {
            State::Caller(worker) => !worker.takes_inline(command),
            State::Own { .. } | State::Stopped => true,
        })
    }

    /// Runs `command` on the calling thread, or hands it (with `slot`, if one was taken for
    /// it, and the statement's bulk permit, if it has one) to the statement's own thread,
    /// started for the first command too large for the calling one.
    fn dispatch(
        &self,
        command: Command,
        slot: Option<EvalSlot>,
        bulk: Option<Arc<EvalSlot>>,
    ) -> Result<()> {
        let mut state = self.state.lock().map_err(|_| stopped())?;
        let command = match &mut *state {
            State::Caller(worker) => {
                let Some(command) = worker.on_caller(command) else {
                    return Ok(());
                };
                move_to_own_thread(&mut state, self.slots.clone(), &self.threads)?;
                command
            }
            State::Own { .. } | State::Stopped => command,
        };
        match &*state {
            State::Own { commands, .. } => commands
                .send(Job {
                    command,
                    slot,
                    bulk,
                })
                .map_err(|_| stopped()),
            State::Caller(_) | State::Stopped => Err(stopped()),
        }
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T> {
        settled(self.send(make).await?).await
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
        self.create_table_with_wire_names(table, columns, booleans, Vec::new())
    }

    /// As [`create_table`](Self::create_table), with columns named otherwise than the keys
    /// rows fill them from (`wire_names`: column, wire name). The wire name also names the
    /// column in SQL (a generated column), unless it is a column of its own.
    pub(crate) fn create_table_with_wire_names(
        &self,
        table: &str,
        columns: Vec<String>,
        booleans: &[String],
        wire_names: Vec<(String, String)>,
    ) -> Result<()> {
        let command = Command::Create {
            table: table.to_owned(),
            columns,
            booleans: booleans.to_vec(),
            wire_names,
        };
        self.dispatch(command, None, None)
    }

    /// Queues one response page for loading (once it has its slot, if it needs one); the
    /// receiver yields the rows inserted and the scalars at the `wanted` paths (read in the
    /// same pass).
    pub(crate) async fn load(
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
        .await
    }

    /// Queues one page (once it has its slot, if it needs one) for reading the property
    /// names of its rows (for schemas that declare none) and the scalars at the `wanted`
    /// paths, in one pass.
    pub(crate) async fn discover_page(
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
        .await
    }

    /// The property names found in a page (for schemas that declare none).
    pub(crate) async fn discover(
        &self,
        body: Bytes,
        locator: Arc<RowLocator>,
    ) -> Result<Vec<String>> {
        let (names, _) = settled(self.discover_page(body, locator, Vec::new()).await?).await?;
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

/// Moves the worker of a statement whose commands ran on the calling thread to a thread of
/// its own, where its commands take their slots from `slots`; when that thread cannot
/// start, the statement is stopped.
fn move_to_own_thread(
    state: &mut State,
    slots: Option<Arc<dyn EvalSlots>>,
    threads: &Arc<SqliteThreads>,
) -> Result<()> {
    let State::Caller(worker) = std::mem::replace(state, State::Stopped) else {
        return Ok(());
    };
    let interrupt = worker.interrupt_handle();
    let (commands, receiver) = mpsc::channel::<Job>();
    threads
        .run(Box::new(move || worker.serve(receiver, slots.as_deref())))
        .map_err(|err| Error::internal(format!("cannot start the SQLite thread: {err}")))?;
    *state = State::Own {
        commands,
        interrupt,
    };
    Ok(())
}

/// The error of a command sent to a statement's database that has stopped.
fn stopped() -> Error {
    Error::internal("the statement's SQLite database has stopped")
}

fn sqlite_internal(err: rusqlite::Error) -> Error {
    Error::internal(format!("sqlite: {err}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::slots::EvalSlot;
    use crate::types::Cell;

    /// Whether the statement's commands still run on the calling thread.
    fn on_caller(db: &Database) -> bool {
        matches!(*db.state.lock().unwrap(), State::Caller(_))
    }

    /// A page of `rows` rows `{"a": i, "b": <text of `width` bytes>}`.
    fn page(rows: usize, width: usize) -> Bytes {
        let text = "x".repeat(width);
        let rows: Vec<String> = (0..rows)
            .map(|i| format!(r#"{{"a":{i},"b":"{text}"}}"#))
            .collect();
        Bytes::from(format!("[{}]", rows.join(",")))
    }

    async fn load(db: &Database, body: Bytes) -> u64 {
        let pending = db
            .load(
                "t",
                body,
                Arc::new(RowLocator::Auto),
                Vec::new(),
                Vec::new(),
            )
            .await
            .unwrap();
        settled(pending).await.unwrap().rows
    }

    fn with_table() -> Database {
        let db = Database::open(EvalLimits::default(), None, &Arc::default());
        db.create_table("t", vec!["a".to_owned(), "b".to_owned()], &[])
            .unwrap();
        db
    }

    #[tokio::test]
    async fn a_small_statement_runs_on_the_calling_thread() {
        let db = with_table();
        assert_eq!(load(&db, page(100, 10)).await, 100);
        let out = db
            .query("SELECT count(*), sum(a) FROM t".to_owned(), 10)
            .await
            .unwrap();
        assert_eq!(out.rows, [[Cell::Integer(100), Cell::Integer(4950)]]);
        assert!(on_caller(&db));
    }

    #[tokio::test]
    async fn a_page_past_the_inline_bytes_moves_the_statement_to_its_own_thread() {
        let db = with_table();
        let small = page(10, 10);
        assert_eq!(load(&db, small.clone()).await, 10);
        assert!(on_caller(&db));
        let rest = worker::INLINE_BYTES - small.len();
        let large = page(rest / 100 + 1, 100);
        assert!(large.len() > rest);
        let rows = load(&db, large).await;
        assert!(!on_caller(&db), "moved to its own thread");
        // The rows loaded before the move are there, and those after it.
        let out = db
            .query("SELECT count(*) FROM t".to_owned(), 10)
            .await
            .unwrap();
        assert_eq!(out.rows, [[Cell::Integer(10 + rows as i64)]]);
    }

    #[tokio::test]
    async fn sql_still_running_after_the_inline_time_runs_again_on_its_own_thread() {
        let db = with_table();
        let sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) \
                   SELECT count(*), max(x) FROM c";
        let out = db.query(sql.to_owned(), 10).await.unwrap();
        assert_eq!(
            out.rows,
            [[Cell::Integer(2_000_000), Cell::Integer(2_000_000)]]
        );
        assert!(!on_caller(&db), "ran again on its own thread");
    }

    /// Slots handed out one per permit added to `permits`, telling `asked` of each wait;
    /// bulk permits likewise from `bulk`, telling `bulk_asked`.
    #[derive(Debug)]
    struct CountedSlots {
        permits: Arc<tokio::sync::Semaphore>,
        asked: tokio::sync::mpsc::UnboundedSender<()>,
        bulk: Arc<tokio::sync::Semaphore>,
        bulk_asked: tokio::sync::mpsc::UnboundedSender<()>,
    }

    impl CountedSlots {
        /// Slots from `permits` and bulk permits from `bulk`, with the receivers of their
        /// waits.
        fn new(
            permits: &Arc<tokio::sync::Semaphore>,
            bulk: &Arc<tokio::sync::Semaphore>,
        ) -> (
            Self,
            tokio::sync::mpsc::UnboundedReceiver<()>,
            tokio::sync::mpsc::UnboundedReceiver<()>,
        ) {
            let (asked, waits) = tokio::sync::mpsc::unbounded_channel();
            let (bulk_asked, bulk_waits) = tokio::sync::mpsc::unbounded_channel();
            let slots = CountedSlots {
                permits: permits.clone(),
                asked,
                bulk: bulk.clone(),
                bulk_asked,
            };
            (slots, waits, bulk_waits)
        }
    }

    impl EvalSlots for CountedSlots {
        fn acquire(
            &self,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = EvalSlot> + Send + '_>> {
            Box::pin(async move {
                self.asked.send(()).unwrap();
                EvalSlot::new(self.permits.clone().acquire_owned().await.unwrap())
            })
        }

        fn acquire_bulk(
            &self,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = EvalSlot> + Send + '_>> {
            Box::pin(async move {
                self.bulk_asked.send(()).unwrap();
                EvalSlot::new(self.bulk.clone().acquire_owned().await.unwrap())
            })
        }
    }

    #[tokio::test]
    async fn a_statement_past_the_inline_bytes_holds_a_bulk_permit_until_it_ends() {
        let permits = Arc::new(tokio::sync::Semaphore::new(100));
        let bulk = Arc::new(tokio::sync::Semaphore::new(1));
        let (slots, mut waits, mut bulk_waits) = CountedSlots::new(&permits, &bulk);
        let db = Database::open(
            EvalLimits::default(),
            Some(Arc::new(slots)),
            &Arc::default(),
        );
        db.create_table("t", vec!["a".to_owned(), "b".to_owned()], &[])
            .unwrap();
        // A page the calling thread loads needs no permit.
        let first = load(&db, page(10, 10)).await;
        let large = page(worker::INLINE_BYTES / 100 + 1, 100);
        assert!(large.len() > EvalLimits::INLINE_BYTES);
        assert!(
            bulk_waits.try_recv().is_err(),
            "a permit was asked for too soon"
        );
        while waits.try_recv().is_ok() {}
        // The page that takes it past the inline bytes waits for the permit, before asking
        // for a slot.
        let held = bulk.clone().acquire_owned().await.unwrap();
        let second = {
            let sending = db.load(
                "t",
                large.clone(),
                Arc::new(RowLocator::Auto),
                Vec::new(),
                Vec::new(),
            );
            tokio::pin!(sending);
            tokio::select! {
                biased;
                _ = &mut sending => panic!("sent without a bulk permit"),
                asked = bulk_waits.recv() => asked.unwrap(),
            }
            assert!(
                waits.try_recv().is_err(),
                "a slot was taken while waiting for the permit"
            );
            drop(held);
            settled(sending.await.unwrap()).await.unwrap().rows
        };
        assert_eq!(bulk.available_permits(), 0, "the permit is held");
        // Later pages and SQL keep the permit they have.
        let third = load(&db, large).await;
        let out = db
            .query("SELECT count(*) FROM t".to_owned(), 10)
            .await
            .unwrap();
        assert_eq!(out.rows, [[Cell::Integer((first + second + third) as i64)]]);
        assert!(
            bulk_waits.try_recv().is_err(),
            "a second permit was asked for"
        );
        assert_eq!(bulk.available_permits(), 0, "the permit is held");
        // It comes back once the statement has ended on its thread.
        drop(db);
        let back = tokio::time::timeout(std::time::Duration::from_secs(30), bulk.acquire()).await;
        assert!(
            back.is_ok(),
            "the permit was not freed when the statement ended"
        );
    }

    #[tokio::test]
    async fn only_work_on_the_statements_own_thread_waits_for_a_slot() {
        let permits = Arc::new(tokio::sync::Semaphore::new(0));
        let bulk = Arc::new(tokio::sync::Semaphore::new(1));
        let (slots, mut waits, _bulk_waits) = CountedSlots::new(&permits, &bulk);
        let db = Database::open(
            EvalLimits::default(),
            Some(Arc::new(slots)),
            &Arc::default(),
        );
        db.create_table("t", vec!["a".to_owned(), "b".to_owned()], &[])
            .unwrap();
        // Small work runs on the calling thread without a slot.
        assert_eq!(load(&db, page(10, 10)).await, 10);
        assert!(
            waits.try_recv().is_err(),
            "a slot was asked for inline work"
        );
        // A large page goes to the statement's thread once it has a slot: sending it waits.
        let large = page(worker::INLINE_BYTES / 100 + 1, 100);
        let sending = db.load(
            "t",
            large,
            Arc::new(RowLocator::Auto),
            Vec::new(),
            Vec::new(),
        );
        tokio::pin!(sending);
        tokio::select! {
            biased;
            _ = &mut sending => panic!("sent without a slot"),
            asked = waits.recv() => asked.unwrap(),
        }
        assert!(on_caller(&db), "handed over without a slot");
        permits.add_permits(1);
        let loaded = settled(sending.await.unwrap()).await.unwrap();
        assert!(!on_caller(&db));
        assert!(loaded.rows > 0);
        // SQL on the statement's thread asks for a slot too: the one the load freed.
        let out = db
            .query("SELECT count(*) FROM t".to_owned(), 10)
            .await
            .unwrap();
        assert_eq!(out.rows, [[Cell::Integer(10 + loaded.rows as i64)]]);
        assert!(waits.try_recv().is_ok(), "the query asked for no slot");
    }

    #[tokio::test]
    async fn a_failed_table_is_the_reply_to_the_next_answered_command() {
        let db = Database::open(EvalLimits::default(), None, &Arc::default());
        // SQLite reserves names starting with `sqlite_`.
        db.create_table("sqlite_t", vec!["a".to_owned()], &[])
            .unwrap();
        let first = db.query("SELECT 1".to_owned(), 10).await.unwrap_err();
        assert!(first.message().contains("reserved"), "{first}");
        let next = db.query("SELECT 1".to_owned(), 10).await.unwrap_err();
        assert!(next.message().contains("failed earlier"), "{next}");
    }
}
