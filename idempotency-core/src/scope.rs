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
