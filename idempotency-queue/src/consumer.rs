//! The broker-agnostic consumer step: key → claim → handle → complete → verdict.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use idempotency_core::{
    Decision, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, Mechanism, Outcome, Scope,
    Store, telemetry,
};
use tracing::Instrument;

mod settings;

use crate::fingerprint::{CONFLICTS, MessageFingerprint};
use crate::{
    Backoff, Handled, Handler, Job, KeyExtractor, Message, OnConflict, RejectReason, Stats, Verdict,
};

/// How many times a message whose handler keeps failing is delivered before it is
/// dead-lettered ([`IdempotentConsumer::with_max_deliveries`]).
pub const DEFAULT_MAX_DELIVERIES: u64 = 10;

/// Counter of deliveries by verdict, labelled `namespace` and `verdict` ([`Verdict::label`]).
pub const DELIVERIES: &str = "idempotency_queue_deliveries_total";

tokio::task_local! {
    /// Whether the consumer running the current handler defers to it where its own store
    /// cannot answer ([`Handler::guards_itself`]).
    static DEFERS_TO_HANDLER: bool;
}

/// Whether the consumer running the current task's handler defers to it (`None` outside a
/// consumer's handler, or in a task the handler spawned). Read by the SQL truth (`sql`).
#[cfg_attr(not(feature = "sql"), allow(dead_code))]
pub(crate) fn defers_to_handler() -> Option<bool> {
    DEFERS_TO_HANDLER.try_with(|defers| *defers).ok()
}

/// Runs a handler at most once per business key over at-least-once deliveries.
///
/// For each delivery: extract the business key → claim it in the engine's store → run the
/// handler → store the outcome → tell the broker ([`Verdict::action`]):
///
/// | situation | verdict | broker |
/// |---|---|---|
/// | first delivery, handler `Ok` | [`Verdict::Processed`] | ack |
/// | key already completed | [`Verdict::Replayed`], with the first run's output | ack, handler not run |
/// | key held by a running consumer | waits for it (up to 5 s, [`with_in_flight`](Self::with_in_flight)), then as it ended: [`Verdict::Replayed`], or runs if it failed; still running → [`Verdict::InFlight`] | ack, or requeue after a delay |
/// | handler `Err` or panic | [`Verdict::Failed`] | key released, requeue with backoff |
/// | handler `Err` on the last delivery allowed ([`with_max_deliveries`](Self::with_max_deliveries), 10) | [`Verdict::Rejected`] ([`RejectReason::Exhausted`]) | key released, dead-lettered |
/// | key used before with other fingerprinted fields | [`Verdict::Conflict`] ([`OnConflict::Ack`]) or [`Verdict::Rejected`] ([`OnConflict::DeadLetter`]), see [`on_conflict`](Self::on_conflict) | ack, or reject |
/// | store unreachable | [`Verdict::StoreUnavailable`] | requeue with backoff, handler not run |
/// | no key, or a payload the fingerprint or the handler cannot read | [`Verdict::Rejected`] | reject |
///
/// ```
/// use idempotency_core::{Idempotency, MemoryStore, Scope};
/// use idempotency_queue::{Handled, Header, IdempotentConsumer, Job, Message, Verdict};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let consumer = IdempotentConsumer::new(
///     Idempotency::new(MemoryStore::new()),
///     Scope::new("coupon-grant"),
///     Header::new("business-key"),
///     |job: Job| async move {
///         println!("granting a coupon for {}", job.key);
///         Ok::<_, std::io::Error>(Handled::Output("coupon 7".into()))
///     },
/// );
/// let message = Message::new("order 42").with_header("business-key", "T42");
/// let first = consumer.process(message.clone()).await;
/// assert!(matches!(first, Verdict::Processed { recorded: true, .. }));
/// // The duplicate is acked without running the handler, with the first run's output.
/// let duplicate = consumer.process(message).await;
/// assert!(matches!(duplicate, Verdict::Replayed { .. }));
/// assert_eq!(duplicate.output(), first.output());
/// # }
/// ```
pub struct IdempotentConsumer<S: Store, K, H> {
    /// The fast tier; `None` for a consumer whose handler's own record decides alone.
    engine: Option<Idempotency<S>>,
    scope: Scope,
    in_flight: InFlightPolicy,
    extractor: K,
    handler: H,
    fingerprint: MessageFingerprint,
    on_conflict: Option<OnConflict>,
    max_deliveries: Option<u64>,
    backoff: Backoff,
    guarded_handler: bool,
    on_verdict: Option<OnVerdict>,
    stats: Stats,
}

