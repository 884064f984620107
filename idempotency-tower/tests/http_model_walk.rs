//! The HTTP contract as a random walk: requests over a few keys, two tenants and two payloads,
//! whose handler (when it runs) answers 201, 400, 409, 500 or fails, checked one by one against
//! a model of the contract's table. A stored answer (2xx, 4xx but 409) is replayed with its
//! headers and `Idempotent-Replayed: true`; a refused one (5xx, 409, a service error) releases
//! the key, so the next request runs, whatever its payload; the same key with another payload is
//! 422; tenants never share a record; the handler runs exactly when the model says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use idempotency_core::MemoryStore;
use idempotency_test::Walk;
use idempotency_tower::{IdempotencyLayer, RequestBody};
use tower::{Layer, ServiceExt, service_fn};

/// What the handler does when it runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Plan {
    Created,
    BadRequest,
    Conflict,
    ServerError,
    Fails,
}

impl Plan {
    const ALL: [Plan; 5] = [
        Plan::Created,
        Plan::BadRequest,
        Plan::Conflict,
        Plan::ServerError,
        Plan::Fails,
    ];

    /// Whether the contract stores this answer (2xx, 3xx, 4xx except 408, 409, 425, 429).
    fn stored(self) -> bool {
        matches!(self, Plan::Created | Plan::BadRequest)
    }
}

/// A stored answer, as the model keeps it.
#[derive(Clone, Debug, PartialEq)]
struct Answer {
    status: StatusCode,
    serial: String,
    body: Bytes,
}

#[tokio::test]
async fn the_layer_follows_the_contract_over_a_random_walk() {
    let seed = Walk::seed_from_env("WALK_SEED");
    let plan = Arc::new(Mutex::new(Plan::Created));
    let runs = Arc::new(Mutex::new(0u64));
    let handler = {
        let (plan, runs) = (Arc::clone(&plan), Arc::clone(&runs));
        service_fn(move |request: Request<RequestBody<Full<Bytes>>>| {
            let plan = *plan.lock().unwrap();
            let serial = {
                let mut runs = runs.lock().unwrap();
                *runs += 1;
                *runs
            };
            async move {
                let body = request.into_body().collect().await.unwrap().to_bytes();
                let status = match plan {
                    Plan::Created => StatusCode::CREATED,
                    Plan::BadRequest => StatusCode::BAD_REQUEST,
                    Plan::Conflict => StatusCode::CONFLICT,
                    Plan::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
                    Plan::Fails => return Err("the database went away"),
                };
                let mut answer = format!("run {serial} of ").into_bytes();
                answer.extend_from_slice(&body);
                Ok(Response::builder()
                    .status(status)
                    .header("x-serial", serial)
                    .body(Full::new(Bytes::from(answer)))
                    .unwrap())
            }
        })
    };
    let service = IdempotencyLayer::builder(MemoryStore::new())
        .principal_header(HeaderName::from_static("x-tenant"))
        .build()
        .layer(handler);

    let mut model: HashMap<(usize, usize), (Bytes, Answer)> = HashMap::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut walk = Walk::new(seed);
    let mut generation = 0;
    for step in 0..800 {
        // Now and then the keys are new ones: a stored answer stays stored.
        if walk.below(40) == 0 {
            generation += 1;
            model.clear();
        }
        let (tenant, key) = (walk.below(2), walk.below(3));
        let payload = Bytes::from(format!("{{\"amount\":{}}}", 100 * (1 + walk.below(2))));
        let next = Plan::ALL[walk.below(Plan::ALL.len())];
        *plan.lock().unwrap() = next;
        let before = *runs.lock().unwrap();
        let at = format!(
            "seed {seed}, step {step}: tenant {tenant}, key {key}, {payload:?}, plan {next:?}, model {:?}",
            model.get(&(tenant, key))
        );
        let request = Request::post("/pay")
            .header("idempotency-key", format!("key-{generation}-{key}"))
            .header("x-tenant", format!("tenant-{tenant}"))
            .body(Full::new(payload.clone()))
            .unwrap();
        let result = service.clone().oneshot(request).await;
        let ran = *runs.lock().unwrap() > before;
        match model.get(&(tenant, key)).cloned() {
            None => {
                assert!(ran, "{at}: the handler did not run for a free key");
                match result {
                    Err(error) => {
                        assert_eq!(next, Plan::Fails, "{at}: {error}");
                        *seen.entry("service error, released").or_default() += 1;
                    }
                    Ok(response) => {
                        assert!(
                            !response.headers().contains_key("idempotent-replayed"),
                            "{at}"
                        );
                        let status = response.status();
                        let serial = response.headers()["x-serial"].to_str().unwrap().to_owned();
                        let body = response.into_body().collect().await.unwrap().to_bytes();
                        assert!(body.ends_with(&payload), "{at}: {body:?}");
                        if next.stored() {
                            let answer = Answer {
                                status,
                                serial,
                                body,
                            };
                            model.insert((tenant, key), (payload.clone(), answer));
                            *seen.entry("ran, stored").or_default() += 1;
                        } else {
                            *seen.entry("ran, released").or_default() += 1;
                        }
                    }
                }
            }
            Some((stored_payload, answer)) => {
                assert!(!ran, "{at}: the handler ran again for a stored key");
                let response = result.unwrap();
                let status = response.status();
                if stored_payload == payload {
                    assert_eq!(response.headers()["idempotent-replayed"], "true", "{at}");
                    let serial = response.headers()["x-serial"].to_str().unwrap().to_owned();
                    let body = response.into_body().collect().await.unwrap().to_bytes();
                    let replayed = Answer {
                        status,
                        serial,
                        body,
                    };
                    assert_eq!(replayed, answer, "{at}: the replay differs");
                    *seen.entry("replayed").or_default() += 1;
                } else {
                    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{at}");
                    assert_eq!(
                        response.headers()["content-type"],
                        "application/problem+json",
                        "{at}"
                    );
                    *seen.entry("other payload, 422").or_default() += 1;
                }
            }
        }
    }
    assert_eq!(
        seen.len(),
        5,
        "seed {seed}: some outcomes never came: {seen:?}"
    );
}
