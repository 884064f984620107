//! The side effect hangs off the transition: a state-machine transition and the outbox message
//! it causes, in one call inside the caller's transaction.

use idempotency_core::StoreError;
use idempotency_sql::InTransaction;
use idempotency_sql::{Transition, TransitionOutcome};

use super::{Outbox, OutboxMessage};

/// Applies `transition` to row `id` and, only when it applied, enqueues `message`, both in
/// the caller's transaction: the message commits exactly when the state change does, and a
/// repeat (`AlreadyInTarget`), an illegal transition or an unknown row enqueues nothing.
macro_rules! enqueue_if_applied {
    ($database:ty, $feature:literal, $apply:ident, $example:literal) => {
        #[cfg(feature = $feature)]
        impl Outbox<$database> {
            /// Applies `transition` to the row `id` in `tx` and, only if it
            /// [applied](TransitionOutcome::Applied), enqueues `message` in the same
            /// transaction: one call, so the side effect cannot be enqueued for a repeated
            /// callback (`AlreadyInTarget`), an illegal transition or an unknown row, and
            /// commits or rolls back with the state change. A message whose id is already in
            /// the outbox (not purged yet) is not added again. The transition's outcome.
            ///
            #[doc = $example]
            pub async fn enqueue_if_applied<T, I>(
                &self,
                tx: &mut T,
                transition: &Transition,
                id: I,
                message: &OutboxMessage,
            ) -> Result<TransitionOutcome, StoreError>
            where
                T: InTransaction<$database> + ?Sized,
                I: for<'q> sqlx::Encode<'q, $database> + sqlx::Type<$database> + Send + Clone,
            {
                let outcome = transition.$apply(tx.connection(), id).await?;
                if outcome.is_applied() {
                    self.enqueue(tx, message).await?;
                }
                Ok(outcome)
            }
        }
    };
}

enqueue_if_applied!(
    sqlx::Postgres,
    "postgres",
    apply_postgres,
    r##"```no_run
# async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
use idempotency_outbox::{Outbox, OutboxMessage};
use idempotency_sql::{Transition, TransitionOutcome};
use idempotency_core::{IdempotencyKey, Scope};

let outbox = Outbox::postgres(pool.clone());
let mark_paid = Transition::new("orders", "trade_no", "status")?.from("WAIT_PAY").to("PAID");
let trade = IdempotencyKey::parse("T1")?;
let grant = OutboxMessage::new(&Scope::new("coupon.grant"), &trade, "coupon.grant", br#"{"trade_no":"T1"}"#.to_vec());
let mut tx = pool.begin().await?;
let outcome = outbox.enqueue_if_applied(&mut tx, &mark_paid, trade.as_str(), &grant).await?;
tx.commit().await?;
assert!(outcome.is_success(), "{outcome:?}");
# Ok(()) }
```"##
);
enqueue_if_applied!(
    sqlx::MySql,
    "mysql",
    apply_mysql,
    "On MySQL/MariaDB, as on PostgreSQL (`Outbox::postgres`'s example)."
);
enqueue_if_applied!(
    sqlx::Sqlite,
    "sqlite",
    apply_sqlite,
    "On SQLite, in a transaction begun with `BEGIN IMMEDIATE` (as `Outbox::sqlite`'s `enqueue`)."
);
