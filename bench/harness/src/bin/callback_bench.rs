//! The payment callback on a SQL database three ways, side by side in one run:
//! `cargo run --release -p idempotency-bench --features postgres,mysql,sqlite --bin callback_bench -- --store postgres`.
//!
//! - `raw`: the business transaction alone, no dedup: `BEGIN`, the `WAIT_PAY → PAID`
//!   transition, the coupon when it applied, `COMMIT`.
//! - `by-hand`: the post-mortem's dedup written by hand in raw sqlx: `BEGIN`, insert the trade
//!   number into a dedup table (a conflict answers success at once), the same business writes,
//!   `COMMIT`.
//! - `transactional`: the payments example's callback with transactional HTTP (the callback
//!   preset; the layer claims the trade number in the request's transaction and stores the
//!   answer in it).
//!
//! Each is served in-process on 127.0.0.1 and driven over keep-alive connections: `new-keys`
//! pays a fresh order with a new trade number on every request; `replay` repeats the callback of
//! one paid order. Floors: transactional ≥ 0.9 × by-hand on new keys, ≥ 1.0 × on replays.
//!
//! Options: `--store postgres|mysql|sqlite` (URLs from `DATABASE_URL`, `MYSQL_URL`; SQLite in a
//! temporary file), `--only new-keys|replay`, `--variant raw|by-hand|by-hand-stored|transactional`
//! (one only, for profiling), `--seconds N` (3), `--rounds N` (3),
//! `--connections N` (16), `--orders N` (orders created per new-keys run, 40 000).

use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum_payments::client::post_json;
use axum_payments::sql::SqlPayments;
use axum_payments::transactional::transactional_app;
use axum_payments::{AppState, HttpService, PaymentCallback, RepoError, Server};
use idempotency_bench::load::{
    Drive, MakeRequest, RunResult, Target, describe, drive, load_average, median,
};
use idempotency_core::BoxFuture;
use serde_json::json;

/// The table prefix of the benchmark's orders and coupons.
const PREFIX: &str = "bench_";
/// The first benchmark user: each run's orders belong to a user of their own.
const USER: u64 = 1_000_000_000;

struct Options {
    store: String,
    only: Option<String>,
    variant: Option<String>,
    seconds: f64,
    rounds: usize,
    connections: usize,
    orders: usize,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self {
            store: "postgres".to_owned(),
            only: None,
            variant: None,
            seconds: 3.0,
            rounds: 3,
            connections: 16,
            orders: 40_000,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--store" => options.store = value,
                "--only" => options.only = Some(value),
                "--variant" => options.variant = Some(value),
                "--seconds" => options.seconds = value.parse().map_err(|e| bad(&e))?,
                "--rounds" => options.rounds = value.parse().map_err(|e| bad(&e))?,
                "--connections" => options.connections = value.parse().map_err(|e| bad(&e))?,
                "--orders" => options.orders = value.parse().map_err(|e| bad(&e))?,
                _ => return Err(format!("unknown option {flag}")),
            }
        }
        if !(0.1..=60.0).contains(&options.seconds)
            || !(1..=20).contains(&options.rounds)
            || !(1..=256).contains(&options.connections)
            || !(100..=1_000_000).contains(&options.orders)
        {
            return Err("out of range: --seconds 0.1..=60, --rounds 1..=20, \
                        --connections 1..=256, --orders 100..=1000000"
                .into());
        }
        Ok(options)
    }

    fn drive(&self, max_requests: u64) -> Drive {
        Drive {
            seconds: self.seconds,
            connections: self.connections,
            max_requests,
        }
    }
}

/// The post-mortem's dedup by hand: the trade number into a dedup table, in the business
/// transaction.
trait ByHand<DB: sqlx::Database>: Send + Sync + 'static {
    /// Inserts the trade number: `None` when it is new, else the answer stored with it (empty
    /// when answers are not stored).
    fn claim<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        trade_no: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, RepoError>>;

    /// Stores the answer with the trade number, where answers are stored.
    fn store<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        trade_no: &'a str,
        answer: &'a [u8],
    ) -> BoxFuture<'a, Result<(), RepoError>>;
}

/// A dedup table: its `INSERT` that does nothing on a conflict, and, where the answer is
/// stored, the statements that read and write it.
struct DedupTable {
    insert: String,
    answers: Option<(String, String)>,
}

fn repo_err(error: impl std::fmt::Display) -> RepoError {
    RepoError(error.to_string())
}

/// What the hand-written and raw handlers share.
struct Baseline<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    sql: Arc<dyn SqlPayments<DB>>,
    by_hand: Option<Arc<dyn ByHand<DB>>>,
}

