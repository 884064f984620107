//! The broker-agnostic consumer step over the memory store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;

use idempotency_core::{
    Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, KeyError, MemoryStore, Scope,
};
use idempotency_queue::{
    Action, Backoff, Handled, Handler, Header, IdempotentConsumer, Job, JsonField, Message,
    MessageId, RejectReason, Verdict,
};
use tokio::sync::Notify;

fn engine() -> Idempotency<MemoryStore> {
    Idempotency::new(MemoryStore::new())
}

/// A handler that keeps a record of truth of its own (as `two_tier::SqlTruth` does) and says
/// so ([`Handler::guards_itself`]); `answer` is what that record answers for a job.
struct OwnRecord<F>(F);

impl<F, Fut> Handler for OwnRecord<F>
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Handled, String>> + Send,
{
    type Error = String;

    async fn handle(&self, job: Job) -> Result<Handled, String> {
        (self.0)(job).await
    }

    fn guards_itself(&self) -> bool {
        true
    }
}

fn counting() -> (
    Arc<AtomicUsize>,
    impl Fn(Job) -> std::future::Ready<Result<(), String>>,
) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    (runs, move |_job: Job| {
        counter.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(()))
    })
}

#[tokio::test]
async fn duplicates_are_acked_without_running_the_handler() {
    let (runs, handler) = counting();
    let consumer = IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        JsonField::new("/trade_no"),
        handler,
    );
    for key in ["T1", "T2"] {
        let message = Message::new(format!(r#"{{"trade_no":"{key}","user":7}}"#));
        assert_eq!(
            consumer.process(message.clone()).await,
            Verdict::Processed {
                recorded: true,
                output: Bytes::new()
            }
        );
        for _ in 0..5 {
            let verdict = consumer
                .process(message.clone().with_delivery(true, None))
                .await;
            assert_eq!(
                verdict,
                Verdict::Replayed {
                    output: Bytes::new()
                }
            );
            assert_eq!(verdict.action(), Action::Ack);
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let stats = consumer.stats().snapshot();
    assert_eq!(
        (stats.processed, stats.replayed, stats.acked()),
        (2, 10, 12)
    );
}

#[tokio::test]
async fn a_failed_handler_releases_the_key_and_requeues_with_backoff() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&attempts);
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let consumer = IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        MessageId,
        move |_job: Job| {
            let attempt = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if attempt == 0 {
                    Err("coupon service down")
                } else {
                    Ok(())
                }
            }
        },
    )
    .with_backoff(backoff);
    let message = Message::new("grant").with_message_id("T1");

    let failed = consumer.process(message.clone()).await;
    assert_eq!(
        failed,
        Verdict::Failed {
            retry_after: Duration::from_millis(100),
            error: "coupon service down".into()
        }
    );
    assert_eq!(
        failed.action(),
        Action::Requeue {
            delay: Duration::from_millis(100)
        }
    );

    let redelivered = message.with_delivery(true, Some(2));
    assert_eq!(
        consumer.process(redelivered.clone()).await,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        consumer.process(redelivered).await,
        Verdict::Replayed {
            output: Bytes::new()
        }
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_panicking_handler_is_a_failure_not_a_crash() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&attempts);
    let consumer = IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        MessageId,
        move |_job: Job| {
            let attempt = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                assert!(attempt > 0, "first attempt panics");
                Ok::<_, String>(())
            }
        },
    );
    let message = Message::new("grant").with_message_id("T1");
    assert!(matches!(
        consumer.process(message.clone()).await,
        Verdict::Failed { .. }
    ));
    assert_eq!(
        consumer.process(message).await,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
}

#[tokio::test]
async fn an_in_flight_duplicate_is_requeued_not_dropped_when_asked_to_reject() {
    let started = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, f, r) = (Arc::clone(&started), Arc::clone(&finish), Arc::clone(&runs));
    let consumer = Arc::new(
        IdempotentConsumer::new(
            engine(),
            Scope::new("coupons"),
            MessageId,
            move |_job: Job| {
                let (s, f, r) = (Arc::clone(&s), Arc::clone(&f), Arc::clone(&r));
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    s.notify_one();
                    f.notified().await;
                    Ok::<_, String>(())
                }
            },
        )
        .with_in_flight(InFlightPolicy::Reject),
    );
    let message = Message::new("grant").with_message_id("T1");
    let first = tokio::spawn({
        let (consumer, message) = (Arc::clone(&consumer), message.clone());
        async move { consumer.process(message).await }
    });
    started.notified().await;

    let duplicate = consumer.process(message.clone()).await;
    let Verdict::InFlight { retry_after } = duplicate else {
        panic!("expected in flight, got {duplicate:?}")
    };
    assert!(
        matches!(duplicate.action(), Action::Requeue { delay } if delay == retry_after && !delay.is_zero())
    );

    finish.notify_one();
    assert_eq!(
        first.await.unwrap(),
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        consumer.process(message).await,
        Verdict::Replayed {
            output: Bytes::new()
        }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(consumer.stats().snapshot().in_flight, 1);
}

