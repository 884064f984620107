//! The gRPC Payments example over real TCP with a real tonic client: the layer's gRPC mode in
//! front of a tonic 0.14 server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use idempotency_core::{
    Fingerprint, Idempotency, IdempotencyKey, InFlightPolicy, MemoryStore, Scope, Store,
};
use prost::Message as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tonic::transport::Channel;
use tonic::{Code, Request};
use tonic_payments::proto::payments_client::PaymentsClient;
use tonic_payments::proto::{CreateOrderRequest, PaymentCallbackRequest, WatchOrdersRequest};
use tonic_payments::{CREATE_ORDER, PaymentsService, create_order_with_retries, serve, with_key};

async fn start(service: PaymentsService, store: impl Store) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, store));
    addr
}

async fn client(addr: SocketAddr) -> PaymentsClient<Channel> {
    PaymentsClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn order(amount_cents: i64) -> CreateOrderRequest {
    CreateOrderRequest {
        customer: "alice".to_owned(),
        amount_cents,
    }
}

fn replayed<T>(response: &tonic::Response<T>) -> bool {
    response
        .metadata()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Metadata as text pairs, without the per-response `date` and the replay marker.
fn stable_metadata(metadata: &tonic::metadata::MetadataMap) -> Vec<(String, String)> {
    let headers = metadata.clone().into_headers();
    let mut pairs: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| *name != "date" && *name != "idempotent-replayed")
        .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
        .collect();
    pairs.sort();
    pairs
}

#[tokio::test]
async fn a_retry_after_a_deadline_gets_the_same_order() {
    let gate = Arc::new(Semaphore::new(0));
    let service = PaymentsService::new().with_gate(Arc::clone(&gate));
    let addr = start(service.clone(), MemoryStore::new()).await;
    let mut client = client(addr).await;

    // The first try outlives its deadline; the server keeps working on it.
    let mut first = with_key(order(4200), "order-1").unwrap();
    first.set_timeout(Duration::from_millis(200));
    let status = client.create_order(first).await.unwrap_err();
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{status:?}"
    );
    assert_eq!(service.entered(), 1);
    gate.add_permits(100);

    let (answer, tries) = create_order_with_retries(
        &mut client,
        order(4200),
        "order-1",
        Duration::from_secs(5),
        50,
    )
    .await;
    let answer = answer.unwrap();
    assert!(
        replayed(&answer),
        "the retry is answered from the store: {tries:?}"
    );
    assert_eq!(answer.get_ref().sequence, 1);
    assert_eq!(answer.get_ref().order_id, "ord-000001");
    assert_eq!(service.executions(), 1, "the work ran once");
}

#[tokio::test]
async fn a_completed_call_is_replayed_with_its_message_and_metadata() {
    let service = PaymentsService::new();
    let addr = start(service.clone(), MemoryStore::new()).await;
    let mut client = client(addr).await;

    let first = client
        .create_order(with_key(order(4200), "k-ok").unwrap())
        .await
        .unwrap();
    let again = client
        .create_order(with_key(order(4200), "k-ok").unwrap())
        .await
        .unwrap();
    assert!(!replayed(&first));
    assert!(replayed(&again));
    assert_eq!(first.get_ref(), again.get_ref());
    assert_eq!(first.metadata().get("x-order-sequence").unwrap(), "1");
    assert_eq!(
        stable_metadata(first.metadata()),
        stable_metadata(again.metadata())
    );

    // A business error (INVALID_ARGUMENT) is final, so it is stored and replayed as well:
    // code, message and metadata (x-error-ref proves the handler did not run again).
    let error = client
        .create_order(with_key(order(0), "k-err").unwrap())
        .await
        .unwrap_err();
    let replay = client
        .create_order(with_key(order(0), "k-err").unwrap())
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(replay.code(), Code::InvalidArgument);
    assert_eq!(error.message(), "amount_cents must be positive");
    assert_eq!(replay.message(), error.message());
    assert_eq!(error.metadata().get("x-error-ref").unwrap(), "2");
    assert_eq!(
        replay.metadata().get("idempotent-replayed").unwrap(),
        "true"
    );
    assert_eq!(
        stable_metadata(error.metadata()),
        stable_metadata(replay.metadata())
    );
    assert_eq!(service.executions(), 2);
}