/// What [`IdempotentConsumer::on_verdict`] calls.
type OnVerdict = Box<dyn Fn(&IdempotencyKey, &Verdict) + Send + Sync>;

impl<S: Store, K, H> std::fmt::Debug for IdempotentConsumer<S, K, H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotentConsumer")
            .field("scope", &self.scope)
            .field("backoff", &self.backoff)
            .field("guarded_handler", &self.guarded_handler)
            .finish_non_exhaustive()
    }
}

impl<S: Store, K: KeyExtractor, H: Handler> IdempotentConsumer<S, K, H> {
    /// Decides one delivery: runs the handler if it is the first for its key. The caller (a
    /// broker adapter) acts on [`Verdict::action`].
    pub async fn process(&self, message: Message) -> Verdict {
        let span = telemetry::message_span(self.scope.namespace(), message.subject());
        let mut observed = None;
        let verdict = self.decide(message, &mut observed).instrument(span).await;
        if let (Some(observe), Some(key)) = (&self.on_verdict, &observed) {
            observe(key, &verdict);
        }
        self.stats.record(&verdict);
        metrics::counter!(DELIVERIES, "namespace" => self.scope.namespace().to_owned(), "verdict" => verdict.label())
            .increment(1);
        tracing::debug!(namespace = self.scope.namespace(), %verdict, "delivery settled");
        verdict
    }

