//! Orders, coupons and the dedup record in PostgreSQL.

use idempotency_core::sql::{
    PostgresStore, Transition as StateTransition, TransitionOutcome, TxClaim, TxStore,
};
use idempotency_core::{BoxFuture, Outcome};
use sqlx::{PgConnection, PgPool};

use super::{
    ORDER_COLUMNS, OrderRow, ledger_fingerprint, ledger_key, ledger_scope, repo_err, table_names,
    to_i64, to_order, to_u64, without_ledger,
};
use crate::payments::model::{NewOrder, Order, OrderId, UserId};
use crate::payments::repo::{PaymentsRepo, RepoError, Transition};

/// [`PaymentsRepo`] on PostgreSQL, sharing the database (and `pay`'s transaction) with the
/// [`PostgresStore`] dedup records.
#[derive(Clone, Debug)]
pub struct PostgresRepo {
    pool: PgPool,
    store: PostgresStore,
    orders: String,
    coupons: String,
    pay: StateTransition,
    cancel: StateTransition,
}

impl PostgresRepo {
    /// Creates the tables `{prefix}orders` and `{prefix}coupons` if missing. `store` must live
    /// in the same database as `pool` (its table migrated).
    pub async fn new(pool: PgPool, store: PostgresStore, prefix: &str) -> Result<Self, RepoError> {
        let (orders, coupons) = table_names(prefix)?;
        for ddl in [
            format!(
                "CREATE TABLE IF NOT EXISTS \"{orders}\" (order_id BIGSERIAL PRIMARY KEY, \
                 user_id BIGINT NOT NULL, amount_cents BIGINT NOT NULL, status TEXT NOT NULL, \
                 trade_no TEXT)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS \"{coupons}\" (coupon_id BIGSERIAL PRIMARY KEY, \
                 user_id BIGINT NOT NULL, order_id BIGINT)"
            ),
            format!("CREATE INDEX IF NOT EXISTS \"{coupons}_user\" ON \"{coupons}\" (user_id)"),
        ] {
            sqlx::query(&ddl).execute(&pool).await.map_err(repo_err)?;
        }
        let transition = |to: &str| {
            StateTransition::new(&orders, "order_id", "status")
                .map(|t| t.from("WAIT_PAY").to(to))
                .map_err(repo_err)
        };
        Ok(Self {
            pay: transition("PAID")?,
            cancel: transition("CANCELLED")?,
            pool,
            store,
            orders,
            coupons,
        })
    }

    async fn fetch(&self, conn: &mut PgConnection, id: i64) -> Result<Option<Order>, RepoError> {
        let sql = format!(
            "SELECT {ORDER_COLUMNS} FROM \"{}\" WHERE order_id = $1",
            self.orders
        );
        let row: Option<OrderRow> = sqlx::query_as(&sql)
            .bind(id)
            .fetch_optional(conn)
            .await
            .map_err(repo_err)?;
        row.map(to_order).transpose()
    }

    async fn pay_in_tx(&self, order_id: OrderId, trade_no: &str) -> Result<Transition, RepoError> {
        let id = to_i64(order_id)?;
        let key = ledger_key(trade_no)?;
        let mut tx = self.pool.begin().await.map_err(repo_err)?;
        let claim = self
            .store
            .claim_in_tx(
                &mut tx,
                &ledger_scope(),
                &key,
                &ledger_fingerprint(order_id),
            )
            .await
            .map_err(repo_err)?;
        let lease = match claim {
            TxClaim::Execute(lease) => lease,
            other => {
                drop(tx);
                return without_ledger(self, order_id, other).await;
            }
        };
        let outcome = self
            .pay
            .apply_postgres(&mut *tx, id)
            .await
            .map_err(repo_err)?;
        let answer = match outcome {
            TransitionOutcome::Applied => {
                let sql = format!(
                    "UPDATE \"{}\" SET trade_no = $2 WHERE order_id = $1 RETURNING user_id",
                    self.orders
                );
                let (user_id,): (i64,) = sqlx::query_as(&sql)
                    .bind(id)
                    .bind(trade_no)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(repo_err)?;
                let sql = format!(
                    "INSERT INTO \"{}\" (user_id, order_id) VALUES ($1, $2)",
                    self.coupons
                );
                sqlx::query(&sql)
                    .bind(user_id)
                    .bind(id)
                    .execute(&mut *tx)
                    .await
                    .map_err(repo_err)?;
                Outcome::new(200, "paid")
            }
            TransitionOutcome::AlreadyInTarget => Outcome::new(200, "already paid"),
            TransitionOutcome::Illegal { .. } => {
                let order = self.fetch(&mut tx, id).await?;
                // Rolled back: no dedup record, so a retry is judged again.
                drop(tx);
                return Ok(order.map_or(Transition::NotFound, Transition::Illegal));
            }
            TransitionOutcome::NotFound => return Ok(Transition::NotFound),
        };
        self.store
            .complete_in_tx(&mut tx, lease, &answer)
            .await
            .map_err(repo_err)?;
        let order = self
            .fetch(&mut tx, id)
            .await?
            .ok_or_else(|| RepoError(format!("order {order_id} vanished")))?;
        tx.commit().await.map_err(repo_err)?;
        Ok(if outcome.is_applied() {
            Transition::Applied(order)
        } else {
            Transition::AlreadyInTarget(order)
        })
    }
}

