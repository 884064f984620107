//! SQL repositories: orders and coupons in the same database as the idempotency records.
//!
//! With transactional HTTP (`super::transactional`), the two guarded routes run their writes
//! through [`SqlPayments`], on the connection of the request's own transaction: the layer
//! claims the key in that transaction, the handler applies the `WAIT_PAY → PAID` transition
//! ([`idempotency_sql::Transition`]) and grants the coupon only when it applied, and the
//! layer stores the answer as the key's record and commits: the record and the business writes
//! commit or roll back together (the post-mortem's iron rule: same database, same transaction).
//! The state machine is the second guard: a payment with another trade number for a paid order
//! is "already PAID", and grants nothing.

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "mysql")]
pub use mysql::MySqlRepo;
#[cfg(feature = "postgres")]
pub use postgres::PostgresRepo;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteRepo;

use idempotency_core::BoxFuture;
use idempotency_sql::{TransitionOutcome, validate_identifier};

use super::model::{NewOrder, Order, OrderId, OrderStatus};
use super::repo::{PaymentsRepo, RepoError, Transition};

/// The business writes of the two guarded routes, on the connection of a transaction the
/// caller owns (the request's, with transactional HTTP): nothing here commits.
pub trait SqlPayments<DB: sqlx::Database>: PaymentsRepo {
    /// Creates an order in `WAIT_PAY`.
    fn create_order_on<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        new: NewOrder,
    ) -> BoxFuture<'a, Result<Order, RepoError>>;

    /// The payment transition `WAIT_PAY → PAID`; when it applies, the order records
    /// `trade_no` and its user is granted one coupon, on the same connection.
    fn pay_on<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Transition, RepoError>>;

    /// The checkout's `reserve`: `WAIT_PAY → RESERVED` (already reserved is fine); the order's
    /// user and amount, `None` if no order can be reserved (unknown, paid or cancelled).
    fn reserve_on<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        order_id: i64,
    ) -> BoxFuture<'a, Result<Option<Reserved>, RepoError>>;

    /// Undoes [`reserve_on`](Self::reserve_on): `RESERVED → WAIT_PAY`.
    fn unreserve_on<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        order_id: i64,
    ) -> BoxFuture<'a, Result<(), RepoError>>;

    /// The checkout's `grant`: `RESERVED → PAID` with the capture as the trade number, and one
    /// coupon for the order's user; the coupon's id.
    fn grant_on<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        reserved: &'a Reserved,
        capture_id: &'a str,
    ) -> BoxFuture<'a, Result<i64, RepoError>>;
}

/// A reserved order, as the checkout's later steps need it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Reserved {
    /// The order.
    pub order_id: i64,
    /// Its user, who gets the coupon.
    pub user_id: i64,
    /// What the provider captures.
    pub amount_cents: i64,
}

/// The default table prefix: tables `payments_orders` and `payments_coupons`.
pub const DEFAULT_TABLE_PREFIX: &str = "payments_";

/// An order row: id, user, amount, status, trade number.
type OrderRow = (i64, i64, i64, String, Option<String>);

/// The columns of [`OrderRow`], in order.
const ORDER_COLUMNS: &str = "order_id, user_id, amount_cents, status, trade_no";

fn repo_err(error: impl std::fmt::Display) -> RepoError {
    RepoError(error.to_string())
}

fn table_names(prefix: &str) -> Result<(String, String), RepoError> {
    let orders = format!("{prefix}orders");
    let coupons = format!("{prefix}coupons");
    validate_identifier(&orders).map_err(repo_err)?;
    validate_identifier(&coupons).map_err(repo_err)?;
    Ok((orders, coupons))
}

fn to_i64(id: u64) -> Result<i64, RepoError> {
    i64::try_from(id).map_err(|_| RepoError(format!("id {id} does not fit a BIGINT")))
}

fn to_u64(value: i64) -> Result<u64, RepoError> {
    u64::try_from(value).map_err(|_| RepoError(format!("negative value {value} in the database")))
}

fn to_order(
    (order_id, user_id, amount_cents, status, trade_no): OrderRow,
) -> Result<Order, RepoError> {
    Ok(Order {
        order_id: to_u64(order_id)?,
        user_id: to_u64(user_id)?,
        amount_cents: to_u64(amount_cents)?,
        status: OrderStatus::parse(&status)
            .ok_or_else(|| RepoError(format!("unknown order status {status:?}")))?,
        trade_no,
    })
}

/// What a transition found, with the order as it is after it.
fn transition_of(outcome: TransitionOutcome, order: Option<Order>) -> Transition {
    match (outcome, order) {
        (_, None) | (TransitionOutcome::NotFound, _) => Transition::NotFound,
        (TransitionOutcome::Applied, Some(order)) => Transition::Applied(order),
        (TransitionOutcome::AlreadyInTarget, Some(order)) => Transition::AlreadyInTarget(order),
        (TransitionOutcome::Illegal { .. }, Some(order)) => Transition::Illegal(order),
    }
}
