//! `idempotency`: find and resolve dangling idempotency records, reconcile, purge with archive.
//!
//! ```text
//! idempotency stuck --store redis://127.0.0.1:6379 --older-than 0s --namespace payments.callback --json
//! idempotency release --store postgres://… --namespace payments.callback --key T1 --yes --reason INC-42
//! idempotency outbox dead --store postgres://… --json
//! ```
//!
//! Raw keys become storage keys as the HTTP and gRPC layers derive them (`--mechanism
//! request`, no principal); pass `--principal` and `--mechanism` for services that scope
//! otherwise. Exit codes: 0 done, 2 usage, 3 refused by the fence, 4 store unreachable, 1 other.

mod args;
mod commands;
mod connect;
mod duration;
mod failure;
mod output;
mod terminal;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    // Audit entries of stores without an audit table (Redis) go to stderr, as the log stream.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,idempotency::audit=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idempotency: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("idempotency: {}", failure.message());
            failure.exit_code()
        }
    }
}
