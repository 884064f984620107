//! Keys scoped per principal over real HTTP, on the memory store and on Redis: the principal
//! comes from what an outer authentication layer put in the request's extensions; one tenant
//! never gets another's stored response for the same key and body, the key's existence is no
//! oracle (no 422 across tenants), and a request without a principal is refused (401), never
//! folded into a shared scope. A principal header that is not UTF-8 is refused, not converted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{Extension, State};
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idempotency_core::{MemoryStore, Store};
use idempotency_redis::RedisStore;
use idempotency_test::unavailable;
use idempotency_tower::{IdempotencyLayer, IdempotencyLayerBuilder, ScopeChosen};
use tokio::net::TcpListener;
use tower::util::MapRequestLayer;

/// The authenticated tenant, as an authentication layer would put it in the extensions.
#[derive(Clone)]
struct Tenant(String);

impl AsRef<str> for Tenant {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// A stand-in for a verified authentication layer: `Authorization: Bearer <tenant>` becomes a
/// [`Tenant`] in the extensions; anything else adds nothing.
fn authenticate(mut request: http::Request<axum::body::Body>) -> http::Request<axum::body::Body> {
    let tenant = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(|tenant| Tenant(tenant.to_owned()));
    if let Some(tenant) = tenant {
        request.extensions_mut().insert(tenant);
    }
    request
}

async fn create_order(
    State(runs): State<Arc<AtomicUsize>>,
    tenant: Option<Extension<Tenant>>,
    body: Bytes,
) -> (StatusCode, String) {
    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
    let tenant = tenant.map_or("nobody".to_owned(), |Extension(t)| t.0);
    let body = String::from_utf8_lossy(&body);
    (
        StatusCode::CREATED,
        format!("order {n} for {tenant}: {body}"),
    )
}

struct Server {
    addr: SocketAddr,
    runs: Arc<AtomicUsize>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// Serves `POST /orders` behind the layer, the authentication layer outside it.
async fn serve<S: Store>(builder: IdempotencyLayerBuilder<S, ScopeChosen>) -> Server {
    let runs = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/orders", post(create_order))
        .with_state(Arc::clone(&runs))
        .layer(builder.build())
        .layer(MapRequestLayer::new(authenticate));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        addr,
        runs,
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

impl Server {
    async fn post(
        &self,
        headers: &[(&str, HeaderValue)],
        key: &str,
        body: &str,
    ) -> (StatusCode, http::HeaderMap, String) {
        let mut request = http::Request::post(format!("http://{}/orders", self.addr))
            .header("idempotency-key", key);
        for (name, value) in headers {
            request = request.header(*name, value.clone());
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    async fn as_tenant(&self, tenant: &str, key: &str, body: &str) -> (StatusCode, bool, String) {
        let bearer = HeaderValue::from_str(&format!("Bearer {tenant}")).unwrap();
        let (status, headers, body) = self.post(&[("authorization", bearer)], key, body).await;
        (status, headers.contains_key("idempotent-replayed"), body)
    }
}

fn unique(label: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{label}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst),
        idempotency_test::unique_key()
    )
}

/// The attack of the security review, against a layer scoped by the authenticated tenant.
async fn tenants_never_share_records<S: Store>(store: S) {
    let server = serve(
        IdempotencyLayer::builder(store)
            .namespace(unique("orders"))
            .principal_from_extension::<Tenant>(),
    )
    .await;
    let key = unique("k-alice");
    let order = r#"{"amount":100}"#;

    let (status, replayed, alice) = server.as_tenant("alice", &key, order).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    assert!(alice.starts_with("order 1 for alice"), "{alice}");

    // Mallory, same key and body: her own request runs, she never sees Alice's order.
    let (status, replayed, mallory) = server.as_tenant("mallory", &key, order).await;
    assert_eq!(
        (status, replayed),
        (StatusCode::CREATED, false),
        "{mallory}"
    );
    assert!(mallory.starts_with("order 2 for mallory"), "{mallory}");
    assert!(!mallory.contains("alice"));

    // Another body under the same key is no oracle: no 422 for a key Alice used.
    let key_probe = unique("k-alice-probe");
    let (status, ..) = server.as_tenant("alice", &key_probe, order).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, replayed, probe) = server
        .as_tenant("mallory", &key_probe, r#"{"amount":1}"#)
        .await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false), "{probe}");

