//! Orders and coupons in SQLite.

use idempotency_core::BoxFuture;
use idempotency_sql::{Transition as StateTransition, TransitionOutcome};
use sqlx::{Sqlite, SqliteConnection, SqlitePool};

use super::{
    ORDER_COLUMNS, OrderRow, Reserved, SqlPayments, repo_err, table_names, to_i64, to_order, to_u64,
};
use crate::model::{NewOrder, Order, OrderId, UserId};
use crate::repo::{PaymentsRepo, RepoError, Transition};

/// [`PaymentsRepo`] on SQLite; its writes also run in a request's transaction
/// ([`SqlPayments`]), beside the idempotency record.
#[derive(Clone, Debug)]
pub struct SqliteRepo {
    pool: SqlitePool,
    orders: String,
    coupons: String,
    pay: StateTransition,
    cancel: StateTransition,
}

impl SqliteRepo {
    /// Creates the tables `{prefix}orders` and `{prefix}coupons` if missing.
    pub async fn new(pool: SqlitePool, prefix: &str) -> Result<Self, RepoError> {
        let (orders, coupons) = table_names(prefix)?;
        for ddl in [
            format!(
                "CREATE TABLE IF NOT EXISTS \"{orders}\" \
                 (order_id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER NOT NULL, \
                 amount_cents INTEGER NOT NULL, status TEXT NOT NULL, trade_no TEXT)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS \"{coupons}\" \
                 (coupon_id INTEGER PRIMARY KEY AUTOINCREMENT, user_id INTEGER NOT NULL, \
                 order_id INTEGER)"
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
            orders,
            coupons,
        })
    }

    async fn fetch(
        &self,
        conn: &mut SqliteConnection,
        id: i64,
    ) -> Result<Option<Order>, RepoError> {
        let sql = format!(
            "SELECT {ORDER_COLUMNS} FROM \"{}\" WHERE order_id = ?1",
            self.orders
        );
        let row: Option<OrderRow> = sqlx::query_as(&sql)
            .bind(id)
            .fetch_optional(conn)
            .await
            .map_err(repo_err)?;
        row.map(to_order).transpose()
    }

    async fn insert_order(
        &self,
        conn: &mut SqliteConnection,
        new: NewOrder,
    ) -> Result<Order, RepoError> {
        let sql = format!(
            "INSERT INTO \"{}\" (user_id, amount_cents, status) VALUES (?1, ?2, 'WAIT_PAY') \
             RETURNING {ORDER_COLUMNS}",
            self.orders
        );
        let row: OrderRow = sqlx::query_as(&sql)
            .bind(to_i64(new.user_id)?)
            .bind(to_i64(new.amount_cents)?)
            .fetch_one(conn)
            .await
            .map_err(repo_err)?;
        to_order(row)
    }

    /// The payment transition on `conn`; an applied one records the trade number and grants
    /// the coupon on the same connection (in the caller's transaction).
    async fn pay_with(
        &self,
        conn: &mut SqliteConnection,
        order_id: OrderId,
        trade_no: &str,
    ) -> Result<Transition, RepoError> {
        let id = to_i64(order_id)?;
        let outcome = self
            .pay
            .apply_sqlite(&mut *conn, id)
            .await
            .map_err(repo_err)?;
        if outcome == TransitionOutcome::Applied {
            let sql = format!(
                "UPDATE \"{}\" SET trade_no = ?2 WHERE order_id = ?1 RETURNING user_id",
                self.orders
            );
            let (user_id,): (i64,) = sqlx::query_as(&sql)
                .bind(id)
                .bind(trade_no)
                .fetch_one(&mut *conn)
                .await
                .map_err(repo_err)?;
            let sql = format!(
                "INSERT INTO \"{}\" (user_id, order_id) VALUES (?1, ?2)",
                self.coupons
            );
            sqlx::query(&sql)
                .bind(user_id)
                .bind(id)
                .execute(&mut *conn)
                .await
                .map_err(repo_err)?;
        }
        let order = self.fetch(conn, id).await?;
        Ok(super::transition_of(outcome, order))
    }
}