/// One raw HTTP/2 gRPC call: (headers, body bytes, trailers).
async fn raw_call(
    addr: SocketAddr,
    key: &str,
    message: &CreateOrderRequest,
) -> (http::HeaderMap, Bytes, Option<http::HeaderMap>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let encoded = message.encode_to_vec();
    let mut framed = BytesMut::with_capacity(5 + encoded.len());
    framed.put_u8(0);
    framed.put_u32(u32::try_from(encoded.len()).unwrap());
    framed.put_slice(&encoded);
    let request = http::Request::post(format!("http://{addr}{CREATE_ORDER}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("idempotency-key", key)
        .header("authorization", "Bearer demo-client")
        .body(Full::new(framed.freeze()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (parts.headers, collected.to_bytes(), trailers)
}

#[tokio::test]
async fn a_replay_is_byte_for_byte_on_the_wire_trailers_included() {
    let service = PaymentsService::new();
    let addr = start(service.clone(), MemoryStore::new()).await;
    let (headers, body, trailers) = raw_call(addr, "k-wire", &order(990)).await;
    let (replay_headers, replay_body, replay_trailers) =
        raw_call(addr, "k-wire", &order(990)).await;

    assert_eq!(body, replay_body, "the same message bytes");
    let trailers = trailers.expect("a unary answer ends with trailers");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0");
    assert_eq!(
        Some(trailers),
        replay_trailers,
        "the same trailers, grpc-status included"
    );
    assert!(headers.get("idempotent-replayed").is_none());
    assert_eq!(replay_headers.get("idempotent-replayed").unwrap(), "true");
    let strip = |mut h: http::HeaderMap| {
        h.remove("date");
        h.remove("idempotent-replayed");
        h
    };
    assert_eq!(strip(headers), strip(replay_headers));

    // An error answer is trailers-only: grpc-status and grpc-message in the headers.
    let (error_headers, error_body, _) = raw_call(addr, "k-wire-err", &order(-1)).await;
    let (replay_error_headers, replay_error_body, _) =
        raw_call(addr, "k-wire-err", &order(-1)).await;
    assert_eq!(error_headers.get("grpc-status").unwrap(), "3");
    assert_eq!(
        error_headers.get("grpc-message").unwrap(),
        "amount_cents%20must%20be%20positive",
        "percent-encoded, as tonic sends it"
    );
    assert_eq!(error_body, replay_error_body);
    assert_eq!(strip(error_headers), strip(replay_error_headers));
    assert_eq!(service.executions(), 2);
}

#[tokio::test]
async fn a_duplicate_in_flight_is_aborted() {
    let gate = Arc::new(Semaphore::new(0));
    let service = PaymentsService::new().with_gate(Arc::clone(&gate));
    let addr = start(service.clone(), MemoryStore::new()).await;
    let mut first_client = client(addr).await;
    let first = tokio::spawn(async move {
        first_client
            .create_order(with_key(order(100), "k-busy").unwrap())
            .await
    });
    while service.entered() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut client = client(addr).await;
    let busy = client
        .create_order(with_key(order(100), "k-busy").unwrap())
        .await
        .unwrap_err();
    assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
    assert!(busy.metadata().get("retry-after").is_some());

    gate.add_permits(10);
    let first = first.await.unwrap().unwrap();
    let replay = client
        .create_order(with_key(order(100), "k-busy").unwrap())
        .await
        .unwrap();
    assert_eq!(first.get_ref(), replay.get_ref());
    assert_eq!(service.executions(), 1);
}

#[tokio::test]
async fn refusals_are_grpc_statuses_and_run_nothing() {
    let service = PaymentsService::new();
    let addr = start(service.clone(), MemoryStore::new()).await;
    let mut client = client(addr).await;

    // Missing key where required.
    let missing = client
        .create_order(Request::new(order(100)))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert_eq!(service.executions(), 0);

    // Same key, other payload.
    client
        .create_order(with_key(order(100), "k-1").unwrap())
        .await
        .unwrap();
    let mismatch = client
        .create_order(with_key(order(999), "k-1").unwrap())
        .await
        .unwrap_err();
    assert_eq!(mismatch.code(), Code::FailedPrecondition, "{mismatch:?}");
    assert_eq!(service.executions(), 1);

    // The callback: six retries of one trade grant one coupon.
    for _ in 0..6 {
        let callback = PaymentCallbackRequest {
            trade_no: "T-42".to_owned(),
            order_id: "ord-000001".to_owned(),
            amount_cents: 100,
        };
        let ack = client
            .payment_callback(with_key(callback, "T-42").unwrap())
            .await
            .unwrap();
        assert_eq!(ack.get_ref().coupons_total, 1);
    }
    assert_eq!(service.coupons(), 1);
}

#[tokio::test]
async fn an_unavailable_store_is_unavailable_and_runs_nothing() {
    // A memory store at capacity with a live claim refuses every new claim: a real store
    // failure, the same path as a store that cannot be reached.
    let store = Arc::new(MemoryStore::with_capacity(1));
    let hold = Idempotency::new(Arc::clone(&store))
        .claim(
            &Scope::new("elsewhere"),
            &IdempotencyKey::parse("held").unwrap(),
            &Fingerprint::of_bytes(b""),
            InFlightPolicy::Reject,
        )
        .await
        .unwrap();
    let service = PaymentsService::new();
    let addr = start(service.clone(), store).await;
    let mut client = client(addr).await;
    let down = client
        .create_order(with_key(order(100), "k-1").unwrap())
        .await
        .unwrap_err();
    assert_eq!(down.code(), Code::Unavailable, "{down:?}");
    assert_eq!(service.executions(), 0);
    drop(hold);
}

#[tokio::test]
async fn a_streaming_method_passes_through() {
    let service = PaymentsService::new();
    let addr = start(service.clone(), MemoryStore::new()).await;
    let mut client = client(addr).await;
    client
        .create_order(with_key(order(100), "k-1").unwrap())
        .await
        .unwrap();
    client
        .create_order(with_key(order(200), "k-2").unwrap())
        .await
        .unwrap();
    for _ in 0..2 {
        let response = client
            .watch_orders(with_key(WatchOrdersRequest {}, "k-stream").unwrap())
            .await
            .unwrap();
        assert!(!replayed(&response));
        let mut stream = response.into_inner();
        let mut amounts = Vec::new();
        while let Some(order) = stream.message().await.unwrap() {
            amounts.push(order.amount_cents);
        }
        assert_eq!(amounts, [100, 200]);
    }
    assert_eq!(
        service.executions(),
        4,
        "both streams ran: nothing replayed"
    );
}

/// Redis reached through a TCP proxy that the test can cut: a store that really goes down.
#[cfg(feature = "redis")]
mod redis_down {
    use super::*;
    use idempotency_redis::RedisStore;
    use std::sync::Mutex;
    use tokio::task::JoinHandle;

    struct Proxy {
        addr: SocketAddr,
        tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    }

    impl Proxy {
        async fn start(upstream: SocketAddr) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
            let registry = Arc::clone(&tasks);
            let accept = tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let connection = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    registry.lock().unwrap().push(connection);
                }
            });
            tasks.lock().unwrap().push(accept);
            Self { addr, tasks }
        }

        /// Closes the listener and every proxied connection.
        fn cut(&self) {
            for task in self.tasks.lock().unwrap().drain(..) {
                task.abort();
            }
        }
    }

    #[tokio::test]
    async fn a_store_that_goes_down_answers_unavailable_and_runs_nothing() {
        let url =
            std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
        let host = url
            .trim_start_matches("redis://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let Ok(upstream) = tokio::net::lookup_host(&host)
            .await
            .map(|mut a| a.next().unwrap())
        else {
            idempotency_test::unavailable::<()>("Redis", "bad REDIS_URL");
            return;
        };
        let proxy = Proxy::start(upstream).await;
        let store = match RedisStore::connect(&format!("redis://{}", proxy.addr)).await {
            Ok(store) => store.with_key_prefix(format!("grpc-down-{}", std::process::id())),
            Err(error) => {
                idempotency_test::unavailable::<()>("Redis", error);
                return;
            }
        };
        let service = PaymentsService::new();
        let addr = start(service.clone(), store).await;
        let mut client = client(addr).await;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let key = format!("k-up-{nonce}");
        client
            .create_order(with_key(order(100), &key).unwrap())
            .await
            .unwrap();
        assert_eq!(service.executions(), 1);

        proxy.cut();
        let down = client
            .create_order(with_key(order(100), "k-while-down").unwrap())
            .await
            .unwrap_err();
        assert_eq!(down.code(), Code::Unavailable, "{down:?}");
        assert_eq!(service.executions(), 1, "nothing ran unguarded");
    }
}
