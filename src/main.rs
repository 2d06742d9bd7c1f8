//! `querygate`: the command line over the library.

use clap::Parser;

/// mimalloc (v2) instead of the system allocator: small calls allocate and free hundreds of
/// short blocks across threads, which glibc's malloc serves at a markedly higher CPU cost.
/// `.cargo/config.toml` builds it to commit memory only as it is used.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    quiet_on_closed_stdout();
    let cli = querygate::cli::Cli::parse();
    // Logging starts once the configuration is loaded (`log:`), in `cli::run`.
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

/// A command whose reader went away (`querygate approvals list | head`) stops quietly, as
/// the other tools of a shell pipeline do, rather than reporting a panic: the standard
/// library's `print!` panics when stdout answers `EPIPE` (Rust ignores `SIGPIPE`). Every
/// other panic is reported as before.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}