    /// The verdict of one delivery; its key goes to `observed` when [`on_verdict`](Self::on_verdict)
    /// asks for it.
    async fn decide(&self, message: Message, observed: &mut Option<IdempotencyKey>) -> Verdict {
        let key = match self.extractor.extract(&message) {
            Ok(key) => key,
            Err(error) => {
                telemetry::record_current(telemetry::ERROR_TYPE, "invalid_key");
                tracing::warn!(namespace = self.scope.namespace(), %error, "message without a usable business key");
                return Verdict::Rejected(RejectReason::Key(error));
            }
        };
        if let Some(id) = message.message_id() {
            telemetry::record_message_id(id, key.as_str());
        }
        if self.on_verdict.is_some() {
            *observed = Some(key.clone());
        }
        let delivery = delivery_number(&message);
        let fingerprint = match self.fingerprint.compute(&message) {
            Ok(fingerprint) => fingerprint,
            Err(reason) => {
                tracing::warn!(namespace = self.scope.namespace(), %reason, "message that cannot be fingerprinted");
                return Verdict::Rejected(RejectReason::Payload(reason));
            }
        };
        let Some(engine) = &self.engine else {
            // One tier: the handler's record decides everything.
            return self
                .run_guarded_without_claim(key, message, fingerprint, delivery)
                .await;
        };
        // With two tiers the truth waits, on the first one's transaction: the fast tier only
        // answers at once.
        let in_flight = if self.guarded_handler {
            InFlightPolicy::Reject
        } else {
            self.in_flight
        };
        // Keyed as a message, as the truth keys it: one storage key in both tiers.
        let claim = engine.claim(&self.scope, &key, &fingerprint, in_flight);
        let execution = match claim.await {
            Ok(Decision::Execute(execution)) => execution,
            Ok(Decision::Replay(outcome)) => {
                return Verdict::Replayed {
                    output: outcome.body,
                };
            }
            Ok(Decision::InFlight { .. }) if self.guarded_handler => {
                // A pending claim (the first copy's, committed or not) or a live one: the
                // truth knows whether the work committed, and waits if it is running. What it
                // settled completes the fast tier's claim, for the next copies.
                let storage_key = self.scope.storage_key(&key);
                let verdict = self
                    .run_guarded_without_claim(key, message, fingerprint, delivery)
                    .await;
                if let Verdict::Processed { output, .. } | Verdict::AlreadyDone { output } =
                    &verdict
                {
                    crate::fast_tier::settle(engine, &storage_key, &fingerprint, output).await;
                }
                return verdict;
            }
            Ok(Decision::InFlight { retry_after }) => return Verdict::InFlight { retry_after },
            Ok(Decision::Mismatch) => {
                self.mark_conflict(engine, &key).await;
                return self.conflict();
            }
            Err(error) if self.guarded_handler => {
                tracing::warn!(namespace = self.scope.namespace(), %error, "fast-path store failed; the guarded handler decides");
                return self
                    .run_guarded_without_claim(key, message, fingerprint, delivery)
                    .await;
            }
            Err(error) => {
                return Verdict::StoreUnavailable {
                    retry_after: self.backoff.delay(delivery.number),
                    error: error.to_string(),
                };
            }
        };
        let storage_key = *execution.key();
        let job = Job {
            key,
            message,
            fingerprint,
            lease: Some(execution.lease()),
        };
        match self.run_handler(job).await {
            Ok(handled @ (Handled::Done | Handled::Output(_) | Handled::AlreadyDone(_))) => {
                // What the work produced (now, or the first time per the handler's own record):
                // the key's outcome on this tier too.
                let body = match &handled {
                    Handled::Output(body) | Handled::AlreadyDone(body) => body.clone(),
                    _ => bytes::Bytes::new(),
                };
                // Two tiers, the work just committed with its truth: the claim stays pending,
                // one round trip for the message (the first copy settles it).
                if self.guarded_handler && !matches!(handled, Handled::AlreadyDone(_)) {
                    execution.leave_pending();
                    return self.verdict(Ok(handled), false, delivery);
                }
                // A transient failure is retried by the engine in the background; the message
                // is acked either way, since redelivering it would run the work again.
                let recorded = match execution.complete(Outcome::new(0, body)).await {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(namespace = self.scope.namespace(), key = %storage_key, %error, "work done but its outcome is not stored yet; acking anyway");
                        false
                    }
                };
                self.verdict(Ok(handled), recorded, delivery)
            }
            answer => {
                // A failure, or the handler's own record refused the key (another payload,
                // another owner, an unreadable payload): give the key back, so that this claim
                // never answers for the handler's record in the fast path.
                if let Err(release) = execution.release().await {
                    tracing::warn!(namespace = self.scope.namespace(), %release, "could not release the key; it frees when its lease ends");
                }
                self.verdict(answer, false, delivery)
            }
        }
    }

    async fn run_guarded_without_claim(
        &self,
        key: IdempotencyKey,
        message: Message,
        fingerprint: Fingerprint,
        delivery: Attempt,
    ) -> Verdict {
        let job = Job {
            key,
            message,
            fingerprint,
            lease: None,
        };
        let answer = self.run_handler(job).await;
        self.verdict(answer, false, delivery)
    }

    /// The verdict of the handler's answer (`recorded`: its outcome is in the engine's store).
    fn verdict(
        &self,
        answer: Result<Handled, String>,
        recorded: bool,
        delivery: Attempt,
    ) -> Verdict {
        match answer {
            Ok(Handled::Done) => Verdict::Processed {
                recorded,
                output: bytes::Bytes::new(),
            },
            Ok(Handled::Output(output)) => Verdict::Processed { recorded, output },
            Ok(Handled::AlreadyDone(output)) => Verdict::AlreadyDone { output },
            Ok(Handled::Mismatch) => self.conflict(),
            Ok(Handled::InFlight { retry_after }) => Verdict::InFlight { retry_after },
            Ok(Handled::Invalid(reason)) => Verdict::Rejected(RejectReason::Payload(reason)),
            Err(error) => match (self.max_deliveries, delivery.counted) {
                (Some(max), Some(deliveries)) if deliveries >= max => {
                    tracing::warn!(namespace = self.scope.namespace(), deliveries, %error, "handler failed on the last allowed delivery; dead-lettered");
                    Verdict::Rejected(RejectReason::Exhausted { deliveries, error })
                }
                _ => Verdict::Failed {
                    retry_after: self.backoff.delay(delivery.number),
                    error,
                },
            },
        }
    }

    /// Marks the records a conflicting copy met, whatever its verdict: the fast tier's and,
    /// through the handler, its own record of truth (two tiers). Failures are logged and
    /// change no verdict.
    async fn mark_conflict(&self, engine: &Idempotency<S>, key: &IdempotencyKey) {
        // Keyed as a message, as the claim keys it; under the previous derivation's key (a
        // request's) where the engine reads previous keys and the message is not found.
        let storage_key = self.scope.storage_key(key);
        let timeout = engine.config().store_timeout;
        let fast = async {
            let mark = async {
                let marked = engine.store().mark_conflict(&storage_key).await;
                if matches!(marked, Ok(false)) && engine.config().previous_keys {
                    return engine
                        .store()
                        .mark_conflict(
                            &self.scope.storage_key_for(Mechanism::Request, key.as_str()),
                        )
                        .await;
                }
                marked
            };
            let marked = tokio::time::timeout(timeout, mark).await;
            let error = match marked {
                Ok(Ok(_)) => return,
                Ok(Err(error)) => error.to_string(),
                Err(_) => format!("no answer within {timeout:?}"),
            };
            tracing::warn!(namespace = self.scope.namespace(), record = %storage_key.to_hex(), %error, "the conflict could not be marked on its record");
        };
        tokio::join!(fast, self.handler.mark_conflict(key));
    }

    /// The verdict of a copy whose key was first used with another fingerprint.
    fn conflict(&self) -> Verdict {
        let on_conflict = self
            .on_conflict
            .unwrap_or_else(|| self.fingerprint.default_on_conflict());
        match on_conflict {
            OnConflict::DeadLetter => Verdict::Rejected(RejectReason::Mismatch),
            OnConflict::Ack => {
                metrics::counter!(CONFLICTS, "namespace" => self.scope.namespace().to_owned())
                    .increment(1);
                tracing::warn!(
                    namespace = self.scope.namespace(),
                    "business key already used with other fingerprinted fields; not run, acked as a duplicate"
                );
                Verdict::Conflict
            }
        }
    }

    async fn run_handler(&self, job: Job) -> Result<Handled, String> {
        let handled = DEFERS_TO_HANDLER.scope(self.guarded_handler, self.handler.handle(job));
        match AssertUnwindSafe(handled).catch_unwind().await {
            Ok(Ok(handled)) => Ok(handled),
            Ok(Err(error)) => {
                telemetry::record_current(telemetry::ERROR_TYPE, "handler_error");
                Err(error.to_string())
            }
            Err(_) => {
                telemetry::record_current(telemetry::ERROR_TYPE, "handler_panic");
                tracing::error!(namespace = self.scope.namespace(), "handler panicked");
                Err("handler panicked".to_owned())
            }
        }
    }
}

/// Which delivery of its message this is.
#[derive(Clone, Copy, Debug)]
struct Attempt {
    /// The delivery number (1 for the first) as far as the broker tells (2 for a redelivery
    /// of unknown count).
    number: u64,
    /// The number, when the broker counts deliveries (JetStream, RabbitMQ quorum queues).
    counted: Option<u64>,
}

/// Which delivery of its message `message` is.
fn delivery_number(message: &Message) -> Attempt {
    let counted = message.delivery_count().map(|count| count.max(1));
    Attempt {
        number: counted.unwrap_or(if message.redelivered() { 2 } else { 1 }),
        counted,
    }
}
