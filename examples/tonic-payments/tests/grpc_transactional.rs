//! Transactional gRPC over real TCP with a real tonic client, on PostgreSQL (`DATABASE_URL`):
//! the key from metadata `idempotency-key`, claimed in the call's own transaction; the coupon
//! and the record commit together; a failed call rolls both back; a client's deadline retry
//! waits for the first call and gets its answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use idempotency_sql::PostgresStore;
use idempotency_test::{unavailable, unique_key};
use sqlx::PgPool;
use tokio::net::TcpListener;
use tonic::Code;
use tonic::transport::Channel;
use tonic_payments::proto::payments_client::PaymentsClient;
use tonic_payments::proto::{CheckoutRequest, PaymentCallbackRequest};
use tonic_payments::{FAILING_TRADE, LedgerService, serve_transactional, with_key};

struct Ledger {
    addr: SocketAddr,
    pool: PgPool,
    coupons: String,
    tables: Vec<String>,
}

impl Ledger {
    async fn start(callback_delay: Duration) -> Option<Self> {
        let url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let pool = match PgPool::connect(&url).await {
            Ok(pool) => pool,
            Err(error) => return unavailable("PostgreSQL", error),
        };
        let prefix = format!("grpc_{}_", &unique_key().to_hex()[..10]);
        let store = PostgresStore::new(pool.clone())
            .with_table_name(&format!("{prefix}records"))
            .unwrap();
        store.migrate().await.unwrap();
        let service = LedgerService::new(&prefix)
            .unwrap()
            .with_callback_delay(callback_delay);
        service.migrate(&pool).await.unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_transactional(listener, service, store));
        Some(Self {
            addr,
            pool,
            coupons: format!("{prefix}coupons"),
            tables: ["records", "orders", "coupons", "checkouts"]
                .map(|table| format!("{prefix}{table}"))
                .to_vec(),
        })
    }

    async fn client(&self) -> PaymentsClient<Channel> {
        PaymentsClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    async fn coupons(&self, trade_no: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {} WHERE trade_no = $1", self.coupons);
        let (n,): (i64,) = sqlx::query_as(&sql)
            .bind(trade_no)
            .fetch_one(&self.pool)
            .await
            .unwrap();
        n
    }

    async fn drop_tables(self) {
        let records = &self.tables[0];
        sqlx::raw_sql(&format!(
            "DROP TABLE {}; DROP TABLE {}; DROP TABLE {}; DROP TABLE {records}; \
             DROP SEQUENCE {records}_token_seq; \
             DELETE FROM idempotency_schema WHERE table_name = '{records}'",
            self.tables[1], self.tables[2], self.tables[3]
        ))
        .execute(&self.pool)
        .await
        .unwrap();
    }
}

/// How many rows `step` of the checkout of `order_id` wrote.
async fn checkout_rows(ledger: &Ledger, order_id: &str, step: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE order_id = $1 AND step = $2",
        ledger.tables[3]
    );
    let (n,): (i64,) = sqlx::query_as(&sql)
        .bind(order_id)
        .bind(step)
        .fetch_one(&ledger.pool)
        .await
        .unwrap();
    n
}

/// `Checkout` is a run with steps over gRPC: it fails (`UNAVAILABLE`, not stored) after its
/// `reserve` step; the identical retry resumes after `reserve` (not run again) and completes;
/// the next retry is the stored answer, replayed with its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkout_resumes_after_its_last_step() {
    let Some(ledger) = Ledger::start(Duration::ZERO).await else {
        return;
    };
    let mut client = ledger.client().await;
    let order_id = trade(FAILING_TRADE);
    let request = || {
        let checkout = CheckoutRequest {
            order_id: order_id.clone(),
        };
        with_key(checkout, &order_id).unwrap()
    };
    let failed = client.checkout(request()).await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert_eq!(checkout_rows(&ledger, &order_id, "reserve").await, 1);
    assert_eq!(checkout_rows(&ledger, &order_id, "grant").await, 0);

    let done = client.checkout(request()).await.unwrap();
    assert!(!replayed(&done));
    assert_eq!(
        checkout_rows(&ledger, &order_id, "reserve").await,
        1,
        "not run again"
    );
    assert_eq!(checkout_rows(&ledger, &order_id, "grant").await, 1);
    let again = client.checkout(request()).await.unwrap();
    assert!(replayed(&again));
    assert_eq!(again.get_ref(), done.get_ref());
    assert_eq!(checkout_rows(&ledger, &order_id, "grant").await, 1);
    ledger.drop_tables().await;
}

