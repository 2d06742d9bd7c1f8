//! Audit: durable, tamper-evident records of every tool call, in JSON Lines files or in
//! PostgreSQL, behind one trait.
//!
//! - [`record`]: the [`AuditRecord`] (an `intent` before a side effect, an `outcome` per
//!   call), StackQL's decision strings and query classes.
//! - [`chain`]: the per-stream hash chain (sequence number, predecessor's SHA-256) and the
//!   canonical JSON it covers.
//! - [`anchor`]: the audit key (`audit.mac_key_file`) and the MACs of records and heads;
//!   [`head`]: a file stream's head, synced beside the files after every batch.
//! - [`sink`]: the [`AuditSink`] trait; a record is durable when `write` returns `Ok`.
//! - [`file`] (JSONL, fsync with group commit on a writer thread, rotation),
//!   [`postgres`] (the append-only `audit_events` table, batched inserts),
//!   [`partitions`] (its daily partitions and retention),
//!   [`memory`] (tests), [`deferred`] (opened at the first record: the CLI).
//! - `batch`: a writer's batch linked into the chain and its callers answered, shared by
//!   the file and PostgreSQL sinks.
//! - [`format`] (`audit.format`: `jsonl` or `otel`) and [`otel`] (OpenTelemetry's
//!   conventions, the OTLP sink and the OTLP copy of a durable sink).
//! - [`failure`]: `audit.failure_mode` and what a failed write does to the call.
//! - [`auditor`]: what the tool-call pipeline holds: prepare, write, apply the failure mode.
//! - [`redact`]: HMAC of SQL string literals.
//! - [`limits`]: every field's size limit, the SQL stored once, digests of what is cut.
//! - [`verify`], [`tail`] and [`query`]: `querygate audit verify`, `tail` and `query`;
//!   [`lines`]: how they read a file, one line at a time, whatever its size.
//!
//! This module knows nothing of MCP, HTTP or the engine: it takes primitive fields.

pub mod anchor;
pub mod auditor;
mod batch;
pub mod chain;
pub mod deferred;
pub mod export_stats;
pub mod failure;
pub mod file;
pub mod format;
mod group;
pub mod head;
pub mod limits;
pub mod lines;
pub mod location;
pub mod memory;
pub mod open;
pub mod otel;
pub mod partitions;
pub mod postgres;
pub mod query;
mod queue;
pub mod record;
pub mod redact;
pub mod settings;
pub mod sink;
pub mod tail;
pub mod verify;

pub use auditor::{AuditFailure, Auditor};
pub use failure::{FailureMode, OnFailure};
pub use format::Format;
pub use location::FileLocation;
pub use open::open;
pub use record::{AuditRecord, Decision, Outcome, Phase};
pub use settings::{AuditSettings, OtlpSettings, SinkSettings};
pub use sink::{AuditError, AuditSink, Receipt, WriteObserver};
