//! The HTTP relay target over TLS (feature `tls`) against a real PostgreSQL outbox
//! (`DATABASE_URL`) and an HTTPS endpoint served by this test (hyper over rustls, a certificate
//! from a CA made by the test): a target trusting the CA posts every message with its
//! `Idempotency-Key`; one with Mozilla's roots only fails the handshake, so the message is
//! given back uncounted and the endpoint sees no request.
#![cfg(all(feature = "postgres", feature = "tls"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use idempotency_outbox::Relay;
use idempotency_outbox::http::{HttpTarget, rustls};
use idempotency_outbox::table::OutboxTable;
use idempotency_test::pki::Pki;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use support::{enqueue_committed, fresh_outbox, message};

/// An HTTPS endpoint on a free loopback port: what it saw.
struct Endpoint {
    base: String,
    /// The `Idempotency-Key` of every request.
    keys: Arc<Mutex<Vec<String>>>,
    /// Handshakes that completed.
    handshakes: Arc<AtomicUsize>,
}

/// The ring provider, as both ends use it.
fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Serves HTTPS with `pki`'s server certificate, answering every request 200.
async fn endpoint(pki: &Pki) -> Endpoint {
    let acceptor = pki.acceptor();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let keys: Arc<Mutex<Vec<String>>> = Arc::default();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let (seen, shaken) = (Arc::clone(&keys), Arc::clone(&handshakes));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen, shaken) =
                (acceptor.clone(), Arc::clone(&seen), Arc::clone(&shaken));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                shaken.fetch_add(1, Ordering::SeqCst);
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let key = request
                        .headers()
                        .get("idempotency-key")
                        .and_then(|key| key.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    seen.lock().unwrap().push(key);
                    async {
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from("granted"))))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    Endpoint {
        base,
        keys,
        handshakes,
    }
}

/// A client configuration trusting `pki`'s CA only.
fn trusting(pki: &Pki) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap())
        .unwrap();
    rustls::ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// Over TLS with the CA trusted: every message posted once with its id as `Idempotency-Key`,
/// all marked sent.
#[tokio::test]
async fn https_posts_reach_an_endpoint_whose_ca_is_trusted() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let pki = Pki::generate();
    let endpoint = endpoint(&pki).await;
    let messages: Vec<_> = (0..3)
        .map(|n| message(&format!("S{n}"), "/grants"))
        .collect();
    enqueue_committed(&outbox, &messages).await;
    let target = HttpTarget::new(&endpoint.base).with_tls_config(trusting(&pki));
    let round = Relay::new(outbox.clone(), target).drain().await.unwrap();
    assert_eq!((round.claimed, round.sent), (3, 3), "{round:?}");
    let mut keys = endpoint.keys.lock().unwrap().clone();
    keys.sort();
    let mut ids: Vec<String> = messages.iter().map(|m| m.id.clone()).collect();
    ids.sort();
    assert_eq!(keys, ids);
    assert!(endpoint.handshakes.load(Ordering::SeqCst) >= 1);
    assert_eq!(outbox.counts().await.unwrap().sent, 3);
}

/// With Mozilla's roots only, the test CA is not trusted: the handshake fails, the message is
/// given back uncounted, and the endpoint sees no request.
#[tokio::test]
async fn an_untrusted_certificate_gives_the_message_back_uncounted() {
    let Some(outbox) = fresh_outbox().await else {
        return;
    };
    let pki = Pki::generate();
    let endpoint = endpoint(&pki).await;
    enqueue_committed(&outbox, &[message("untrusted", "/grants")]).await;
    let relay = Relay::new(outbox.clone(), HttpTarget::new(&endpoint.base)).with_max_attempts(1);
    let round = relay.deliver_due().await.unwrap();
    assert_eq!(
        (round.claimed, round.unreachable, round.refused, round.dead),
        (1, 1, 0, 0),
        "{round:?}"
    );
    assert!(
        endpoint.keys.lock().unwrap().is_empty(),
        "no request got through"
    );
    assert_eq!(endpoint.handshakes.load(Ordering::SeqCst), 0);
    let counts = outbox.counts().await.unwrap();
    assert_eq!((counts.pending, counts.dead), (1, 0));
}
