//! The hint of keys seen completed ([`CompletedKeys`]): remembered until forgotten or
//! overwritten by a key sharing its slot.
#![allow(clippy::expect_used)]

use idempotency_core::{CompletedKeys, StorageKey};

fn key(byte: u8) -> StorageKey {
    StorageKey([byte; 32])
}

/// Two keys that share a slot of the table: the second, remembered, overwrites the first.
fn sharing_a_slot(completed: &CompletedKeys) -> (StorageKey, StorageKey) {
    let counter = |n: u32| {
        let mut key = key(0);
        key.0[..4].copy_from_slice(&n.to_le_bytes());
        key
    };
    let first = counter(0);
    let second = (1..)
        .map(counter)
        .find(|other| {
            completed.remember(&first);
            completed.remember(other);
            let shares = !completed.knows(&first);
            completed.forget(other);
            shares
        })
        .expect("some counter shares the slot");
    completed.forget(&first);
    (first, second)
}

#[test]
fn a_key_is_known_once_remembered_until_forgotten() {
    let completed = CompletedKeys::new();
    assert!(!completed.knows(&key(2)));
    completed.remember(&key(2));
    assert!(completed.knows(&key(2)));
    assert!(!completed.knows(&key(4)), "another key");
    completed.forget(&key(2));
    assert!(!completed.knows(&key(2)));
}

#[test]
fn keys_sharing_a_slot_overwrite_and_do_not_forget_each_other() {
    let completed = CompletedKeys::new();
    let (first, second) = sharing_a_slot(&completed);
    completed.remember(&first);
    completed.remember(&second);
    assert!(!completed.knows(&first), "overwritten");
    assert!(completed.knows(&second));
    completed.forget(&first);
    assert!(completed.knows(&second), "another key's tag stays");
}

#[test]
fn keys_alike_but_in_their_last_byte_are_told_apart() {
    let completed = CompletedKeys::new();
    let mut counter = StorageKey([7; 32]);
    completed.remember(&counter);
    for last in 0..=u8::MAX {
        counter.0[31] = last;
        assert_eq!(completed.knows(&counter), last == 7, "last byte {last}");
    }
}

#[test]
fn an_all_zero_key_is_still_remembered() {
    let completed = CompletedKeys::new();
    let zero = StorageKey([0; 32]);
    assert!(!completed.knows(&zero));
    completed.remember(&zero);
    assert!(completed.knows(&zero));
}
