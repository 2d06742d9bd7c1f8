//! The side of a statement's database that runs its commands: its session on a pooled
//! connection, its tables, and the response bytes loaded so far. A worker starts on the
//! calling thread ([`Worker::on_caller`] runs a command there while the statement is small)
//! and moves to a thread of its own for the rest of the statement ([`Worker::serve`]).

use std::collections::HashMap;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use rusqlite::{Connection, InterruptHandle};

use super::connection::{POOL, Session};
use super::limits::EvalLimits;
use super::query::{Ran, run_bounded};
use super::tables::{self, Page, Table};
use super::{Command, Job, sqlite_internal};
use crate::error::{Error, ErrorKind, Result};
use crate::rows;
use crate::slots::{EvalSlot, EvalSlots};

/// Response bytes a statement loads on the calling thread, over all its pages: about
/// 0.3 ms of scanning and inserting. A page that would take it past this moves the
/// statement to a thread of its own (see [`Worker::on_caller`]).
pub(super) const INLINE_BYTES: usize = EvalLimits::INLINE_BYTES;

/// Longest the final SQL runs on the calling thread; SQL still running then is stopped and
/// run again, from the start, on the statement's own thread.
pub(super) const INLINE_QUERY_TIME: Duration = Duration::from_millis(1);

/// Where a command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// On the thread that sent it (an async thread): within [`INLINE_QUERY_TIME`].
    Caller,
    /// On the statement's own thread: within the statement's budget.
    Own,
}

/// A statement's database and the state of its commands.
pub(super) struct Worker {
    /// None once the statement's database has failed (its session ended).
    session: Option<Session>,
    tables: HashMap<String, Table>,
    /// Response bytes loaded so far.
    loaded: usize,
    limits: EvalLimits,
    /// Why the database failed, until a command that is answered is told.
    failure: Option<Error>,
    /// The statement's bulk permit, once a command brought it: freed when the statement
    /// has ended (after its session).
    bulk: Option<Arc<EvalSlot>>,
}

impl Worker {
    /// A worker on a pooled connection; a failure to get one is the reply to the first
    /// command that is answered.
    pub(super) fn begin(limits: EvalLimits) -> Worker {
        let (session, failure) = match Session::begin(&POOL, &limits) {
            Ok(session) => (Some(session), None),
            Err(err) => (None, Some(sqlite_internal(err))),
        };
        Worker {
            session,
            tables: HashMap::new(),
            loaded: 0,
            limits,
            failure,
            bulk: None,
        }
    }

    /// The handle that interrupts SQL running on this worker's connection.
    pub(super) fn interrupt_handle(&self) -> Option<InterruptHandle> {
        self.session
            .as_ref()
            .map(|session| session.connection().get_interrupt_handle())
    }

    /// Runs `command` on the calling thread, unless it is too large for it: a page that
    /// takes the statement past [`INLINE_BYTES`], or final SQL still running after
    /// [`INLINE_QUERY_TIME`]. Such a command is handed back, unanswered, for the statement's
    /// own thread.
    pub(super) fn on_caller(&mut self, command: Command) -> Option<Command> {
        if !self.takes_inline(&command) {
            return Some(command);
        }
        self.run(command, Place::Caller)
    }

    /// Whether `command` runs on the calling thread (for final SQL: starts there): all but
    /// a page that takes the statement past [`INLINE_BYTES`].
    pub(super) fn takes_inline(&self, command: &Command) -> bool {
        command
            .body_len()
            .is_none_or(|bytes| self.loaded.saturating_add(bytes) <= INLINE_BYTES)
    }

