//! The `#[idempotent]` attribute: run an `async fn` once per key (dedup), in the caller's SQL
//! transaction (transactional), or once per state transition (state machine).
//!
//! Use it through `idempotency::idempotent` (feature `macros`; `idempotency_function::idempotent`
//! works too); the generated code calls the function runtime through whichever of the two crates
//! the caller depends on (`idempotency::function` or `idempotency_function`). See [`idempotent`] for the arguments, the modes and examples.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod attr;
mod check;
mod duration;
mod expand;
mod krate;
mod shared;
mod state;
mod tx;

use proc_macro::TokenStream;

/// Runs an `async fn … -> Result<T, E>` once per key.
///
/// Use it through `idempotency::idempotent` (feature `macros`) or `idempotency_function::idempotent`.
/// The smallest use:
///
/// ```
/// use idempotency_core::{Idempotency, Error, MemoryStore};
/// use idempotency_function::idempotent;
///
/// #[idempotent(key = trade_no, store = engine)]
/// async fn grant_coupon(engine: &Idempotency<MemoryStore>, trade_no: &str) -> Result<u64, Error> {
///     Ok(42) // runs once per trade_no; a retry gets the stored 42
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # let engine = Idempotency::new(MemoryStore::new());
/// # assert_eq!(grant_coupon(&engine, "T1").await.unwrap(), 42);
/// # assert_eq!(grant_coupon(&engine, "T1").await.unwrap(), 42);
/// # }
/// ```
///
/// # Dedup mode
///
/// On any `async fn … -> Result<T, E>` (free functions, methods, axum handlers, queue
/// handlers) where `T: Serialize + DeserializeOwned` and `E: From<Error>`:
///
/// - the first call with a key runs the body and stores `Ok(T)` as JSON;
/// - a duplicate returns the stored `T` without running the body;
/// - `Err(E)` releases the key so a retry runs again (or, with `on_error = "keep"`, is stored and
///   replayed too; `E` must then be `Serialize + DeserializeOwned`);
/// - a duplicate while the first call runs, the same key with other fingerprinted arguments, and
///   store failures come back as `E::from(Error::{InFlight, Mismatch, Unavailable, Timeout, …})`, so
///   the function's error type decides the status code;
/// - a call whose future is dropped (a timeout, the losing branch of a `select!`) stops at the
///   await it was at and releases the key, like an `Err`: the next call runs the body again, and
///   what the body did before it stopped is not undone. Where that must not happen, let the call
///   finish: `tokio::spawn` it and time out the `JoinHandle` instead, or use the transactional
///   mode, where a dropped transaction rolls back the record and the body's writes together.
///
/// | argument | meaning |
/// |---|---|
/// | `key = expr` | required: the key, an expression over the arguments of any `Display` type (`event.trade_no`, `format!("{a}:{b}")`) |
/// | `store = expr` (or `engine = expr`) | required: an `Idempotency<S>` engine or an `Arc` of a store: an argument, `self.field`, a static, a call |
/// | `namespace = "payments"` | the namespace of the records; default `module_path!()::fn_name` (set it on methods whose names repeat in one module) |
/// | `principal = expr` | restricts the scope to a tenant or user: two principals never share a record |
/// | `fingerprint = [a, b.amount]` | arguments hashed as canonical JSON (`Serialize`); the same key with other values is a `Mismatch`. Default: none, only the key counts |
/// | `ttl = "24h"`, `lease = "30s"` | override the engine's settings (units `ms s m h d`, combinable: `"1h30m"`) |
/// | `wait = "5s"` | a duplicate in flight waits (bounded) for the first call's result instead of failing with `InFlight` |
/// | `on_error = "release"` / `"keep"` | what an `Err` does (default `release`) |
/// | `map_err = path` | a `fn(Error) -> E`, for an `E` that cannot implement `From` (e.g. `tonic::Status`) |
///
/// # Transactional mode: `tx = …`
///
/// The function takes a `&mut sqlx::Transaction`; the dedup record is claimed in it before the
/// body and completed in it after, so the record and the body's writes commit or roll back
/// together (the same database, the same transaction). `store` is the SQL store
/// (`PostgresStore`, `SqliteStore`, `MySqlStore`, `Arc` or `&` of one): TTL and lease are its
/// `with_tx_ttl`/`with_tx_lease`. A concurrent duplicate waits on the first transaction's row
/// and replays once it commits, or runs if it rolls back. `Err(E)` deletes the claim in the
/// transaction; a record that cannot be written is an `Err`, so the caller rolls back.
///
/// ```no_run
/// use idempotency_sql::SqliteStore;
/// use idempotency_core::Error;
/// use idempotency_function::idempotent;
///
/// #[idempotent(tx = tx, key = trade_no, store = store, namespace = "pay.callback")]
/// async fn grant(store: &SqliteStore, tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>, trade_no: &str)
///     -> Result<u64, Error> {
///     sqlx::query("INSERT INTO coupons (trade_no) VALUES (?)").bind(trade_no).execute(&mut **tx).await
///         .map_err(idempotency_sql::from_sqlx)?;
///     Ok(1)
/// }
/// # async fn call(store: SqliteStore, pool: sqlx::SqlitePool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// let coupon = grant(&store, &mut tx, "T1").await?;
/// tx.commit().await?; // the coupon and the record, together
/// # Ok(()) }
/// ```
///
/// # State-machine mode: `transition(…)`
///
/// The row's state is the record: `UPDATE table SET column = to WHERE id_column = id AND column
/// IN (from…)` runs on `executor` (a `&mut sqlx::Transaction` or connection) before the body.
///
/// | the row | the function returns |
/// |---|---|
/// | moved `from → to` | the body's result: the side effects run, in the same transaction |
/// | already in `to` | `Ok(already)` without running the body (`already = expr`, default `T::default()`) |
/// | in another state | `Err(E::from(Error::IllegalTransition { current }))` |
/// | absent | `Err(E::from(Error::NotFound))` |
///
/// `column` defaults to `"status"`, `id_column` to `"id"`; `from` is one state or a list.
/// States are string literals (a text or `ENUM` column) or integer literals (`from = 10,
/// to = 20` for a `TINYINT`/`INT` status column), not both in one transition.
///
/// ```no_run
/// use idempotency_core::Error;
/// use idempotency_function::idempotent;
///
/// #[idempotent(transition(table = "orders", id = order_id, from = "WAIT_PAY", to = "PAID"),
///              executor = tx, already = "success")]
/// async fn mark_paid(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>, order_id: i64)
///     -> Result<&'static str, Error> {
///     // grant the coupon with `&mut **tx`: runs once per order
///     Ok("success")
/// }
/// ```
///
/// # Expansion
///
/// The function keeps its signature, visibility, attributes, generics, where clauses and
/// receiver; it stacks with `#[tracing::instrument]` and `#[axum::debug_handler]` in either
/// order, and works in inherent impls and native `async fn` trait impls. (A method already
/// rewritten by `#[async_trait]`, as tonic's service traits are, is refused with a message: put
/// the attribute on an inherent `async fn` and call it from the trait method, with `map_err` to
/// build the `tonic::Status`.) In dedup mode the body becomes the `async move` block of one call:
///
/// ```text
/// async fn on_paid(&self, event: Event) -> Result<Coupon, AppError> {
///     let call = ::idempotency_function::Call::new("pay.callback", &(event.trade_no))
///         .ttl(::core::time::Duration::from_millis(86400000u64));
///     let engine = { use ::idempotency_function::AsEngine as _; (self.engine).idempotency_engine() };
///     ::idempotency_function::run::<Result<Coupon, AppError>, _, _, _>(
///         engine, call, ::core::convert::From::from, async move { /* the body */ },
///     ).await
/// }
/// ```
///
/// If the caller drops the future mid-way (a client disconnects), the key is released.
///
/// # Errors at compile time
///
/// A non-`async` function, a return type other than `Result`, a missing `key`/`store`/`tx`, a
/// duplicate or unknown argument, a malformed duration, an argument of another mode, a table or
/// column that is not a plain identifier and an expression naming something that is not an
/// argument are each reported on their own span, with what to write instead, next to the
/// unchanged function.
#[proc_macro_attribute]
pub fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let original = item.clone();
    let result = syn::parse::<attr::Args>(args)
        .and_then(|args| Ok((args, syn::parse::<syn::ItemFn>(item)?)))
        .and_then(|(args, item)| expand::expand(args, item));
    match result {
        Ok(tokens) => tokens.into(),
        Err(error) => token_stream_with_error(original, error),
    }
}

/// The original item plus the error, so the function still exists for the IDE and for
/// the rest of the crate (tokio-macros does the same).
fn token_stream_with_error(mut item: TokenStream, error: syn::Error) -> TokenStream {
    item.extend(TokenStream::from(error.into_compile_error()));
    item
}
