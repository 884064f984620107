//! Scopes: where a key lives, and the hashed key a store sees.

use std::fmt;

use crate::framing::FramedHasher;
use crate::{IdempotencyKey, Mechanism, Namespace};

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
#[derive(Clone)]
pub struct Scope {
    namespace: Namespace,
    principal: Option<String>,
}

impl Scope {
    /// A scope for requests ([`Mechanism::Request`]) in `namespace`, with no principal. A front
    /// end that claims in one namespace over and over prepares it once instead
    /// ([`Namespace::scope`]).
    pub fn new(namespace: impl Into<String>) -> Self {
        Self::for_mechanism(Mechanism::Request, namespace)
    }

    /// A scope for the front end of `mechanism` in `namespace`, with no principal.
    pub fn for_mechanism(mechanism: Mechanism, namespace: impl Into<String>) -> Self {
        Self::of(Namespace::named(mechanism, namespace.into()))
    }

    fn of(namespace: Namespace) -> Self {
        Self {
            namespace,
            principal: None,
        }
    }

    /// The same namespace, restricted to one principal (tenant, user, client id).
    pub fn with_principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
        self
    }

    /// The namespace's name, stored in the clear for reconciliation.
    pub fn namespace(&self) -> &str {
        self.namespace.as_str()
    }

    /// The namespace, with its metric keys when it was prepared ([`Namespace::scope`]).
    pub(crate) fn prepared(&self) -> &Namespace {
        &self.namespace
    }

    /// The front end whose keys the scope holds: what [`storage_key`](Self::storage_key)
    /// derives for, and what the records claimed in it say ([`Record::mechanism`](crate::Record::mechanism)).
    pub fn mechanism(&self) -> Mechanism {
        self.namespace.mechanism()
    }

    /// The principal, if any (never stored in the clear).
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The hashed key under which a store keeps the record of `key` in this scope, for its
    /// front end ([`Scope::mechanism`]).
    pub fn storage_key(&self, key: &IdempotencyKey) -> StorageKey {
        self.storage_key_for(self.mechanism(), key.as_str())
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
            self.namespace().as_bytes(),
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

impl Namespace {
    /// The scope of this namespace with no principal ([`Scope::with_principal`] adds one):
    /// what a front end claims in.
    pub fn scope(&self) -> Scope {
        Scope::of(self.clone())
    }
}

impl PartialEq for Scope {
    fn eq(&self, other: &Self) -> bool {
        self.namespace() == other.namespace()
            && self.mechanism() == other.mechanism()
            && self.principal == other.principal
    }
}

impl Eq for Scope {}

impl std::hash::Hash for Scope {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.namespace(), self.mechanism(), &self.principal).hash(state);
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("namespace", &self.namespace())
            .field("mechanism", &self.mechanism())
            .field("principal", &self.principal.as_ref().map(|_| "…"))
            .finish()
    }
}

/// The key a claim takes in its [`Scope`] ([`Idempotency::claim`](crate::Idempotency::claim)):
/// as it was sent, or already derived by the scope.
#[derive(Clone, Copy, Debug)]
pub enum ClaimKey<'a> {
    /// A key as sent: the engine derives its storage key for the scope's front end and, while
    /// previous keys are read ([`Idempotency::with_previous_keys`](crate::Idempotency::with_previous_keys)),
    /// the previous key derivation's too.
    Sent(&'a str),
    /// A key the same scope derived already ([`Scope::storage_key`]), as a front end that read
    /// and hashed it straight from a request holds it. Claimed under this key only.
    Derived(StorageKey),
}

impl<'a> From<&'a str> for ClaimKey<'a> {
    fn from(key: &'a str) -> Self {
        Self::Sent(key)
    }
}

impl<'a> From<&'a String> for ClaimKey<'a> {
    fn from(key: &'a String) -> Self {
        Self::Sent(key)
    }
}

impl<'a> From<&'a IdempotencyKey> for ClaimKey<'a> {
    fn from(key: &'a IdempotencyKey) -> Self {
        Self::Sent(key.as_str())
    }
}

impl From<StorageKey> for ClaimKey<'_> {
    fn from(key: StorageKey) -> Self {
        Self::Derived(key)
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

    /// The idempotency key to send with the foreign call `step` of the work this record guards
    /// (an HTTP `Idempotency-Key` header, gRPC `idempotency-key` metadata, a message id): 64
    /// hex characters, the same on every retry, process and takeover of the record and
    /// different for each step, so the other service deduplicates the call too. It is derived
    /// from the hashed key, never from the raw key or the principal: it tells the other service
    /// nothing, and two tenants' keys never meet there.
    ///
    /// ```
    /// use idempotency_core::{IdempotencyKey, Scope};
    ///
    /// let key = Scope::new("checkout").with_principal("shop-7").storage_key(&IdempotencyKey::parse("T1")?);
    /// let capture = key.downstream("capture");
    /// assert_eq!(capture, key.downstream("capture"));
    /// assert_ne!(capture, key.downstream("grant"));
    /// assert!(IdempotencyKey::parse(&capture).is_ok());
    /// # Ok::<(), idempotency_core::KeyError>(())
    /// ```
    pub fn downstream(&self, step: &str) -> String {
        let mut hasher = FramedHasher::new();
        for part in [&b"downstream"[..], &self.0, step.as_bytes()] {
            hasher.part(part);
        }
        hex::encode(hasher.finish())
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
