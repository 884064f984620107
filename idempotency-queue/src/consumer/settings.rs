//! Building an [`IdempotentConsumer`]: its constructors, settings and accessors.

use idempotency_core::{
    DEFAULT_IN_FLIGHT_WAIT, Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, Mechanism,
    Namespace, Scope, Store,
};

use super::{DEFAULT_MAX_DELIVERIES, IdempotentConsumer};
use crate::fingerprint::MessageFingerprint;
use crate::{Backoff, Handler, KeyExtractor, Message, OnConflict, Stats, Verdict};

impl<S: Store, K: KeyExtractor, H: Handler> IdempotentConsumer<S, K, H> {
    /// A consumer claiming keys found by `extractor` in `scope`, running `handler`.
    ///
    /// The fingerprint is the payload (the same key with another payload is rejected); the
    /// redelivery backoff is [`Backoff::default`]; a duplicate of a delivery still running
    /// waits for it up to [`DEFAULT_IN_FLIGHT_WAIT`] (5 s).
    ///
    /// A handler keeping its own record of truth ([`Handler::record_ttl`]) for less time than
    /// the engine's store keeps its records (TTL plus lease) is logged at ERROR here: build
    /// two-tier consumers with `two_tier::TwoTier` (feature `sql`), which refuses it.
    pub fn new(engine: Idempotency<S>, scope: Scope, extractor: K, handler: H) -> Self {
        #[cfg(feature = "sql")]
        if let Some(truth_ttl) = handler.record_ttl() {
            let config = engine.config();
            if let Err(error) =
                crate::two_tier::check_fast_tier(config.ttl, config.lease, truth_ttl)
            {
                tracing::error!(namespace = scope.namespace(), %error, "two-tier consumer misconfigured");
            }
        }
        Self::with_engine(Some(engine), scope, extractor, handler)
    }

    /// A consumer without a store of its own: every delivery goes to `handler`, whose own
    /// record of truth decides (`two_tier::TwoTier::sql_only`).
    #[cfg(feature = "sql")]
    pub(crate) fn without_fast_tier(scope: Scope, extractor: K, handler: H) -> Self {
        let mut consumer = Self::with_engine(None, scope, extractor, handler);
        consumer.guarded_handler = true;
        consumer
    }

    /// Whether the consumer defers to its handler is the handler's own say
    /// ([`Handler::guards_itself`]), never a setting of the consumer: a setting would let a
    /// wrapper that hides a guarding handler, or a handler that guards nothing, be declared
    /// guarded, and run unguarded whenever the fast tier cannot answer.
    fn with_engine(engine: Option<Idempotency<S>>, scope: Scope, extractor: K, handler: H) -> Self {
        let guarded_handler = handler.guards_itself();
        // A fast-tier claim in front of a guarding handler needs no renewal (no task per
        // message): a copy that meets it, live or not, goes to the handler's record.
        let unrenewed = |engine: Idempotency<S>| match engine.config().keep_alive_ceiling {
            ceiling if guarded_handler => engine.with_keep_alive(false, ceiling),
            _ => engine,
        };
        Self {
            engine: engine.map(unrenewed),
            in_flight: InFlightPolicy::wait(DEFAULT_IN_FLIGHT_WAIT),
            scope: for_messages(&scope),
            extractor,
            handler,
            fingerprint: MessageFingerprint::Payload,
            on_conflict: None,
            max_deliveries: Some(DEFAULT_MAX_DELIVERIES),
            backoff: Backoff::default(),
            guarded_handler,
            on_verdict: None,
            stats: Stats::default(),
        }
    }

    /// Fingerprints messages with `fingerprint` instead of the payload bytes.
    pub fn with_fingerprint(
        mut self,
        fingerprint: impl Fn(&Message) -> Fingerprint + Send + Sync + 'static,
    ) -> Self {
        self.fingerprint = MessageFingerprint::Custom(Box::new(fingerprint));
        self
    }

    /// Fingerprints messages by these fields of their JSON payload (JSON Pointers), canonical:
    /// field order, spacing and every other field do not matter, so a copy of the same event
    /// re-serialised, re-signed or re-timed (a new `notify_time`, `sign`) is a duplicate. The
    /// fields are those that identify the event (the trade, its status, its amount), with the
    /// same reading as the HTTP layer's `fingerprint_json_fields`. Numbers are fingerprinted
    /// exactly: an integer beyond 64 bits is refused (rejected, send it as a string). A
    /// payload that is not JSON is rejected
    /// ([`RejectReason::Payload`](crate::RejectReason::Payload)).
    ///
    /// A copy whose fields differ (same key) is acked as a conflict unless configured
    /// ([`on_conflict`](Self::on_conflict)).
    ///
    /// ```
    /// use idempotency_core::{Idempotency, MemoryStore, Scope};
    /// use idempotency_queue::{Action, IdempotentConsumer, Job, JsonField, Message, Verdict};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let consumer = IdempotentConsumer::new(
    ///     Idempotency::new(MemoryStore::new()),
    ///     Scope::new("trade-notify"),
    ///     JsonField::new("/trade_no"),
    ///     |job: Job| async move { Ok::<_, std::io::Error>(()) },
    /// )
    /// .fingerprint_json_fields(["/trade_no", "/trade_status", "/total_amount"]);
    /// let paid = r#"{"trade_no":"T1","trade_status":"TRADE_SUCCESS","total_amount":"8.80","sign":"a"}"#;
    /// let resent = r#"{"sign":"b","total_amount":"8.80","trade_status":"TRADE_SUCCESS","trade_no":"T1"}"#;
    /// let conflicting = r#"{"trade_no":"T1","trade_status":"TRADE_SUCCESS","total_amount":"9.99"}"#;
    /// assert!(matches!(consumer.process(Message::new(paid)).await, Verdict::Processed { .. }));
    /// assert!(matches!(consumer.process(Message::new(resent)).await, Verdict::Replayed { .. }));
    /// let conflict = consumer.process(Message::new(conflicting)).await;
    /// assert_eq!((conflict.clone(), conflict.action()), (Verdict::Conflict, Action::Ack));
    /// # }
    /// ```
    pub fn fingerprint_json_fields<P: Into<String>>(
        mut self,
        pointers: impl IntoIterator<Item = P>,
    ) -> Self {
        let pointers: Vec<String> = pointers.into_iter().map(Into::into).collect();
        self.fingerprint = MessageFingerprint::JsonFields(pointers.into());
        self
    }

