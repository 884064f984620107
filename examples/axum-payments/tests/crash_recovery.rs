//! Process-level crash tests: a real `crash_target` process is killed (SIGKILL) in the middle
//! of a handler, another process on the same store takes the key over once the 1 s lease runs
//! out, and runs the handler exactly once more; concurrent retries never run it a third time.
//! A paused owner (SIGSTOP past its lease, then SIGCONT: a GC pause, a frozen VM) finishes its
//! handler late, and its completion is refused by the fencing token: the record keeps the
//! new owner's response.
//!
//! The memory store keeps records in the process: they die with it. After a crash the retry
//! runs the handler again on the restarted process (the side effect of the killed run may have
//! happened, so across crashes the memory store gives at-least-once, not exactly-once);
//! within the new process the key is again deduplicated.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Its helpers serve the server-backed tests: without their features they go unused.
#![cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite"
    )),
    allow(dead_code, unused_imports)
)]

mod hardening_support;

use std::time::Duration;

use hardening_support::*;
use http::StatusCode;

const LEASE: Duration = Duration::from_secs(1);

/// A's handler is killed mid-run; B takes over after the lease and runs it once more.
async fn killed_owner_is_taken_over_once(store: StoreSpec) {
    let log = temp_path("crash_log", "log");
    let key = unique("k");
    let a = CrashTarget::start(&store, &log, Duration::from_secs(60), LEASE);
    let a_pid = a.pid();
    let a_addr = a.addr;
    let in_flight = {
        let key = key.clone();
        tokio::spawn(async move {
            let request =
                axum_payments::client::request(http::Method::POST, "/work", Some(&key), None)
                    .unwrap();
            axum_payments::client::send_once(a_addr, request).await
        })
    };
    wait_for_line(&log, &key, a_pid, "start").await;
    a.kill();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the killed process cannot have answered"
    );

    let b = CrashTarget::start(&store, &log, Duration::from_millis(300), LEASE);
    let (first, conflicts) = retry_until_done(b.addr, &key).await;
    assert_eq!(pid_of(&first), b.pid());
    if store.kind == "memory" {
        // The record died with A: B runs the key at once, no lease to wait for.
        assert_eq!(conflicts, 0);
        assert!(!first.is_replay());
    } else {
        // The record outlived A: B waited for the lease, then took over and ran it.
        assert!(!first.is_replay(), "the takeover runs the handler");
    }

    // 32 concurrent retries after the takeover: replays of B's answer, none runs again.
    let retries: Vec<_> = (0..32)
        .map(|_| {
            let key = key.clone();
            let addr = b.addr;
            tokio::spawn(async move { post(addr, "/work", &key).await })
        })
        .collect();
    for retry in retries {
        let reply = retry.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert!(reply.is_replay());
        assert_eq!(pid_of(&reply), b.pid());
    }

    let lines = log_lines(&log, &key);
    assert_eq!(count(&lines, "start"), 2, "{lines:?}");
    assert_eq!(count(&lines, "done"), 1, "{lines:?}");
    assert!(lines.contains(&(a_pid, "start".to_owned())));
    assert!(lines.contains(&(b.pid(), "done".to_owned())));
    assert!(!lines.contains(&(a_pid, "done".to_owned())));

    // A restarted third process on a durable store replays too (the record is in the store).
    if store.kind != "memory" {
        let c = CrashTarget::start(&store, &log, Duration::from_millis(300), LEASE);
        let reply = post(c.addr, "/work", &key).await;
        assert!(reply.is_replay());
        assert_eq!(pid_of(&reply), b.pid());
        assert_eq!(count(&log_lines(&log, &key), "start"), 2);
    }
    let _ = std::fs::remove_file(&log);
}

