//! Every thread, thread pool, blocking hop and priority change of the server, in one place:
//! what each is for and the measurement that justified it. Nothing here is code; each entry
//! names the module that owns the machinery. No pool is a global: each belongs to the value
//! that uses it and ends with it.
//!
//! ## Threads
//!
//! | what | owner | how many | why (figure) |
//! |---|---|---|---|
//! | tokio async workers | `main.rs` (`new_multi_thread`) | one per core | serve HTTP, MCP and the pipeline; small calls run all their work here (below) |
//! | tokio blocking pool | tokio | on demand | document reads and model builds that `engine::inline` refused on a worker (planning, `server_info`'s credential report, mutation planning, registry pulls, the readiness probe's file checks, certificate reloads, opening an audit sink, the last trace export at exit) |
//! | SQLite threads (`querygate-sqlite`) | the engine (`engine::eval::threads::SqliteThreads`, one per [`Engine`](crate::engine::Engine)) | one per statement that outgrew its caller's thread; up to 16 kept waiting | starting an OS thread cost about as much as a small statement's SQLite work (`2e90116`); a waiting thread ends when the engine is dropped |
//! | render threads (`querygate-render-N`) | the MCP server (`mcp::offload::RenderPool`, one per server, held by the dispatch step and the tools) | half the cores, at least 1, started on first use | results of 2,048 values or more become JSON and text off the async workers; long-lived threads keep one malloc arena each, where tokio's blocking pool spread large results over an arena per short-lived thread (peak RSS of 64 concurrent 10,000-row calls 137 → 87 MiB, `dfb4321`) |
//! | audit file writer | the file sink (`audit::file`) | one per open sink | owns the JSONL file: appends each batch in one write and one `fdatasync` (group commit, below) |
//! | PostgreSQL audit writer | the PostgreSQL sink (`audit::postgres`), a tokio task | one per open sink | owns the stream's hash chain: one `INSERT` per batch |
//! | OpenTelemetry exporter | `telemetry` | the SDK's batch exporter | spans to the collector in batches; flushed on a blocking thread at exit |
//!
//! ## Work that moves off the async workers, and when
//!
//! - **Planning** (`engine::select::plan`, `engine::inline`): on the calling worker when every
//!   document and model it needs is cached and fresh, else on the blocking pool. A hop costs two
//!   thread switches, more than planning from cache (100-row select at 8 clients: 9.7 → 7.1
//!   thread switches per call, 1,841–1,915 → 1,993–2,026 req/s, `eb38ea8`).
//! - **SQLite work** (`engine::eval`): a small statement's database lives on the calling worker
//!   (up to 128 KiB of responses and 1 ms of final SQL); past either it moves to a SQLite thread,
//!   the final SQL stopped at 1 ms running again there (100-row select at 8 clients: 13.1 → 0.3
//!   thread switches and 413 → 321 µs CPU per call, `1e618b0`).
//! - **Rendering** (`mcp::offload`): results under 2,048 values are rendered where they are (the
//!   hop costs more), larger ones on a render thread.
//! - **Sending a large response** (`http::response_hold`): rmcp serializes a result on the worker
//!   that polls the request; for 256 KiB or more that poll runs inside
//!   [`tokio::task::block_in_place`], so the worker's queue moves to another thread meanwhile
//!   (`ef2d259`: a flooding tenant's large results no longer stall small calls queued on the same
//!   worker).
//!
//! ## Priorities
//!
//! [`thread_priority`](crate::thread_priority): bulk work — a render thread's job, the SQLite
//! thread of a statement that loads many rows, the `block_in_place` poll of a large response —
//! lowers its own thread's priority (`limits.bulk_work_priority`: Linux `SCHED_IDLE` by default,
//! or a nice value), so that on a busy machine the threads serving small calls get the cores
//! first; a pooled thread raises it again before its next job, or ends when it may not
//! (`3fe117c`: a small call's thread takes the core from idle-class bulk work at once, measured
//! by `cargo bench --bench admission`).
//!
//! ## Admission
//!
//! `mcp::pipeline::admission`: a statement holds an evaluation slot (its tenant's share and one of
//! the global `limits.max_concurrent_evaluations`) only while it does local work — planning,
//! documents, SQLite — never while it waits for an upstream page (`7796ee1`). Slots bound CPU; the
//! memory of large statements, which keep their loaded pages while they wait for the next, is
//! bounded by bulk permits (`limits.max_bulk_statements`, taken past 128 KiB of responses and
//! held to the statement's end; 64 concurrent 10,000-row calls under 150 MiB,
//! `cargo bench --bench admission`). The permit is waited for with the body of the page that
//! needs it still unread, or before a request whose last answer needed it is sent
//! (`upstream::admission`): read, that page and its connection's read buffer cost about
//! 1.3 MiB per waiting statement (heaptrack, the peer bench's 64 concurrent 10,000-row calls:
//! 171 → 77 MiB peak, `9c502d9`, `c97387b`); rendered bytes in flight are bounded apart
//! (`limits.max_response_bytes_in_flight`).
//!
//! ## Group commit (audit)
//!
//! `audit::group`, shared by both sinks: the writer takes every record queued, writes them in one
//! `fdatasync` (file) or one `INSERT` (PostgreSQL) and answers them all. When the last commit
//! covered several records it waits for the callers the last two commits released, instead of
//! cutting a batch of half of them, but never longer than a commit takes (a moving average of
//! the last commits, capped at 1 ms; no arrival for a quarter of that, at most 100 µs, ends the
//! wait); a lone caller never waits. On a slow disk (milliseconds per `fdatasync`) that is the
//! 1 ms of before (64 strict file writers: 13,229 records/s at 220 `fdatasync`/s, about 60
//! records per fsync, was about 43, `185cd84`). On a fast one with the CPU the limit, waiting
//! longer than a commit made the CPU's work and the disk's alternate instead of overlap: one
//! core, 8 clients, ~0.1 ms of CPU per call and ~0.25 ms per `fdatasync` gave a cycle of
//! ~1.1 ms per 8 calls (`server_info` at c=8: 7,121 req/s, `peers-20261202-1653`); a caller
//! that comes back later than a commit takes now goes with the next commit, which the disk
//! is then busy with while the CPU works.
//!
//! ## Allocator
//!
//! `main.rs`: mimalloc v2 as the global allocator, built to commit memory as it is used
//! (`.cargo/config.toml`): `server_info` CPU per call 59–63 → 46–47 µs, 100-row select 898 →
//! 836–847 µs (`a2a59a8`); 64 concurrent 10,000-row calls peak at 140 MiB, 264 MiB with v3's
//! defaults (`ea00a2f`).
