//! The operations drill of the README, run: the payments service with its records in Redis and
//! its orders and coupons in PostgreSQL (`IDEMPOTENCY_STORE=redis` with `DATABASE_URL`), a
//! process killed with SIGKILL in its callback handler (`HANDLER_DELAY_MS`) after its payment
//! committed. The gateway's retry is refused (the dead process's record is still in progress);
//! the operator finds the record among the stuck ones and releases it, fenced and audited (the
//! operations the `idempotency` command runs); the next retry is processed once: the order
//! paid, one coupon, the record completed.
#![cfg(all(feature = "redis", feature = "postgres"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum_payments::{CALLBACK_NAMESPACE, OrderStatus, PaymentCallback, gateway};
use http::StatusCode;
use idempotency_core::{Mechanism, RecordState, Scope};
use idempotency_operations::{Actor, Admin, Fence, Query, Step, TracingAudit};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;

const PAYMENTS: &str = env!("CARGO_BIN_EXE_payments");
const PATIENCE: Duration = Duration::from_secs(60);

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// The payments service as a process of its own on `addr`, with `vars` besides the drill's.
struct Payments(Child);

impl Payments {
    async fn start(addr: SocketAddr, vars: &[(&str, &str)]) -> Self {
        let child = Command::new(PAYMENTS)
            .env("IDEMPOTENCY_STORE", "redis")
            .env("REDIS_URL", env_or("REDIS_URL", "redis://127.0.0.1:6379"))
            .env(
                "DATABASE_URL",
                env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test"),
            )
            .env("ADDR", addr.to_string())
            .envs(vars.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + PATIENCE;
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "payments never listened on {addr}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self(child)
    }

    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for Payments {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_left_by_a_process_killed_in_its_handler_is_found_released_and_retried_once() {
    let redis_url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let redis = match RedisStore::connect(&redis_url).await {
        Ok(redis) => redis,
        Err(error) => return unavailable("Redis", error).unwrap_or(()),
    };
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    if let Err(error) = sqlx::PgPool::connect(&database_url).await {
        return unavailable("PostgreSQL", error).unwrap_or(());
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let user = u64::try_from(nanos % 1_000_000_000_000).unwrap();

    // The process that dies (its POST handlers pause for 10 min after their writes) and the one
    // that stays.
    let (dying_addr, live_addr) = (free_addr(), free_addr());
    let dying = Payments::start(dying_addr, &[("HANDLER_DELAY_MS", "600000")]).await;
    let live = Payments::start(live_addr, &[]).await;
    let order = gateway::create_order(live_addr, user, 4200, &format!("order-{nanos}"))
        .await
        .unwrap();
    let callback = PaymentCallback {
        trade_no: format!("T-{nanos}"),
        order_id: order.order_id,
    };
    let in_handler = {
        let callback = callback.clone();
        tokio::spawn(async move { gateway::deliver_sequentially(dying_addr, &callback, 1).await })
    };
    // Its payment committed (the handler's writes), then it pauses: killed there.
    let deadline = Instant::now() + PATIENCE;
    while gateway::order(live_addr, order.order_id)
        .await
        .unwrap()
        .status
        != OrderStatus::Paid
    {
        assert!(Instant::now() < deadline, "the payment never committed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    dying.kill();
    assert!(
        in_handler.await.unwrap().is_err(),
        "the killed process cannot answer"
    );

    // The gateway's retry: the dead process's record is still in progress.
    let retry = gateway::deliver_sequentially(live_addr, &callback, 1)
        .await
        .unwrap();
    assert_eq!(retry[0].status, StatusCode::CONFLICT);

    // The operator: `idempotency stuck --older-than 0s --namespace payments.callback`, then
    // `idempotency release --namespace payments.callback --key T-… --yes`.
    let admin = Admin::new(redis, TracingAudit);
    let key = Admin::storage_key(
        &Scope::new(CALLBACK_NAMESPACE),
        Mechanism::Request,
        &callback.trade_no,
    );
    let stuck = Query::stuck(Some(Duration::ZERO)).namespace(CALLBACK_NAMESPACE);
    let stuck = admin.list(&stuck, usize::MAX, &mut |_| {}).await.unwrap();
    let record = stuck
        .iter()
        .find(|record| record.key == key)
        .expect("the dangling record among the stuck ones");
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!(record.attempts, 1);
    let actor = Actor::new("drill", "killed in its handler");
    let released = admin
        .act(&key, Fence::of(record), &actor, Step::Release)
        .await
        .unwrap();
    assert!(released.applied(), "{released:?}");
    // The same fence again: the record it was taken of is gone, so nothing is done.
    let again = admin
        .act(&key, Fence::of(record), &actor, Step::Release)
        .await
        .unwrap();
    assert!(!again.applied());

    // The next retry runs the callback once: already paid (the state machine), no new coupon.
    let retry = gateway::deliver_sequentially(live_addr, &callback, 2)
        .await
        .unwrap();
    assert_eq!(
        retry[0].status,
        StatusCode::OK,
        "{}",
        gateway::tally(&retry)
    );
    assert!(!retry[0].is_replay());
    assert!(retry[1].is_replay());
    assert_eq!(gateway::coupons(live_addr, user).await.unwrap(), 1);
    let reconciled = admin.reconcile(&[key]).await.unwrap();
    let record = reconciled[0].as_ref().expect("the trade's record");
    assert_eq!(record.state, RecordState::Completed);
    assert_eq!(record.outcome.as_ref().unwrap().status, 200);
    drop(live);
}
