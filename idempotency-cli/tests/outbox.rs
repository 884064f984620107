//! The `idempotency outbox` commands, run as an operator runs them, against a real
//! PostgreSQL (`DATABASE_URL`). A server that does not answer skips the test (printed), or
//! fails it under `CI=true`.
#![cfg(all(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod support;

use std::time::Duration;

use idempotency_core::Scope;
use idempotency_test::{unavailable, unique_namespace};
use support::{expect, idempotency_with_env};

/// `outbox stats|dead|revive` on a PostgreSQL outbox (`DATABASE_URL`) the test fills: one
/// pending, one sent, one dead message. The dead one is listed with its reason (its payload
/// only when asked), revived only with `--yes` (exit 2 otherwise), then pending; reviving it
/// again, or an unknown id, is exit 3. A table that does not exist is exit 5, Redis exit 2, a
/// server that does not answer exit 4.
#[tokio::test]
async fn outbox_stats_dead_and_revive_on_postgres() {
    use idempotency_core::IdempotencyKey;
    use idempotency_outbox::table::{ClaimBatch, OutboxTable};
    use idempotency_outbox::{Outbox, OutboxMessage};

    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let pool = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("PostgreSQL", error).unwrap_or_default(),
    };
    let table = unique_namespace("outbox").replace(['.', '-'], "_");
    let outbox = Outbox::postgres(pool).with_table_name(&table).unwrap();
    outbox.migrate().await.unwrap();
    let scope = Scope::new("coupon.grant");
    let messages: Vec<OutboxMessage> = ["T1", "T2", "T3"]
        .iter()
        .map(|key| {
            let key = IdempotencyKey::parse(key).unwrap();
            OutboxMessage::new(&scope, &key, "coupons", format!("grant {key}"))
        })
        .collect();
    let mut tx = outbox.pool().begin().await.unwrap();
    for message in &messages {
        assert!(outbox.enqueue(&mut tx, message).await.unwrap());
    }
    tx.commit().await.unwrap();
    let batch = |claim| ClaimBatch {
        limit: 1,
        lease: Duration::from_secs(60),
        claim,
    };
    let sent = outbox.claim(batch(1)).await.unwrap();
    assert_eq!(outbox.mark_sent(1, &[sent[0].seq]).await.unwrap(), 1);
    let refused = outbox.claim(batch(2)).await.unwrap();
    outbox
        .mark_failed(2, refused[0].seq, "unroutable", Duration::ZERO, true)
        .await
        .unwrap();
    let dead_id = refused[0].message.id.as_str();
    // T3 claimed by a relay still delivering it; a fourth message due.
    let key = IdempotencyKey::parse("T4").unwrap();
    let mut tx = outbox.pool().begin().await.unwrap();
    let fourth = OutboxMessage::new(&scope, &key, "coupons", "grant T4");
    assert!(outbox.enqueue(&mut tx, &fourth).await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(outbox.claim(batch(3)).await.unwrap().len(), 1);

    let with = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["outbox".to_owned()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        all.extend([
            "--store".to_owned(),
            url.clone(),
            "--outbox-table".to_owned(),
            table.clone(),
        ]);
        all
    };
    let run = |code: i32, args: &[&str]| {
        let args = with(args);
        expect(code, &args.iter().map(String::as_str).collect::<Vec<_>>())
    };

    let stats = run(0, &["stats", "--json"]).lines();
    assert_eq!(stats.len(), 1);
    let counts = (&stats[0]["pending"], &stats[0]["sent"], &stats[0]["dead"]);
    assert_eq!(counts, (&2.into(), &1.into(), &1.into()), "{}", stats[0]);
    let split = (&stats[0]["claimed"], &stats[0]["due"]);
    assert_eq!(split, (&1.into(), &1.into()), "{}", stats[0]);
    assert!(
        stats[0]["oldest_pending_ms"].as_u64().is_some(),
        "{}",
        stats[0]
    );
    assert_eq!(stats[0]["table"], table.as_str());
    let text = run(0, &["stats"]).stdout;
    assert!(text.contains("dead       1"), "{text}");
    assert!(
        text.contains("  claimed  1") && text.contains("  due      1"),
        "{text}"
    );

    let dead = run(0, &["dead", "--json"]).lines();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["id"], dead_id);
    assert_eq!(dead[0]["last_error"], "unroutable");
    assert_eq!(dead[0]["attempts"], 1);
    assert_eq!(dead[0]["business_key"], "T2");
    assert!(
        dead[0].get("payload_base64").is_none(),
        "no payload unless asked"
    );
    let with_payload = run(0, &["dead", "--json", "--payload"]).lines();
    assert_eq!(with_payload[0]["payload_base64"], "Z3JhbnQgVDI=");
    let table_text = run(0, &["dead"]).stdout;
    assert!(
        table_text.contains(dead_id) && table_text.contains("unroutable"),
        "{table_text}"
    );

    run(2, &["revive", "--id", dead_id]);
    assert_eq!(
        outbox.counts().await.unwrap().dead,
        1,
        "not confirmed: untouched"
    );
    // Audited in the audit table of the record table, by the actor of the environment.
    let records_table = format!("{table}_records");
    let revive_args = with(&[
        "revive", "--id", dead_id, "--yes", "--reason", "INC-7", "--json",
    ]);
    let revive_args: Vec<&str> = revive_args.iter().map(String::as_str).collect();
    let revived = idempotency_with_env(
        &revive_args,
        &[
            ("IDEMPOTENCY_TABLE", records_table.as_str()),
            ("IDEMPOTENCY_ACTOR", "oncall-ana"),
        ],
    );
    assert_eq!(revived.code, 0, "{}", revived.stderr);
    assert_eq!(revived.lines()[0]["revived"], true);
    let audited: Vec<(String, String, String, i64, String)> = sqlx::query_as(&format!(
        "SELECT actor, reason, action, applied, detail FROM \"{table}_audit\""
    ))
    .fetch_all(outbox.pool())
    .await
    .unwrap();
    assert_eq!(audited.len(), 1, "{audited:?}");
    let (actor, reason, action, applied, detail) = &audited[0];
    assert_eq!(
        (actor.as_str(), reason.as_str(), action.as_str(), *applied),
        ("oncall-ana", "INC-7", "revive", 1)
    );
    assert!(detail.contains(dead_id), "{detail}");
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.sent, counts.dead), (3, 1, 0));
    let again = run(3, &["revive", "--id", dead_id, "--yes"]);
    assert!(again.stderr.contains("not dead"), "{}", again.stderr);
    run(3, &["revive", "--id", "no-such-message", "--yes"]);

    let missing = expect(
        5,
        &[
            "outbox",
            "stats",
            "--store",
            &url,
            "--outbox-table",
            "no_such_outbox_table",
        ],
    );
    assert!(
        missing.stderr.contains("no_such_outbox_table"),
        "{}",
        missing.stderr
    );
    expect(2, &["outbox", "stats", "--store", "redis://127.0.0.1:1"]);
    let down = expect(
        4,
        &[
            "outbox",
            "dead",
            "--store",
            "postgres://postgres@127.0.0.1:1/test",
        ],
    );
    assert!(down.stderr.contains("unreachable"), "{}", down.stderr);
}

