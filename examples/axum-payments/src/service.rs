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
    use super::transactional::transactional_app;
    match sql {
        #[cfg(feature = "postgres")]
        SqlBackend::Postgres(store, repo) => {
            Server::spawn_on(listener, transactional_app(state, store, repo))
        }
        #[cfg(feature = "mysql")]
        SqlBackend::Mysql(store, repo) => {
            Server::spawn_on(listener, transactional_app(state, store, repo))
        }
        #[cfg(feature = "sqlite")]
        SqlBackend::Sqlite(store, repo) => {
            Server::spawn_on(listener, transactional_app(state, store, repo))
        }
    }
}

#[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
fn spawn_transactional(
    _listener: TcpListener,
    sql: SqlBackend,
    _state: AppState,
) -> io::Result<Server> {
    match sql {}
}