/// By default a duplicate waits for the first delivery of its key and is acked as a duplicate
/// when it finishes: no requeue, no redelivery churn.
#[tokio::test]
async fn an_in_flight_duplicate_waits_for_the_first_and_is_acked() {
    let started = Arc::new(Notify::new());
    let finish = Arc::new(Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, f, r) = (Arc::clone(&started), Arc::clone(&finish), Arc::clone(&runs));
    let consumer = Arc::new(IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        MessageId,
        move |_job: Job| {
            let (s, f, r) = (Arc::clone(&s), Arc::clone(&f), Arc::clone(&r));
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                s.notify_one();
                f.notified().await;
                Ok::<_, String>(())
            }
        },
    ));
    let message = Message::new("grant").with_message_id("T1");
    let first = tokio::spawn({
        let (consumer, message) = (Arc::clone(&consumer), message.clone());
        async move { consumer.process(message).await }
    });
    started.notified().await;
    let duplicate = tokio::spawn({
        let (consumer, message) = (Arc::clone(&consumer), message.clone());
        async move { consumer.process(message).await }
    });
    // The duplicate is waiting, not answered: it ends only once the first one does.
    tokio::task::yield_now().await;
    assert!(!duplicate.is_finished());
    finish.notify_one();

    assert_eq!(
        first.await.unwrap(),
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    let duplicate = duplicate.await.unwrap();
    assert_eq!(
        duplicate,
        Verdict::Replayed {
            output: Bytes::new()
        }
    );
    assert_eq!(duplicate.action(), Action::Ack);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(consumer.stats().snapshot().in_flight, 0);
}

/// A duplicate that waited out the bound while the first still runs is requeued, not dropped.
#[tokio::test]
async fn a_duplicate_still_in_flight_after_the_wait_is_requeued() {
    let started = Arc::new(Notify::new());
    let s = Arc::clone(&started);
    let consumer = Arc::new(
        IdempotentConsumer::new(
            engine(),
            Scope::new("coupons"),
            MessageId,
            move |_job: Job| {
                let s = Arc::clone(&s);
                async move {
                    s.notify_one();
                    std::future::pending::<Result<(), String>>().await
                }
            },
        )
        .with_in_flight(InFlightPolicy::wait(Duration::from_millis(100))),
    );
    let message = Message::new("grant").with_message_id("T1");
    let first = tokio::spawn({
        let (consumer, message) = (Arc::clone(&consumer), message.clone());
        async move { consumer.process(message).await }
    });
    started.notified().await;
    let duplicate = consumer.process(message).await;
    assert!(
        matches!(duplicate.action(), Action::Requeue { .. }),
        "{duplicate:?}"
    );
    assert!(matches!(duplicate, Verdict::InFlight { .. }));
    first.abort();
}

