//! Runtime support for `#[idempotent]` functions (feature `macros`).
//!
//! The attribute expands a function body into one call of [`run`] (or [`run_keeping_errors`]):
//! the key, scope and fingerprint go into a [`Call`], the body becomes an `async move` block
//! that runs only when the key is claimed. The same calls can be written by hand:
//!
//! ```
//! use idempotency_core::Error;
//! use idempotency_core::function::{self, Call};
//! use idempotency_core::{Idempotency, MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let engine = Idempotency::new(MemoryStore::new());
//! let grant = |trade_no: &str| {
//!     let call = Call::new("coupons", trade_no).fingerprint("amount", &100);
//!     function::run::<Result<u32, Error>, _, _, _>(
//!         engine.clone(),
//!         call,
//!         From::from,
//!         async { Ok(7) }, // grant the coupon, return its id
//!     )
//! };
//! assert_eq!(grant("T1").await.unwrap(), 7);
//! assert_eq!(grant("T1").await.unwrap(), 7); // replayed, not granted again
//! # }
//! ```

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

mod recorded;

pub use recorded::Recorded;

use crate::{
    Decision, Error, Execution, Fingerprint, FingerprintBuilder, Idempotency, InFlightPolicy,
    KeyError, Mechanism, Outcome, Scope, StorageKey, Store,
};

/// [`Outcome::status`] of a stored `Ok(T)`.
pub const STATUS_OK: u16 = 0;
/// [`Outcome::status`] of a stored `Err(E)` (only with `on_error = "keep"`).
pub const STATUS_ERR: u16 = 1;

/// What an `#[idempotent]` attribute's `store = …` expression may evaluate to: an
/// [`Idempotency`] engine, or a shared store (`Arc<S>`, wrapped in an engine with default
/// settings). References, `Arc<Idempotency<S>>` and statics reach it by auto-deref.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an idempotency engine",
    label = "`store = …` must be an `idempotency_core::Idempotency<S>` (or an `Arc` of a store, or a reference to either)"
)]
pub trait AsEngine {
    /// The store behind the engine.
    type Store: Store;
    /// An engine handle (cheap: two `Arc` clones).
    fn idempotency_engine(&self) -> Idempotency<Self::Store>;
}

impl<S: Store> AsEngine for Idempotency<S> {
    type Store = S;
    fn idempotency_engine(&self) -> Idempotency<S> {
        self.clone()
    }
}

impl<S: Store> AsEngine for Arc<S> {
    type Store = Arc<S>;
    fn idempotency_engine(&self) -> Idempotency<Arc<S>> {
        Idempotency::new(Arc::clone(self))
    }
}

/// The `Result<T, E>` an `#[idempotent]` function returns (also through aliases such as
/// `anyhow::Result<T>`).
pub trait FnResult: Sized {
    /// `T`.
    type Ok;
    /// `E`.
    type Err;
    /// Into a plain `Result`.
    fn into_result(self) -> Result<Self::Ok, Self::Err>;
    /// From a plain `Result`.
    fn from_result(result: Result<Self::Ok, Self::Err>) -> Self;
}

impl<T, E> FnResult for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn into_result(self) -> Self {
        self
    }
    fn from_result(result: Self) -> Self {
        result
    }
}

