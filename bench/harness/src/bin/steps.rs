//! Runs with steps against the same handler written by hand (issue 38), on PostgreSQL:
//! `cargo run --release -p idempotency-bench --features postgres --bin steps`.
//!
//! One checkout per run, with a fresh key and a fresh order (all orders created before timing):
//! `reserve` (local: `UPDATE orders SET status = 'RESERVED' WHERE id = $1 AND status = 'NEW'`),
//! `capture` (foreign: an HTTP/2 POST with an `Idempotency-Key` to a provider served in this
//! process on loopback, which deduplicates on the key in memory and answers a capture id),
//! `grant` (local: `INSERT INTO coupons (order_id) VALUES ($1) RETURNING id`), then the answer
//! (201, the capture id and the coupon id) stored. Two variants of it:
//!
//! - `hand-written`: brandur's atomic phases ("Implementing Stripe-like Idempotency Keys in
//!   Postgres", Rocket Rides Atomic) in raw sqlx, no idempotency crate: an `idempotency_keys`
//!   row inserted on its own (phase 0: one `INSERT … ON CONFLICT DO NOTHING`, leaner than
//!   brandur's `SELECT` then `INSERT` in a `SERIALIZABLE` transaction; every phase runs at
//!   `READ COMMITTED`), then each phase in its own transaction with the recovery point updated
//!   in it: `reserve` (the order's update, `reserved`), `capture` (as
//!   brandur does, the provider is called inside the phase's transaction, then the capture id
//!   and `captured` written before the commit; `--hand-capture autocommit` writes them in one
//!   statement after the call instead), `grant` (the coupon, `finished` and the answer);
//! - `steps`: the same through `idempotency_steps::{Runner, Run}` on a `PostgresStore`.
//!
//! Between them, hand-written variants that add the steps variant's costs one at a time
//! (`--variants all`, or a list): `hand+hold` (the phases inside `pg_try_advisory_lock` /
//! `pg_advisory_unlock`, two round trips), `hand+complete` (the answer stored by its own
//! statement after `grant`'s commit: a round trip and a commit), `hand+hold+complete` (both),
//! and `store-direct` (the store's own statements, `StepStore`, called without `Runner` and
//! `Run`: the record table's SQL without the crate's run logic).
//!
//! Each variant is warmed up, then measured `--rounds` times (alternating, the order reversed
//! every other round) for `--runs` runs by `--concurrency` tasks: runs per second (median of
//! the rounds), latency per run (p50/p99 over every measured run), the WAL written per run
//! (`pg_current_wal_lsn()`), and CPU per run: this process's, its PostgreSQL sessions' (their
//! server processes' `/proc/<pid>/schedstat`, so PostgreSQL on this machine) and the rest of
//! the machine's (`/proc/stat`: PostgreSQL's own processes, the kernel, anything else). The timed pool connects straight to
//! PostgreSQL; round trips and statements are counted on a second pool, through a TCP proxy on
//! loopback that reads the PostgreSQL frontend protocol (`wire::Protocol`): round trips are
//! `Sync` + simple `Query` messages (sqlx's pool pings, a bare `Sync` on acquiring and on
//! releasing a connection, shown apart), statements are `Execute` + `Query` messages; per run
//! at `--concurrency`, and per step over serial runs. Writing transactions per run are the
//! transaction ids a serial run uses (`pg_current_xact_id()`). At the end, the share of HOT
//! updates (no index entry written) of both tables.
//!
//! Options: `--concurrency 16`, `--runs 5000`, `--rounds 3`, `--warmup 500`,
//! `--count-runs 1000`, `--variants hand-written,steps` (or `all`), `--hand-capture
//! in-tx|autocommit`, `--record-indexes keep|drop` (diagnosis: the record table without its
//! two secondary indexes), `--keep` (leave the tables); `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). Tables get unique names and are dropped at the
//! end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use idempotency_bench::load::{load_average, process_cpu};
use idempotency_bench::wire::{
    CountingProxy, H2Sender, Protocol, Snapshot, Traffic, connect_h2c, plaintext_postgres, through,
    upstream_of,
};
use idempotency_core::{
    Claim, ClaimId, ClaimRequest, Fingerprint, IdempotencyKey, Mechanism, Outcome, Progress, Scope,
    StepResult,
};
use idempotency_sql::{PostgresStore, StepStore, TxStore};
use idempotency_steps::{DEFAULT_RUN_LEASE, DEFAULT_RUN_TTL, Runner, Start, Started, StepError};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor};
use tokio::net::TcpListener;

/// Serial runs per variant for the per-step counts, and again for the writing transactions.
const TRACED_RUNS: usize = 10;

/// Warm-up runs of the counted pools.
const COUNT_WARMUP: usize = 200;

/// What a run is: the two variants compared, and hand-written ones between them that add the
/// steps variant's costs one at a time (`--variants`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    /// brandur's atomic phases.
    HandWritten,
    /// `Runner` and `Run`.
    Steps,
    /// The hand-written phases inside `pg_try_advisory_lock` / `pg_advisory_unlock`.
    HandHold,
    /// The hand-written phases, the answer stored by its own statement after `grant`'s commit.
    HandComplete,
    /// Both: the steps variant's round trips and commits, on brandur's table.
    HandHoldComplete,
    /// The store's statements (`StepStore`: hold, claim, checkpoints, complete, give back)
    /// called directly, without `Runner` and `Run`.
    StoreDirect,
}