impl SqlPayments<Sqlite> for SqliteRepo {
    fn create_order_on<'a>(
        &'a self,
        conn: &'a mut SqliteConnection,
        new: NewOrder,
    ) -> BoxFuture<'a, Result<Order, RepoError>> {
        Box::pin(self.insert_order(conn, new))
    }

    fn pay_on<'a>(
        &'a self,
        conn: &'a mut SqliteConnection,
        order_id: OrderId,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Transition, RepoError>> {
        Box::pin(self.pay_with(conn, order_id, trade_no))
    }

    fn reserve_on<'a>(
        &'a self,
        conn: &'a mut SqliteConnection,
        order_id: i64,
    ) -> BoxFuture<'a, Result<Option<Reserved>, RepoError>> {
        Box::pin(async move {
            let sql = format!(
                "UPDATE \"{}\" SET status = 'RESERVED' WHERE order_id = ?1 \
                 AND status IN ('WAIT_PAY', 'RESERVED') RETURNING order_id, user_id, amount_cents",
                self.orders
            );
            let row: Option<(i64, i64, i64)> = sqlx::query_as(&sql)
                .bind(order_id)
                .fetch_optional(conn)
                .await
                .map_err(repo_err)?;
            Ok(row.map(|(order_id, user_id, amount_cents)| Reserved {
                order_id,
                user_id,
                amount_cents,
            }))
        })
    }

    fn unreserve_on<'a>(
        &'a self,
        conn: &'a mut SqliteConnection,
        order_id: i64,
    ) -> BoxFuture<'a, Result<(), RepoError>> {
        Box::pin(async move {
            let sql = format!(
                "UPDATE \"{}\" SET status = 'WAIT_PAY' WHERE order_id = ?1 AND status = 'RESERVED'",
                self.orders
            );
            sqlx::query(&sql)
                .bind(order_id)
                .execute(conn)
                .await
                .map_err(repo_err)?;
            Ok(())
        })
    }

    fn grant_on<'a>(
        &'a self,
        conn: &'a mut SqliteConnection,
        reserved: &'a Reserved,
        capture_id: &'a str,
    ) -> BoxFuture<'a, Result<i64, RepoError>> {
        Box::pin(async move {
            let sql = format!(
                "UPDATE \"{}\" SET status = 'PAID', trade_no = ?2 \
                 WHERE order_id = ?1 AND status = 'RESERVED'",
                self.orders
            );
            sqlx::query(&sql)
                .bind(reserved.order_id)
                .bind(capture_id)
                .execute(&mut *conn)
                .await
                .map_err(repo_err)?;
            let sql = format!(
                "INSERT INTO \"{}\" (user_id, order_id) VALUES (?1, ?2) RETURNING coupon_id",
                self.coupons
            );
            let (coupon_id,): (i64,) = sqlx::query_as(&sql)
                .bind(reserved.user_id)
                .bind(reserved.order_id)
                .fetch_one(conn)
                .await
                .map_err(repo_err)?;
            Ok(coupon_id)
        })
    }
}

impl PaymentsRepo for SqliteRepo {
    fn create_order(&self, new: NewOrder) -> BoxFuture<'_, Result<Order, RepoError>> {
        Box::pin(async move {
            let mut conn = self.pool.acquire().await.map_err(repo_err)?;
            self.insert_order(&mut conn, new).await
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
        Box::pin(async move {
            let mut tx = self.pool.begin().await.map_err(repo_err)?;
            let transition = self.pay_with(&mut tx, order_id, trade_no).await?;
            tx.commit().await.map_err(repo_err)?;
            Ok(transition)
        })
    }

    fn cancel(&self, order_id: OrderId) -> BoxFuture<'_, Result<Transition, RepoError>> {
        Box::pin(async move {
            let id = to_i64(order_id)?;
            let mut conn = self.pool.acquire().await.map_err(repo_err)?;
            let outcome = self
                .cancel
                .apply_sqlite(&mut conn, id)
                .await
                .map_err(repo_err)?;
            let order = self.fetch(&mut conn, id).await?;
            Ok(super::transition_of(outcome, order))
        })
    }

    fn grant_coupon(&self, user_id: UserId) -> BoxFuture<'_, Result<(), RepoError>> {
        Box::pin(async move {
            let sql = format!("INSERT INTO \"{}\" (user_id) VALUES (?1)", self.coupons);
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
                "UPDATE \"{}\" SET status = 'PAID', trade_no = ?2 WHERE order_id = ?1 \
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
                "SELECT COUNT(*) FROM \"{}\" WHERE user_id = ?1",
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
