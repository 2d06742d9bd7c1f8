//! The command line: `querygate query`, `providers`, `registry`, `serve`, `stdio`, `migrate`,
//! `audit` and `policy`.

mod approvals_cli;
mod approve;
mod audit_maintain;
mod audit_query;
mod audit_table;
mod call;
mod policy;
mod registry_lock;

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{Config, Sources};
use crate::engine::{Cell, QueryOutput};

/// SQL over cloud and SaaS APIs.
#[derive(Debug, Parser)]
#[command(name = "querygate", version, about)]
pub struct Cli {
    /// YAML configuration file (also QUERYGATE_CONFIG).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs one SQL statement and prints the result.
    Query {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Approve a write that the default tenant's mode holds for approval (you are the
        /// person approving it); without it you are asked at a terminal, and refused
        /// elsewhere.
        #[arg(long)]
        yes: bool,
        /// Run nothing: print what the gate decides for the default tenant's local caller
        /// and, per upstream request, its effect and the evidence for it (as
        /// `querygate policy explain` does).
        #[arg(long, conflicts_with = "yes")]
        explain: bool,
        /// The statement, e.g. "SELECT name FROM github.repos.repos WHERE org = 'acme'".
        sql: String,
    },
    /// Lists installed providers and their versions.
    Providers {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
    },
    /// Serves MCP over streamable HTTP at `http://<server.listen>/mcp` (stateless).
    Serve {
        /// Listen address, overriding `server.listen` (e.g. 127.0.0.1:0 for any free port).
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
    },
    /// Serves one MCP session on stdin/stdout (newline-delimited JSON-RPC).
    Stdio,
    /// Applies the pending schema migrations to the database of `database.url`.
    Migrate,
    /// Checks or shows the audit records.
    Audit {
        /// What to do with the audit records.
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Lists, shows and decides out-of-band approvals in the database (`approval.store:
    /// postgres`), as the local operator (recorded as `cli:<os user>`).
    Approvals {
        /// What to do.
        #[command(subcommand)]
        action: ApprovalsAction,
    },
    /// Checks Cedar policy files, or explains what a tenant's policies decide about a
    /// statement.
    Policy {
        /// What to do.
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Lists or pulls providers of the remote registry (`registry.url`).
    Registry {
        /// What to do with the remote registry.
        #[command(subcommand)]
        action: RegistryAction,
    },
}

/// `querygate approvals` subcommands.
#[derive(Debug, Subcommand)]
pub enum ApprovalsAction {
    /// Lists a tenant's approvals, newest first (JSON lines).
    List {
        /// The tenant.
        #[arg(long, default_value = "default")]
        tenant: String,
    },
    /// Shows one approval (JSON): the call, its plan, its state and decision.
    Show {
        /// The approval's id.
        id: String,
        /// Its tenant.
        #[arg(long, default_value = "default")]
        tenant: String,
    },
    /// Approves a pending approval: the call's next repetition runs it once.
    Approve {
        /// The approval's id.
        id: String,
        /// Its tenant.
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Why (recorded in the audit).
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Denies a pending approval: the call's next repetition is refused with the reason.
    Deny {
        /// The approval's id.
        id: String,
        /// Its tenant.
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Why (shown to the caller, recorded in the audit).
        #[arg(long, default_value = "")]
        reason: String,
    },
}

/// `querygate policy` subcommands.
#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Parses Cedar policy files (or folders of `*.cedar` files) and validates them against
    /// querygate's schema; prints each problem as `file:line:column: message` and exits 1
    /// when there is one. `--schema` prints the schema instead.
    Check {
        /// Print querygate's Cedar schema and exit.
        #[arg(long)]
        schema: bool,
        /// Policy files or folders.
        #[arg(required_unless_present = "schema")]
        files: Vec<PathBuf>,
    },
    /// Plans a statement as a call of the tenant would (nothing is sent upstream) and
    /// prints the gate's decision and which Cedar policies allowed or denied each request,
    /// and why. Exits 0 when the statement would run (or be asked for approval), 1 when it
    /// would be refused.
    Explain {
        /// The tenant.
        #[arg(long, default_value = "default")]
        tenant: String,
        /// The caller's subject: a token's `sub` (with `--issuer`), a certificate identity
        /// (`uri:…`, `dns:…`, `cn:…`) or `local`.
        #[arg(long, default_value = "local")]
        subject: String,
        /// The caller's JWT issuer (the caller is then a JWT principal,
        /// `jwt:<issuer>#<subject>` to policies).
        #[arg(long)]
        issuer: Option<String>,
        /// A group of the caller's token (repeat for several; needs `--issuer`: the group is
        /// `jwt:<issuer>#<group>` to policies).
        #[arg(long = "group", value_name = "GROUP", requires = "issuer")]
        groups: Vec<String>,
        /// The statement.
        sql: String,
    },
}

/// `querygate registry` subcommands.
#[derive(Debug, Subcommand)]
pub enum RegistryAction {
    /// Lists the remote registry's providers and versions, or one provider's versions.
    List {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Only this provider.
        provider: Option<String>,
    },
    /// Installs a provider into the local registry: the given version, else the newest
    /// usable one.
    Pull {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// The provider, e.g. github or google.
        provider: String,
        /// The version, e.g. v0.3.1.
        version: Option<String>,
    },
    /// Writes the provider lock of what the local registry holds (`registry.lock_file`,
    /// default `<registry.root>/providers.lock`): the SHA-256 of every document of each
    /// installed provider version.
    Lock {
        /// Compare the registry with the lock instead (exit 1 naming the first difference).
        #[arg(long)]
        check: bool,
    },
}

/// `querygate audit` subcommands. Without `--database` or paths they read the configured
/// sink (`audit.file.path`/`dir`, or the database with `audit.sink: postgres`).
#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Checks the hash chains and reports the first break (exit 1 when there is one). With
    /// `audit.mac_key_file`, every record and head must carry a valid MAC; a stream with two
    /// heads is a break.
    Verify {
        /// Check the `audit_events` table of `database.url`.
        #[arg(long)]
        database: bool,
        /// A stream written before `audit.mac_key_file` was set: its records and head may
        /// have no MAC (they must still chain; after its first MACed record every one needs
        /// its MAC). Repeat for several streams.
        #[arg(long, value_name = "STREAM")]
        allow_unsigned: Vec<String>,
        /// Audit files or folders to check instead of the configured ones.
        paths: Vec<PathBuf>,
    },
    /// Makes the daily partitions of `audit_events` ahead (`audit.postgres.
    /// partitions_ahead`) and applies `audit.postgres.retention`, recording what it removed
    /// in `audit_retention_cuts` (run it daily, with the role that ran `querygate migrate`).
    Maintain,
    /// Prints the latest records, one line each.
    Tail {
        /// How many records.
        #[arg(long, short = 'n', default_value_t = 20)]
        lines: usize,
        /// Keep printing new records until interrupted.
        #[arg(long, short)]
        follow: bool,
        /// Read the `audit_events` table of `database.url`.
        #[arg(long)]
        database: bool,
        /// An audit file or folder to read instead of the configured one.
        path: Option<PathBuf>,
    },
    /// Prints the records that match every filter given, by their calls' start (exit 1 when
    /// a line or row is not an intact record: it is named on stderr, never printed).
    Query {
        /// Calls that started at or after TIME: RFC 3339 (`2026-11-30T11:30:00Z`,
        /// `…+01:00`, or a UTC date `2026-11-30`) or a time ago (`30m`, `1h`, `7d`).
        #[arg(long, value_name = "TIME", value_parser = crate::audit::query::parse_time)]
        since: Option<std::time::SystemTime>,
        /// Calls that started before TIME (as `--since`).
        #[arg(long, value_name = "TIME", value_parser = crate::audit::query::parse_time)]
        until: Option<std::time::SystemTime>,
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this principal (the subject: JWT `sub`, `uri:…` of a certificate, `local`).
        #[arg(long)]
        principal: Option<String>,
        /// Only principals vouched for by this JWT issuer (`iss`).
        #[arg(long)]
        issuer: Option<String>,
        /// Only this tool.
        #[arg(long)]
        tool: Option<String>,
        /// Only this statement class: select, mutation_create, mutation_delete, lifecycle,
        /// unknown.
        #[arg(long, value_parser = crate::audit::query::parse_class)]
        class: Option<String>,
        /// Only this decision: allow, refuse_immediate, needs_approval_requested,
        /// needs_approval_accepted, needs_approval_declined, needs_approval_cancelled,
        /// needs_approval_unavailable.
        #[arg(long, value_parser = crate::audit::query::parse_decision)]
        decision: Option<crate::audit::Decision>,
        /// Only calls that ended so: ok, error, unknown (intent records have no outcome).
        #[arg(long, value_parser = crate::audit::query::parse_outcome)]
        outcome: Option<crate::audit::Outcome>,
        /// At most this many records (the earliest).
        #[arg(long, short = 'n')]
        limit: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = RecordFormat::Table)]
        format: RecordFormat,
        /// Read the `audit_events` table of `database.url`.
        #[arg(long)]
        database: bool,
        /// Audit files or folders to read instead of the configured ones.
        paths: Vec<PathBuf>,
    },
}