const VARIANTS: [Variant; 6] = [
    Variant::HandWritten,
    Variant::Steps,
    Variant::HandHold,
    Variant::HandComplete,
    Variant::HandHoldComplete,
    Variant::StoreDirect,
];

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Self::HandWritten => "hand-written",
            Self::Steps => "steps",
            Self::HandHold => "hand+hold",
            Self::HandComplete => "hand+complete",
            Self::HandHoldComplete => "hand+hold+complete",
            Self::StoreDirect => "store-direct",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        VARIANTS.into_iter().find(|variant| variant.name() == name)
    }

    /// The hand-written shape: (hold around the run, answer stored on its own).
    fn hand(self) -> Option<(bool, bool)> {
        match self {
            Self::HandWritten => Some((false, false)),
            Self::HandHold => Some((true, false)),
            Self::HandComplete => Some((false, true)),
            Self::HandHoldComplete => Some((true, true)),
            Self::Steps | Self::StoreDirect => None,
        }
    }
}

struct Options {
    concurrency: usize,
    runs: usize,
    rounds: usize,
    warmup: usize,
    count_runs: usize,
    capture_in_tx: bool,
    keep: bool,
    variants: Vec<Variant>,
    drop_record_indexes: bool,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self {
            concurrency: 16,
            runs: 5_000,
            rounds: 3,
            warmup: 500,
            count_runs: 1_000,
            capture_in_tx: true,
            keep: false,
            variants: vec![Variant::HandWritten, Variant::Steps],
            drop_record_indexes: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            if flag == "--keep" {
                options.keep = true;
                continue;
            }
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            let number = |value: &str| {
                value
                    .parse::<usize>()
                    .map_err(|_| format!("{flag}: not a number: {value}"))
            };
            match flag.as_str() {
                "--concurrency" => options.concurrency = number(&value)?.max(1),
                "--runs" => options.runs = number(&value)?.max(1),
                "--rounds" => options.rounds = number(&value)?.max(1),
                "--warmup" => options.warmup = number(&value)?,
                "--count-runs" => options.count_runs = number(&value)?.max(1),
                "--variants" => {
                    options.variants = if value == "all" {
                        VARIANTS.to_vec()
                    } else {
                        value
                            .split(',')
                            .map(|name| {
                                Variant::parse(name).ok_or(format!("--variants: no variant {name}"))
                            })
                            .collect::<Result<_, _>>()?
                    };
                }
                "--record-indexes" => {
                    options.drop_record_indexes = match value.as_str() {
                        "keep" => false,
                        "drop" => true,
                        other => {
                            return Err(format!("--record-indexes: keep or drop, not {other}"));
                        }
                    }
                }
                "--hand-capture" => {
                    options.capture_in_tx = match value.as_str() {
                        "in-tx" => true,
                        "autocommit" => false,
                        other => {
                            return Err(format!(
                                "--hand-capture: in-tx or autocommit, not {other}"
                            ));
                        }
                    }
                }
                other => return Err(format!("unknown option {other}")),
            }
        }
        Ok(options)
    }

    /// Orders each variant uses, every pass included.
    fn orders_per_variant(&self) -> usize {
        self.warmup + self.rounds * self.runs + COUNT_WARMUP + self.count_runs + 2 * TRACED_RUNS
    }
}

/// The payment provider, in process: deduplicates captures on their `Idempotency-Key`.
#[derive(Default)]
struct ProviderState {
    captures: Mutex<HashMap<String, String>>,
    next: AtomicU64,
}

async fn capture_endpoint(
    State(provider): State<Arc<ProviderState>>,
    headers: HeaderMap,
    // Read to its end: a body left unread is reset, and HTTP/2 servers end a connection that
    // resets too many streams.
    _body: Bytes,
) -> (StatusCode, String) {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
    else {
        return (StatusCode::BAD_REQUEST, "Idempotency-Key required".into());
    };
    let mut captures = provider
        .captures
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let id = captures
        .entry(key.to_owned())
        .or_insert_with(|| format!("cap_{}", provider.next.fetch_add(1, Ordering::Relaxed)));
    (StatusCode::CREATED, id.clone())
}

/// The provider's client: one h2c connection, a stream per capture.
struct Provider {
    sender: H2Sender,
    addr: SocketAddr,
}

impl Provider {
    async fn serve() -> Result<Self, String> {
        let router = Router::new()
            .route("/captures", post(capture_endpoint))
            .with_state(Arc::new(ProviderState::default()));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|error| error.to_string())?;
        let addr = listener.local_addr().map_err(|error| error.to_string())?;
        tokio::spawn(async move { axum::serve(listener, router).await });
        let sender = connect_h2c(addr).await?;
        Ok(Self { sender, addr })
    }

    /// Captures the order's amount with `key`: the capture id.
    async fn capture(&self, key: &str) -> Result<String, String> {
        let request = Request::post(format!("http://{}/captures", self.addr))
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(b"{\"amount\":2000}")))
            .map_err(|error| error.to_string())?;
        let mut sender = self.sender.clone();
        sender.ready().await.map_err(|error| error.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| error.to_string())?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|error| error.to_string())?
            .to_bytes();
        if parts.status != StatusCode::CREATED {
            return Err(format!("provider answered {}", parts.status));
        }
        String::from_utf8(body.to_vec()).map_err(|error| error.to_string())
    }
}

/// The statements of both variants, on this run's tables.
struct Sql {
    reserve: String,
    grant: String,
    insert_key: String,
    key_reserved: String,
    key_captured: String,
    key_finished: String,
    key_granted: String,
    key_answer: String,
    hold: String,
    unhold: String,
}

/// This run's table names.
struct Tables {
    orders: String,
    coupons: String,
    keys: String,
    records: String,
}

impl Tables {
    fn new() -> Self {
        let unique = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
        let prefix = format!("steps_bench_{unique:x}");
        Self {
            orders: format!("{prefix}_orders"),
            coupons: format!("{prefix}_coupons"),
            keys: format!("{prefix}_idempotency_keys"),
            records: prefix,
        }
    }

