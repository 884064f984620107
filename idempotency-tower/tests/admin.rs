//! The admin router over real TCP (axum served by hyper, a hyper client), on the memory store
//! and a real Redis server (`REDIS_URL`, default `redis://127.0.0.1:6379`): every endpoint,
//! what it never answers (raw keys, bodies not asked for), the fence, and who is audited.
#![cfg(feature = "admin")]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idempotency_core::{
    ClaimId, ClaimRequest, Fingerprint, Mechanism, MemoryStore, Outcome, RecordState, Scope, Store,
};
use idempotency_operations::{Admin, Operations, RecordView};
use idempotency_redis::RedisStore;
use idempotency_test::{KeptAudit, claimed, completed, unavailable, unique_namespace};
use idempotency_tower::StoredResponse;
use idempotency_tower::admin::{Operator, admin_router, admin_router_verified};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// The router served on a loopback port, under `/admin`; `operator`: an auth layer's
/// identity, as a request extension.
struct Served {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Served {
    async fn start(admin: Admin, operator: Option<&str>) -> Self {
        let mut app = axum::Router::new().nest("/admin", admin_router(admin));
        if let Some(who) = operator {
            app = app.layer(axum::Extension(Operator(who.to_owned())));
        }
        Self::serve(app).await
    }

    async fn serve(app: axum::Router) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/admin", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            base,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Sends a request; the status and the body as text.
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, String) {
        let (status, _, text) = self.send_as(None, method, path, body).await;
        (status, text)
    }