/// How `querygate audit query` prints records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordFormat {
    /// Aligned columns for a person, untrusted text escaped.
    Table,
    /// JSON Lines: each record as stored, one a line.
    Json,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for a person.
    Table,
    /// A JSON array of row objects.
    Json,
    /// RFC 4180 CSV with a header line.
    Csv,
}

/// Runs the CLI; returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    if let Command::Policy {
        action: PolicyAction::Check { schema, files },
    } = &cli.command
    {
        // Needs no configuration: the files are checked as they are.
        return policy::check(*schema, files);
    }
    let flags = match &cli.command {
        Command::Serve {
            listen: Some(listen),
        } => vec![crate::config::Flag {
            option: "--listen",
            key: "server.listen",
            value: listen.clone(),
        }],
        _ => Vec::new(),
    };
    let config = match Config::load_with_flags(&Sources::from_process(cli.config.clone()), &flags) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err}");
            return 2;
        }
    };
    let telemetry =
        match crate::telemetry::logs::init(&config.log, config.telemetry.traces.as_ref()) {
            Ok(telemetry) => telemetry,
            Err(err) => {
                eprintln!("error: {err}");
                return 2;
            }
        };
    let code = run_loaded(cli, config).await;
    telemetry.shutdown().await;
    code
}

/// Runs the command once the configuration is loaded and logging set up.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per command of the command line"
)]
async fn run_loaded(cli: Cli, config: Config) -> i32 {
    match cli.command {
        Command::Migrate => return migrate(&config).await,
        Command::Audit { action } => return audit(&config, action).await,
        Command::Approvals { action } => return approvals_cli::run(&config, action).await,
        Command::Policy { action } => return policy::run(&config, action).await,
        _ => {}
    }
    if matches!(cli.command, Command::Serve { .. } | Command::Stdio)
        && let Err(err) = crate::db::migrate_on_start(&config.database).await
    {
        eprintln!("error: {err}");
        return 1;
    }
    match cli.command {
        Command::Serve { .. } => return serve(config).await,
        Command::Query {
            explain: true, sql, ..
        } => {
            let action = PolicyAction::Explain {
                tenant: "default".to_owned(),
                subject: "local".to_owned(),
                issuer: None,
                groups: Vec::new(),
                sql,
            };
            return policy::run(&config, action).await;
        }
        Command::Registry {
            action: RegistryAction::Lock { check },
        } => return registry_lock::run(&config, check),
        Command::Stdio => {
            return match crate::app::App::builder(config).run_stdio().await {
                Ok(()) => 0,
                Err(err) => {
                    eprintln!("error: {err}");
                    err.exit_code()
                }
            };
        }
        _ => {}
    }
    let (result, output) = match cli.command {
        Command::Query {
            output, yes, sql, ..
        } => (
            call::run(&config, call::Command::Query { sql, yes }).await,
            output,
        ),
        Command::Registry {
            action:
                RegistryAction::Pull {
                    output,
                    provider,
                    version,
                },
        } => (
            call::run(&config, call::Command::Pull { provider, version }).await,
            output,
        ),
        command => match local_command(&config, command).await {
            Ok((result, output)) => (
                result.map_err(|err| call::Failure {
                    message: err.to_string(),
                    exit_code: 1,
                }),
                output,
            ),
            Err(code) => return code,
        },
    };
    match result {
        Ok(result) => {
            for warning in &result.warnings {
                eprintln!("warning: {}", said(warning));
            }
            // A write without rows shows its messages as the result; with RETURNING rows,
            // the messages go to stderr so stdout carries only rows.
            let result = if result.columns.is_empty() && !result.messages.is_empty() {
                QueryOutput {
                    columns: vec!["message".to_owned()],
                    rows: result
                        .messages
                        .iter()
                        .map(|m| vec![Cell::Text(m.clone())])
                        .collect(),
                    ..Default::default()
                }
            } else {
                for message in &result.messages {
                    eprintln!("{}", said(message));
                }
                result
            };
            let mut stdout = std::io::stdout().lock();
            let text = render(&result, output, std::io::IsTerminal::is_terminal(&stdout));
            if stdout.write_all(text.as_bytes()).is_err() {
                return 1;
            }
            0
        }
        Err(failure) => {
            eprintln!("error: {}", said(&failure.message));
            failure.exit_code
        }
    }
}

