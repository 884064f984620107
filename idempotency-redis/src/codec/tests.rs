//! The record codec's tests: layouts, round trips and refusals of malformed records.

#![allow(clippy::unwrap_used)]

use super::*;

fn packed(state: u8, namespace: &str, body: &[u8]) -> Vec<u8> {
    let mut record = vec![state];
    record.extend_from_slice(&[7; 32]);
    record.extend_from_slice(&42u64.to_be_bytes());
    record.extend_from_slice(&2u32.to_be_bytes());
    for millis in [1_000u64, 2_000, 3_000, 4_000] {
        record.extend_from_slice(&millis.to_be_bytes());
    }
    record.extend_from_slice(&201u16.to_be_bytes());
    record.extend_from_slice(&(namespace.len() as u16).to_be_bytes());
    record.extend_from_slice(namespace.as_bytes());
    record.extend_from_slice(body);
    record
}

#[test]
fn decodes_a_conflict_mark_and_records_without_one_as_before() {
    let key = StorageKey([1; 32]);
    let plain = packed(b'c', "ns", b"body");
    let mut marked = plain[..79].to_vec();
    marked.extend_from_slice(&(2u16 | MARKED).to_be_bytes());
    marked.extend_from_slice(b"ns");
    marked.extend_from_slice(&3u32.to_be_bytes());
    marked.extend_from_slice(&5_000u64.to_be_bytes());
    marked.extend_from_slice(b"body");
    let plain = record(&key, Some(plain)).unwrap().unwrap();
    assert_eq!((plain.conflicts, plain.last_conflict_at), (0, None));
    let with_mark = record(&key, Some(marked.clone())).unwrap().unwrap();
    assert_eq!(with_mark.conflicts, 3);
    assert_eq!(with_mark.last_conflict_at, Some(from_unix_millis(5_000)));
    let unmarked = Record {
        conflicts: 0,
        last_conflict_at: None,
        ..with_mark
    };
    assert_eq!(unmarked, plain);
    let replay = Value::Array(vec![Value::Int(3), Value::BulkString(marked)]);
    assert_eq!(
        claim_reply(replay).unwrap(),
        Claim::Completed(Outcome::new(201, "body"))
    );
}

#[test]
fn decodes_claim_replies() {
    let acquired = Value::Array(vec![
        Value::Int(1),
        Value::Int(7),
        Value::Int(2),
        Value::Int(1),
    ]);
    assert_eq!(
        claim_reply(acquired).unwrap(),
        Claim::Acquired(Lease {
            token: FencingToken::new(7),
            attempt: 2,
            took_over: true
        })
    );
    let replay = Value::Array(vec![
        Value::Int(3),
        Value::BulkString(packed(b'c', "ns", &[0, 255])),
    ]);
    assert_eq!(
        claim_reply(replay).unwrap(),
        Claim::Completed(Outcome::new(201, vec![0u8, 255]))
    );
    assert_eq!(
        claim_reply(Value::Array(vec![Value::Int(4)])).unwrap(),
        Claim::Mismatch
    );
    assert!(matches!(
        claim_reply(Value::Array(vec![Value::Int(9)])),
        Err(StoreError::Codec(_))
    ));
}

#[test]
fn decodes_records() {
    let key = StorageKey([1; 32]);
    assert_eq!(record(&key, None).unwrap(), None);
    let completed = record(&key, Some(packed(b'c', "orders", b"ok")))
        .unwrap()
        .unwrap();
    assert_eq!(completed.namespace, "orders");
    assert_eq!(completed.token, FencingToken::new(42));
    assert_eq!(completed.attempts, 2);
    assert_eq!(completed.fingerprint, Fingerprint([7; 32]));
    assert_eq!(completed.expires_at, from_unix_millis(3_000));
    assert_eq!(completed.completed_at, Some(from_unix_millis(4_000)));
    assert_eq!(completed.outcome, Some(Outcome::new(201, "ok")));
    let in_progress = record(&key, Some(packed(b'p', "orders", b"")))
        .unwrap()
        .unwrap();
    assert_eq!(in_progress.outcome, None);
    assert_eq!(in_progress.completed_at, None);
    assert!(matches!(
        record(&key, Some(packed(b'x', "", b""))),
        Err(StoreError::Codec(_))
    ));
    assert!(matches!(
        record(&key, Some(vec![b'c'; 10])),
        Err(StoreError::Codec(_))
    ));
}

