//! Runs with steps over HTTP and gRPC (feature `steps`): a handler with several steps (reserve,
//! capture at a provider, grant) that a retry, a takeover or the background completer drives to
//! completion, never running a completed step twice. The same layer serves axum and tonic, on a
//! SQL store or on a core store:
//!
//! | built with | stores | handler takes | steps | a dead owner's run is resumed |
//! |---|---|---|---|---|
//! | [`build_steps`](crate::IdempotencyLayerBuilder::build_steps) (with `postgres`, `mysql` or `sqlite`) | `PostgresStore`, `MySqlStore`, `SqliteStore` | `Steps<PostgresStore>`: [`idempotency_steps::Run`] | local (in a transaction with their checkpoint) and foreign | at once (its hold ends with its connection); SQLite: when its lease ends |
//! | [`build_leased_steps`](crate::IdempotencyLayerBuilder::build_leased_steps) | Redis (`RedisStore`, Cluster, Valkey), `Arc<MemoryStore>` | `Steps<Leased<RedisStore>>`: [`idempotency_steps::leased::Run`] | foreign only, each checkpointed as it returns | when its lease ends (the layer's lease, renewed by each checkpoint and a heartbeat while a step runs) |
//!
//! On a core store ([`Leased`](idempotency_steps::leased::Leased)) there is no business
//! database to share a step's commit: every step is a call to another service with its
//! **downstream key** ([`leased::Run::downstream_key`](idempotency_steps::leased::Run::downstream_key)),
//! run **at least once** (a crash after the call and before its checkpoint calls it again with
//! the same key, which the other service deduplicates on), and never again once its checkpoint
//! landed. A Redis failover or restart that loses the last checkpoint calls that step again,
//! with the same key (see [`idempotency_steps::leased`]).
//!
//! [`StepsLayer`] reads the key, the fingerprint and the body as every layer does, then starts
//! or resumes the request's run ([`idempotency_steps::StepRunner::start_waiting`]): on SQL the
//! owner holds the key on its own connection while the handler runs; on a core store it holds
//! the run's lease. The handler takes the run ([`Steps`]) and calls its steps
//! ([`Run::local`](idempotency_steps::Run::local), [`Run::foreign`](idempotency_steps::Run::foreign)).
//! When it answers, the layer stores the response (after the compensations, when a step ended
//! the run) or, for a response the storage policy does not keep (a 503 after a provider timed
//! out), leaves the run resumable.
//!
//! | situation | answer |
//! |---|---|
//! | first request | the handler's response, stored |
//! | retry after a crash or a 503 | the run resumed after its last checkpoint, then its response |
//! | completed duplicate | the stored response, `Idempotent-Replayed: true` |
//! | duplicate while the owner lives | waits up to the in-flight bound, then replays; or 409 |
//! | same key, other payload | 422 |
//! | store unavailable | 503 + `Retry-After` |
//!
//! The request (method, path, body) is kept with the run's first checkpoint, so that the
//! completer ([`StepsLayer::spawn_completer`]) can resume a run nobody retries: it sends the
//! kept request through the service again, marked with [`Resume`] (an extension, which no
//! client can set), and the layer resumes the run by its storage key. It finds the runs in the
//! SQL store, or by the core store's record scan
//! ([`leased::Abandoned`](idempotency_steps::leased::Abandoned)). Keep personal data out of
//! what is kept with [`StepsLayer::keep_input`].
//!
//! ```no_run
//! # #[cfg(all(feature = "postgres", feature = "axum"))]
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), idempotency_core::Error> {
//! use axum::{Json, Router, routing::post};
//! use idempotency_sql::PostgresStore;
//! use idempotency_steps::StepError;
//! use idempotency_tower::IdempotencyLayer;
//! use idempotency_tower::steps::Steps;
//!
//! #[derive(serde::Deserialize)]
//! struct Checkout { order_id: i64 }
//!
//! async fn checkout(mut run: Steps<PostgresStore>, Json(input): Json<Checkout>) -> (http::StatusCode, String) {
//!     let steps = async {
//!         run.local("reserve", async |tx| {
//!             sqlx::query("UPDATE orders SET status = 'RESERVED' WHERE id = $1")
//!                 .bind(input.order_id)
//!                 .execute(&mut **tx)
//!                 .await?;
//!             Ok(())
//!         })
//!         .await?;
//!         let capture: String = run
//!             .foreign("capture", async |key| Ok(format!("captured with key {key}")))
//!             .await?;
//!         Ok::<_, StepError>(capture)
//!     };
//!     match steps.await {
//!         Ok(capture) => (http::StatusCode::CREATED, capture),
//!         Err(StepError::End(answer)) => (http::StatusCode::PAYMENT_REQUIRED, answer.to_string()),
//!         Err(error) => (http::StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
//!     }
//! }
//!
//! let store = PostgresStore::new(pool);
//! store.migrate().await?;
//! #[derive(Clone)]
//! struct Caller(String); // set by the service's authentication
//! impl AsRef<str> for Caller {
//!     fn as_ref(&self) -> &str { &self.0 }
//! }
//! let layer = IdempotencyLayer::builder(store)
//!     .principal_from_extension::<Caller>()
//!     .namespace("checkout")
//!     .build_steps();
//! let app: Router = Router::new().route("/checkout", post(checkout)).layer(layer.clone());
//! let every = std::time::Duration::from_secs(5);
//! let completer = layer.spawn_completer::<_, axum::body::Body>(app.clone(), every);
//! # let _ = completer; Ok(()) }
//! ```

//! On Redis, the same handler shape with foreign steps only:
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # async fn demo(store: idempotency_redis::RedisStore) {
//! use axum::{Router, routing::post};
//! use idempotency_redis::RedisStore;
//! use idempotency_steps::leased::Leased;
//! use idempotency_tower::IdempotencyLayer;
//! use idempotency_tower::steps::Steps;
//!
//! async fn checkout(mut run: Steps<Leased<RedisStore>>) -> (http::StatusCode, String) {
//!     let capture = run
//!         .foreign("capture", async |key| Ok(format!("captured with key {key}")))
//!         .await;
//!     match capture {
//!         Ok(capture) => (http::StatusCode::CREATED, capture),
//!         Err(error) => (http::StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
//!     }
//! }
//!
//! let layer = IdempotencyLayer::builder(store)
//!     .shared_scope()
//!     .namespace("checkout")
//!     .build_leased_steps();
//! let app: Router = Router::new().route("/checkout", post(checkout)).layer(layer.clone());
//! let every = std::time::Duration::from_secs(5);
//! let completer = layer.spawn_completer::<_, axum::body::Body>(app.clone(), every);
//! # let _ = completer; }
//! ```

mod completer;
mod handle;
mod input;
mod layer;
mod run;
mod service;

pub use handle::{Steps, StepsHandle, StepsUnavailable};
pub use input::{KeepInput, Resume};
pub use layer::{StepsLayer, StepsService};