    fn sql(&self) -> Sql {
        let Self {
            orders,
            coupons,
            keys,
            ..
        } = self;
        Sql {
            reserve: format!(
                "UPDATE {orders} SET status = 'RESERVED' WHERE id = $1 AND status = 'NEW'"
            ),
            grant: format!("INSERT INTO {coupons} (order_id) VALUES ($1) RETURNING id"),
            insert_key: format!(
                "INSERT INTO {keys} (key, recovery_point, locked_at) VALUES ($1, 'started', now()) \
                 ON CONFLICT (key) DO NOTHING RETURNING recovery_point"
            ),
            key_reserved: format!("UPDATE {keys} SET recovery_point = 'reserved' WHERE key = $1"),
            key_captured: format!(
                "UPDATE {keys} SET recovery_point = 'captured', capture_id = $2 WHERE key = $1"
            ),
            key_finished: format!(
                "UPDATE {keys} SET recovery_point = 'finished', locked_at = NULL, \
                 response_code = $2, response_body = $3 WHERE key = $1"
            ),
            key_granted: format!("UPDATE {keys} SET recovery_point = 'granted' WHERE key = $1"),
            key_answer: format!(
                "UPDATE {keys} SET recovery_point = 'finished', locked_at = NULL, \
                 response_code = $2, response_body = $3 WHERE key = $1 AND recovery_point = 'granted'"
            ),
            hold: "SELECT pg_try_advisory_lock(hashtextextended($1, 0))".to_owned(),
            unhold: "SELECT pg_advisory_unlock(hashtextextended($1, 0))".to_owned(),
        }
    }

    async fn create(&self, admin: &PgPool, orders: usize) -> Result<(), sqlx::Error> {
        let Self {
            orders: o,
            coupons,
            keys,
            ..
        } = self;
        for statement in [
            format!("CREATE TABLE {o} (id BIGINT PRIMARY KEY, status TEXT NOT NULL)"),
            format!("CREATE TABLE {coupons} (id BIGSERIAL PRIMARY KEY, order_id BIGINT NOT NULL)"),
            format!(
                "CREATE TABLE {keys} (key TEXT PRIMARY KEY, recovery_point TEXT NOT NULL, \
                 locked_at TIMESTAMPTZ, capture_id TEXT, response_code INT, response_body TEXT)"
            ),
        ] {
            admin.execute(statement.as_str()).await?;
        }
        sqlx::query(&format!(
            "INSERT INTO {o} SELECT g, 'NEW' FROM generate_series(1, $1) AS g"
        ))
        .bind(orders as i64)
        .execute(admin)
        .await?;
        admin.execute(format!("ANALYZE {o}").as_str()).await?;
        Ok(())
    }

    async fn drop_all(&self, admin: &PgPool) -> Result<(), sqlx::Error> {
        let Self {
            orders,
            coupons,
            keys,
            records,
        } = self;
        admin
            .execute(
                format!(
                    "DROP TABLE IF EXISTS {orders}, {coupons}, {keys}, \"{records}\"; \
                     DROP SEQUENCE IF EXISTS \"{records}_token_seq\""
                )
                .as_str(),
            )
            .await?;
        Ok(())
    }
}

/// The pools every variant runs on: timed (straight to PostgreSQL) or counted (through the
/// proxy).
struct Rig {
    pool: PgPool,
    runner: Runner<PostgresStore>,
    traffic: Option<Arc<Traffic>>,
    /// The `application_name` of its sessions, to find their server processes.
    application: String,
}

impl Rig {
    async fn connect(
        url: &str,
        connections: u32,
        records: &str,
        counted: bool,
    ) -> Result<Self, String> {
        let (url, traffic) = if counted {
            let proxy = CountingProxy::start(upstream_of(url)?, Protocol::Postgres)
                .await
                .map_err(text)?;
            (
                plaintext_postgres(&through(url, proxy.addr)?),
                Some(proxy.traffic),
            )
        } else {
            (url.to_owned(), None)
        };
        let application = format!("{records}_{}", if counted { "counted" } else { "timed" });
        let connect = PgConnectOptions::from_str(&url)
            .map_err(text)?
            .application_name(&application);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .connect_with(connect)
            .await
            .map_err(text)?;
        let store = PostgresStore::new(pool.clone())
            .with_table_name(records)
            .map_err(text)?;
        Ok(Self {
            pool,
            runner: Runner::new(store),
            traffic,
            application,
        })
    }
}

/// Where a traced run marks the end of each phase.
struct Marks<'a> {
    traffic: Option<&'a Traffic>,
    at: Vec<(&'static str, Snapshot)>,
}

impl<'a> Marks<'a> {
    fn new(traffic: Option<&'a Traffic>) -> Self {
        let mut marks = Self {
            traffic,
            at: Vec::new(),
        };
        marks.mark("");
        marks
    }

    fn mark(&mut self, phase: &'static str) {
        if let Some(traffic) = self.traffic {
            self.at.push((phase, traffic.snapshot()));
        }
    }

    /// Each phase with what it sent.
    fn phases(&self) -> Vec<(&'static str, Snapshot)> {
        self.at
            .windows(2)
            .map(|pair| (pair[1].0, pair[1].1.since(&pair[0].1)))
            .collect()
    }
}

/// The recovery points of the hand-written handler.
enum Point {
    Started,
    Reserved,
    Captured,
    /// The coupon granted, the answer not stored yet (`hand+complete` only).
    Granted,
    Finished,
}

/// The checkout, every way.
struct Bench {
    sql: Sql,
    provider: Provider,
    scope: Scope,
    capture_in_tx: bool,
}