/// A is paused past its lease; B takes over and completes; A resumes, finishes its handler
/// and its completion is refused (stale fencing token): the record keeps B's answer.
async fn paused_owner_cannot_complete_after_takeover(store: StoreSpec) {
    let log = temp_path("crash_log", "log");
    let key = unique("k");
    let a = CrashTarget::start(&store, &log, Duration::from_millis(1500), LEASE);
    let b = CrashTarget::start(&store, &log, Duration::from_millis(200), LEASE);
    let a_addr = a.addr;
    let zombie = {
        let key = key.clone();
        tokio::spawn(async move { post(a_addr, "/work", &key).await })
    };
    wait_for_line(&log, &key, a.pid(), "start").await;
    a.signal("STOP");

    let (first, _) = retry_until_done(b.addr, &key).await;
    assert!(!first.is_replay());
    assert_eq!(pid_of(&first), b.pid());

    a.signal("CONT");
    // A's client still gets A's own answer (the handler ran), but A could not store it.
    let late = tokio::time::timeout(Duration::from_secs(30), zombie)
        .await
        .expect("the resumed owner answers")
        .unwrap();
    assert_eq!(late.status, StatusCode::OK);
    assert_eq!(pid_of(&late), a.pid());
    wait_for_line(&log, &key, a.pid(), "done").await;

    // The stale completion was refused and reported (log + metric) by A's engine.
    let mut refused = false;
    for _ in 0..100 {
        refused = a
            .stderr_text()
            .lines()
            .any(|l| l.contains("stale owner refused") && l.contains("complete"));
        if refused {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "A's stderr: {}", a.stderr_text());

    // Whoever is asked, the record is B's.
    for addr in [a.addr, b.addr] {
        let reply = post(addr, "/work", &key).await;
        assert!(reply.is_replay());
        assert_eq!(pid_of(&reply), b.pid());
    }
    let lines = log_lines(&log, &key);
    assert_eq!(count(&lines, "start"), 2, "{lines:?}");
    let _ = std::fs::remove_file(&log);
}

fn memory() -> StoreSpec {
    StoreSpec {
        kind: "memory",
        url: String::new(),
        table: unique("crash"),
    }
}

#[tokio::test]
async fn memory_killed_owner_runs_again_after_restart() {
    killed_owner_is_taken_over_once(memory()).await;
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;

    fn spec() -> Option<StoreSpec> {
        reachable("Redis", &redis_url()).then(|| StoreSpec {
            kind: "redis",
            url: redis_url(),
            table: unique("crash"),
        })
    }

    #[tokio::test]
    async fn redis_killed_owner_is_taken_over_once() {
        if let Some(spec) = spec() {
            killed_owner_is_taken_over_once(spec).await;
        }
    }

    #[tokio::test]
    async fn redis_paused_owner_cannot_complete() {
        if let Some(spec) = spec() {
            paused_owner_cannot_complete_after_takeover(spec).await;
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;

    fn spec() -> Option<StoreSpec> {
        reachable("PostgreSQL", &postgres_url()).then(|| StoreSpec {
            kind: "postgres",
            url: postgres_url(),
            table: unique("crash"),
        })
    }

    #[tokio::test]
    async fn postgres_killed_owner_is_taken_over_once() {
        if let Some(spec) = spec() {
            killed_owner_is_taken_over_once(spec).await;
        }
    }

    #[tokio::test]
    async fn postgres_paused_owner_cannot_complete() {
        if let Some(spec) = spec() {
            paused_owner_cannot_complete_after_takeover(spec).await;
        }
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;

    fn spec() -> Option<StoreSpec> {
        reachable("MySQL", &mysql_url()).then(|| StoreSpec {
            kind: "mysql",
            url: mysql_url(),
            table: unique("crash"),
        })
    }

    #[tokio::test]
    async fn mysql_killed_owner_is_taken_over_once() {
        if let Some(spec) = spec() {
            killed_owner_is_taken_over_once(spec).await;
        }
    }

    #[tokio::test]
    async fn mysql_paused_owner_cannot_complete() {
        if let Some(spec) = spec() {
            paused_owner_cannot_complete_after_takeover(spec).await;
        }
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;

    /// Both processes open the same database file (WAL).
    fn spec() -> StoreSpec {
        let path = temp_path("crash_sqlite", "db");
        StoreSpec {
            kind: "sqlite",
            url: format!("sqlite://{}", path.display()),
            table: unique("crash"),
        }
    }

    #[tokio::test]
    async fn sqlite_killed_owner_is_taken_over_once() {
        killed_owner_is_taken_over_once(spec()).await;
    }

    #[tokio::test]
    async fn sqlite_paused_owner_cannot_complete() {
        paused_owner_cannot_complete_after_takeover(spec()).await;
    }
}