impl<DB: sqlx::Database> Clone for Baseline<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            sql: Arc::clone(&self.sql),
            by_hand: self.by_hand.clone(),
        }
    }
}

/// `POST /payments/callback`, raw or with the dedup by hand; the transaction committed once.
async fn callback<DB: sqlx::Database>(
    State(baseline): State<Baseline<DB>>,
    axum::Json(paid): axum::Json<PaymentCallback>,
) -> Response {
    let answered: Result<Response, RepoError> = async {
        let mut tx = baseline.pool.begin().await.map_err(repo_err)?;
        if let Some(by_hand) = &baseline.by_hand
            && let Some(answer) = by_hand.claim(&mut tx, &paid.trade_no).await?
        {
            // A unique conflict is a success: the stored answer, or a plain one.
            return Ok(if answer.is_empty() {
                (StatusCode::OK, "already processed").into_response()
            } else {
                (StatusCode::OK, answer).into_response()
            });
        }
        let transition = baseline
            .sql
            .pay_on(&mut tx, paid.order_id, &paid.trade_no)
            .await?;
        let answer = match transition {
            axum_payments::Transition::Applied(order)
            | axum_payments::Transition::AlreadyInTarget(order) => {
                serde_json::to_vec(&order).map_err(repo_err)?
            }
            _ => return Ok(StatusCode::CONFLICT.into_response()),
        };
        if let Some(by_hand) = &baseline.by_hand {
            by_hand.store(&mut tx, &paid.trade_no, &answer).await?;
        }
        tx.commit().await.map_err(repo_err)?;
        Ok((StatusCode::OK, answer).into_response())
    }
    .await;
    answered.unwrap_or_else(|error| (StatusCode::SERVICE_UNAVAILABLE, error.0).into_response())
}

fn baseline_router<DB: sqlx::Database>(baseline: Baseline<DB>) -> Router {
    Router::new()
        .route("/payments/callback", post(callback::<DB>))
        .with_state(baseline)
}

/// One database: its pool and store, the benchmark's repository, and how to create orders.
enum Database {
    #[cfg(feature = "postgres")]
    Postgres(
        idempotency_sql::PostgresStore,
        Arc<axum_payments::sql::PostgresRepo>,
    ),
    #[cfg(feature = "mysql")]
    Mysql(
        idempotency_sql::MySqlStore,
        Arc<axum_payments::sql::MySqlRepo>,
    ),
    #[cfg(feature = "sqlite")]
    Sqlite(
        idempotency_sql::SqliteStore,
        Arc<axum_payments::sql::SqliteRepo>,
    ),
}

/// The three services, served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Raw,
    ByHand,
    ByHandStored,
    Transactional,
}

impl Variant {
    const ALL: [Self; 4] = [
        Self::Raw,
        Self::ByHand,
        Self::ByHandStored,
        Self::Transactional,
    ];

    /// The name `--variant` takes.
    fn slug(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::ByHand => "by-hand",
            Self::ByHandStored => "by-hand-stored",
            Self::Transactional => "transactional",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw business transaction",
            Self::ByHand => "dedup by hand (raw sqlx)",
            Self::ByHandStored => "by hand, answer stored",
            Self::Transactional => "transactional HTTP",
        }
    }
}

fn serve_baseline<DB: sqlx::Database>(
    pool: sqlx::Pool<DB>,
    sql: Arc<dyn SqlPayments<DB>>,
    by_hand: Option<Arc<dyn ByHand<DB>>>,
) -> impl HttpService {
    baseline_router(Baseline { pool, sql, by_hand })
}

async fn spawn(service: impl HttpService) -> Result<Server, String> {
    Server::spawn(service).await.map_err(|e| e.to_string())
}

/// Serves `variant` over `store` and `repo` (one database).
async fn serve_variant<S, R>(
    variant: Variant,
    store: &S,
    repo: Arc<R>,
    dedup: &DedupSql,
) -> Result<Server, String>
where
    S: idempotency_sql::StepStore + Sync + 'static,
    R: SqlPayments<S::Database>,
    DedupTable: ByHand<S::Database>,
    for<'c> &'c mut <S::Database as sqlx::Database>::Connection:
        sqlx::Executor<'c, Database = S::Database>,
    for<'q> <S::Database as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, S::Database>,
{
    let pool = store.pool().clone();
    let by_hand = match variant {
        Variant::Transactional => {
            let state = AppState::new(repo.clone());
            let checkout = axum_payments::transactional::CheckoutConfig::from_env()?;
            return spawn(transactional_app(state, store.clone(), repo, checkout)).await;
        }
        Variant::Raw => None,
        Variant::ByHand => Some(dedup_table(&pool, dedup, false).await?),
        Variant::ByHandStored => Some(dedup_table(&pool, dedup, true).await?),
    };
    spawn(serve_baseline(pool, repo, by_hand)).await
}

