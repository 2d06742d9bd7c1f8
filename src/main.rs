//! `querygate`: the command line over the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = querygate::cli::Cli::parse();
    // Colours only for a terminal (not for log files, pipes or a desktop client's log).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("QUERYGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return std::process::ExitCode::from(1);
        }
    };
    let code = runtime.block_on(querygate::cli::run(cli));
    // A blocking read of a terminal's stdin cannot be cancelled; do not wait on it to exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(1))
}