#[tokio::test]
async fn a_consumer_killed_mid_message_leaves_the_key_free_for_the_redelivery() {
    let started = Arc::new(Notify::new());
    let entered = Arc::new(AtomicUsize::new(0));
    let completed = Arc::new(AtomicUsize::new(0));
    let (s, e, c) = (
        Arc::clone(&started),
        Arc::clone(&entered),
        Arc::clone(&completed),
    );
    let consumer = Arc::new(IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        MessageId,
        move |_job: Job| {
            let (s, c) = (Arc::clone(&s), Arc::clone(&c));
            let first = e.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    s.notify_one();
                    std::future::pending::<()>().await;
                }
                c.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            }
        },
    ));
    let message = Message::new("grant").with_message_id("T1");
    let doomed = tokio::spawn({
        let (consumer, message) = (Arc::clone(&consumer), message.clone());
        async move { consumer.process(message).await }
    });
    started.notified().await;
    doomed.abort();
    assert!(doomed.await.unwrap_err().is_cancelled());

    // The dropped execution releases the key in the background; until then it is in flight.
    let mut verdict = consumer.process(message.clone()).await;
    for _ in 0..200 {
        if !matches!(verdict, Verdict::InFlight { .. }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        verdict = consumer.process(message.clone()).await;
    }
    assert_eq!(
        verdict,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        consumer.process(message).await,
        Verdict::Replayed {
            output: Bytes::new()
        }
    );
    assert_eq!(completed.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_unavailable_store_requeues_and_never_runs_the_handler() {
    // A memory store full of live claims refuses new ones (CapacityExceeded): a real store failure.
    let store = MemoryStore::with_capacity(1);
    let engine = Idempotency::new(store);
    let hold = engine
        .claim(
            &Scope::new("other"),
            &IdempotencyKey::parse("held").unwrap(),
            &idempotency_core::Fingerprint::of_bytes(b""),
            InFlightPolicy::Reject,
        )
        .await
        .unwrap();
    let (runs, handler) = counting();
    let backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(1));
    let consumer = IdempotentConsumer::new(engine, Scope::new("coupons"), MessageId, handler)
        .with_backoff(backoff);
    let message = Message::new("grant")
        .with_message_id("T1")
        .with_delivery(true, Some(3));
    let verdict = consumer.process(message).await;
    assert!(
        matches!(&verdict, Verdict::StoreUnavailable { retry_after, .. } if *retry_after == Duration::from_secs(1)),
        "{verdict:?}"
    );
    assert_eq!(
        verdict.action(),
        Action::Requeue {
            delay: Duration::from_secs(1)
        }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(hold);
}

#[tokio::test]
async fn a_guarded_handler_still_runs_when_the_fast_path_store_fails() {
    let engine = Idempotency::new(MemoryStore::with_capacity(1));
    let _hold = engine
        .claim(
            &Scope::new("other"),
            &IdempotencyKey::parse("held").unwrap(),
            &idempotency_core::Fingerprint::of_bytes(b""),
            InFlightPolicy::Reject,
        )
        .await
        .unwrap();
    let consumer = IdempotentConsumer::new(
        engine,
        Scope::new("coupons"),
        MessageId,
        OwnRecord(|job: Job| async move {
            assert!(job.lease.is_none());
            Ok(Handled::AlreadyDone(Bytes::new()))
        }),
    );
    let verdict = consumer
        .process(Message::new("grant").with_message_id("T1"))
        .await;
    assert_eq!(
        verdict,
        Verdict::AlreadyDone {
            output: Bytes::new()
        }
    );
    assert_eq!(verdict.action(), Action::Ack);
}

#[tokio::test]
async fn messages_without_a_key_or_with_another_payload_are_rejected() {
    let (runs, handler) = counting();
    let consumer = IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        Header::new("business-key"),
        handler,
    );
    let missing = consumer.process(Message::new("grant")).await;
    assert_eq!(
        missing,
        Verdict::Rejected(RejectReason::Key(KeyError::Missing))
    );
    assert_eq!(missing.action(), Action::Reject);

    let first = Message::new("grant 1 coupon").with_header("business-key", "T1");
    let other = Message::new("grant 9 coupons").with_header("business-key", "T1");
    assert_eq!(
        consumer.process(first).await,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        consumer.process(other.clone()).await,
        Verdict::Rejected(RejectReason::Mismatch)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // With a key-only fingerprint the second payload is a plain duplicate.
    let (runs, handler) = counting();
    let lenient = IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        Header::new("business-key"),
        handler,
    )
    .fingerprint_key_only();
    assert_eq!(
        lenient
            .process(Message::new("a").with_header("business-key", "T1"))
            .await,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        lenient.process(other).await,
        Verdict::Replayed {
            output: Bytes::new()
        }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A handler with its own record of truth reports a mismatch: the message is rejected, and the
/// fast path keeps no record of the rejected payload (so the original payload's duplicates are
/// not turned into mismatches). The handler sees the consumer's own fingerprint.
#[tokio::test]
async fn a_mismatch_reported_by_the_handler_rejects_and_keeps_the_key_free() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let consumer = IdempotentConsumer::new(
        engine(),
        Scope::new("coupons"),
        Header::new("business-key"),
        move |job: Job| {
            recorded.lock().unwrap().push(job.fingerprint);
            let handled = if job.message.payload().as_ref() == b"grant 9 coupons" {
                Handled::Mismatch
            } else {
                Handled::AlreadyDone(Bytes::new())
            };
            std::future::ready(Ok::<_, String>(handled))
        },
    );
    let other = Message::new("grant 9 coupons").with_header("business-key", "T1");
    let original = Message::new("grant 1 coupon").with_header("business-key", "T1");

    let rejected = consumer.process(other.clone()).await;
    assert_eq!(rejected, Verdict::Rejected(RejectReason::Mismatch));
    assert_eq!(rejected.action(), Action::Reject);
    assert_eq!(
        consumer.process(original.clone()).await,
        Verdict::AlreadyDone {
            output: Bytes::new()
        }
    );
    // Now the fast path holds the original payload: it answers both on its own.
    assert_eq!(
        consumer.process(original).await,
        Verdict::Replayed {
            output: Bytes::new()
        }
    );
    assert_eq!(
        consumer.process(other).await,
        Verdict::Rejected(RejectReason::Mismatch)
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [
            Fingerprint::of_bytes(b"grant 9 coupons"),
            Fingerprint::of_bytes(b"grant 1 coupon")
        ]
    );
    let stats = consumer.stats().snapshot();
    assert_eq!(
        (stats.rejected, stats.already_done, stats.replayed),
        (2, 1, 1),
        "{stats:?}"
    );
}

#[tokio::test]
async fn a_guarded_handler_reporting_a_mismatch_rejects_while_the_fast_path_is_down() {
    let engine = Idempotency::new(MemoryStore::with_capacity(1));
    let _hold = engine
        .claim(
            &Scope::new("other"),
            &IdempotencyKey::parse("held").unwrap(),
            &Fingerprint::of_bytes(b""),
            InFlightPolicy::Reject,
        )
        .await
        .unwrap();
    let handler = OwnRecord(|job: Job| {
        assert!(job.lease.is_none());
        assert_eq!(job.fingerprint, Fingerprint::of_bytes(b"grant"));
        std::future::ready(Ok(Handled::Mismatch))
    });
    let consumer = IdempotentConsumer::new(engine, Scope::new("coupons"), MessageId, handler);
    let verdict = consumer
        .process(Message::new("grant").with_message_id("T1"))
        .await;
    assert_eq!(verdict, Verdict::Rejected(RejectReason::Mismatch));
}

#[tokio::test]
async fn scopes_keep_consumers_apart() {
    let engine = engine();
    let (runs_a, a) = counting();
    let (runs_b, b) = counting();
    let grant = IdempotentConsumer::new(engine.clone(), Scope::new("coupon-grant"), MessageId, a);
    let notify = IdempotentConsumer::new(engine, Scope::new("sms-notify"), MessageId, b);
    let message = Message::new("paid").with_message_id("T1");
    assert_eq!(
        grant.process(message.clone()).await,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        notify.process(message).await,
        Verdict::Processed {
            recorded: true,
            output: Bytes::new()
        }
    );
    assert_eq!(
        (runs_a.load(Ordering::SeqCst), runs_b.load(Ordering::SeqCst)),
        (1, 1)
    );
}

#[tokio::test]
async fn each_verdict_is_observed_with_its_key_before_it_is_returned() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let observed = Arc::clone(&seen);
    let (_, handler) = counting();
    let consumer = IdempotentConsumer::new(engine(), Scope::new("coupons"), MessageId, handler)
        .on_verdict(move |key, verdict| {
            observed
                .lock()
                .unwrap()
                .push((key.to_string(), verdict.label()));
        });
    let paid = Message::new("grant").with_message_id("T1");
    for _ in 0..2 {
        let verdict = consumer.process(paid.clone()).await;
        // Observed by the time the verdict is returned, so before the broker is told.
        let last = seen.lock().unwrap().last().cloned();
        assert_eq!(last, Some(("T1".to_owned(), verdict.label())));
    }
    let without_key = consumer.process(Message::new("grant")).await;
    assert!(matches!(
        without_key,
        Verdict::Rejected(RejectReason::Key(_))
    ));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("T1".to_owned(), "processed"),
            ("T1".to_owned(), "replayed")
        ]
    );
}