#[cfg(feature = "postgres")]
const POSTGRES_DEDUP: DedupSql = DedupSql {
    create: "CREATE TABLE IF NOT EXISTS {table} (trade_no TEXT PRIMARY KEY, answer BYTEA)",
    insert: "INSERT INTO {table} (trade_no) VALUES ($1) ON CONFLICT DO NOTHING",
    select: "SELECT answer FROM {table} WHERE trade_no = $1",
    update: "UPDATE {table} SET answer = $1 WHERE trade_no = $2",
};

#[cfg(feature = "mysql")]
const MYSQL_DEDUP: DedupSql = DedupSql {
    create: "CREATE TABLE IF NOT EXISTS {table} (trade_no VARCHAR(64) PRIMARY KEY, \
             answer LONGBLOB NULL) ENGINE = InnoDB",
    insert: "INSERT IGNORE INTO {table} (trade_no) VALUES (?)",
    select: "SELECT answer FROM {table} WHERE trade_no = ?",
    update: "UPDATE {table} SET answer = ? WHERE trade_no = ?",
};

#[cfg(feature = "sqlite")]
const SQLITE_DEDUP: DedupSql = DedupSql {
    create: "CREATE TABLE IF NOT EXISTS {table} (trade_no TEXT PRIMARY KEY, answer BLOB)",
    insert: "INSERT INTO {table} (trade_no) VALUES (?1) ON CONFLICT DO NOTHING",
    select: "SELECT answer FROM {table} WHERE trade_no = ?1",
    update: "UPDATE {table} SET answer = ?1 WHERE trade_no = ?2",
};

/// `DedupTable` on one database.
macro_rules! by_hand {
    ($db:ty) => {
        impl ByHand<$db> for DedupTable {
            fn claim<'a>(
                &'a self,
                conn: &'a mut <$db as sqlx::Database>::Connection,
                trade_no: &'a str,
            ) -> BoxFuture<'a, Result<Option<Vec<u8>>, RepoError>> {
                Box::pin(async move {
                    let done = sqlx::query(&self.insert)
                        .bind(trade_no)
                        .execute(&mut *conn)
                        .await
                        .map_err(repo_err)?;
                    if done.rows_affected() == 1 {
                        return Ok(None);
                    }
                    let Some((select, _)) = &self.answers else {
                        return Ok(Some(Vec::new()));
                    };
                    let (answer,): (Option<Vec<u8>>,) = sqlx::query_as(select)
                        .bind(trade_no)
                        .fetch_one(conn)
                        .await
                        .map_err(repo_err)?;
                    Ok(Some(answer.unwrap_or_default()))
                })
            }

            fn store<'a>(
                &'a self,
                conn: &'a mut <$db as sqlx::Database>::Connection,
                trade_no: &'a str,
                answer: &'a [u8],
            ) -> BoxFuture<'a, Result<(), RepoError>> {
                Box::pin(async move {
                    if let Some((_, update)) = &self.answers {
                        sqlx::query(update)
                            .bind(answer)
                            .bind(trade_no)
                            .execute(conn)
                            .await
                            .map_err(repo_err)?;
                    }
                    Ok(())
                })
            }
        }
    };
}

#[cfg(feature = "postgres")]
by_hand!(sqlx::Postgres);
#[cfg(feature = "mysql")]
by_hand!(sqlx::MySql);
#[cfg(feature = "sqlite")]
by_hand!(sqlx::Sqlite);

/// The dedup table's statements on one database: create, insert, read and write the answer
/// (`{table}` and placeholders per database).
struct DedupSql {
    create: &'static str,
    insert: &'static str,
    select: &'static str,
    update: &'static str,
}

/// Creates the dedup table and returns its by-hand dedup, storing answers or not.
async fn dedup_table<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    sql: &DedupSql,
    store_answers: bool,
) -> Result<Arc<dyn ByHand<DB>>, String>
where
    DedupTable: ByHand<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let table = format!("{PREFIX}dedup");
    let fill = |text: &str| text.replace("{table}", &table);
    let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
    sqlx::query(&fill(sql.create))
        .execute(&mut *conn)
        .await
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(DedupTable {
        insert: fill(sql.insert),
        answers: store_answers.then(|| (fill(sql.select), fill(sql.update))),
    }))
}