/// `querygate providers` and `querygate registry list`: reads of what is installed and of
/// the remote registry, outside the tool-call pipeline (they reach no tenant's upstream).
/// `Err`: the exit code, the error printed.
async fn local_command(
    config: &Config,
    command: Command,
) -> Result<(crate::engine::Result<QueryOutput>, Output), i32> {
    let (engine, cx) = match crate::app::App::builder(config.clone()).local() {
        Ok(local) => local,
        Err(err) => {
            eprintln!("error: {err}");
            return Err(err.exit_code());
        }
    };
    match command {
        Command::Providers { output } => {
            let listed = engine.providers(&cx).await.map(|providers| QueryOutput {
                columns: vec![
                    "name".to_owned(),
                    "version".to_owned(),
                    "versions".to_owned(),
                ],
                rows: providers
                    .into_iter()
                    .map(|p| {
                        vec![
                            Cell::Text(p.name),
                            Cell::Text(p.version),
                            Cell::Text(p.versions.join(", ")),
                        ]
                    })
                    .collect(),
                warnings: Vec::new(),
                ..Default::default()
            });
            Ok((listed, output))
        }
        Command::Registry {
            action: RegistryAction::List { output, provider },
        } => Ok((engine.registry_list_rows(provider.as_deref()).await, output)),
        // Dispatched before: served, or run through the pipeline.
        Command::Query { .. }
        | Command::Registry { .. }
        | Command::Serve { .. }
        | Command::Stdio
        | Command::Migrate
        | Command::Approvals { .. }
        | Command::Policy { .. }
        | Command::Audit { .. } => Err(1),
    }
}

