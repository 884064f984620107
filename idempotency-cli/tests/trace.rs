//! `idempotency trace`, run as an operator runs it: one trade followed from the callback
//! service's record and outbox (real PostgreSQL, `DATABASE_URL`) to the coupon service's record
//! (real MariaDB/MySQL, `MYSQL_URL`), also after the outbox row was purged; a trade that never
//! reached the receiver exits 5 (not found).
#![cfg(all(feature = "postgres", feature = "mysql"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::{Command, Stdio};
use std::time::Duration;

use idempotency_core::{IdempotencyKey, Outcome, Scope};
use idempotency_outbox::table::{Archive, ClaimBatch, OutboxTable, message_id};
use idempotency_outbox::{Outbox, OutboxMessage};
use idempotency_sql::{MySqlStore, PostgresStore};
use idempotency_test::{completed, unavailable, unique_namespace};
use serde_json::Value;

/// Runs `idempotency` with `args`: its exit code and the JSON objects it printed.
fn idempotency(args: &[String]) -> (i32, Vec<Value>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_idempotency"))
        .args(args)
        .env_remove("IDEMPOTENCY_STORE_URL")
        .env_remove("IDEMPOTENCY_RECEIVER_STORE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run idempotency");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    (
        output.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Each hop's (hop, state).
fn states(lines: &[Value]) -> Vec<(String, String)> {
    lines
        .iter()
        .map(|line| {
            (
                line["hop"].as_str().unwrap().to_owned(),
                line["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pair(hop: &str, state: &str) -> (String, String) {
    (hop.to_owned(), state.to_owned())
}

#[tokio::test]
async fn a_trade_is_traced_across_two_databases_also_after_its_outbox_row_was_purged() {
    let pg_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let my_url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let pg = match sqlx::PgPool::connect(&pg_url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    };
    let my = match sqlx::MySqlPool::connect(&my_url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("MySQL", error).unwrap_or_default(),
    };
    let name = |prefix: &str| unique_namespace(prefix).replace(['.', '-'], "_");
    let (records_a, outbox_table, records_b) = (name("trace_a"), name("trace_ob"), name("trace_b"));
    let (callbacks, coupons) = (
        unique_namespace("payments.callback"),
        unique_namespace("coupon.consumer"),
    );
    let trade = IdempotencyKey::parse(&format!("T{}", name("x"))).unwrap();

    // The callback service (database A): its record of the trade, and the message it enqueued.
    let store_a = PostgresStore::new(pg.clone())
        .with_table_name(&records_a)
        .unwrap();
    store_a.migrate().await.unwrap();
    let long = Duration::from_secs(3600);
    completed(
        &store_a,
        &Scope::new(callbacks.as_str()),
        trade.as_str(),
        &Outcome::new(200, "success"),
        long,
    )
    .await;
    let outbox = Outbox::postgres(pg.clone())
        .with_table_name(&outbox_table)
        .unwrap();
    outbox.migrate().await.unwrap();
    let grant = OutboxMessage::new(
        &Scope::new("coupon.grant"),
        &trade,
        "coupon.grant",
        b"{}".to_vec(),
    );
    let mut tx = pg.begin().await.unwrap();
    assert!(outbox.enqueue(&mut tx, &grant).await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(grant.id, message_id(&Scope::new("coupon.grant"), &trade));

    // The coupon service (database B): its record is keyed by the message id, not the trade.
    let store_b = MySqlStore::new(my.clone())
        .with_table_name(&records_b)
        .unwrap();
    store_b.migrate().await.unwrap();
    completed(
        &store_b,
        &Scope::new(coupons.as_str()),
        &grant.id,
        &Outcome::new(200, "granted"),
        long,
    )
    .await;

    let trace = |key: &str| -> Vec<String> {
        [
            "trace",
            "--json",
            "--store",
            &pg_url,
            "--table",
            &records_a,
            "--namespace",
            &callbacks,
            "--key",
            key,
            "--outbox-table",
            &outbox_table,
            "--message-namespace",
            "coupon.grant",
            "--receiver-store",
            &my_url,
            "--receiver-table",
            &records_b,
            "--receiver-namespace",
            &coupons,
            "--receiver-mechanism",
            "request",
        ]
        .map(str::to_owned)
        .to_vec()
    };

    let (code, lines, stderr) = idempotency(&trace(trade.as_str()));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        states(&lines),
        [
            pair("sender", "completed"),
            pair("outbox", "pending"),
            pair("receiver", "completed")
        ]
    );
    assert_eq!(lines[1]["key"], grant.id.as_str(), "the derived message id");

    // The relay sent it, and purged it past its retention: the trace derives the id anyway.
    let claimed = outbox
        .claim(ClaimBatch {
            limit: 10,
            lease: Duration::from_secs(60),
            claim: 5,
        })
        .await
        .unwrap();
    assert_eq!(outbox.mark_sent(5, &[claimed[0].seq]).await.unwrap(), 1);
    assert_eq!(
        outbox
            .purge_sent(Duration::ZERO, 10, &mut Archive::None)
            .await
            .unwrap(),
        1
    );
    let (code, lines, stderr) = idempotency(&trace(trade.as_str()));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        states(&lines),
        [
            pair("sender", "completed"),
            pair("outbox", "purged"),
            pair("receiver", "completed")
        ]
    );

    // A trade the receiver never saw: every hop printed, and exit 5 (not found).
    let (code, lines, stderr) = idempotency(&trace("T-never-paid"));
    assert_eq!(code, 5, "{stderr}");
    assert_eq!(
        states(&lines),
        [
            pair("sender", "absent"),
            pair("outbox", "purged"),
            pair("receiver", "absent")
        ]
    );
    assert!(stderr.contains("no record"), "{stderr}");
}
