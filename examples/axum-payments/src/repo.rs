//! The business state behind the routes, as a small trait each database implements once.

use idempotency_core::BoxFuture;

use super::model::{NewOrder, Order, OrderId, UserId};

/// What a state transition found, as the post-mortem's `update … where status = 'WAIT_PAY'` tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// The order was in the expected state and moved: run the side effects (they ran, inside the
    /// same atomic step, for [`PaymentsRepo::pay`]).
    Applied(Order),
    /// The order was already in the target state: a duplicate, an idempotent success, no side
    /// effect runs again.
    AlreadyInTarget(Order),
    /// The order is in a state the transition does not start from: a real anomaly, to be logged
    /// and alerted on. Carries the order as it is.
    Illegal(Order),
    /// No such order.
    NotFound,
}

/// A repository failure (the database is down, a query failed).
#[derive(Debug, thiserror::Error)]
#[error("payments repository: {0}")]
pub struct RepoError(pub String);

/// Orders and coupons.
///
/// The in-process implementation is [`MemoryRepo`](super::MemoryRepo). SQL implementations keep
/// orders, coupons and the dedup record in one database, so [`pay`](Self::pay) can apply the
/// transition, grant the coupon and write the dedup record in one transaction.
///
/// Object safe, so a repository chosen at run time is an `Arc<dyn PaymentsRepo>`.
pub trait PaymentsRepo: Send + Sync + 'static {
    /// Creates an order in `WAIT_PAY`.
    fn create_order(&self, new: NewOrder) -> BoxFuture<'_, Result<Order, RepoError>>;

    /// Reads an order.
    fn order(&self, order_id: OrderId) -> BoxFuture<'_, Result<Option<Order>, RepoError>>;

    /// The payment transition `WAIT_PAY → PAID`, as one atomic step: when (and only when) it is
    /// [`Transition::Applied`], the order records `trade_no` and its user is granted exactly one
    /// coupon in the same step.
    fn pay<'a>(
        &'a self,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Transition, RepoError>>;

    /// The transition `WAIT_PAY → CANCELLED`.
    fn cancel(&self, order_id: OrderId) -> BoxFuture<'_, Result<Transition, RepoError>>;

    /// Grants one coupon unconditionally. Only the incident's naive handler calls this directly;
    /// the real handler grants through [`pay`](Self::pay).
    fn grant_coupon(&self, user_id: UserId) -> BoxFuture<'_, Result<(), RepoError>>;

    /// Sets the order to `PAID` whatever its state (`update orders set status = 'PAID' where
    /// id = ?`, no state check) and returns it. Only the incident's naive handler calls this.
    fn mark_paid_unchecked<'a>(
        &'a self,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Option<Order>, RepoError>>;

    /// How many coupons `user_id` holds.
    fn coupon_count(&self, user_id: UserId) -> BoxFuture<'_, Result<u64, RepoError>>;
}
