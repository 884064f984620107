//! SQL repositories: orders, coupons and the callback's dedup record in one database.
//!
//! `pay` runs one transaction: it claims the trade number in the dedup table
//! ([`TxStore::claim_in_tx`](idempotency_core::sql::TxStore::claim_in_tx), namespace
//! [`LEDGER_NAMESPACE`]), applies the `WAIT_PAY → PAID` transition
//! ([`idempotency_core::sql::Transition`]), grants the coupon only when the transition applied,
//! completes the dedup record and commits: the record and the business writes commit or roll
//! back together (the seed's iron rule: same database, same transaction). The state machine is
//! the main guard, the dedup record the reconciliation trail of every trade.

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

use idempotency_core::sql::{TxClaim, validate_identifier};
use idempotency_core::{Fingerprint, IdempotencyKey, Scope};

use super::model::{Order, OrderId, OrderStatus};
use super::repo::{PaymentsRepo, RepoError, Transition};

/// The namespace of the dedup records `pay` writes in its transaction (one per trade number).
pub const LEDGER_NAMESPACE: &str = "payments.callback.ledger";

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

fn ledger_scope() -> Scope {
    Scope::new(LEDGER_NAMESPACE)
}

fn ledger_key(trade_no: &str) -> Result<IdempotencyKey, RepoError> {
    IdempotencyKey::parse(trade_no).map_err(|error| RepoError(format!("trade_no: {error}")))
}

/// What the trade pays: the same trade number for another order is a mismatch.
fn ledger_fingerprint(order_id: OrderId) -> Fingerprint {
    Fingerprint::builder()
        .field(b"order_id", &order_id.to_be_bytes())
        .finish()
}

/// The answer when the dedup claim did not hand this transaction the trade.
async fn without_ledger(
    repo: &dyn PaymentsRepo,
    order_id: OrderId,
    claim: TxClaim,
) -> Result<Transition, RepoError> {
    match claim {
        TxClaim::Execute(_) => Err(RepoError("internal: an acquired claim was dropped".into())),
        TxClaim::Replay(_) => Ok(match repo.order(order_id).await? {
            Some(order) => Transition::AlreadyInTarget(order),
            None => Transition::NotFound,
        }),
        TxClaim::Mismatch => {
            tracing::error!(order_id, "trade number already used for another order");
            Ok(match repo.order(order_id).await? {
                Some(order) => Transition::Illegal(order),
                None => Transition::NotFound,
            })
        }
        TxClaim::InFlight { retry_after } => Err(RepoError(format!(
            "the trade is being processed; retry in {retry_after:?}"
        ))),
    }
}