    /// Sends a request with `authorization` if given; the status, content type and body.
    async fn send_as(
        &self,
        authorization: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, String, String) {
        let mut request = Request::builder();
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        let request = request
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                body.map(|b| b.to_string()).unwrap_or_default(),
            )))
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|value| value.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            content_type,
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let (status, text) = self.send(Method::GET, path, None).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Every record of `GET /records?{filter}`, batch after batch by `next_cursor`.
    async fn all_records(&self, filter: &str) -> Vec<Value> {
        let mut records = Vec::new();
        let mut cursor = String::new();
        loop {
            let (status, page) = self.get(&format!("/records?{filter}{cursor}")).await;
            assert_eq!(status, StatusCode::OK, "{page}");
            records.extend(page["records"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => return records,
            }
        }
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let (status, text) = self.send(Method::POST, path, Some(body)).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// Every endpoint on `store`.
async fn endpoints<S: Store + Operations + Clone>(store: S) {
    let namespace = unique_namespace("payments.callback");
    let scope = Scope::new(namespace.clone());
    let long = Duration::from_secs(60);
    let crashed = claimed(&store, &scope, "T1", Duration::from_millis(100)).await;
    let paid = completed(
        &store,
        &scope,
        "T2",
        &Outcome::new(200, "secret-body"),
        long,
    )
    .await;
    let by_hand = claimed(&store, &scope, "T4", long).await;
    let audit = KeptAudit::default();
    let served = Served::start(Admin::new(store.clone(), audit.clone()), Some("ops")).await;

    // The records that met a conflicting duplicate: with their count and the last one's time.
    let filter = format!("namespace={namespace}&min_conflicts=1");
    assert!(served.all_records(&filter).await.is_empty());
    assert!(store.mark_conflict(&paid).await.unwrap());
    let conflicted = served.all_records(&filter).await;
    assert_eq!(conflicted.len(), 1, "{conflicted:?}");
    assert_eq!(conflicted[0]["key_hash"], paid.to_hex());
    assert_eq!(conflicted[0]["conflicts"], 1);
    assert!(conflicted[0]["last_conflict_at_ms"].is_u64());
    let secret = "c2VjcmV0LWJvZHk="; // base64 of the stored body

    // Listings: storage keys, never raw keys nor bodies. Waits for the event: the store
    // itself reports T1's lease ended.
    let stuck = loop {
        let (status, stuck) = served.get(&format!("/stuck?namespace={namespace}")).await;
        assert_eq!(status, StatusCode::OK, "{stuck}");
        if !stuck["records"].as_array().unwrap().is_empty() {
            break stuck;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let records = stuck["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{stuck}");
    assert_eq!(records[0]["key_hash"], crashed.to_hex().as_str());
    assert_eq!(records[0]["state"], "abandoned");
    let (_, text) = served
        .send(
            Method::GET,
            &format!("/records?namespace={namespace}"),
            None,
        )
        .await;
    assert!(
        !text.contains("\"T1\"") && !text.contains("\"T2\"") && !text.contains(secret),
        "{text}"
    );
    let completed_only = served
        .all_records(&format!("namespace={namespace}&state=completed"))
        .await;
    assert_eq!(completed_only.len(), 1);
    assert_eq!(completed_only[0]["outcome_status"], 200);
    assert_eq!(
        served
            .all_records(&format!("namespace={namespace}"))
            .await
            .len(),
        3
    );
    let (_, stats) = served.get(&format!("/stats?namespace={namespace}")).await;
    assert_eq!(
        (
            stats["in_progress"].clone(),
            stats["abandoned"].clone(),
            stats["completed"].clone()
        ),
        (json!(1), json!(1), json!(1)),
        "{stats}"
    );
    let (status, bad) = served.get("/records?state=stuck").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

    // One record by its key: its body only when asked for.
    let (_, plain) = served
        .post("/inspect", json!({"namespace": namespace, "key": "T2"}))
        .await;
    assert_eq!(plain["record"]["state"], "completed");
    assert!(plain["record"].get("body_base64").is_none());
    let (_, with_body) = served
        .post(
            "/inspect",
            json!({"namespace": namespace, "key": "T2", "body": true}),
        )
        .await;
    assert_eq!(with_body["record"]["body_base64"], secret);

    // Reconciliation answers by index, no raw key.
    let (_, text) = served
        .send(
            Method::POST,
            "/reconcile",
            Some(json!({"namespace": namespace, "keys": ["T1", "T2", "T3"]})),
        )
        .await;
    assert!(!text.contains("T3"), "{text}");
    let reconciled: Value = serde_json::from_str(&text).unwrap();
    let states: Vec<&str> = reconciled["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["abandoned", "completed", "absent"]);

    // Release, fenced to the record as listed: applied, then refused (409) as absent.
    let fence = json!({"token": records[0]["token"], "updated_at_ms": records[0]["updated_at_ms"]});
    let release = json!({"namespace": namespace, "key": "T1", "fence": fence, "reason": "INC-25"});
    let (status, applied) = served.post("/release", release.clone()).await;
    assert_eq!(
        (status, applied["applied"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert!(store.get(&crashed).await.unwrap().is_none());
    let (status, refused) = served.post("/release", release).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(refused["refusal"], "absent");
    // Who acts is the authenticated operator, never a field of the body.
    let forged = json!({"namespace": namespace, "key": "T4", "fence": fence, "actor": "mallory"});
    assert_eq!(
        served.post("/release", forged).await.0,
        StatusCode::BAD_REQUEST
    );
    // A stale fence is refused, without the record as it is now (its fence unverified).
    let stale = json!({"namespace": namespace, "key": "T4", "fence": fence});
    let (status, content_type, text) = served
        .send_as(None, Method::POST, "/release", Some(stale))
        .await;
    let moved: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (status, moved["refusal"].clone()),
        (StatusCode::CONFLICT, json!("moved_on"))
    );
    assert_eq!(content_type, "application/problem+json");
    assert!(moved.get("current").is_none(), "{moved}");
    let by_hand_hex = by_hand.to_hex();
    assert!(
        !text.contains("token") && !text.contains(&by_hand_hex),
        "{text}"
    );

    // Resume, fenced to the record as listed: its live lease ends now, so that the next claim
    // (a retry, the completer of a run with steps) takes it over.
    let running = claimed(&store, &scope, "T5", long).await;
    let in_progress = served
        .all_records(&format!("namespace={namespace}&state=in_progress"))
        .await;
    let t5 = in_progress
        .iter()
        .find(|record| record["key_hash"] == running.to_hex().as_str())
        .unwrap();
    let fence5 = json!({"token": t5["token"], "updated_at_ms": t5["updated_at_ms"]});
    let (status, resumed) = served
        .post(
            "/resume",
            json!({"namespace": namespace, "key": "T5", "fence": fence5, "reason": "INC-38"}),
        )
        .await;
    assert_eq!(
        (status, resumed["applied"].clone()),
        (StatusCode::OK, json!(true)),
        "{resumed}"
    );

    // Complete by hand, fenced to the record as listed again: the layer replays it.
    let listed = served
        .all_records(&format!("namespace={namespace}&state=in_progress"))
        .await;
    let listed = listed
        .iter()
        .find(|record| record["key_hash"] == by_hand_hex.as_str())
        .unwrap();
    let as_listed = json!({"token": listed["token"], "updated_at_ms": listed["updated_at_ms"]});
    let behind_auth = Served::start(Admin::new(store.clone(), audit.clone()), Some("alice")).await;
    let (status, done) = behind_auth
        .post(
            "/complete",
            json!({"namespace": namespace, "key": "T4", "fence": as_listed,
                   "status": 200, "body": "{\"ok\":true}", "reason": "paid at the bank"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    let record = store.get(&by_hand).await.unwrap().unwrap();
    assert_eq!(record.state, RecordState::Completed);
    let replayed = StoredResponse::decode(&record.outcome.unwrap().body).unwrap();
    assert_eq!(
        (replayed.status, replayed.body),
        (StatusCode::OK, Bytes::from_static(b"{\"ok\":true}"))
    );
    let entries = audit.entries();
    let last = entries.last().unwrap();
    assert_eq!(
        (last.actor.as_str(), last.reason.as_str()),
        ("alice", "paid at the bank")
    );
    assert_eq!(entries.iter().filter(|e| e.actor == "ops").count(), 4);
    assert!(entries.iter().all(|e| e.actor != "mallory"));

    // Purge, bounded per request.
    let (status, purged) = served
        .post("/purge", json!({"namespace": namespace, "max_batches": 1}))
        .await;
    assert_eq!(status, StatusCode::OK, "{purged}");
    assert_eq!(purged["batches"], 1);
    assert_eq!(purged["purged"], 0, "nothing expired: {purged}");
}

#[tokio::test]
async fn every_endpoint_on_the_memory_store() {
    endpoints(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn every_endpoint_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let prefix = format!("{}:", unique_namespace("test:admin"));
            endpoints(store.with_key_prefix(prefix)).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}

/// A raw key is found under whichever front end wrote its record, no mechanism named: a
/// consumer's record is inspected, reconciled and released by its raw key alone; a key with
/// records of two front ends is refused (400) naming both `key_hash`es, and is released by
/// one of them.
async fn no_front_end_needs_naming<S: Store + Operations + Clone>(store: S) {
    let namespace = unique_namespace("coupon-grant");
    let scope = Scope::new(namespace.clone());
    let claim = |mechanism: Mechanism, raw: &'static str| {
        let store = store.clone();
        let scope = scope.clone();
        async move {
            let key = scope.storage_key_for(mechanism, raw);
            store
                .claim(ClaimRequest {
                    key: &key,
                    namespace: scope.namespace(),
                    fingerprint: &Fingerprint::of_bytes(raw.as_bytes()),
                    lease: Duration::from_secs(60),
                    claim_id: ClaimId::random(),
                    mechanism: Some(mechanism),
                    key_derivation: None,
                })
                .await
                .unwrap();
            let record = store.get(&key).await.unwrap().unwrap();
            let view = RecordView::of(&record, SystemTime::now());
            (
                key,
                json!({"token": view.token, "updated_at_ms": view.updated_at_ms}),
            )
        }
    };
    let (message, message_fence) = claim(Mechanism::Message, "M1").await;
    let (request, request_fence) = claim(Mechanism::Request, "B1").await;
    let (function, _) = claim(Mechanism::Function, "B1").await;
    let served = Served::start(Admin::new(store.clone(), KeptAudit::default()), Some("ops")).await;

    let (_, inspected) = served
        .post("/inspect", json!({"namespace": namespace, "key": "M1"}))
        .await;
    assert_eq!(inspected["record"]["key_hash"], message.to_hex().as_str());
    let (_, reconciled) = served
        .post(
            "/reconcile",
            json!({"namespace": namespace, "keys": ["M1", "B1", "none"]}),
        )
        .await;
    let results: Vec<(u64, String, String)> = reconciled["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["state"].as_str().unwrap().to_owned(),
                r["mechanism"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expected = [
        (0, "in_progress", "message"),
        (1, "in_progress", "request"),
        (1, "in_progress", "function"),
        (2, "absent", ""),
    ]
    .map(|(index, state, mechanism)| (index, state.to_owned(), mechanism.to_owned()));
    assert_eq!(results, expected);

    let (status, released) = served
        .post(
            "/release",
            json!({"namespace": namespace, "key": "M1", "fence": message_fence}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert!(store.get(&message).await.unwrap().is_none());

    let (status, text) = served
        .send(
            Method::POST,
            "/release",
            Some(json!({"namespace": namespace, "key": "B1", "fence": request_fence})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    for key in [request, function] {
        assert!(text.contains(&key.to_hex()), "{text}");
    }
    let by_hash = json!({"key_hash": request.to_hex(), "fence": request_fence});
    assert_eq!(served.post("/release", by_hash).await.0, StatusCode::OK);
    assert!(store.get(&request).await.unwrap().is_none());
    assert!(store.get(&function).await.unwrap().is_some());
}

#[tokio::test]
async fn no_front_end_needs_naming_on_the_memory_store() {
    no_front_end_needs_naming(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn no_front_end_needs_naming_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let prefix = format!("{}:", unique_namespace("test:admin:mechanisms"));
            no_front_end_needs_naming(store.with_key_prefix(prefix)).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}

/// Without an authenticated operator every request, reads included, is answered 401
/// problem+json and nothing runs: no listing, no body, no action, no audit entry.
async fn strangers_are_refused<S: Store + Operations + Clone>(store: S) {
    let namespace = unique_namespace("payments.callback");
    let scope = Scope::new(namespace.clone());
    let key = claimed(&store, &scope, "T1", Duration::from_secs(60)).await;
    let record = store.get(&key).await.unwrap().unwrap();
    let fence = json!({"token": record.token.get(), "updated_at_ms": 0});
    let audit = KeptAudit::default();
    let verifier = |head: &http::request::Parts| {
        let token = head.headers.get("authorization")?.to_str().ok()?;
        (token == "Bearer ops-secret").then(|| Operator("ci-bot".to_owned()))
    };
    let verified = Served::serve(axum::Router::new().nest(
        "/admin",
        admin_router_verified(Admin::new(store.clone(), audit.clone()), verifier),
    ))
    .await;
    let bare = Served::start(Admin::new(store.clone(), audit.clone()), None).await;
    let target = json!({"namespace": namespace, "key": "T1", "fence": fence, "body": true,
                        "status": 200, "keys": ["T1"], "reason": "INC-1"});
    let requests = [
        (
            Method::GET,
            format!("/stuck?namespace={namespace}&older_than_ms=0"),
        ),
        (Method::GET, format!("/records?namespace={namespace}")),
        (Method::GET, format!("/stats?namespace={namespace}")),
        (Method::POST, "/inspect".to_owned()),
        (Method::POST, "/reconcile".to_owned()),
        (Method::POST, "/release".to_owned()),
        (Method::POST, "/complete".to_owned()),
        (Method::POST, "/delete".to_owned()),
        (Method::POST, "/purge".to_owned()),
        (Method::GET, "/no-such-endpoint".to_owned()),
    ];
    for (method, path) in &requests {
        let body = (*method == Method::POST).then(|| target.clone());
        for (served, authorization) in [
            (&bare, None),
            (&bare, Some("Bearer ops-secret")),
            (&verified, None),
            (&verified, Some("Bearer wrong")),
        ] {
            let (status, content_type, text) = served
                .send_as(authorization, method.clone(), path, body.clone())
                .await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {text}");
            assert_eq!(content_type, "application/problem+json", "{method} {path}");
            let problem: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(problem["status"], 401);
            assert!(!text.contains(&key.to_hex()), "{text}");
        }
    }
    assert_eq!(store.get(&key).await.unwrap(), Some(record.clone()));
    assert!(audit.entries().is_empty(), "nothing acted");

    // The verifier's operator acts, and is who the audit names.
    let (status, _, text) = verified
        .send_as(
            Some("Bearer ops-secret"),
            Method::POST,
            "/release",
            Some(json!({"namespace": namespace, "key": "T1", "reason": "INC-1",
                        "fence": {"token": record.token.get(),
                                  "updated_at_ms": RecordView::of(&record, SystemTime::now()).updated_at_ms}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(store.get(&key).await.unwrap().is_none());
    let entries = audit.entries();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].actor, "ci-bot");
}

#[tokio::test]
async fn strangers_are_refused_on_the_memory_store() {
    strangers_are_refused(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn strangers_are_refused_on_redis() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    match RedisStore::connect(&url).await {
        Ok(store) => {
            let prefix = format!("{}:", unique_namespace("test:admin:strangers"));
            strangers_are_refused(store.with_key_prefix(prefix)).await;
        }
        Err(error) => unavailable::<()>("Redis", error).unwrap_or_default(),
    }
}
