//! `idempotency`: find and resolve dangling idempotency records, reconcile, purge with archive.
//!
//! ```text
//! idempotency stuck --store redis://127.0.0.1:6379 --older-than 0s --namespace payments.callback --json
//! idempotency release --store postgres://… --namespace payments.callback --key T1 --yes --reason INC-42
//! idempotency stuck --store redis://127.0.0.1:6379 --truth postgres://… --truth-table coupon_grant_dedup
//! idempotency release --store postgres://… --key-hash 3f9a61c2 --yes --reason INC-42
//! idempotency outbox dead --store postgres://… --json
//! ```
//!
//! A raw key is looked for under every front end's key derivation (HTTP and gRPC layers,
//! `#[idempotent]` functions, transactions, consumers) unless `--mechanism` names one; pass
//! `--principal` for services that scope keys by principal. A record listed is named by its
//! id (`--key-hash`: the 64 hex characters listed, or a unique prefix of at least 8). Exit
//! codes: 0 done, 2 usage, 3 refused by the fence, 4 store unreachable, 5 not found, 6
//! ambiguous (a prefix or raw key that fits several records: their ids are printed), 1 other.
//! `stuck --truth URL` is one view of a two-tier consumer: its fast tier (`--store`) and its
//! SQL truth. Built with every store by default; `--no-default-features --features postgres`
//! (or `mysql`, `sqlite`, `redis`) builds for the stores named only.

mod args;
mod commands;
mod connect;
mod duration;
mod failure;
mod output;
#[cfg(feature = "sql")]
mod sql_stores;
mod store;
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
