//! The payments service checks the gateway's signature before it claims a callback's key,
//! when `CALLBACK_SECRET` is set (and says at start that it does not, when it is not): the
//! real `payments` process, on a SQLite file of its own, over real TCP.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(feature = "sqlite")]

mod hardening_support;

use std::net::SocketAddr;

use axum_payments::client::{Connection, Reply, post_json};
use axum_payments::signature::{SIGNATURE_HEADER, sign};
use axum_payments::{PaymentCallback, gateway};
use hardening_support::{Payments, temp_path, unique};
use http::StatusCode;

const SECRET: &str = "gateway-shared-secret";

fn sqlite_env() -> Vec<(&'static str, String)> {
    let file = temp_path("payments", "db");
    vec![(
        "SQLITE_URL",
        format!("sqlite://{}?mode=rwc", file.display()),
    )]
}

/// The callback, signed with `secret` (or not signed).
async fn deliver(addr: SocketAddr, callback: &PaymentCallback, secret: Option<&[u8]>) -> Reply {
    let body = serde_json::to_vec(callback).unwrap();
    let mut request = post_json(
        "/payments/callback",
        None,
        &serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
    )
    .unwrap();
    if let Some(secret) = secret {
        let bytes =
            serde_json::to_vec(&serde_json::from_slice::<serde_json::Value>(&body).unwrap())
                .unwrap();
        request
            .headers_mut()
            .insert(SIGNATURE_HEADER, sign(secret, &bytes).parse().unwrap());
    }
    let mut connection = Connection::open(addr).await.unwrap();
    connection.send(request).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_callback_neither_runs_nor_takes_the_key() {
    let mut env = sqlite_env();
    env.push(("CALLBACK_SECRET", SECRET.to_owned()));
    let service = Payments::start("sqlite", &env);
    let user = 7_000 + u64::from(std::process::id() % 1000);
    let order = gateway::create_order(service.addr, user, 1299, &unique("order"))
        .await
        .unwrap();
    let paid = PaymentCallback {
        trade_no: unique("T"),
        order_id: order.order_id,
    };

    // Forged (unsigned, then signed with another secret) before the real one: refused, nothing
    // claimed, nothing granted.
    for secret in [None, Some(&b"not-the-secret"[..])] {
        let forged = deliver(service.addr, &paid, secret).await;
        assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
        assert_eq!(forged.content_type(), Some("application/problem+json"));
    }
    assert_eq!(gateway::coupons(service.addr, user).await.unwrap(), 0);

    // The real callback runs: the forged ones took nothing from it.
    let real = deliver(service.addr, &paid, Some(SECRET.as_bytes())).await;
    assert_eq!(real.status, StatusCode::OK);
    assert!(!real.is_replay());
    // A forged one after it reads nothing of the stored answer.
    let forged = deliver(service.addr, &paid, None).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert!(!forged.is_replay());
    let again = deliver(service.addr, &paid, Some(SECRET.as_bytes())).await;
    assert!(again.is_replay());
    assert_eq!(gateway::coupons(service.addr, user).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_secret_the_service_says_so_at_start() {
    let service = Payments::start("sqlite", &sqlite_env());
    let order = gateway::create_order(service.addr, 1, 100, &unique("order"))
        .await
        .unwrap();
    let paid = PaymentCallback {
        trade_no: unique("T"),
        order_id: order.order_id,
    };
    assert_eq!(
        deliver(service.addr, &paid, None).await.status,
        StatusCode::OK
    );
    assert!(
        service.stderr_text().contains("CALLBACK_SECRET is not set"),
        "{}",
        service.stderr_text()
    );
}