/// An upstream value (a row's cell, a column name) as it is printed: with control and
/// bidirectional characters written as `\u{hex}`, so what an upstream sends is shown, never
/// acted on by the terminal.
fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    crate::safe_text::escape_display_str(text)
}

/// A message, warning or error (which may quote an upstream body, already escaped by the
/// engine) as it is printed on stderr: [`shown`] without escaping backslashes again.
fn said(text: &str) -> std::borrow::Cow<'_, str> {
    crate::safe_text::escape_controls(text)
}

/// `querygate serve`: builds the [`App`](crate::app::App) and serves until Ctrl-C or SIGTERM,
/// then drains (a second signal cuts the drain short).
async fn serve(config: Config) -> i32 {
    let app = match crate::app::App::build(config).await {
        Ok(app) => app,
        Err(err) => {
            eprintln!("error: {err}");
            return err.exit_code();
        }
    };
    // Handlers first: a signal sent once the address is announced must drain, not kill.
    let (first, second) = crate::shutdown::first_and_second();
    eprintln!("querygate: serving MCP at {}", app.mcp_url());
    if let Some(admin) = app.admin_addr() {
        eprintln!("querygate: admin listener (/healthz, /readyz) at http://{admin}");
    }
    let stop = async {
        first.await;
        eprintln!("querygate: stopping; finishing requests in flight (again to stop at once)");
    };
    match app.run_until_hurried(stop, second).await {
        Ok(()) => 0,
        Err(err) => {
            eprintln!("error: {err}");
            err.exit_code()
        }
    }
}