    /// Runs the commands that come through `commands` on this (the statement's own) thread,
    /// each that does work in its slot (one from `slots`, waited for here, when the sender
    /// took none for it), then ends the statement. Past [`EvalLimits::BULK_BYTES`] of
    /// responses the thread's priority is lowered (as `limits.bulk_priority` says) until
    /// the statement ends.
    pub(super) fn serve(mut self, commands: mpsc::Receiver<Job>, slots: Option<&dyn EvalSlots>) {
        while let Ok(Job {
            command,
            slot,
            bulk,
        }) = commands.recv()
        {
            if self.bulk.is_none() {
                self.bulk = bulk;
            }
            // Nobody waits for this reply (the statement was dropped: cancelled or timed
            // out): skip the work instead of loading pages nobody reads.
            if command.abandoned() {
                continue;
            }
            let _slot = match (slot, slots) {
                (None, Some(slots)) if command.does_work() => {
                    let slot = futures::executor::block_on(slots.acquire());
                    // The statement may have been dropped while this waited.
                    if command.abandoned() {
                        continue;
                    }
                    Some(slot)
                }
                (slot, _) => slot,
            };
            if let Some(bytes) = command.body_len()
                && self.loaded.saturating_add(bytes) >= EvalLimits::BULK_BYTES
            {
                crate::thread_priority::lower(self.limits.bulk_priority);
            }
            // Final SQL runs to its end here: nothing comes back.
            let _ = self.run(command, Place::Own);
        }
        self.end();
    }

    /// Ends the statement: its session goes back to the pool (see `connection`), then its
    /// bulk permit, if it has one, is freed.
    pub(super) fn end(self) {
        if let Some(session) = self.session {
            session.end(self.loaded);
        }
        drop(self.bulk);
    }

    /// Runs `command` at `place`; final SQL stopped at the end of the calling thread's time
    /// is handed back.
    fn run(&mut self, command: Command, place: Place) -> Option<Command> {
        let Some(session) = self.session.as_mut() else {
            self.refuse(command);
            return None;
        };
        match command {
            Command::Create {
                table,
                columns,
                booleans,
                wire_names,
            } => {
                let created = tables::create(
                    session,
                    &mut self.tables,
                    table,
                    columns,
                    &booleans,
                    &wire_names,
                );
                if let Err(err) = created {
                    // The statement cannot go on: its next answered command gets the error.
                    self.fail(err);
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
                self.loaded = self.loaded.saturating_add(body.len());
                let page = Page {
                    body: &body,
                    locator: &locator,
                    wanted: &wanted,
                };
                let loaded = entered(session).and_then(|conn| {
                    tables::load(conn, &self.tables, &table, page, &fixed, &self.limits)
                });
                let _ = reply.send(loaded);
            }
            Command::Discover {
                body,
                locator,
                wanted,
                reply,
            } => {
                self.loaded = self.loaded.saturating_add(body.len());
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
                let values = entered(session)
                    .and_then(|conn| tables::distinct(conn, &self.tables, &table, &column));
                let _ = reply.send(values);
            }
            Command::Query {
                sql,
                max_rows,
                reply,
            } => {
                let slice = (place == Place::Caller).then_some(INLINE_QUERY_TIME);
                let ran = entered(session)
                    .and_then(|conn| run_bounded(conn, &sql, max_rows, &self.limits, slice));
                let output = match ran {
                    Ok(Ran::Done(output)) => Ok(output),
                    Ok(Ran::Unfinished) => {
                        return Some(Command::Query {
                            sql,
                            max_rows,
                            reply,
                        });
                    }
                    Err(err) => Err(err),
                };
                let _ = reply.send(output);
            }
        }
        None
    }

    /// The database cannot go on: its session ends (a failed one is closed) and `err` is
    /// the reply to the next command that is answered.
    fn fail(&mut self, err: Error) {
        if let Some(session) = self.session.take() {
            session.end(self.loaded);
        }
        self.failure = Some(err);
    }

    /// Answers `command` of a failed database: the first answered command with the
    /// failure, any after it with a note that the database failed earlier.
    fn refuse(&mut self, command: Command) {
        let err = self
            .failure
            .take()
            .unwrap_or_else(|| Error::internal("the statement's SQLite database failed earlier"));
        match command {
            Command::Create { .. } => self.failure = Some(err),
            Command::Load { reply, .. } => drop(reply.send(Err(err))),
            Command::Discover { reply, .. } => drop(reply.send(Err(err))),
            Command::Distinct { reply, .. } => drop(reply.send(Err(err))),
            Command::Query { reply, .. } => drop(reply.send(Err(err))),
        }
    }
}

/// The session's connection inside the statement's transaction.
fn entered(session: &mut Session) -> Result<&mut Connection> {
    session.enter().map_err(sqlite_internal)
}
