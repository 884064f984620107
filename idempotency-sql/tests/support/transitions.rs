//! State-machine scenarios: transitions on the application's own table, on any database.

use super::*;

/// The sqlx operations the state-machine scenarios need, on any database that runs
/// transitions: their bounds are written once, in the blanket impl.
pub trait TransitionDb: Database {
    /// Runs a statement on the pool.
    fn run<'a>(pool: &'a Pool<Self>, sql: &'a str) -> impl Future<Output = ()> + Send + 'a;

    /// The one `BIGINT` a query returns.
    fn scalar<'a>(pool: &'a Pool<Self>, sql: &'a str) -> impl Future<Output = i64> + Send + 'a;

    /// The one nullable text a query returns.
    fn text<'a>(
        pool: &'a Pool<Self>,
        sql: &'a str,
    ) -> impl Future<Output = Option<String>> + Send + 'a;

    /// Applies `transition` to the row `id` in a transaction and, only when it applied, runs
    /// `grant` (with `id` bound) in the same transaction.
    fn apply_in_tx<'a>(
        pool: &'a Pool<Self>,
        transition: &'a Transition,
        id: i64,
        grant: Option<&'a str>,
    ) -> impl Future<Output = TransitionOutcome> + Send + 'a;

    /// Applies `transition` outside a transaction, on a connection of the pool.
    fn apply_on_connection<'a>(
        pool: &'a Pool<Self>,
        transition: &'a Transition,
        id: i64,
    ) -> impl Future<Output = Result<TransitionOutcome, StoreError>> + Send + 'a;
}

impl<DB> TransitionDb for DB
where
    DB: Database,
    DB::Connection: TransitionExecutor<Database = DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> + for<'r> sqlx::Decode<'r, DB>,
    (i64,): for<'r> sqlx::FromRow<'r, DB::Row>,
    (Option<String>,): for<'r> sqlx::FromRow<'r, DB::Row>,
{
    async fn run(pool: &Pool<Self>, sql: &str) {
        sqlx::query(sql).execute(pool).await.unwrap();
    }

    async fn scalar(pool: &Pool<Self>, sql: &str) -> i64 {
        count(pool, sql).await
    }

    async fn text(pool: &Pool<Self>, sql: &str) -> Option<String> {
        let (text,): (Option<String>,) = sqlx::query_as(sql).fetch_one(pool).await.unwrap();
        text
    }

    async fn apply_in_tx(
        pool: &Pool<Self>,
        transition: &Transition,
        id: i64,
        grant: Option<&str>,
    ) -> TransitionOutcome {
        let mut tx = pool.begin().await.unwrap();
        let outcome = tx.apply_transition(transition, id).await.unwrap();
        if let (true, Some(grant)) = (outcome.is_applied(), grant) {
            sqlx::query(grant).bind(id).execute(&mut *tx).await.unwrap();
        }
        tx.commit().await.unwrap();
        outcome
    }

    async fn apply_on_connection(
        pool: &Pool<Self>,
        transition: &Transition,
        id: i64,
    ) -> Result<TransitionOutcome, StoreError> {
        let mut conn = pool.acquire().await.unwrap();
        (*conn).apply_transition(transition, id).await
    }
}

/// What the state-machine scenarios write differently on each database (implemented by each
/// test file for its own).
pub trait Dialect: TransitionDb {
    /// An auto-numbered key column: `BIGSERIAL PRIMARY KEY`, `BIGINT AUTO_INCREMENT PRIMARY
    /// KEY` or `INTEGER PRIMARY KEY`.
    const SERIAL_KEY: &'static str;
    /// The first bind placeholder: `$1` or `?`.
    const PLACEHOLDER: &'static str;
    /// A small integer column for state codes: `SMALLINT`, `TINYINT`, `INTEGER`.
    const CODE_COLUMN: &'static str;

    /// Applies `transition` outside a transaction: on a connection of the pool, unless the
    /// database takes the pool itself as the executor.
    fn apply_outside_tx<'a>(
        pool: &'a Pool<Self>,
        transition: &'a Transition,
        id: i64,
    ) -> impl Future<Output = Result<TransitionOutcome, StoreError>> + Send + 'a {
        Self::apply_on_connection(pool, transition, id)
    }
}

/// Orders table with one order in WAIT_PAY (42) and one CLOSED (43), plus a coupons table.
pub async fn orders<DB: Dialect>(pool: &Pool<DB>) -> (String, String) {
    let (orders, coupons) = (unique_table("orders"), unique_table("coupons"));
    for ddl in [
        format!(
            "CREATE TABLE {orders} (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, \
             trade_no VARCHAR(64))"
        ),
        format!(
            "CREATE TABLE {coupons} (id {}, order_id BIGINT NOT NULL)",
            DB::SERIAL_KEY
        ),
        format!("INSERT INTO {orders} (id, status) VALUES (42, 'WAIT_PAY'), (43, 'CLOSED')"),
    ] {
        DB::run(pool, &ddl).await;
    }
    (orders, coupons)
}

/// The post-mortem's fix: the callback moves the order WAIT_PAY → PAID and grants the coupon only
/// when the transition applied, in the same transaction.
pub async fn paid_callback<DB: Dialect>(
    pool: &Pool<DB>,
    orders: &str,
    coupons: &str,
    id: i64,
) -> TransitionOutcome {
    let mark_paid = Transition::new(orders, "id", "status")
        .unwrap()
        .from("WAIT_PAY")
        .to("PAID")
        .also_set("trade_no", format!("T{id}"));
    let grant = format!(
        "INSERT INTO {coupons} (order_id) VALUES ({})",
        DB::PLACEHOLDER
    );
    DB::apply_in_tx(pool, &mark_paid, id, Some(&grant)).await
}