/// `querygate migrate`: applies the pending migrations and names them.
async fn migrate(config: &Config) -> i32 {
    let pool = match crate::db::connect(&config.database).await {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let outcome = crate::db::migrate(&pool).await;
    pool.close().await;
    match outcome {
        Ok(applied) if applied.is_empty() => {
            println!("the database schema is up to date");
            0
        }
        Ok(applied) => {
            for name in applied {
                println!("applied {name}");
            }
            0
        }
        Err(err) => {
            eprintln!("error: {err}");
            1
        }
    }
}

/// `querygate audit verify|tail|query`.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per `audit` subcommand over the sink settings they share"
)]
async fn audit(config: &Config, action: AuditAction) -> i32 {
    use crate::audit::{FileLocation, SinkSettings};
    let (use_database, paths) = match &action {
        AuditAction::Verify {
            database, paths, ..
        } => (*database, paths.clone()),
        AuditAction::Tail { database, path, .. } => (*database, path.iter().cloned().collect()),
        AuditAction::Maintain => return audit_maintain::run(config).await,
        AuditAction::Query {
            database, paths, ..
        } => (*database, paths.clone()),
    };
    let use_database = use_database
        || (paths.is_empty() && matches!(config.audit.sink, SinkSettings::Postgres { .. }));
    let pool = if use_database {
        match crate::db::connect(&config.database).await {
            Ok(pool) => Some(pool),
            Err(err) => {
                eprintln!("error: {err}");
                return 1;
            }
        }
    } else {
        None
    };
    let configured = match &config.audit.sink {
        SinkSettings::File { location, .. } => location.clone(),
        SinkSettings::Postgres { .. } | SinkSettings::Otlp => {
            FileLocation::Dir(crate::audit::location::default_dir(&HashMap::new()))
        }
    };
    match action {
        AuditAction::Query {
            since,
            until,
            tenant,
            principal,
            issuer,
            tool,
            class,
            decision,
            outcome,
            limit,
            format,
            ..
        } => {
            let filter = crate::audit::query::Filter {
                since,
                until,
                tenant,
                principal,
                issuer,
                tool,
                class,
                decision,
                outcome,
                limit,
            };
            let source = match &pool {
                Some(pool) => audit_query::Source::Database(pool),
                None if paths.is_empty() => {
                    audit_query::Source::Files(crate::audit::location::files_of(&configured))
                }
                None => audit_query::Source::Files(crate::audit::verify::expand(&paths)),
            };
            audit_query::run(source, filter, format).await
        }
        AuditAction::Verify { allow_unsigned, .. } => {
            // MACs and heads are checked under the audit key of `audit.mac_key_file`.
            let key = match crate::audit::open::mac_key(&config.audit) {
                Ok(key) => key,
                Err(err) => {
                    eprintln!("error: {err}");
                    return 1;
                }
            };
            let allow_unsigned: std::collections::BTreeSet<String> =
                allow_unsigned.into_iter().collect();
            let anchors = crate::audit::verify::Anchors {
                key: key.as_ref(),
                allow_unsigned: Some(&allow_unsigned),
            };
            let report = match &pool {
                Some(pool) => crate::audit::verify::verify_database_against(pool, anchors)
                    .await
                    .map_err(|err| err.to_string()),
                None => {
                    let files = if paths.is_empty() {
                        crate::audit::location::files_of(&configured)
                    } else {
                        crate::audit::verify::expand(&paths)
                    };
                    files
                        .and_then(|files| {
                            crate::audit::verify::verify_files_against(&files, anchors)
                        })
                        .map_err(|err| err.to_string())
                }
            };
            match report {
                Ok(report) => {
                    print!("{}", report.render());
                    if report.ok() { 0 } else { 1 }
                }
                Err(err) => {
                    eprintln!("error: cannot read the audit records: {err}");
                    1
                }
            }
        }
        // Answered above, before any pool is opened.
        AuditAction::Maintain => 1,
        AuditAction::Tail { lines, follow, .. } => {
            let mut stdout = std::io::stdout();
            let result = match &pool {
                Some(pool) => crate::audit::tail::tail_database(
                    pool,
                    lines,
                    follow,
                    &mut stdout,
                    wait_for_stop(),
                )
                .await
                .map_err(|err| err.to_string()),
                None => {
                    let location = match paths.first() {
                        Some(path) if path.is_dir() => FileLocation::Dir(path.clone()),
                        Some(path) => FileLocation::Path(path.clone()),
                        None => configured,
                    };
                    crate::audit::tail::tail_files(
                        &location,
                        lines,
                        follow,
                        &mut stdout,
                        wait_for_stop(),
                    )
                    .await
                    .map_err(|err| err.to_string())
                }
            };
            match result {
                Ok(()) => 0,
                Err(err) => {
                    eprintln!("error: cannot read the audit records: {err}");
                    1
                }
            }
        }
    }
}