#[test]
fn the_native_claim_writes_what_the_decoder_reads() {
    let key = StorageKey([1; 32]);
    let fp = Fingerprint([9; 32]);
    let orders = Written {
        namespace: "orders",
        mechanism: Some(Mechanism::Function),
        key_derivation: Some(2),
    };
    let written = in_progress(&fp, 77, 5_000, 300, 60_000, orders);
    assert_eq!(written.len(), HEADER + "orders".len() + 3);
    assert_eq!(
        written[UPDATED..],
        in_progress_tail(5_000, 300, 60_000, orders)[..]
    );
    let record = record(&key, Some(written)).unwrap().unwrap();
    assert_eq!(record.state, RecordState::InProgress);
    assert_eq!(record.fingerprint, fp);
    assert_eq!(record.token, FencingToken::new(77));
    assert_eq!(record.attempts, 1);
    assert_eq!(record.created_at, from_unix_millis(5_000));
    assert_eq!(record.updated_at, from_unix_millis(5_000));
    assert_eq!(record.expires_at, from_unix_millis(5_300));
    assert_eq!(record.completed_at, None);
    assert_eq!(record.namespace, "orders");
    assert_eq!(record.mechanism, Some(Mechanism::Function));
    assert_eq!(record.key_derivation, Some(2));
    // A record written before records said what wrote them reads as unknown.
    let older = Written {
        namespace: "orders",
        mechanism: None,
        key_derivation: None,
    };
    let read = super::record(&key, Some(in_progress(&fp, 77, 5_000, 300, 60_000, older)))
        .unwrap()
        .unwrap();
    assert_eq!(
        (read.namespace.as_str(), read.mechanism, read.key_derivation),
        ("orders", None, None)
    );
    // The body of a completed record starts after the trailer, for a reader of either kind.
    let completed = completed_from(
        &in_progress(&fp, 77, 5_000, 300, 60_000, orders),
        &completed_fields(6_000, 1_000, 200),
        b"body",
    );
    let read = super::record(&key, Some(completed)).unwrap().unwrap();
    assert_eq!(read.outcome, Some(Outcome::new(200, "body")));
    assert_eq!(read.mechanism, Some(Mechanism::Function));
    assert_eq!(read.namespace, "orders");
}

#[test]
fn an_existing_record_is_answered_from_its_bytes_or_sent_to_the_script() {
    let (fp, other) = (Fingerprint([7; 32]), Fingerprint([8; 32]));
    let completed = packed(b'c', "ns", b"body");
    assert_eq!(
        existing(completed.clone(), &fp, u64::MAX / 2, 1_000).unwrap(),
        Existing::Decided(Claim::Completed(Outcome::new(201, "body"))),
        "a completed record needs no clock"
    );
    assert_eq!(
        existing(completed, &other, 0, 1_000).unwrap(),
        Existing::Decided(Claim::Mismatch)
    );
    // In progress, lease end (offset 61) at 3_000 ms.
    let live = packed(b'p', "ns", b"");
    assert_eq!(
        existing(live.clone(), &fp, 1_000, 1_000).unwrap(),
        Existing::Decided(Claim::InProgress {
            lease_remaining: Duration::from_millis(2_000)
        })
    );
    assert_eq!(
        existing(live.clone(), &other, 1_000, 1_000).unwrap(),
        Existing::Decided(Claim::Mismatch)
    );
    for now in [2_000, 2_500, 3_000, 9_000] {
        assert_eq!(
            existing(live.clone(), &fp, now, 1_000).unwrap(),
            Existing::LeaseEnding,
            "within the margin of its end or past it, the server decides ({now})"
        );
        assert_eq!(
            existing(live.clone(), &other, now, 1_000).unwrap(),
            Existing::LeaseEnding,
            "an ended lease is taken over whatever its fingerprint ({now})"
        );
    }
    assert!(matches!(
        existing(packed(b'x', "", b""), &fp, 0, 0),
        Err(StoreError::Codec(_))
    ));
    assert!(matches!(
        existing(vec![b'p'; 40], &fp, 0, 0),
        Err(StoreError::Codec(_))
    ));
}

#[test]
fn step_fields_are_packed_big_endian() {
    let fields = completed_fields(1_000, 500, 201);
    assert_eq!(u64_at(&fields, 0), 1_000);
    assert_eq!(u64_at(&fields, 8), 1_500);
    assert_eq!(u64_at(&fields, 16), 1_000);
    assert_eq!(u16_at(&fields, 24), 201);
    let fields = lease_fields(1_000, 300, 60_000);
    assert_eq!(
        (u64_at(&fields, 0), u64_at(&fields, 8), u64_at(&fields, 16)),
        (1_000, 1_300, 60_000)
    );
}
#[test]
fn the_completed_record_keeps_the_header_and_namespace() {
    let mut in_progress = vec![b'p'];
    in_progress.extend((1..HEADER - 2).map(|i| i as u8));
    in_progress.extend_from_slice(&[0, 2, b'n', b's']);
    let record = completed_from(&in_progress, &[0xee; 26], b"body");
    assert_eq!(record[0], b'c');
    assert_eq!(record[1..53], in_progress[1..53]);
    assert!(record[53..79].iter().all(|byte| *byte == 0xee));
    assert_eq!(&record[79..], &[0, 2, b'n', b's', b'b', b'o', b'd', b'y']);
}

#[test]
fn a_renewed_record_differs_in_its_lease_fields_only() {
    let ns = Written {
        namespace: "ns",
        mechanism: None,
        key_derivation: None,
    };
    let in_progress = in_progress(&Fingerprint([7; 32]), 42, 1_000, 500, 60_000, ns);
    let renewed = renewed(&in_progress, &lease_fields(2_000, 500, 60_000));
    assert_eq!(renewed.len(), in_progress.len());
    assert_eq!(renewed[..UPDATED], in_progress[..UPDATED]);
    assert_eq!(renewed[UPDATED + 24..], in_progress[UPDATED + 24..]);
    assert_eq!(u64_at(&renewed, UPDATED), 2_000);
    assert_eq!(u64_at(&renewed, 61), 2_500);
}