fn answer(capture: &str, coupon: i64) -> String {
    format!(r#"{{"capture_id":"{capture}","coupon_id":{coupon}}}"#)
}

fn text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

impl Bench {
    async fn run(
        &self,
        variant: Variant,
        rig: &Rig,
        order: i64,
        marks: &mut Marks<'_>,
    ) -> Result<(), String> {
        match variant.hand() {
            Some((hold, complete)) => {
                self.hand_written(&rig.pool, order, hold, complete, marks)
                    .await
            }
            None if variant == Variant::Steps => self.steps(&rig.runner, order, marks).await,
            None => self.store_direct(rig.runner.store(), order, marks).await,
        }
    }

    /// brandur's atomic phases, in raw sqlx; `hold` takes an advisory lock on the key around
    /// them, `complete` stores the answer by its own statement after `grant`'s commit.
    async fn hand_written(
        &self,
        pool: &PgPool,
        order: i64,
        hold: bool,
        complete: bool,
        marks: &mut Marks<'_>,
    ) -> Result<(), String> {
        let sql = &self.sql;
        let key = format!("hand-{order}");
        let mut conn = pool.acquire().await.map_err(text)?;
        if hold {
            let (held,): (bool,) = sqlx::query_as(&sql.hold)
                .bind(&key)
                .fetch_one(&mut *conn)
                .await
                .map_err(text)?;
            if !held {
                return Err(format!("key {key} is held"));
            }
        }
        // Phase 0: the key's row, on its own (a key seen before would be resumed or refused).
        let inserted: Option<(String,)> = sqlx::query_as(&sql.insert_key)
            .bind(&key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(text)?;
        let mut point = match inserted.as_ref().map(|(point,)| point.as_str()) {
            Some("started") => Point::Started,
            _ => return Err(format!("key {key} was used before")),
        };
        marks.mark("start");
        let (mut capture_id, mut body) = (String::new(), String::new());
        loop {
            point = match point {
                Point::Started => {
                    let mut tx = conn.begin().await.map_err(text)?;
                    let reserved = sqlx::query(&sql.reserve)
                        .bind(order)
                        .execute(&mut *tx)
                        .await
                        .map_err(text)?;
                    if reserved.rows_affected() != 1 {
                        return Err(format!("order {order} was not NEW"));
                    }
                    sqlx::query(&sql.key_reserved)
                        .bind(&key)
                        .execute(&mut *tx)
                        .await
                        .map_err(text)?;
                    tx.commit().await.map_err(text)?;
                    marks.mark("reserve");
                    Point::Reserved
                }
                Point::Reserved if self.capture_in_tx => {
                    // As brandur does: the foreign call inside the phase's transaction.
                    let mut tx = conn.begin().await.map_err(text)?;
                    capture_id = self.provider.capture(&key).await?;
                    sqlx::query(&sql.key_captured)
                        .bind(&key)
                        .bind(&capture_id)
                        .execute(&mut *tx)
                        .await
                        .map_err(text)?;
                    tx.commit().await.map_err(text)?;
                    marks.mark("capture");
                    Point::Captured
                }
                Point::Reserved => {
                    capture_id = self.provider.capture(&key).await?;
                    sqlx::query(&sql.key_captured)
                        .bind(&key)
                        .bind(&capture_id)
                        .execute(&mut *conn)
                        .await
                        .map_err(text)?;
                    marks.mark("capture");
                    Point::Captured
                }
                Point::Captured => {
                    let mut tx = conn.begin().await.map_err(text)?;
                    let (coupon,): (i64,) = sqlx::query_as(&sql.grant)
                        .bind(order)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(text)?;
                    body = answer(&capture_id, coupon);
                    if complete {
                        sqlx::query(&sql.key_granted)
                            .bind(&key)
                            .execute(&mut *tx)
                            .await
                            .map_err(text)?;
                    } else {
                        sqlx::query(&sql.key_finished)
                            .bind(&key)
                            .bind(201_i32)
                            .bind(&body)
                            .execute(&mut *tx)
                            .await
                            .map_err(text)?;
                    }
                    tx.commit().await.map_err(text)?;
                    marks.mark("grant");
                    if complete {
                        Point::Granted
                    } else {
                        Point::Finished
                    }
                }
                Point::Granted => {
                    sqlx::query(&sql.key_answer)
                        .bind(&key)
                        .bind(201_i32)
                        .bind(&body)
                        .execute(&mut *conn)
                        .await
                        .map_err(text)?;
                    Point::Finished
                }
                Point::Finished => break,
            };
        }
        if hold {
            sqlx::query(&sql.unhold)
                .bind(&key)
                .execute(&mut *conn)
                .await
                .map_err(text)?;
        }
        marks.mark("answer");
        Ok(())
    }

    /// The run's key, fingerprint and input.
    fn request(
        &self,
        order: i64,
    ) -> Result<(idempotency_core::StorageKey, Fingerprint, String), String> {
        let key = IdempotencyKey::parse(&format!("steps-{order}")).map_err(text)?;
        let input = format!(r#"{{"order_id":{order}}}"#);
        Ok((
            self.scope.storage_key(&key),
            Fingerprint::of_bytes(input.as_bytes()),
            input,
        ))
    }

    /// The same through `Runner` and `Run`.
    async fn steps(
        &self,
        runner: &Runner<PostgresStore>,
        order: i64,
        marks: &mut Marks<'_>,
    ) -> Result<(), String> {
        let sql = &self.sql;
        let (key, fingerprint, input) = self.request(order)?;
        let start = Start::new(&key, self.scope.namespace(), &fingerprint, input);
        let Started::Run(mut run) = runner.start(start).await.map_err(text)? else {
            return Err(format!("run of order {order} was not new"));
        };
        marks.mark("start");
        let reserved: bool = run
            .local("reserve", async |tx| {
                let done = sqlx::query(&sql.reserve)
                    .bind(order)
                    .execute(&mut **tx)
                    .await?;
                Ok(done.rows_affected() == 1)
            })
            .await
            .map_err(text)?;
        if !reserved {
            return Err(format!("order {order} was not NEW"));
        }
        marks.mark("reserve");
        let capture: String = run
            .foreign("capture", async |key| {
                self.provider.capture(key).await.map_err(StepError::retry)
            })
            .await
            .map_err(text)?;
        marks.mark("capture");
        let coupon: i64 = run
            .local("grant", async |tx| {
                let (id,): (i64,) = sqlx::query_as(&sql.grant)
                    .bind(order)
                    .fetch_one(&mut **tx)
                    .await?;
                Ok(id)
            })
            .await
            .map_err(text)?;
        marks.mark("grant");
        run.complete(&Outcome::new(201, answer(&capture, coupon)))
            .await
            .map_err(text)?;
        marks.mark("answer");
        Ok(())
    }

    /// The store's statements of a run, called directly: what `Runner` and `Run` send, without
    /// them (no spans, metrics, step results as JSON values or progress clones).
    async fn store_direct(
        &self,
        store: &PostgresStore,
        order: i64,
        marks: &mut Marks<'_>,
    ) -> Result<(), String> {
        let sql = &self.sql;
        let (key, fingerprint, input) = self.request(order)?;
        let mut conn = store.pool().acquire().await.map_err(text)?;
        let namespace = self.scope.namespace();
        let request = ClaimRequest {
            key: &key,
            namespace,
            fingerprint: &fingerprint,
            lease: DEFAULT_RUN_LEASE,
            claim_id: ClaimId::random(),
            mechanism: Some(Mechanism::Request),
            key_derivation: store
                .tx_request(namespace, &key, &fingerprint)
                .key_derivation,
        };
        let (true, Some(Claim::Acquired(owner))) =
            store.start_on(&mut conn, request).await.map_err(text)?
        else {
            return Err(format!("run of order {order} was not new"));
        };
        let mut progress = Progress::new(input);
        marks.mark("start");

        store.begin_on(&mut conn).await.map_err(text)?;
        let done = sqlx::query(&sql.reserve)
            .bind(order)
            .execute(&mut *conn)
            .await
            .map_err(text)?;
        if done.rows_affected() != 1 {
            return Err(format!("order {order} was not NEW"));
        }
        progress
            .steps
            .push(StepResult::new("reserve", serde_json::Value::Bool(true)));
        store
            .checkpoint_on(&mut conn, &key, owner.token, &progress, DEFAULT_RUN_LEASE)
            .await
            .map_err(text)?;
        store.commit_on(&mut conn).await.map_err(text)?;
        marks.mark("reserve");

        let capture = self.provider.capture(&key.downstream("capture")).await?;
        // Its checkpoint would be written with grant's transaction, which the answer supersedes.
        marks.mark("capture");

        store.begin_on(&mut conn).await.map_err(text)?;
        let (coupon,): (i64,) = sqlx::query_as(&sql.grant)
            .bind(order)
            .fetch_one(&mut *conn)
            .await
            .map_err(text)?;
        marks.mark("grant");

        // The answer commits with the last step, and gives the hold back.
        let outcome = Outcome::new(201, answer(&capture, coupon));
        store
            .complete_unhold_on(&mut conn, &key, owner.token, &outcome, DEFAULT_RUN_TTL)
            .await
            .map_err(text)?;
        store.commit_on(&mut conn).await.map_err(text)?;
        marks.mark("answer");
        Ok(())
    }
}

/// CPU time of the whole machine that was not idle, from `/proc/stat` (Linux; clock ticks of
/// 1/100 s). `None` elsewhere.
fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&index| ticks.get(index))
        .sum();
    Some(Duration::from_millis(busy * 10))
}

/// The CPU time so far of each server process of the sessions named `application`
/// (`/proc/<pid>/schedstat`, nanoseconds on a CPU: PostgreSQL on this machine, Linux).
async fn sessions_cpu(admin: &PgPool, application: &str) -> Result<HashMap<i32, u64>, String> {
    let pids: Vec<(i32,)> =
        sqlx::query_as("SELECT pid FROM pg_stat_activity WHERE application_name = $1")
            .bind(application)
            .fetch_all(admin)
            .await
            .map_err(text)?;
    Ok(pids
        .into_iter()
        .filter_map(|(pid,)| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
            Some((pid, stat.split_whitespace().next()?.parse().ok()?))
        })
        .collect())
}

