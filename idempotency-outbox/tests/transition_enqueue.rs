//! The side effect hangs off the transition: `Outbox::enqueue_if_applied` applies a state
//! transition and enqueues its message in the caller's transaction, on real PostgreSQL
//! (`DATABASE_URL`), MySQL/MariaDB (`MYSQL_URL`) and SQLite: only an applied transition
//! enqueues, and a rolled-back transaction leaves neither the state change nor the message
//! (`Outbox::find` tells, by the message id).
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use idempotency_outbox::Outbox;
use idempotency_outbox::table::{ClaimBatch, OutboxTable};
use idempotency_sql::{Transition, TransitionOutcome};
use support::{TestOutbox, message, unique};

/// Runs the scenario on `$outbox` (a fresh `TestOutbox`), beginning transactions with
/// `$begin`, quoting the orders table with `$quote`.
macro_rules! scenario {
    ($outbox:ty, $begin:expr, $quote:literal) => {{
        let Some(outbox) = <$outbox>::fresh().await else {
            return;
        };
        let orders = unique("orders");
        let q = |sql: &str| sql.replace("{t}", &format!("{}{orders}{}", $quote, $quote));
        let pool = outbox.pool().clone();
        sqlx::query(&q(
            "CREATE TABLE {t} (trade_no VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL)",
        ))
        .execute(&pool)
        .await
        .unwrap();
        for (trade, status) in [("T1", "WAIT_PAY"), ("T2", "WAIT_PAY"), ("T3", "CLOSED")] {
            sqlx::query(&q(&format!(
                "INSERT INTO {{t}} (trade_no, status) VALUES ('{trade}', '{status}')"
            )))
            .execute(&pool)
            .await
            .unwrap();
        }
        let paid = Transition::new(&orders, "trade_no", "status")
            .unwrap()
            .from("WAIT_PAY")
            .to("PAID");
        let grant = |trade: &str| message(trade, "coupon.grant");
        let run = async |trade: &str, commit: bool| {
            let mut tx = $begin(&pool).await;
            let outcome = outbox
                .enqueue_if_applied(&mut tx, &paid, trade.to_owned(), &grant(trade))
                .await
                .unwrap();
            if commit {
                tx.commit().await.unwrap();
            } else {
                tx.rollback().await.unwrap();
            }
            outcome
        };

        assert_eq!(run("T1", true).await, TransitionOutcome::Applied);
        assert_eq!(run("T1", true).await, TransitionOutcome::AlreadyInTarget);
        assert_eq!(run("T2", false).await, TransitionOutcome::Applied);
        assert_eq!(
            run("T3", true).await,
            TransitionOutcome::Illegal {
                current: "CLOSED".to_owned()
            }
        );
        assert_eq!(run("T9", true).await, TransitionOutcome::NotFound);

        let status: String = sqlx::query_scalar(&q("SELECT status FROM {t} WHERE trade_no = 'T2'"))
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(status, "WAIT_PAY", "rolled back with its message");
        let claimed = outbox
            .claim(ClaimBatch {
                limit: 10,
                lease: Duration::from_secs(30),
                claim: 7,
            })
            .await
            .unwrap();
        let found = outbox.find(&grant("T1").id).await.unwrap().unwrap();
        assert_eq!(
            (found.state.as_str(), found.topic.as_str()),
            ("pending", "coupon.grant")
        );
        assert_eq!((found.attempts, found.last_error), (0, None));
        assert_eq!(
            outbox.find(&grant("T2").id).await.unwrap(),
            None,
            "rolled back"
        );
        let ids: Vec<&str> = claimed.iter().map(|c| c.message.id.as_str()).collect();
        assert_eq!(
            ids,
            [grant("T1").id.as_str()],
            "only the applied, committed transition enqueued"
        );
    }};
}

#[tokio::test]
async fn postgres_enqueues_only_what_an_applied_transition_commits() {
    scenario!(
        Outbox<sqlx::Postgres>,
        async |pool: &sqlx::PgPool| pool.begin().await.unwrap(),
        "\""
    );
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_enqueues_only_what_an_applied_transition_commits() {
    scenario!(
        Outbox<sqlx::MySql>,
        async |pool: &sqlx::MySqlPool| pool.begin().await.unwrap(),
        "`"
    );
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_enqueues_only_what_an_applied_transition_commits() {
    scenario!(
        Outbox<sqlx::Sqlite>,
        async |pool: &sqlx::SqlitePool| pool.begin_with("BEGIN IMMEDIATE").await.unwrap(),
        "\""
    );
}