impl Database {
    async fn connect(kind: &str) -> Result<Self, String> {
        match kind {
            #[cfg(feature = "postgres")]
            "postgres" => {
                let url = std::env::var("DATABASE_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(20)
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                let store = idempotency_sql::PostgresStore::new(pool.clone())
                    .with_table_name("bench_records")
                    .map_err(|e| e.to_string())?;
                store.migrate().await.map_err(|e| e.to_string())?;
                let repo = axum_payments::sql::PostgresRepo::new(pool, PREFIX)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Self::Postgres(store, Arc::new(repo)))
            }
            #[cfg(feature = "mysql")]
            "mysql" => {
                let url = std::env::var("MYSQL_URL")
                    .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
                let pool = sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(20)
                    .connect(&url)
                    .await
                    .map_err(|e| e.to_string())?;
                let store = idempotency_sql::MySqlStore::new(pool.clone())
                    .with_table_name("bench_records")
                    .map_err(|e| e.to_string())?;
                store.migrate().await.map_err(|e| e.to_string())?;
                let repo = axum_payments::sql::MySqlRepo::new(pool, PREFIX)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Self::Mysql(store, Arc::new(repo)))
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let file = std::env::temp_dir().join("idempotency-callback-bench.db");
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(&file)
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Normal);
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(20)
                    .connect_with(options)
                    .await
                    .map_err(|e| e.to_string())?;
                let store = idempotency_sql::SqliteStore::new(pool.clone())
                    .with_table_name("bench_records")
                    .map_err(|e| e.to_string())?;
                store.migrate().await.map_err(|e| e.to_string())?;
                let repo = axum_payments::sql::SqliteRepo::new(pool, PREFIX)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Self::Sqlite(store, Arc::new(repo)))
            }
            other => Err(format!(
                "--store {other}: not one of the SQL stores built in (features postgres, mysql, sqlite)"
            )),
        }
    }

    /// Serves `variant`.
    async fn serve(&self, variant: Variant) -> Result<Server, String> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(store, repo) => {
                serve_variant(variant, store, repo.clone(), &POSTGRES_DEDUP).await
            }
            #[cfg(feature = "mysql")]
            Self::Mysql(store, repo) => {
                serve_variant(variant, store, repo.clone(), &MYSQL_DEDUP).await
            }
            #[cfg(feature = "sqlite")]
            Self::Sqlite(store, repo) => {
                serve_variant(variant, store, repo.clone(), &SQLITE_DEDUP).await
            }
        }
    }

    /// Creates `count` orders in `WAIT_PAY` for the run's own user, and returns their ids.
    /// (The first call indexes the orders by user, where the database has no such index yet.)
    async fn create_orders(&self, run: u64, count: usize) -> Result<Vec<u64>, String> {
        let index =
            format!("CREATE INDEX IF NOT EXISTS {PREFIX}orders_user ON {PREFIX}orders (user_id)");
        let user = USER + run;
        let batch = |n: usize| {
            let rows = vec![format!("({user}, 1299, 'WAIT_PAY')"); n].join(", ");
            format!("INSERT INTO {PREFIX}orders (user_id, amount_cents, status) VALUES {rows}")
        };
        let select =
            format!("SELECT order_id FROM {PREFIX}orders WHERE user_id = {user} ORDER BY order_id");
        macro_rules! create {
            ($pool:expr) => {{
                // MySQL 8 has no `IF NOT EXISTS` here: its error only means "already there".
                let _ = sqlx::query(&index).execute($pool).await;
                let mut left = count;
                while left > 0 {
                    let n = left.min(500);
                    sqlx::query(&batch(n))
                        .execute($pool)
                        .await
                        .map_err(|e| e.to_string())?;
                    left -= n;
                }
                let ids: Vec<(i64,)> = sqlx::query_as(&select)
                    .fetch_all($pool)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(ids
                    .into_iter()
                    .filter_map(|(id,)| u64::try_from(id).ok())
                    .collect())
            }};
        }
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(store, _) => create!(store.pool()),
            #[cfg(feature = "mysql")]
            Self::Mysql(store, _) => create!(store.pool()),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(store, _) => create!(store.pool()),
        }
    }
}

