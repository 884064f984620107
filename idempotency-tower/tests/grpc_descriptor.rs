//! The guarded gRPC methods come from (or are checked against) the service's encoded
//! `FileDescriptorSet`: with no list every unary method is guarded and streaming ones pass
//! through; a listed path that is not a unary method stops the build, naming it and listing
//! the valid ones. Through a real axum router on the memory store.
#![cfg(feature = "grpc-descriptor")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use common::{read, unique};
use idempotency_core::MemoryStore;
use idempotency_tower::IdempotencyLayer;
use prost::Message;
use prost_types::{
    FileDescriptorProto, FileDescriptorSet, MethodDescriptorProto, ServiceDescriptorProto,
};
use tower::ServiceExt;

/// `payments.v1.Payments`: `Pay` (unary) and `Watch` (server streaming), encoded as
/// `tonic-build` writes it.
fn descriptor() -> Vec<u8> {
    let method = |name: &str, server_streaming: bool| MethodDescriptorProto {
        name: Some(name.to_owned()),
        input_type: Some(".payments.v1.Request".to_owned()),
        output_type: Some(".payments.v1.Reply".to_owned()),
        server_streaming: Some(server_streaming),
        ..Default::default()
    };
    FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("payments.proto".to_owned()),
            package: Some("payments.v1".to_owned()),
            service: vec![ServiceDescriptorProto {
                name: Some("Payments".to_owned()),
                method: vec![method("Pay", false), method("Watch", true)],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn call(path: &str, key: &str) -> http::Request<Body> {
    http::Request::post(path)
        .header("content-type", "application/grpc")
        .header("idempotency-key", key)
        .body(Body::from(vec![0, 0, 0, 0, 0]))
        .unwrap()
}

#[tokio::test]
async fn without_a_list_every_unary_method_is_guarded() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = |runs: &Arc<AtomicUsize>| {
        let runs = Arc::clone(runs);
        post(move || {
            runs.fetch_add(1, Ordering::SeqCst);
            async { [("content-type", "application/grpc"), ("grpc-status", "0")] }
        })
    };
    let watched = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route("/payments.v1.Payments/Pay", counted(&runs))
        .route("/payments.v1.Payments/Watch", counted(&watched))
        .layer(
            IdempotencyLayer::builder(MemoryStore::new())
                .grpc()
                .grpc_descriptor(&descriptor())
                .shared_scope()
                .build(),
        );
    for path in ["/payments.v1.Payments/Pay", "/payments.v1.Payments/Watch"] {
        let key = unique("k");
        for _ in 0..2 {
            let (_, headers, _) = read(app.clone().oneshot(call(path, &key)).await.unwrap()).await;
            assert_eq!(headers["grpc-status"], "0");
        }
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the unary method is guarded"
    );
    assert_eq!(
        watched.load(Ordering::SeqCst),
        2,
        "the streaming one passes through"
    );
}

#[test]
fn a_listed_method_the_service_lacks_stops_the_build() {
    let payload = std::panic::catch_unwind(|| {
        IdempotencyLayer::builder(MemoryStore::new())
            .grpc()
            .namespace("payments.grpc")
            .only_paths(["/payments.v1.Payments/Pya", "/payments.v1.Payments/Watch"])
            .grpc_descriptor(&descriptor())
            .shared_scope()
            .build()
    })
    .expect_err("a typo must stop the build");
    let message = payload.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("\"/payments.v1.Payments/Pya\" is not a method"),
        "{message}"
    );
    assert!(
        message.contains("\"/payments.v1.Payments/Watch\" is a streaming method"),
        "{message}"
    );
    assert!(
        message.contains("the unary methods are: /payments.v1.Payments/Pay"),
        "{message}"
    );
}
