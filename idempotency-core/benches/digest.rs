//! The digests a request costs: a storage key and a fingerprint, against SHA-256 (what they
//! were hashed with before) and raw BLAKE3 of the same framed bytes, in one run.
//!
//! ```text
//! cargo bench -p idempotency-core --bench digest
//! ```
//!
//! The ratio lines compare each digest with SHA-256 of its bytes (the cost before) and with
//! one raw `blake3::hash` of them (what the framing adds). SHA-256 runs in software on CPUs
//! without SHA extensions (`grep -c sha_ni /proc/cpuinfo` prints 0): there it is several times
//! slower than BLAKE3; with them, the two are close.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use idempotency_core::{Fingerprint, IdempotencyKey, Scope};
use sha2::{Digest, Sha256};

/// The LEB128-framed bytes of `parts`, as the crate hashes them.
fn framed(parts: &[&[u8]], tail: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts {
        let mut length = part.len();
        while length >= 0x80 {
            out.push((length as u8 & 0x7f) | 0x80);
            length >>= 7;
        }
        out.push(length as u8);
        out.extend_from_slice(part);
    }
    out.extend_from_slice(tail);
    out
}

/// A digest measured: its name, the bytes it hashes, and one call of it.
type Row<'a> = (&'a str, &'a [u8], &'a dyn Fn());

/// Nanoseconds per call of `f`, the best of 5 rounds of 200 000 calls (1 000 in a smoke run).
fn per_call(mut f: impl FnMut()) -> f64 {
    // `cargo bench` passes `--bench`; under `cargo test --benches` (a debug build) this is a
    // smoke run.
    let calls = if std::env::args().any(|arg| arg == "--bench") {
        200_000
    } else {
        1_000
    };
    (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(calls)
        })
        .fold(f64::INFINITY, f64::min)
}

fn digests(c: &mut Criterion) {
    let scope = Scope::new("payments.orders");
    let key = IdempotencyKey::parse("7c9e6679-7425-40de-944b-e07fc1f90ae7").unwrap();
    let body = br#"{"user_id": 7, "amount_cents": 1299}"#;
    let large = vec![b'x'; 2_000];
    let key_bytes = framed(
        &[b"record", b"payments.orders", b"", key.as_str().as_bytes()],
        &[0],
    );
    let request_bytes = |body: &[u8]| {
        framed(
            &[b"method", b"POST", b"target", b"/orders", b"body", body],
            &[],
        )
    };
    let (small_bytes, large_bytes) = (request_bytes(body), request_bytes(&large));
    assert_eq!(
        scope.storage_key(&key).0,
        *blake3::hash(&key_bytes).as_bytes()
    );
    assert_eq!(
        Fingerprint::of_request("POST", "/orders", body).0,
        *blake3::hash(&small_bytes).as_bytes()
    );

    println!(
        "{:<34} {:>9} {:>13} {:>13}",
        "digest", "ns", "vs SHA-256", "vs raw BLAKE3"
    );
    let rows: [Row; 3] = [
        ("storage key (UUID key)", &key_bytes, &|| {
            black_box(scope.storage_key(black_box(&key)));
        }),
        ("fingerprint (37-byte JSON body)", &small_bytes, &|| {
            black_box(Fingerprint::of_request("POST", "/orders", black_box(body)));
        }),
        ("fingerprint (2 000-byte body)", &large_bytes, &|| {
            black_box(Fingerprint::of_request(
                "POST",
                "/orders",
                black_box(&large),
            ));
        }),
    ];
    for (name, bytes, digest) in rows {
        let ours = per_call(digest);
        let sha = per_call(|| {
            black_box(Sha256::digest(black_box(bytes)));
        });
        let raw = per_call(|| {
            black_box(blake3::hash(black_box(bytes)));
        });
        println!(
            "{name:<34} {ours:>9.1} {:>13.2} {:>13.2}",
            ours / sha,
            ours / raw
        );
    }

    let mut group = c.benchmark_group("digest");
    group.bench_function("storage_key", |b| {
        b.iter(|| scope.storage_key(black_box(&key)))
    });
    group.bench_function("fingerprint_small_body", |b| {
        b.iter(|| Fingerprint::of_request("POST", "/orders", black_box(body)))
    });
    group.bench_function("sha256_small_body_bytes", |b| {
        b.iter(|| Sha256::digest(black_box(&small_bytes)))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = digests
}
criterion_main!(benches);
