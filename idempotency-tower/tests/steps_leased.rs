//! The steps layer on a core store (`build_leased_steps`), on Redis (`REDIS_URL`, default
//! `redis://127.0.0.1:6379`), the Redis Cluster of `idempotency_test::redis_cluster` and the
//! memory store: a multi-step request over HTTP completes and replays; a process that dies
//! after a step's checkpoint (the run dropped by a panic) is resumed by the retry after that
//! step, never calling it again; another payload with the key answers 422; the completer
//! finishes an abandoned request without its client; a duplicate in another process waits for
//! the live run and replays its answer.
#![cfg(feature = "steps")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::routing::post;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use idempotency_core::{InFlightPolicy, MemoryStore, Store};
use idempotency_operations::Operations;
use idempotency_steps::StepError;
use idempotency_steps::leased::Leased;
use idempotency_tower::IdempotencyLayer;
use idempotency_tower::steps::{Steps, StepsLayer};
use tower::ServiceExt;

/// A lease short enough that a retry waits for a dead owner's.
const SHORT: Duration = Duration::from_millis(300);
/// How long a retry waits for a live (or dead) owner: far beyond [`SHORT`].
const WAIT: Duration = Duration::from_secs(10);

/// What the steps did, across every owner of every run of one test.
#[derive(Default)]
struct World {
    reserve: AtomicUsize,
    capture: AtomicUsize,
    /// The downstream keys the captures were sent with.
    capture_keys: Mutex<Vec<String>>,
    /// Set: the next run dies (panics) right after reserve's checkpoint.
    die_after_reserve: AtomicBool,
    /// Set: the next capture signals `capturing` and waits for `release`.
    hold_capture: AtomicBool,
    capturing: tokio::sync::Notify,
    release: tokio::sync::Notify,
    /// Whether the last answered run had been resumed.
    resumed: AtomicBool,
    /// How many handlers answered.
    answered: tokio::sync::watch::Sender<usize>,
}

impl World {
    fn counts(&self) -> [usize; 2] {
        [
            self.reserve.load(Ordering::SeqCst),
            self.capture.load(Ordering::SeqCst),
        ]
    }
}

/// `POST /checkout`: reserve, then capture (both foreign), then the answer.
async fn checkout<S: Store + Operations + 'static>(
    world: Arc<World>,
    request: Request<Body>,
) -> (StatusCode, String) {
    let mut run: Steps<Leased<S>> =
        Steps::from_extensions(request.extensions().get()).expect("behind the steps layer");
    let order = request.into_body().collect().await.unwrap().to_bytes();
    let steps = async {
        let reserved: String = run
            .foreign("reserve", async |key| {
                world.reserve.fetch_add(1, Ordering::SeqCst);
                Ok(format!("reserved:{}", &key[..8]))
            })
            .await?;
        if world.die_after_reserve.swap(false, Ordering::SeqCst) {
            panic!("the process dies after reserve's checkpoint");
        }
        let captured: String = run
            .foreign("capture", async |key| {
                world.capture.fetch_add(1, Ordering::SeqCst);
                if world.hold_capture.swap(false, Ordering::SeqCst) {
                    world.capturing.notify_one();
                    world.release.notified().await;
                }
                world.capture_keys.lock().unwrap().push(key.to_owned());
                Ok(format!("captured:{}", order.len()))
            })
            .await?;
        Ok::<_, StepError>(format!("{reserved} {captured}"))
    };
    let answer = match steps.await {
        Ok(receipt) => (StatusCode::CREATED, receipt),
        Err(StepError::End(answer)) => (StatusCode::PAYMENT_REQUIRED, answer.to_string()),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
    };
    world.resumed.store(run.resumed(), Ordering::SeqCst);
    world.answered.send_modify(|answered| *answered += 1);
    answer
}

/// The app on `store`, its layer (for the completer) and what its steps did.
fn app<S>(store: S) -> (Router, StepsLayer<Leased<S>>, Arc<World>)
where
    S: Store + Operations + Clone + 'static,
{
    let world = Arc::new(World::default());
    let (app, layer) = process(store, &unique("checkout"), Arc::clone(&world));
    (app, layer, world)
}