impl PaymentsRepo for PostgresRepo {
    fn create_order(&self, new: NewOrder) -> BoxFuture<'_, Result<Order, RepoError>> {
        Box::pin(async move {
            let sql = format!(
                "INSERT INTO \"{}\" (user_id, amount_cents, status) VALUES ($1, $2, 'WAIT_PAY') \
                 RETURNING {ORDER_COLUMNS}",
                self.orders
            );
            let row: OrderRow = sqlx::query_as(&sql)
                .bind(to_i64(new.user_id)?)
                .bind(to_i64(new.amount_cents)?)
                .fetch_one(&self.pool)
                .await
                .map_err(repo_err)?;
            to_order(row)
        })
    }

    fn order(&self, order_id: OrderId) -> BoxFuture<'_, Result<Option<Order>, RepoError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(repo_err)?;
            self.fetch(&mut conn, to_i64(order_id)?).await
        })
    }

    fn pay<'a>(
        &'a self,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Transition, RepoError>> {
        Box::pin(self.pay_in_tx(order_id, trade_no))
    }

    fn cancel(&self, order_id: OrderId) -> BoxFuture<'_, Result<Transition, RepoError>> {
        Box::pin(async move {
            let id = to_i64(order_id)?;
            let outcome = self
                .cancel
                .apply_postgres(&self.pool, id)
                .await
                .map_err(repo_err)?;
            let mut conn = self.pool.acquire().await.map_err(repo_err)?;
            let order = self.fetch(&mut conn, id).await?;
            Ok(match (outcome, order) {
                (_, None) | (TransitionOutcome::NotFound, _) => Transition::NotFound,
                (TransitionOutcome::Applied, Some(order)) => Transition::Applied(order),
                (TransitionOutcome::AlreadyInTarget, Some(order)) => {
                    Transition::AlreadyInTarget(order)
                }
                (TransitionOutcome::Illegal { .. }, Some(order)) => Transition::Illegal(order),
            })
        })
    }

    fn grant_coupon(&self, user_id: UserId) -> BoxFuture<'_, Result<(), RepoError>> {
        Box::pin(async move {
            let sql = format!("INSERT INTO \"{}\" (user_id) VALUES ($1)", self.coupons);
            sqlx::query(&sql)
                .bind(to_i64(user_id)?)
                .execute(&self.pool)
                .await
                .map_err(repo_err)?;
            Ok(())
        })
    }

    fn mark_paid_unchecked<'a>(
        &'a self,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Option<Order>, RepoError>> {
        Box::pin(async move {
            let sql = format!(
                "UPDATE \"{}\" SET status = 'PAID', trade_no = $2 WHERE order_id = $1 \
                 RETURNING {ORDER_COLUMNS}",
                self.orders
            );
            let row: Option<OrderRow> = sqlx::query_as(&sql)
                .bind(to_i64(order_id)?)
                .bind(trade_no)
                .fetch_optional(&self.pool)
                .await
                .map_err(repo_err)?;
            row.map(to_order).transpose()
        })
    }

    fn coupon_count(&self, user_id: UserId) -> BoxFuture<'_, Result<u64, RepoError>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT COUNT(*) FROM \"{}\" WHERE user_id = $1",
                self.coupons
            );
            let (count,): (i64,) = sqlx::query_as(&sql)
                .bind(to_i64(user_id)?)
                .fetch_one(&self.pool)
                .await
                .map_err(repo_err)?;
            to_u64(count)
        })
    }
}