/// Order 42 moves to the target once, then is already in it `repeats` times; order 43 is in
/// `illegal` (an illegal source, reported); order 44 does not exist.
async fn walk_outcomes(pay: impl AsyncFn(i64) -> TransitionOutcome, repeats: usize, illegal: &str) {
    assert_eq!(pay(42).await, TransitionOutcome::Applied);
    for _ in 0..repeats {
        assert_eq!(pay(42).await, TransitionOutcome::AlreadyInTarget);
    }
    assert_eq!(
        pay(43).await,
        TransitionOutcome::Illegal {
            current: illegal.to_owned()
        }
    );
    assert_eq!(pay(44).await, TransitionOutcome::NotFound);
}

/// Drops a scenario's tables once it passed.
pub async fn drop_tables<DB: TransitionDb>(pool: &Pool<DB>, tables: &[String]) {
    for table in tables {
        DB::run(pool, &format!("DROP TABLE IF EXISTS {table}")).await;
    }
}

/// Deletes a dropped store table's schema version.
pub async fn forget_version<DB: TransitionDb>(pool: &Pool<DB>, table: &str) {
    DB::run(
        pool,
        &format!("DELETE FROM {SCHEMA_TABLE} WHERE table_name = '{table}'"),
    )
    .await;
}

/// Applied once, then already in the target five times, an illegal source and a missing row:
/// one coupon, `trade_no` set with the transition, and a transition outside a transaction.
pub async fn transition_applied_once<DB: Dialect>(pool: Pool<DB>) {
    let (orders, coupons) = orders(&pool).await;
    let pay = async |id: i64| paid_callback(&pool, &orders, &coupons, id).await;
    walk_outcomes(pay, 5, "CLOSED").await;
    let granted = DB::scalar(&pool, &format!("SELECT COUNT(*) FROM {coupons}")).await;
    assert_eq!(granted, 1, "six callbacks, one coupon");
    let trade_no = DB::text(
        &pool,
        &format!("SELECT trade_no FROM {orders} WHERE id = 42"),
    )
    .await;
    assert_eq!(trade_no.as_deref(), Some("T42"), "set with the transition");
    // Usable outside a transaction too.
    let reopen = Transition::new(&orders, "id", "status")
        .unwrap()
        .from("PAID")
        .from("CLOSED")
        .to("REFUNDED");
    assert_eq!(
        DB::apply_outside_tx(&pool, &reopen, 43).await.unwrap(),
        TransitionOutcome::Applied
    );
    drop_tables(&pool, &[orders, coupons]).await;
}

/// 200 concurrent callbacks for one order: one applies, the others find it already in the
/// target; one coupon.
pub async fn transition_storm<DB: Dialect>(pool: Pool<DB>) {
    let (orders, coupons) = orders(&pool).await;
    let outcomes = concurrently(200, |_| {
        let (pool, orders, coupons) = (pool.clone(), orders.clone(), coupons.clone());
        async move { paid_callback(&pool, &orders, &coupons, 42).await }
    })
    .await;
    let applied = outcomes.iter().filter(|o| o.is_applied()).count();
    assert_eq!(applied, 1);
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            TransitionOutcome::Applied | TransitionOutcome::AlreadyInTarget
        )),
        "{outcomes:?}"
    );
    let granted = DB::scalar(&pool, &format!("SELECT COUNT(*) FROM {coupons}")).await;
    assert_eq!(granted, 1, "200 concurrent callbacks, one coupon");
    drop_tables(&pool, &[orders, coupons]).await;
}

/// Integer state codes (10 = WAIT_PAY, 20 = PAID, 90 = CLOSED), as many order tables keep
/// them: applied once, then already in the target, an illegal source reported with its code;
/// text and code states mixed are refused.
pub async fn transition_with_codes<DB: Dialect>(pool: Pool<DB>) {
    let orders = unique_table("coded_orders");
    for ddl in [
        format!(
            "CREATE TABLE {orders} (id BIGINT PRIMARY KEY, status {} NOT NULL)",
            DB::CODE_COLUMN
        ),
        format!("INSERT INTO {orders} (id, status) VALUES (42, 10), (43, 90)"),
    ] {
        DB::run(&pool, &ddl).await;
    }
    let mark_paid = Transition::new(&orders, "id", "status")
        .unwrap()
        .from(10)
        .to(20);
    let pay = async |id: i64| DB::apply_in_tx(&pool, &mark_paid, id, None).await;
    walk_outcomes(pay, 1, "90").await;
    let paid = format!("SELECT COUNT(*) FROM {orders} WHERE id = 42 AND status = 20");
    assert_eq!(DB::scalar(&pool, &paid).await, 1, "order 42 holds code 20");
    let mixed = Transition::new(&orders, "id", "status")
        .unwrap()
        .from("WAIT_PAY")
        .to(20);
    assert!(matches!(
        DB::apply_outside_tx(&pool, &mixed, 43).await,
        Err(StoreError::Config(_))
    ));
    drop_tables(&pool, &[orders]).await;
}

/// The state-machine tests, one `#[tokio::test]` a scenario, for the test file's database:
/// `$pool` is its `pool(max)`, `None` (the test skips) when the server is unreachable outside CI.
macro_rules! transition_tests {
    ($pool:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn transition_applied_once_then_already_in_target() {
            if let Some(pool) = $pool(4).await {
                $crate::support::transition_applied_once(pool).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn transition_200_concurrent_callbacks_one_coupon() {
            if let Some(pool) = $pool(20).await {
                $crate::support::transition_storm(pool).await;
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn transition_with_integer_state_codes() {
            if let Some(pool) = $pool(2).await {
                $crate::support::transition_with_codes(pool).await;
            }
        }
    };
}
pub(crate) use transition_tests;