fn paid(trade_no: &str) -> PaymentCallbackRequest {
    PaymentCallbackRequest {
        trade_no: trade_no.to_owned(),
        order_id: "ord-1".to_owned(),
        amount_cents: 1299,
    }
}

fn replayed<T>(response: &tonic::Response<T>) -> bool {
    response
        .metadata()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

fn trade(prefix: &str) -> String {
    format!("{prefix}{}", &unique_key().to_hex()[..12])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_and_its_record_commit_together() {
    let Some(ledger) = Ledger::start(Duration::ZERO).await else {
        return;
    };
    let mut client = ledger.client().await;
    let trade_no = trade("T");

    let first = client
        .payment_callback(with_key(paid(&trade_no), &trade_no).unwrap())
        .await
        .unwrap();
    assert!(!replayed(&first));
    let again = client
        .payment_callback(with_key(paid(&trade_no), &trade_no).unwrap())
        .await
        .unwrap();
    assert!(replayed(&again));
    assert_eq!(again.get_ref(), first.get_ref());
    assert_eq!(ledger.coupons(&trade_no).await, 1);

    // No key: INVALID_ARGUMENT, nothing written.
    let status = client
        .payment_callback(paid(&trade("N")))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    // A failing handler (UNAVAILABLE after its write): rolled back, and the retry runs.
    let failing = trade(FAILING_TRADE);
    for _ in 0..2 {
        let status = client
            .payment_callback(with_key(paid(&failing), &failing).unwrap())
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(ledger.coupons(&failing).await, 0, "rolled back");
    }
    ledger.drop_tables().await;
}

/// The client gives up after its deadline; its retry with the same key waits for the first
/// call (still running, detached from its dead request) and gets its answer: no `ABORTED`, no
/// second coupon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_retry_waits_and_replays() {
    let Some(ledger) = Ledger::start(Duration::from_millis(1200)).await else {
        return;
    };
    let mut client = ledger.client().await;
    let trade_no = trade("T");
    let mut first = with_key(paid(&trade_no), &trade_no).unwrap();
    first.set_timeout(Duration::from_millis(300));
    let status = client.payment_callback(first).await.unwrap_err();
    // The client's deadline, or the server's (tonic ends a call past its `grpc-timeout`).
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{status:?}"
    );

    let mut retry = with_key(paid(&trade_no), &trade_no).unwrap();
    retry.set_timeout(Duration::from_secs(5));
    let answer = client.payment_callback(retry).await.unwrap();
    assert!(replayed(&answer), "the first call's answer, replayed");
    assert_eq!(ledger.coupons(&trade_no).await, 1);

    // With too little time left to wait, the retry of a running call is refused in time.
    let slow = trade("S");
    let running = tokio::spawn({
        let (mut client, request) = (client.clone(), with_key(paid(&slow), &slow).unwrap());
        async move { client.payment_callback(request).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut impatient = with_key(paid(&slow), &slow).unwrap();
    impatient.set_timeout(Duration::from_millis(300));
    let status = client.payment_callback(impatient).await.unwrap_err();
    assert!(
        matches!(
            status.code(),
            Code::Aborted | Code::DeadlineExceeded | Code::Cancelled
        ),
        "{status:?}"
    );
    assert!(!replayed(&running.await.unwrap().unwrap()));
    assert_eq!(ledger.coupons(&slow).await, 1);
    ledger.drop_tables().await;
}
