//! Scopes and storage keys: what separates keys, and how they print and parse.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use idempotency_core::*;

#[test]
fn scopes_separate_keys() {
    let key = IdempotencyKey::parse("k").unwrap();
    let plain = Scope::new("ns").storage_key(&key);
    assert_eq!(plain, Scope::new("ns").storage_key(&key));
    assert_ne!(plain, Scope::new("ns2").storage_key(&key));
    assert_ne!(plain, Scope::new("ns").with_principal("").storage_key(&key));
    assert_ne!(
        Scope::new("ab").with_principal("c").storage_key(&key),
        Scope::new("a").with_principal("bc").storage_key(&key)
    );
    assert_eq!(StorageKey::from_hex(&plain.to_hex()), Some(plain));
    assert_eq!(plain.to_string(), plain.to_hex());
    assert_eq!(plain.to_string().len(), 64);
}

#[test]
fn mechanisms_separate_keys() {
    let scope = Scope::new("ns");
    let mechanisms = [
        Mechanism::Request,
        Mechanism::Function,
        Mechanism::Transaction,
        Mechanism::Message,
    ];
    let keys: std::collections::HashSet<StorageKey> = mechanisms
        .iter()
        .map(|mechanism| scope.storage_key_for(*mechanism, "T1"))
        .collect();
    assert_eq!(keys.len(), mechanisms.len());
    let key = IdempotencyKey::parse("T1").unwrap();
    assert_eq!(
        scope.storage_key(&key),
        scope.storage_key_for(Mechanism::Request, "T1")
    );
}

/// Stores keep records under these digests: a change here loses every record written
/// before it. Values computed apart from this crate (`scripts/digest_pins.py`).
#[test]
fn storage_keys_are_stable() {
    let key = IdempotencyKey::parse("7c9e6679-7425-40de-944b-e07fc1f90ae7").unwrap();
    assert_eq!(
        Scope::new("orders").storage_key(&key).to_hex(),
        "44e0d4ebfe53d27f68d0f6a36767df6b9c4f4f7f8145240cb4da9621b9322378"
    );
    assert_eq!(
        Scope::new("orders")
            .with_principal("tenant-7")
            .storage_key(&key)
            .to_hex(),
        "b6f31a36d9e5bf57e333532bc164fe725043b64531eb699f77aad01be8b2341a"
    );
    let long = IdempotencyKey::parse(&"k".repeat(255)).unwrap();
    assert_eq!(
        Scope::new("n".repeat(150))
            .with_principal("")
            .storage_key(&long)
            .to_hex(),
        "82e851f0977be0ddc6ff2fe37f5fde1d6d93017085ceb45670eeb5086d7e77b0"
    );
    for (mechanism, pinned) in [
        (
            Mechanism::Function,
            "6567177c5d94f13a6485813dc70a75de23d2e1e19affff9db796041ada22403c",
        ),
        (
            Mechanism::Transaction,
            "8400254d42bedd79a66bb1e6bc430f098006681c770955ede205dd5490b72308",
        ),
        (
            Mechanism::Message,
            "7b6997be5a64632e481c737f7e3d43a557c6f8d03d0a4cdb79a276f5e3de9648",
        ),
    ] {
        assert_eq!(
            Scope::new("orders")
                .storage_key_for(mechanism, key.as_str())
                .to_hex(),
            pinned
        );
    }
    assert_eq!(
        Scope::new("tokens").derive(b"token", b"abc").to_hex(),
        "816e9645d85723b86e70f8fa20fb5551457d50362c301ec853d61a919fe3d0f5"
    );
}

#[test]
fn keys_alike_but_in_one_byte_spread_apart() {
    // Counters after a common prefix, the last byte varying: their top and bottom bits
    // (shards, slots) must differ as a random 64-bit value's would.
    let spreads: Vec<u64> = (0..=u8::MAX)
        .map(|last| {
            let mut key = [0x5a; 32];
            key[31] = last;
            StorageKey(key).spread()
        })
        .collect();
    let top: std::collections::HashSet<u64> = spreads.iter().map(|s| s >> 58).collect();
    let bottom: std::collections::HashSet<u64> = spreads.iter().map(|s| s & 0xff).collect();
    // 256 values over 64 (or 256) cells fill about 63.7 (or 162) of them at random.
    assert!(top.len() >= 58, "{} of 64 top values", top.len());
    assert!(bottom.len() >= 140, "{} of 256 bottom values", bottom.len());
}
