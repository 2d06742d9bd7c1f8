//! # querygate
//!
//! SQL over cloud and SaaS REST APIs, described by StackQL provider documents, for AI agents
//! and people. This crate is the library; `src/main.rs` is a thin CLI over it.
//!
//! ## Architecture map
//!
//! ```text
//! main.rs ─ cli ─┬─ config   (YAML file + QUERYGATE_* env overrides → typed, validated Config)
//!                ├─ mismatch (serde's "expected u64" said as what a value must be)
//!                ├─ app      (composition root: engine, tenants, MCP handler, HTTP stage; run)
//!                ├─ http     (router composer, tower-http layers, accept loop, TLS)
//!                ├─ auth     (Principal from mTLS or JWT; tenants from identity)
//!                ├─ shutdown (SIGINT / SIGTERM)
//!                ├─ tenant   (Principal → tenant → engine::ExecContext: allowlist, credentials)
//!                ├─ mcp      (serve / stdio: the MCP surface over the engine facade)
//!                ├─ policy   (pure: modes, query classes, decide(mode, class))
//!                ├─ governance (pure: read_methods, pinned_parameters over planned requests)
//!                ├─ cedar    (tenants' Cedar policies: schema, load + validate, reload, decide)
//!                ├─ approval (sealed approval states, key ring, store of redeemed ids)
//!                ├─ code     (stable error codes of tool errors)
//!                ├─ db       (PostgreSQL pool from `database:`, migrations/ embedded, `migrate`)
//!                ├─ audit    (records of every tool call: JSONL files or PostgreSQL, hash-chained)
//!                ├─ telemetry (Prometheus /metrics, log format, OpenTelemetry traces over OTLP)
//!                ├─ quota    (calls per window by query class, per tenant and principal)
//!                ├─ clock    (the injected time source of duration-driven behaviour; tests step it)
//!                ├─ digest   (SHA-256 digests and random ids as lower-case hex)
//!                ├─ safe_text (untrusted text made safe to print: control characters escaped)
//!                ├─ concurrency (documentation: every thread, pool, blocking hop and priority change)
//!                └─ engine   (re-export of the querygate-engine crate, crates/engine: the facade,
//!                             Engine + the types it re-exports; also thread_priority, bulk
//!                             work's threads lowering their own OS priority, and client_tls,
//!                             the TLS settings of outbound HTTPS clients)
//!
//! http/
//!   mod.rs        router(): /healthz, RFC 9728 metadata and /mcp behind the HTTP-level
//!                 middleware (request id, sensitive headers, trace, timeout, concurrency), in
//!                 one place
//!   server        accept loop on hyper: a task per connection, connection cap, TLS handshake
//!                 and header-read timeout per connection, the client chain into extensions
//!   tls           rustls acceptor (ring, TLS 1.2+), certificate reload, client CA (mTLS)
//!   limits        per-tenant request rate and in-flight cap (429)
//!   body          body-read timeout (408), JSON-RPC 400s for bodies rmcp cannot parse
//!   mcp           rmcp's streamable HTTP at /mcp, stateless (no sessions), Host/Origin checks
//!
//! auth/
//!   mod.rs        Principal, Authenticator, AuthLayer (401/403 before any JSON-RPC is read)
//!   mtls          verified client certificate → identity (URI SAN, DNS SAN, CN) → tenant
//!   jwt           bearer tokens: issuers, JWKS cache (single flight, floor) or PEM keys
//!   metadata      RFC 9728 protected resource metadata
//!
//! mcp/
//!   stdio         newline-delimited JSON-RPC; bad frames answered and the session goes on
//!   handler       rmcp ServerHandler: tools, prompts, resources, instructions
//!   elicit        approval prompts as MCP elicitation (the pipeline's Approver over rmcp)
//!   gatekeeper    the gate's rules (plan and class, the mode's verdict, pinned parameters,
//!                 unattended reads) for bind, the gate, the validate tools, policy explain
//!   pipeline/     the tool-call pipeline every call passes (HTTP, stdio, `querygate query`
//!                 and `registry pull`): prepare (tenant, mode, arguments and SQL parsed
//!                 once, class) → bind (the statement's upstream requests, planned) → audit
//!                 (outcome record) → mode gate (refusals, approvals) → quota → cache →
//!                 admission (evaluation slots) → intent (write-ahead record of side
//!                 effects) → call timeout → cancel → dispatch; each step holds only what it
//!                 uses, handed out once by Pipeline::build
//!   tools/        the 17 tools, one ToolSpec each; they get their arguments typed and
//!                 ToolServices (what tools use of the server), and reach the engine only
//!                 via its facade
//!   render        markdown tables / key-value blocks or compact JSON of structured results
//!   content       content/ (descriptions, instructions, prompts, resources) embedded at build
//!   library/      the query library: embedded snapshot, optional remote index, search, render
//!
//! crates/engine/src/ (the querygate-engine crate; Cargo enforces that it uses none of the above)
//!   lib.rs        facade: Engine, ExecContext, QueryOutput, discovery types. Nothing else is
//!                 public but thread_priority and client_tls (and, with the test-support
//!                 feature, the helpers tests use). No module imports from it.
//!   config        EngineConfig and its parts (per-provider settings, upstream limits)
//!   state         the state every call shares (Inner) and opening providers/resources
//!   registry      local registry folder (src/<provider>/<version>/…): providers, versions
//!   remote/       remote registry: index (list), bounded download, checked tar.gz unpacking,
//!                 validated all-or-nothing install into the local registry (pull)
//!   document/     provider documents: YAML loading, LRU cache, $ref / JSON pointers, the model
//!                 (services → resources → methods → parameters, response shape, columns)
//!   sql/          statement parsing (sqlparser + our SHOW/DESCRIBE/EXEC/REGISTRY), finding
//!                 provider.service.resource tables anywhere and rewriting them to local tables
//!   plan          per table occurrence: params from WHERE/ON, method choice, fan-out, join order
//!   select        runs a query: table loads in waves, pages into SQLite, then the SQL
//!   mutate        INSERT/UPDATE/REPLACE/DELETE and EXEC: method choice, params vs typed body
//!   credentials/  per-tenant stores (dotenv file + process env for default), token cache
//!   credential_report  the reload report (status, SHA-256 change detection)
//!   reload        reload_credentials: re-source → drop derived auth state → report
//!   source_cache  the credential-source summaries of `server_info`, kept per tenant
//!   identity/     cloud identity: config.auth → AuthParts; AWS, Google, Azure chains, tokens
//!   upstream/     reqwest calls: URL building, applying AuthParts, pagination, read retries,
//!                 typed HTTP errors; one Outgoing value per request sent
//!   rows          response bytes → rows, decoded straight into SQLite binds (no Value tree)
//!   eval/         embedded SQLite on a dedicated thread per query; StackQL's SQL functions
//!   discovery     providers, services, resources, methods, columns, method contracts
//!   effect/       what a method does upstream (read, write, delete, other) and the evidence
//!   requests      the planned-request types (PlannedRequest, PlannedParam, ParamValues)
//!   statement_requests  what a statement would send, planned without sending (for the gate)
//!   read_plan     what a held SELECT would send, as its approver sees it and as it is bound
//!   preview       a write's requests as an approver sees them, secrets masked, size bounded
//!   request_body  JSON request bodies from a statement's values (base, default, typed fields)
//!   operation     `/*+ AWAIT */`: polling the long-running operation a write or EXEC starts
//!   pushdown      OData `$filter` / `$orderby` / `$top` push-down of a single-table SELECT
//!   views         resource views (`config.views.select`): run, described and listed
//!   transform     a method's `response.transform`, run before rows are read
//!   template/     Go `text/template` as StackQL's response transforms use it
//!   xml/          XML bodies: any-sdk's tree, schema-driven rows, mxj maps, AWS error bodies
//!   inline        planning on the calling thread when models and documents are cached
//!   slots         evaluation slots bounding a statement's local CPU and memory work
//!   observe       the upstream-request observer the composition root hands in (metrics)
//!   lock          the provider lock (`providers.lock`): versions and documents' SHA-256
//!   types         the facade's types: results, discovery records, ExecContext
//!   error         the engine's one error type: a closed ErrorKind, a message, the status
//! ```
//!
//! ## Dependency rules
//!
//! Arrows point down only: `cli → app → http → auth, mcp → approval, policy, config, tenant →
//! engine`. `auth` reads `config`, `clock` and `audit` (to record refused credentials; `tenant`
//! re-exports its `Principal`); `policy` does no I/O. `clock` is a leaf: the behaviours
//! `src/clock.rs` lists (the JWKS refetch floor, request rates, approval lifetimes, the result
//! cache's TTL, `/readyz` reuse) read the time from the clock the composition root hands them (`AppBuilder::clock`); the rest (timeouts,
//! rotation, the verified-token cache) read the system clock. The engine knows nothing about MCP, HTTP
//! serving, authentication or audit; the layers above it (the MCP surface, the tool-call
//! pipeline with its mode gate) use only what `engine` re-exports, and none parses SQL a
//! second time. The engine being a crate of its own (`crates/engine`), Cargo holds it to
//! that: it has no dependency on this crate or on the crates of MCP, HTTP serving or audit.
//! Inside the engine no two modules import each other, directly or round a circle, and none
//! imports from its `lib.rs`: `statement_requests` calls `select` and `mutate`, which both
//! make the leaf types of `requests`; `identity` uses `upstream` (token requests), never the
//! reverse. Every engine call
//! takes an [`engine::ExecContext`] built for one tenant: the tenant's provider allowlist and
//! credential source travel with the call, never through globals.

pub mod app;
pub mod approval;
pub mod audit;
pub mod auth;
pub mod cedar;
pub mod cli;
pub use querygate_engine::client_tls;
pub mod clock;
pub mod code;
pub mod concurrency;
pub mod config;
pub mod db;
pub mod digest;
pub use querygate_engine as engine;
pub mod governance;
pub mod http;
pub mod mcp;
mod mismatch;
pub mod policy;
pub mod quota;
pub mod safe_text;
pub mod shutdown;
pub mod tasks;
pub mod telemetry;
pub mod tenant;
pub use querygate_engine::thread_priority;
