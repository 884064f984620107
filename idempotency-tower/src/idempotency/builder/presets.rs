//! The builder's callback preset, and how a preset fills in the settings the user did not
//! choose, before or after applying it (the gRPC preset is in `grpc`).

use idempotency_core::{DEFAULT_IN_FLIGHT_WAIT, InFlightPolicy, Store};

use super::IdempotencyLayerBuilder;
use crate::callback::{Callback, ConflictAnswer, PER_ATTEMPT_FIELDS};
use crate::fingerprint::FingerprintSource;
use crate::idempotency::config::{Choice, Settings};
use crate::policy::StoragePolicy;

impl<S: Store, C> IdempotencyLayerBuilder<S, C> {
    /// The **callback preset**, for a payment gateway's notifications. `notification` names
    /// what identifies one ([`Callback`]; a plain JSON Pointer such as `"/trade_no"` is the key
    /// alone):
    ///
    /// - the key is the notification's key field, plus its status field if named, so a refund
    ///   or `TRADE_FINISHED` notice for a trade is not a duplicate of its payment notice;
    /// - the fingerprint covers the named business fields (canonical JSON), else the whole body
    ///   less the gateway's per-attempt fields ([`PER_ATTEMPT_FIELDS`]: `sign`, `notify_time`…),
    ///   so a re-signed, re-timed or re-serialised retry is a duplicate and gets the stored
    ///   success;
    /// - a conflicting notification (same key, another fingerprint: another amount) gets the
    ///   stored success too, logged at WARN and counted ([`ConflictAnswer::ReplayStored`]; a 422
    ///   would make the gateway retry for a day); `.on_conflict(ConflictAnswer::Reject)` refuses
    ///   it instead;
    /// - only 2xx answers are stored ([`StoragePolicy::SuccessOnly`]), so a callback answered
    ///   404 (the order not committed yet) or 400 releases its key and the gateway's retry runs
    ///   again;
    /// - a duplicate in flight waits for the first ([`DEFAULT_IN_FLIGHT_WAIT`], 5 s) and gets its
    ///   answer.
    ///
    /// Settings made on the builder, before or after, are kept. A gateway's callbacks share one
    /// scope ([`shared_scope`](Self::shared_scope)); add [`verify`](Self::verify) for the
    /// gateway's signature.
    ///
    /// ```
    /// use idempotency_core::MemoryStore;
    /// use idempotency_tower::{Callback, IdempotencyLayer};
    ///
    /// // Alipay-style: one trade, several notices (paid, finished, refunded).
    /// let layer = IdempotencyLayer::builder(MemoryStore::new())
    ///     .namespace("payments.callback")
    ///     .callback(
    ///         Callback::key("/out_trade_no")
    ///             .status("/trade_status")
    ///             .fields(["/total_amount", "/refund_fee"]),
    ///     )
    ///     .shared_scope() // the gateway is the only caller; add `.verify(..)` for its signature
    ///     .build();
    /// # let _ = layer;
    /// ```
    pub fn callback(mut self, notification: impl Into<Callback>) -> Self {
        let Callback {
            key,
            status,
            fields,
        } = notification.into();
        self = self.key_from_json(key);
        self.settings.key_status = status;
        match fields {
            Some(fields) => self = self.fingerprint(FingerprintSource::JsonFields(fields)),
            None if !self.settings.explicit.has(Choice::Fingerprint) => {
                let left_out: Vec<String> = PER_ATTEMPT_FIELDS
                    .iter()
                    .map(|&name| name.to_owned())
                    .collect();
                self.settings.fingerprint = FingerprintSource::JsonBodyWithout(left_out.into());
            }
            None => {}
        }
        self.preset(Choice::Storage, |s| s.storage = StoragePolicy::SuccessOnly);
        self.preset(Choice::Conflicts, |s| {
            s.on_conflict = ConflictAnswer::ReplayStored;
        });
        self.preset(Choice::InFlight, |s| {
            s.in_flight = InFlightPolicy::Wait {
                max: DEFAULT_IN_FLIGHT_WAIT,
            };
        });
        self
    }

    /// Applies a preset's value of a setting the user did not choose.
    pub(super) fn preset(&mut self, choice: Choice, apply: impl FnOnce(&mut Settings)) {
        if !self.settings.explicit.has(choice) {
            apply(&mut self.settings);
        }
    }
}