/// One call of an idempotent function: its scope, key, fingerprint and settings.
pub struct Call {
    scope: Scope,
    key: String,
    fingerprint: FingerprintBuilder,
    ttl: Option<Duration>,
    lease: Option<Duration>,
    in_flight: InFlightPolicy,
    error: Option<Error>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("namespace", &self.scope.namespace())
            .field("ttl", &self.ttl)
            .field("lease", &self.lease)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl Call {
    /// A call keyed by `key` (any `Display`: the text is hashed, so it need not be an HTTP-legal
    /// key; only an empty key is refused) in the namespace `namespace`.
    pub fn new(namespace: &str, key: impl Display) -> Self {
        Self {
            scope: Scope::new(namespace),
            key: key.to_string(),
            fingerprint: Fingerprint::builder(),
            ttl: None,
            lease: None,
            in_flight: InFlightPolicy::Reject,
            error: None,
        }
    }

    /// Restricts the scope to one principal (tenant, user): two principals never share a record.
    pub fn principal(mut self, principal: impl Display) -> Self {
        self.scope = self.scope.with_principal(principal.to_string());
        self
    }

    /// Adds an argument to the fingerprint, as canonical JSON under `name`.
    pub fn fingerprint(mut self, name: &str, value: &impl Serialize) -> Self {
        match serde_json::to_value(value) {
            Ok(json) => {
                let text = crate::canonical_json(&json);
                self.fingerprint.field(name.as_bytes(), text.as_bytes());
            }
            Err(error) => {
                self.error.get_or_insert(Error::Codec(
                    format!("fingerprint argument `{name}`: {error}").into(),
                ));
            }
        }
        self
    }

    /// How long a completed result is replayed (default: the engine's TTL).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// How long a claim holds before a crashed owner is taken over (default: the engine's lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// What a duplicate gets while the first call with its key runs (default
    /// [`InFlightPolicy::Reject`]: [`Error::InFlight`] at once).
    pub fn in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.in_flight = policy;
        self
    }

    /// While a duplicate is in flight, wait up to `max_wait` for its result instead of failing
    /// with [`Error::InFlight`]: [`in_flight`](Self::in_flight)`(InFlightPolicy::wait(max_wait))`.
    pub fn wait(self, max_wait: Duration) -> Self {
        self.in_flight(InFlightPolicy::wait(max_wait))
    }

    /// The scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The hashed key the record is stored under ([`Mechanism::Function`]: never the key of an
    /// HTTP request, a consumer or a hand-written transaction in the same scope).
    pub fn storage_key(&self) -> StorageKey {
        self.scope.storage_key_for(Mechanism::Function, &self.key)
    }

    fn engine<S: Store>(&self, engine: Idempotency<S>) -> Idempotency<S> {
        let engine = match self.ttl {
            Some(ttl) => engine.with_ttl(ttl),
            None => engine,
        };
        match self.lease {
            Some(lease) => engine.with_lease(lease),
            None => engine,
        }
    }

    /// Claims the key: the first step of [`run`], public for hand-written variants.
    pub async fn begin<S: Store>(self, engine: Idempotency<S>) -> Result<Decision<S>, Error> {
        let engine = self.engine(engine);
        let in_flight = self.in_flight;
        let (scope, key, fingerprint) = self.into_parts()?;
        engine
            .claim_named(&scope, Mechanism::Function, &key, &fingerprint, in_flight)
            .await
    }

    /// The call's scope, key and fingerprint, or the error met while building it (an empty
    /// key, a fingerprint part that does not serialize): what a runtime that claims elsewhere
    /// than through an engine (the SQL stores' transactions) claims with.
    pub fn into_parts(mut self) -> Result<(Scope, String, Fingerprint), Error> {
        if let Some(error) = self.error {
            return Err(error);
        }
        if self.key.is_empty() {
            return Err(KeyError::Empty.into());
        }
        Ok((self.scope, self.key, self.fingerprint.finish()))
    }
}

/// Runs `body` once per key: the first call runs it and stores `Ok(T)` (as JSON); a duplicate
/// returns the stored `T` without running it. `Err(E)` releases the key, so a retry runs again.
/// In-flight, mismatch, key, codec and store errors become `E` through `map_err`.
///
/// If the body succeeded but its result could not be stored (store down, lease lost, `T` not
/// encodable), the result is still returned, and the failure is logged and counted: the work
/// was done, and answering with an error would invite a retry.
///
/// Dropping the returned future (a timeout, a `select!`) stops `body` at its await point and
/// releases the key, as an `Err` does: the next call runs `body` again, and what it did before
/// it stopped is not undone. To let a call finish whatever its caller does, spawn it.
pub async fn run<R, S, M, F>(engine: Idempotency<S>, call: Call, map_err: M, body: F) -> R
where
    R: FnResult,
    R::Ok: Serialize + DeserializeOwned,
    S: Store,
    M: FnOnce(Error) -> R::Err,
    F: Future<Output = R>,
{
    let span = crate::telemetry::function_span(call.scope().namespace());
    async move {
        let execution = match start(engine, call).await {
            Ok(Started::Execute(execution)) => execution,
            Ok(Started::Replay(outcome)) => {
                return R::from_result(decode::<R::Ok>(&outcome, STATUS_OK).map_err(map_err));
            }
            Err(error) => return R::from_result(Err(map_err(error))),
        };
        let result = body.await.into_result();
        match &result {
            Ok(value) => store(execution, STATUS_OK, value).await,
            Err(_) => release(execution).await,
        }
        R::from_result(result)
    }
    .instrument(span)
    .await
}