    // Alice's retry is still hers.
    let (status, replayed, again) = server.as_tenant("alice", &key, order).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(again, alice);
    assert_eq!(server.runs.load(Ordering::SeqCst), 4);

    // No principal: refused, nothing run, nothing claimed in any shared scope.
    let (status, headers, problem) = server.post(&[], &key, order).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{problem}");
    assert_eq!(headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&problem).unwrap();
    assert_eq!(problem["type"], "urn:idempotency:unauthenticated");
    assert_eq!(server.runs.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn tenants_never_share_records_on_the_memory_store() {
    tenants_never_share_records(MemoryStore::new()).await;
}

#[tokio::test]
async fn tenants_never_share_records_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let store = match RedisStore::connect(&url).await {
        Ok(store) => store.with_key_prefix("test:tower-tenant-scope:"),
        Err(error) => return unavailable("Redis", error).unwrap_or(()),
    };
    tenants_never_share_records(store).await;
}

/// What a shared scope means, for contrast: every caller's key answers for everyone's. This is
/// what a layer without a principal did before a scope had to be chosen.
#[tokio::test]
async fn a_shared_scope_answers_every_caller_alike() {
    let server = serve(IdempotencyLayer::builder(MemoryStore::new()).shared_scope()).await;
    let key = unique("shared");
    let (_, _, first) = server.as_tenant("alice", &key, "{}").await;
    let (status, replayed, second) = server.as_tenant("mallory", &key, "{}").await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(second, first);
}

#[tokio::test]
async fn a_principal_header_that_is_not_utf8_is_refused() {
    let tenant = http::HeaderName::from_static("x-tenant-id");
    let server =
        serve(IdempotencyLayer::builder(MemoryStore::new()).principal_header(tenant.clone())).await;
    // Two distinct byte strings a lossy conversion would both read as "t\u{fffd}".
    for raw in [&b"t\xff"[..], &b"t\xfe"[..]] {
        let value = HeaderValue::from_bytes(raw).unwrap();
        let (status, _, body) = server
            .post(&[(tenant.as_str(), value)], &unique("k"), "{}")
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let utf8 = HeaderValue::from_bytes("t\u{e9}".as_bytes()).unwrap();
    let (status, ..) = server
        .post(&[(tenant.as_str(), utf8)], &unique("k"), "{}")
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(server.runs.load(Ordering::SeqCst), 1);
}

/// The gRPC preset scoped per principal: a call without one is refused `UNAUTHENTICATED`
/// before anything runs; with one, it runs.
#[cfg(feature = "grpc")]
#[tokio::test]
async fn a_grpc_call_without_a_principal_is_unauthenticated() {
    use tower::{Layer, ServiceExt};

    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let service = tower::service_fn(
        move |_: http::Request<idempotency_tower::RequestBody<Full<Bytes>>>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async {
                let response = http::Response::builder()
                    .header("content-type", "application/grpc")
                    .header("grpc-status", "0")
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        },
    );
    let guarded = IdempotencyLayer::builder(MemoryStore::new())
        .grpc()
        .principal_from_extension::<Tenant>()
        .build()
        .layer(service);
    let call = |tenant: Option<&str>| {
        let mut request = http::Request::post("/payments.v1.Payments/Pay")
            .header("content-type", "application/grpc")
            .header("idempotency-key", "call-1");
        if let Some(tenant) = tenant {
            request = request.extension(Tenant(tenant.to_owned()));
        }
        // One framed message: flag, length, bytes.
        let message = Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1]);
        request.body(Full::new(message)).unwrap()
    };
    let refused = guarded.clone().oneshot(call(None)).await.unwrap();
    assert_eq!(refused.headers()["grpc-status"], "16");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let ran = guarded.oneshot(call(Some("acme"))).await.unwrap();
    assert_eq!(ran.headers()["grpc-status"], "0");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
