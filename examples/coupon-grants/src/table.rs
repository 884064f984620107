//! The business table, `coupon_grants`.

use std::collections::BTreeMap;

use sqlx::PgPool;

/// Creates `coupon_grants` unless it exists, without the server's "already exists" notice.
/// Replicas starting together take turns: two concurrent `CREATE TABLE IF NOT EXISTS` of a new
/// table can both try to create it, and one fails on the catalogue's unique index.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('coupon_grants'))")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SET LOCAL client_min_messages = warning")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS coupon_grants (
            id BIGSERIAL PRIMARY KEY,
            trade_no TEXT NOT NULL,
            user_id BIGINT NOT NULL,
            granted_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// How many coupons each trade whose number starts with `prefix` got.
pub async fn coupons_per_trade(
    pool: &PgPool,
    prefix: &str,
) -> Result<BTreeMap<String, i64>, sqlx::Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT trade_no, count(*) FROM coupon_grants WHERE starts_with(trade_no, $1) GROUP BY trade_no",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}