/// The server's WAL position, in bytes.
async fn wal_position(admin: &PgPool) -> Result<i64, String> {
    let (lsn,): (i64,) =
        sqlx::query_as("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
            .fetch_one(admin)
            .await
            .map_err(text)?;
    Ok(lsn)
}

/// What one pass of runs measured.
struct Pass {
    runs: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// This process's CPU (client, provider, proxy).
    cpu: Option<Duration>,
    /// The rest of the machine's busy CPU (PostgreSQL's own processes, the kernel, and
    /// whatever else runs).
    rest: Option<Duration>,
    /// The CPU of the PostgreSQL server processes of the rig's sessions.
    sessions: Option<Duration>,
    wal_bytes: i64,
    traffic: Option<Snapshot>,
}

impl Pass {
    fn throughput(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64()
    }
}

/// Hands out each variant's orders, a block per pass.
struct Orders {
    next: Vec<AtomicI64>,
}

impl Orders {
    fn new(per_variant: usize) -> Self {
        Self {
            next: (0..VARIANTS.len())
                .map(|index| AtomicI64::new((index * per_variant) as i64 + 1))
                .collect(),
        }
    }

    fn take(&self, variant: Variant, runs: usize) -> i64 {
        self.next[index_of(variant)].fetch_add(runs as i64, Ordering::Relaxed)
    }
}

fn index_of(variant: Variant) -> usize {
    VARIANTS
        .iter()
        .position(|known| *known == variant)
        .unwrap_or(0)
}

/// `runs` checkouts of `variant` by `concurrency` tasks.
async fn drive(
    admin: &PgPool,
    bench: &Arc<Bench>,
    rig: &Arc<Rig>,
    variant: Variant,
    first_order: i64,
    runs: usize,
    concurrency: usize,
) -> Result<Pass, String> {
    let next = Arc::new(AtomicUsize::new(0));
    let wal_before = wal_position(admin).await?;
    let sessions_before = sessions_cpu(admin, &rig.application).await?;
    let before = rig.traffic.as_ref().map(|traffic| traffic.snapshot());
    let cpu_before = process_cpu().zip(machine_busy());
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (bench, rig, next) = (Arc::clone(bench), Arc::clone(rig), Arc::clone(&next));
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(runs / concurrency + 1);
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= runs {
                        return Ok::<_, String>(latencies);
                    }
                    let at = Instant::now();
                    let mut marks = Marks::new(None);
                    bench
                        .run(variant, &rig, first_order + index as i64, &mut marks)
                        .await?;
                    latencies.push(at.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(runs);
    for task in tasks {
        latencies.extend(task.await.map_err(text)??);
    }
    let elapsed = started.elapsed();
    let cpu_after = process_cpu().zip(machine_busy());
    let traffic = rig
        .traffic
        .as_ref()
        .zip(before)
        .map(|(traffic, before)| traffic.snapshot().since(&before));
    let wal_bytes = wal_position(admin).await? - wal_before;
    let sessions_after = sessions_cpu(admin, &rig.application).await?;
    let sessions = (!sessions_after.is_empty()).then(|| {
        let nanos: u64 = sessions_after
            .iter()
            .map(|(pid, after)| {
                after.saturating_sub(sessions_before.get(pid).copied().unwrap_or(0))
            })
            .sum();
        Duration::from_nanos(nanos)
    });
    let (cpu, rest) = match (cpu_before, cpu_after) {
        (Some((process0, busy0)), Some((process1, busy1))) => {
            let process = process1.saturating_sub(process0);
            let rest = busy1
                .saturating_sub(busy0)
                .saturating_sub(process)
                .saturating_sub(sessions.unwrap_or_default());
            (Some(process), Some(rest))
        }
        _ => (None, None),
    };
    Ok(Pass {
        runs,
        elapsed,
        latencies,
        cpu,
        rest,
        sessions,
        wal_bytes,
        traffic,
    })
}

/// Per phase of `runs` serial runs: round trips and statements, summed.
async fn trace(
    bench: &Bench,
    rig: &Rig,
    variant: Variant,
    first_order: i64,
    runs: usize,
) -> Result<Vec<(&'static str, Snapshot)>, String> {
    let traffic = rig.traffic.as_deref().ok_or("a traced rig needs a proxy")?;
    let mut totals: Vec<(&'static str, Snapshot)> = Vec::new();
    for index in 0..runs {
        let mut marks = Marks::new(Some(traffic));
        bench
            .run(variant, rig, first_order + index as i64, &mut marks)
            .await?;
        for (position, (phase, sent)) in marks.phases().into_iter().enumerate() {
            match totals.get_mut(position) {
                Some((_, total)) => {
                    total.bytes += sent.bytes;
                    total.writes += sent.writes;
                    for (sum, count) in total.messages.iter_mut().zip(sent.messages) {
                        *sum += count;
                    }
                }
                None => totals.push((phase, sent)),
            }
        }
    }
    Ok(totals)
}

/// A transaction id, taken for the purpose (`pg_current_xact_id()` assigns one).
async fn current_xid(admin: &PgPool) -> Result<i64, String> {
    let (xid,): (i64,) = sqlx::query_as("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(admin)
        .await
        .map_err(text)?;
    Ok(xid)
}

/// The transaction ids a run uses (its writing transactions): the median over `runs` serial
/// runs, each between two readings (the database's other activity only adds).
async fn xids_per_run(
    admin: &PgPool,
    bench: &Bench,
    rig: &Rig,
    variant: Variant,
    first_order: i64,
    runs: usize,
) -> Result<f64, String> {
    let mut used = Vec::with_capacity(runs);
    for index in 0..runs {
        let before = current_xid(admin).await?;
        let mut marks = Marks::new(None);
        bench
            .run(variant, rig, first_order + index as i64, &mut marks)
            .await?;
        // The second reading's own transaction is one of them.
        used.push((current_xid(admin).await? - before - 1) as f64);
    }
    Ok(median(&mut used))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn ms(duration: Duration) -> String {
    format!("{:.2}", duration.as_secs_f64() * 1e3)
}

fn sorted(latencies: &[Duration]) -> Vec<Duration> {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    sorted
}

/// Checks that `runs` checkouts from `first_order` committed: each order reserved, one coupon.
async fn verify(
    admin: &PgPool,
    tables: &Tables,
    first_order: i64,
    runs: usize,
) -> Result<(), String> {
    let last = first_order + runs as i64 - 1;
    let (reserved, coupons): (i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM {} WHERE id BETWEEN $1 AND $2 AND status = 'RESERVED'), \
                (SELECT count(*) FROM {} WHERE order_id BETWEEN $1 AND $2)",
        tables.orders, tables.coupons
    ))
    .bind(first_order)
    .bind(last)
    .fetch_one(admin)
    .await
    .map_err(text)?;
    if reserved != runs as i64 || coupons != runs as i64 {
        return Err(format!(
            "orders {first_order}..={last}: {reserved} reserved, {coupons} coupons, expected {runs}"
        ));
    }
    Ok(())
}

/// Everything measured of one variant.
struct Measured {
    variant: Variant,
    rounds: Vec<Pass>,
    counted: Pass,
    phases: Vec<(&'static str, Snapshot)>,
    xids: f64,
}

async fn bench(options: &Options) -> Result<(), String> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .map_err(text)?;
    let tables = Tables::new();
    let per_variant = options.orders_per_variant();
    eprintln!(
        "steps: creating {} orders in {} (load average {})",
        VARIANTS.len() * per_variant,
        tables.orders,
        load_average()
    );
    tables
        .create(&admin, VARIANTS.len() * per_variant)
        .await
        .map_err(text)?;
    let result = measure(options, &url, &admin, &tables, per_variant).await;
    if options.keep {
        eprintln!("steps: tables kept: {}_*", tables.records);
    } else if let Err(error) = tables.drop_all(&admin).await {
        eprintln!("steps: dropping the tables: {error}");
    }
    result
}

async fn measure(
    options: &Options,
    url: &str,
    admin: &PgPool,
    tables: &Tables,
    per_variant: usize,
) -> Result<(), String> {
    let connections = u32::try_from(options.concurrency).map_err(text)?;
    let timed = Arc::new(Rig::connect(url, connections, &tables.records, false).await?);
    let counted = Arc::new(Rig::connect(url, connections, &tables.records, true).await?);
    timed.runner.store().migrate().await.map_err(text)?;
    if options.drop_record_indexes {
        // Diagnosis only: the record table without its secondary indexes (purges and operators'
        // listings use them), so that a checkpoint may be a HOT update.
        let records = &tables.records;
        admin
            .execute(
                format!(
                    "DROP INDEX \"{records}_expires_idx\"; DROP INDEX \"{records}_reconcile_idx\""
                )
                .as_str(),
            )
            .await
            .map_err(text)?;
    }
    let bench = Arc::new(Bench {
        sql: tables.sql(),
        provider: Provider::serve().await?,
        scope: Scope::new(format!("checkout_{}", tables.records)),
        capture_in_tx: options.capture_in_tx,
    });
    let orders = Orders::new(per_variant);
    let c = options.concurrency;

    // Counted: warm the counted pool, count a pass at the same concurrency, then serial runs
    // phase by phase, and the writing transactions of serial runs.
    let mut measured: Vec<Measured> = Vec::new();
    for &variant in &options.variants {
        let first = orders.take(variant, COUNT_WARMUP);
        drive(admin, &bench, &counted, variant, first, COUNT_WARMUP, c).await?;
        let first = orders.take(variant, options.count_runs);
        let pass = drive(
            admin,
            &bench,
            &counted,
            variant,
            first,
            options.count_runs,
            c,
        )
        .await?;
        verify(admin, tables, first, options.count_runs).await?;
        let first = orders.take(variant, TRACED_RUNS);
        let phases = trace(&bench, &counted, variant, first, TRACED_RUNS).await?;
        let first = orders.take(variant, TRACED_RUNS);
        let xids = xids_per_run(admin, &bench, &counted, variant, first, TRACED_RUNS).await?;
        measured.push(Measured {
            variant,
            rounds: Vec::new(),
            counted: pass,
            phases,
            xids,
        });
    }

    // Timed: warm up, then alternate, the order reversed every other round.
    for &variant in &options.variants {
        let first = orders.take(variant, options.warmup);
        drive(admin, &bench, &timed, variant, first, options.warmup, c).await?;
    }
    for round in 0..options.rounds {
        let mut order: Vec<usize> = (0..measured.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let variant = measured[index].variant;
            let first = orders.take(variant, options.runs);
            let pass = drive(admin, &bench, &timed, variant, first, options.runs, c).await?;
            verify(admin, tables, first, options.runs).await?;
            let latencies = sorted(&pass.latencies);
            eprintln!(
                "steps: round {} {:>18}: {:.0} runs/s, p50 {} ms, p99 {} ms, CPU µs/run {} here + {} its PostgreSQL sessions, {} elsewhere (load average {})",
                round + 1,
                variant.name(),
                pass.throughput(),
                ms(percentile(&latencies, 0.5)),
                ms(percentile(&latencies, 0.99)),
                per_run(pass.cpu, pass.runs),
                per_run(pass.sessions, pass.runs),
                per_run(pass.rest, pass.runs),
                load_average()
            );
            measured[index].rounds.push(pass);
        }
    }
    // Closed, the pools' sessions report their table statistics.
    timed.pool.close().await;
    counted.pool.close().await;
    let updates = hot_updates(admin, tables).await?;
    report(options, &measured);
    println!("\n{updates}");
    Ok(())
}

/// How many updates of brandur's keys table and of the record table were HOT (no index entry
/// written), from `pg_stat_user_tables`.
async fn hot_updates(admin: &PgPool, tables: &Tables) -> Result<String, String> {
    let mut lines = Vec::new();
    for (label, table) in [
        ("idempotency_keys (hand-written)", tables.keys.as_str()),
        (
            "record table (steps, store-direct)",
            tables.records.as_str(),
        ),
    ] {
        let mut row: Option<(i64, i64, i64, i64)> = None;
        // The statistics arrive from the closed sessions within a second or so.
        for _ in 0..20 {
            row = sqlx::query_as(
                "SELECT n_tup_upd, n_tup_hot_upd, autovacuum_count, \
                 pg_total_relation_size(relid) FROM pg_stat_user_tables WHERE relname = $1",
            )
            .bind(table)
            .fetch_optional(admin)
            .await
            .map_err(text)?;
            if row.is_some_and(|(updates, ..)| updates > 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if let Some((updates, hot, vacuums, size)) = row.filter(|(updates, ..)| *updates > 0) {
            lines.push(format!(
                "{label}: {updates} updates, {hot} of them HOT ({:.0} %), {vacuums} autovacuums, \
                 {:.1} MB with its indexes",
                hot as f64 * 100.0 / updates as f64,
                size as f64 / 1e6
            ));
        }
    }
    Ok(lines.join("; "))
}

fn per_run(total: Option<Duration>, runs: usize) -> String {
    total.map_or("?".to_owned(), |total| {
        format!("{:.0}", total.as_secs_f64() * 1e6 / runs as f64)
    })
}

fn report(options: &Options, measured: &[Measured]) {
    let capture = if options.capture_in_tx {
        "in the phase's transaction, as brandur does"
    } else {
        "one autocommit statement after the call"
    };
    println!(
        "\n{} runs × {} rounds per variant at concurrency {} (warm-up {}); hand-written capture: {capture}; load average {}\n",
        options.runs,
        options.rounds,
        options.concurrency,
        options.warmup,
        load_average()
    );
    println!(
        "| variant | runs/s (median) | runs/s (rounds) | / hand-written | p50 ms | p99 ms | round trips/run (of them pool pings) | statements/run | writing transactions/run | WAL bytes/run | CPU µs/run: this process | its PostgreSQL sessions | the rest of the machine |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let medians: Vec<f64> = measured
        .iter()
        .map(|m| median(&mut m.rounds.iter().map(Pass::throughput).collect::<Vec<_>>()))
        .collect();
    let hand = measured
        .iter()
        .position(|m| m.variant == Variant::HandWritten)
        .map(|index| medians[index]);
    for (m, median) in measured.iter().zip(&medians) {
        let rounds = m
            .rounds
            .iter()
            .map(|pass| format!("{:.0}", pass.throughput()))
            .collect::<Vec<_>>()
            .join(", ");
        let latencies = sorted(
            &m.rounds
                .iter()
                .flat_map(|pass| pass.latencies.iter().copied())
                .collect::<Vec<_>>(),
        );
        let runs: usize = m.rounds.iter().map(|pass| pass.runs).sum();
        let cpu: Option<Duration> = m.rounds.iter().map(|pass| pass.cpu).sum();
        let rest: Option<Duration> = m.rounds.iter().map(|pass| pass.rest).sum();
        let sessions: Option<Duration> = m.rounds.iter().map(|pass| pass.sessions).sum();
        let wal: i64 = m.rounds.iter().map(|pass| pass.wal_bytes).sum();
        let (trips, statements) =
            m.counted
                .traffic
                .as_ref()
                .map_or(("?".to_owned(), "?".to_owned()), |traffic| {
                    let runs = m.counted.runs as f64;
                    (
                        format!(
                            "{:.2} ({:.2})",
                            traffic.pg_round_trips() as f64 / runs,
                            traffic.pg_pings() as f64 / runs
                        ),
                        format!("{:.2}", traffic.pg_statements() as f64 / runs),
                    )
                });
        let ratio = hand.map_or("?".to_owned(), |hand| format!("{:.3}", median / hand));
        println!(
            "| {} | {median:.0} | {rounds} | {ratio} | {} | {} | {trips} | {statements} | {:.0} | {:.0} | {} | {} | {} |",
            m.variant.name(),
            ms(percentile(&latencies, 0.5)),
            ms(percentile(&latencies, 0.99)),
            m.xids,
            wal as f64 / runs.max(1) as f64,
            per_run(cpu, runs),
            per_run(sessions, runs),
            per_run(rest, runs),
        );
    }
    let steps = measured
        .iter()
        .position(|m| m.variant == Variant::Steps)
        .map(|index| medians[index]);
    if let (Some(steps), Some(hand)) = (steps, hand) {
        let ratio = steps / hand;
        println!(
            "\n**steps / hand-written: {ratio:.3}** (floor 0.9: {})",
            if ratio >= 0.9 { "met" } else { "not met" }
        );
    }

    println!(
        "\nPer step ({TRACED_RUNS} serial runs through the proxy; round trips / statements per run, the pool's pings apart):\n"
    );
    print!("| step |");
    for m in measured {
        print!(" {} |", m.variant.name());
    }
    println!();
    println!("|---|{}", "---|".repeat(measured.len()));
    let cell = |phases: &[(&'static str, Snapshot)], name: &str| {
        phases
            .iter()
            .find(|(phase, _)| *phase == name)
            .map_or("—".to_owned(), |(_, sent)| {
                format!(
                    "{} / {}",
                    round1((sent.pg_round_trips() - sent.pg_pings()) as f64 / TRACED_RUNS as f64),
                    round1(sent.pg_statements() as f64 / TRACED_RUNS as f64)
                )
            })
    };
    for (name, label) in [
        ("start", "start: key row (hand), hold + claim (steps)"),
        (
            "reserve",
            "reserve (local; steps: its checkpoint and commit come next)",
        ),
        (
            "capture",
            "capture (foreign; steps: + reserve's checkpoint and commit)",
        ),
        ("grant", "grant (local; hand-written: + the answer)"),
        (
            "answer",
            "the answer, the hold given back (steps: + grant's commit)",
        ),
    ] {
        print!("| {label} |");
        for m in measured {
            print!(" {} |", cell(&m.phases, name));
        }
        println!();
    }
    print!("| **per run** |");
    for m in measured {
        let sum = |count: fn(&Snapshot) -> u64| -> u64 {
            m.phases.iter().map(|(_, sent)| count(sent)).sum()
        };
        let trips = sum(Snapshot::pg_round_trips) - sum(Snapshot::pg_pings);
        print!(
            " **{} / {}** |",
            round1(trips as f64 / TRACED_RUNS as f64),
            round1(sum(Snapshot::pg_statements) as f64 / TRACED_RUNS as f64),
        );
    }
    println!();
    let parses: u64 = measured
        .iter()
        .flat_map(|m| m.phases.iter().map(|(_, sent)| sent.messages(b'P')))
        .sum();
    println!(
        "\nPlus the pool's two pings per run (sqlx tests a connection on acquiring and on releasing it); statements prepared during the serial runs: {parses}."
    );
}

/// `value` with one decimal, or none when it is whole.
fn round1(value: f64) -> String {
    if (value - value.round()).abs() < 0.05 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("steps: {error}");
            return std::process::ExitCode::from(2);
        }
    };
    match bench(&options).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("steps: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
