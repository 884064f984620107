//! Serving the payments service for a backend: transactional HTTP over a SQL store, the layers
//! with their own store otherwise, or the same handlers unguarded (the benchmarks' baselines).

use std::io;

use tokio::net::TcpListener;

use super::config::{Backend, SqlBackend};
use super::reference::Reference;
use super::routes::{app, bare};
use super::server::Server;
use super::state::AppState;

/// How the handlers are served (`IDEMPOTENCY_LAYER`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Behind the idempotency layers (`on`, the default).
    #[default]
    Guarded,
    /// Without any layer (`off`): the benchmarks' baseline.
    Bare,
    /// Behind the benchmark reference (`reference`, see `BENCHMARKS.md`), not a layer.
    Reference,
}

impl Mode {
    /// Reads `IDEMPOTENCY_LAYER` (`on`, `off`, `reference`; default `on`).
    pub fn from_env() -> Self {
        match std::env::var("IDEMPOTENCY_LAYER").as_deref() {
            Ok("off") => Self::Bare,
            Ok("reference") => Self::Reference,
            _ => Self::Guarded,
        }
    }
}

/// Serves the payments service on `listener`: over a SQL backend, transactional HTTP
/// ([`transactional_app`](super::transactional::transactional_app): each request's record in
/// its own transaction); over memory or Redis, [`app`].
pub fn spawn(
    listener: TcpListener,
    backend: Backend,
    state: AppState,
    mode: Mode,
) -> io::Result<Server> {
    match (mode, backend.sql) {
        (Mode::Bare, _) => Server::spawn_on(listener, bare(state)),
        (Mode::Reference, _) => Server::spawn_on(listener, Reference::new(bare(state))),
        (Mode::Guarded, Some(sql)) => spawn_transactional(listener, sql, state),
        (Mode::Guarded, None) => Server::spawn_on(listener, app(state, backend.store)),
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn spawn_transactional(
    listener: TcpListener,
    sql: SqlBackend,
    state: AppState,
) -> io::Result<Server> {
    use super::transactional::{CheckoutConfig, checkout_layer, transactional_app};
    let checkout = CheckoutConfig::from_env().map_err(io::Error::other)?;
    let interval = completer_interval()?;
    let callers = state.callers.clone();
    // The completer resumes checkouts nobody retries through the app itself.
    macro_rules! serve {
        ($store:expr, $repo:expr) => {{
            let app = transactional_app(state, $store.clone(), $repo, checkout);
            checkout_layer($store, callers)
                .spawn_completer::<_, axum::body::Body>(app.clone(), interval);
            Server::spawn_on(listener, app)
        }};
    }
    match sql {
        #[cfg(feature = "postgres")]
        SqlBackend::Postgres(store, repo) => serve!(store, repo),
        #[cfg(feature = "mysql")]
        SqlBackend::Mysql(store, repo) => serve!(store, repo),
        #[cfg(feature = "sqlite")]
        SqlBackend::Sqlite(store, repo) => serve!(store, repo),
    }
}

/// How often the checkout's completer sweeps: `COMPLETER_INTERVAL_MS`, else
/// [`DEFAULT_COMPLETER_INTERVAL_MS`](super::checkout::DEFAULT_COMPLETER_INTERVAL_MS).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn completer_interval() -> io::Result<std::time::Duration> {
    let millis = match std::env::var("COMPLETER_INTERVAL_MS") {
        Ok(text) => text.trim().parse::<u64>().map_err(|error| {
            io::Error::other(format!(
                "COMPLETER_INTERVAL_MS={text:?} is not milliseconds: {error}"
            ))
        })?,
        Err(_) => super::checkout::DEFAULT_COMPLETER_INTERVAL_MS,
    };
    Ok(std::time::Duration::from_millis(millis.max(1)))
}

#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
fn spawn_transactional(
    _listener: TcpListener,
    sql: SqlBackend,
    _state: AppState,
) -> io::Result<Server> {
    match sql {}
}