/// Fills a fresh outbox table with one sent, one dead, one claimed (a live lease) and one due
/// message, and checks what `outbox stats --json` says of them.
macro_rules! stats_split {
    ($outbox:expr, $url:expr, $table:expr) => {{
        use idempotency_core::IdempotencyKey;
        use idempotency_outbox::OutboxMessage;
        use idempotency_outbox::table::{ClaimBatch, OutboxTable};

        let outbox = $outbox;
        outbox.migrate().await.unwrap();
        let scope = Scope::new("coupon.grant");
        let mut tx = outbox.pool().begin().await.unwrap();
        for key in ["T1", "T2", "T3", "T4"] {
            let key = IdempotencyKey::parse(key).unwrap();
            let message = OutboxMessage::new(&scope, &key, "coupons", format!("grant {key}"));
            assert!(outbox.enqueue(&mut tx, &message).await.unwrap());
        }
        tx.commit().await.unwrap();
        let batch = |claim| ClaimBatch {
            limit: 1,
            lease: Duration::from_secs(60),
            claim,
        };
        let sent = outbox.claim(batch(1)).await.unwrap();
        assert_eq!(outbox.mark_sent(1, &[sent[0].seq]).await.unwrap(), 1);
        let refused = outbox.claim(batch(2)).await.unwrap();
        outbox
            .mark_failed(2, refused[0].seq, "unroutable", Duration::ZERO, true)
            .await
            .unwrap();
        assert_eq!(outbox.claim(batch(3)).await.unwrap().len(), 1);
        let args = [
            "outbox",
            "stats",
            "--json",
            "--store",
            $url,
            "--outbox-table",
            $table,
        ];
        let stats = expect(0, &args).lines();
        let line = &stats[0];
        let counts: Vec<u64> = ["pending", "claimed", "due", "sent", "dead"]
            .iter()
            .map(|name| line[*name].as_u64().unwrap())
            .collect();
        assert_eq!(counts, [2, 1, 1, 1, 1], "{line}");
        assert!(line["oldest_pending_ms"].as_u64().is_some(), "{line}");
    }};
}

/// `outbox stats` splits claimed from due on MariaDB (`MYSQL_URL`).
#[tokio::test]
async fn outbox_stats_split_on_mariadb() {
    let url = std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let pool = match sqlx::MySqlPool::connect(&url).await {
        Ok(pool) => pool,
        Err(error) => return unavailable::<()>("MySQL", error).unwrap_or_default(),
    };
    let table = unique_namespace("outbox").replace(['.', '-'], "_");
    let outbox = idempotency_outbox::Outbox::mysql(pool)
        .with_table_name(&table)
        .unwrap();
    stats_split!(outbox, &url, &table);
}

/// `outbox stats` splits claimed from due on SQLite.
#[tokio::test]
async fn outbox_stats_split_on_sqlite() {
    let dir = std::env::temp_dir().join("idempotency-sql-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.db", unique_namespace("cli-outbox")));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let table = unique_namespace("outbox").replace(['.', '-'], "_");
    let outbox = idempotency_outbox::Outbox::sqlite(pool)
        .with_table_name(&table)
        .unwrap();
    stats_split!(outbox, &url, &table);
}
