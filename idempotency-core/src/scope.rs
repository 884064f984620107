//! Scopes: where a key lives, and the hashed key a store sees.

use std::fmt;

use crate::IdempotencyKey;
use crate::framing::FramedHasher;

/// The domain tag of [`Scope::storage_key`]: short, so that a short namespace and a UUID key
/// hash in one SHA-256 block (55 bytes with their length bytes).
pub(crate) const RECORD_TAG: &[u8] = b"record";

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

    /// The hashed key under which a store keeps the record for `key` in this scope.
    pub fn storage_key(&self, key: &IdempotencyKey) -> StorageKey {
        self.hash(RECORD_TAG, key.as_str().as_bytes())
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

/// The SHA-256 digest a store keys its record by.
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
}

impl fmt::Debug for StorageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageKey({})", &self.to_hex()[..16])
    }
}

impl fmt::Display for StorageKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
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
    }

    /// Stores keep records under these digests: a change here loses every record written
    /// before it.
    #[test]
    fn storage_keys_are_stable() {
        let key = IdempotencyKey::parse("7c9e6679-7425-40de-944b-e07fc1f90ae7").unwrap();
        assert_eq!(
            Scope::new("orders").storage_key(&key).to_hex(),
            "54811cb0721df5243a406387711d3275bd4dcf794ce6a1092a66ea94a124cd86"
        );
        assert_eq!(
            Scope::new("orders")
                .with_principal("tenant-7")
                .storage_key(&key)
                .to_hex(),
            "d9e1307f709999fab613fb0d3cfa309a9270dc1acfc3519fc139a13cd19df742"
        );
        let long = IdempotencyKey::parse(&"k".repeat(255)).unwrap();
        assert_eq!(
            Scope::new("n".repeat(150))
                .with_principal("")
                .storage_key(&long)
                .to_hex(),
            "912ae9c5b4d12919301bab14e58ca616fdb630356586a2981eb16a95388bc66d"
        );
        assert_eq!(
            Scope::new("tokens").derive(b"token", b"abc").to_hex(),
            "420b2dd55c8eda5278d6db334544d63c0692b607f0b8dae5999e70f0d9977e41"
        );
    }
}