/// Like [`run`], but `Err(E)` is stored and replayed too (attribute `on_error = "keep"`): for
/// errors that are final answers (a declined card), not failures worth a retry.
pub async fn run_keeping_errors<R, S, M, F>(
    engine: Idempotency<S>,
    call: Call,
    map_err: M,
    body: F,
) -> R
where
    R: FnResult,
    R::Ok: Serialize + DeserializeOwned,
    R::Err: Serialize + DeserializeOwned,
    S: Store,
    M: FnOnce(Error) -> R::Err,
    F: Future<Output = R>,
{
    let span = crate::telemetry::function_span(call.scope().namespace());
    async move {
        let execution = match start(engine, call).await {
            Ok(Started::Execute(execution)) => execution,
            Ok(Started::Replay(outcome)) => {
                let replayed = if outcome.status == STATUS_ERR {
                    decode::<R::Err>(&outcome, STATUS_ERR).map(Err)
                } else {
                    decode::<R::Ok>(&outcome, STATUS_OK).map(Ok)
                };
                return R::from_result(replayed.unwrap_or_else(|error| Err(map_err(error))));
            }
            Err(error) => return R::from_result(Err(map_err(error))),
        };
        let result = body.await.into_result();
        match &result {
            Ok(value) => store(execution, STATUS_OK, value).await,
            Err(error) => store(execution, STATUS_ERR, error).await,
        }
        R::from_result(result)
    }
    .instrument(span)
    .await
}

enum Started<S: Store> {
    Execute(Execution<S>),
    Replay(Outcome),
}

async fn start<S: Store>(engine: Idempotency<S>, call: Call) -> Result<Started<S>, Error> {
    match call.begin(engine).await? {
        Decision::Execute(execution) => Ok(Started::Execute(execution)),
        Decision::Replay(outcome) => Ok(Started::Replay(outcome)),
        Decision::InFlight { retry_after } => Err(Error::InFlight { retry_after }),
        Decision::Mismatch => Err(Error::Mismatch),
    }
}

fn decode<T: DeserializeOwned>(outcome: &Outcome, expected: u16) -> Result<T, Error> {
    if outcome.status != expected {
        return Err(Error::Codec(format!(
            "stored status {} is not {expected}: the record was written by another kind of caller",
            outcome.status
        ).into()));
    }
    serde_json::from_slice(&outcome.body)
        .map_err(|error| Error::Codec(format!("stored value: {error}").into()))
}

async fn store<S: Store, T: Serialize>(execution: Execution<S>, status: u16, value: &T) {
    match serde_json::to_vec(value) {
        // The engine logs and counts store failures.
        Ok(body) => {
            let _ = execution.complete(Outcome::new(status, body)).await;
        }
        Err(error) => {
            tracing::error!(%error, "the result of an idempotent function is not encodable; releasing the key");
            release(execution).await;
        }
    }
}

async fn release<S: Store>(execution: Execution<S>) {
    // The engine logs and counts store failures; an unreleased key expires with its lease.
    let _ = execution.release().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IdempotencyKey;

    #[test]
    fn storage_keys_are_the_function_mechanisms() {
        let call = Call::new("ns", "order-42").principal("tenant");
        let key = IdempotencyKey::parse("order-42").unwrap();
        let scope = Scope::new("ns").with_principal("tenant");
        // A function's record never answers an HTTP request in the same scope.
        assert_ne!(call.storage_key(), scope.storage_key(&key));
        assert_eq!(
            call.storage_key(),
            scope.storage_key_for(Mechanism::Function, "order-42")
        );
        // Keys an HTTP header would refuse are still usable by functions.
        assert_ne!(Call::new("ns", "订单 42").storage_key(), call.storage_key());
    }
}