    /// What a delivery gets whose key was first used with another fingerprint: acked as a
    /// conflict, logged and counted ([`OnConflict::Ack`], the default with
    /// [`fingerprint_json_fields`](Self::fingerprint_json_fields)), or dead-lettered
    /// ([`OnConflict::DeadLetter`], the default with the payload bytes or a function). Either
    /// way the handler does not run.
    pub fn on_conflict(mut self, on_conflict: OnConflict) -> Self {
        self.on_conflict = Some(on_conflict);
        self
    }

    /// Treats every delivery of a key as the same, whatever its payload (no mismatch check).
    pub fn fingerprint_key_only(self) -> Self {
        let empty = Fingerprint::of_bytes(b"");
        self.with_fingerprint(move |_| empty)
    }

    /// What a duplicate of a delivery still being handled gets (default: wait up to 5 s for
    /// the first, then ack it as a duplicate, or run it if the first failed): waiting spares
    /// the broker a requeue and the redelivery churn, at the cost of a consumer slot while it
    /// waits. [`InFlightPolicy::Reject`] requeues at once. With a guarded handler (two tiers)
    /// the handler's own record decides instead, waiting on the first one's transaction.
    pub fn with_in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.in_flight = policy;
        self
    }

    /// How many deliveries of a message whose handler fails are allowed (default
    /// [`DEFAULT_MAX_DELIVERIES`], 10): a failure on the last one dead-letters the message
    /// ([`RejectReason::Exhausted`](crate::RejectReason::Exhausted), with the handler's last
    /// error) instead of requeueing it forever. `None`: requeued as long as it fails. Only handler failures count towards it,
    /// never a store outage or a key in flight elsewhere.
    ///
    /// The count is the broker's: JetStream's `num_delivered`, RabbitMQ's `x-delivery-count`
    /// (quorum queues). A RabbitMQ classic queue counts nothing (it only flags a redelivery):
    /// use a quorum queue, or a `delivery-limit` policy, to bound poison messages there.
    pub fn with_max_deliveries(mut self, max: Option<u64>) -> Self {
        self.max_deliveries = max;
        self
    }

    /// Sets the delay for requeued failures (handler errors, store outages).
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Calls `observe` with each delivery's business key and verdict, once decided and before
    /// the broker is told: a log line or a metric of your own that names the key, which the
    /// library never logs (its spans and events carry the key's hash). Deliveries without a
    /// usable key are not observed (they are logged, counted and rejected). Keep it quick: it
    /// runs on the delivery's task.
    ///
    /// ```
    /// use idempotency_core::{Idempotency, MemoryStore, Scope};
    /// use idempotency_queue::{IdempotentConsumer, Job, Message, MessageId, Verdict};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let consumer = IdempotentConsumer::new(
    ///     Idempotency::new(MemoryStore::new()),
    ///     Scope::new("coupon-grant"),
    ///     MessageId,
    ///     |_job: Job| async { Ok::<_, std::io::Error>(()) },
    /// )
    /// .on_verdict(|key, verdict| {
    ///     if let Verdict::Replayed { .. } = verdict {
    ///         println!("{key}: duplicate, acked");
    ///     }
    /// });
    /// consumer.process(Message::new("paid").with_message_id("T1")).await;
    /// # }
    /// ```
    pub fn on_verdict(
        mut self,
        observe: impl Fn(&IdempotencyKey, &Verdict) + Send + Sync + 'static,
    ) -> Self {
        self.on_verdict = Some(Box::new(observe));
        self
    }

    /// The engine of the fast tier; `None` for a consumer without one (SQL only,
    /// `two_tier::TwoTier::sql_only`, feature `sql`).
    pub fn engine(&self) -> Option<&Idempotency<S>> {
        self.engine.as_ref()
    }

    /// The scope keys are claimed in: the one it was built with, for messages
    /// ([`Mechanism::Message`]).
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Verdict counters since the consumer was built.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

/// `scope` for messages ([`Mechanism::Message`]), its namespace prepared once: a message has one
/// storage key in both tiers, and the namespace's metric keys are not built per message.
fn for_messages(scope: &Scope) -> Scope {
    let prepared = Namespace::for_mechanism(Mechanism::Message, scope.namespace()).scope();
    match scope.principal() {
        Some(principal) => prepared.with_principal(principal),
        None => prepared,
    }
}