/// Pays a fresh order with a new trade number on every request (`ids` split among callers).
fn new_keys(run: u64, ids: Arc<Vec<u64>>, connections: usize) -> Arc<MakeRequest> {
    let per_caller = ids.len() / connections;
    Arc::new(move |caller, sequence| {
        let slot = caller * per_caller + usize::try_from(sequence).unwrap_or(usize::MAX);
        let order_id = ids[slot.min(ids.len() - 1)];
        let body = json!({"trade_no": format!("B{run}-{caller}-{sequence}"), "order_id": order_id});
        post_json("/payments/callback", None, &body)
    })
}

/// The callback of one paid order, repeated.
fn replay(run: u64, order_id: u64) -> Arc<MakeRequest> {
    let body = json!({"trade_no": format!("R{run}"), "order_id": order_id});
    Arc::new(move |_, _| post_json("/payments/callback", None, &body))
}

async fn run_once(
    database: &Database,
    variant: Variant,
    scenario: &str,
    run: u64,
    options: &Options,
) -> Result<RunResult, String> {
    let server = database.serve(variant).await?;
    let target = Target::<Router>::Tcp(&server);
    let result = match scenario {
        "new-keys" => {
            let ids = Arc::new(database.create_orders(run, options.orders).await?);
            let per_caller = (ids.len() / options.connections) as u64;
            let drive_options = Drive {
                max_requests: per_caller * options.connections as u64,
                ..options.drive(0)
            };
            drive(
                target,
                &drive_options,
                new_keys(run, ids, options.connections),
            )
            .await?
        }
        _ => {
            let ids = database.create_orders(run, 1).await?;
            let order_id = *ids.first().ok_or("no order")?;
            let requests = replay(run, order_id);
            // The first callback pays the order; the run measures its duplicates.
            let once = Drive {
                seconds: 1.0,
                connections: 1,
                max_requests: 1,
            };
            drive(target, &once, Arc::clone(&requests)).await?;
            drive(target, &options.drive(u64::MAX), requests).await?
        }
    };
    server.shutdown().await.map_err(|e| e.to_string())?;
    Ok(result)
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("callback_bench: {error}");
            return ExitCode::from(2);
        }
    };
    let database = match Database::connect(&options.store).await {
        Ok(database) => database,
        Err(error) => {
            eprintln!("callback_bench: {error}");
            return ExitCode::from(2);
        }
    };
    println!(
        "callback_bench: {}, {} connections, {} s per run, {} rounds, {} build, load average {}",
        options.store,
        options.connections,
        options.seconds,
        options.rounds,
        if cfg!(debug_assertions) {
            "DEBUG (numbers meaningless: use --release)"
        } else {
            "release"
        },
        load_average()
    );
    let mut run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut failed = false;
    for scenario in ["new-keys", "replay"] {
        if options.only.as_deref().is_some_and(|only| only != scenario) {
            continue;
        }
        println!("\n{scenario}");
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Variant::ALL.len()];
        for round in 0..options.rounds {
            for (index, variant) in Variant::ALL.into_iter().enumerate() {
                if options
                    .variant
                    .as_deref()
                    .is_some_and(|wanted| wanted != variant.slug())
                {
                    continue;
                }
                run += 1;
                match run_once(&database, variant, scenario, run, &options).await {
                    Ok(result) => {
                        println!(
                            "  round {} {:<28} {:>9.0} req/s {:>7} µs CPU/req in this process  [{}]",
                            round + 1,
                            variant.name(),
                            result.throughput(),
                            result
                                .cpu_per_request()
                                .map_or_else(|| "?".to_owned(), |cpu| format!("{cpu:.1}")),
                            describe(&result)
                        );
                        let ok = result.statuses.get(&200).copied().unwrap_or(0);
                        if ok != result.requests || result.errors > 0 {
                            eprintln!("callback_bench: answers other than 200 in {scenario}");
                            failed = true;
                        }
                        rates[index].push(result.throughput());
                    }
                    Err(error) => {
                        eprintln!("callback_bench: {scenario} {}: {error}", variant.name());
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
        if rates.iter().any(Vec::is_empty) {
            continue;
        }
        let medians: Vec<f64> = rates.iter_mut().map(|rates| median(rates)).collect();
        let floor = if scenario == "new-keys" { 0.9 } else { 1.0 };
        let ratio = medians[3] / medians[1];
        println!(
            "  median: raw {:.0}, by hand {:.0}, by hand with the answer stored {:.0}, transactional {:.0} req/s",
            medians[0], medians[1], medians[2], medians[3]
        );
        println!(
            "  transactional / by hand {ratio:.3} (floor {floor}: {}); / by hand with the answer stored {:.3}; by hand / raw {:.3}",
            if ratio >= floor { "met" } else { "MISSED" },
            medians[3] / medians[2],
            medians[1] / medians[0]
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