/// Ctrl-C or SIGTERM.
async fn wait_for_stop() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Renders a result in the chosen format, safe to print: the table with control and
/// bidirectional characters written as `\u{hex}`, JSON with those JSON leaves raw written as
/// `\uXXXX` (the same JSON value), CSV escaped as the table when it goes `to_terminal` and
/// byte for byte otherwise (it is data for another program).
pub fn render(result: &QueryOutput, output: Output, to_terminal: bool) -> String {
    match output {
        Output::Table => render_table(result),
        Output::Json => crate::safe_text::escape_json_text(render_json(result)),
        Output::Csv => render_csv(result, to_terminal),
    }
}

fn render_table(result: &QueryOutput) -> String {
    let cells: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|c| shown(&c.to_string().replace(['\n', '\r'], " ")).into_owned())
                .collect()
        })
        .collect();
    let columns: Vec<String> = result
        .columns
        .iter()
        .map(|c| shown(c).into_owned())
        .collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |values: &[String]| -> String {
        let padded: Vec<String> = values
            .iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v}{}", " ".repeat(w.saturating_sub(v.chars().count()))))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let rule = format!(
        "|{}|\n",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    let mut out = line(&columns);
    out.push_str(&rule);
    for row in &cells {
        out.push_str(&line(row));
    }
    out.push_str(&format!(
        "({} row{})\n",
        cells.len(),
        if cells.len() == 1 { "" } else { "s" }
    ));
    out
}

fn render_json(result: &QueryOutput) -> String {
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = result
        .rows
        .iter()
        .map(|row| {
            result
                .columns
                .iter()
                .zip(row)
                .map(|(c, v)| {
                    (
                        c.clone(),
                        serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
                    )
                })
                .collect()
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&rows).unwrap_or_else(|_| "[]".to_owned());
    text.push('\n');
    text
}

fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_owned()
    }
}

fn render_csv(result: &QueryOutput, to_terminal: bool) -> String {
    let field = |value: &str| {
        if to_terminal {
            csv_field(&shown(value))
        } else {
            csv_field(value)
        }
    };
    let mut out = String::new();
    let header: Vec<String> = result.columns.iter().map(|c| field(c)).collect();
    out.push_str(&header.join(","));
    out.push_str("\r\n");
    for row in &result.rows {
        let fields: Vec<String> = row.iter().map(|c| field(&c.to_string())).collect();
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> QueryOutput {
        QueryOutput {
            columns: vec!["n".into(), "s".into()],
            rows: vec![
                vec![Cell::Integer(1), Cell::Text("a,\"b\"".into())],
                vec![Cell::Null, Cell::Real(1.5)],
            ],
            warnings: vec![],
            ..Default::default()
        }
    }

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(
            render(&sample(), Output::Csv, false),
            "n,s\r\n1,\"a,\"\"b\"\"\"\r\n,1.5\r\n"
        );
    }

    #[test]
    fn json_keeps_types() {
        let v: serde_json::Value =
            serde_json::from_str(&render(&sample(), Output::Json, false)).unwrap();
        assert_eq!(v[0]["n"], 1);
        assert_eq!(v[1]["n"], serde_json::Value::Null);
        assert_eq!(v[1]["s"], 1.5);
    }

    #[test]
    fn table_aligns_columns() {
        let text = render(&sample(), Output::Table, false);
        assert!(text.starts_with("| n | s     |\n"), "{text}");
        assert!(text.ends_with("(2 rows)\n"));
    }
}