/// One process's app on `store`, its runs in `namespace`, its steps recorded in `world`.
fn process<S>(store: S, namespace: &str, world: Arc<World>) -> (Router, StepsLayer<Leased<S>>)
where
    S: Store + Operations + Clone + 'static,
{
    let layer = IdempotencyLayer::builder(store)
        .shared_scope()
        .namespace(namespace)
        .lease(SHORT)
        .in_flight(InFlightPolicy::wait(WAIT))
        .build_leased_steps();
    let route = post(move |request: Request<Body>| checkout::<S>(world, request));
    let app = Router::new().route("/checkout", route).layer(layer.clone());
    (app, layer)
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &idempotency_test::unique_key().to_hex()[..12]
    )
}

fn request(key: &str, body: &'static str) -> Request<Body> {
    Request::post("/checkout")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

async fn send(app: &Router, key: &str, body: &'static str) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(request(key, body)).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, bytes)
}

fn replayed(headers: &HeaderMap) -> bool {
    headers
        .get("idempotent-replayed")
        .is_some_and(|value| value == "true")
}

/// Sends a request whose run dies (panics) after reserve's checkpoint: the panic reaches the
/// caller, as a crashed process's would end its connections.
async fn dies_after_reserve(app: &Router, world: &World, key: &str, body: &'static str) {
    world.die_after_reserve.store(true, Ordering::SeqCst);
    let crashed = tokio::spawn(app.clone().oneshot(request(key, body))).await;
    assert!(
        crashed.as_ref().is_err_and(|error| error.is_panic()),
        "the request died: {crashed:?}"
    );
    assert_eq!(world.counts(), [1, 0], "reserve ran and was checkpointed");
}

async fn completes_then_replays<S: Store + Operations + Clone + 'static>(store: S) {
    let (app, _, world) = app(store);
    let (status, headers, body) = send(&app, "K1", r#"{"order_id":1}"#).await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    assert!(!replayed(&headers));
    assert_eq!(world.counts(), [1, 1]);
    let (again, headers, replay) = send(&app, "K1", r#"{"order_id":1}"#).await;
    assert_eq!((again, replay), (StatusCode::CREATED, body));
    assert!(replayed(&headers), "the stored answer: {headers:?}");
    assert_eq!(world.counts(), [1, 1], "nothing ran for the replay");
}

async fn a_retry_resumes_after_the_crash<S: Store + Operations + Clone + 'static>(store: S) {
    let (app, _, world) = app(store);
    dies_after_reserve(&app, &world, "K2", r#"{"order_id":2}"#).await;
    // The retry waits for the dead owner's lease to end, then takes the run over after reserve.
    let (status, headers, body) = send(&app, "K2", r#"{"order_id":2}"#).await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    assert!(!replayed(&headers));
    assert!(world.resumed.load(Ordering::SeqCst), "the run was resumed");
    assert_eq!(world.counts(), [1, 1], "reserve never ran again");
    let (again, headers, replay) = send(&app, "K2", r#"{"order_id":2}"#).await;
    assert_eq!((again, replay), (StatusCode::CREATED, body));
    assert!(replayed(&headers));
    assert_eq!(world.counts(), [1, 1]);
}

async fn another_payload_is_refused<S: Store + Operations + Clone + 'static>(store: S) {
    let (app, _, world) = app(store);
    let (first, _, answer) = send(&app, "K3", r#"{"order_id":3}"#).await;
    assert_eq!(first, StatusCode::CREATED);
    let (other, _, problem) = send(&app, "K3", r#"{"order_id":4}"#).await;
    assert_eq!(other, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        String::from_utf8_lossy(&problem).contains("different request"),
        "a problem that says why: {problem:?}"
    );
    let (again, _, replay) = send(&app, "K3", r#"{"order_id":3}"#).await;
    assert_eq!((again, replay), (StatusCode::CREATED, answer));
    assert_eq!(world.counts(), [1, 1], "the other payload ran nothing");
}

async fn the_completer_finishes_an_abandoned_request<S: Store + Operations + Clone + 'static>(
    store: S,
) {
    let (app, layer, world) = app(store);
    let mut answered = world.answered.subscribe();
    dies_after_reserve(&app, &world, "K4", r#"{"order_id":5}"#).await;
    let completer = layer.spawn_completer::<_, Body>(app.clone(), Duration::from_millis(50));
    // No client retries: the completer finds the run once its lease ended and resumes it.
    let finished = tokio::time::timeout(WAIT, answered.wait_for(|answered| *answered >= 1)).await;
    assert!(finished.is_ok(), "the completer resumed the run");
    assert!(world.resumed.load(Ordering::SeqCst));
    assert_eq!(world.counts(), [1, 1], "reserve never ran again");
    // The client comes back: the completer's answer, stored (waiting while it is being stored).
    let (status, headers, body) = send(&app, "K4", r#"{"order_id":5}"#).await;
    completer.abort();
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    assert!(replayed(&headers), "the completer's answer: {headers:?}");
    assert!(
        String::from_utf8_lossy(&body).ends_with(" captured:14"),
        "the kept body reached the resumed handler: {body:?}"
    );
    assert_eq!(world.capture_keys.lock().unwrap().len(), 1);
    assert_eq!(world.counts(), [1, 1]);
}

async fn a_duplicate_in_another_process_waits_then_replays<S>(store: S)
where
    S: Store + Operations + Clone + 'static,
{
    let (world, namespace) = (Arc::new(World::default()), unique("checkout"));
    let (first, _) = process(store.clone(), &namespace, Arc::clone(&world));
    let (second, _) = process(store, &namespace, Arc::clone(&world));
    world.hold_capture.store(true, Ordering::SeqCst);
    let owner = tokio::spawn(async move { send(&first, "K5", r#"{"order_id":6}"#).await });
    world.capturing.notified().await;
    // The owner is inside capture: the other process's duplicate waits for its answer.
    let duplicate = tokio::spawn(async move { send(&second, "K5", r#"{"order_id":6}"#).await });
    world.release.notify_one();
    let (status, headers, body) = owner.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    assert!(!replayed(&headers));
    let (again, headers, replay) = duplicate.await.unwrap();
    assert_eq!((again, replay), (StatusCode::CREATED, body));
    assert!(replayed(&headers), "the owner's answer: {headers:?}");
    assert_eq!(world.counts(), [1, 1], "one run across both processes");
}

/// One test per check and store.
macro_rules! leased_tests {
    ($store:ident, $make:expr; $($check:ident),*) => {
        mod $store {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    if let Some(store) = $make.await {
                        super::$check(store).await;
                    }
                }
            )*
        }
    };
}

macro_rules! every_check {
    ($store:ident, $make:expr) => {
        leased_tests!($store, $make;
            completes_then_replays, a_retry_resumes_after_the_crash, another_payload_is_refused,
            the_completer_finishes_an_abandoned_request,
            a_duplicate_in_another_process_waits_then_replays);
    };
}

every_check!(memory, async { Some(Arc::new(MemoryStore::new())) });

every_check!(redis, async {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match idempotency_redis::RedisStore::connect(&url).await {
        // A prefix of its own: the completer's scan sees this test's records only.
        Ok(store) => Some(store.with_key_prefix(format!("{}:", unique("test:steps-http")))),
        Err(error) => idempotency_test::unavailable("Redis", error),
    }
});

every_check!(cluster, async {
    match idempotency_test::redis_cluster(idempotency_redis::connect_cluster).await {
        Ok(connection) => Some(
            idempotency_redis::RedisStore::new(connection)
                .with_key_prefix(format!("{}:", unique("test:steps-http"))),
        ),
        Err(error) => idempotency_test::unavailable("Redis Cluster", error),
    }
});
