//! Scopes: where a key lives, and the hashed key a store sees.

use std::fmt;

use crate::IdempotencyKey;
use crate::framing::FramedHasher;

/// Which kind of front end a record belongs to.
///
/// The mechanism is part of the stored key, so records written by different mechanisms never
/// answer for each other, even in one namespace of one table: an HTTP response is never replayed
/// to a function, nor a function's value to a consumer, nor a layer's claim mistaken for a
/// transaction's. Each record says which mechanism wrote it ([`Record::mechanism`](crate::Record::mechanism)).
///
/// How a key becomes a storage key is versioned (the key derivation, which each record names:
/// [`Record::key_derivation`](crate::Record::key_derivation)):
///
/// | version | keys |
/// |---|---|
/// | 1 | every mechanism keyed as a request, as release 0.1 did |
/// | 2 | functions and transactions keyed by their mechanism; consumers as requests in their fast tier, as transactions in their SQL truth |
/// | 3 | consumers keyed as messages in both tiers |
///
/// After an upgrade that changed a derivation, nodes with previous keys read
/// ([`Idempotency::with_previous_keys`](crate::Idempotency::with_previous_keys), the SQL
/// stores' `with_previous_keys`) claim the previous derivation's key first and then their own,
/// for one TTL: a retry in flight during the rolling deploy, or a record the previous release
/// completed, is then never run a second time. Only the previous derivation is read: upgrade
/// one release at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mechanism {
    /// HTTP and gRPC requests (the layer and transactional HTTP) and direct engine calls
    /// ([`Scope::storage_key`]).
    Request,
    /// `#[idempotent]` functions and `Call`s (crate `idempotency-function`), transactional ones
    /// included.
    Function,
    /// Claims taken by hand in a transaction (`idempotency_sql::TxStore::claim_in_tx`).
    Transaction,
    /// Queue consumers' records, in both tiers (the fast tier's, through
    /// [`Idempotency::claim_key`](crate::Idempotency::claim_key), and the SQL truth's, through
    /// `idempotency_sql::TxStore::claim_key_in_tx`): one message has one storage key in
    /// both, so the two records of a message are found, and joined, by it. Key derivation 2
    /// keyed consumers as requests in their fast tier and as transactions in their truth:
    /// read with previous keys on ([`Idempotency::with_previous_keys`](crate::Idempotency::with_previous_keys)
    /// on the fast tier's engine, `with_previous_keys` on the truth's SQL store) for one TTL
    /// after the upgrade, so that a redelivery during the rolling deploy is still a duplicate.
    Message,
}

impl Mechanism {
    /// Every mechanism.
    pub const ALL: [Self; 4] = [
        Self::Request,
        Self::Function,
        Self::Transaction,
        Self::Message,
    ];

    /// `"request"`, `"function"`, `"transaction"` or `"message"`: its name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Function => "function",
            Self::Transaction => "transaction",
            Self::Message => "message",
        }
    }

    /// Parses [`Mechanism::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|mechanism| mechanism.as_str() == text)
    }

    /// The domain tag hashed in front of the key: short, so that a short namespace and a UUID
    /// key hash in one BLAKE3 block (64 bytes with their length bytes). `Request` keeps the
    /// tag records had before mechanisms were told apart.
    fn tag(self) -> &'static [u8] {
        match self {
            Self::Request => b"record",
            Self::Function => b"function",
            Self::Transaction => b"transaction",
            Self::Message => b"message",
        }
    }
}

/// Where a key is valid: a namespace (an endpoint, a consumer, a function) and an optional
/// principal (tenant, user, API client).
///
/// Two scopes never share records: the [`StorageKey`] is a hash of all three parts, so one tenant
/// can never receive another tenant's stored response, whatever key it sends, and the store never
/// sees a raw key or principal.
///
/// ```
/// use idempotency_core::{IdempotencyKey, Scope};
///
/// let key = IdempotencyKey::parse("k1").unwrap();
/// let a = Scope::new("orders").with_principal("tenant-a").storage_key(&key);
/// let b = Scope::new("orders").with_principal("tenant-b").storage_key(&key);
/// assert_ne!(a, b);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scope {
    namespace: String,
    principal: Option<String>,
}

impl Scope {
    /// A scope for `namespace` with no principal.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            principal: None,
        }
    }

    /// The same namespace, restricted to one principal (tenant, user, client id).
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// The namespace, stored in the clear for reconciliation.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The principal, if any (never stored in the clear).
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The hashed key under which a store keeps the record of a request (HTTP, gRPC, a direct
    /// engine call) for `key` in this scope: [`Mechanism::Request`].
    pub fn storage_key(&self, key: &IdempotencyKey) -> StorageKey {
        self.storage_key_for(Mechanism::Request, key.as_str())
    }

    /// The hashed key under which a store keeps the record of `mechanism` for `key` in this
    /// scope. Any text is a key here (only front ends that read keys from requests validate
    /// them as [`IdempotencyKey`]s).
    pub fn storage_key_for(&self, mechanism: Mechanism, key: &str) -> StorageKey {
        self.hash(mechanism.tag(), key.as_bytes())
    }

    /// The hashed key for an arbitrary byte string in this scope, under a distinct domain `tag`
    /// (used for one-time tokens and other derived keys).
    pub fn derive(&self, tag: &[u8], value: &[u8]) -> StorageKey {
        self.hash(tag, value)
    }

    fn hash(&self, tag: &[u8], value: &[u8]) -> StorageKey {
        let mut hasher = FramedHasher::new();
        for part in [
            tag,
            self.namespace.as_bytes(),
            self.principal.as_deref().unwrap_or("").as_bytes(),
            value,
        ] {
            hasher.part(part);
        }
        // A principal of "" and no principal must differ.
        hasher.raw(&[u8::from(self.principal.is_some())]);
        StorageKey(hasher.finish())
    }
}

/// The BLAKE3 digest a store keys its record by.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StorageKey(pub [u8; 32]);

impl StorageKey {
    /// Lower-case hex, 64 characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses 64 hex characters.
    pub fn from_hex(text: &str) -> Option<Self> {
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(Self(bytes))
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 bits that depend on every byte of the key, for choosing shards and table slots. A
    /// digest's bytes are uniform already; a key built by hand (a counter after a common
    /// prefix, say) would otherwise share its shard and slot with every key like it.
    pub fn spread(&self) -> u64 {
        let (words, _) = self.0.as_chunks::<8>();
        let mut mixed = words.iter().fold(0u64, |mixed, word| {
            let mixed = (mixed ^ u64::from_le_bytes(*word)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            mixed ^ (mixed >> 32)
        });
        // MurmurHash3's 64-bit finalizer: every bit of the result depends on every bit above.
        mixed ^= mixed >> 33;
        mixed = mixed.wrapping_mul(0xff51_afd7_ed55_8ccd);
        mixed ^= mixed >> 33;
        mixed = mixed.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        mixed ^ (mixed >> 33)
    }
}

impl fmt::Debug for StorageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageKey({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for StorageKey {
    /// The 64 hex characters, written without an allocation (spans and events record it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut hex = [0u8; 64];
        hex::encode_to_slice(self.0, &mut hex).map_err(|_| fmt::Error)?;
        f.write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
